//go:build tyr_broken_gc

package sim_test

// brokenGC reports that this test binary was built with the tyr_broken_gc
// tag, whose mvcc collectors delete versions running transactions use
// (see mvcc's brokenCollectInUse): only TestSimCatchesCollectedInUse means
// anything in it.
const brokenGC = true
