//go:build !tyr_broken_passthrough

package sim_test

// brokenPassThrough is false in every real build; see
// passthrough_on_test.go.
const brokenPassThrough = false
