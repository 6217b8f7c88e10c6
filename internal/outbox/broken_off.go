//go:build !tyr_broken_early_send

package outbox

// brokenSendBeforeSync is false in every real build; see broken_on.go.
const brokenSendBeforeSync = false
