package e2e

// Transactions are serializable, shown by a checker over a recorded history:
// concurrent clients run list-append transactions (Elle's workload) through
// client transactions against a real server, or against a cluster through
// every node, every invocation and outcome is recorded, and
// checker.CheckListAppend builds the ww/wr/rw dependency graph and looks for
// cycles (G0, G1c, G-single, G2), G1a/G1b reads and values never appended.
// After the workload, a read of every list through each client must hold
// every acknowledged append. The history file's path is logged; when a test
// fails, the history is copied to $TMPDIR/tyr-<test>-<seed>.jsonl.
//
// Reproduce: TYR_SEED=<seed> go test ./tests/e2e -run 'Test(Cluster)?ListAppend' -v

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/checker"
	"github.com/tyrstore/tyr/internal/history"
	"github.com/tyrstore/tyr/internal/listappend"
	"github.com/tyrstore/tyr/internal/testserver"
)

func TestListAppendSerializable(t *testing.T) {
	seed := seedFromEnv(t)
	srv := testserver.Start(t)
	c := srv.Client()
	const ks = "listappend"
	if _, err := c.CreateKeyspace(context.Background(), ks, client.KeyspaceConfig{ChunkSize: 4096, MVCC: true}); err != nil {
		t.Fatal(err)
	}
	run := runListAppend(t, context.Background(), "listappend",
		listappend.Config{Keyspace: ks, Processes: listAppendProcesses, TxnsEach: listAppendTxnsEach,
			Keys: listAppendKeys, Seed: seed, Deadline: 10 * time.Second},
		func(int) *client.Client { return c }, []*client.Client{c})
	run.check(t)
	if run.result.OK < listAppendProcesses*listAppendTxnsEach/4 || run.result.Fail == 0 {
		t.Fatalf("seed %d: a weak history proves little: %s", seed, run.result)
	}
}

// TestCheckerCatchesSkippedValidation runs the same workload against a
// server built with tyr_broken_skip_read_checks, whose commits skip the
// read validation; the checker must report anomalies, which shows the
// serializable verdict above is not vacuous.
func TestCheckerCatchesSkippedValidation(t *testing.T) {
	seed := seedFromEnv(t)
	srv := testserver.StartTagged(t, "tyr_broken_skip_read_checks")
	c := srv.Client()
	const ks = "listappend"
	if _, err := c.CreateKeyspace(context.Background(), ks, client.KeyspaceConfig{ChunkSize: 4096, MVCC: true}); err != nil {
		t.Fatal(err)
	}
	run := runListAppend(t, context.Background(), "listappend-broken",
		listappend.Config{Keyspace: ks, Processes: listAppendProcesses, TxnsEach: listAppendTxnsEach,
			Keys: listAppendKeys, Seed: seed, Deadline: 10 * time.Second},
		func(int) *client.Client { return c }, []*client.Client{c})
	if run.result.Valid() {
		t.Fatalf("seed %d: the checker found nothing wrong with a server that skips read validation: %s", seed, run.result)
	}
}

const listAppendProcesses, listAppendTxnsEach, listAppendKeys = 8, 120, 5

// TestClusterListAppend runs on each cluster shape (clusterShapes), MVCC
// on: 12 clients spread over the nodes run list-append transactions on 8
// lists, so commits are coordinated by every node, contend for the same
// blobs, and mostly span blobs of different version managers. The recorded
// history has no anomaly, every acknowledged append is in the final read
// of its list through each node, the history has enough committed
// transactions, aborts and non-empty reads for the verdict to mean
// something, and enough of the transactions commit (listAppendCommitShare).
func TestClusterListAppend(t *testing.T) {
	const (
		ks        = "cluster-listappend"
		processes = 12
		txnsEach  = 30
		keys      = 8
		// runFor bounds the workload, so a slow machine gives a shorter
		// history instead of a timeout; the minimum below still applies.
		runFor       = 12 * time.Second
		minCommitted = 80
	)
	seed := seedFromEnv(t)
	forEachShape(t, func(t *testing.T, s clusterShape) {
		lc, admin := txnCluster(t, s.nodes, ks, client.KeyspaceConfig{ChunkSize: 4096, Replication: uint32(s.replication), MVCC: true})
		p := clusterPlacement(t, lc, ks, s.replication)
		var lists []string
		for k := range keys {
			lists = append(lists, listappend.Key(k))
		}
		t.Logf("the %d lists have %d distinct sets of version managers", keys, p.vmSets(lists...))
		// A connection per process: commits of process p go through node
		// p%nodes.
		clients := make([]*client.Client, processes)
		for i := range clients {
			clients[i] = dial(t, lc.Endpoints[i%s.nodes])
		}
		ctx, cancel := context.WithTimeout(context.Background(), runFor)
		defer cancel()
		began := time.Now()
		run := runListAppend(t, ctx, "cluster-listappend-"+s.name,
			listappend.Config{Keyspace: ks, Processes: processes, TxnsEach: txnsEach, Keys: keys, Seed: seed,
				Deadline: clusterOpTimeout},
			func(i int) *client.Client { return clients[i%processes] }, admin)
		elapsed := time.Since(began)
		spanning, multi := run.spanning(t, p)
		w := run.workload
		t.Logf("%s: %v for %d txns: %d committed (%.1f/s), %d aborted, %d unknown; %d committed reads saw a non-empty list; "+
			"%d committed txns touched several lists, %d of them lists of different version managers",
			s.name, elapsed.Round(time.Millisecond), w.total(), w.ok, float64(w.ok)/elapsed.Seconds(),
			w.fail, w.info, run.nonEmpty, multi, spanning)
		run.check(t)
		if w.info > 0 {
			// Counted with the aborts below, not a failure of its own: the
			// checker counts each such txn as committed or not, whichever
			// its reads require. On a loaded machine a node stalled for
			// over 2 s catches up, refusing commits meanwhile.
			t.Logf("%d txns of unknown outcome: %s", w.info, run.infoErrors.String())
		}
		if w.ok < minCommitted || w.fail == 0 || run.nonEmpty == 0 {
			t.Errorf("seed %d: a weak history proves little: %d committed (want at least %d), %d aborted, %d non-empty reads",
				seed, w.ok, minCommitted, w.fail, run.nonEmpty)
		}
		if float64(w.ok) < listAppendCommitShare*float64(w.total()) {
			t.Errorf("seed %d: %d of %d txns committed (%.1f%%; %d aborted, %d unknown), want at least %.0f%%",
				seed, w.ok, w.total(), 100*float64(w.ok)/float64(max(1, w.total())), w.fail, w.info, 100*listAppendCommitShare)
		}
		if p.vmSets(lists...) > 1 && spanning == 0 {
			t.Errorf("no committed txn touched lists of different version managers")
		}
		if t.Failed() {
			t.Logf("node warnings and errors:\n%s%s", lc.LogLines("level=WARN", 20), lc.LogLines("level=ERROR", 20))
		}
	})
}

// listAppendCommitShare is the share of TestClusterListAppend's txns that
// must commit. A txn has 1 to 4 micro-ops, each a read or an append of one
// of 8 lists: about 1.2 lists read and 1.2 appended, and 23% of the txns
// read nothing, so nothing can abort them. Another txn appends to a list
// one reads with probability about 1.2×1.2/8 ≈ 0.18, so while one is in
// flight the 11 other processes commit about 11×0.18×p ≈ 2p txns that
// invalidate it if a share p of the txns commits: p ≈ 0.23+0.77×e^(-2p),
// p ≈ 0.5. Half of that must be met.
const listAppendCommitShare = 0.25

// spanning counts the committed workload txns of the run that touched
// several lists (multi), and those of them whose lists do not all have
// the same version managers.
func (r *listAppendRun) spanning(t *testing.T, p placement) (spanning, multi int) {
	t.Helper()
	completed, err := history.LoadPairs(r.path)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range completed {
		if op.Process >= finalProcess || op.Type != history.OK {
			continue
		}
		var mops []history.MicroOp
		if err := json.Unmarshal(op.Output, &mops); err != nil {
			t.Fatalf("op %d: %v", op.Index, err)
		}
		var keys []string
		for _, m := range mops {
			if !slices.Contains(keys, m.Key) {
				keys = append(keys, m.Key)
			}
		}
		if len(keys) > 1 {
			multi++
			if p.spansVMs(keys...) {
				spanning++
			}
		}
	}
	return spanning, multi
}

// listAppendRun is a recorded list-append run and what was found in it.
type listAppendRun struct {
	seed   uint64
	path   string // the history file
	keep   string // where the history is copied if the test fails
	result checker.ListAppendResult
	// workload counts the workload's txns by outcome, without the final
	// reads.
	workload outcomes
	// nonEmpty counts the reads of committed workload txns that saw a
	// non-empty list.
	nonEmpty int
	// lost lists the acknowledged appends missing from a final read.
	lost       []string
	infoErrors errorTally
}

type outcomes struct{ ok, fail, info int }

func (o outcomes) total() int { return o.ok + o.fail + o.info }

// finalProcess is the first process number of the final reads, beyond any
// the workload uses (it takes a new one only after an unknown outcome).
const finalProcess = 1 << 20

// runListAppend runs the list-append workload of cfg until it is done or
// ctx ends, process p through clientOf(p), recording it; then reads every
// list in one transaction through each of finals, recorded in the same
// history, and checks it all. name names the history kept if the test
// fails.
func runListAppend(t *testing.T, ctx context.Context, name string, cfg listappend.Config,
	clientOf func(p int) *client.Client, finals []*client.Client) *listAppendRun {
	t.Helper()
	run := &listAppendRun{seed: cfg.Seed, path: filepath.Join(t.TempDir(), "listappend.jsonl"),
		keep: filepath.Join(os.TempDir(), fmt.Sprintf("tyr-%s-%d.jsonl", name, cfg.Seed))}
	// Registered after t.TempDir, so it runs before the directory goes.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		b, err := os.ReadFile(run.path)
		if err == nil {
			err = os.WriteFile(run.keep, b, 0o644)
		}
		if err != nil {
			t.Logf("history %s not kept: %v", run.path, err)
			return
		}
		t.Logf("history kept at %s", run.keep)
	})
	rec, err := history.Create(run.path)
	if err != nil {
		t.Fatal(err)
	}
	listappend.Run(ctx, cfg, rec, clientOf)
	for i, c := range finals {
		finalRead(t, rec, cfg, finalProcess+i, c)
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	completed, err := history.LoadPairs(run.path)
	if err != nil {
		t.Fatal(err)
	}
	run.analyze(t, completed)
	return run
}

// analyze checks the completed ops of a run's history: with the checker,
// and for appends acknowledged but missing from a final read; and counts
// what the history holds.
func (r *listAppendRun) analyze(t *testing.T, completed []history.Completed) {
	t.Helper()
	r.result = checker.CheckListAppend(completed)
	t.Logf("seed %d; history %s: %s", r.seed, r.path, r.result)
	type finalView struct {
		op, process int
		lists       map[string][]int
	}
	var finals []finalView
	acked := map[string][]ackedAppend{}
	for _, op := range completed {
		if op.Process >= finalProcess {
			if op.Type == history.OK {
				finals = append(finals, finalView{op.Index, op.Process, readsOf(t, op)})
			}
			continue
		}
		switch op.Type {
		case history.OK:
			r.workload.ok++
		case history.Fail:
			r.workload.fail++
			continue
		default:
			r.workload.info++
			r.infoErrors.add(errors.New(op.Error))
			continue
		}
		var mops []history.MicroOp
		if err := json.Unmarshal(op.Output, &mops); err != nil {
			t.Fatalf("op %d: %v", op.Index, err)
		}
		for _, m := range mops {
			switch {
			case m.F == history.FAppend:
				acked[m.Key] = append(acked[m.Key], ackedAppend{value: m.Value, op: op.Index})
			case len(m.Read) > 0:
				r.nonEmpty++
			}
		}
	}
	for _, f := range finals {
		for key, appends := range acked {
			for _, a := range appends {
				if !slices.Contains(f.lists[key], a.value) {
					r.lost = append(r.lost, fmt.Sprintf("%s: %d, appended by op %d, missing from the final read op %d (process %d)",
						key, a.value, a.op, f.op, f.process))
				}
			}
		}
	}
	slices.Sort(r.lost)
}

type ackedAppend struct{ value, op int }

// finalRead reads every list in one transaction through c and records it
// as process. No workload txn runs any more, so a conflict can only come
// from a commit of unknown outcome still being retried: it is tried again.
func finalRead(t *testing.T, rec *history.Recorder, cfg listappend.Config, process int, c *client.Client) {
	t.Helper()
	const attempts = 5
	for attempt := 1; ; attempt++ {
		ops := make([]history.MicroOp, cfg.Keys)
		for k := range ops {
			ops[k] = history.Read(listappend.Key(k), nil)
		}
		op := rec.Invoke(process, history.FTxn, ops)
		ctx, cancel := context.WithTimeout(context.Background(), cfg.Deadline)
		err := listappend.Txn(ctx, c, cfg.Keyspace, ops)
		cancel()
		switch {
		case err == nil:
			rec.Ok(op, ops)
			return
		case errors.Is(err, client.ErrConflict) && attempt < attempts:
			rec.Fail(op, ops, err)
			time.Sleep(100 * time.Millisecond)
		default:
			rec.Info(op, ops, err)
			t.Errorf("final read of every list (process %d, attempt %d): %v", process, attempt, err)
			return
		}
	}
}

// readsOf returns the lists a committed txn read, by key.
func readsOf(t *testing.T, op history.Completed) map[string][]int {
	t.Helper()
	var mops []history.MicroOp
	if err := json.Unmarshal(op.Output, &mops); err != nil {
		t.Fatalf("op %d: %v", op.Index, err)
	}
	lists := map[string][]int{}
	for _, m := range mops {
		if m.Read != nil {
			lists[m.Key] = m.Read
		}
	}
	return lists
}

// check fails the test on any anomaly or lost append, with the details
// needed to find them in the kept history.
func (r *listAppendRun) check(t *testing.T) {
	t.Helper()
	if !r.result.Valid() {
		var lines []string
		for i, a := range r.result.Anomalies {
			if i == 20 {
				lines = append(lines, fmt.Sprintf("… and %d more", len(r.result.Anomalies)-i))
				break
			}
			lines = append(lines, fmt.Sprintf("%+v", a))
		}
		t.Errorf("seed %d: not serializable: %s (history kept at %s):\n%s", r.seed, r.result, r.keep, strings.Join(lines, "\n"))
	}
	if len(r.lost) > 0 {
		t.Errorf("seed %d: %d acknowledged appends lost (history kept at %s): %s",
			r.seed, len(r.lost), r.keep, strings.Join(r.lost[:min(len(r.lost), 20)], "; "))
	}
}
