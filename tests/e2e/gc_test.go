package e2e

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/testserver"
)

// dirBytes is the space the files under dir take.
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // a file compacted away while walking
			}
			return err
		}
		if info, err := d.Info(); err == nil && !d.IsDir() {
			n += info.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// gcBoundBytes bounds the data directory of TestVersionGCBounded.
const gcBoundBytes = 768 << 20

// TestVersionGCBounded: while a transaction that read a blob stays open,
// the version it read stays readable past --version-linger, and once the
// read timeout (--version-retention) passes, it is not. And, with
// TYR_GC_OVERWRITES set (`make gc-soak` sets 10,000), a 1 MiB blob
// overwritten that many times in an MVCC keyspace keeps the data directory
// below gcBoundBytes whatever the bytes written, because superseded
// versions no transaction uses are collected after the linger time rather
// than the read timeout. Without it, 300 overwrites run and their space is
// only reported: the space is freed as compaction gets to the collector's
// range deletions, and on a machine whose cores are taken by other work it
// lags, so the bound is a soak check, not a unit check.
func TestVersionGCBounded(t *testing.T) {
	overwrites, soak := 300, false
	if v := os.Getenv("TYR_GC_OVERWRITES"); v != "" {
		soak = true
		n, err := strconv.Atoi(v)
		if err != nil || n < 10 {
			t.Fatalf("TYR_GC_OVERWRITES=%q: want a number of at least 10", v)
		}
		overwrites = n
	}
	const ks, retention = "gcks", 6 * time.Second
	srv := testserver.Start(t, "--version-linger", "1s", "--version-retention", retention.String())
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(srv.Log())
		}
	})
	c := srv.Client()
	ctx := context.Background()
	if _, err := c.CreateKeyspace(ctx, ks, client.KeyspaceConfig{ChunkSize: 1 << 20, MVCC: true, Sync: false}); err != nil {
		t.Fatal(err)
	}
	blob := func(i int) []byte { // incompressible, so the LSM stores every byte
		b := make([]byte, 1<<20)
		_, _ = rand.NewChaCha8([32]byte{byte(i), byte(i >> 8), byte(i >> 16)}).Read(b)
		return b
	}
	if _, err := c.WriteCreate(ctx, ks, "big", 0, blob(0)); err != nil {
		t.Fatal(err)
	}
	overwrite := func(i int) {
		t.Helper()
		if _, err := c.Write(ctx, ks, "big", 0, blob(i)); err != nil {
			t.Fatalf("overwrite %d: %v", i, err)
		}
	}

	// An open transaction's version stays readable past the linger time.
	tx := c.Begin(ks)
	first, err := tx.Read(ctx, "big", 0, 1<<20)
	if err != nil || !bytes.Equal(first, blob(0)) {
		t.Fatalf("transaction's first read: %v", err)
	}
	opened := time.Now()
	for i := 1; i <= 20; i++ {
		overwrite(i)
	}
	time.Sleep(2500 * time.Millisecond) // past the linger time and a collector pass
	if again, err := tx.Read(ctx, "big", 0, 1<<20); err != nil || !bytes.Equal(again, first) {
		t.Fatalf("repeated read %v after the first: %v (equal: %v)", time.Since(opened), err, bytes.Equal(again, first))
	}
	// Past the read timeout it is gone: the next read fails as a conflict
	// (and the transaction would run again).
	time.Sleep(retention + 2*time.Second - time.Since(opened))
	overwrite(21)
	time.Sleep(2500 * time.Millisecond)
	if _, err := tx.Read(ctx, "big", 0, 1<<20); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("read of a version past the read timeout: %v, want a conflict", err)
	}
	tx.Rollback()

	// Steady overwrites, no transaction open, on a server with the default
	// read timeout (5 minutes): space stays bounded all the same.
	srv = testserver.Start(t, "--version-linger", "1s")
	c = srv.Client()
	if _, err := c.CreateKeyspace(ctx, ks, client.KeyspaceConfig{ChunkSize: 1 << 20, MVCC: true, Sync: false}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteCreate(ctx, ks, "big", 0, blob(100)); err != nil {
		t.Fatal(err)
	}
	var peak int64
	start := time.Now()
	for i := 1; i <= overwrites; i++ {
		overwrite(100 + i)
		if i%50 == 0 {
			peak = max(peak, dirBytes(t, srv.DataDir))
		}
	}
	took := time.Since(start)
	written := int64(overwrites) << 20
	time.Sleep(3 * time.Second) // linger, then a collector pass
	final := dirBytes(t, srv.DataDir)
	t.Logf("%d overwrites of 1 MiB (%d MiB) in %v: data directory at most %.1f MiB while writing, %.1f MiB 3 s after",
		overwrites, written>>20, took.Round(time.Millisecond), float64(peak)/(1<<20), float64(final)/(1<<20))
	// Keeping every version would take the bytes written. What stays is
	// the versions of the last linger time, what compaction has not yet
	// reclaimed, and the LSM's own files: a bound that does not grow with
	// the number of overwrites.
	if soak && peak > gcBoundBytes {
		t.Fatalf("data directory reached %.1f MiB for %d MiB written, above %d MiB", float64(peak)/(1<<20), written>>20, gcBoundBytes>>20)
	}
	got, err := c.Read(ctx, ks, "big", 0, 1<<20)
	if err != nil || !bytes.Equal(got, blob(100+overwrites)) {
		t.Fatalf("current content: %v", err)
	}
	info, err := c.Keyspace(ctx, ks)
	if err != nil || info.LogicalBytes != 1<<20 {
		t.Fatalf("keyspace info: %+v, %v; want 1 MiB of logical bytes", info, err)
	}
	t.Logf("physical/logical: %.2f by the store's figure (%d on disk, %d logical, %d to reclaim), %.2f by the data directory",
		float64(info.DiskBytes)/float64(info.LogicalBytes), info.DiskBytes, info.LogicalBytes, info.ReclaimBytes,
		float64(final)/float64(info.LogicalBytes))
}
