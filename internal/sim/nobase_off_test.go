//go:build !tyr_broken_nobase

package sim_test

// brokenNoBase is false in every real build; see nobase_on_test.go.
const brokenNoBase = false
