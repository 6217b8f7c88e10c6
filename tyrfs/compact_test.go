package tyrfs

// The servers compact directory logs in the background
// (internal/server/fscompact.go): on one server (fs_test.go's
// TestCompaction) and on a cluster where the directory's blob lives on a
// node other than the one the client talks to, which coordinates the
// removals, notices them and compacts through its read and commit paths;
// and creates racing the compactions are never lost.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/fslayout"
	"github.com/tyrstore/tyr/internal/testserver"
)

// compactDeadline bounds how long a server takes to compact a log whose
// removals dominate it (the worker is paced, and others' tests share the
// machine).
const compactDeadline = time.Minute

// compacts creates 2*CompactRecordsMin files in a new directory dir and
// removes all but every eighth, then waits until the directory's blob
// shrinks below the bytes its log was appended, and checks the listing
// is the same before and after.
func compacts(t *testing.T, ctx context.Context, c *client.Client, f *FS, dir string) {
	t.Helper()
	must[Attr](t)(f.Mkdir(ctx, dir, Owner{Mode: 0o755}))
	n := 2 * fslayout.CompactRecordsMin
	for i := range n {
		p := fmt.Sprintf("%s/%03d", dir, i)
		must[Attr](t)(f.Create(ctx, p, Owner{}))
		if i%8 != 0 {
			if err := f.Unlink(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	kept := n / 8
	appended := uint64(fslayout.DirLogOffset + (2*n-kept)*(fslayout.RecordHeaderBytes+3))
	want := names(t, ctx, f, dir)
	if len(want) != kept {
		t.Fatalf("%d entries, want %d: %v", len(want), kept, want)
	}
	var size uint64
	took := testserver.Eventually(t, compactDeadline, "the directory's log compacted", func() (bool, string) {
		size = must[client.BlobInfo](t)(c.Stat(ctx, f.ks, fslayout.DirKey(dir))).Size
		return size < appended, fmt.Sprintf("blob of %d bytes, %d appended", size, appended)
	})
	if got := names(t, ctx, f, dir); !slices.Equal(got, want) {
		t.Fatalf("entries changed by compaction: %v, then %v", want, got)
	}
	if compacted := uint64(fslayout.DirLogOffset + kept*(fslayout.RecordHeaderBytes+3)); size < compacted {
		t.Fatalf("blob of %d bytes, below the %d of its entries alone", size, compacted)
	}
	t.Logf("%s: log of %d bytes appended, %d after compaction, %v after the last removal", dir, appended, size, took)
}

// racingCreates creates files in dir from several goroutines while others
// remove files of their own there, so that compactions race creates, and
// checks every create is listed at the end.
func racingCreates(t *testing.T, ctx context.Context, c *client.Client, f *FS, dir string) {
	t.Helper()
	must[Attr](t)(f.Mkdir(ctx, dir, Owner{Mode: 0o755}))
	const workers, each = 4, 24
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				p := fmt.Sprintf("%s/w%d-%02d", dir, w, i)
				if _, err := f.Create(ctx, p, Owner{}); err != nil {
					t.Error(err)
					return
				}
				if w%2 == 1 { // removers: their removals make the log need compaction
					if err := f.Unlink(ctx, p); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	var want []string
	for w := 0; w < workers; w += 2 {
		for i := range each {
			want = append(want, fmt.Sprintf("w%d-%02d:file", w, i))
		}
	}
	if got := names(t, ctx, f, dir); !slices.Equal(got, want) {
		t.Fatalf("entries after racing creates: %d %v, want %d %v", len(got), got, len(want), want)
	}
	checkTree(t, ctx, c, f)
}

func TestCompactionRacingCreates(t *testing.T) {
	ctx, c, f := newFS(t)
	racingCreates(t, ctx, c, f, "/r")
}

// newClusterFS starts 3 nodes (tyr cluster up with upArgs) and returns a
// file system in keyspace "tfs", at replication 1, through node1, once
// every node knows the keyspace.
func newClusterFS(t *testing.T, upArgs ...string) (context.Context, *client.Client, *FS, *testserver.LocalCluster) {
	t.Helper()
	lc := testserver.UpCluster(t, 3, upArgs...)
	c, err := client.Dial(lc.Endpoints[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	cfg := client.DefaultKeyspaceConfig()
	cfg.Replication = 1
	if _, err := c.CreateKeyspace(ctx, "tfs", cfg); err != nil {
		t.Fatal(err)
	}
	// The other nodes learn of the keyspace by gossip.
	for k := 2; k <= 3; k++ {
		o, err := client.Dial(lc.Endpoints[k-1])
		if err != nil {
			t.Fatal(err)
		}
		testserver.WaitKeyspace(t, "tfs", o)
		_ = o.Close()
	}
	f, err := New(ctx, c, "tfs")
	if err != nil {
		t.Fatal(err)
	}
	return ctx, c, f, lc
}

// TestCompactionCluster runs compacts and racingCreates on 3 nodes at
// replication 1, on directories whose blobs node1, the client's endpoint,
// does not hold, and checks node1 counted the compactions.
func TestCompactionCluster(t *testing.T) {
	ctx, c, f, lc := newClusterFS(t, "--metrics")
	place := lc.Placer()
	elsewhere := func(prefix string) string {
		for i := range 100 {
			dir := fmt.Sprintf("/%s%d", prefix, i)
			if h := place.Holders("tfs", fslayout.DirKey(dir), 1); h[0] != 1 {
				t.Logf("directory %s: blob %q held by node%d, the client's endpoint is node1", dir, fslayout.DirKey(dir), h[0])
				return dir
			}
		}
		t.Fatal("no directory name whose blob another node holds")
		return ""
	}
	before := testserver.Metric(t, lc.MetricsAddr(1), "tyr_fs_dir_compactions_total")
	compacts(t, ctx, c, f, elsewhere("d"))
	racingCreates(t, ctx, c, f, elsewhere("r"))
	after := testserver.Metric(t, lc.MetricsAddr(1), "tyr_fs_dir_compactions_total")
	t.Logf("node1's checks: before %v, after %v", before, after)
	if after["compacted"] <= before["compacted"] {
		t.Fatalf("node1 counted no compaction: %v, then %v", before, after)
	}
}
