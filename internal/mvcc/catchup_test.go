package mvcc

import (
	"bytes"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/limits"
	"github.com/tyrstore/tyr/internal/txn"
)

// TestTryPrepareStep: a downstream member applies a commit only on the state
// the head had, and the head's Pending reports that state.
func TestTryPrepareStep(t *testing.T) {
	head := openStore(t, Options{MVCC: true, Now: newFakeClock().Now})
	behind := openStore(t, Options{MVCC: true, Now: newFakeClock().Now})
	for _, s := range []*Store{head, behind} {
		p, err := s.TryPrepareAt([]txn.Op{writeOp("a", "one")}, 100)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	p, err := head.TryPrepareAt([]txn.Op{writeOp("a", "two")}, 200)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	// behind missed version 200; the next commit's head had a at 200 and no b.
	ops := []txn.Op{{Key: "a", Kind: txn.OpAppend, Data: []byte("!")}, writeOp("b", "new")}
	hp, err := head.TryPrepareStep(ops, Step{Version: 300})
	if err != nil {
		t.Fatal(err)
	}
	bases := hp.Bases()
	if bases["a"].Version != 200 || bases["b"].Version != 0 || len(bases) != 2 {
		t.Fatalf("head's bases = %v, want a:200 b:0", bases)
	}
	hp.Abort()
	_, err = behind.TryPrepareStep(ops, Step{Version: 300, Bases: bases})
	var mismatch *BaseMismatchError
	if !errors.As(err, &mismatch) || mismatch.Key != "a" || mismatch.Have != 100 || mismatch.Want != 200 || !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("TryPrepareStep of a replica behind: %v; want a BaseMismatchError for a (100 here, 200 on the head)", err)
	}
	if n := lockedKeys(behind); n != 0 {
		t.Fatalf("a refused TryPrepareStep left %d keys locked", n)
	}
	if got := readString(t, behind, "a"); got != "one" {
		t.Fatalf("a refused TryPrepareStep changed a to %q", got)
	}
	// Up to date, the same commit applies.
	if changed, err := behind.Refresh("a", &storeSource{from: head, to: behind, key: "a"}); err != nil || !changed {
		t.Fatalf("Refresh of a replica behind = %v, %v; want a change", changed, err)
	}
	bp, err := behind.TryPrepareStep(ops, Step{Version: 300, Bases: bases})
	if err != nil {
		t.Fatalf("TryPrepareStep after catching up: %v", err)
	}
	if err := bp.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := readString(t, behind, "a"); got != "two!" {
		t.Fatalf("a = %q after the commit, want %q", got, "two!")
	}
}

// storeSource is a Source that copies from another store, as the version
// managers and holders of a cluster serve catch-up.
type storeSource struct {
	from, to *Store
	key      string
	pl       Placement // the copying store's
	cp       Copy
	reads    int
}

func (s *storeSource) Copy(local Record) (Copy, error) {
	remote, err := s.from.Record(s.key)
	s.cp = s.to.PlanCopy(s.key, local, remote, s.pl)
	return s.cp, err
}

func (s *storeSource) Read(off, n uint64) ([]byte, error) {
	s.reads++
	return s.from.ReadChunks(s.key, off, n, s.cp.Version, s.cp.Size, s.cp.Chunks[off/s.from.ChunkBytes()])
}

func commitAt(t *testing.T, s *Store, version uint64, ops ...txn.Op) {
	t.Helper()
	p, err := s.TryPrepareAt(ops, version)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
}

func readAll(t *testing.T, s *Store, key string) []byte {
	t.Helper()
	var out []byte
	for off := uint64(0); ; {
		part, info, err := s.Read(key, off, limits.PayloadBytesMax)
		if err != nil {
			t.Fatal(err)
		}
		out, off = append(out, part...), off+uint64(len(part))
		if len(part) == 0 || off >= info.Size {
			return out
		}
	}
}

// TestRefresh: a replica that missed commits, among them a truncate that
// cut a chunk on a page boundary, copies only the chunks that changed and
// ends with the source's bytes, record and chunk versions, in step for the
// next commit; reads of versions from before the copy are refused; a
// second copy changes nothing; a deletion is copied too.
func TestRefresh(t *testing.T) {
	for _, on := range []bool{true, false} {
		const cs = 128 << 10 // two pages a chunk
		src := openStore(t, Options{MVCC: on, Now: newFakeClock().Now, ChunkBytes: cs})
		dst := openStore(t, Options{MVCC: on, Now: newFakeClock().Now, ChunkBytes: cs})
		pattern := bytes.Repeat([]byte("0123456789abcdef"), 4*cs/16) // four chunks
		for _, s := range []*Store{src, dst} {
			commitAt(t, s, 100, txn.Op{Key: "k", Kind: txn.OpCreate}, txn.Op{Key: "k", Kind: txn.OpWrite, Data: pattern})
		}
		// dst misses these: a cut inside chunk 0 on a page boundary, a
		// regrow with zeros, and a write into chunk 2.
		commitAt(t, src, 300, txn.Op{Key: "k", Kind: txn.OpTruncate, Size: cs / 2})
		commitAt(t, src, 400, txn.Op{Key: "k", Kind: txn.OpTruncate, Size: 4 * cs})
		commitAt(t, src, 500, txn.Op{Key: "k", Kind: txn.OpWrite, Offset: 2*cs + 7, Data: []byte("tail")})
		from := &storeSource{from: src, to: dst, key: "k"}
		if changed, err := dst.Refresh("k", from); err != nil || !changed {
			t.Fatalf("MVCC %v: Refresh = %v, %v; want a change", on, changed, err)
		}
		if want := []uint64{0, 1, 2, 3}; !slices.Equal(from.cp.Replace, want) {
			t.Fatalf("MVCC %v: replaced chunks %v, want %v", on, from.cp.Replace, want)
		}
		if got, want := readAll(t, dst, "k"), readAll(t, src, "k"); !bytes.Equal(got, want) {
			t.Fatalf("MVCC %v: the copy differs from the source (%d and %d bytes)", on, len(got), len(want))
		}
		a, _ := src.Record("k")
		b, _ := dst.Record("k")
		if !sameRecord(a, b) {
			t.Fatalf("MVCC %v: records differ after the copy: source %+v, copy %+v", on, a, b)
		}
		var stale *StaleVersionError
		if _, err := dst.TryPrepareAt([]txn.Op{writeOp("new", "x")}, 450); !errors.As(err, &stale) || stale.Floor != 500 {
			t.Fatalf("MVCC %v: creating a blob at 450 after a copy at 500: %v; want a StaleVersionError with floor 500", on, err)
		}
		from.reads = 0
		if changed, err := dst.Refresh("k", from); err != nil || changed || from.reads != 0 {
			t.Fatalf("MVCC %v: second Refresh = %v, %v after %d reads; want no change and no reads", on, changed, err, from.reads)
		}
		if _, err := dst.ReadChunks("k", 0, 10, 100, 4*cs, 0); !errors.Is(err, errs.ErrConflict) {
			t.Fatalf("MVCC %v: a read at version 100, before the copy at 500: %v; want ErrConflict", on, err)
		}
		var mismatch *ChunkMismatchError
		if _, err := dst.ReadChunks("k", 2*cs, 10, 0, 4*cs, 600); !errors.As(err, &mismatch) {
			t.Fatalf("MVCC %v: a catch-up read expecting chunk 2 at 600: %v; want a ChunkMismatchError", on, err)
		}
		if _, err := chainCommit(t, []txn.Op{{Key: "k", Kind: txn.OpAppend, Data: []byte("!")}}, 600,
			member{s: src}, member{s: dst}); err != nil {
			t.Fatalf("MVCC %v: a commit after the copy: %v", on, err)
		}
		commitAt(t, src, 700, txn.Op{Key: "k", Kind: txn.OpDelete})
		if changed, err := dst.Refresh("k", from); err != nil || !changed {
			t.Fatalf("MVCC %v: Refresh of a deletion = %v, %v", on, changed, err)
		}
		if rec, err := dst.Record("k"); err != nil || rec.Exists || len(rec.Chunks) != 0 {
			t.Fatalf("MVCC %v: after copying the deletion: %+v, %v", on, rec, err)
		}
	}
}

// TestRefreshHolder: a holder of one chunk copies that chunk's pages and
// version and nothing else.
func TestRefreshHolder(t *testing.T) {
	const cs = 4 << 10
	vm := openStore(t, Options{MVCC: true, Now: newFakeClock().Now, ChunkBytes: cs})
	holder := openStore(t, Options{MVCC: true, Now: newFakeClock().Now, ChunkBytes: cs})
	vmPl := chunksOf{manages: true, held: map[uint64]bool{0: true, 1: true, 2: true}}
	hPl := chunksOf{held: map[uint64]bool{1: true}}
	data := bytes.Repeat([]byte("x"), 3*cs)
	if _, err := chainCommit(t, []txn.Op{{Key: "k", Kind: txn.OpCreate}, {Key: "k", Kind: txn.OpWrite, Data: data}}, 100,
		member{vm, vmPl}, member{holder, hPl}); err != nil {
		t.Fatal(err)
	}
	// The holder misses a write into chunk 1 and one into chunk 2.
	p, err := vm.TryPrepareStep([]txn.Op{{Key: "k", Kind: txn.OpWrite, Offset: cs + 5, Data: []byte("new")},
		{Key: "k", Kind: txn.OpWrite, Offset: 2 * cs, Data: []byte("two")}}, Step{Version: 200, Placement: vmPl})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	from := &storeSource{from: vm, to: holder, key: "k", pl: hPl}
	if changed, err := holder.Refresh("k", from); err != nil || !changed {
		t.Fatalf("Refresh = %v, %v", changed, err)
	}
	if !slices.Equal(from.cp.Replace, []uint64{1}) {
		t.Fatalf("the holder replaced chunks %v, want [1]", from.cp.Replace)
	}
	rec, err := holder.Record("k")
	if err != nil || rec.Version != 200 || rec.Size != 3*cs || len(rec.Chunks) != 1 || rec.Chunks[1] != 200 {
		t.Fatalf("the holder's record after the copy: %+v, %v; want version 200, chunk 1 at 200 only", rec, err)
	}
	if got := readChunks(t, holder, "k", cs, cs, 3*cs); !bytes.Equal(got[5:8], []byte("new")) {
		t.Fatalf("chunk 1 on the holder: %q..., want the missed write", got[:16])
	}
	if got := readChunks(t, holder, "k", 2*cs, 3, 3*cs); !bytes.Equal(got, []byte{0, 0, 0}) {
		t.Fatalf("the holder stored chunk 2, which it does not hold: %q", got)
	}
	if _, err := chainCommit(t, []txn.Op{{Key: "k", Kind: txn.OpWrite, Offset: cs, Data: []byte("ok")}}, 300,
		member{vm, vmPl}, member{holder, hPl}); err != nil {
		t.Fatalf("a commit into chunk 1 after the copy: %v", err)
	}
}

// TestRefreshFromEachOther: two stores refreshing one blob from each other
// each hold the blob's lock while asking the other for its record; the
// wait for the lock is bounded (RecordWaitMax), so neither waits forever:
// at least one gives up with ErrUnavailable, and the calls end.
func TestRefreshFromEachOther(t *testing.T) {
	a := openStore(t, Options{MVCC: true, Now: newFakeClock().Now})
	b := openStore(t, Options{MVCC: true, Now: newFakeClock().Now})
	commitAt(t, a, 100, writeOp("k", "a"))
	commitAt(t, b, 200, writeOp("k", "b"))
	errc := make(chan error, 2)
	var both sync.WaitGroup // both hold their lock before asking
	both.Add(2)
	start := time.Now()
	for _, p := range [][2]*Store{{a, b}, {b, a}} {
		go func() {
			_, err := p[0].Refresh("k", barrierSource{&storeSource{from: p[1], to: p[0], key: "k"}, &both})
			errc <- err
		}()
	}
	unavailable := 0
	for range 2 {
		if err := <-errc; errors.Is(err, errs.ErrUnavailable) {
			unavailable++
		} else if err != nil {
			t.Fatalf("Refresh: %v", err)
		}
	}
	if unavailable == 0 || time.Since(start) > 3*RecordWaitMax {
		t.Fatalf("%d of 2 refreshes gave up, after %v; want at least one, within %v", unavailable, time.Since(start), 3*RecordWaitMax)
	}
}

// barrierSource waits until every refresh sharing its barrier asks.
type barrierSource struct {
	*storeSource
	barrier *sync.WaitGroup
}

func (s barrierSource) Copy(local Record) (Copy, error) {
	s.barrier.Done()
	s.barrier.Wait()
	return s.storeSource.Copy(local)
}

// failingSource fails every Read after the first okReads.
type failingSource struct {
	*storeSource
	okReads int
}

func (s *failingSource) Read(off, n uint64) ([]byte, error) {
	if s.reads >= s.okReads {
		return nil, errors.New("source went away")
	}
	return s.storeSource.Read(off, n)
}

// sameBlobAt100 returns two MVCC stores of 4 KiB chunks that both hold blob
// k at version 100: three chunks of full.
func sameBlobAt100(t *testing.T) (src, dst *Store, full []byte) {
	t.Helper()
	src = openStore(t, Options{MVCC: true, ChunkBytes: refreshChunk, Now: newFakeClock().Now})
	dst = openStore(t, Options{MVCC: true, ChunkBytes: refreshChunk, Now: newFakeClock().Now})
	full = bytes.Repeat([]byte("abcdefgh"), 3*refreshChunk/8)
	for _, s := range []*Store{src, dst} {
		commitAt(t, s, 100, txn.Op{Key: "k", Kind: txn.OpWrite, Data: full, Create: true})
	}
	return src, dst, full
}

// refreshChunk is the chunk size of sameBlobAt100's stores.
const refreshChunk = 4096

// TestRefreshFailedKeepsPages: a copy that fails half way leaves the
// store's pages as they were (MVCC on), so a replica whose catch-up source
// fails keeps what it had, for a later copy or for others to copy from.
func TestRefreshFailedKeepsPages(t *testing.T) {
	const cs = refreshChunk
	src, dst, _ := sameBlobAt100(t)
	commitAt(t, src, 150, txn.Op{Key: "k", Kind: txn.OpWrite, Offset: cs + 10, Data: bytes.Repeat([]byte("S"), 2*cs)})
	commitAt(t, dst, 200, txn.Op{Key: "k", Kind: txn.OpTruncate, Size: cs + 5},
		txn.Op{Key: "k", Kind: txn.OpWrite, Offset: 3, Data: []byte("DST")})
	before := readAll(t, dst, "k")
	for okReads := range 2 {
		fs := &failingSource{storeSource: &storeSource{from: src, to: dst, key: "k"}, okReads: okReads}
		if _, err := dst.Refresh("k", fs); err == nil {
			t.Fatalf("Refresh with a source failing after %d reads succeeded", okReads)
		}
		if got := readAll(t, dst, "k"); !bytes.Equal(got, before) {
			t.Fatalf("after a failed Refresh (%d reads) the blob reads %d bytes %q..., want %d bytes %q...",
				okReads, len(got), got[:min(16, len(got))], len(before), before[:16])
		}
	}
	if changed, err := dst.Refresh("k", &storeSource{from: src, to: dst, key: "k"}); err != nil || !changed {
		t.Fatalf("Refresh = %v, %v; want a change", changed, err)
	}
	if got, want := readAll(t, dst, "k"), readAll(t, src, "k"); !bytes.Equal(got, want) {
		t.Fatalf("after Refresh the blob reads %d bytes, the source %d, and they differ", len(got), len(want))
	}
	// No page version but the copy's is left in the replaced chunks.
	if n := pageVersions(t, dst, "k"); n != 4 {
		t.Fatalf("%d page versions after Refresh, want 4 (one per chunk)", n)
	}
}

// TestRefreshFailedServesOld: a copy of newer chunks that fails half way
// leaves the store serving reads at the version it holds, for a holder
// catching up from a source still at that version; a copy that succeeds
// refuses them, its old pages being gone.
func TestRefreshFailedServesOld(t *testing.T) {
	const cs = refreshChunk
	src, dst, full := sameBlobAt100(t)
	commitAt(t, src, 150, txn.Op{Key: "k", Kind: txn.OpWrite, Offset: 10, Data: bytes.Repeat([]byte("S"), 2*cs)})
	readOld := func() ([]byte, error) { return dst.ReadChunks("k", cs, 8, 100, 3*cs, 100) }
	for okReads := range 2 {
		fs := &failingSource{storeSource: &storeSource{from: src, to: dst, key: "k"}, okReads: okReads}
		if _, err := dst.Refresh("k", fs); err == nil {
			t.Fatalf("Refresh with a source failing after %d reads succeeded", okReads)
		}
		if got, err := readOld(); err != nil || !bytes.Equal(got, full[cs:cs+8]) {
			t.Fatalf("after a failed Refresh (%d reads), a read at version 100 = %q, %v; want %q", okReads, got, err, full[cs:cs+8])
		}
	}
	if changed, err := dst.Refresh("k", &storeSource{from: src, to: dst, key: "k"}); err != nil || !changed {
		t.Fatalf("Refresh = %v, %v; want a change", changed, err)
	}
	if got, err := readOld(); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("after Refresh, a read at version 100 = %q, %v; want a conflict", got, err)
	}
}

func pageVersions(t *testing.T, s *Store, key string) int {
	t.Helper()
	it, err := s.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for ok := it.SeekGE(pagePrefix(key)); ok && bytes.HasPrefix(it.Key(), pagePrefix(key)); ok = it.Next() {
		n++
	}
	return n
}
