//go:build tyr_broken_passthrough

package chain

// brokenPassThrough deliberately breaks the tail rule of Passing: a tail
// whose Staged passes the transaction through commits it as if it had
// applied it, and so does a passing member that a re-execution makes the
// tail, instead of asking the members after it. A commit can then be
// decided while only volatile stages before the tail hold it. It exists
// only in binaries built with the tyr_broken_passthrough tag, to show that
// the simulator's checkers catch the write this loses (internal/sim
// TestSimCatchesPassThrough).
const brokenPassThrough = true
