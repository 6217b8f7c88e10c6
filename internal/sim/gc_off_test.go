//go:build !tyr_broken_gc

package sim_test

// brokenGC is false in every real build; see gc_on_test.go.
const brokenGC = false
