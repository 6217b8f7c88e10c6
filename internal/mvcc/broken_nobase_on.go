//go:build tyr_broken_nobase

package mvcc

// brokenNoBase deliberately restores the rule chains had before the base
// rule (see Step.parts): every member stages every blob of a commit and
// refuses, with ErrNoBase, one it neither manages nor got a Base for, so a
// commit whose blobs have different version managers aborts whenever one
// of them is not managed by the chain's first member. It exists only in
// binaries built with the tyr_broken_nobase tag, to show that the
// simulator's progress check catches it (internal/sim
// TestSimCatchesNoBase).
const brokenNoBase = true
