package node

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/txn"
)

// syncKeyspace is the test clusters' keyspace with sync on, whose chain
// commits go through group commit (sync.go).
const syncKeyspace = "synced"

// TestGroupCommit: concurrent atomic adds and writes on a keyspace with
// sync on, coordinated by every node of clusters where nodes outnumber
// replicas, all commit, every replica holds their sum, and the nodes
// sync fewer times than a sync per member per commit would take: the
// commits written while a sync runs share the next one.
func TestGroupCommit(t *testing.T) {
	for _, shape := range []struct{ nodes, rf int }{{3, 1}, {4, 2}, {3, 3}} {
		t.Run(fmt.Sprintf("%dn-rf%d", shape.nodes, shape.rf), func(t *testing.T) {
			const clients, each = 16, 20
			tc := startClusterRF(t, shape.nodes, shape.rf, 0, 1)
			tc.waitCaughtUp(t, 10*time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := tc.nodes[0].Commit(ctx, syncKeyspace, shape.rf,
				[]txn.Op{{Key: "counter", Kind: txn.OpWrite, Data: make([]byte, 8), Create: true}}, nil); err != nil {
				t.Fatal(err)
			}
			before, beforeCommits := tc.syncs()
			var wg sync.WaitGroup
			errs := make(chan error, clients)
			for c := range clients {
				wg.Go(func() {
					for i := range each {
						ops := []txn.Op{
							{Key: "counter", Kind: txn.OpAtomic, Width: 8, Func: txn.FuncAdd, Operand: 1},
							{Key: fmt.Sprintf("own-%d", c), Kind: txn.OpWrite, Data: []byte{byte(i)}, Create: true},
						}
						// commit, not Commit: each request its own commit,
						// uncombined (combine.go), so the syncs count them.
						if _, err := tc.nodes[c%shape.nodes].commit(ctx, syncKeyspace, shape.rf, ops, nil); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			commits := uint64(clients * each)
			syncs, memberCommits := tc.syncs()
			syncs, memberCommits = syncs-before, memberCommits-beforeCommits
			// Without group commit each member would sync once per commit.
			if syncs == 0 || memberCommits < commits*uint64(shape.rf) || syncs >= memberCommits {
				t.Errorf("%d syncs for %d commits written by %d members: want some, fewer than the members' commits, at least %d of those",
					syncs, commits, memberCommits, commits*uint64(shape.rf))
			}
			t.Logf("%d commits written %d times by chain members, %d syncs", commits, memberCommits, syncs)
			tc.checkCounter(t, syncKeyspace, "counter", shape.rf, commits)
		})
	}
}

// checkCounter checks that exactly rf nodes manage the 8-byte counter key
// of keyspace, and that each holds want.
func (tc *testCluster) checkCounter(t *testing.T, keyspace, key string, rf int, want uint64) {
	t.Helper()
	holders := 0
	for i, n := range tc.nodes {
		pl, err := n.Placement(keyspace, rf)
		if err != nil {
			t.Fatal(err)
		}
		if !pl.Manages(key) {
			continue
		}
		holders++
		ks, err := tc.engines[i].Acquire(keyspace)
		if err != nil {
			t.Fatal(err)
		}
		data, _, err := ks.Store.Read(key, 0, 8)
		ks.Release()
		if err != nil {
			t.Fatal(err)
		}
		if got := binary.LittleEndian.Uint64(data); got != want {
			t.Errorf("node %s: %s = %d, want %d", n.Self(), key, got, want)
		}
	}
	if holders != rf {
		t.Errorf("%d nodes hold %s, want %d", holders, key, rf)
	}
}

// syncs is the WAL syncs the cluster's nodes made so far, and the chain
// commits their members wrote.
func (tc *testCluster) syncs() (syncs, memberCommits uint64) {
	for _, node := range tc.nodes {
		st := node.Stats()
		syncs += st.Syncs
		memberCommits += st.MemberCommits
	}
	return syncs, memberCommits
}
