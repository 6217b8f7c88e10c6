package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/keyspace"
	"github.com/tyrstore/tyr/internal/limits"
	"github.com/tyrstore/tyr/internal/txn"
)

const largeKeyspace = "large"

// startLarge starts three nodes replicating largeKeyspace (1 MiB chunks)
// three times.
func startLarge(t *testing.T) *testCluster {
	t.Helper()
	tc := startCluster(t, 3, 0, 1)
	for _, eng := range tc.engines {
		if _, err := eng.Create(largeKeyspace, keyspace.Config{ChunkBytes: 1 << 20, Replication: 3, MVCC: true}); err != nil {
			t.Fatal(err)
		}
	}
	return tc
}

// readLarge returns blob key of largeKeyspace as node i stores it.
func (tc *testCluster) readLarge(t *testing.T, i int, key string) []byte {
	t.Helper()
	ks, err := tc.engines[i].Acquire(largeKeyspace)
	if err != nil {
		t.Fatal(err)
	}
	defer ks.Release()
	data, _, err := ks.Store.Read(key, 0, limits.PayloadBytesMax)
	if errors.Is(err, errs.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// Concurrent commits of 12 MiB each, from every node, on a three-member
// chain: far more data in flight than one transport message holds. All
// commit, no Deliver call exceeds the transport's limit (the test network
// fails those, as gRPC does), and every replica holds every blob.
func TestLargeConcurrentCommits(t *testing.T) {
	tc := startLarge(t)
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
			if _, err := tc.nodes[w%3].Commit(ctx, largeKeyspace, 3, ops, nil); err != nil {
				t.Errorf("writer %d: %v", w, err)
			}
		}()
	}
	wg.Wait()
	if n := tc.net.oversize.Load(); n != 0 {
		t.Errorf("%d Deliver calls over the transport's limit", n)
	}
	for i := range tc.nodes {
		for w := range writers {
			for b := range blobs {
				got := tc.readLarge(t, i, fmt.Sprintf("w%d-%d", w, b))
				if len(got) != each || got[0] != byte('a'+w) || got[each-1] != byte('a'+w) {
					t.Fatalf("n%d: blob w%d-%d has %d bytes, want %d of %c", i+1, w, b, len(got), each, byte('a'+w))
				}
			}
		}
	}
}

// A commit whose data finds no room among the commits in flight waits;
// if its context ends first it is refused as unavailable and changes
// nothing. Commits without data are not held back, and once room frees
// the same commit goes through.
func TestCommitWaitsForRoom(t *testing.T) {
	tc := startLarge(t)
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
	for i := range tc.nodes {
		if got := tc.readLarge(t, i, "k"); got != nil {
			t.Fatalf("n%d holds %q after a refused commit", i+1, got)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	create := txn.Op{Key: "empty", Kind: txn.OpCreate}
	if _, err := head.Commit(ctx, largeKeyspace, 3, []txn.Op{create}, nil); err != nil {
		t.Fatalf("commit without data while the data room is full: %v", err)
	}
	head.admit.Release(CommitBytesInFlightMax)
	if _, err := head.Commit(ctx, largeKeyspace, 3, []txn.Op{write}, nil); err != nil {
		t.Fatal(err)
	}
	for i := range tc.nodes {
		if got := tc.readLarge(t, i, "k"); string(got) != "data" {
			t.Fatalf("n%d holds %q, want %q", i+1, got, "data")
		}
	}
}
