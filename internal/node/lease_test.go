package node

import (
	"context"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/txn"
)

// A node cut off from the others loses its read lease (it stops serving
// reads, as a node catching up) before they commit without it, and serves
// again only once it is back and has caught up.
func TestLeaseIsolation(t *testing.T) {
	const leaseFor = 400 * time.Millisecond
	tc := startClusterWith(t, 3, 3, 0, 1, leaseFor)
	tc.waitCaughtUp(t, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := tc.commit(ctx, 0, appendOp("k", "a")); err != nil {
		t.Fatal(err)
	}

	tc.net.mu.Lock()
	tc.net.cut["addr-n3"], tc.net.isolated["addr-n3"] = true, true
	tc.net.mu.Unlock()
	cutAt := time.Now()
	// The others' failure detector takes n3 for dead; a real one needs
	// seconds, far longer than the lease.
	tc.dead.Store(ring.NodeID("n3"), true)
	if _, err := tc.commit(ctx, 0, appendOp("k", "b")); err != nil {
		t.Fatal(err)
	}
	took := time.Since(cutAt)
	if !tc.nodes[2].CatchingUp() {
		t.Fatalf("n3 still serves reads when a commit without it was acknowledged, %v after it was cut off", took)
	}
	if got, _ := tc.read(t, 2, "k"); got != "a" {
		t.Fatalf("n3 holds %q while cut off, want %q", got, "a")
	}
	for !advertised(tc, "n3") {
		if time.Since(cutAt) > 10*time.Second {
			t.Fatal("n3 does not advertise that it is catching up 10s after it was cut off")
		}
		time.Sleep(time.Millisecond)
	}
	// A node that sees no majority commits nothing.
	tc.dead.Store(ring.NodeID("n2"), true)
	short, stop := context.WithTimeout(ctx, time.Second)
	_, err := tc.commit(short, 0, txn.Op{Key: "k", Kind: txn.OpAppend, Data: []byte("c")})
	stop()
	if err == nil {
		t.Fatal("n1 committed seeing 1 of 3 members alive")
	}
	tc.dead.Delete(ring.NodeID("n2"))

	tc.net.mu.Lock()
	tc.net.cut["addr-n3"], tc.net.isolated["addr-n3"] = false, false
	tc.net.mu.Unlock()
	tc.dead.Delete(ring.NodeID("n3"))
	// n3 advertises that it is in step only once it serves: the others
	// make it the head of chains and send it reads from then on. Its
	// lease comes back only lease.RevokeHold after the others last
	// revoked it, later than its catch-up round ends.
	backAt := time.Now()
	for advertised(tc, "n3") {
		if time.Since(backAt) > 10*time.Second {
			t.Fatal("n3 still advertises that it is catching up 10s after it is back")
		}
		time.Sleep(time.Millisecond)
	}
	if tc.nodes[2].CatchingUp() {
		t.Fatalf("n3 advertised that it is in step %v after it was back, while it still refuses reads and heading chains", time.Since(backAt))
	}
	tc.waitCaughtUp(t, 10*time.Second)
	if got, _ := tc.read(t, 2, "k"); got != "ab" {
		t.Fatalf("n3 holds %q after catching up, want %q", got, "ab")
	}
}

// advertised reports whether node id advertises that it is catching up.
func advertised(tc *testCluster, id ring.NodeID) bool {
	_, on := tc.catchingUp.Load(id)
	return on
}
