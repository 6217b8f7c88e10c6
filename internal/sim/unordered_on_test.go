//go:build tyr_broken_unordered

package sim_test

// brokenUnordered reports that this test binary was built with the
// tyr_broken_unordered tag, whose mvcc stores apply queued commits out of
// order (see mvcc.BreakOrder): only TestSimCatchesUnordered means anything
// in it.
const brokenUnordered = true
