package e2e

// TestCrash proves that an acknowledged commit to a Sync keyspace survives a
// crash: each round, several writers commit writes, appends, truncates and
// two-blob transactions to blobs of their own, the server is killed with
// SIGKILL while they run, restarted on the same data directory, and every
// blob must then hold exactly what the acknowledged commits made of it, plus
// at most the one commit per writer that was in flight at the kill — applied
// entirely (to both blobs of a two-blob commit) or not at all. Keyspaces
// created (and dropped) before a kill must be there (and gone) after it, with
// their configuration.
//
// Reproduce a failure with the seed it prints (the kill time still varies):
//
//	TYR_SEED=<seed> TYR_CRASH_ROUNDS=<n> go test -race -count=1 ./tests/e2e -run 'TestCrash' -v
//
// TYR_CRASH_ROUNDS defaults to 3.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/testserver"
)

const (
	crashWriters  = 4
	crashKeyspace = "crash"
	crashSizeMax  = 512 << 10
)

// crashOp is one op of a writer's commit.
type crashOp struct {
	key string
	op  modelOp
}

// crashWriter owns two blobs and commits to them one commit at a time.
type crashWriter struct {
	id      int
	keys    [2]string
	r       *rand.Rand
	blobs   map[string]*modelBlob // acknowledged state
	pending []crashOp             // the commit in flight at the kill, if any
	acked   int
	err     error // the error that stopped the writer
}

func (w *crashWriter) genCommit() []crashOp {
	r := w.r
	key := w.keys[r.IntN(2)]
	size := len(w.blobs[key].data)
	data := func(n int) []byte { return randomBytes(r, n) }
	switch p := r.IntN(20); {
	case size > crashSizeMax || p < 2:
		return []crashOp{{key, modelOp{kind: "truncate", size: r.IntN(size + 1)}}}
	case p < 3:
		return []crashOp{{key, modelOp{kind: "truncate", size: size + r.IntN(3*modelChunk)}}}
	case p < 10:
		return []crashOp{{key, modelOp{kind: "write", offset: r.IntN(size + modelChunk),
			data: data(1 + r.IntN(modelPage+2*modelChunk))}}}
	case p < 16:
		return []crashOp{{key, modelOp{kind: "append", data: data(1 + r.IntN(3*modelChunk))}}}
	default: // both blobs in one transaction
		a, b := w.keys[0], w.keys[1]
		return []crashOp{
			{a, modelOp{kind: "write", offset: r.IntN(len(w.blobs[a].data) + 1), data: data(1 + r.IntN(2*modelChunk))}},
			{b, modelOp{kind: "append", data: data(1 + r.IntN(2*modelChunk))}},
		}
	}
}

// applyTo applies ops to copies of blobs and returns the copies.
func applyCrashOps(blobs map[string]*modelBlob, ops []crashOp) (map[string]*modelBlob, error) {
	out := map[string]*modelBlob{}
	for k, b := range blobs {
		out[k] = &modelBlob{data: bytes.Clone(b.data), exists: b.exists}
	}
	for _, o := range ops {
		if _, err := out[o.key].apply(o.op); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// run commits until a commit fails, then records it as pending.
func (w *crashWriter) run(ctx context.Context, c *client.Client) {
	for ctx.Err() == nil {
		ops := w.genCommit()
		next, err := applyCrashOps(w.blobs, ops)
		if err != nil {
			w.err = fmt.Errorf("model: %w", err)
			return
		}
		cops := make([]client.Op, len(ops))
		for i, o := range ops {
			cops[i] = o.op.clientOp(o.key)
		}
		w.pending = ops
		opCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err = c.Commit(opCtx, crashKeyspace, cops...)
		cancel()
		if err != nil {
			w.err = err
			return
		}
		w.pending = nil
		w.blobs = next
		w.acked++
	}
}

func describeCrashOps(ops []crashOp) string {
	parts := make([]string, len(ops))
	for i, o := range ops {
		parts[i] = o.key + ": " + o.op.String()
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

type keyspaceView struct {
	Name   string
	Config client.KeyspaceConfig
}

func listKeyspaceViews(t *testing.T, c *client.Client) []keyspaceView {
	t.Helper()
	list, err := c.ListKeyspaces(context.Background())
	if err != nil {
		t.Fatalf("list keyspaces: %v", err)
	}
	out := make([]keyspaceView, len(list))
	for i, k := range list {
		out[i] = keyspaceView{k.Name, k.Config}
	}
	return out
}

func TestCrash(t *testing.T) {
	seed := seedFromEnv(t)
	rounds := intFromEnv(t, "TYR_CRASH_ROUNDS", 3)
	rng := rand.New(rand.NewPCG(seed, 0xc0ffee))
	srv := testserver.Start(t)
	c := srv.Client()
	ctx := context.Background()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d (TYR_SEED=%d): %s", seed, seed, fmt.Sprintf(format, args...))
	}

	if _, err := c.CreateKeyspace(ctx, crashKeyspace,
		client.KeyspaceConfig{ChunkSize: modelChunk, MVCC: true, Sync: true}); err != nil {
		fail("create keyspace: %v", err)
	}
	writers := make([]*crashWriter, crashWriters)
	for i := range writers {
		w := &crashWriter{id: i, keys: [2]string{fmt.Sprintf("w%d/a", i), fmt.Sprintf("w%d/b", i)},
			r: rand.New(rand.NewPCG(seed, uint64(i+1))), blobs: map[string]*modelBlob{}}
		for _, k := range w.keys {
			if err := c.Create(ctx, crashKeyspace, k); err != nil {
				fail("create %s: %v", k, err)
			}
			w.blobs[k] = &modelBlob{exists: true}
		}
		writers[i] = w
	}

	for round := 1; round <= rounds; round++ {
		// Keyspace changes acknowledged before the kill: one created, with a
		// configuration drawn at random, and every other round the one
		// created two rounds ago dropped.
		name := fmt.Sprintf("crash-r%d", round)
		cfg := client.KeyspaceConfig{ChunkSize: uint64(modelChunk) << rng.IntN(19),
			Replication: uint32(1 + rng.IntN(7)), MVCC: rng.IntN(2) == 0, Sync: rng.IntN(2) == 0}
		if _, err := c.CreateKeyspace(ctx, name, cfg); err != nil {
			fail("round %d: create keyspace %s: %v", round, name, err)
		}
		if round > 2 && round%2 == 1 {
			if err := c.DropKeyspace(ctx, fmt.Sprintf("crash-r%d", round-2)); err != nil {
				fail("round %d: drop keyspace: %v", round, err)
			}
		}
		wantKeyspaces := listKeyspaceViews(t, c)

		var killed atomic.Bool
		var wg sync.WaitGroup
		runCtx, stop := context.WithCancel(ctx)
		for _, w := range writers {
			w.err, w.pending, w.acked = nil, nil, 0
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.run(runCtx, c)
				if !killed.Load() {
					t.Errorf("seed %d round %d writer %d: commit %s failed before the kill: %v",
						seed, round, w.id, describeCrashOps(w.pending), w.err)
				}
			}()
		}
		time.Sleep(time.Duration(200+rng.IntN(600)) * time.Millisecond)
		killed.Store(true)
		srv.Kill()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			stop()
			<-done
			t.Errorf("seed %d round %d: writers still running 60s after the kill", seed, round)
		}
		stop()
		if t.Failed() {
			t.FailNow()
		}
		acked := 0
		for _, w := range writers {
			acked += w.acked
		}
		t.Logf("round %d: %d commits acknowledged before the kill", round, acked)
		if acked == 0 {
			fail("round %d: no commit was acknowledged before the kill", round)
		}

		_ = c.Close()
		srv.Restart()
		c = srv.Client()
		if got := listKeyspaceViews(t, c); !reflect.DeepEqual(got, wantKeyspaces) {
			fail("round %d: keyspaces after restart:\n  %+v\nwant\n  %+v", round, got, wantKeyspaces)
		}
		inFlight, landed := 0, 0
		for _, w := range writers {
			if w.pending != nil {
				inFlight++
			}
		}
		for _, w := range writers {
			got := map[string][]byte{}
			for _, k := range w.keys {
				data, info, err := c.ReadPart(ctx, crashKeyspace, k, 0, client.PayloadBytesMax)
				if err != nil {
					fail("round %d: read %s after restart: %v", round, k, err)
				}
				if info.Size != uint64(len(data)) {
					fail("round %d: read %s: %d bytes of a blob of size %d", round, k, len(data), info.Size)
				}
				got[k] = data
			}
			matches := func(blobs map[string]*modelBlob) bool {
				for _, k := range w.keys {
					if !bytes.Equal(got[k], blobs[k].data) {
						return false
					}
				}
				return true
			}
			switch {
			case matches(w.blobs):
			case w.pending != nil:
				after, err := applyCrashOps(w.blobs, w.pending)
				if err != nil {
					fail("round %d: model: %v", round, err)
				}
				if !matches(after) {
					var diffs []string
					for _, k := range w.keys {
						diffs = append(diffs, fmt.Sprintf("%s: vs acknowledged: %s; vs in-flight applied: %s",
							k, describeDiff(got[k], w.blobs[k].data), describeDiff(got[k], after[k].data)))
					}
					fail("round %d writer %d: after restart the blobs match neither the acknowledged state "+
						"nor it plus the in-flight commit %s (stopped by %v):\n  %s",
						round, w.id, describeCrashOps(w.pending), w.err, strings.Join(diffs, "\n  "))
				}
				w.blobs = after // the in-flight commit made it: it is part of the state now
				landed++
			default:
				var diffs []string
				for _, k := range w.keys {
					diffs = append(diffs, k+": "+describeDiff(got[k], w.blobs[k].data))
				}
				fail("round %d writer %d: after restart the blobs differ from the acknowledged state "+
					"(no commit in flight; stopped by %v):\n  %s", round, w.id, w.err, strings.Join(diffs, "\n  "))
			}
			if w.err != nil && !errors.Is(w.err, client.ErrUnavailable) && !errors.Is(w.err, context.Canceled) {
				t.Logf("round %d writer %d stopped by %v", round, w.id, w.err)
			}
		}
		t.Logf("round %d: %d commits were in flight at the kill; %d of them visibly took effect", round, inFlight, landed)
	}
}
