//go:build !tyr_broken_unordered

package sim_test

// brokenUnordered is false in every real build; see unordered_on_test.go.
const brokenUnordered = false
