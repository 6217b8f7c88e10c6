//go:build tyr_broken_nobase

package sim_test

// brokenNoBase reports that this test binary was built with the
// tyr_broken_nobase tag (see internal/mvcc/broken_nobase_on.go).
const brokenNoBase = true
