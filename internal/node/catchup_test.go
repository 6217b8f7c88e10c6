package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/chain"
	"github.com/tyrstore/tyr/internal/mvcc"
	"github.com/tyrstore/tyr/internal/rebalance"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/txn"
)

// restart stops node i and starts it again on its store, as a process
// restart would.
func (tc *testCluster) restart(t *testing.T, i int) {
	t.Helper()
	old := tc.nodes[i]
	old.Close()
	cfg := old.cfg
	cfg.FirstRun = false
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tc.net.mu.Lock()
	addr, _ := old.cfg.Cluster.RPCAddr(old.self)
	tc.net.nodes[addr] = n
	tc.net.mu.Unlock()
	tc.nodes[i] = n
}

// mustCommit commits ops through node 0, failing the test on error.
func (tc *testCluster) mustCommit(ctx context.Context, t *testing.T, ops ...txn.Op) {
	t.Helper()
	if _, err := tc.commit(ctx, 0, ops...); err != nil {
		t.Fatal(err)
	}
}

// waitCaughtUp waits until every node has caught up.
func (tc *testCluster) waitCaughtUp(t *testing.T, bound time.Duration) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for _, n := range tc.nodes {
		for n.CatchingUp() {
			if time.Now().After(deadline) {
				t.Fatalf("node %s still catching up after %v", n.self, bound)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// blobs returns every blob of node i: key → data@version.
func (tc *testCluster) blobs(t *testing.T, i int) map[string]string {
	t.Helper()
	ks, err := tc.engines[i].Acquire(testKeyspace)
	if err != nil {
		t.Fatal(err)
	}
	infos, _, err := ks.Store.List("", "", 1000)
	ks.Release()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, info := range infos {
		data, version := tc.read(t, i, info.Key)
		out[info.Key] = fmt.Sprintf("%s@%d", data, version)
	}
	return out
}

// A member that missed commits while it was cut off catches up when it
// is back, both when it restarts (it starts catching up) and when it never
// noticed (the first commit of a blob it missed shows it is behind), while
// commits keep coming; afterwards it holds what the others hold, version
// for version, deletes included.
func TestCatchUp(t *testing.T) {
	for _, restart := range []bool{true, false} {
		t.Run(fmt.Sprintf("restart=%t", restart), func(t *testing.T) {
			tc := startCluster(t, 3, 0, 1)
			tc.waitCaughtUp(t, 10*time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			must := func(ops ...txn.Op) { t.Helper(); tc.mustCommit(ctx, t, ops...) }
			must(appendOp("k", "a"), appendOp("gone", "x"), appendOp("same", "s"))

			tc.disconnect("n3")
			must(appendOp("k", "b"))
			must(txn.Op{Key: "gone", Kind: txn.OpDelete})
			for i := range 20 {
				must(appendOp(fmt.Sprintf("new%02d", i), "n"))
			}
			if restart {
				tc.restart(t, 2)
				if !tc.nodes[2].CatchingUp() {
					t.Fatal("a restarted node is not catching up")
				}
			}
			tc.reconnect("n3")

			// Appends go on while n3 catches up: some pass through it.
			var wg sync.WaitGroup
			for w := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 20 {
						if _, err := tc.commit(ctx, w, appendOp("k", fmt.Sprintf("<%d.%d>", w, i))); err != nil {
							t.Errorf("append during catch-up: %v", err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if restart {
				wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
				if err := tc.nodes[2].WaitCaughtUp(wctx); err != nil {
					t.Fatalf("WaitCaughtUp after the restart: %v", err)
				}
				wcancel()
			}
			// Without a restart, the appends showed n3 its copy of k was behind.
			tc.waitCaughtUp(t, 10*time.Second)
			want := tc.blobs(t, 0)
			if _, ok := want["gone"]; ok || len(want) != 22 {
				t.Fatalf("n1 holds %d blobs (%v); want 22 without gone", len(want), want)
			}
			for i := 1; i < 3; i++ {
				got := tc.blobs(t, i)
				for key, w := range want {
					if got[key] != w {
						t.Errorf("n%d: %s = %q, want %q", i+1, key, got[key], w)
					}
				}
				for key := range got {
					if _, ok := want[key]; !ok {
						t.Errorf("n%d holds %s, which n1 does not", i+1, key)
					}
				}
			}
		})
	}
}

// blobModel is what a test's committed ops leave in each blob (nil:
// absent).
type blobModel struct {
	mu    sync.Mutex
	blobs map[string][]byte
}

func (m *blobModel) apply(op txn.Op) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.blobs[op.Key]
	switch op.Kind {
	case txn.OpWrite:
		if end := int(op.Offset) + len(op.Data); end > len(b) {
			b = append(b, make([]byte, end-len(b))...)
		}
		copy(b[op.Offset:], op.Data)
	case txn.OpTruncate:
		if int(op.Size) > len(b) {
			b = append(b, make([]byte, int(op.Size)-len(b))...)
		}
		b = b[:op.Size]
	case txn.OpDelete:
		b = nil
	}
	m.blobs[op.Key] = b
}

// TestCatchUpChunks: on four nodes keeping two replicas of each 4 KiB
// chunk, a node that was down or stopped while writes, truncates and
// deletes changed blobs of several chunks catches up chunk by chunk when it
// restarts or resumes, while commits go on; then every node holds exactly the model's bytes in
// the chunks it holds, every version manager of a blob is at one version,
// and no node keeps a deleted blob.
func TestCatchUpChunks(t *testing.T) {
	const cs = 4 << 10
	for _, restart := range []bool{true, false} {
		t.Run(fmt.Sprintf("restart=%t", restart), func(t *testing.T) {
			tc := startClusterRF(t, 4, 2, 0, 1)
			tc.waitCaughtUp(t, 10*time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			rng := rand.New(rand.NewPCG(7, 9))
			model := &blobModel{blobs: map[string][]byte{}}
			keys := make([]string, 12)
			do := func(via int, op txn.Op) error {
				if _, err := tc.commit(ctx, via, op); err != nil {
					return fmt.Errorf("%s %q via n%d: %w", op.Kind, op.Key, via+1, err)
				}
				model.apply(op)
				return nil
			}
			randomOp := func(key string, r *rand.Rand) txn.Op {
				model.mu.Lock()
				size := len(model.blobs[key])
				model.mu.Unlock()
				switch p := r.IntN(10); {
				case size > 0 && p == 0:
					return txn.Op{Key: key, Kind: txn.OpDelete}
				case size > 0 && p < 3:
					return txn.Op{Key: key, Kind: txn.OpTruncate, Size: uint64(r.IntN(6 * cs))}
				default:
					data := make([]byte, 1+r.IntN(2*cs))
					for i := range data {
						data[i] = byte('a' + r.IntN(26))
					}
					return txn.Op{Key: key, Kind: txn.OpWrite, Offset: uint64(r.IntN(6 * cs)), Data: data, Create: true}
				}
			}
			for i := range keys {
				keys[i] = fmt.Sprintf("blob%02d", i)
				data := make([]byte, 5*cs)
				for j := range data {
					data[j] = byte('A' + (i+j)%26)
				}
				if err := do(i%4, txn.Op{Key: keys[i], Kind: txn.OpWrite, Data: data, Create: true}); err != nil {
					t.Fatal(err)
				}
			}

			tc.disconnect("n3")
			for range 60 {
				if err := do(rng.IntN(2), randomOp(keys[rng.IntN(len(keys))], rng)); err != nil {
					t.Fatal(err)
				}
			}
			if restart {
				tc.restart(t, 2)
			} else {
				// A stopped process's loop notices the gap when it resumes.
				tc.nodes[2].lastTick.Store(time.Now().Add(-2 * PauseMax).UnixNano())
			}
			tc.reconnect("n3")

			// Commits go on while n3 catches up; each writer has its own keys.
			var wg sync.WaitGroup
			for w := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(w), 3))
					for range 30 {
						key := keys[2*r.IntN(len(keys)/2)+w]
						if err := do([]int{0, 3}[w], randomOp(key, r)); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			tc.waitCaughtUp(t, 20*time.Second)

			for i, n := range tc.nodes {
				pl, err := n.Placement(testKeyspace, 2)
				if err != nil {
					t.Fatal(err)
				}
				ks, err := tc.engines[i].Acquire(testKeyspace)
				if err != nil {
					t.Fatal(err)
				}
				for _, key := range keys {
					want := model.blobs[key]
					rec, err := ks.Store.Record(key)
					if err != nil {
						t.Fatal(err)
					}
					if want == nil {
						if rec.Exists && (pl.Manages(key) || pl.holdsAny(key, rec.Size, cs)) {
							t.Errorf("n%d keeps %s, which was deleted", i+1, key)
						}
						continue
					}
					if pl.Manages(key) && (!rec.Exists || rec.Size != uint64(len(want))) {
						t.Errorf("n%d, a version manager of %s: %+v; want %d bytes", i+1, key, rec, len(want))
						continue
					}
					for c := uint64(0); c*cs < uint64(len(want)); c++ {
						if !pl.Holds(key, c) {
							continue
						}
						end := min(uint64(len(want)), (c+1)*cs)
						got, err := ks.Store.ReadChunks(key, c*cs, end-c*cs, 0, uint64(len(want)), 0)
						if err != nil {
							t.Fatal(err)
						}
						if !bytes.Equal(got, want[c*cs:end]) {
							t.Errorf("n%d: chunk %d of %s differs from the model", i+1, c, key)
						}
					}
				}
				ks.Release()
			}
			for _, key := range keys {
				versions := map[uint64]bool{}
				for i, n := range tc.nodes {
					if pl, _ := n.Placement(testKeyspace, 2); pl.Manages(key) {
						_, v := tc.read(t, i, key)
						versions[v] = true
					}
				}
				if len(versions) != 1 {
					t.Errorf("the version managers of %s are at versions %v", key, versions)
				}
			}
		})
	}
}

// disconnect cuts node id off the network and makes the others see it
// dead; reconnect undoes both.
func (tc *testCluster) disconnect(id ring.NodeID) {
	tc.net.mu.Lock()
	tc.net.cut["addr-"+string(id)] = true
	tc.net.mu.Unlock()
	tc.dead.Store(id, true)
}

func (tc *testCluster) reconnect(id ring.NodeID) {
	tc.net.mu.Lock()
	tc.net.cut["addr-"+string(id)] = false
	tc.net.mu.Unlock()
	tc.dead.Delete(id)
}

// A commit that only reads a blob that the tail's copy is behind on makes
// the tail fetch that blob, but not wait for it to reach the commit's
// version: the commit did not change it, and a version manager's copy may
// stay older for good once writes to it stop. The tail refuses the commit
// meanwhile (it may not pass a commit through: chain.Passing), so the
// commit gets through only once that catch-up ended.
func TestCatchUpAfterReadPassesThrough(t *testing.T) {
	tc := startCluster(t, 3, 0, 1)
	tc.waitCaughtUp(t, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must := func(ops ...txn.Op) { t.Helper(); tc.mustCommit(ctx, t, ops...) }
	must(appendOp("read", "a"), appendOp("written", "w"))
	tc.disconnect("n3")
	must(appendOp("read", "b")) // n3 misses it and does not know
	tc.reconnect("n3")
	_, version := tc.read(t, 0, "read")
	must(txn.Op{Key: "read", Kind: txn.OpReadCheck, Version: version}, appendOp("written", "x"))
	tc.waitCaughtUp(t, 10*time.Second)
	for _, key := range []string{"read", "written"} {
		want, wantVersion := tc.read(t, 0, key)
		if got, gotVersion := tc.read(t, 2, key); got != want || gotVersion != wantVersion {
			t.Errorf("n3: %s = %q@%d, want %q@%d", key, got, gotVersion, want, wantVersion)
		}
	}
}

// TestPassThroughResultsUnheld: a member a commit passes through computed
// none of its results, so the values of a member after it that applied the
// commit win over its zeros when the members before it merge them.
func TestPassThroughResultsUnheld(t *testing.T) {
	p := passThrough{ops: []txn.Op{{Key: "c", Kind: txn.OpAtomic, Width: 8, Func: txn.FuncAdd, Operand: 1}}}
	applied := []txn.Result{{Offset: 0, Size: 8, Version: 9, Value: 42}}
	got := txn.MergeResults(p.Results(), applied)
	if len(got) != 1 || got[0] != applied[0] {
		t.Fatalf("pass-through results merged with an applying member's: %+v, want %+v", got, applied)
	}
}

// Without read leases the node holds its lease from the start, so the end
// of its first catch-up is the one WaitCaughtUp waits for, also when it
// comes before the loop's first tick, at the first start and after a
// restart alike.
func TestWaitCaughtUpWithoutLeases(t *testing.T) {
	tc := startCluster(t, 3, 0, 1)
	wait := func(what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, n := range tc.nodes {
			if err := n.WaitCaughtUp(ctx); err != nil {
				t.Fatalf("node %s: WaitCaughtUp %s: %v", n.self, what, err)
			}
		}
	}
	wait("at the first start")
	for range 3 {
		tc.restart(t, 2)
		wait("after a restart")
	}
}

// TestClientStagedPassesThrough: a pass-through wrapped for a commit that
// carries a client ID still says it passes through, so the tail refuses it
// (chain.Passing); the wrapper once hid it, and a tail decided commits it
// had not applied.
func TestClientStagedPassesThrough(t *testing.T) {
	if !chain.PassesThrough(clientStaged{Staged: passThrough{}}) {
		t.Fatal("a client commit's pass-through does not report chain.Passing")
	}
	if chain.PassesThrough(clientStaged{Staged: staged{}}) {
		t.Fatal("a client commit's applied stage reports passing through")
	}
}

// TestSources checks the order a refresh tries replicas in: those up to
// date first, then old owners no longer written to (stale, never taken as
// up to date), then those catching up, never itself or a dead one. A
// refresh that needs a commit it passed through goes down the list while
// sources are behind it (mvcc.ErrCopyBehind), so a replica that lost the
// commit does not stall it while another has it.
func TestSources(t *testing.T) {
	dead, behind := &sync.Map{}, &sync.Map{}
	n := &Node{self: "b", cfg: Config{Cluster: fakeCluster{self: "b", dead: dead, catchingUp: behind}}}
	dead.Store(ring.NodeID("e"), true)
	behind.Store(ring.NodeID("a"), true)
	got := n.sources([]ring.NodeID{"e", "d", "c", "b", "a"}, []ring.NodeID{"g", "f", "e", "b"})
	want := []rebalance.Source{{ID: "c", Ready: true}, {ID: "d", Ready: true}, {ID: "f", Ready: false}, {ID: "g", Ready: false}, {ID: "a", Ready: false}}
	if !slices.Equal(got, want) {
		t.Fatalf("sources = %v, want %v", got, want)
	}
	if id, ready := n.source([]ring.NodeID{"a", "b"}); id != "a" || ready {
		t.Fatalf("source of a and b at b = %s (ready %t), want a, catching up", id, ready)
	}
	if id, _ := n.source([]ring.NodeID{"b", "e"}); id != "" {
		t.Fatalf("source of b and e at b = %q, want none", id)
	}
}

// TestStaleCopy: from a source catching up, a refresh takes only a newer
// copy, unless this node must copy chunks whatever their versions (gained
// in a ring change): then a copy at its own version is taken, and any
// other fails rather than count the chunks as copied (a move that kept
// its own record from such a source served a gained chunk's old bytes).
func TestStaleCopy(t *testing.T) {
	at := func(v uint64) mvcc.Record { return mvcc.Record{Exists: true, Version: v} }
	absent := mvcc.Record{}
	for _, tc := range []struct {
		name          string
		local, remote mvcc.Record
		want          uint64
		force         []uint64
		take, fails   bool
	}{
		{"newer", at(5), at(7), 0, nil, true, false},
		{"same", at(5), at(5), 0, nil, false, false},
		{"older", at(5), at(3), 0, nil, false, false},
		{"over absent", absent, at(3), 0, nil, false, false},
		{"over absent, missed", absent, at(3), 3, nil, true, false},
		{"absent there", at(5), absent, 0, nil, false, false},
		{"newer, gained", at(5), at(7), 0, []uint64{1}, true, false},
		{"same, gained", at(5), at(5), 0, []uint64{1}, true, false},
		{"older, gained", at(5), at(3), 0, []uint64{1}, false, true},
		{"over absent, gained", absent, at(3), 0, []uint64{0, 1}, false, true},
		{"absent there, gained", at(5), absent, 0, []uint64{1}, false, true},
	} {
		take, err := staleCopy(tc.local, tc.remote, tc.want, tc.force)
		if take != tc.take || (err != nil) != tc.fails {
			t.Errorf("%s: take %t, err %v; want take %t, fails %t", tc.name, take, err, tc.take, tc.fails)
		}
	}
}

// TestCatchUpAskedDuringRound: a catch-up asked for while a round runs (as
// a read lease granted meanwhile asks) gets a round that began after it
// before the node says it caught up, and the node never says it caught up
// and then takes it back: the others would route chains and reads to it in
// between, which it refuses (a cluster's first writes failed so, right
// after its last node joined).
func TestCatchUpAskedDuringRound(t *testing.T) {
	tc := startCluster(t, 3, 0, 1)
	tc.waitCaughtUp(t, 5*time.Second)
	n := tc.nodes[2]
	before := len(tc.said.of(n.self))
	// Cut off, n3's round fails and tries again until it is back.
	tc.net.mu.Lock()
	tc.net.isolated["addr-n3"] = true
	tc.net.mu.Unlock()
	n.startCatchUp("test: the first ask")
	time.Sleep(catchUpRetry)
	if !n.CatchingUp() {
		t.Fatal("n3 is not catching up while it reaches no one")
	}
	n.catch.active.Store(true)
	n.wakeCatchUp("test: asked again during the round")
	tc.net.mu.Lock()
	tc.net.isolated["addr-n3"] = false
	tc.net.mu.Unlock()
	tc.waitCaughtUp(t, 5*time.Second)
	// A round taken back would start at once; give it time to show.
	time.Sleep(3 * catchUpRetry)
	if said := tc.said.of(n.self)[before:]; !slices.Equal(said, []bool{true, false}) {
		t.Fatalf("n3 said it was catching up: %v; want [true false]: one catch-up, ended once", said)
	}
	if n.CatchingUp() {
		t.Fatal("n3 is catching up again")
	}
}

// A refresh that waits for a commit every source lost its stage of takes
// the copy without it once the sources say so (rebalance.Lost), and
// counts it; a source that does not say so keeps it waiting, and so does
// a replica that is down, which may hold the commit.
func TestRefreshLostCommit(t *testing.T) {
	tc := startClusterRF(t, 3, 3, 0, 1)
	tc.waitCaughtUp(t, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := tc.commit(ctx, 0, txn.Op{Key: "k", Kind: txn.OpWrite, Data: []byte("x"), Create: true})
	if err != nil {
		t.Fatal(err)
	}
	lost := chain.TxnID{Coordinator: "n1", Seq: 99}
	for i := range 2 {
		if !tc.nodes[i].recordMissed(testKeyspace, []chain.Outcome{
			{Txn: lost, Committed: true, CommitErr: chain.ErrStageLost},
			{Txn: chain.TxnID{Coordinator: "n1", Seq: 100}, Committed: true},
		}) {
			t.Fatal("recordMissed recorded nothing for a stage lost")
		}
	}
	ks, err := tc.engines[2].Acquire(testKeyspace)
	if err != nil {
		t.Fatal(err)
	}
	defer ks.Release()
	n := tc.nodes[2]
	pl, err := n.Placement(testKeyspace, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := res[0].Version + 1
	if _, err := n.refreshBlob(ctx, ks, pl, "k", want, chain.TxnID{Coordinator: "n1", Seq: 100}, false); !errors.Is(err, mvcc.ErrCopyBehind) {
		t.Fatalf("refresh for a commit the sources did not lose: %v, want ErrCopyBehind", err)
	}
	tc.dead.Store(ring.NodeID("n2"), true)
	if _, err := n.refreshBlob(ctx, ks, pl, "k", want, lost, false); !errors.Is(err, mvcc.ErrCopyBehind) {
		t.Fatalf("refresh for a commit the live source lost, with a replica down: %v, want ErrCopyBehind", err)
	}
	if got := n.Stats().CopiesLost; got != 0 {
		t.Fatalf("CopiesLost = %d before any loss", got)
	}
	tc.dead.Delete(ring.NodeID("n2"))
	if _, err := n.refreshBlob(ctx, ks, pl, "k", want, lost, false); err != nil {
		t.Fatalf("refresh for a commit every source lost: %v", err)
	}
	if got := n.Stats().CopiesLost; got != 1 {
		t.Fatalf("CopiesLost = %d, want 1", got)
	}
}
