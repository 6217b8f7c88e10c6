//go:build tyr_broken_early_send

package sim_test

// brokenEarlySend reports that this test binary was built with the
// tyr_broken_early_send tag (see internal/outbox/broken_on.go).
const brokenEarlySend = true
