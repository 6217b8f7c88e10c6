package torture

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/checker"
	"github.com/tyrstore/tyr/internal/history"
)

// Progress. The history checkers accept any number of failed and unknown
// outcomes: a store that refused or lost most of its work would pass them.
// So each schedule also checks that work gets done:
//
//   - The nemesis records when each fault was in effect (faultWindow), and
//     each op of each workload counts, by its outcome (ok, fail, info),
//     under the fault it overlapped longest, or under "none" if it ran
//     entirely in fault-free time (checker.Progress). Under each fault
//     kind, the share of ops that failed or ended unknown must stay within
//     the bound below for that workload and kind (once at least
//     progressMinOps ops ran under it).
//   - Once the faults are over and the workloads have stopped, and
//     settleAfterHeal has passed since the last fault ended, the end probe
//     runs uncontended work: each worker does probeOps ops on keys of its
//     own, and every one of them must be done (probeDeadline,
//     probeWindow).
//
// Every schedule logs the counts, passed or failed, and the test's summary
// adds them up.

const (
	// settleAfterHeal is how long after the last fault ended (the node
	// restarted or resumed and caught up, the link healed) the end probe
	// starts: time for clients to reconnect and for leases to settle.
	settleAfterHeal = 3 * time.Second
	// probeOps is how many ops each worker of the end probe does.
	probeOps = 3
	// probeDeadline bounds one try of an op of the end probe: generous,
	// since the servers run with the race detector on a small shared
	// machine, so a try that runs out means the work did not get done, not
	// that it was slow. An op whose try ends unknown is not done.
	probeDeadline = 10 * time.Second
	// probeWindow: an op of the end probe refused for certain (nothing
	// applied: a read while every replica of a chunk catches up, as one
	// whose read lease lapsed on a loaded machine does) is tried again,
	// probeRetryPause apart, until this long after its first try; then it
	// is not done.
	probeWindow     = 15 * time.Second
	probeRetryPause = 200 * time.Millisecond
	// probeProcess is the first process number of the end probe in the
	// histories, above those of the workloads and the final reads.
	probeProcess = 2 << 20
	// progressMinOps: a share of fewer ops than this under one fault kind
	// says little (one unlucky op of three is a third), so the bounds
	// apply only from this many ops on; the counts are logged all the same.
	progressMinOps = 20
)

// Bounds on the share of a workload's ops, in one schedule, that may fail
// or end unknown under each fault kind. They were measured on a machine of
// two cores, servers built with the race detector, in about 45 schedules
// of 20 s and 45 s of the three tests: "at load 5-10" with only the
// torture test running, "at load 20-25" with other test suites on the same
// cores. The figures are the largest share in one schedule with at least
// progressMinOps ops.
const (
	// shortOpsFaultMax bounds register ops (2 s deadline) and list-append
	// transactions (5 s) under a kill, a pause or an isolation. Until a
	// killed node is declared dead, and while a node catches up, commits
	// whose chains hold it stall, and every register blob has a chunk on
	// most nodes, so a fault stalls most of this work: measured up to 49%
	// (kill), 61% (pause), 78% (isolate) at load 5-10; up to 94% (3 ops
	// of 51 done), 79% and 96% (8 of 191 done) at load 20-25; on one
	// server, whose kill stops all work, up to 88%. So the bound says no
	// more than that some of this work gets done under every such fault:
	// one op in a hundred, or one at all when fewer ran.
	shortOpsFaultMax = 0.99
	// oneServerKillMax: no bound for register ops under the kill of the
	// only server. While it is down no op can be done, and an op that
	// overlaps its downtime is done only if it began after the restart and
	// before the window's end: measured up to 88%, and 100% (26 ops) in a
	// schedule whose four kills came close together. That the work goes
	// on once the server is back is the end probe's to check, and the
	// fault-free bound's.
	oneServerKillMax = 1.0
	// shortOpsLossyMax: no bound for register ops and transactions under a
	// lossy link. At 256 kbit/s with a 100 ms queue, a node ships a 16 KiB
	// chunk in about half a second and drops what overflows, so most ops
	// whose chain or reads pass through it run out of time: measured up to
	// 81% (registers) and 87% (transactions) at load 5-10, 100% at load
	// 20-25.
	shortOpsLossyMax = 1.0
	// counterFaultMax bounds atomic adds under any fault: an add waits up
	// to counterDeadline, through the fault, so few fail; measured up to
	// 21% in one schedule (6 of 28 adds refused or unknown under kills),
	// under 5% in all others.
	counterFaultMax = 0.35
	// noFaultMax bounds register ops and adds that ran entirely in
	// fault-free time (after every node was back in step): measured 0% in
	// every schedule (about 35,000 register ops on one server; 280
	// register ops and 260 adds on the cluster, 360 and 330 on the
	// partitioned one).
	noFaultMax = 0.1
	// listAppendNoFaultMax bounds fault-free transactions. Four processes
	// append to five lists, so transactions conflict and abort even with
	// no fault: measured up to 32% (conflicts all, none unknown).
	listAppendNoFaultMax = 0.6
)

// progressBounds are the bounds by workload and fault kind.
var progressBounds = map[string]map[string]float64{
	"register": {"kill": shortOpsFaultMax, "pause": shortOpsFaultMax, "isolate": shortOpsFaultMax,
		"lossy": shortOpsLossyMax, checker.NoFault: noFaultMax},
	"list-append": {"kill": shortOpsFaultMax, "pause": shortOpsFaultMax, "isolate": shortOpsFaultMax,
		"lossy": shortOpsLossyMax, checker.NoFault: listAppendNoFaultMax},
	"counter": {"kill": counterFaultMax, "pause": counterFaultMax, "isolate": counterFaultMax,
		"lossy": counterFaultMax, checker.NoFault: noFaultMax},
}

// faultWindow is when a fault was in effect: from its injection until the
// nemesis was done with it (the node restarted or resumed and, when it
// must, caught up; the link healed) and, on a cluster, until every node
// that was catching up then has caught up (inStep).
type faultWindow struct {
	kind     string
	from, to time.Time
}

// Lines of a node's log that start and end a catch-up: a node catching up
// serves no reads of what it holds.
const (
	catchingUpLine = `msg="catching up"`
	caughtUpLine   = `msg="caught up"`
)

// inStep returns, from the nodes' logs, when the cluster was back in step
// after done: when the last node that was catching up at done caught up
// (done itself if none was, and now if one has not yet). A fault often
// outlasts the nemesis's part in it: a node cut off or slowed for less
// than its read lease, or paused for less than pauseNoticed, is not waited
// for, yet it, and at times the peers it kept from renewing their leases,
// may have to catch up once it is back.
func inStep(logs []string, done time.Time) time.Time {
	end := done
	for _, log := range logs {
		catching := false // at done
		var caught time.Time
		for _, line := range strings.Split(log, "\n") {
			starts, ends := strings.Contains(line, catchingUpLine), strings.Contains(line, caughtUpLine)
			if !starts && !ends {
				continue
			}
			at, ok := logTime(line)
			if !ok {
				continue
			}
			if !at.After(done) {
				catching = starts
				continue
			}
			if !catching || ends {
				caught = at
				break
			}
		}
		switch {
		case !catching:
		case caught.IsZero():
			end = later(end, time.Now()) // caught up after the log ends, if ever
		default:
			end = later(end, caught)
		}
	}
	return end
}

// logTime parses the time= field of a server log line.
func logTime(line string) (time.Time, bool) {
	const field = "time="
	i := strings.Index(line, field)
	if i < 0 {
		return time.Time{}, false
	}
	v, _, _ := strings.Cut(line[i+len(field):], " ")
	t, err := time.Parse(time.RFC3339Nano, v)
	return t, err == nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// windowsSince returns the windows on the clock of a history that started
// at base.
func windowsSince(ws []faultWindow, base time.Time) []checker.Window {
	out := make([]checker.Window, len(ws))
	for i, w := range ws {
		out[i] = checker.Window{Kind: w.kind, From: w.from.Sub(base).Nanoseconds(), To: w.to.Sub(base).Nanoseconds()}
	}
	return out
}

// historySpans returns the ops of the history at path whose process keep
// accepts.
func historySpans(t *testing.T, path string, keep func(int) bool) []checker.Span {
	t.Helper()
	events, err := history.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return checker.Spans(events, keep)
}

// checkProgress counts a workload's outcomes by fault window, keeps the
// counts in rep, and fails the test where they exceed bounds (the
// workload's progressBounds, or others), with a few of the errors.
func checkProgress(t *testing.T, rep *scheduleReport, workload string, bounds map[string]float64, spans []checker.Span, windows []checker.Window) {
	t.Helper()
	tallies := checker.Progress(spans, windows)
	rep.progress[workload] = tallies
	t.Logf("%s outcomes ok/fail/info by fault: %s", workload, checker.FormatProgress(tallies))
	for _, kind := range slices.Sorted(maps.Keys(tallies)) {
		n := tallies[kind]
		bound, ok := bounds[kind]
		switch {
		case !ok:
			t.Errorf("%s: no progress bound for ops under %s", workload, kind)
		case n.Total() >= progressMinOps && n.Unsuccessful() > bound:
			var errs []string
			for _, s := range spans {
				if s.Type != history.OK && len(errs) < 5 && checker.Classify(s, windows) == kind {
					errs = append(errs, fmt.Sprintf("%s at %v: %s", s.Type, time.Duration(s.Call).Round(time.Millisecond), s.Error))
				}
			}
			t.Errorf("%s under %s: %d ops, %d failed and %d unknown (%.0f%%), beyond the bound of %.0f%%; the first:\n\t%s",
				workload, kind, n.Total(), n.Fail, n.Info, 100*n.Unsuccessful(), 100*bound, strings.Join(errs, "\n\t"))
		}
	}
}

// probeCount is what an end probe did: ops it ran and those done, and the
// outcomes of every attempt.
type probeCount struct {
	ops, done int
	attempts  checker.Tally
}

func (c probeCount) plus(d probeCount) probeCount {
	return probeCount{c.ops + d.ops, c.done + d.done, c.attempts.Plus(d.attempts)}
}

func (c probeCount) String() string {
	return fmt.Sprintf("%d/%d done (attempts %v)", c.done, c.ops, c.attempts)
}

// probeResult gathers the outcomes of an end probe.
type probeResult struct {
	mu     sync.Mutex
	count  probeCount
	errors []string
}

// run runs worker(p) for every p below n at once, and returns res once
// every worker is done.
func (res *probeResult) run(n int, worker func(p int)) *probeResult {
	var wg sync.WaitGroup
	for p := range n {
		wg.Go(func() { worker(p) })
	}
	wg.Wait()
	return res
}

// attempt is one try of a probe op: its outcome, and the error of one
// that did not succeed.
type attempt func(ctx context.Context) (history.Type, error)

// do runs one probe op of a worker: it tries it, within probeDeadline each
// time, until it succeeds, ends unknown, or probeWindow has passed since
// the first try. A try refused for certain (history.Fail: nothing applied)
// is tried again after probeRetryPause. It reports whether the op succeeded.
func (p *probeResult) do(what string, try attempt) bool {
	p.mu.Lock()
	p.count.ops++
	p.mu.Unlock()
	start := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), probeDeadline)
		typ, err := try(ctx)
		cancel()
		p.mu.Lock()
		p.count.attempts.Add(typ)
		if typ == history.OK {
			p.count.done++
		}
		p.mu.Unlock()
		if typ == history.OK {
			return true
		}
		if typ == history.Info || time.Since(start) > probeWindow {
			p.mu.Lock()
			p.errors = append(p.errors, fmt.Sprintf("%s: %v (%s after %v)", what, err, typ, time.Since(start).Round(time.Millisecond)))
			p.mu.Unlock()
			return false
		}
		time.Sleep(probeRetryPause)
	}
}

// fail records a probe op that succeeded with a wrong result.
func (p *probeResult) fail(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.count.done--
	p.count.attempts.OK--
	p.count.attempts.Fail++
	p.errors = append(p.errors, fmt.Sprintf(format, args...))
}

// check keeps the probe's counts in rep and fails the test unless every op
// succeeded.
func (p *probeResult) check(t *testing.T, rep *scheduleReport, workload string) {
	t.Helper()
	rep.probe[workload] = p.count
	t.Logf("end probe, %s: %v", workload, p.count)
	if p.count.done != p.count.ops || p.count.ops == 0 {
		slices.Sort(p.errors)
		t.Errorf("end probe, %s: %d of %d ops not done once the faults were over:\n\t%s",
			workload, p.count.ops-p.count.done, p.count.ops, strings.Join(p.errors, "\n\t"))
	}
}

// outcome is the history type of an op's error: OK, Fail if it certainly
// took no effect, else Info.
func outcome(err error) history.Type {
	switch {
	case err == nil:
		return history.OK
	case blobStore{}.Definite(err):
		return history.Fail
	}
	return history.Info
}

// registerProbe runs the register end probe: each of the workload's
// clients, on a fresh connection from dial, writes a key of its own
// probeOps times, each value spanning two chunks, and reads each value back.
// The ops are recorded in rec, so the linearizability check covers them too.
func registerProbe(rec *history.Recorder, dial func(id int) registerStore) *probeResult {
	res := &probeResult{}
	return res.run(tortureClients, func(id int) {
		store := dial(id)
		key := fmt.Sprintf("own/%d", id)
		process := probeProcess + id
		for j := range probeOps {
			var value string
			tries := 0
			if !res.do(fmt.Sprintf("client %d: write %d of %s", id, j, key), func(ctx context.Context) (history.Type, error) {
				// A fresh value each try: the checker tells writes apart by value.
				value = fmt.Sprintf("own-%d-%d-%d", id, j, tries)
				tries++
				op := rec.Invoke(process, history.FWrite, history.Register{Key: key, Value: &value})
				err := store.Write(ctx, key, encodeValue(value, 24<<10))
				switch typ := outcome(err); typ {
				case history.OK:
					rec.Ok(op, history.Register{Key: key, Value: &value})
					return typ, nil
				case history.Fail:
					rec.Fail(op, history.Register{Key: key, Value: &value}, err)
					return typ, err
				default:
					rec.Info(op, history.Register{Key: key, Value: &value}, err)
					return typ, err
				}
			}) {
				return
			}
			var got *string
			if !res.do(fmt.Sprintf("client %d: read %d of %s", id, j, key), func(ctx context.Context) (history.Type, error) {
				op := rec.Invoke(process, history.FRead, history.Register{Key: key})
				content, err := store.Read(ctx, key)
				if err != nil {
					// A read changes nothing: it can always be tried again.
					rec.Fail(op, history.Register{Key: key}, err)
					return history.Fail, err
				}
				got = nil
				if content != nil {
					got = history.Str(decodeValue(content))
				}
				rec.Ok(op, history.Register{Key: key, Value: got})
				return history.OK, nil
			}) {
				return
			}
			if got == nil || *got != value {
				// The linearizability check reports it too.
				res.fail("client %d: read %s after writing %q: %v", id, key, value, got)
				return
			}
		}
	})
}

// listAppendProbe runs the list-append end probe: one worker per node,
// through clients[p], runs probeOps transactions that read three lists of
// its own and append to each (blobs that most likely have different version
// managers), recorded in rec. Each must commit, and each read must show
// exactly the worker's earlier appends.
func listAppendProbe(rec *history.Recorder, clients []*client.Client, keyspace string) *probeResult {
	res := &probeResult{}
	return res.run(len(clients), func(p int) {
		c := clients[p]
		keys := []string{fmt.Sprintf("own%d-a", p), fmt.Sprintf("own%d-b", p), fmt.Sprintf("own%d-c", p)}
		appended := []int{}
		process := probeProcess + p
		for j := range probeOps {
			var ops []history.MicroOp
			tries := 0
			if !res.do(fmt.Sprintf("worker %d through node%d: txn %d", p, p+1, j), func(ctx context.Context) (history.Type, error) {
				ops = ops[:0]
				for _, k := range keys {
					ops = append(ops, history.Read(k, nil))
				}
				v := 900_000_000 + p*100_000 + j*1000 + tries // a fresh value each try
				tries++
				for _, k := range keys {
					ops = append(ops, history.Append(k, v))
				}
				op := rec.Invoke(process, history.FTxn, ops)
				typ, err := probeTxn(ctx, c, keyspace, ops)
				switch typ {
				case history.OK:
					rec.Ok(op, ops)
				case history.Fail:
					rec.Fail(op, ops, err)
				default:
					rec.Info(op, ops, err)
				}
				return typ, err
			}) {
				return
			}
			for _, m := range ops[:len(keys)] {
				if !slices.Equal(m.Read, appended) {
					res.fail("worker %d through node%d: txn %d read %s as %v, want %v", p, p+1, j, m.Key, m.Read, appended)
					return
				}
			}
			appended = append(appended, ops[len(keys)].Value)
		}
	})
}

// probeTxn runs the micro-ops of a list-append transaction through c, like
// listappend.Txn, and tells a transaction refused before its commit (a
// read that failed: nothing applied, history.Fail) from one whose commit
// failed (history.Fail if certainly not applied, else history.Info).
func probeTxn(ctx context.Context, c *client.Client, keyspace string, ops []history.MicroOp) (history.Type, error) {
	tx := c.Begin(keyspace)
	for i, op := range ops {
		if op.F == history.FAppend {
			tx.Append(op.Key, []byte(fmt.Sprintf("%d,", op.Value)))
			continue
		}
		size, err := tx.Size(ctx, op.Key)
		if errors.Is(err, client.ErrNotFound) {
			ops[i].Read = []int{}
			continue
		}
		var data []byte
		if err == nil {
			data, err = tx.Read(ctx, op.Key, 0, size)
		}
		if err != nil {
			tx.Rollback()
			return history.Fail, err
		}
		if ops[i].Read, err = decodeList(data); err != nil {
			tx.Rollback()
			return history.Fail, err
		}
	}
	err := tx.Commit(ctx)
	if errors.Is(err, client.ErrConflict) {
		return history.Fail, err
	}
	return outcome(err), err
}

// decodeList parses a list blob, "v1,v2,...,".
func decodeList(b []byte) ([]int, error) {
	list := []int{}
	for _, field := range strings.Split(string(b), ",") {
		if field == "" {
			continue
		}
		v, err := strconv.Atoi(field)
		if err != nil {
			return nil, fmt.Errorf("list element %q: %w", field, err)
		}
		list = append(list, v)
	}
	return list, nil
}

// counterProbe runs the counter end probe: one worker per node, through
// clients[p], creates a counter of its own and adds 1 to it probeOps
// times; the creation and each add must succeed, the adds returning 1, 2,
// 3, ...
func counterProbe(clients []*client.Client, keyspace string) *probeResult {
	res := &probeResult{}
	return res.run(len(clients), func(p int) {
		c := clients[p]
		key := fmt.Sprintf("counter-own%d", p)
		if !res.do(fmt.Sprintf("worker %d through node%d: create %s", p, p+1, key), func(ctx context.Context) (history.Type, error) {
			_, err := c.WriteCreate(ctx, keyspace, key, 0, make([]byte, 8))
			return outcome(err), err
		}) {
			return
		}
		for j := range probeOps {
			var v uint64
			if !res.do(fmt.Sprintf("worker %d through node%d: add %d to %s", p, p+1, j+1, key), func(ctx context.Context) (history.Type, error) {
				var err error
				v, err = c.Atomic(ctx, keyspace, key, 0, 8, client.FuncAdd, 1)
				return outcome(err), err
			}) {
				return
			}
			if v != uint64(j+1) {
				res.fail("worker %d through node%d: add %d to %s returned %d, want %d", p, p+1, j+1, key, v, j+1)
				return
			}
		}
	})
}

// TestInStep: a fault lasts, past the nemesis's part in it, until every
// node catching up at its end has caught up.
func TestInStep(t *testing.T) {
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	line := func(sec float64, msg string) string {
		return fmt.Sprintf(`time=%s level=INFO msg="%s" took=1s`, base.Add(time.Duration(sec*float64(time.Second))).Format(time.RFC3339Nano), msg)
	}
	logs := []string{
		// In step before 10 s; catches up from 12 to 14 s, after the fault.
		strings.Join([]string{line(1, "catching up"), line(2, "caught up"), line(12, "catching up"), line(14, "caught up")}, "\n"),
		// Catching up from 8 to 13 s, then again from 20 s.
		strings.Join([]string{line(8, "catching up"), line(9, "catching up"), line(13, "caught up"), line(20, "catching up")}, "\n"),
	}
	at := func(sec float64) time.Time { return base.Add(time.Duration(sec * float64(time.Second))) }
	for _, c := range []struct{ done, want float64 }{
		{0.5, 0.5}, // no one catching up
		{1.5, 2},   // the first node until 2 s
		{10, 13},   // the second node until 13 s
		{15, 15},
	} {
		if got := inStep(logs, at(c.done)); !got.Equal(at(c.want)) {
			t.Errorf("done at %vs: in step at %v, want %vs", c.done, got.Sub(base), c.want)
		}
	}
	if got := inStep(logs, at(21)); got.Before(time.Now().Add(-time.Minute)) {
		t.Errorf("done at 21s, a node catching up since 20 s: in step at %v, want now", got)
	}
}
