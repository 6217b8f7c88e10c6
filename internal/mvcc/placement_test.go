package mvcc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/txn"
)

// chunksOf is a Placement: the store manages every blob if manages, and
// holds the listed chunks.
type chunksOf struct {
	manages bool
	held    map[uint64]bool
}

func (p chunksOf) Manages(string) bool           { return p.manages }
func (p chunksOf) Holds(_ string, c uint64) bool { return p.held[c] }

type member struct {
	s  *Store
	pl Placement
}

// chainCommit runs ops through members in order, as the chain does: the
// first hands its Bases to the rest. It returns the merged results, or the
// first refusal (everything staged is aborted then).
func chainCommit(t *testing.T, ops []txn.Op, version uint64, members ...member) ([]txn.Result, error) {
	t.Helper()
	var staged []*Pending
	var bases map[string]Base
	for _, m := range members {
		p, err := m.s.TryPrepareStep(ops, Step{Version: version, Bases: bases, Placement: m.pl})
		if err != nil {
			for _, q := range staged {
				q.Abort()
			}
			return nil, err
		}
		staged = append(staged, p)
		bases = p.Bases()
	}
	results := staged[len(staged)-1].Results()
	for i := len(staged) - 1; i >= 0; i-- {
		results = txn.MergeResults(staged[i].Results(), results)
		if err := staged[i].Commit(); err != nil {
			t.Fatal(err)
		}
	}
	return results, nil
}

func readChunks(t *testing.T, s *Store, key string, off, n uint64, size uint64) []byte {
	t.Helper()
	b, err := s.ReadChunks(key, off, n, 0, size, 0)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPlacementChunks: a blob spread over a version manager holding chunk 0
// and two holders of chunks 1 and 2 (4 KiB chunks). Each keeps only its
// chunks' pages, appends land where the version manager says, conditional
// ops are decided by the holders of their chunk, and a holder that missed a
// commit of its chunk, or a move of the blob's end across it, refuses.
func TestPlacementChunks(t *testing.T) {
	const cs = 4 << 10
	opts := func() Options { return Options{MVCC: true, Now: newFakeClock().Now, ChunkBytes: cs} }
	vm := member{openStore(t, opts()), chunksOf{manages: true, held: map[uint64]bool{0: true}}}
	h1 := member{openStore(t, opts()), chunksOf{held: map[uint64]bool{1: true}}}
	h2 := member{openStore(t, opts()), chunksOf{held: map[uint64]bool{2: true}}}
	data := bytes.Repeat([]byte("0123456789abcdef"), 2*cs/16)

	if _, err := chainCommit(t, []txn.Op{{Key: "b", Kind: txn.OpWrite, Data: data, Create: true}}, 100, vm, h1); err != nil {
		t.Fatal(err)
	}
	if got := readChunks(t, vm.s, "b", 0, 2*cs, 2*cs); !bytes.Equal(got[:cs], data[:cs]) || !bytes.Equal(got[cs:], make([]byte, cs)) {
		t.Fatalf("the version manager holds chunk 0 only; read %q...", got[cs:cs+16])
	}
	if got := readChunks(t, h1.s, "b", cs, cs, 2*cs); !bytes.Equal(got, data[cs:]) {
		t.Fatalf("holder of chunk 1 read %q..., want %q...", got[:16], data[cs:cs+16])
	}

	// h2 has no record of b: it appends where the version manager says.
	res, err := chainCommit(t, []txn.Op{{Key: "b", Kind: txn.OpAppend, Data: []byte("tail")}}, 200, vm, h2)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Offset != 2*cs || res[0].Size != 2*cs+4 {
		t.Fatalf("append result %+v, want offset %d size %d", res[0], 2*cs, 2*cs+4)
	}
	if got := readChunks(t, h2.s, "b", 2*cs, 100, 2*cs+4); string(got) != "tail" {
		t.Fatalf("holder of chunk 2 read %q, want tail", got)
	}
	for c, want := range []uint64{100, 100, 200} {
		if v, err := getChunkVersion(vm.s.db, "b", uint64(c)); err != nil || v != want {
			t.Fatalf("version manager's chunk %d at version %d (%v), want %d", c, v, err, want)
		}
	}

	// A compare-and-swap on chunk 1 is decided by its holder, whatever the
	// version manager (which does not hold it) finds.
	cas := txn.Op{Key: "b", Kind: txn.OpCompareAndSwap, Offset: cs, Expected: []byte("XXXX"), Data: []byte("YYYY")}
	if _, err := chainCommit(t, []txn.Op{cas}, 300, vm, h1); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("CAS with a wrong expected value: %v, want a conflict from the holder", err)
	}
	cas.Expected = data[cs : cs+4]
	if _, err := chainCommit(t, []txn.Op{cas}, 300, vm, h1); err != nil {
		t.Fatalf("CAS with the right expected value: %v", err)
	}

	// An atomic op's value comes from the holder.
	var one [8]byte
	binary.LittleEndian.PutUint64(one[:], 1)
	add := txn.Op{Key: "b", Kind: txn.OpAtomic, Offset: cs + 8, Width: 8, Func: txn.FuncAdd, Operand: 5}
	res, err = chainCommit(t, []txn.Op{add}, 400, vm, h1)
	if err != nil {
		t.Fatal(err)
	}
	if want := binary.LittleEndian.Uint64(data[cs+8:cs+16]) + 5; res[0].Value != want || res[0].Unheld {
		t.Fatalf("atomic add result %+v, want value %d from the holder", res[0], want)
	}
	span := txn.Op{Key: "b", Kind: txn.OpAtomic, Offset: cs - 4, Width: 8, Func: txn.FuncAdd, Operand: 1}
	if _, err := chainCommit(t, []txn.Op{span}, 500, vm, h1); !errors.Is(err, errs.ErrInvalidArgument) || !strings.Contains(err.Error(), "different nodes") {
		t.Fatalf("atomic op across chunks: %v, want invalid argument", err)
	}

	// h1 misses a write of chunk 1; the next one finds it out.
	if _, err := chainCommit(t, []txn.Op{{Key: "b", Kind: txn.OpWrite, Offset: cs, Data: []byte("miss")}}, 600, vm); err != nil {
		t.Fatal(err)
	}
	_, err = chainCommit(t, []txn.Op{{Key: "b", Kind: txn.OpWrite, Offset: cs, Data: []byte("next")}}, 700, vm, h1)
	var cm *ChunkMismatchError
	if !errors.As(err, &cm) || cm.Chunk != 1 || cm.Have != 400 || cm.Want != 600 || cm.Extent {
		t.Fatalf("holder behind on chunk 1: %v, want a chunk mismatch (400 here, 600 on the version manager)", err)
	}

	// h2 misses a truncate that moves the end before its chunk.
	if _, err := chainCommit(t, []txn.Op{{Key: "b", Kind: txn.OpTruncate, Size: 10}}, 800, vm); err != nil {
		t.Fatal(err)
	}
	_, err = chainCommit(t, []txn.Op{{Key: "b", Kind: txn.OpTruncate, Size: 3 * cs}}, 900, vm, h2)
	if !errors.As(err, &cm) || !cm.Extent || cm.Chunk != 2 || cm.SizeHere != 2*cs+4 || cm.SizeWant != 10 {
		t.Fatalf("holder behind on the blob's end: %v, want an extent mismatch at chunk 2", err)
	}

	// A member that manages a blob and is handed no base for it has no
	// part in it (it would come after the blob's version manager): it
	// passes the blob by, changing nothing, and its results are Unheld.
	p, err := h1.s.TryPrepareStep([]txn.Op{{Key: "b", Kind: txn.OpAppend, Data: []byte("x")}}, Step{Version: 1000, Placement: h1.pl})
	if err != nil {
		t.Fatalf("holder first in a chain: %v, want the blob passed by", err)
	}
	if r := p.Results(); len(r) != 1 || !r[0].Unheld || len(p.Bases()) != 0 {
		t.Fatalf("holder first in a chain: results %+v, bases %v; want one Unheld result and no base", r, p.Bases())
	}
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	if st, err := h1.s.Stat("b"); err != nil || st.Size != 2*cs+4 || st.Version != 400 {
		t.Fatalf("holder passed by: stat %+v, %v; want it unchanged", st, err)
	}
}

// TestPageSizeFollowsChunks: with chunks smaller than PageBytes, pages are
// chunk-sized, so a holder never stores bytes of another chunk.
func TestPageSizeFollowsChunks(t *testing.T) {
	const cs = 4 << 10
	s := openStore(t, Options{MVCC: true, Now: newFakeClock().Now, ChunkBytes: cs})
	if s.pageBytes != cs {
		t.Fatalf("page size %d with %d-byte chunks", s.pageBytes, cs)
	}
	db, err := pebble.Open("db", &pebble.Options{FS: vfs.NewMem(), Logger: testLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := Open(db, Options{ChunkBytes: 3 << 10}); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Fatalf("chunk size 3 KiB: %v, want invalid argument", err)
	}
}

// TestReadChunksPinned: a holder serves a read at an older version only
// while it still holds that version's pages: not once a later truncate cut
// them, the blob was deleted, or the version is older than what it copied
// in catch-up.
func TestReadChunksPinned(t *testing.T) {
	const cs = 4 << 10
	s := openStore(t, Options{MVCC: true, Now: newFakeClock().Now, ChunkBytes: cs})
	old := bytes.Repeat([]byte("o"), 3*cs)
	commitAt(t, s, 100, txn.Op{Key: "k", Kind: txn.OpWrite, Data: old, Create: true})
	commitAt(t, s, 150, txn.Op{Key: "k", Kind: txn.OpWrite, Offset: 2 * cs, Data: []byte("new")})
	if got, err := s.ReadChunks("k", 2*cs, 3, 100, 3*cs, 0); err != nil || string(got) != "ooo" {
		t.Fatalf("chunk 2 at version 100 after a write at 150: %q, %v; want the old bytes", got, err)
	}
	commitAt(t, s, 200, txn.Op{Key: "k", Kind: txn.OpTruncate, Size: cs})
	if _, err := s.ReadChunks("k", cs, 3, 150, 3*cs, 0); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("chunk 1 at version 150 after a truncate at 200 cut it: %v; want ErrConflict", err)
	}
	if got, err := s.ReadChunks("k", 0, 3, 150, 3*cs, 0); err != nil || string(got) != "ooo" {
		t.Fatalf("chunk 0, which the truncate kept, at version 150: %q, %v", got, err)
	}
	commitAt(t, s, 300, txn.Op{Key: "k", Kind: txn.OpDelete})
	if _, err := s.ReadChunks("k", 0, 3, 200, cs, 0); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("a read at version 200 after a delete: %v; want ErrConflict", err)
	}
}

// keysOf is a Placement: the store manages and holds all of the listed
// blobs and nothing of the others.
type keysOf map[string]bool

func (p keysOf) Manages(key string) bool         { return p[key] }
func (p keysOf) Holds(key string, _ uint64) bool { return p[key] }

// TestPassedByBlobKeepsNoFloor: a member that writes nothing of a blob (it
// is in the chain for another one) does not refuse the commit's version
// as stale because it accepted a newer version of some other blob; nor
// does a holder without a record of the blob, which takes the version
// manager's word for its history.
func TestPassedByBlobKeepsNoFloor(t *testing.T) {
	clock := newFakeClock()
	a := member{openStore(t, Options{MVCC: true, Now: clock.Now}), keysOf{"a": true}}
	b := member{openStore(t, Options{MVCC: true, Now: clock.Now}), keysOf{"b": true}}
	if _, err := chainCommit(t, []txn.Op{{Key: "b", Kind: txn.OpWrite, Data: []byte("b"), Create: true}}, 500, b); err != nil {
		t.Fatal(err)
	}
	ops := []txn.Op{{Key: "a", Kind: txn.OpWrite, Data: []byte("a"), Create: true}, {Key: "b", Kind: txn.OpWrite, Offset: 1, Data: []byte("b"), Create: true}}
	if _, err := chainCommit(t, ops, 300, a, b); err == nil {
		t.Fatal("a version below b's accepted at b")
	}
	if _, err := chainCommit(t, ops[:1], 310, a, b); err != nil {
		t.Fatalf("b, passing a by, refused a version below one it accepted for b: %v", err)
	}
	// A holder of a's chunk 1 only, without a record of a.
	h := member{openStore(t, Options{MVCC: true, Now: clock.Now, ChunkBytes: 4 << 10}), chunksOf{held: map[uint64]bool{1: true}}}
	vm := member{openStore(t, Options{MVCC: true, Now: clock.Now, ChunkBytes: 4 << 10}), chunksOf{manages: true, held: map[uint64]bool{0: true}}}
	if _, err := chainCommit(t, []txn.Op{{Key: "z", Kind: txn.OpWrite, Offset: 5000, Data: []byte("z"), Create: true}}, 900, vm, h); err != nil {
		t.Fatal(err)
	}
	if _, err := chainCommit(t, []txn.Op{{Key: "z", Kind: txn.OpDelete}}, 910, vm, h); err != nil {
		t.Fatal(err)
	}
	if _, err := chainCommit(t, []txn.Op{{Key: "y", Kind: txn.OpWrite, Offset: 5000, Data: []byte("y"), Create: true}}, 800, vm, h); !errors.As(err, new(*StaleVersionError)) {
		t.Fatalf("creating y at 800 after z's delete at 910 on the version manager: %v, want it refused as stale there", err)
	}
	h2 := member{openStore(t, Options{MVCC: true, Now: clock.Now, ChunkBytes: 4 << 10}), chunksOf{held: map[uint64]bool{1: true}}}
	if _, err := chainCommit(t, []txn.Op{{Key: "x", Kind: txn.OpWrite, Offset: 5000, Data: []byte("x"), Create: true}}, 950, vm, h2); err != nil {
		t.Fatal(err)
	}
	vm2 := member{openStore(t, Options{MVCC: true, Now: clock.Now, ChunkBytes: 4 << 10}), chunksOf{manages: true, held: map[uint64]bool{0: true}}}
	if _, err := chainCommit(t, []txn.Op{{Key: "y", Kind: txn.OpWrite, Offset: 5000, Data: []byte("y"), Create: true}}, 920, vm2, h2); err != nil {
		t.Fatalf("a holder with no record of y refused version 920 as it accepted 950 for x: %v", err)
	}
}

// TestUnmanaged: a chain's tail finds a blob no member manages when it was
// given no Base of it and does not manage it itself; a Base given, or the
// tail managing the blob, is enough.
func TestUnmanaged(t *testing.T) {
	ops := []txn.Op{{Key: "a", Kind: txn.OpWrite}, {Key: "b", Kind: txn.OpReadCheck}}
	managesA := func(key string) bool { return key == "a" }
	none := func(string) bool { return false }
	if key, ok := Unmanaged(ops, map[string]Base{"b": {Version: 3}}, managesA); ok {
		t.Errorf("a managed here, b based: Unmanaged = %q", key)
	}
	if key, ok := Unmanaged(ops, map[string]Base{"a": {Version: 1}, "b": {Version: 3}}, none); ok {
		t.Errorf("both based: Unmanaged = %q", key)
	}
	if key, ok := Unmanaged(ops, map[string]Base{"a": {Version: 1}}, none); !ok || key != "b" {
		t.Errorf("b neither based nor managed: Unmanaged = %q, %v; want b", key, ok)
	}
	if key, ok := Unmanaged(ops, nil, managesA); !ok || key != "b" {
		t.Errorf("no bases, a managed here: Unmanaged = %q, %v; want b", key, ok)
	}
}
