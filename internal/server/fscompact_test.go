package server

// Tests of the background compaction of TýrFS directory logs
// (fscompact.go) on a Service over a local engine: the worker compacts a
// log once removals dominate it, leaves other blobs alone, and an append
// racing a compaction is never lost (the read check fails the compaction,
// which runs again). The same on real servers and a cluster is in
// tyrfs/compact_test.go.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/fslayout"
	"github.com/tyrstore/tyr/internal/keyspace"
	"github.com/tyrstore/tyr/internal/storage"
	"github.com/tyrstore/tyr/internal/txn"
)

const fsKS = "tfs"

func newFSService(t *testing.T) *Service {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	engine, err := storage.Open(storage.Options{Dir: t.TempDir(), CacheBytes: 8 << 20, MemTableBytes: 1 << 20, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = engine.Close() })
	if _, err := engine.Create(fsKS, keyspace.Config{ChunkBytes: 4096, MVCC: true}); err != nil {
		t.Fatal(err)
	}
	return NewService(engine, log)
}

func appendOp(key string, data []byte) *tyrpb.Op {
	return &tyrpb.Op{Key: []byte(key), Kind: &tyrpb.Op_Append{Append: &tyrpb.AppendOp{Data: data}}}
}

func commitOps(t testing.TB, s *Service, ops ...*tyrpb.Op) *tyrpb.CommitResponse {
	t.Helper()
	resp, err := s.Commit(context.Background(), &tyrpb.CommitRequest{Keyspace: []byte(fsKS), Ops: ops})
	if err != nil {
		t.Error(err)
	}
	return resp
}

// mkdirBlob creates the directory blob key, with a header and no entries,
// in the current format.
func mkdirBlob(t *testing.T, s *Service, key string) { mkdirBlobIn(t, s, key, fslayout.FormatVersion) }

// mkdirBlobIn is mkdirBlob in format version v: 1 puts the log right after
// the header, 2 at fslayout.DirLogOffset.
func mkdirBlobIn(t *testing.T, s *Service, key string, v byte) {
	t.Helper()
	h := fslayout.EncodeHeader(fslayout.Attr{Kind: fslayout.KindDir, Mode: 0o755})
	h[fslayout.OffVersion] = v
	commitOps(t, s, &tyrpb.Op{Key: []byte(key), Kind: &tyrpb.Op_Write{Write: &tyrpb.WriteOp{Data: h, Create: true}}},
		&tyrpb.Op{Key: []byte(key), Kind: &tyrpb.Op_Truncate{Truncate: &tyrpb.TruncateOp{Size: fslayout.LogStart(h)}}})
}

func record(op byte, name string) []byte { return fslayout.EncodeRecord(op, fslayout.KindFile, name) }

func readBlob(t testing.TB, s *Service, key string) []byte {
	t.Helper()
	resp, err := s.Read(context.Background(), &tyrpb.ReadRequest{Keyspace: []byte(fsKS), Key: []byte(key), Length: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetData()
}

// entries replays the directory blob key and returns its entries' names,
// in order.
func entries(t testing.TB, s *Service, key string) ([]string, int) {
	t.Helper()
	b := readBlob(t, s, key)
	log, err := fslayout.DirLogOf(key, b)
	if err != nil {
		t.Fatal(err)
	}
	l, err := fslayout.ReplayLog(key, log)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range l.List() {
		out = append(out, e.Name)
	}
	return out, len(b)
}

// waitCompactor polls cond for up to 30 s.
func waitCompactor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 30s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// churn creates n entries in the directory blob key and removes all but
// every eighth, one commit per record; it returns the names kept.
func churn(t *testing.T, s *Service, key, prefix string, n int) []string {
	t.Helper()
	var kept []string
	for i := range n {
		name := fmt.Sprintf("%s%03d", prefix, i)
		commitOps(t, s, appendOp(key, record(fslayout.RecordAdd, name)))
		if i%8 == 0 {
			kept = append(kept, name)
			continue
		}
		commitOps(t, s, appendOp(key, record(fslayout.RecordRemove, name)))
	}
	return kept
}

// Compaction keeps a directory's entries and header and cuts its log, in
// both formats: the log right after the header (1) and after the hole (2,
// which stays one: entries checks it).
func TestDirCompaction(t *testing.T) {
	for _, v := range []byte{1, 2} {
		t.Run(fmt.Sprintf("format%d", v), func(t *testing.T) { dirCompaction(t, v) })
	}
}

func dirCompaction(t *testing.T, v byte) {
	s := newFSService(t)
	var (
		mu        sync.Mutex
		rawChecks []string // the outcomes of the checks of /raw/
	)
	s.dirs.afterCheck = func(r dirRef, c dirCheck) {
		if r.key == "/raw/" {
			mu.Lock()
			rawChecks = append(rawChecks, c.outcome)
			mu.Unlock()
		}
	}
	defer s.StartDirCompaction(0, 0)()
	mkdirBlobIn(t, s, "/d/", v)
	header := readBlob(t, s, "/d/")[:fslayout.HeaderBytes]
	start := int(fslayout.LogStart(header))
	kept := churn(t, s, "/d/", "", 2*fslayout.CompactRecordsMin)
	// The bytes appended, which compaction must have cut.
	full := start + (2*fslayout.CompactRecordsMin*2-len(kept))*(fslayout.RecordHeaderBytes+3)
	waitCompactor(t, "compaction", func() bool { return s.dirs.Count(dirCompacted) > 0 })
	got, size := entries(t, s, "/d/")
	if !slices.Equal(got, kept) {
		t.Fatalf("entries %v after compaction, want %v", got, kept)
	}
	// The worker may compact while churn still appends: fewer bytes
	// than were appended, at least the entries kept.
	if least := start + len(kept)*(fslayout.RecordHeaderBytes+3); size >= full || size < least {
		t.Fatalf("directory blob of %d bytes after compaction, want fewer than the %d appended and at least %d", size, full, least)
	}
	if b := readBlob(t, s, "/d/"); !bytes.Equal(b[:fslayout.HeaderBytes], header) {
		t.Fatal("compaction changed the header")
	}
	if n := s.dirs.Count(dirCompacted); n == 0 {
		t.Fatal("no compaction counted")
	}

	// A blob ending in "/" that is not a TýrFS directory (no header) is
	// checked and left as it is, however its appends look.
	var raw []byte
	for i := range 2 * fslayout.CompactRecordsMin {
		name := fmt.Sprintf("%03d", i)
		raw = append(raw, record(fslayout.RecordAdd, name)...)
		raw = append(raw, record(fslayout.RecordRemove, name)...)
		commitOps(t, s, &tyrpb.Op{Key: []byte("/raw/"), Kind: &tyrpb.Op_Append{Append: &tyrpb.AppendOp{
			Data: raw[len(raw)-2*(fslayout.RecordHeaderBytes+3):], Create: true}}})
	}
	// The check may come while the appends go on, or after them.
	waitCompactor(t, "a check of /raw/", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(rawChecks) > 0
	})
	if b := readBlob(t, s, "/raw/"); !bytes.Equal(b, raw) {
		t.Fatalf("/raw/ holds %d bytes, want the %d appended", len(b), len(raw))
	}
	mu.Lock()
	for _, o := range rawChecks {
		if o != dirSkipped {
			t.Errorf("a check of /raw/ ended %s, want %s", o, dirSkipped)
		}
	}
	mu.Unlock()
	t.Logf("checks: %d compacted, %d skipped, %d conflicts, %d dropped, %d failed", s.dirs.Count(dirCompacted),
		s.dirs.Count(dirSkipped), s.dirs.Count(dirConflict), s.dirs.Count(dirDropped), s.dirs.Count(dirFailed))
	if n := s.dirs.Count(dirFailed); n != 0 {
		t.Fatalf("%d checks failed", n)
	}
}

// An add committed between a compaction's read and its commit fails the
// compaction, which runs again and keeps it; adds and removes from several
// writers racing the compactions all end in the log.
func TestDirCompaction_racingAppends(t *testing.T) {
	s := newFSService(t)
	raced := 0
	churned := make(chan struct{})
	s.dirs.afterRead = func(r dirRef) {
		<-churned      // no other append races the first compaction
		if raced < 3 { // the worker's goroutine only
			raced++
			commitOps(t, s, appendOp(r.key, record(fslayout.RecordAdd, fmt.Sprintf("raced%d", raced))))
		}
	}
	defer s.StartDirCompaction(0, 0)()
	mkdirBlob(t, s, "/d/")
	kept := churn(t, s, "/d/", "", 2*fslayout.CompactRecordsMin)
	close(churned)
	waitCompactor(t, "compaction", func() bool { return s.dirs.Count(dirCompacted) > 0 })
	if n := s.dirs.Count(dirConflict); n < 3 {
		t.Fatalf("%d conflicts, want 3: one per add racing a compaction", n)
	}
	got, _ := entries(t, s, "/d/")
	want := append(slices.Clone(kept), "raced1", "raced2", "raced3")
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("entries %v, want %v", got, want)
	}

	// Four writers, each adding and removing names of its own, while the
	// worker compacts as removals pile up.
	const writers = 4
	var wg sync.WaitGroup
	keptBy := make([][]string, writers)
	before := s.dirs.Count(dirCompacted)
	for w := range writers {
		wg.Go(func() { keptBy[w] = churn(t, s, "/d/", fmt.Sprintf("w%d-", w), 3*fslayout.CompactRecordsMin) })
	}
	wg.Wait()
	for _, k := range keptBy {
		want = append(want, k...)
	}
	slices.Sort(want)
	waitCompactor(t, "compaction after the writers", func() bool {
		got, _ := entries(t, s, "/d/")
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("entries %v, want %v", got, want)
		}
		return s.dirs.Count(dirCompacted) > before
	})
	t.Logf("checks: %d compacted, %d skipped, %d conflicts, %d dropped, %d failed", s.dirs.Count(dirCompacted),
		s.dirs.Count(dirSkipped), s.dirs.Count(dirConflict), s.dirs.Count(dirDropped), s.dirs.Count(dirFailed))
}

// The trigger: a removal's append to a large enough log that grew by a
// quarter since it was last seen queues it; a full queue drops it.
func TestDirCompaction_notice(t *testing.T) {
	d := newDirCompactor(nil)
	d.running.Store(true)
	rm := []byte(record(fslayout.RecordRemove, "a"))
	add := []byte(record(fslayout.RecordAdd, "a"))
	for _, tc := range []struct {
		data []byte
		want bool
	}{
		{rm, true}, {add, false}, {append(slices.Clone(add), rm...), true}, {rm[:3], false},
		{append(slices.Clone(rm), 9), false}, {[]byte{9, 1, 1, 0, 'a'}, false}, {nil, false},
	} {
		if got := removesEntry(tc.data); got != tc.want {
			t.Errorf("removesEntry(%v) = %v, want %v", tc.data, got, tc.want)
		}
	}
	commit := func(key string, data []byte, size uint64) {
		d.noticeCommit("ks", []txn.Op{{Key: key, Kind: txn.OpAppend, Data: data}}, []txn.Result{{Size: size}})
	}
	queued := func() int { return len(d.queue) }
	commit("/d/", rm, dirCompactCheckBytesMin-1) // too small to need compaction
	commit("/d", rm, 1000)                       // not a directory key
	commit("/d/", add, 1000)                     // adds alone never need compaction
	if n := queued(); n != 0 {
		t.Fatalf("%d queued, want none", n)
	}
	for _, c := range []struct {
		size   uint64
		queued int
	}{{1000, 1}, {1100, 1}, {1249, 1}, {1250, 2}, {600, 2}, {740, 2}, {750, 3}} {
		commit("/d/", rm, c.size)
		if n := queued(); n != c.queued {
			t.Fatalf("after a removal to %d bytes: %d queued, want %d", c.size, n, c.queued)
		}
	}
	for i := queued(); i < dirCompactQueueLen; i++ {
		commit(fmt.Sprintf("/e%d/", i), rm, 1000)
	}
	commit("/full/", rm, 1000)
	if n := d.Count(dirDropped); n != 1 || queued() != dirCompactQueueLen {
		t.Fatalf("%d dropped, %d queued; want 1, %d", n, queued(), dirCompactQueueLen)
	}
	commit("/full/", rm, 1001) // not remembered when dropped: tried again
	if n := d.Count(dirDropped); n != 2 {
		t.Fatalf("%d dropped, want 2", n)
	}
}

// The hook's cost on the commit path: a removal's append to a log whose
// check is not due (map lookup under the lock), and a write elsewhere.
func BenchmarkDirCompactionNotice(b *testing.B) {
	d := newDirCompactor(nil)
	d.running.Store(true)
	rm := []txn.Op{{Key: "/d/", Kind: txn.OpAppend, Data: record(fslayout.RecordRemove, "name")}}
	write := []txn.Op{{Key: "/d/f", Kind: txn.OpWrite, Data: make([]byte, 4096)}}
	res := []txn.Result{{Size: 4096}}
	d.noticeCommit("ks", rm, res)
	b.Run("removal", func(b *testing.B) {
		for b.Loop() {
			d.noticeCommit("ks", rm, res)
		}
	})
	b.Run("write", func(b *testing.B) {
		for b.Loop() {
			d.noticeCommit("ks", write, res)
		}
	})
}
