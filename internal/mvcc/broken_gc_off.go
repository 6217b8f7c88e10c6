//go:build !tyr_broken_gc

package mvcc

// brokenCollectInUse is false in every real build; see broken_gc_on.go.
const brokenCollectInUse = false
