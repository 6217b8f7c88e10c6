package bench

import (
	"context"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// peerResults are two workloads with different peers, and the machine's
// limits at one client count.
func peerResults() []Result {
	return []Result{
		{Workload: "limit-roundtrip", System: MachineSystem, Clients: 8, OpsPerS: 50000},
		{Workload: "limit-fsync", System: MachineSystem, Clients: 8, OpsPerS: 4000},
		{Workload: "limit-stream", System: MachineSystem, Clients: 1, OpsPerS: 2000, MBPerS: 2000},
		{Workload: "counter", System: "tyr", Clients: 1, OpsPerS: 1000},
		{Workload: "counter", System: "tyr-rmw", Clients: 1, OpsPerS: 500},
		{Workload: "counter", System: "postgres", Clients: 1, OpsPerS: 4000, Version: "postgresql 15.18",
			Settings: "fsync=on synchronous_commit=on"},
		{Workload: "counter", System: "etcd", Clients: 1, OpsPerS: 800},
		{Workload: "counter", System: "tyr", Clients: 8, OpsPerS: 2000},
		{Workload: "counter", System: "tyr-rmw", Clients: 8, OpsPerS: 400},
		{Workload: "counter", System: "postgres", Clients: 8, OpsPerS: 4000, Version: "postgresql 15.18",
			Settings: "fsync=on synchronous_commit=on"},
		{Workload: "counter", System: "etcd", Clients: 8, OpsPerS: 1000},
		{Workload: "monalisa", System: "tyr", Clients: 8, OpsPerS: 3000},
		{Workload: "monalisa", System: "zk-redis-durable", Clients: 8, OpsPerS: 500, Errors: 2},
		{Workload: "stream-put", System: "tyr", Clients: 1, OpsPerS: 50, MBPerS: 500},
	}
}

func TestReportRatiosPerWorkload(t *testing.T) {
	var md strings.Builder
	if err := WriteReport(&md, peerResults(), BaseSystem, map[string]string{"counter": "p-counter.png"}); err != nil {
		t.Fatal(err)
	}
	out := md.String()
	for _, want := range []string{
		"**counter**\n\n![counter: operations per second by clients](p-counter.png)\n\n" +
			"| workload | clients | tyr ops/s | tyr-rmw ops/s | tyr/tyr-rmw | postgres ops/s | tyr/postgres | etcd ops/s | tyr/etcd |",
		"| counter | 1 | 1000 | 500 | 2.00 | 4000 | 0.25 | 800 | 1.25 |",
		"| counter | 8 | 2000 | 400 | 5.00 | 4000 | 0.50 | 1000 | 2.00 |",
		// Each workload's table has its own peers, and no plot unless given.
		"**monalisa**\n\n| workload | clients | tyr ops/s | zk-redis-durable ops/s | tyr/zk-redis-durable |\n",
		"| monalisa | 8 | 3000 | 500 (2 errors) | 6.00 |",
		"| limit-fsync | 8 | 4000.0 |",
		// Fractions of the machine's limits at the same client count.
		"| counter | tyr | 8 | 2000.0 | 0.00 | 0.0 | 0.0 | 0 | 0.04 | 0.50 | – |",
		"| counter | tyr | 1 | 1000.0 | 0.00 | 0.0 | 0.0 | 0 | – | – | – |",
		"| stream-put | tyr | 1 | 50.0 | 500.00 | 0.0 | 0.0 | 0 | – | – | 0.25 |",
		"- postgres: postgresql 15.18; fsync=on synchronous_commit=on\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "tyr/machine") || strings.Contains(out, "| limit-fsync | machine |") {
		t.Errorf("the machine's limits are compared as a peer:\n%s", out)
	}
	monalisa := out[strings.Index(out, "**monalisa**"):]
	if strings.Contains(monalisa[:strings.Index(monalisa, "\n\n**")+1], "etcd") {
		t.Errorf("monalisa's table has a column for etcd, which did not run it:\n%s", out)
	}
}

func TestWritePlotsDrawsEveryWorkload(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "peers")
	files, err := WritePlots(prefix, peerResults())
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 || files["counter"] != prefix+"-counter.png" || files["limit-fsync"] != "" {
		t.Fatalf("plots %v: want counter, monalisa and stream-put, and none of the limits", files)
	}
	f, err := os.Open(files["counter"])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("counter plot: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 300 || b.Dy() < 200 {
		t.Fatalf("counter plot of %v", b)
	}
	if colors := distinctColors(img); colors < 5 {
		t.Errorf("counter plot has %d colors: want a line per system on a white background", colors)
	}
	if _, err := WritePlots(prefix, []Result{{Workload: "counter", System: "tyr", Clients: 1}}); err == nil {
		t.Error("a plot of nothing but zeros was drawn; want an error")
	}
}

func distinctColors(img image.Image) int {
	seen := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, a := img.At(x, y).RGBA()
			seen[[4]uint32{r, g, bl, a}] = true
		}
	}
	return len(seen)
}

func TestLimitsMeasureTheMachine(t *testing.T) {
	cfg := DefaultConfig()
	// Long enough for a few 1 MiB writes on a loaded machine.
	cfg.Workload, cfg.Clients, cfg.Duration, cfg.Dir = "limits", []int{1, 2}, 500*time.Millisecond, t.TempDir()
	var results []Result
	err := Run(context.Background(), cfg, func(r Result) error { results = append(results, r); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2*len(LimitWorkloads) {
		t.Fatalf("%d results, want %d", len(results), 2*len(LimitWorkloads))
	}
	want := map[string]int{"limit-roundtrip": 16, "limit-stream": 1 << 20, "limit-fsync": 128, "limit-disk": 4 << 20}
	for _, r := range results {
		if r.System != MachineSystem || r.Ops == 0 || r.Errors != 0 || r.OpBytes != want[r.Workload] || r.Note == "" {
			t.Errorf("limit result %+v", r)
		}
	}
	if left, _ := os.ReadDir(cfg.Dir); len(left) != 0 {
		t.Errorf("the fsync limit left %d files in its directory", len(left))
	}
}
