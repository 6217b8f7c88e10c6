//go:build !tyr_broken_nobase

package mvcc

// brokenNoBase is false in every real build; see broken_nobase_on.go.
const brokenNoBase = false
