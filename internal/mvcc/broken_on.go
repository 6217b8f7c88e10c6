//go:build tyr_broken_skip_read_checks

package mvcc

// brokenSkipReadChecks deliberately breaks the forward-pass validation: read
// checks always pass. It exists only in binaries built with the
// tyr_broken_skip_read_checks tag, to show that the serializability checker
// catches the anomalies this lets through (tests/e2e TestCheckerCatchesSkippedValidation).
const brokenSkipReadChecks = true
