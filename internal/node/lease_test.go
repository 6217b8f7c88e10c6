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
	tc.waitCaughtUp(t, 10*time.Second)
	if got, _ := tc.read(t, 2, "k"); got != "ab" {
		t.Fatalf("n3 holds %q after catching up, want %q", got, "ab")
	}
}
