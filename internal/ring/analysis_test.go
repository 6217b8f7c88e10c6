package ring

// Tests of the analysis helpers Tokens and MovedFraction: Tokens places
// positions exactly as Replicas does, and MovedFraction is exact where the
// answer is known (identity, a join, a leave, disjoint memberships) and
// agrees with the sampled Compare elsewhere.

import (
	"cmp"
	"math"
	"slices"
	"testing"
)

// primaryByScan returns the primary of position among tokens, by the rule
// documented on Tokens, with a linear scan.
func primaryByScan(tokens []Token, position uint64) NodeID {
	for _, token := range tokens {
		if token.Position >= position {
			return token.Node
		}
	}
	return tokens[0].Node
}

func TestTokensPlaceLikeReplicas(t *testing.T) {
	rng := newRand(t)
	for range 10 {
		nodes := randomNodes(rng, 1+rng.IntN(20))
		var want int
		for i := range nodes {
			nodes[i].Weight = 1 + rng.Uint32N(4)
			want += int(nodes[i].Weight) * 8
		}
		r := mustNew(t, Config{VirtualNodesPerWeight: 8}, 1, nodes)
		tokens := r.Tokens()
		if len(tokens) != want {
			t.Fatalf("%d tokens, want %d", len(tokens), want)
		}
		if !slices.IsSortedFunc(tokens, func(a, b Token) int { return cmp.Compare(a.Position, b.Position) }) {
			t.Fatal("tokens are not in ascending position order")
		}
		positions := []uint64{0, math.MaxUint64}
		for _, token := range tokens {
			positions = append(positions, token.Position, token.Position-1, token.Position+1)
		}
		for _, p := range randomPlacements(rng, 200) {
			positions = append(positions, Position(p.Seed, p.Key, p.Chunk))
		}
		for _, position := range positions {
			got := primaryByScan(tokens, position)
			if want := r.appendReplicas(nil, position, 1)[0]; got != want {
				t.Fatalf("position %#x: Tokens give primary %q, Replicas %q", position, got, want)
			}
		}
	}
}

// TestMovedFractionExact checks the cases whose answer is known exactly: a
// ring against itself, a join (only the newcomer's arcs move), a leave, the
// reverse direction, and memberships with no node in common.
func TestMovedFractionExact(t *testing.T) {
	nodes := numberedNodes("node-", 17, 1)
	nodes[3].Weight = 3
	small := mustNew(t, Config{}, 1, nodes[:16])
	large := mustNew(t, Config{}, 2, nodes)
	if f := MovedFraction(small, small); f != 0 {
		t.Errorf("MovedFraction(r, r) = %v, want 0", f)
	}
	joined := large.Ownership()["node-16"]
	if f := MovedFraction(small, large); f != joined {
		t.Errorf("join: MovedFraction %v, newcomer owns %v; want equal", f, joined)
	}
	if f := MovedFraction(large, small); f != joined {
		t.Errorf("leave: MovedFraction %v, departed node owned %v; want equal", f, joined)
	}
	other := mustNew(t, Config{}, 3, numberedNodes("other-", 4, 1))
	if f := MovedFraction(small, other); f != 1 {
		t.Errorf("disjoint memberships: MovedFraction %v, want 1", f)
	}

	// One token each: the arc of the single position is the whole ring.
	one := Config{VirtualNodesPerWeight: 1}
	a := mustNew(t, one, 1, []Node{{ID: "a", Weight: 1}})
	b := mustNew(t, one, 1, []Node{{ID: "b", Weight: 1}})
	if f := MovedFraction(a, b); f != 1 {
		t.Errorf("one node each, different: %v, want 1", f)
	}
	if f := MovedFraction(a, a); f != 0 {
		t.Errorf("one node, same: %v, want 0", f)
	}
	if f := MovedFraction(&Ring{}, &Ring{}); f != 0 {
		t.Errorf("zero rings: %v, want 0", f)
	}
	if f := MovedFraction(&Ring{}, a); f != 1 {
		t.Errorf("zero ring to a ring: %v, want 1", f)
	}
}

// TestMovedFractionMatchesCompare changes several weights at once, up and
// down, so that arcs pass between changed nodes too, and compares the exact
// fraction with the primaries that move in a sample.
func TestMovedFractionMatchesCompare(t *testing.T) {
	rng := newRand(t)
	const samples = 20000
	sample := randomPlacements(rng, samples)
	for range 4 {
		nodes := randomNodes(rng, 4+rng.IntN(20))
		for i := range nodes {
			nodes[i].Weight = 4 + rng.Uint32N(8)
		}
		from := mustNew(t, Config{VirtualNodesPerWeight: 16}, 1, nodes)
		for i := range nodes {
			if rng.IntN(2) == 0 {
				nodes[i].Weight = 1 + rng.Uint32N(16)
			}
		}
		to := mustNew(t, Config{VirtualNodesPerWeight: 16}, 2, nodes)
		exact := MovedFraction(from, to)
		if back := MovedFraction(to, from); back != exact {
			t.Errorf("MovedFraction not symmetric: %v one way, %v the other", exact, back)
		}
		m, err := Compare(from, to, sample, 1)
		if err != nil {
			t.Fatal(err)
		}
		sampled := m.PrimaryMovedFraction()
		t.Logf("%d nodes: exact %.4f, sampled %.4f", len(nodes), exact, sampled)
		if math.Abs(sampled-exact) > moveTolerance(exact, samples) {
			t.Errorf("exact %.4f, sampled %.4f: further apart than 4 standard errors (%.4f)",
				exact, sampled, moveTolerance(exact, samples))
		}
	}
}
