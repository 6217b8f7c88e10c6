package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/keyspace"
	"github.com/tyrstore/tyr/internal/mvcc"
	"github.com/tyrstore/tyr/internal/txn"
)

// dirBytes is the space the files under dir take on disk, as du counts it.
func dirBytes(t *testing.T, dir string) uint64 {
	t.Helper()
	var n uint64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // deleted meanwhile
			}
			return err
		}
		n += uint64(st.Blocks) * 512
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func commit(t *testing.T, ks *Keyspace, ops ...txn.Op) error {
	t.Helper()
	p, err := ks.Store.Prepare(ops)
	if err != nil {
		return err
	}
	return p.Commit()
}

// fill writes blobs of size bytes under prefix, 1 MiB per commit, with
// bytes that do not compress.
func fill(t *testing.T, ks *Keyspace, prefix string, blobs int, size uint64) {
	t.Helper()
	buf := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for b := 0; b < blobs; b++ {
		for off := uint64(0); off < size; off += uint64(len(buf)) {
			for i := 0; i < len(buf); i += 8 {
				binary.LittleEndian.PutUint64(buf[i:], rng.Uint64())
			}
			if err := commit(t, ks, txn.Op{Key: fmt.Sprintf("%s%d", prefix, b), Kind: txn.OpWrite, Offset: off, Data: buf[:min(uint64(len(buf)), size-off)], Create: true}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// waitBytes waits up to within for dir to take at most want bytes, and
// fails the test if it does not.
func waitBytes(t *testing.T, dir string, want uint64, within time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		n := dirBytes(t, dir)
		if n <= want {
			return
		}
		if time.Since(start) > within {
			t.Fatalf("%s takes %d bytes after %v, want at most %d", dir, n, within, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestReclaimAfterRemoval writes 200 MiB, removes it by deletes, by
// truncates and by dropping the keyspace, and checks each time that the
// data directory comes back to within 10% of the data's size of what it
// took before, with no writes after the removal.
func TestReclaimAfterRemoval(t *testing.T) {
	const (
		blobs = 4
		size  = 50 << 20
		total = blobs * size
	)
	for _, how := range []string{"delete", "truncate", "drop"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			e, err := Open(Options{Dir: dir, GCInterval: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if _, err := e.Create("data", keyspace.DefaultConfig()); err != nil {
				t.Fatal(err)
			}
			before := dirBytes(t, dir)
			ks, err := e.Acquire("data")
			if err != nil {
				t.Fatal(err)
			}
			released := false
			defer func() {
				if !released {
					ks.Release()
				}
			}()
			fill(t, ks, "b", blobs, size)
			full := dirBytes(t, dir)
			if full < before+total*9/10 {
				t.Fatalf("the data directory took %d bytes before and %d after writing %d: the data is not on disk", before, full, total)
			}
			removed := time.Now()
			for b := 0; b < blobs; b++ {
				key := fmt.Sprintf("b%d", b)
				op := txn.Op{Key: key, Kind: txn.OpDelete}
				if how == "truncate" {
					op = txn.Op{Key: key, Kind: txn.OpTruncate}
				}
				if how != "drop" {
					if err := commit(t, ks, op); err != nil {
						t.Fatal(err)
					}
				}
			}
			ks.Release()
			released = true
			if how == "drop" {
				if err := e.Drop("data"); err != nil {
					t.Fatal(err)
				}
			}
			// Reclaimed within ReclaimDelayMax of the removal, plus passes.
			waitBytes(t, dir, before+total/10, mvcc.ReclaimDelayMax+5*time.Second-time.Since(removed))
			t.Logf("%s: %d bytes before, %d written, %d on disk after; %d, %v after the removal",
				how, before, total, full, dirBytes(t, dir), time.Since(removed).Round(time.Millisecond))
		})
	}
}

// TestRoomFloor checks that a free-space floor above what the file system
// has refuses writes with ErrNoSpace and changes nothing, while deletes
// and truncates pass.
func TestRoomFloor(t *testing.T) {
	dir := t.TempDir()
	e, err := Open(Options{Dir: dir, MinFreeBytes: 1 << 62})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, err := e.Create("data", keyspace.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	ks, err := e.Acquire("data")
	if err != nil {
		t.Fatal(err)
	}
	defer ks.Release()
	err = commit(t, ks, txn.Op{Key: "a", Kind: txn.OpWrite, Data: []byte("x"), Create: true})
	if !errors.Is(err, errs.ErrNoSpace) || !errs.IsRefused(err) {
		t.Fatalf("write below the floor: %v, want a refusal of class no space", err)
	}
	if _, err := ks.Store.Stat("a"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("the refused write left blob a: %v", err)
	}
	for _, op := range []txn.Op{{Key: "a", Kind: txn.OpDelete}, {Key: "a", Kind: txn.OpTruncate}} {
		if err := commit(t, ks, op); errors.Is(err, errs.ErrNoSpace) {
			t.Errorf("%v below the floor: %v", op.Kind, err)
		}
	}
}
