//go:build !tyr_broken_passthrough

package chain

// brokenPassThrough is false in every real build; see
// broken_passthrough_on.go.
const brokenPassThrough = false
