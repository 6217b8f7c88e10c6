//go:build tyr_broken_early_send

package outbox

// brokenSendBeforeSync deliberately breaks the Outbox: Put releases every
// output at once, before the writes it follows are durable, so a member
// may tell the chain of a commit that a crash then loses. It exists only
// in binaries built with the tyr_broken_early_send tag, to show that the
// simulation's crash-faithful storage catches it (internal/sim
// TestSimCatchesEarlySend).
const brokenSendBeforeSync = true
