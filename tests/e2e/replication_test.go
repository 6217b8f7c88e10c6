package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/testserver"
)

// localRead marks a request so the node serves it from its own replica
// instead of routing it (the marker nodes put on requests they forward).
func localRead(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "tyr-forwarded", "1")
}

// replicatedKeyspace creates a keyspace on the first node and waits until
// every node has it.
func replicatedKeyspace(t *testing.T, clients []*client.Client, name string, cfg client.KeyspaceConfig) {
	t.Helper()
	if _, err := clients[0].CreateKeyspace(context.Background(), name, cfg); err != nil {
		t.Fatal(err)
	}
	for i, c := range clients {
		testserver.Eventually(t, 15*time.Second, fmt.Sprintf("keyspace %s on node%d", name, i+1), func() (bool, string) {
			return hasKeyspace(t, c, name), "not yet in its catalog"
		})
	}
}

func dialAll(t *testing.T, lc *testserver.LocalCluster) []*client.Client {
	clients := make([]*client.Client, len(lc.Endpoints))
	for i, e := range lc.Endpoints {
		clients[i] = dial(t, e)
	}
	return clients
}

// The foundation's seeded model test, on a 3-node cluster with every blob
// on all three nodes: each blob is driven through a different node, so
// commits are coordinated by all of them and reads are forwarded to the
// replica that serves them. Afterwards every replica holds each blob byte
// for byte, under the same version.
func TestReplicatedModel(t *testing.T) {
	seed := seedFromEnv(t)
	ops := intFromEnv(t, "TYR_MODEL_OPS", 1700) / 4
	lc := testserver.UpCluster(t, 3)
	clients := dialAll(t, lc)
	const ks = "replicated-model"
	replicatedKeyspace(t, clients, ks, client.KeyspaceConfig{ChunkSize: modelChunk, Replication: 3, MVCC: true, Sync: false})
	runModel(t, clients, ks, seed, true, 6, ops)
	if t.Failed() {
		t.Logf("node logs:\n%s", lc.Logs())
		return
	}
	ctx := context.Background()
	for i := 0; i < 6; i++ {
		key := fmt.Sprintf("blob/%d", i)
		var first []byte
		var firstInfo client.BlobInfo
		for n, c := range clients {
			data, info, err := c.ReadPart(localRead(ctx), ks, key, 0, client.PayloadBytesMax)
			if errors.Is(err, client.ErrNotFound) {
				data, info = nil, client.BlobInfo{}
			} else if err != nil {
				t.Fatalf("node%d: read %s: %v", n+1, key, err)
			}
			if n == 0 {
				first, firstInfo = data, info
				continue
			}
			if !bytes.Equal(data, first) || info.Version != firstInfo.Version {
				t.Errorf("%s: node%d holds %d bytes at version %d, node1 %d bytes at version %d",
					key, n+1, len(data), info.Version, len(first), firstInfo.Version)
			}
		}
	}
}

// kill9 kills nodek of lc with SIGKILL, by the PID in its pid file.
func kill9(t *testing.T, lc *testserver.LocalCluster, k int) {
	t.Helper()
	b, err := os.ReadFile(lc.NodeFile(k, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}

// Appenders write through node1 while node3 is killed with SIGKILL: once
// the others mark it dead, commits continue on the survivors, reads keep
// working throughout, and every acknowledged append is in the final blobs
// exactly once (an append whose outcome was unknown at most once).
func TestReplicatedKillOneNode(t *testing.T) {
	lc := testserver.UpCluster(t, 3)
	clients := dialAll(t, lc)
	const ks = "replicated-kill"
	replicatedKeyspace(t, clients, ks, client.KeyspaceConfig{Replication: 3, MVCC: true, Sync: true})

	const writers = 4
	type record struct {
		text  string
		acked bool
	}
	var mu sync.Mutex
	records := make([][]record, writers)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var afterKill, readsAfterKill int
	var killed bool
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("log/%d", w)
			for i := 0; ctx.Err() == nil; i++ {
				rec := fmt.Sprintf("<%d.%d>", w, i)
				opCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, err := clients[0].Commit(opCtx, ks, client.AppendOp(key, []byte(rec), true))
				_, _, readErr := clients[0].ReadPart(opCtx, ks, key, 0, 16)
				cancel()
				mu.Lock()
				records[w] = append(records[w], record{rec, err == nil})
				if killed && err == nil {
					afterKill++
				}
				if killed && readErr == nil {
					readsAfterKill++
				}
				mu.Unlock()
				if err != nil && !errors.Is(err, client.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("append %s: %v", rec, err)
					return
				}
			}
		}()
	}
	time.Sleep(time.Second)
	kill9(t, lc, 3)
	mu.Lock()
	killed = true
	mu.Unlock()
	testserver.Eventually(t, deadDetectedMax, "node3 marked dead by node1", func() (bool, string) {
		st := memberState(t, clients[0], "node3")
		return st == "dead", "state " + st
	})
	time.Sleep(2 * time.Second)
	stop()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if afterKill == 0 || readsAfterKill == 0 {
		t.Fatalf("after the kill: %d appends and %d reads succeeded; want both to continue", afterKill, readsAfterKill)
	}
	acked, unknown := 0, 0
	for w := 0; w < writers; w++ {
		data, _, err := clients[0].ReadPart(context.Background(), ks, fmt.Sprintf("log/%d", w), 0, client.PayloadBytesMax)
		if err != nil {
			t.Fatalf("final read of log/%d: %v", w, err)
		}
		for _, r := range records[w] {
			n := bytes.Count(data, []byte(r.text))
			switch {
			case r.acked && n != 1:
				t.Errorf("acknowledged append %s appears %d times", r.text, n)
			case !r.acked && n > 1:
				t.Errorf("append %s of unknown outcome appears %d times", r.text, n)
			}
			if r.acked {
				acked++
			} else {
				unknown++
			}
		}
	}
	t.Logf("%d appends acknowledged (%d after the kill), %d of unknown outcome, %d reads after the kill",
		acked, afterKill, unknown, readsAfterKill)
}
