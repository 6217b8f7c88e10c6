package ring

import (
	"fmt"
	"math/bits"
	"slices"
)

// This file holds analysis helpers: how evenly a ring spreads data, and how
// much data a membership change moves. Tests use them to check balance and
// minimal movement; operators' tooling uses them to preview a change before
// making it. They are deterministic like the rest of the package.

// Ownership returns, for every member, the fraction of the hash space for
// which it is the primary: the sum of the arcs (previous token, token] of
// its tokens, divided by 2^64. Every member appears, the fractions sum to 1
// up to rounding, and a one-node ring returns {node: 1}. With keys hashed
// uniformly, a node's fraction is its expected share of primary chunks. The
// caller owns the map.
func (r *Ring) Ownership() map[NodeID]float64 {
	// Arcs are summed exactly, as 128-bit integers (hi, lo), and converted
	// once, so each fraction is correctly rounded and a node owning the whole
	// ring gets exactly 1.
	type sum struct{ hi, lo uint64 }
	arcs := make([]sum, len(r.nodes))
	switch {
	case len(r.positions) == 0: // the zero Ring
	case r.positions[0] == r.positions[len(r.positions)-1]:
		// Every token at one position (for example a single token): the
		// first owner in token order wins every position.
		arcs[r.owners[0]] = sum{hi: 1}
	default:
		// Token i owns (positions[i-1], positions[i]]; token 0 owns the arc
		// wrapping past the top of the ring. Unsigned subtraction wraps, so
		// one expression serves both. Tokens sharing a position after the
		// first get an empty arc, matching successor.
		previous := r.positions[len(r.positions)-1]
		for i, position := range r.positions {
			a := &arcs[r.owners[i]]
			var carry uint64
			a.lo, carry = bits.Add64(a.lo, position-previous, 0)
			a.hi += carry
			previous = position
		}
	}
	const ringSize = 1 << 64 // as a float64 constant
	shares := make(map[NodeID]float64, len(r.nodes))
	for i, n := range r.nodes {
		shares[n.ID] = float64(arcs[i].hi) + float64(arcs[i].lo)/ringSize
	}
	return shares
}

// Placement names one chunk of one blob: the inputs of Position.
type Placement struct {
	// Seed is the KeyspaceSeed of the blob's keyspace.
	Seed uint64
	// Key is the blob's key.
	Key string
	// Chunk is the zero-based chunk number.
	Chunk uint64
}

// Movement counts how the placements of a sample differ between two rings.
// Fractions are 0 for an empty sample.
type Movement struct {
	// Placements is the size of the sample.
	Placements int
	// Replication is the replication factor compared.
	Replication int
	// PrimaryMoved counts placements whose primary differs.
	PrimaryMoved int
	// SetChanged counts placements whose replica set, ignoring order,
	// differs: those with at least one copy to make.
	SetChanged int
	// CopiesMoved counts replicas in the new ring on nodes that did not hold
	// the placement in the old ring: the copies a rebalance must make.
	CopiesMoved int
}

// PrimaryMovedFraction returns PrimaryMoved / Placements.
func (m Movement) PrimaryMovedFraction() float64 {
	if m.Placements == 0 {
		return 0
	}
	return float64(m.PrimaryMoved) / float64(m.Placements)
}

// CopiesMovedFraction returns the fraction of all replicas that must be
// copied: CopiesMoved / (Placements × Replication).
func (m Movement) CopiesMovedFraction() float64 {
	if m.Placements == 0 {
		return 0
	}
	return float64(m.CopiesMoved) / (float64(m.Placements) * float64(m.Replication))
}

// Compare places every member of sample on both rings with replication
// factor rf and counts the differences. It fails, wrapping the error of
// Replicas, if either ring cannot place rf replicas. With rf = 1,
// PrimaryMovedFraction is the fraction of chunks that change owner.
func Compare(from, to *Ring, sample []Placement, rf int) (Movement, error) {
	if err := from.checkReplication(rf); err != nil {
		return Movement{}, fmt.Errorf("ring: compare: from ring: %w", err)
	}
	if err := to.checkReplication(rf); err != nil {
		return Movement{}, fmt.Errorf("ring: compare: to ring: %w", err)
	}
	m := Movement{Placements: len(sample), Replication: rf}
	before := make([]NodeID, 0, rf)
	after := make([]NodeID, 0, rf)
	for _, p := range sample {
		position := Position(p.Seed, p.Key, p.Chunk)
		before = from.appendReplicas(before[:0], position, rf)
		after = to.appendReplicas(after[:0], position, rf)
		if before[0] != after[0] {
			m.PrimaryMoved++
		}
		copies := 0
		for _, id := range after {
			if !slices.Contains(before, id) {
				copies++
			}
		}
		m.CopiesMoved += copies
		if copies > 0 {
			// Both sets hold rf distinct nodes, so they differ exactly when
			// some node of after is missing from before.
			m.SetChanged++
		}
	}
	return m, nil
}

// Token is one virtual node: a position on the ring and the member that owns
// it.
type Token struct {
	// Position is the token's place on the ring, in [0, 2^64).
	Position uint64
	// Node is the member owning the token.
	Node NodeID
}

// Tokens returns every token of the ring in ring order: ascending position,
// and tokens at one position in the order the ring breaks the tie. The
// primary of a position p is the Node of the first token whose Position is
// at least p, or of the first token if there is none. Analysis tools use it
// to place many positions with one merge pass instead of a search each; it
// costs 24 bytes per token. The caller owns the slice.
func (r *Ring) Tokens() []Token {
	tokens := make([]Token, len(r.positions))
	for i, position := range r.positions {
		tokens[i] = Token{Position: position, Node: r.nodes[r.owners[i]].ID}
	}
	return tokens
}

// MovedFraction returns the fraction of the hash space, in [0, 1], whose
// primary differs between from and to: the fraction of uniformly hashed
// chunks that change primary owner when the cluster switches from one ring
// to the other. It is exact, not sampled: it walks the union of both rings'
// tokens once. When the rings differ by one node joining or leaving, it is
// that node's Ownership; MovedFraction(a, b) equals MovedFraction(b, a).
// The zero Ring owns nothing: against a ring with nodes the result is 1, and
// against another zero Ring 0.
func MovedFraction(from, to *Ring) float64 {
	switch {
	case len(from.positions) == 0 && len(to.positions) == 0:
		return 0
	case len(from.positions) == 0 || len(to.positions) == 0:
		return 1
	}
	last := max(from.positions[len(from.positions)-1], to.positions[len(to.positions)-1])
	if min(from.positions[0], to.positions[0]) == last {
		// Every token of both rings at one position: one owner each, for
		// the whole ring.
		if from.primaryID(0) != to.primaryID(0) {
			return 1
		}
		return 0
	}
	// Walk the distinct positions b of the union in order. Between b and
	// the union position before it, neither ring has a token, so every
	// position of that arc has, in each ring, the primary of b: the first
	// token at or after b. i and j always index those tokens (or the end,
	// which wraps to token 0). The arcs are summed exactly, as in
	// Ownership; the first arc wraps past the top of the ring.
	var hi, lo uint64
	previous := last
	i, j := 0, 0
	for i < len(from.positions) || j < len(to.positions) {
		b := unionNext(from.positions, to.positions, i, j)
		if from.primaryID(i) != to.primaryID(j) {
			var carry uint64
			lo, carry = bits.Add64(lo, b-previous, 0)
			hi += carry
		}
		for i < len(from.positions) && from.positions[i] == b {
			i++
		}
		for j < len(to.positions) && to.positions[j] == b {
			j++
		}
		previous = b
	}
	const ringSize = 1 << 64 // as a float64 constant
	return float64(hi) + float64(lo)/ringSize
}

// primaryID returns the owner of token i, or of token 0 if i is past the
// last token: the primary of every position in the arc ending at token i.
func (r *Ring) primaryID(i int) NodeID {
	if i == len(r.owners) {
		i = 0
	}
	return r.nodes[r.owners[i]].ID
}

// unionNext returns the smaller of a[i] and b[j], skipping a slice whose
// index has reached its end; at least one index must be in range.
func unionNext(a, b []uint64, i, j int) uint64 {
	switch {
	case i == len(a):
		return b[j]
	case j == len(b):
		return a[i]
	default:
		return min(a[i], b[j])
	}
}
