package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
		testserver.Eventually(t, testserver.CatalogSpreadMax, fmt.Sprintf("keyspace %s on node%d", name, i+1), func() (bool, string) {
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
	lc.Signal(k, syscall.SIGKILL)
}

// appendLoad is a set of appenders, each adding numbered records to its
// own blob through one node and reading the blob back after each
// acknowledged append, counting successes by phase.
type appendLoad struct {
	t       *testing.T
	ks      string
	pad     int // bytes each record is padded to
	mu      sync.Mutex
	records [][]loggedAppend
	phase   string
	acks    map[string]int
	reads   map[string]int
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

type loggedAppend struct {
	text  string
	acked bool
}

// startAppends starts writers appenders through c.
func startAppends(t *testing.T, c *client.Client, ks string, writers, pad int) *appendLoad {
	l := &appendLoad{t: t, ks: ks, pad: pad, records: make([][]loggedAppend, writers), phase: "before the kills",
		acks: map[string]int{}, reads: map[string]int{}}
	ctx, stop := context.WithCancel(context.Background())
	l.stop = stop
	for w := range writers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			key := fmt.Sprintf("log/%d", w)
			for i := 0; ctx.Err() == nil; i++ {
				rec := fmt.Sprintf("<%d.%d>", w, i)
				payload := rec + strings.Repeat(".", max(0, pad-len(rec)))
				opCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, err := c.Commit(opCtx, ks, client.AppendOp(key, []byte(payload), true))
				data, _, readErr := c.ReadPart(opCtx, ks, key, 0, client.PayloadBytesMax)
				cancel()
				if err == nil && readErr == nil && !bytes.Contains(data, []byte(rec)) {
					t.Errorf("stale read: %s acknowledged, then a read of %s (%d bytes) misses it", rec, key, len(data))
				}
				l.mu.Lock()
				l.records[w] = append(l.records[w], loggedAppend{rec, err == nil})
				if err == nil {
					l.acks[l.phase]++
				}
				if readErr == nil {
					l.reads[l.phase]++
				}
				l.mu.Unlock()
				if err != nil && !errors.Is(err, client.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("append %s: %v", rec, err)
					return
				}
			}
		}()
	}
	return l
}

func (l *appendLoad) setPhase(p string) {
	l.mu.Lock()
	l.phase = p
	l.mu.Unlock()
}

// finish stops the appenders and checks, through c, that appends and reads
// succeeded in every phase named and that every acknowledged append is in
// its blob exactly once (one of unknown outcome at most once).
func (l *appendLoad) finish(c *client.Client, phases ...string) {
	t := l.t
	l.stop()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range phases {
		if l.acks[p] == 0 || l.reads[p] == 0 {
			t.Errorf("%s: %d appends and %d reads succeeded; want both to continue", p, l.acks[p], l.reads[p])
		}
	}
	acked, unknown := 0, 0
	for w, records := range l.records {
		key := fmt.Sprintf("log/%d", w)
		data := readWhole(t, c, l.ks, key)
		for _, r := range records {
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
	t.Logf("%d appends acknowledged, %d of unknown outcome; acknowledged appends by phase %v, reads by phase %v",
		acked, unknown, l.acks, l.reads)
}

// readWhole reads blob key whole, a request at a time.
func readWhole(t *testing.T, c *client.Client, ks, key string) []byte {
	t.Helper()
	var out []byte
	for {
		part, info, err := c.ReadPart(context.Background(), ks, key, uint64(len(out)), client.PayloadBytesMax)
		if err != nil {
			t.Fatalf("final read of %s: %v", key, err)
		}
		out = append(out, part...)
		if len(part) == 0 || uint64(len(out)) >= info.Size {
			return out
		}
	}
}

func waitDead(t *testing.T, k int, via *client.Client) {
	t.Helper()
	testserver.Eventually(t, deadDetectedMax, fmt.Sprintf("node%d marked dead", k), func() (bool, string) {
		st := memberState(t, via, fmt.Sprintf("node%d", k))
		return st == "dead", "state " + st
	})
}

// Appenders write through node2 while node3 is killed with SIGKILL,
// restarted, and, once it has caught up, node1 is stopped (SIGSTOP) until
// the others declare it dead, continued, and, once it has caught up,
// killed: commits and reads continue through every phase, no read misses an append
// acknowledged before it began (no stale read, also from the restarted
// node), every acknowledged append is in the final blobs exactly once (one
// of unknown outcome at most once), and the two survivors hold the same
// bytes.
func TestReplicatedKillRestartKill(t *testing.T) {
	lc := testserver.UpCluster(t, 3)
	clients := dialAll(t, lc)
	const ks = "replicated-kill"
	replicatedKeyspace(t, clients, ks, client.KeyspaceConfig{Replication: 3, MVCC: true, Sync: true})
	const writers = 4
	load := startAppends(t, clients[1], ks, writers, 0)
	time.Sleep(time.Second)
	caughtUp := lc.WaitLog(3, "caught up", 0, 10*time.Second)

	kill9(t, lc, 3)
	load.setPhase("node3 killed")
	waitDead(t, 3, clients[1])
	time.Sleep(time.Second)

	lc.Start(3)
	load.setPhase("node3 restarted")
	lc.WaitLog(3, "caught up", caughtUp, 30*time.Second)
	time.Sleep(time.Second)

	caughtUp1 := lc.WaitLog(1, "caught up", 0, time.Second)
	lc.Signal(1, syscall.SIGSTOP)
	load.setPhase("node1 stopped")
	waitDead(t, 1, clients[1])
	lc.Signal(1, syscall.SIGCONT)
	load.setPhase("node1 continued")
	lc.WaitLog(1, "the node was stopped for", 0, 10*time.Second)
	lc.WaitLog(1, "caught up", caughtUp1, 30*time.Second)
	time.Sleep(time.Second)

	kill9(t, lc, 1)
	load.setPhase("node1 killed")
	waitDead(t, 1, clients[1])
	time.Sleep(time.Second)
	load.finish(clients[1], "node3 killed", "node3 restarted", "node1 continued", "node1 killed")

	for w := range writers {
		key := fmt.Sprintf("log/%d", w)
		// The survivors' own copies: byte for byte, version for version.
		d2, i2, err2 := clients[1].ReadPart(localRead(context.Background()), ks, key, 0, client.PayloadBytesMax)
		d3, i3, err3 := clients[2].ReadPart(localRead(context.Background()), ks, key, 0, client.PayloadBytesMax)
		if err2 != nil || err3 != nil || !bytes.Equal(d2, d3) || i2.Version != i3.Version {
			t.Errorf("%s: node2 holds %d bytes at version %d (%v), node3 %d bytes at version %d (%v)",
				key, len(d2), i2.Version, err2, len(d3), i3.Version, err3)
		}
	}
}

// On four nodes keeping two replicas of each 4 KiB chunk, appenders of
// 200-byte records (so each blob soon spans many chunks, spread over the
// nodes) write through node1 while node3 is killed, restarted and, once it
// has caught up chunk by chunk, node2 is killed: every chunk node2 held
// now lives only on its other replica, so an append or read that node3
// failed to catch up on would be lost or stale. Commits and reads continue
// through every phase, no read misses an acknowledged append, and every
// acknowledged append is in the final blobs exactly once.
func TestSpreadKillRestartKill(t *testing.T) {
	lc := testserver.UpCluster(t, 4)
	clients := dialAll(t, lc)
	const ks = "spread-kill"
	replicatedKeyspace(t, clients, ks, client.KeyspaceConfig{ChunkSize: 4 << 10, Replication: 2, MVCC: true, Sync: true})
	load := startAppends(t, clients[0], ks, 4, 200)
	time.Sleep(2 * time.Second)
	caughtUp := lc.WaitLog(3, "caught up", 0, 10*time.Second)

	kill9(t, lc, 3)
	load.setPhase("node3 killed")
	waitDead(t, 3, clients[0])
	time.Sleep(2 * time.Second)

	lc.Start(3)
	load.setPhase("node3 restarted")
	lc.WaitLog(3, "caught up", caughtUp, 30*time.Second)
	time.Sleep(time.Second)

	kill9(t, lc, 2)
	load.setPhase("node2 killed")
	waitDead(t, 2, clients[0])
	time.Sleep(2 * time.Second)
	load.finish(clients[0], "node3 killed", "node3 restarted", "node2 killed")
}
