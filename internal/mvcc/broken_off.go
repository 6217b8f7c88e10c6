//go:build !tyr_broken_skip_read_checks

package mvcc

// brokenSkipReadChecks is false in every real build; see broken_on.go.
const brokenSkipReadChecks = false
