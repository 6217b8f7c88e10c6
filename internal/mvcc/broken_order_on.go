//go:build tyr_broken_unordered

package mvcc

// BreakOrder deliberately breaks the ordering of queued commits (see
// order.go): p is Ready at once and its Rebase does nothing, so a commit
// queued behind others applies as soon as its chain commits it, before the
// commits of lower versions ahead of it, on the blob as it was when staged,
// and one of the two undoes what the other wrote. It exists only in
// binaries built with the tyr_broken_unordered tag, to show that the
// simulator's checkers catch the anomalies this lets through (internal/sim
// TestSimCatchesUnordered); the simulator calls it on every commit it
// stages.
func BreakOrder(p *Pending) { p.rebased = true }
