package e2e

// Server behaviour seen from outside: the metrics endpoint counts requests by
// operation and code, and SIGTERM shuts the server down cleanly with its data
// intact. Run: go test ./tests/e2e -run 'TestMetrics|TestGracefulShutdown' -v

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/testserver"
)

func TestMetrics(t *testing.T) {
	metricsAddr := testserver.FreeLoopbackAddr(t)
	srv := testserver.Start(t, "--metrics-listen", metricsAddr)
	c := srv.Client()
	ctx := context.Background()
	if _, err := c.CreateKeyspace(ctx, "metrics", client.KeyspaceConfig{ChunkSize: 4096}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteCreate(ctx, "metrics", "k", 0, make([]byte, 5000)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(ctx, "metrics", "missing", 0, 10); err == nil {
		t.Fatal("read of a missing blob succeeded")
	}
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`tyr_ops_total{code="OK",op="Commit"} 1`,
		`tyr_ops_total{code="NotFound",op="Read"} 1`,
		`tyr_bytes_total{direction="written"} 5000`,
		`tyr_op_duration_seconds_count{op="Commit"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestGracefulShutdown(t *testing.T) {
	srv := testserver.Start(t)
	c := srv.Client()
	ctx := context.Background()
	if _, err := c.CreateKeyspace(ctx, "graceful", client.KeyspaceConfig{ChunkSize: 4096, Sync: false}); err != nil {
		t.Fatal(err)
	}
	// Not synced: a clean shutdown must still flush these.
	for i := 0; i < 20; i++ {
		if _, err := c.WriteCreate(ctx, "graceful", fmt.Sprintf("k%02d", i), 0, bytes.Repeat([]byte{byte(i)}, 3000)); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(srv.Log(), "shutting down") {
		t.Fatalf("server did not log its shutdown:\n%s", srv.Log())
	}
	t.Logf("stopped in %v", time.Since(start))
	srv.Restart()
	c2 := srv.Client()
	for i := 0; i < 20; i++ {
		got, err := c2.Read(ctx, "graceful", fmt.Sprintf("k%02d", i), 0, 3000)
		if err != nil || !bytes.Equal(got, bytes.Repeat([]byte{byte(i)}, 3000)) {
			t.Fatalf("blob k%02d after restart: %d bytes, err %v", i, len(got), err)
		}
	}
}

// TestMemoryFlags checks that --gc-percent and --memory-limit reach the Go
// runtime and --block-cache the store (as their metrics report them), that
// the block cache's metrics count what reads from sstables do to it, and
// that bad values are refused with one error line before anything is
// created.
func TestMemoryFlags(t *testing.T) {
	t.Parallel()
	metricsAddr := testserver.FreeLoopbackAddr(t)
	srv := testserver.Start(t, "--metrics-listen", metricsAddr, "--gc-percent", "250", "--memory-limit", "300MiB", "--block-cache", "40MiB")
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\ngo_gc_gogc_percent 250\n", fmt.Sprintf("\ngo_gc_gomemlimit_bytes %g\n", float64(300<<20)),
		fmt.Sprintf("\ntyr_block_cache_bytes %g\n", float64(40<<20))} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", strings.TrimSpace(want))
		}
	}
	checkBlockCache(t, srv.Client(), metricsAddr, 40<<20)
	for _, tt := range []struct{ args []string }{
		{[]string{"--gc-percent", "0"}},
		{[]string{"--gc-percent", "-5"}},
		{[]string{"--memory-limit", "12x"}},
		{[]string{"--memory-limit", "-1MiB"}},
		{[]string{"--block-cache", "1MiB"}},
		{[]string{"--block-cache", "lots"}},
	} {
		data := filepath.Join(t.TempDir(), "data")
		r := testserver.Run(t, append([]string{"server", "--data", data, "--listen", "127.0.0.1:0"}, tt.args...)...)
		lines := r.ErrorLines()
		if r.Exit == 0 || len(lines) != 1 || !strings.Contains(lines[0], "invalid "+tt.args[0]) {
			t.Errorf("%v: exit %d, error lines %q", tt.args, r.Exit, lines)
		}
		if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%v: a refused start created %s (%v)", tt.args, data, err)
		}
	}
}

// checkBlockCache writes more than a memtable holds, so that the first
// blobs reach sstables, then reads them twice over: the block cache's
// metrics show misses, then hits, and bytes in use within its capacity.
func checkBlockCache(t *testing.T, c *client.Client, metricsAddr string, capacity float64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.CreateKeyspace(ctx, "cache", client.KeyspaceConfig{Sync: false}); err != nil {
		t.Fatal(err)
	}
	const blobs, size = 24, 1 << 20 // past the 16 MiB memtable
	for i := range blobs {
		if _, err := c.WriteCreate(ctx, "cache", fmt.Sprint(i), 0, bytes.Repeat([]byte{byte(i)}, size)); err != nil {
			t.Fatal(err)
		}
	}
	const (
		used   = "tyr_block_cache_used_bytes"
		hits   = "tyr_block_cache_hits_total"
		misses = "tyr_block_cache_misses_total"
	)
	before := scrapeAddr(t, metricsAddr)
	var m map[string]float64
	for {
		// The flush runs in the background: until it is done the first
		// blobs are read from the memtable, which the cache does not see.
		for range 2 {
			for i := range 4 {
				b, err := c.Read(ctx, "cache", fmt.Sprint(i), 0, size)
				if err != nil || !bytes.Equal(b, bytes.Repeat([]byte{byte(i)}, size)) {
					t.Fatalf("read of blob %d: %d bytes, %v", i, len(b), err)
				}
			}
		}
		m = scrapeAddr(t, metricsAddr)
		if m[misses] > before[misses] && m[hits] > before[hits] || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if m[misses] <= before[misses] || m[hits] <= before[hits] {
		t.Fatalf("block cache: misses %g→%g, hits %g→%g; want both to grow once blobs are read from sstables",
			before[misses], m[misses], before[hits], m[hits])
	}
	if m[used] <= 0 || m[used] > capacity {
		t.Fatalf("block cache holds %g bytes, want some and at most its capacity %g", m[used], capacity)
	}
}
