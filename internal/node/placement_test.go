package node

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/mvcc"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/txn"
)

// TestPlan: the chunks a commit changes, as a coordinator plans them from
// the sizes it knows, for each kind of op and a sequence of them.
func TestPlan(t *testing.T) {
	const cs = 4096
	data := func(n int) []byte { return make([]byte, n) }
	for _, tc := range []struct {
		name  string
		ops   []txn.Op
		sizes map[string]uint64
		want  mvcc.Touched
	}{
		{"write inside", []txn.Op{{Key: "a", Kind: txn.OpWrite, Offset: 5000, Data: data(10)}}, map[string]uint64{"a": 3 * cs},
			mvcc.Touched{Written: []uint64{1}}},
		{"write past the end", []txn.Op{{Key: "a", Kind: txn.OpWrite, Offset: 5 * cs, Data: data(10)}}, map[string]uint64{"a": cs + 1},
			mvcc.Touched{Written: []uint64{5}, Lo: cs + 1, Hi: 5*cs + 10}},
		{"append across a chunk", []txn.Op{{Key: "a", Kind: txn.OpAppend, Data: data(100)}}, map[string]uint64{"a": cs - 50},
			mvcc.Touched{Written: []uint64{0, 1}, Lo: cs - 50, Hi: cs + 50}},
		{"shrink then regrow", []txn.Op{{Key: "a", Kind: txn.OpTruncate, Size: 0}, {Key: "a", Kind: txn.OpTruncate, Size: 2 * cs}},
			map[string]uint64{"a": 2 * cs}, mvcc.Touched{Written: []uint64{}, Lo: 0, Hi: 2 * cs}},
		{"delete", []txn.Op{{Key: "a", Kind: txn.OpDelete}}, map[string]uint64{"a": 3 * cs},
			mvcc.Touched{Written: []uint64{}, Lo: 0, Hi: 3 * cs}},
		{"unknown size: from zero", []txn.Op{{Key: "a", Kind: txn.OpAppend, Data: data(10)}}, nil,
			mvcc.Touched{Written: []uint64{0}, Lo: 0, Hi: 10}},
	} {
		got := plan(tc.ops, tc.sizes, cs)["a"]
		if !slices.Equal(got.Written, tc.want.Written) || got.Lo != tc.want.Lo || got.Hi != tc.want.Hi {
			t.Errorf("%s: plan %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if got := plan([]txn.Op{{Key: "r", Kind: txn.OpReadCheck, Version: 3}}, nil, cs); len(got) != 0 {
		t.Errorf("a read check changes nothing; plan %v", got)
	}
}

// TestReplanRoundTrip: a first version manager's refusal carries the sizes
// it found to the coordinator, keys of any bytes included.
func TestReplanRoundTrip(t *testing.T) {
	sizes := map[string]uint64{"a": 7, "x: \"y\"\n": 1 << 40}
	text := (&replanError{Sizes: sizes, why: "short"}).Error()
	got, ok := decodeReplan(text)
	if !ok || len(got) != 2 || got["a"] != 7 || got["x: \"y\"\n"] != 1<<40 {
		t.Fatalf("decodeReplan(%q) = %v, %v", text, got, ok)
	}
	if _, ok := decodeReplan("code 10: conflict"); ok {
		t.Fatal("a code refusal decoded as a replan")
	}
	if r := decodeRefusal(text); r.locked || r.floor != 0 {
		t.Fatalf("a replan refusal decoded as retryable as it is: %+v", r)
	}
}

// TestChainOrder: a commit's chain runs through the version managers
// before any holder, even when a version manager is catching up, so the
// backward pass commits on the holders before on any version manager; and
// a re-execution must keep a holder of every chunk written.
func TestChainOrder(t *testing.T) {
	tc := startClusterRF(t, 4, 2, 0, 1)
	tc.waitCaughtUp(t, 10*time.Second)
	pl, err := tc.nodes[0].Placement(testKeyspace, 2)
	if err != nil {
		t.Fatal(err)
	}
	const cs = 4 << 10
	ops := []txn.Op{{Key: "k", Kind: txn.OpWrite, Data: make([]byte, 6*cs), Create: true}}
	vms, err := pl.replicas("k", 0)
	if err != nil {
		t.Fatal(err)
	}
	// The coordinator: a node that manages nothing of k (its own state is
	// not the gossiped one the test sets).
	var n *Node
	for _, m := range tc.nodes {
		if !slices.Contains(vms, m.self) {
			n = m
		}
	}
	for _, slow := range []int{0, 1} {
		tc.catchingUp.Store(vms[slow], true)
		chain, keep, err := n.Chain(testKeyspace, 2, ops, nil, nil)
		tc.catchingUp.Delete(vms[slow])
		if err != nil {
			t.Fatal(err)
		}
		// A re-execution keeps a version manager, and a holder of each
		// chunk written: the groups are the replicas of chunks 0 to 5.
		var groups [][]ring.NodeID
		for c := range uint64(6) {
			reps, err := pl.replicas("k", c)
			if err != nil {
				t.Fatal(err)
			}
			groups = append(groups, slices.Sorted(slices.Values(reps)))
		}
		slices.SortFunc(groups, slices.Compare)
		if groups = slices.CompactFunc(groups, slices.Equal); !slices.EqualFunc(keep, groups, slices.Equal) {
			t.Fatalf("groups to keep %v, want the replicas of each chunk %v", keep, groups)
		}
		want := []ring.NodeID{vms[1-slow], vms[slow]}
		if len(chain) < 3 || !slices.Equal(chain[:2], want) {
			t.Fatalf("chain %v with %s catching up: want the version managers %v first", chain, vms[slow], want)
		}
		for _, id := range chain[2:] {
			if slices.Contains(vms, id) {
				t.Fatalf("chain %v lists a version manager among the holders", chain)
			}
		}
	}
}

// TestUnkept checks both branches of the rule a member behind follows
// before it lets a commit pass through (Node.unkept): for a chunk it
// serves, the tail must hold that chunk; for a chunk it only gains in a
// ring move, another member of the chain that holds it and is not
// catching up is enough.
func TestUnkept(t *testing.T) {
	r, w := testRing(t, 1, "a", "b", "c"), testRing(t, 2, "a", "b", "c", "d")
	const seed, rf, cs = 7, 2, 4 << 10
	// A key whose one chunk d gains in the move from r to w.
	key, serving, _ := gainedKey(r, w, seed, rf, "d")
	gaining := []ring.NodeID{"d"}
	var outside ring.NodeID // a member of r holding nothing of key
	for _, id := range []ring.NodeID{"a", "b", "c"} {
		if !slices.Contains(serving, id) {
			outside = id
		}
	}
	behind := &sync.Map{}
	member := func(self ring.NodeID, moving bool) (*Node, Placement) {
		n := &Node{self: self, cfg: Config{Cluster: fakeCluster{self: self, dead: &sync.Map{}, catchingUp: behind}}}
		pl := Placement{n: n, keyspace: testKeyspace, r: r, seed: seed, rf: rf}
		if moving {
			pl.w = w
		}
		return n, pl
	}
	ops := []txn.Op{{Key: key, Kind: txn.OpWrite, Data: []byte("x"), Create: true}}
	entry := func(chain ...ring.NodeID) versionEntry { return versionEntry{chain: chain} }

	// Served: the tail must hold the chunk.
	n, pl := member(serving[0], false)
	if err := n.unkept(pl, cs, ops, entry(serving[0], serving[1])); err != nil {
		t.Errorf("serving member, tail holds the chunk: %v", err)
	}
	if err := n.unkept(pl, cs, ops, entry(serving[0], outside)); !errors.Is(err, errCatchingUp) {
		t.Errorf("serving member, tail %s holds nothing of %q: %v, want errCatchingUp", outside, key, err)
	}
	if err := n.unkept(pl, cs, ops, versionEntry{}); !errors.Is(err, errCatchingUp) {
		t.Errorf("no chain named: %v, want errCatchingUp", err)
	}
	if err := n.unkept(pl, cs, ops, entry(outside, serving[0])); err != nil {
		t.Errorf("the member is the tail (the chain refuses): %v", err)
	}

	// Gained: another in-step holder in the chain is enough, wherever it is.
	n, pl = member(gaining[0], true)
	if err := n.unkept(pl, cs, ops, entry(serving[0], gaining[0], outside)); err != nil {
		t.Errorf("gaining member, %s holds the chunk in step: %v", serving[0], err)
	}
	behind.Store(serving[0], true)
	if err := n.unkept(pl, cs, ops, entry(serving[0], gaining[0], outside)); !errors.Is(err, errCatchingUp) {
		t.Errorf("gaining member, the only other holder catching up: %v, want errCatchingUp", err)
	}
	behind.Delete(serving[0])
	if err := n.unkept(pl, cs, ops, entry(gaining[0], outside)); !errors.Is(err, errCatchingUp) {
		t.Errorf("gaining member, no other holder in the chain: %v, want errCatchingUp", err)
	}
}

// TestOnlyGained: a member behind on a blob leaves it to the move's copy
// (no catch-up of its own) only while it gains the blob: it holds a part
// and serves no reads of it, before reads switch. From then on an old
// owner giving the blob up serves no reads of it either, yet catch-ups
// take its copy as up to date, so one that is behind must catch up
// (docs/bugs.md row 57).
func TestOnlyGained(t *testing.T) {
	old, next := testRing(t, 1, "a", "b", "c"), testRing(t, 2, "a", "b", "c", "d")
	const seed, rf, cs = 5, 2, 4 << 10
	key, was, now := gainedKey(old, next, seed, rf, "d")
	gone := slices.DeleteFunc(slices.Clone(was), func(id ring.NodeID) bool { return slices.Contains(now, id) })
	if len(gone) == 0 {
		t.Fatalf("%s: no old owner gives it up (%v to %v)", key, was, now)
	}
	ops := []txn.Op{{Key: key, Kind: txn.OpWrite, Data: []byte("x")}}
	for _, tc := range []struct {
		name string
		self ring.NodeID
		r, w *ring.Ring
		want bool
	}{
		{"copying, the new owner", "d", old, next, true},
		{"copying, an old owner", was[0], old, next, false},
		{"switching, the new owner", "d", next, old, false},
		{"switching, an old owner giving it up", gone[0], next, old, false},
		{"no move", was[0], next, nil, false},
	} {
		n := &Node{self: tc.self}
		pl := Placement{n: n, keyspace: testKeyspace, r: tc.r, w: tc.w, seed: seed, rf: rf}
		if got := n.onlyGained(pl, cs, ops, versionEntry{}); got != tc.want {
			t.Errorf("%s (%s, %s): onlyGained = %v, want %v", tc.name, tc.self, key, got, tc.want)
		}
	}
}

// gainedKey returns the first key k0, k1, ... whose chunk 0 node id gains
// in a move from ring r to w, with its replicas under each.
func gainedKey(r, w *ring.Ring, seed uint64, rf int, id ring.NodeID) (key string, was, now []ring.NodeID) {
	for i := 0; ; i++ {
		key = fmt.Sprintf("k%d", i)
		was, _ = r.Replicas(seed, key, 0, rf)
		now, _ = w.Replicas(seed, key, 0, rf)
		if slices.Contains(now, id) && !slices.Contains(was, id) {
			return key, was, now
		}
	}
}

// testRing returns the ring of epoch over nodes ids, of weight 1.
func testRing(t *testing.T, epoch uint64, ids ...ring.NodeID) *ring.Ring {
	t.Helper()
	var nodes []ring.Node
	for _, id := range ids {
		nodes = append(nodes, ring.Node{ID: id, Weight: 1})
	}
	r, err := ring.New(ring.Config{}, epoch, nodes)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSourceReplicas: a catch-up copies from the read replicas; while the
// new ring is being copied also from its owners apart (stale); while reads
// switch to it also from the old ring's, which still take every write;
// once writes left them, from them apart (stale).
func TestSourceReplicas(t *testing.T) {
	old, next := testRing(t, 1, "a", "b"), testRing(t, 2, "a", "b", "c")
	n := &Node{self: "c"}
	const seed, rf = 3, 1
	moved := 0
	for i := range 50 {
		key := fmt.Sprintf("k%d", i)
		was, _ := old.Replicas(seed, key, 0, rf)
		now, _ := next.Replicas(seed, key, 0, rf)
		var gone, gained []ring.NodeID
		if !slices.Equal(was, now) {
			gone, gained = was, now
			moved++
		}
		for _, tc := range []struct {
			name        string
			pl          Placement
			reps, stale []ring.NodeID
		}{
			{"copying", Placement{n: n, r: old, w: next, seed: seed, rf: rf}, was, gained},
			{"switching", Placement{n: n, r: next, w: old, seed: seed, rf: rf}, slices.Concat(now, gone), nil},
			{"active", Placement{n: n, r: next, old: old, seed: seed, rf: rf}, now, gone},
			{"clean", Placement{n: n, r: next, seed: seed, rf: rf}, now, nil},
		} {
			reps, stale, err := tc.pl.sourceReplicas(key, 0)
			if err != nil || !slices.Equal(reps, tc.reps) || !slices.Equal(stale, tc.stale) {
				t.Fatalf("%s, %s: sources %v and stale %v (%v), want %v and %v", tc.name, key, reps, stale, err, tc.reps, tc.stale)
			}
		}
	}
	if moved == 0 {
		t.Fatal("no key moved: the test checks nothing")
	}
}
