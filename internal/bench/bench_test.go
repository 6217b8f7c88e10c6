package bench

import (
	"bufio"
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestPercentilesExactBelowLinearRange(t *testing.T) {
	var h Histogram
	// 1..200 ns, shuffled: every value has a bucket of its own here, so the
	// nearest-rank percentiles are exact.
	for _, v := range rand.New(rand.NewPCG(1, 2)).Perm(200) {
		h.Record(time.Duration(v + 1))
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 100}, {99, 198}, {99.9, 200}, {100, 200}, {0.1, 1}, {25, 50}} {
		if got := h.Percentile(c.p); got != c.want {
			t.Errorf("p%v = %d, want %d", c.p, got, c.want)
		}
	}
	if h.Count() != 200 {
		t.Errorf("count %d, want 200", h.Count())
	}
	if got, want := h.Mean(), time.Duration(100); got != want { // (1+200)/2 = 100.5, truncated
		t.Errorf("mean %d, want %d", got, want)
	}
}

func TestPercentilesWithinOnePercent(t *testing.T) {
	var h Histogram
	// 1 ms to 10 s in steps of 1 ms: nearest-rank p50 is 5000 ms, p99 is
	// 9900 ms.
	for i := 1; i <= 10000; i++ {
		h.Record(time.Duration(i) * time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 5000 * time.Millisecond}, {99, 9900 * time.Millisecond}, {90, 9000 * time.Millisecond},
		{1, 100 * time.Millisecond}} {
		got := h.Percentile(c.p)
		if rel := math.Abs(float64(got-c.want)) / float64(c.want); rel > 0.01 {
			t.Errorf("p%v = %s, want %s within 1%% (off by %.3f%%)", c.p, got, c.want, rel*100)
		}
	}
	if got := h.Percentile(100); got != 10*time.Second {
		t.Errorf("p100 = %s, want the maximum, 10s", got)
	}
	if got := h.Percentile(0.001); got != time.Millisecond {
		t.Errorf("lowest percentile = %s, want the minimum, 1ms", got)
	}
}

func TestBucketsCoverEveryValue(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100000 {
		v := rng.Uint64() >> rng.IntN(64)
		i := bucketOf(v)
		if i < 0 || i >= histBuckets {
			t.Fatalf("value %d: bucket %d out of range", v, i)
		}
		lo, hi := bucketRange(i)
		if v < lo || v > hi {
			t.Fatalf("value %d: bucket %d holds [%d, %d]", v, i, lo, hi)
		}
		if v >= histLinear && (hi-lo+1)*histSub > lo {
			t.Fatalf("value %d: bucket [%d, %d] wider than 1/%d of its bound", v, lo, hi, histSub)
		}
	}
	if lo, hi := bucketRange(histBuckets - 1); hi != math.MaxUint64 || bucketOf(lo) != histBuckets-1 {
		t.Fatalf("last bucket [%d, %d] does not end at the largest value", lo, hi)
	}
}

func TestMergeEqualsRecordingTogether(t *testing.T) {
	var a, b, all Histogram
	for i := 1; i <= 1000; i++ {
		d := time.Duration(i*i) * time.Microsecond
		all.Record(d)
		if i%3 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	a.Merge(&b)
	for _, p := range []float64{1, 50, 90, 99, 100} {
		if a.Percentile(p) != all.Percentile(p) {
			t.Errorf("p%v: merged %s, together %s", p, a.Percentile(p), all.Percentile(p))
		}
	}
	if a.Count() != 1000 || a.Mean() != all.Mean() {
		t.Errorf("merged count %d mean %s, want 1000 and %s", a.Count(), a.Mean(), all.Mean())
	}
	var empty Histogram
	if empty.Percentile(50) != 0 || empty.Mean() != 0 {
		t.Error("an empty histogram must report zeros")
	}
}

func TestSummarize(t *testing.T) {
	var h Histogram
	// 1000 operations: 990 of 100 µs and 10 of 5 ms, so p50 is 100 µs and
	// p99 is still 100 µs (rank 990), in 2 s of 4096 bytes each.
	for range 990 {
		h.Record(100 * time.Microsecond)
	}
	for range 10 {
		h.Record(5 * time.Millisecond)
	}
	r := summarize("write", "tyr", 16, &h, 1000*4096, 4096, 3, 2*time.Second)
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > want/100 {
			t.Errorf("%s = %v µs, want %v within 1%%", name, got, want)
		}
	}
	near("p50", r.P50us, 100)
	near("p99", r.P99us, 100)
	r.P50us, r.P99us = 0, 0
	want := Result{Workload: "write", System: "tyr", Clients: 16, OpsPerS: 500, MBPerS: 2.05,
		Errors: 3, Ops: 1000, OpBytes: 4096, Seconds: 2}
	if r != want {
		t.Errorf("summarize:\n got %+v\nwant %+v", r, want)
	}
	h.Record(5 * time.Millisecond) // rank 991 of 1001 is now the first 5 ms
	near("p99 with one more slow op", summarize("write", "tyr", 16, &h, 0, 4096, 0, time.Second).P99us, 5000)
}

func TestReportRatios(t *testing.T) {
	results := []Result{
		{Workload: "write", System: "tyr", Clients: 1, OpsPerS: 100},
		{Workload: "write", System: "redis-durable", Clients: 1, OpsPerS: 400},
		{Workload: "write", System: "redis-memory", Clients: 1, OpsPerS: 1000},
		{Workload: "write", System: "tyr", Clients: 16, OpsPerS: 900},
		{Workload: "write", System: "redis-durable", Clients: 16, OpsPerS: 300},
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, results[0]); err != nil {
		t.Fatal(err)
	}
	for _, r := range results[1:] {
		_ = WriteJSON(&buf, r)
	}
	back, err := ReadJSONL(&buf)
	if err != nil || len(back) != len(results) || back[3] != results[3] {
		t.Fatalf("JSON lines do not round-trip: %v %+v", err, back)
	}
	var md strings.Builder
	if err := WriteReport(&md, back, BaseSystem, nil); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		"| write | 1 | 100 | 400 | 0.25 | 1000 | 0.10 |",
		"| write | 16 | 900 | 300 | 3.00 | – | – |",
		NoisyMachineNote,
	} {
		if !strings.Contains(md.String(), row) {
			t.Errorf("report lacks %q:\n%s", row, md.String())
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "4KiB": 4096, "256MiB": 256 << 20, "1GiB": 1 << 30,
		"1G": 1 << 30, "10MB": 10e6, "3 KB": 3000, "7B": 7, "0": 0} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1", "1.5GiB", "9999999999TiB", "4XB"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) succeeded; want an error", in)
		}
	}
	for _, n := range []int64{0, 1, 4096, 4097, 1 << 30, 3 << 20} {
		if got, err := ParseSize(FormatSize(n)); err != nil || got != n {
			t.Errorf("ParseSize(FormatSize(%d)) = %d, %v", n, got, err)
		}
	}
}

func TestParseCounts(t *testing.T) {
	text := `# HELP tyr_peer_messages_sent_total Chain messages.
# TYPE tyr_peer_messages_sent_total counter
tyr_peer_messages_sent_total 1234
tyr_peer_deliver_calls_total 56
tyr_wal_syncs_total 31
tyr_ops_total{code="OK",op="Commit"} 100
tyr_ops_total{code="Unavailable",op="Commit"} 2
tyr_ops_total{code="OK",op="Read"} 7
tyr_ops_total{code="OK",op="Deliver"} 999
tyr_peer_messages_sent_total_other 5
`
	c, seen, err := parseCounts(bufio.NewScanner(strings.NewReader(text)))
	if err != nil || !seen {
		t.Fatalf("parseCounts: %v, seen %v", err, seen)
	}
	if want := (clusterCounts{peerMessages: 1234, peerCalls: 56, served: 109, syncs: 31}); c != want {
		t.Errorf("parseCounts = %+v, want %+v", c, want)
	}
	if _, seen, _ := parseCounts(bufio.NewScanner(strings.NewReader("tyr_ops_total{op=\"Read\"} 1\n"))); seen {
		t.Error("a server without peer counters was taken for one with them")
	}
}

func TestReportCounts(t *testing.T) {
	results := []Result{
		{Workload: "write", System: "tyr-3", Clients: 1, OpsPerS: 50, Ops: 100, MetricsNodes: 3,
			PeerMessages: 400, PeerDeliverCalls: 250, ServedRequests: 100, Syncs: 25},
		{Workload: "write", System: "tyr-1", Clients: 1, OpsPerS: 200, Ops: 400, MetricsNodes: 1, ServedRequests: 400},
	}
	var md strings.Builder
	if err := WriteReport(&md, results, "tyr-3", nil); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		"| write | 1 | 50 | 200 | 0.25 |",
		"| write | tyr-3 | 1 | 50.0 | 0.00 | 0.0 | 0.0 | 0 | 3 | 4.00 | 2.50 | 1.00 | 0.250 |",
		"| write | tyr-1 | 1 | 200.0 | 0.00 | 0.0 | 0.0 | 0 | 1 | 0.00 | 0.00 | 1.00 | 0.000 |",
	} {
		if !strings.Contains(md.String(), row) {
			t.Errorf("report lacks %q:\n%s", row, md.String())
		}
	}
}
