package torture

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/tyrstore/tyr/internal/checker"
	"github.com/tyrstore/tyr/internal/testseed"
	"github.com/tyrstore/tyr/internal/testserver"
)

// A torture test runs a sequence of independent fault schedules within
// TYR_TORTURE_DURATION. A schedule is a fresh server or cluster, a fresh
// history, a nemesis drawn from the schedule's own seed for the schedule's
// length, the checkers' verdicts on that history, and the teardown of
// everything it started (processes by PID, namespaces, directories), which
// completes before the next schedule begins. Each schedule is a subtest, so
// its cleanups run when it ends, failed or not.
//
// A schedule is reproduced from its seed and length alone:
//
//	TYR_TORTURE_SEED=<seed> TYR_TORTURE_DURATION=<length> go test -race -count=1 -run '^<test>$' -v ./tests/torture
//
// runs exactly one schedule of that seed for all of TYR_TORTURE_DURATION.

const (
	seedEnv     = "TYR_TORTURE_SEED"
	scheduleEnv = "TYR_TORTURE_SCHEDULE"
	// scheduleLengthDefault is a schedule's length unless
	// TYR_TORTURE_SCHEDULE says otherwise. Beyond its length, a schedule on
	// one server takes about 1 s more, and one on a cluster 8 to 36 s, about
	// 22 on average (setup, the fault in progress, catching up, the last
	// counter adds, checking, teardown). At 45 s, 10 minutes hold 12 or 13 schedules on one server
	// and 8 or 9 on a cluster.
	scheduleLengthDefault = 45 * time.Second
)

// scheduleReport is what one schedule did, for the summary at the end of
// the test.
type scheduleReport struct {
	faults map[string]int   // faults injected, by kind
	ops    map[string]int64 // ops issued, by workload
	// progress counts the outcomes of each workload's ops by the fault in
	// effect while they ran (progress_test.go), and probe what the end
	// probe did, by workload.
	progress map[string]map[string]checker.Tally
	probe    map[string]probeCount
}

func newScheduleReport() *scheduleReport {
	return &scheduleReport{faults: map[string]int{}, ops: map[string]int64{},
		progress: map[string]map[string]checker.Tally{}, probe: map[string]probeCount{}}
}

// scheduleRow is one line of the summary.
type scheduleRow struct {
	seed         uint64
	length, took time.Duration
	report       *scheduleReport
	verdict      string
}

// runSchedules runs schedules of the test back to back until
// TYR_TORTURE_DURATION is used up, setup, checks and teardown included: it
// starts no schedule when less than half a schedule's length is left once
// the average overhead of a schedule so far is set aside, and shortens the
// last one to what is left. With TYR_TORTURE_SEED set it runs
// exactly one schedule of that seed, as long as TYR_TORTURE_DURATION. The
// test stops at the first schedule that fails, and prints the command that
// reproduces it.
func runSchedules(t *testing.T, run func(t *testing.T, seed uint64, length time.Duration, rep *scheduleReport)) {
	duration := durationFromEnv(t)
	length := scheduleLengthFromEnv(t)
	var next func() uint64
	replay := os.Getenv(seedEnv) != ""
	if replay {
		seed := testseed.FromEnv(t, seedEnv)
		length = duration
		next = func() uint64 { return seed }
	} else {
		base := uint64(time.Now().UnixNano())
		r := rand.New(rand.NewPCG(base, 0x5c4ed))
		first := true
		next = func() uint64 {
			if first {
				first = false
				return base
			}
			return r.Uint64() >> 1 // fits an int64, like the seeds of a clock
		}
		if duration <= length {
			t.Logf("one schedule of %v", duration)
		} else {
			t.Logf("%v in schedules of %v; schedule seeds drawn from %d", duration, length, base)
		}
	}

	// The server is built once per test process: outside any schedule's
	// time, so that it is not taken for the overhead of one.
	testserver.Binary(t)
	start := time.Now()
	var rows []scheduleRow
	var beyond time.Duration // how much longer than their lengths the schedules so far took
	defer func() {
		if len(rows) > 0 {
			t.Logf("%s", summary(rows, time.Since(start)))
		}
	}()
	for n := 1; ; n++ {
		l := min(length, duration)
		if n > 1 {
			if replay {
				return
			}
			overhead := beyond / time.Duration(n-1) // setup, checks and teardown of one, on average
			l = min(length, duration-time.Since(start)-overhead).Truncate(time.Second)
			if l < length/2 {
				return
			}
		}
		seed := next()
		rep := newScheduleReport()
		repro := reproduce(t.Name(), seed, l)
		t.Logf("schedule %d: seed %d, %v; reproduce with\n\t%s", n, seed, l, repro)
		began := time.Now()
		var sub *testing.T
		ok := t.Run(fmt.Sprintf("schedule%02d", n), func(t *testing.T) {
			sub = t
			run(t, seed, l, rep)
		})
		took := time.Since(began)
		if p := rep.progressLines(); p != "" {
			t.Logf("schedule %d progress (ok/fail/info, and the share failed or unknown, by the fault in effect):\n%s", n, p)
		}
		beyond += took - l
		row := scheduleRow{seed: seed, length: l, took: took, report: rep, verdict: "ok"}
		switch {
		case sub != nil && sub.Skipped():
			t.Skipf("schedule %d skipped", n)
		case !ok:
			row.verdict = "FAIL"
			rows = append(rows, row)
			t.Errorf("schedule %d (seed %d, %v) failed; reproduce with\n\t%s", n, seed, l, repro)
			return
		}
		rows = append(rows, row)
		t.Logf("schedule %d: ok in %v (%v beyond its length)", n, took.Round(time.Second), (took - l).Round(time.Second))
	}
}

// reproduce is the command that runs test's schedule of seed and length
// again.
func reproduce(test string, seed uint64, length time.Duration) string {
	return fmt.Sprintf("%s=%d TYR_TORTURE_DURATION=%v go test -race -count=1 -timeout %v -run '^%s$' -v ./tests/torture",
		seedEnv, seed, length, max(30*time.Minute, 4*length), test)
}

// summary is the table of the schedules run, with totals.
func summary(rows []scheduleRow, elapsed time.Duration) string {
	var b strings.Builder
	plural := "s"
	if len(rows) == 1 {
		plural = ""
	}
	fmt.Fprintf(&b, "%d schedule%s in %v:\n", len(rows), plural, elapsed.Round(time.Second))
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "  #\tseed\tlength\ttook\tfaults\tops\tverdict")
	faults, ops := map[string]int{}, map[string]int64{}
	for i, r := range rows {
		fmt.Fprintf(w, "  %d\t%d\t%v\t%v\t%s\t%s\t%s\n", i+1, r.seed, r.length, r.took.Round(time.Second),
			counts(r.report.faults), counts(r.report.ops), r.verdict)
		for k, n := range r.report.faults {
			faults[k] += n
		}
		for k, n := range r.report.ops {
			ops[k] += n
		}
	}
	fmt.Fprintf(w, "  all\t\t\t\t%s\t%s\t\n", counts(faults), counts(ops))
	_ = w.Flush()
	all := newScheduleReport()
	for _, r := range rows {
		for wl, byKind := range r.report.progress {
			if all.progress[wl] == nil {
				all.progress[wl] = map[string]checker.Tally{}
			}
			for k, n := range byKind {
				all.progress[wl][k] = all.progress[wl][k].Plus(n)
			}
		}
		for wl, n := range r.report.probe {
			all.probe[wl] = all.probe[wl].plus(n)
		}
	}
	if p := all.progressLines(); p != "" {
		fmt.Fprintf(&b, "outcomes ok/fail/info of all schedules, by the fault in effect:\n%s", p)
	}
	return strings.TrimRight(b.String(), "\n")
}

// progressLines formats the report's outcome counts, a line per workload
// and one for the end probe; "" if there are none.
func (r *scheduleReport) progressLines() string {
	var b strings.Builder
	for _, wl := range slices.Sorted(maps.Keys(r.progress)) {
		fmt.Fprintf(&b, "  %-11s  %s\n", wl, checker.FormatProgress(r.progress[wl]))
	}
	if len(r.probe) > 0 {
		var parts []string
		for _, wl := range slices.Sorted(maps.Keys(r.probe)) {
			parts = append(parts, fmt.Sprintf("%s %v", wl, r.probe[wl]))
		}
		fmt.Fprintf(&b, "  %-11s  %s\n", "end probe", strings.Join(parts, ", "))
	}
	return b.String()
}

// counts formats a count by kind as "kind n, kind n", kinds sorted.
func counts[N int | int64](m map[string]N) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// scheduleLengthFromEnv returns TYR_TORTURE_SCHEDULE, or the default.
func scheduleLengthFromEnv(t *testing.T) time.Duration {
	t.Helper()
	s := os.Getenv(scheduleEnv)
	if s == "" {
		return scheduleLengthDefault
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration such as 90s", scheduleEnv, s)
	}
	return d
}
