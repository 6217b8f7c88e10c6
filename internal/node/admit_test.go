package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tyrstore/tyr/api/peerpb"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/keyspace"
	"github.com/tyrstore/tyr/internal/txn"
)

const largeKeyspace = "large"

// startLarge starts four nodes replicating largeKeyspace (1 MiB chunks)
// three times, so that each chunk lives on three of them, and returns the
// keyspace's placement.
func startLarge(t *testing.T) (*testCluster, Placement) {
	t.Helper()
	tc := startClusterRF(t, 4, 3, 0, 1)
	for _, eng := range tc.engines {
		if _, err := eng.Create(largeKeyspace, keyspace.Config{ChunkBytes: 1 << 20, Replication: 3, MVCC: true}); err != nil {
			t.Fatal(err)
		}
	}
	pl, err := tc.nodes[0].Placement(largeKeyspace, 3)
	if err != nil {
		t.Fatal(err)
	}
	return tc, pl
}

// Concurrent commits of 12 MiB each, from every node of four, on chains
// of three blobs' version managers and chunk holders: far more data in
// flight than one transport message holds. All commit, no Deliver call
// exceeds the transport's limit (the test network fails those, as gRPC
// does), and every blob reads back whole through its version manager,
// from chunks spread over the nodes.
func TestLargeConcurrentCommits(t *testing.T) {
	tc, pl := startLarge(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const writers, blobs, each = 6, 3, 4 << 20
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ops []txn.Op
			for b := range blobs {
				data := bytes.Repeat([]byte{byte('a' + w)}, each)
				ops = append(ops, txn.Op{Key: fmt.Sprintf("w%d-%d", w, b), Kind: txn.OpWrite, Data: data, Create: true})
			}
			if _, err := tc.nodes[w%len(tc.nodes)].Commit(ctx, largeKeyspace, 3, ops, nil); err != nil {
				t.Errorf("writer %d: %v", w, err)
			}
		}()
	}
	wg.Wait()
	if n := tc.net.oversize.Load(); n != 0 {
		t.Errorf("%d Deliver calls over the transport's limit", n)
	}
	for w := range writers {
		want := bytes.Repeat([]byte{byte('a' + w)}, each)
		for b := range blobs {
			tc.checkBlob(ctx, t, largeKeyspace, pl, fmt.Sprintf("w%d-%d", w, b), want, w)
		}
	}
}

// A commit of megabytes over links slower than RetransmitTicks for it
// (400 ms for its 4 MiB Forward, against 200 ms) commits promptly, and the
// chain sends few copies of its data: retransmissions back off, a member
// waiting on its downstream does not forward again when its upstream
// repeats itself, and a Forward sent again while its earlier copy is still
// on its way is not queued behind it (bug 55).
func TestSlowLinkLargeCommit(t *testing.T) {
	tc, pl := startLarge(t)
	tc.net.perMiB.Store(int64(100 * time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	data := bytes.Repeat([]byte("slow"), 1<<20)
	write := txn.Op{Key: "big", Kind: txn.OpWrite, Data: data, Create: true}
	sent := tc.net.bytes.Load()
	start := time.Now()
	if _, err := tc.nodes[0].Commit(ctx, largeKeyspace, 3, []txn.Op{write}, nil); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	copies := float64(tc.net.bytes.Load()-sent) / float64(len(data))
	t.Logf("a 4 MiB commit over slow links: %v, %.1f copies of its data sent", took, copies)
	// A chain of up to four members: up to four Forwards cross the network
	// (to the head, then down the chain), and a few copies sent again by
	// members whose copy arrived and who still wait. Without coalescing
	// this sent 13; when each repeat ran down the chain, 21.
	if copies > 12 || took > 10*time.Second {
		t.Errorf("a 4 MiB commit over slow links took %v and sent %.1f copies of its data; want under 10s and at most 12", took, copies)
	}
	tc.net.perMiB.Store(0)
	tc.checkBlob(ctx, t, largeKeyspace, pl, "big", data, 1)
}

// A commit whose data finds no room among the commits in flight waits;
// if its context ends first it is refused as unavailable and changes
// nothing. Commits without data are not held back, and once room frees
// the same commit goes through.
func TestCommitWaitsForRoom(t *testing.T) {
	tc, pl := startLarge(t)
	head := tc.nodes[0]
	if !head.admit.TryAcquire(CommitBytesInFlightMax) {
		t.Fatal("a fresh node has commits in flight")
	}
	write := txn.Op{Key: "k", Kind: txn.OpWrite, Data: []byte("data"), Create: true}
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := head.Commit(short, largeKeyspace, 3, []txn.Op{write}, nil)
	cancel()
	if !errors.Is(err, errs.ErrUnavailable) || !errs.IsRefused(err) {
		t.Fatalf("commit without room: %v, want a refusal as unavailable", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc.checkBlob(ctx, t, largeKeyspace, pl, "k", nil, 0)
	create := txn.Op{Key: "empty", Kind: txn.OpCreate}
	if _, err := head.Commit(ctx, largeKeyspace, 3, []txn.Op{create}, nil); err != nil {
		t.Fatalf("commit without data while the data room is full: %v", err)
	}
	head.admit.Release(CommitBytesInFlightMax)
	if _, err := head.Commit(ctx, largeKeyspace, 3, []txn.Op{write}, nil); err != nil {
		t.Fatal(err)
	}
	tc.checkBlob(ctx, t, largeKeyspace, pl, "k", []byte("data"), 1)
}

// A peer's queue takes messages until they hold peerQueueBytesMax bytes,
// then refuses them, whatever their count; an empty queue takes a message
// of any size. What a sender takes out frees the room.
func TestPeerQueueBytes(t *testing.T) {
	p := &peer{queue: make(chan queued, peerQueueMax)}
	big := &peerpb.Message{Err: strings.Repeat("x", 10<<20)}
	taken := 0
	for p.enqueue(big, forwardID{}) {
		taken++
	}
	if want := peerQueueBytesMax / (10 << 20); taken != want || p.queued.Load() > peerQueueBytesMax {
		t.Fatalf("queue took %d messages of 10 MiB (%d bytes), want %d within %d bytes", taken, p.queued.Load(), want, peerQueueBytesMax)
	}
	for range taken {
		q := <-p.queue
		p.queued.Add(-int64(q.size))
	}
	huge := &peerpb.Message{Err: strings.Repeat("x", peerQueueBytesMax+1)}
	if !p.enqueue(huge, forwardID{}) {
		t.Fatal("an empty queue refused a message larger than its byte bound")
	}
	if p.enqueue(&peerpb.Message{Err: "small"}, forwardID{}) {
		t.Fatal("a queue over its byte bound took another message")
	}
}
