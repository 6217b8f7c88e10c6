package bench

import (
	"path/filepath"
	"strings"
	"testing"
)

// suiteResults is a run of the whole suite at 32 clients, shaped so that
// some targets are met and some are not, by known amounts.
func suiteResults() []Result {
	return []Result{
		{Workload: "limit-stream", System: MachineSystem, Clients: 1, OpsPerS: 2000, MBPerS: 2000},
		{Workload: "limit-stream", System: MachineSystem, Clients: 32, OpsPerS: 9000, MBPerS: 9000},
		{Workload: "monalisa", System: "tyr", Clients: 32, OpsPerS: 6000},
		{Workload: "monalisa", System: "tyr-rmw", Clients: 32, OpsPerS: 1000},
		{Workload: "monalisa", System: "postgres", Clients: 32, OpsPerS: 2000},
		{Workload: "monalisa", System: "zk-redis-durable", Clients: 32, OpsPerS: 500},
		{Workload: "counter", System: "tyr", Clients: 8, OpsPerS: 99999}, // not the target's client count
		{Workload: "counter", System: "tyr", Clients: 32, OpsPerS: 3000},
		{Workload: "counter", System: "tyr-rmw", Clients: 32, OpsPerS: 1000},
		{Workload: "counter", System: "redis-durable", Clients: 32, OpsPerS: 2000},
		{Workload: "read-1KiB", System: "tyr", Clients: 32, OpsPerS: 15000},
		{Workload: "read-1KiB", System: "redis-memory", Clients: 32, OpsPerS: 50000},
		{Workload: "limit-disk", System: MachineSystem, Clients: 1, OpsPerS: 100, MBPerS: 400},
		{Workload: "bank", System: "tyr", Clients: 32, OpsPerS: 900},
		{Workload: "bank", System: "postgres", Clients: 32, OpsPerS: 1800},
		{Workload: "write", System: "tyr", Clients: 32, OpsPerS: 20000},
		{Workload: "write", System: "redis-durable", Clients: 32, OpsPerS: 16000},
		{Workload: "stream-put", System: "tyr", Clients: 1, OpsPerS: 20, MBPerS: 80},
		{Workload: "stream-put", System: "tyr-rf1", Clients: 1, OpsPerS: 25, MBPerS: 100},
		{Workload: "stream-get", System: "tyr", Clients: 1, OpsPerS: 100, MBPerS: 400},
		{Workload: "stream-get", System: "tyr-rf1", Clients: 1, OpsPerS: 300, MBPerS: 1200, Ops: 256, OpBytes: 4 << 20},
		{Workload: IsolationWorkload, System: "tyr", Clients: 8, Role: RoleMix, Readers: 4, Writers: 4,
			IsolationRatio: 0.2},
		{Workload: IsolationWorkload, System: "tyr", Clients: 32, Role: RoleAllRead, Readers: 32, ReaderOpsPerS: 16000},
		{Workload: IsolationWorkload, System: "tyr", Clients: 16, Role: RoleReadersAlone, Readers: 16, ReaderOpsPerS: 16000},
		{Workload: IsolationWorkload, System: "tyr", Clients: 32, Role: RoleMix, Readers: 16, Writers: 16,
			ReaderOpsPerS: 15200, WriterOpsPerS: 800, PerReaderOpsPerS: 950, ReadOnlyPerReaderOpsPerS: 1000,
			AllReadPerReaderOpsPerS: 500, IsolationRatio: 0.95, AllReadRatio: 1.9},
		{Workload: IsolationWorkload, System: "tyr", Clients: 32, Role: RoleMix, Readers: 30, Writers: 2,
			IsolationRatio: 0.5},
		{Workload: MemoryWorkload, System: "tyr node1", PeakRSSBytes: 200 << 20},
		{Workload: MemoryWorkload, System: "tyr node2", PeakRSSBytes: 768 << 20},
	}
}

func targetsByWhat(t *testing.T, ts []Target) map[string]Target {
	t.Helper()
	out := map[string]Target{}
	for _, tg := range ts {
		key := strings.Fields(strings.Trim(tg.What, "`"))[0]
		out[strings.Trim(key, "`,")] = tg
	}
	return out
}

func TestTargetsMeasuredAndJudged(t *testing.T) {
	ts := Targets(suiteResults(), BaseSystem)
	if len(ts) != 9 {
		t.Fatalf("%d targets, want the issues' 9", len(ts))
	}
	by := targetsByWhat(t, ts)
	for what, want := range map[string]struct {
		met      bool
		measured []string
		status   []string
	}{
		// 12× ZooKeeper-locked Redis, but 3× of PostgreSQL is met too.
		"monalisa": {true, []string{"tyr/zk-redis-durable: 12.00×", "tyr/postgres: 3.00×"}, nil},
		// 1.5× Redis and 3× its own read-modify-write: met; 8 clients do not count.
		"counter": {true, []string{"tyr/redis-durable: 1.50×", "tyr/tyr-rmw: 3.00×"}, nil},
		"read":    {false, []string{"tyr/redis-memory: 0.30×"}, []string{"30 % of the 1.00× bound"}},
		"bank":    {false, []string{"tyr/postgres: 0.50×"}, []string{"50 % of the 1.00× bound"}},
		"write":   {true, []string{"tyr/redis-durable: 1.25×"}, nil},
		// 80 of 100 MB/s replicated is met; 100 of 400 MB/s of the disk is not.
		"stream-put": {false, []string{"tyr put / tyr-rf1 put: 0.80×", "tyr-rf1 put / limit-disk: 0.25×", "80, 100 and 400 MB/s"},
			[]string{"tyr-rf1 put / limit-disk 0.25×"}},
		// The 50/50 mix of the most clients, not the one of 8.
		"isolation": {true, []string{"vs the same readers alone: 0.95×", "vs all 32 clients reading: 1.90×"}, nil},
		// tyr-rf1's get over the stream limit at one client, not tyr's.
		"stream": {true, []string{"tyr-rf1 get / limit-stream: 0.60×", "1200 of 2000 MB/s, 1GiB"}, nil},
		"memory": {false, []string{"tyr node1: 200 MiB", "tyr node2: 768 MiB"},
			[]string{"tyr node2 768 MiB, 1.50× the bound of 512 MiB"}},
	} {
		tg, ok := by[what]
		if !ok {
			t.Errorf("no %s target in %+v", what, ts)
			continue
		}
		if tg.Met() != want.met {
			t.Errorf("%s: status %q; want met %v", what, tg.Status, want.met)
		}
		for _, m := range want.measured {
			if !strings.Contains(tg.Measured, m) {
				t.Errorf("%s: measured %q lacks %q", what, tg.Measured, m)
			}
		}
		for _, s := range want.status {
			if !strings.HasPrefix(tg.Status, "not met: ") || !strings.Contains(tg.Status, s) {
				t.Errorf("%s: status %q; want not met, saying %q", what, tg.Status, s)
			}
		}
	}
	if w := by["isolation"].What; !strings.Contains(w, "16 readers + 16 writers") {
		t.Errorf("isolation target %q does not say which mix", w)
	}
}

func TestTargetsNotMeasured(t *testing.T) {
	// Without PostgreSQL, the MonALISA target cannot be judged, however
	// far tyr is ahead of ZooKeeper-locked Redis.
	var rs []Result
	for _, r := range suiteResults() {
		if r.System != "postgres" && r.Workload != MemoryWorkload && r.Workload != "limit-stream" {
			rs = append(rs, r)
		}
	}
	by := targetsByWhat(t, Targets(rs, BaseSystem))
	for what, want := range map[string]string{
		"monalisa": "not measured: tyr/postgres",
		"memory":   "not measured: every node's peak RSS",
		"stream":   "not measured: tyr-rf1 get / limit-stream",
	} {
		if got := by[what].Status; got != want {
			t.Errorf("%s: status %q, want %q", what, got, want)
		}
	}
	// A peer that did nothing gives no ratio rather than an infinite one.
	rs = append(rs, Result{Workload: "read-1KiB", System: "redis-memory", Clients: 32})
	if got := targetsByWhat(t, Targets(rs, BaseSystem))["read"].Status; got != "not measured: tyr/redis-memory" {
		t.Errorf("read against a peer of 0 ops/s: %q", got)
	}
}

func TestTargetsSectionEndsTheReport(t *testing.T) {
	var b strings.Builder
	if err := WriteTargetsSection(&b, suiteResults(), BaseSystem); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"## Targets\n",
		"| target | bound | measured | status |\n|---|---|---|---|\n",
		"| `monalisa --agg=atomic`, 32 clients | ≥ 10× ZooKeeper-locked Redis and ≥ 2× PostgreSQL | " +
			"tyr/zk-redis-durable: 12.00×; tyr/postgres: 3.00× | met |\n",
		"| `read` 1 KiB direct, 32 clients | ≥ 1× Redis GET (memory-only) | tyr/redis-memory: 0.30× | " +
			"not met: tyr/redis-memory 0.30×, 30 % of the 1.00× bound |\n",
		"Only ratios within one run count",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("targets section lacks %q:\n%s", want, out)
		}
	}
}

func TestReportIsolationAndMemoryTables(t *testing.T) {
	var b strings.Builder
	if err := WriteReport(&b, suiteResults(), BaseSystem, nil); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"**isolation** (tyr)",
		// The all-read run, then the mixes; the readers-alone runs only as
		// their baselines.
		"| 32 | 32 | 0 | 16000 | – | 500 | – | – | – | – |\n",
		"| 32 | 16 | 16 | 15200 | 800 | 950 | 1000 | 0.95 | 500 | 1.90 |\n",
		"| tyr node2 | 768.0 |\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "| 16 | 16 | 0 |") {
		t.Errorf("a readers-alone run has a row of its own:\n%s", out)
	}
	// Neither is compared as a workload of ops/s, nor plotted.
	if strings.Contains(out, "**memory**") || strings.Contains(out, "| isolation | tyr |") {
		t.Errorf("isolation or memory among the ops/s tables:\n%s", out)
	}
	files, err := WritePlots(filepath.Join(t.TempDir(), "suite"), suiteResults())
	if err != nil {
		t.Fatal(err)
	}
	if files[IsolationWorkload] != "" || files[MemoryWorkload] != "" || files["read-1KiB"] == "" {
		t.Errorf("plots %v: want read-1KiB's and neither isolation's nor memory's", files)
	}
}
