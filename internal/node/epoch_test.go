package node

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/chain"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/keyspace"
	"github.com/tyrstore/tyr/internal/membership"
	"github.com/tyrstore/tyr/internal/mvcc"
	"github.com/tyrstore/tyr/internal/rebalance"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/storage"
	"github.com/tyrstore/tyr/internal/txn"
)

// moveNode is a node with a ring record and the state of its copy, and
// nothing running.
func moveNode(t *testing.T, rec rebalance.Record) *Node {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	eng, err := storage.Open(storage.Options{Dir: t.TempDir(), CacheBytes: 8 << 20, MemTableBytes: 1 << 20, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	if _, err := eng.Create("kss", keyspace.Config{ChunkBytes: 4 << 10, Replication: 2, MVCC: true}); err != nil {
		t.Fatal(err)
	}
	n := &Node{self: "d", cfg: Config{Log: log, Engine: eng}}
	n.catch.init()
	n.catch.active.Store(false)
	<-n.catch.wake
	n.epoch.dirty = map[blobRef]dirtyMark{}
	if err := n.setRing(rec); err != nil {
		t.Fatal(err)
	}
	return n
}

func joinRecord(t *testing.T, phase rebalance.Phase) rebalance.Record {
	t.Helper()
	first, err := rebalance.First("a", []ring.Node{{ID: "a", Weight: 1}, {ID: "b", Weight: 1}, {ID: "c", Weight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := rebalance.Propose(first, "a", append(first.New, ring.Node{ID: "d", Weight: 1}), 2)
	if err != nil {
		t.Fatal(err)
	}
	rec.Phase = phase
	return rec
}

// A commit that passes through a node for a blob it only gains is marked
// for the ring change's copy while the copy runs, and its version is
// awaited. Once the copy has ended, no copy would fetch it: the node
// catches up as a whole instead, so that it serves no read of the blob
// before it has the commit.
func TestPassThroughAfterCopyCatchesUp(t *testing.T) {
	n := moveNode(t, joinRecord(t, rebalance.PhaseCopying))
	ops := []txn.Op{{Key: "k", Kind: txn.OpWrite, Data: []byte("x")}}
	ref := blobRef{"kss", "k"}

	p := n.passThrough("kss", chain.TxnID{Coordinator: "a", Seq: 1}, ops, ops, 7, nil, true)
	if err := p.Commit(nil); err != nil {
		t.Fatal(err)
	}
	if !p.gained || n.epoch.dirty[ref].Version != 7 || n.epoch.dirty[ref].Txn != p.id || n.catch.active.Load() {
		t.Fatalf("while the copy runs: gained %v, dirty %v, catching up %v; want the copy to fetch version 7",
			p.gained, n.epoch.dirty, n.catch.active.Load())
	}
	if n.closeMove(2, false) {
		t.Fatal("the copy ended with a blob left to fetch")
	}
	delete(n.epoch.dirty, ref)
	if !n.closeMove(2, false) {
		t.Fatal("the copy did not end with nothing left to fetch")
	}

	p = n.passThrough("kss", chain.TxnID{Coordinator: "a", Seq: 2}, ops, ops, 8, nil, true)
	if p.gained || !n.catch.active.Load() || len(n.epoch.dirty) != 0 {
		t.Fatalf("after the copy: gained %v, catching up %v, move dirty %v; want a catch-up", p.gained, n.catch.active.Load(), n.epoch.dirty)
	}
	if err := p.Commit(nil); err != nil {
		t.Fatal(err)
	}
	if n.catch.dirty[ref].Version != 8 {
		t.Fatalf("catch-up marks %v, want %v at 8", n.catch.dirty, ref)
	}
}

// A commit that passed through while the copy ran, and is decided once the
// copy ended and reads switched to the node, is no copy's to fetch: the
// node catches up (docs/bugs.md row 59: the mark was taken in switching,
// with no copy left to fetch it, and the node served the blob without the
// commit).
func TestPassThroughDecidedAfterCopyCatchesUp(t *testing.T) {
	n := moveNode(t, joinRecord(t, rebalance.PhaseCopying))
	ops := []txn.Op{{Key: "k", Kind: txn.OpWrite, Data: []byte("x")}}
	ref := blobRef{"kss", "k"}
	p := n.passThrough("kss", chain.TxnID{Coordinator: "a", Seq: 1}, ops, ops, 7, nil, true)
	if !p.gained {
		t.Fatal("a pass-through while the copy runs is not left to it")
	}
	delete(n.epoch.dirty, ref) // the copy took the blob before the commit was decided
	if !n.closeMove(2, false) {
		t.Fatal("the copy did not end with nothing left to fetch")
	}
	if err := n.setRing(joinRecord(t, rebalance.PhaseSwitching)); err != nil {
		t.Fatal(err)
	}
	if n.catch.active.Load() {
		t.Fatal("catching up before the commit was decided")
	}
	if err := p.Commit(nil); err != nil {
		t.Fatal(err)
	}
	if !n.catch.active.Load() || n.catch.dirty[ref].Version != 7 || len(n.epoch.dirty) != 0 {
		t.Fatalf("decided after the copy ended: catching up %v, catch-up marks %v, move dirty %v; want a catch-up to version 7",
			n.catch.active.Load(), n.catch.dirty, n.epoch.dirty)
	}
}

// A copy that the epoch went on without hands what it had left to fetch
// to catch-up.
func TestCopyGivenUpCatchesUp(t *testing.T) {
	n := moveNode(t, joinRecord(t, rebalance.PhaseSwitching))
	n.epoch.dirty[blobRef{"kss", "k"}] = dirtyMark{Version: 5, Marks: 1}
	if !n.closeMove(2, true) {
		t.Fatal("closeMove(all) did not close")
	}
	if !n.catch.active.Load() || n.catch.dirty[blobRef{"kss", "k"}].Version != 5 || len(n.epoch.dirty) != 0 {
		t.Fatalf("catching up %v, catch-up marks %v, move dirty %v", n.catch.active.Load(), n.catch.dirty, n.epoch.dirty)
	}
}

// A node that gains ranges and has not copied them catches up before the
// record that switches reads to it takes effect: when the coordinator
// went on without its copy (it counted the node dead), and when it missed
// an epoch, then copying every chunk it holds.
func TestSkippedCopy(t *testing.T) {
	copying := joinRecord(t, rebalance.PhaseCopying)
	at := func(r rebalance.Record, p rebalance.Phase) rebalance.Record { r.Phase = p; return r }
	next := at(copying, rebalance.PhaseClean) // the next epoch, where d gains nothing
	next.Epoch++
	next.Old, next.Moves = copying.New, nil
	for _, c := range []struct {
		name      string
		cur, rec  rebalance.Record
		copied    uint64
		skip, all bool
	}{
		{"copy done", copying, at(copying, rebalance.PhaseSwitching), 2, false, false},
		{"copy skipped", copying, at(copying, rebalance.PhaseSwitching), 0, true, false},
		{"still copying", at(copying, rebalance.PhaseInstalling), copying, 0, false, false},
		{"an epoch later, copy skipped", copying, next, 0, true, true},
		{"an epoch later, copy done", copying, next, 2, false, false},
		{"two epochs later", at(copying, rebalance.PhaseClean), func() rebalance.Record { r := next; r.Epoch++; return r }(), 2, true, true},
	} {
		n := moveNode(t, c.cur)
		n.epoch.mu.copied = c.copied
		if skip, all := n.skippedCopy(c.cur, true, c.rec); skip != c.skip || all != c.all {
			t.Errorf("%s: skip %v all %v, want %v %v", c.name, skip, all, c.skip, c.all)
		}
	}

	// Installing the record marks the node catching up first.
	n := moveNode(t, copying)
	if _, err := n.installRing(at(copying, rebalance.PhaseSwitching)); err != nil {
		t.Fatal(err)
	}
	if !n.catch.active.Load() {
		t.Fatal("the node serves the ranges it gains without having copied them")
	}
}

// A node that learnt that no member has a ring record places chunks by the
// membership's ring only as long as the membership stays the one it asked
// about: once it changes (a node joins), the ring coordinator may have
// published the first epoch from the membership before, and the node asks
// the members again before it places anything.
func TestNoRecordRelearnsOnViewChange(t *testing.T) {
	view := &membership.View{}
	join := func(id ring.NodeID) {
		t.Helper()
		// Views are immutable once published: a change is a new one.
		next := &membership.View{}
		for _, m := range view.Members() {
			if _, err := next.Apply(membership.Event{Kind: membership.EventJoin, Meta: m.Meta}); err != nil {
				t.Fatal(err)
			}
		}
		view = next
		if _, err := view.Apply(membership.Event{Kind: membership.EventJoin, Meta: membership.Meta{
			ID: id, RPCAddr: "addr-" + string(id), Weight: 1, StartedUnixNano: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	join("d")
	dead := &sync.Map{}
	n := &Node{self: "d", cfg: Config{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), RingFile: t.TempDir() + "/ring.json",
		Cluster: fakeCluster{self: "d", view: view, dead: dead, catchingUp: &sync.Map{}}}}
	n.epoch.mu.known, n.epoch.mu.noRecord = true, view.RingID()
	if r, _, err := n.rings(); err != nil || r.Len() != 1 {
		t.Fatalf("rings: %v, %v; want the view's ring of one node", r, err)
	}
	dead.Store(ring.NodeID("e"), true) // no peer answers: the node learns no record exists
	join("e")
	n.cfg.Cluster = fakeCluster{self: "d", view: view, dead: dead, catchingUp: &sync.Map{}}
	if _, _, err := n.rings(); !errors.Is(err, errs.ErrUnavailable) {
		t.Fatalf("rings after a join: %v, want unavailable while the node asks again", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		r, _, err := n.rings()
		if err == nil {
			if r.Len() != 2 {
				t.Fatalf("ring of %d nodes, want 2", r.Len())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rings: %v after 5 s", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The tail of a chain refuses a commit of a blob it was given no Base of
// and does not manage: no member of the chain manages it, and the commit
// would change it nowhere (docs/bugs.md row 60: a re-execution on an old
// owner alone, after the ring change took the blob from it). A blob it
// manages is prepared. A stage whose member a re-execution made the tail
// finds the same (staged.Orphaned).
func TestTailRefusesUnmanaged(t *testing.T) {
	n := moveNode(t, joinRecord(t, rebalance.PhaseCopying))
	for _, p := range []rebalance.Phase{rebalance.PhaseSwitching, rebalance.PhaseActive} {
		if err := n.setRing(joinRecord(t, p)); err != nil {
			t.Fatal(err)
		}
	}
	n.versions = map[waiterKey]versionEntry{}
	n.cfg.Cluster = fakeCluster{self: n.self, view: &membership.View{}, dead: &sync.Map{}, catchingUp: &sync.Map{},
		said: &catchUpSays{log: map[ring.NodeID][]bool{}}}
	n.epoch.mu.Lock()
	n.epoch.mu.known = true // as once the node learned the ring
	n.epoch.mu.Unlock()
	// In step: it holds its lease and its loop ticks.
	n.leaseUntil.Store(time.Now().Add(time.Hour).UnixNano())
	n.leaseWasHeld.Store(true)
	n.lastTick.Store(time.Now().Add(time.Hour).UnixNano())
	pl, err := n.Placement("kss", 2)
	if err != nil {
		t.Fatal(err)
	}
	var managed, unmanaged string
	for i := 0; managed == "" || unmanaged == ""; i++ {
		key := fmt.Sprintf("k%d", i)
		if pl.Manages(key) {
			managed = cmp.Or(managed, key)
		} else {
			unmanaged = cmp.Or(unmanaged, key)
		}
	}
	s := stager{n: n, keyspace: "kss"}
	// chainOf is the chain of key's replicas with this node last (tail) or
	// first.
	chainOf := func(key string, tail bool) []ring.NodeID {
		reps, err := pl.writeReplicas(key, 0)
		if err != nil {
			t.Fatal(err)
		}
		others := slices.DeleteFunc(reps, func(id ring.NodeID) bool { return id == n.self })
		if tail {
			return append(others, n.self)
		}
		return append([]ring.NodeID{n.self}, others...)
	}
	for i, tc := range []struct {
		name   string
		key    string
		tail   bool
		bases  map[string]mvcc.Base
		refuse bool
	}{
		{"the tail, given no Base of a blob it does not manage", unmanaged, true, nil, true},
		{"the tail, given a Base by the blob's version manager", managed, true, map[string]mvcc.Base{managed: {}}, false},
		{"before the tail", unmanaged, false, nil, false},
	} {
		id := chain.TxnID{Coordinator: "a", Seq: uint64(i + 1)}
		n.versions[waiterKey{"kss", id}] = versionEntry{version: uint64(100 + i), chain: chainOf(tc.key, tc.tail), bases: tc.bases}
		st, err := s.prepare(id, []txn.Op{{Key: tc.key, Kind: txn.OpWrite, Data: []byte("x"), Create: true}})
		switch {
		case tc.refuse && !errors.Is(err, errCatchingUp):
			t.Fatalf("%s (%s): prepare = %v, want a refusal", tc.name, tc.key, err)
		case !tc.refuse && err != nil:
			t.Fatalf("%s (%s): %v", tc.name, tc.key, err)
		case err == nil:
			st.Abort()
		}
	}
	// A stage made earlier, whose member a re-execution made the tail,
	// asks the same (chain.Orphaning).
	for _, tc := range []struct {
		key   string
		given map[string]mvcc.Base
		want  bool
	}{{unmanaged, nil, true}, {managed, nil, false}, {unmanaged, map[string]mvcc.Base{unmanaged: {}}, false}} {
		st := staged{n: n, keyspace: "kss", rf: 2, ops: []txn.Op{{Key: tc.key, Kind: txn.OpWrite, Data: []byte("x")}}, given: tc.given}
		if got := st.Orphaned(); got != tc.want {
			t.Errorf("blob %s, given %v: Orphaned = %t, want %t", tc.key, tc.given, got, tc.want)
		}
	}
}
