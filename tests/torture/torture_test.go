// Package torture runs real tyr server processes under faults while clients
// record a history, then checks the history for anomalies.
package torture

// TestTorture proves that single-blob reads and whole-value writes on a
// real tyr server stay linearizable while the server is killed with SIGKILL
// and restarted, and frozen with SIGSTOP and thawed with SIGCONT, on a
// seeded schedule. Concurrent clients read and write a few blobs with a
// deadline per op; an op that times out or loses its connection has an
// unknown outcome and is recorded as "info". The history (Elle-compatible
// JSON lines) is checked with internal/checker; any anomaly fails the test
// and keeps the history file, whose path is printed. Progress is checked
// too: the ops that failed or ended unknown under each kind of fault are
// counted and bounded, and work on keys of each client's own must get done
// once the faults are over (progress_test.go).
//
// Each test runs a sequence of such schedules, each on a fresh server or
// cluster from a seed of its own, for TYR_TORTURE_DURATION in all (default
// 20s), in schedules of TYR_TORTURE_SCHEDULE each (default 45s); see
// schedules_test.go. Reproduce the schedule of a failure (op timing still
// varies) with the command the failure prints:
//
//	TYR_TORTURE_SEED=<seed> TYR_TORTURE_DURATION=<length> go test -race -count=1 -run '^TestTorture$' -v ./tests/torture
//
// TYR_TORTURE_KEEP=1 keeps the history of a passing schedule too.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/checker"
	"github.com/tyrstore/tyr/internal/history"
	"github.com/tyrstore/tyr/internal/testserver"
)

const (
	tortureClients   = 8
	tortureKeys      = 4
	tortureKeyspace  = "torture"
	tortureDeadline  = 2 * time.Second
	tortureFillerMax = 48 << 10 // blobs span several 16 KiB chunks
	finalProcess     = 1 << 20  // process of the reads after the faults end
)

// blobStore is the register workload's view of a tyr server.
type blobStore struct{ c *client.Client }

func (s blobStore) Read(ctx context.Context, key string) ([]byte, error) {
	data, info, err := s.c.ReadPart(ctx, tortureKeyspace, key, 0, client.PayloadBytesMax)
	if errors.Is(err, client.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if info.Size != uint64(len(data)) {
		return nil, fmt.Errorf("read %d bytes of a blob of %d", len(data), info.Size)
	}
	if data == nil {
		data = []byte{}
	}
	return data, nil
}

// Write replaces the blob in one commit: a write at 0 that creates the blob
// and a truncate to the new length, so no reader sees a mix of two values.
func (s blobStore) Write(ctx context.Context, key string, content []byte) error {
	_, err := s.c.Commit(ctx, tortureKeyspace,
		client.WriteOp(key, 0, content, true), client.TruncateOp(key, uint64(len(content))))
	return err
}

// Definite is true for errors the server returns after deciding not to
// apply a commit, and for a commit refused before anything was applied
// (client.Refused: a node that sees no majority alive, one catching up);
// anything else (a timeout, a lost connection) leaves the
// outcome unknown.
func (blobStore) Definite(err error) bool {
	if client.Refused(err) {
		return true
	}
	for _, e := range []error{client.ErrInvalidArgument, client.ErrTooLarge, client.ErrConflict,
		client.ErrExists, client.ErrNotFound, client.ErrOutOfRange} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// fault is one step of the nemesis schedule.
type fault struct {
	at   time.Duration // planned start, from the start of the workload
	kind string        // "kill" (SIGKILL, then restart), "pause" (SIGSTOP, then SIGCONT), "isolate" or "lossy" (see partition_test.go)
	down time.Duration // how long the server stays dead or frozen
	node int           // which server, from 1
}

func (f fault) String() string {
	return fmt.Sprintf("%8v %-5s node%d for %v", f.at.Round(time.Millisecond), f.kind, f.node, f.down)
}

// schedule draws the faults for a run of length d on nodes servers from
// r: a healthy gap of 0.5-2s, then a kill (down 0-500ms before the
// restart) or a pause of 0.2-3s, long enough at times to outlast the
// clients' deadline, of a server drawn at random.
func schedule(r *rand.Rand, d time.Duration, nodes int) []fault {
	return drawFaults(r, d, nodes, 500*time.Millisecond, 2*time.Second, func() (string, time.Duration) {
		if r.IntN(2) == 0 {
			return "kill", time.Duration(r.IntN(500)) * time.Millisecond
		}
		return "pause", time.Duration(200+r.IntN(2800)) * time.Millisecond
	})
}

// drawFaults draws faults until d-1s: each after a healthy gap of gapMin
// to gapMax, on a node drawn at random, of the kind and length draw gives.
func drawFaults(r *rand.Rand, d time.Duration, nodes int, gapMin, gapMax time.Duration,
	draw func() (kind string, down time.Duration)) []fault {
	var out []fault
	at := time.Duration(0)
	for {
		at += gapMin + time.Duration(r.IntN(int((gapMax-gapMin)/time.Millisecond)))*time.Millisecond
		f := fault{at: at, node: 1 + r.IntN(nodes)}
		f.kind, f.down = draw()
		if at+f.down > d-time.Second {
			return out
		}
		out = append(out, f)
		at += f.down
	}
}

func durationFromEnv(t *testing.T) time.Duration {
	t.Helper()
	s := os.Getenv("TYR_TORTURE_DURATION")
	if s == "" {
		return 20 * time.Second
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("TYR_TORTURE_DURATION=%q: want a positive duration such as 30m", s)
	}
	return d
}

// tortureTarget is what a torture run works against: the endpoints its
// clients dial (client i dials endpoint i mod n), and inject, which applies
// one fault and returns once it is over.
type tortureTarget struct {
	endpoints []string
	dialOpts  []client.Option
	inject    func(f fault)
	// inStep, if set, returns when the target was back in step after the
	// nemesis was done with a fault at done (progress_test.go).
	inStep func(done time.Time) time.Time
}

func TestTorture(t *testing.T) {
	runSchedules(t, func(t *testing.T, seed uint64, length time.Duration, rep *scheduleReport) {
		faults := schedule(rand.New(rand.NewPCG(seed, 0x70e7)), length, 1)
		srv := testserver.Start(t)
		admin := srv.Client()
		if _, err := admin.CreateKeyspace(context.Background(), tortureKeyspace,
			client.KeyspaceConfig{ChunkSize: 16 << 10, MVCC: true, Sync: true}); err != nil {
			t.Fatalf("create keyspace: %v", err)
		}
		_ = admin.Close()
		// Restart keeps the endpoint; read it once, before the nemesis runs.
		runTorture(t, seed, length, faults, rep, tortureTarget{endpoints: []string{srv.Endpoint}, inject: func(f fault) {
			switch f.kind {
			case "kill":
				srv.Kill()
				time.Sleep(f.down)
				srv.Restart()
			case "pause":
				if err := srv.Pause(); err != nil {
					t.Fatalf("pause: %v", err)
				}
				time.Sleep(f.down)
				if err := srv.Resume(); err != nil {
					t.Fatalf("resume: %v", err)
				}
			}
		}})
	})
}

// runTorture runs the register workload against target for duration while
// the nemesis applies faults, then, settleAfterHeal after the last fault
// ended, the register end probe (progress_test.go), and checks the history
// and the progress made. It counts the faults injected and the register ops
// in rep, and returns when each fault was in effect (until target.inStep).
func runTorture(t *testing.T, seed uint64, duration time.Duration, faults []fault, rep *scheduleReport, target tortureTarget) []faultWindow {
	var plan strings.Builder
	for _, f := range faults {
		fmt.Fprintf(&plan, "\n  %v", f)
	}
	t.Logf("duration %v, %d faults planned:%s", duration, len(faults), plan.String())

	dir, err := os.MkdirTemp("", "tyr-torture-")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "history.jsonl")
	recStart := time.Now() // the history's times count from a moment later by microseconds
	rec, err := history.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("history: %s", path)
	ctx := context.Background()

	keys := make([]string, tortureKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("reg/%d", i)
	}
	w := &workload{rec: rec, keys: keys, clients: tortureClients, deadline: tortureDeadline, fillerMax: tortureFillerMax}
	var mu sync.Mutex
	var clients []*client.Client
	dialer := func(id int) func() registerStore {
		return func() registerStore {
			c, err := client.Dial(target.endpoints[id%len(target.endpoints)], target.dialOpts...)
			if err != nil {
				panic(err) // Dial only fails on a malformed endpoint
			}
			mu.Lock()
			clients = append(clients, c)
			mu.Unlock()
			return blobStore{c}
		}
	}
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range clients {
			_ = c.Close()
		}
	}()

	runCtx, stop := context.WithTimeout(ctx, duration)
	defer stop()
	start := time.Now()
	var wg sync.WaitGroup
	for id := 0; id < tortureClients; id++ {
		wg.Add(1)
		dial := dialer(id)
		store := dial()
		go func() {
			defer wg.Done()
			w.run(runCtx, id, rand.New(rand.NewPCG(seed, uint64(id+1))), 0, store, dial)
		}()
	}

	// The nemesis runs on the test goroutine, since a fault may fail the test.
	injected := rep.faults
	var windows []faultWindow
	healed := start // when the last fault ended
	for _, f := range faults {
		if wait := time.Until(start.Add(f.at)); wait > 0 {
			time.Sleep(wait)
		}
		if time.Since(start) > duration {
			break
		}
		from := time.Now()
		target.inject(f)
		healed = time.Now()
		windows = append(windows, faultWindow{kind: f.kind, from: from, to: healed})
		injected[f.kind]++
	}
	wg.Wait()
	rep.ops["register"] = w.ops.Load()
	elapsed := time.Since(start)

	// With the faults over, every key must be readable, and its value is
	// the last word on which acknowledged writes survived.
	final := dialer(0)()
	for i, key := range keys {
		var content []byte
		var err error
		for attempt := 0; attempt < 30; attempt++ {
			op := rec.Invoke(finalProcess+i, history.FRead, history.Register{Key: key})
			opCtx, cancel := context.WithTimeout(ctx, tortureDeadline)
			content, err = final.Read(opCtx, key)
			cancel()
			if err == nil {
				var got *string
				if content != nil {
					got = history.Str(decodeValue(content))
				}
				rec.Ok(op, history.Register{Key: key, Value: got})
				break
			}
			rec.Fail(op, history.Register{Key: key}, err)
			time.Sleep(time.Second)
		}
		if err != nil {
			t.Fatalf("final read of %s: %v", key, err)
		}
	}
	time.Sleep(time.Until(healed.Add(settleAfterHeal)))
	probe := registerProbe(rec, func(id int) registerStore { return dialer(id)() })
	if len(windows) > 0 {
		var b strings.Builder
		for i, w := range windows {
			fmt.Fprintf(&b, "\n  %-7s from %8v to %8v", w.kind, w.from.Sub(start).Round(time.Millisecond), w.to.Sub(start).Round(time.Millisecond))
			if target.inStep != nil {
				windows[i].to = target.inStep(w.to)
				fmt.Fprintf(&b, ", in step at %8v", windows[i].to.Sub(start).Round(time.Millisecond))
			}
		}
		t.Logf("faults in effect (from the start of the workload):%s", b.String())
	}
	if err := rec.Close(); err != nil {
		t.Fatalf("history: %v", err)
	}

	ops, err := history.LoadPairs(path)
	if err != nil {
		t.Fatal(err)
	}
	checkStart := time.Now()
	res := checker.CheckRegister(ops, checker.RegisterOptions{Timeout: max(5*time.Minute, duration),
		VisualizePath: filepath.Join(dir, "linearizability.html")})
	t.Logf("%d ops in %v (%d info, %d failed) under faults %v; checked in %v",
		w.ops.Load(), elapsed.Round(time.Millisecond), w.infos.Load(), w.fails.Load(), injected,
		time.Since(checkStart).Round(time.Millisecond))
	t.Logf("verdict: %v", res)
	if res.OK == 0 {
		t.Errorf("no op succeeded")
	}
	for _, a := range res.Anomalies {
		t.Errorf("seed %d: %v", seed, a)
	}
	bounds := progressBounds["register"]
	if len(target.endpoints) == 1 {
		bounds = maps.Clone(bounds)
		bounds["kill"] = oneServerKillMax
	}
	checkProgress(t, rep, "register", bounds, historySpans(t, path, func(p int) bool { return p < finalProcess }), windowsSince(windows, recStart))
	probe.check(t, rep, "register")
	if t.Failed() || os.Getenv("TYR_TORTURE_KEEP") != "" {
		t.Logf("history kept in %s", path)
		return windows
	}
	_ = os.RemoveAll(dir)
	return windows
}
