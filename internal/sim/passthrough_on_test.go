//go:build tyr_broken_passthrough

package sim_test

// brokenPassThrough reports that this test binary was built with the
// tyr_broken_passthrough tag, whose chain tails commit what passes through
// them (see chain's brokenPassThrough): only TestSimCatchesPassThrough
// means anything in it.
const brokenPassThrough = true
