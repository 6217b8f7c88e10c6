//go:build !tyr_broken_unordered

package mvcc

// BreakOrder does nothing in every real build; see broken_order_on.go.
func BreakOrder(*Pending) {}
