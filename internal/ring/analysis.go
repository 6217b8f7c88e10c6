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
