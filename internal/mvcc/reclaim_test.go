package mvcc

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/tyrstore/tyr/internal/txn"
)

func reclaimPass(t *testing.T, s *Store) ReclaimStats {
	t.Helper()
	st, err := s.Reclaim(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestReclaimMarks checks which removals leave a reclaim marker, that a
// small removal waits ReclaimDelayMax for others while a large one is
// compacted at the next pass, and that a pass leaves no marker behind.
func TestReclaimMarks(t *testing.T) {
	clock := newFakeClock()
	s := openStore(t, Options{MVCC: true, Now: clock.Now, ChunkBytes: 1 << 20})
	big := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	for b := 0; b < 6; b++ {
		for off := uint64(0); off < 4<<20; off += 1 << 20 {
			mustCommit(t, s, txn.Op{Key: fmt.Sprintf("big%d", b), Kind: txn.OpWrite, Offset: off, Data: big, Create: true})
		}
	}
	mustCommit(t, s, txn.Op{Key: "small", Kind: txn.OpWrite, Data: []byte("x"), Create: true})
	mustCommit(t, s, txn.Op{Key: "kept", Kind: txn.OpWrite, Data: big, Create: true})
	// On disk, so that the gaps between marked blobs count.
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}

	// Writes and overwrites mark nothing.
	mustCommit(t, s, txn.Op{Key: "kept", Kind: txn.OpWrite, Data: []byte("y")})
	if marks, err := s.reclaimMarks(); err != nil || len(marks) != 0 {
		t.Fatalf("markers after writes: %v, %v", marks, err)
	}

	// A small delete waits.
	mustCommit(t, s, txn.Op{Key: "small", Kind: txn.OpDelete})
	if st := reclaimPass(t, s); st.Spans != 0 || st.Pending != 1 {
		t.Fatalf("small delete: %+v, want it pending (1 byte)", st)
	}
	// Deleting one blob of 4 MiB and truncating another to 1 MiB removes
	// 7 MiB: due at once. big1 lies between them, so the two share one
	// span only if big1 takes no more than what was removed.
	mustCommit(t, s, txn.Op{Key: "big0", Kind: txn.OpDelete})
	mustCommit(t, s, txn.Op{Key: "big2", Kind: txn.OpTruncate, Size: 1 << 20})
	marks, err := s.reclaimMarks()
	if err != nil || len(marks) != 3 {
		t.Fatalf("markers: %+v, %v; want big0, big2, small", marks, err)
	}
	if marks[0].key != "big0" || marks[0].removed != 4<<20 || marks[1].key != "big2" || marks[1].removed != 3<<20 {
		t.Fatalf("markers %+v: want big0 with 4 MiB removed, big2 with 3 MiB", marks)
	}
	// big1 (4 MiB, incompressible) lies between big0 and big2, more than
	// big0 removed: two spans. big0's is due; big2's 3 MiB is below
	// ReclaimBytesMin, and the 10 MiB between it and small keep them apart.
	st := reclaimPass(t, s)
	if st.Spans != 1 || st.Freed < 3<<20 || st.Pending != 3<<20+1 {
		t.Fatalf("after deleting 7 MiB: %+v, want big0's span compacted, freeing about 4 MiB, and 3 MiB + 1 byte pending", st)
	}
	if got := s.reclaimPending.Load(); got != 3<<20+1 {
		t.Fatalf("reclaim pending %d, want 3 MiB + 1", got)
	}
	clock.Advance(ReclaimDelayMax)
	if st := reclaimPass(t, s); st.Spans != 2 || st.Pending != 0 {
		t.Fatalf("after ReclaimDelayMax: %+v, want big2's and small's spans compacted", st)
	}
	if marks, err := s.reclaimMarks(); err != nil || len(marks) != 0 {
		t.Fatalf("markers left: %+v, %v", marks, err)
	}
	// What is left reads as before.
	for _, key := range []string{"big1", "big3"} {
		got, _, err := s.Read(key, 1<<20, 1<<20)
		if err != nil || string(got) != string(big) {
			t.Fatalf("%s after reclaim: %d bytes, %v", key, len(got), err)
		}
	}
	if got, _, err := s.Read("big2", 0, 2<<20); err != nil || len(got) != 1<<20 {
		t.Fatalf("big2 after reclaim: %d bytes, %v", len(got), err)
	}
}

// TestUsage checks the logical bytes a store counts, with and without a
// placement: the chunks ever written, holes inside them included, and
// not the unwritten middle of a sparse blob, which costs nothing to count.
func TestUsage(t *testing.T) {
	s := openStore(t, Options{MVCC: true, ChunkBytes: 4 << 10})
	mustCommit(t, s, txn.Op{Key: "a", Kind: txn.OpWrite, Data: make([]byte, 10<<10), Create: true})
	// b: 5 KiB, of which only chunk 1 (1 KiB) was written.
	mustCommit(t, s, txn.Op{Key: "b", Kind: txn.OpCreate}, txn.Op{Key: "b", Kind: txn.OpTruncate, Size: 5 << 10})
	mustCommit(t, s, txn.Op{Key: "b", Kind: txn.OpWrite, Offset: 4 << 10, Data: []byte{1}})
	// c: one byte at 1 TiB, in the 2^28th chunk.
	mustCommit(t, s, txn.Op{Key: "c", Kind: txn.OpWrite, Offset: 1 << 40, Data: []byte{1}, Create: true})
	u, err := s.Usage(nil)
	if want := uint64(10<<10 + 1<<10 + 1); err != nil || u.Blobs != 3 || u.LogicalBytes != want {
		t.Fatalf("usage %+v, %v; want 3 blobs, %d bytes", u, err, want)
	}
	// Holding chunk 2 of a (2 KiB), chunk 1 of b (1 KiB) and none of c.
	u, err = s.Usage(holdsOnly{"a": 2, "b": 1})
	if err != nil || u.Blobs != 3 || u.LogicalBytes != 3<<10 {
		t.Fatalf("usage %+v, %v; want 3 blobs, 3 KiB held", u, err)
	}
}

// holdsOnly holds one chunk per key, and manages nothing.
type holdsOnly map[string]uint64

func (h holdsOnly) Manages(string) bool { return false }
func (h holdsOnly) Holds(key string, c uint64) bool {
	held, ok := h[key]
	return ok && held == c
}
