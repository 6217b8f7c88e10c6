package node

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/txn"
)

// restart stops node i and starts it again on its store, as a process
// restart would.
func (tc *testCluster) restart(t *testing.T, i int) {
	t.Helper()
	old := tc.nodes[i]
	old.Close()
	n, err := Start(old.cfg)
	if err != nil {
		t.Fatal(err)
	}
	tc.net.mu.Lock()
	addr, _ := old.cfg.Cluster.RPCAddr(old.self)
	tc.net.nodes[addr] = n
	tc.net.mu.Unlock()
	tc.nodes[i] = n
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
			must := func(ops ...txn.Op) {
				t.Helper()
				if _, err := tc.commit(ctx, 0, ops...); err != nil {
					t.Fatal(err)
				}
			}
			must(appendOp("k", "a"), appendOp("gone", "x"), appendOp("same", "s"))

			tc.net.mu.Lock()
			tc.net.cut["addr-n3"] = true
			tc.net.mu.Unlock()
			tc.dead.Store(ring.NodeID("n3"), true)
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
			tc.net.mu.Lock()
			tc.net.cut["addr-n3"] = false
			tc.net.mu.Unlock()
			tc.dead.Delete(ring.NodeID("n3"))

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
