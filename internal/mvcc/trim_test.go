package mvcc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/txn"
)

// trimStore is a store with 4 chunks of two pages each in blob "b" (the
// last chunk half full), chunk 1 rewritten at a later version (so it has
// two page versions with MVCC on), and a neighbour blob "c"; it returns
// b's bytes.
func trimStore(t *testing.T, mvccOn bool) (*Store, []byte) {
	t.Helper()
	const cs = 128 << 10
	s := openStore(t, Options{MVCC: mvccOn, Now: newFakeClock().Now, ChunkBytes: cs})
	data := make([]byte, 3*cs+cs/2)
	for i := range data {
		data[i] = byte(i/997 + 1)
	}
	commitAt(t, s, 100, txn.Op{Key: "b", Kind: txn.OpWrite, Data: data, Create: true},
		txn.Op{Key: "c", Kind: txn.OpWrite, Data: []byte("neighbour"), Create: true})
	patch := bytes.Repeat([]byte("X"), 300)
	commitAt(t, s, 200, txn.Op{Key: "b", Kind: txn.OpWrite, Offset: cs + 10, Data: patch})
	copy(data[cs+10:], patch)
	return s, data
}

// chunkPages counts the page keys of chunk c of key (every version).
func chunkPages(t *testing.T, s *Store, key string, c uint64) int {
	t.Helper()
	it, err := s.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	lo, hi := c*s.chunkBytes/s.pageBytes, (c+1)*s.chunkBytes/s.pageBytes
	n := 0
	for ok := it.SeekGE(pageKeyVersionless(key, lo)); ok && bytes.Compare(it.Key(), pageKeyVersionless(key, hi)) < 0; ok = it.Next() {
		n++
	}
	return n
}

func walBytes(s *Store) uint64 { return s.db.Metrics().WAL.BytesIn }

// reclaimMarked returns the bytes key's reclaim marker names (0: none).
func reclaimMarked(t *testing.T, s *Store, key string) uint64 {
	t.Helper()
	v, closer, err := s.db.Get(reclaimKey(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	return binary.BigEndian.Uint64(v)
}

// TestTrimChunks: a holder that gave up chunks 0 and 2 of a 4-chunk blob
// drops their pages (every version) and chunk versions in one batch, marks
// their bytes for reclaim, and serves its other chunks as before; a second
// trim finds nothing and writes nothing. A version manager that gave up
// chunks 2 and 3 drops their pages but keeps every chunk version.
func TestTrimChunks(t *testing.T) {
	for _, on := range []bool{true, false} {
		s, data := trimStore(t, on)
		cs := s.chunkBytes
		size := uint64(len(data))
		before, err := readRecord(s.db, "b")
		if err != nil {
			t.Fatal(err)
		}
		if len(before.Chunks) != 4 {
			t.Fatalf("mvcc %v: chunk versions %v, want 4", on, before.Chunks)
		}
		if on && chunkPages(t, s, "b", 1) != 3 {
			t.Fatalf("chunk 1 has %d page versions, want 3 (two pages, the first in two versions)", chunkPages(t, s, "b", 1))
		}

		holder := chunksOf{held: map[uint64]bool{1: true, 3: true}}
		got, err := s.TrimChunks("b", holder)
		if err != nil || got != (Trimmed{Chunks: 2}) {
			t.Fatalf("mvcc %v: TrimChunks = %+v, %v; want chunks 0 and 2 dropped", on, got, err)
		}
		for c, want := range map[uint64]bool{0: false, 1: true, 2: false, 3: true} {
			if n := chunkPages(t, s, "b", c); (n > 0) != want {
				t.Errorf("mvcc %v: chunk %d has %d page keys after the trim, want some: %v", on, c, n, want)
			}
			v, err := getChunkVersion(s.db, "b", c)
			if err != nil {
				t.Fatal(err)
			}
			if (v != 0) != want || (want && v != before.Chunks[c]) {
				t.Errorf("mvcc %v: chunk %d at version %d after the trim, was %d (kept: %v)", on, c, v, before.Chunks[c], want)
			}
		}
		for _, c := range []uint64{1, 3} {
			end := min(size, (c+1)*cs)
			if got := readChunks(t, s, "b", c*cs, end-c*cs, size); !bytes.Equal(got, data[c*cs:end]) {
				t.Errorf("mvcc %v: chunk %d reads differently after the trim", on, c)
			}
		}
		if st, err := s.Stat("b"); err != nil || st.Size != size || st.Version != before.Version {
			t.Errorf("mvcc %v: record after the trim %+v, %v; want it unchanged", on, st, err)
		}
		if got := readAll(t, s, "c"); string(got) != "neighbour" {
			t.Errorf("mvcc %v: the neighbour blob reads %q", on, got)
		}
		if m := reclaimMarked(t, s, "b"); m != 2*cs {
			t.Errorf("mvcc %v: reclaim marks %d bytes, want %d (chunks 0 and 2)", on, m, 2*cs)
		}

		// Nothing left to drop: no write.
		wal := walBytes(s)
		if changed, err := s.Trim("b", holder); changed || err != nil {
			t.Fatalf("mvcc %v: second Trim = %v, %v; want no change", on, changed, err)
		}
		if walBytes(s) != wal {
			t.Errorf("mvcc %v: a trim with nothing to drop wrote %d bytes", on, walBytes(s)-wal)
		}
		if changed, err := s.Trim("b", nil); changed || err != nil {
			t.Errorf("mvcc %v: Trim with no placement = %v, %v; want no change", on, changed, err)
		}
		if changed, err := s.Trim("absent", holder); changed || err != nil {
			t.Errorf("mvcc %v: Trim of an absent blob = %v, %v; want no change", on, changed, err)
		}

		// A version manager keeps every chunk version, not the pages of
		// the chunks it does not hold; the size stays below the last
		// chunk's end (the mark is clamped to it).
		vm, data := trimStore(t, on)
		manager := chunksOf{manages: true, held: map[uint64]bool{0: true, 1: true}}
		got, err = vm.TrimChunks("b", manager)
		if err != nil || got != (Trimmed{Chunks: 2}) {
			t.Fatalf("mvcc %v: version manager's TrimChunks = %+v, %v; want chunks 2 and 3 dropped", on, got, err)
		}
		for c := range uint64(4) {
			if n := chunkPages(t, vm, "b", c); (n > 0) != (c < 2) {
				t.Errorf("mvcc %v: version manager's chunk %d has %d page keys", on, c, n)
			}
			if v, err := getChunkVersion(vm.db, "b", c); err != nil || v != before.Chunks[c] {
				t.Errorf("mvcc %v: version manager's chunk %d at version %d (%v), want %d kept", on, c, v, err, before.Chunks[c])
			}
		}
		if got := readChunks(t, vm, "b", 0, 2*cs, size); !bytes.Equal(got, data[:2*cs]) {
			t.Errorf("mvcc %v: the version manager's chunks read differently after the trim", on)
		}
		if m := reclaimMarked(t, vm, "b"); m != size-2*cs {
			t.Errorf("mvcc %v: version manager's reclaim marks %d bytes, want %d", on, m, size-2*cs)
		}
		wal = walBytes(vm)
		if changed, err := vm.Trim("b", manager); changed || err != nil || walBytes(vm) != wal {
			t.Errorf("mvcc %v: version manager's second Trim = %v, %v, wrote %d bytes; want nothing", on, changed, err, walBytes(vm)-wal)
		}
	}
}

// TestTrimWholeBlob: a store that neither manages a blob nor holds any of
// its chunks drops all of it; one that holds a chunk past the blob's end
// holds none of it.
func TestTrimWholeBlob(t *testing.T) {
	s, data := trimStore(t, true)
	got, err := s.TrimChunks("b", chunksOf{held: map[uint64]bool{7: true}})
	if err != nil || got != (Trimmed{Blob: true}) {
		t.Fatalf("TrimChunks = %+v, %v; want the whole blob dropped", got, err)
	}
	if _, err := s.Stat("b"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("Stat after the drop: %v, want not found", err)
	}
	if n := pageVersions(t, s, "b"); n != 0 {
		t.Fatalf("%d page keys left", n)
	}
	if rec, err := readRecord(s.db, "b"); err != nil || rec.Exists || len(rec.Chunks) != 0 {
		t.Fatalf("record after the drop %+v, %v; want none and no chunk versions", rec, err)
	}
	if m := reclaimMarked(t, s, "b"); m != uint64(len(data)) {
		t.Fatalf("reclaim marks %d bytes, want %d", m, len(data))
	}
	if got := readAll(t, s, "c"); string(got) != "neighbour" {
		t.Fatalf("the neighbour blob reads %q", got)
	}
	if changed, err := s.Trim("b", chunksOf{}); changed || err != nil {
		t.Fatalf("Trim of the dropped blob = %v, %v; want no change", changed, err)
	}
}
