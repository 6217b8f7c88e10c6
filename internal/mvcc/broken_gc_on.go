//go:build tyr_broken_gc

package mvcc

// brokenCollectInUse deliberately breaks the version collector: it
// ignores the versions running transactions use (see uses.go) and deletes
// a superseded version once its linger time passed, while a transaction
// may still read it. It exists only in binaries built with the
// tyr_broken_gc tag, to show that the simulator's checkers catch it
// (internal/sim TestSimCatchesCollectedInUse).
const brokenCollectInUse = true
