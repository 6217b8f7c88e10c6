// Tests for the versioned page store, in process over in-memory Pebble
// databases. They prove:
//
//   - TestModel: random commits (writes across 64 KiB page boundaries, sparse
//     writes, appends, shrinking and extending truncates, deletes, creates,
//     multi-op commits with several ops on one blob) give the same results,
//     errors, reads and stats as an in-memory model on three stores at once:
//     MVCC on, MVCC off, and MVCC on with a fake clock that keeps passing the
//     retention while the collector runs. Old versions stay readable at their
//     version while retained, versions of a blob strictly increase, and the
//     on-disk layout keeps its invariants (no bytes past the size, no leaked
//     or live-data-deleting garbage entries, one version per page once
//     collected). Every other seed runs the first store on a frozen clock,
//     so versions come from the store's counter alone.
//   - TestScripted: the same three-store model check over hand-picked
//     corners (shrink to a page boundary then extend; shrink, write past the
//     cut and shrink less in one commit; delete and re-create in one commit
//     and at one clock instant; empty writes; failing last ops; ...).
//   - TestAtomicity, TestAbortReleasesLocks, TestPrepareLocks: a failed op
//     changes nothing; Abort and Commit release the blob locks.
//   - TestVersionGC: superseded versions survive until their retention
//     passes, are then collected exactly, and reads never change.
//   - TestCollectRecord, TestOlderPageVersions: a due collector record
//     deletes every older version of its page, however many, and nothing
//     else: not its version or newer ones, not other pages or blobs, not
//     a version in use. TestCollectCompacts: the space of collected
//     versions is compacted once the collector finds nothing to do.
//   - TestList: prefix, startAfter, limit paging and byte order.
//   - TestReadPage: a page read at a version returns the newest page version
//     not newer than it, never another page's or another blob's.
//   - TestReadsNeverMix: reads racing commits and the collector each see
//     exactly one commit.
//
// TestModel is seeded: the seed is logged, and a failure is reproduced with
//
//	TYR_SEED=<seed> go test -race -count=1 -run TestModel -v ./internal/mvcc/
//
// (TYR_STEPS=<n> changes the number of commits, default 150.) The other
// tests are deterministic: go test -race -count=1 -run '^<Name>$' -v ./internal/mvcc/
package mvcc

import (
	"encoding/binary"
	"github.com/tyrstore/tyr/internal/testseed"

	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/limits"
	"github.com/tyrstore/tyr/internal/txn"
)

// fakeClock is a settable clock for Options.Now.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// testLogger drops Pebble's informational messages and fails loudly on errors.
type testLogger struct{}

func (testLogger) Infof(string, ...any)         {}
func (testLogger) Errorf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
func (testLogger) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }

// openStore opens a Store over a fresh in-memory Pebble database.
func openStore(t testing.TB, opts Options) *Store {
	t.Helper()
	return openStoreFS(t, vfs.NewMem(), opts)
}

// openStoreFS opens a Store over the Pebble database in fs, closed when
// the test ends.
func openStoreFS(t testing.TB, fs vfs.FS, opts Options) *Store {
	t.Helper()
	db, err := pebble.Open("db", &pebble.Options{FS: fs, Logger: testLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	})
	s, err := Open(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// commit prepares and commits ops.
func commit(s *Store, ops ...txn.Op) ([]txn.Result, error) {
	p, err := s.Prepare(ops)
	if err != nil {
		return nil, err
	}
	if err := p.Commit(); err != nil {
		return nil, err
	}
	return p.Results(), nil
}

func mustCommit(t testing.TB, s *Store, ops ...txn.Op) []txn.Result {
	t.Helper()
	res, err := commit(s, ops...)
	if err != nil {
		t.Fatalf("commit %v: %v", ops, err)
	}
	return res
}

func mustRead(t testing.TB, s *Store, key string, offset, length uint64) []byte {
	t.Helper()
	data, _, err := s.Read(key, offset, length)
	if err != nil {
		t.Fatalf("read %q [%d,+%d): %v", key, offset, length, err)
	}
	return data
}

// readAt reads [offset, offset+n) of key as of version through readRange.
func readAt(t testing.TB, s *Store, key string, version, offset uint64, n int) []byte {
	t.Helper()
	it, err := s.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	// Not zeroed, as a pooled buffer is not: readRange writes every
	// byte, the holes' zeros too.
	buf := bytes.Repeat([]byte{0xa5}, n)
	if err := readRange(it, key, version, offset, PageBytes, buf); err != nil {
		t.Fatalf("readRange %q at %d: %v", key, version, err)
	}
	return buf
}

// countKeys counts the database keys that start with prefix byte b.
func countKeys(t testing.TB, s *Store, b byte) int {
	t.Helper()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{b}, UpperBound: []byte{b + 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	return n
}

// diff describes the first difference between got and want.
func diff(got, want []byte) string {
	if len(got) != len(want) {
		return fmt.Sprintf("got %d bytes, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Sprintf("first difference at byte %d (page %d +%d): got %#x, want %#x",
				i, i/PageBytes, i%PageBytes, got[i], want[i])
		}
	}
	return "equal"
}

// ---- The model ----

// modelApply applies ops to a copy of blobs, the reference semantics of a
// commit. Byte slices in blobs are never modified: a blob changed by ops is
// copied first, so earlier states can be kept as snapshots.
func modelApply(blobs map[string][]byte, ops []txn.Op) (map[string][]byte, []txn.Result, error) {
	next := maps.Clone(blobs)
	owned := map[string]bool{}
	results := make([]txn.Result, len(ops))
	for i, op := range ops {
		b, exists := next[op.Key]
		if !exists && op.Kind != txn.OpCreate && !((op.Kind == txn.OpWrite || op.Kind == txn.OpAppend) && op.Create) {
			return nil, nil, errs.ErrNotFound
		}
		if exists && op.Kind == txn.OpCreate {
			return nil, nil, errs.ErrExists
		}
		if !exists {
			b, owned[op.Key] = []byte{}, true
		} else if !owned[op.Key] {
			b, owned[op.Key] = slices.Clone(b), true
		}
		switch op.Kind {
		case txn.OpWrite:
			// A write extends the blob to its end; an empty write changes
			// nothing.
			if len(op.Data) > 0 {
				if end := op.Offset + uint64(len(op.Data)); end > uint64(len(b)) {
					b = append(b, make([]byte, end-uint64(len(b)))...)
				}
				copy(b[op.Offset:], op.Data)
			}
			results[i].Offset = op.Offset
		case txn.OpAppend:
			if uint64(len(op.Data)) > limits.BlobBytesMax-uint64(len(b)) {
				return nil, nil, errs.ErrOutOfRange
			}
			results[i].Offset = uint64(len(b))
			b = append(b, op.Data...)
		case txn.OpTruncate:
			if op.Size <= uint64(len(b)) {
				b = b[:op.Size]
			} else {
				b = append(b, make([]byte, op.Size-uint64(len(b)))...)
			}
		case txn.OpDelete:
			delete(next, op.Key)
			delete(owned, op.Key)
			continue
		}
		next[op.Key] = b
	}
	for i, op := range ops {
		results[i].Size = uint64(len(next[op.Key]))
	}
	return next, results, nil
}

// cuts reports whether ops drop stored pages of key (delete or shrinking
// truncate), which also drops its retained old versions.
func cuts(blobs map[string][]byte, ops []txn.Op, key string) bool {
	size := uint64(len(blobs[key]))
	for _, op := range ops {
		if op.Key != key {
			continue
		}
		switch op.Kind {
		case txn.OpCreate:
			size = 0
		case txn.OpWrite:
			size = max(size, op.Offset+uint64(len(op.Data)))
		case txn.OpAppend:
			size += uint64(len(op.Data))
		case txn.OpTruncate:
			if op.Size < size {
				return true
			}
			size = op.Size
		case txn.OpDelete:
			return true
		}
	}
	return false
}

// snapshot is one committed state of a blob in one store.
type snapshot struct {
	version uint64
	data    []byte
	// supersededAt is when the next commit to the blob happened (zero while
	// the snapshot is current); its pages stay until supersededAt+Retention.
	supersededAt time.Time
}

// subject is one store under test with what the test knows about it.
type subject struct {
	name     string
	s        *Store
	clock    *fakeClock // nil: real clock
	lastSeen map[string]uint64
	history  map[string][]snapshot // MVCC only
}

func (sub *subject) now() time.Time {
	if sub.clock != nil {
		return sub.clock.Now()
	}
	return time.Now()
}

// gen draws random ops that favour page boundaries.
type gen struct {
	r    *rand.Rand
	keys []string
}

func (g *gen) data(n int) []byte {
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := g.r.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// offset is usually near a page boundary in the first 8 pages.
func (g *gen) offset() uint64 {
	if g.r.IntN(20) == 0 {
		return g.r.Uint64N(modelSizeCap) // anywhere, often sparse
	}
	page := g.r.Uint64N(8)
	switch g.r.IntN(5) {
	case 0:
		return page * PageBytes
	case 1:
		return page*PageBytes + 1
	case 2:
		return page*PageBytes + PageBytes - 1
	default:
		return page*PageBytes + g.r.Uint64N(PageBytes)
	}
}

func (g *gen) length() int {
	switch g.r.IntN(8) {
	case 0:
		return 0
	case 1:
		return 1 + g.r.IntN(16)
	case 2:
		return PageBytes - 1 + g.r.IntN(3)
	case 3:
		return 2*PageBytes + 1
	default:
		return 1 + g.r.IntN(PageBytes+PageBytes/2)
	}
}

const modelSizeCap = 12 * PageBytes // keeps blobs, and the test, small

func (g *gen) op(blobs map[string][]byte) txn.Op {
	key := g.keys[g.r.IntN(len(g.keys))]
	size := uint64(len(blobs[key]))
	if size > modelSizeCap {
		return txn.Op{Key: key, Kind: txn.OpTruncate, Size: g.r.Uint64N(size / 2)}
	}
	switch n := g.r.IntN(100); {
	case n < 35:
		return txn.Op{Key: key, Kind: txn.OpWrite, Offset: g.offset(), Data: g.data(g.length()), Create: g.r.IntN(8) != 0}
	case n < 50:
		return txn.Op{Key: key, Kind: txn.OpAppend, Data: g.data(g.length()), Create: g.r.IntN(8) != 0}
	case n < 70:
		var to uint64
		switch g.r.IntN(5) {
		case 0:
			to = 0
		case 1:
			to = size - min(size, 1)
		case 2:
			to = size + 1
		default:
			to = g.offset()
		}
		return txn.Op{Key: key, Kind: txn.OpTruncate, Size: to}
	case n < 85:
		// Mostly create a blob that is missing (as the commit started).
		if g.r.IntN(4) != 0 {
			for i, start := 0, g.r.IntN(len(g.keys)); i < len(g.keys); i++ {
				if k := g.keys[(start+i)%len(g.keys)]; blobs[k] == nil {
					return txn.Op{Key: k, Kind: txn.OpCreate}
				}
			}
		}
		return txn.Op{Key: key, Kind: txn.OpCreate}
	default:
		return txn.Op{Key: key, Kind: txn.OpDelete}
	}
}

func seedFromEnv(t *testing.T) uint64 { return testseed.FromEnv(t, "TYR_SEED") }

const gcRetention = time.Minute

// harness applies every commit to the model and to three stores — MVCC on,
// MVCC off, and MVCC on with a fake clock and frequent collection — and
// checks that they agree.
type harness struct {
	t        *testing.T
	name     string // seed or case, for messages
	subjects []*subject
	gc       *subject
	clock    *fakeClock // the GC store's clock
	blobs    map[string][]byte
	step     int

	committed, failed, collected, maxSize int
}

// newHarness opens the three stores. frozen makes the first MVCC store use
// a clock that never moves, so versions come from the store's counter alone.
func newHarness(t *testing.T, name string, frozen bool) *harness {
	clock := newFakeClock()
	first := &subject{name: "mvcc", s: openStore(t, Options{MVCC: true})}
	if frozen {
		c := newFakeClock()
		first = &subject{name: "mvcc(frozen clock)", s: openStore(t, Options{MVCC: true, Now: c.Now}), clock: c}
	}
	h := &harness{t: t, name: name, clock: clock, blobs: map[string][]byte{}, subjects: []*subject{
		first,
		{name: "in-place", s: openStore(t, Options{MVCC: false})},
		{name: "mvcc+gc", s: openStore(t, Options{MVCC: true, Retention: gcRetention, Now: clock.Now}), clock: clock},
	}}
	h.gc = h.subjects[2]
	for _, sub := range h.subjects {
		sub.lastSeen = map[string]uint64{}
		sub.history = map[string][]snapshot{}
	}
	return h
}

// commit applies ops everywhere and checks results, errors and the touched
// blobs. It returns the model's error.
func (h *harness) commit(ops ...txn.Op) error {
	t := h.t
	t.Helper()
	next, want, wantErr := modelApply(h.blobs, ops)
	ctx := fmt.Sprintf("%s step %d ops %s", h.name, h.step, describe(ops))
	h.step++
	for _, sub := range h.subjects {
		res, err := commit(sub.s, ops...)
		if wantErr != nil {
			if !errors.Is(err, wantErr) {
				t.Fatalf("%s: %s: got error %v, want %v", ctx, sub.name, err, wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %s: %v", ctx, sub.name, err)
		}
		checkResults(t, ctx, sub, ops, res, want, next)
		recordHistory(sub, h.blobs, next, ops, res)
	}
	if wantErr == nil {
		h.blobs = next
		h.committed++
	} else {
		want = nil
		h.failed++
	}
	for _, b := range h.blobs {
		h.maxSize = max(h.maxSize, len(b))
	}
	touched := map[string]bool{}
	for _, op := range ops {
		touched[op.Key] = true
	}
	for _, sub := range h.subjects {
		for key := range touched {
			checkTouched(t, ctx, sub, key, h.blobs, ops, want)
		}
	}
	return wantErr
}

// collect runs the GC store's collector; expire first moves its clock past
// the retention of everything superseded so far.
func (h *harness) collect(expire bool) {
	h.t.Helper()
	if expire {
		h.clock.Advance(gcRetention + time.Second)
	}
	n, err := h.gc.s.CollectGarbage()
	if err != nil {
		h.t.Fatalf("%s step %d: collect: %v", h.name, h.step, err)
	}
	h.collected += n
	if expire {
		checkLayout(h.t, fmt.Sprintf("%s step %d", h.name, h.step), h.gc, h.blobs, true)
	}
}

// checkAll compares every blob, the list of blobs and the layout.
func (h *harness) checkAll() {
	h.t.Helper()
	ctx := fmt.Sprintf("%s step %d", h.name, h.step)
	for _, sub := range h.subjects {
		checkLayout(h.t, ctx, sub, h.blobs, false)
		checkAll(h.t, ctx, sub, h.blobs)
		for key := range h.blobs {
			for _, snap := range sub.history[key] {
				checkSnapshot(h.t, ctx, sub, key, snap)
			}
		}
	}
}

func TestModel(t *testing.T) {
	seed := seedFromEnv(t)
	steps := 150
	if v := os.Getenv("TYR_STEPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("TYR_STEPS=%q: %v", v, err)
		}
		steps = n
	}
	t.Logf("seed %d: reproduce with TYR_SEED=%d go test -race -count=1 -run TestModel ./internal/mvcc/", seed, seed)
	g := &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		keys: []string{"a", "a/b", "ü/日本", "z z", "\U0010FFFF"}}
	h := newHarness(t, fmt.Sprintf("seed %d", seed), seed%2 == 0)
	defer func() {
		t.Logf("%d commits applied, %d failed as the model said; %d superseded pages collected; largest blob %d bytes",
			h.committed, h.failed, h.collected, h.maxSize)
	}()
	for step := 0; step < steps; step++ {
		nops := 1
		if g.r.IntN(3) != 0 {
			nops = 1 + g.r.IntN(5)
		}
		ops := make([]txn.Op, nops)
		for i := range ops {
			ops[i] = g.op(h.blobs)
		}
		h.commit(ops...)
		ctx := fmt.Sprintf("seed %d step %d", seed, step)
		for _, sub := range h.subjects {
			checkRandomRead(t, ctx, g, sub, h.blobs)
			key := g.keys[g.r.IntN(len(g.keys))]
			if hist := sub.history[key]; len(hist) > 0 {
				checkSnapshot(t, ctx, sub, key, hist[g.r.IntN(len(hist))])
			}
		}
		// The GC store's clock runs fast and its collector runs often.
		h.clock.Advance(time.Duration(g.r.IntN(15_000)) * time.Millisecond)
		if g.r.IntN(2) == 0 {
			h.collect(false)
		}
		if step%50 == 49 {
			h.collect(true)
		}
		if step%30 == 29 || step == steps-1 {
			h.checkAll()
		}
	}
}

// TestScripted runs hand-picked commits through the model harness: the
// corners random commits reach only by luck.
func TestScripted(t *testing.T) {
	P := uint64(PageBytes)
	fill := func(b byte, n uint64) []byte { return bytes.Repeat([]byte{b}, int(n)) }
	w := func(key string, off uint64, data []byte) txn.Op {
		return txn.Op{Key: key, Kind: txn.OpWrite, Offset: off, Data: data, Create: true}
	}
	wNoCreate := func(key string, off uint64, data []byte) txn.Op {
		return txn.Op{Key: key, Kind: txn.OpWrite, Offset: off, Data: data}
	}
	app := func(key string, data []byte) txn.Op {
		return txn.Op{Key: key, Kind: txn.OpAppend, Data: data, Create: true}
	}
	trunc := func(key string, size uint64) txn.Op { return txn.Op{Key: key, Kind: txn.OpTruncate, Size: size} }
	create := func(key string) txn.Op { return txn.Op{Key: key, Kind: txn.OpCreate} }
	del := func(key string) txn.Op { return txn.Op{Key: key, Kind: txn.OpDelete} }
	type step struct {
		ops     []txn.Op
		advance bool // move the GC clock past retention and collect after
	}
	one := func(ops ...txn.Op) step { return step{ops: ops} }
	expire := func(ops ...txn.Op) step { return step{ops: ops, advance: true} }
	cases := []struct {
		name  string
		steps []step
	}{
		{"shrink to a page boundary, then extend", []step{
			one(w("a", 0, fill('a', 3*P))), one(trunc("a", 2*P)), one(trunc("a", 3*P)),
			one(w("b", 0, fill('b', 3*P))), one(trunc("b", P), trunc("b", 3*P+5)),
		}},
		{"shrink, write past the cut, shrink less, in one commit", []step{
			one(w("a", 0, fill('a', 6*P))),
			one(trunc("a", P/2), w("a", 4*P+10, []byte("xyz")), trunc("a", 4*P+11)),
			one(trunc("a", 6*P)),
			one(w("b", 0, fill('b', 6*P))),
			one(trunc("b", P), w("b", 3*P-1, []byte("xy")), trunc("b", 5*P), trunc("b", 2*P+1), trunc("b", 7*P)),
		}},
		{"delete and re-create in one commit", []step{
			one(w("a", 0, fill('a', 2*P))), one(del("a"), create("a"), wNoCreate("a", P+5, []byte("ab"))),
			one(del("a"), w("a", 0, []byte("x"))),
			one(create("b"), del("b")),
			one(create("c"), w("c", 0, fill('c', P+1)), del("c"), app("c", []byte("d"))),
		}},
		{"delete and re-create across commits at one clock instant", []step{
			one(w("a", 0, fill('1', 2*P))), one(w("a", 10, fill('2', P))), one(del("a")),
			one(w("a", 0, fill('3', 10))), one(w("a", P, fill('4', 10))), one(del("a")),
			one(w("a", 5, fill('5', P))), expire(), one(w("a", 0, fill('6', 3))), expire(),
		}},
		{"empty writes do not extend", []step{
			one(w("a", 0, nil)), one(w("a", P+7, nil)), one(w("a", 3*P, nil)), one(w("a", 5, []byte{})),
			one(w("b", 2*P-1, nil), app("b", []byte("z"))),
		}},
		{"appends across pages", []step{
			one(create("a")), one(app("a", fill('1', P-1))), one(app("a", fill('2', 2))),
			one(app("a", fill('3', 2*P+1)), app("a", fill('4', 1)), app("a", nil)),
			one(trunc("a", P), app("a", fill('5', 3))),
		}},
		{"holes", []step{
			one(create("a"), trunc("a", 5*P+3)), one(wNoCreate("a", 3*P, []byte{7})),
			one(w("b", 40*P+P-1, []byte("xy"))), one(trunc("b", 40*P)), one(trunc("b", 41*P)),
		}},
		{"shrink within a page, then append, in one commit", []step{
			one(w("a", 0, fill('a', 2*P+100))), one(trunc("a", P+7), app("a", []byte("tail"))),
			one(trunc("a", P+3), trunc("a", P+9), w("a", P+5, []byte("q"))),
			one(trunc("a", 0), app("a", []byte("new"))),
		}},
		{"several blobs with the same pages", []step{
			one(w("a", 0, fill('a', 2*P)), w("a/", 0, fill('b', 2*P)), w("a\x01", P-1, fill('c', 2))),
			one(del("a/"), trunc("a", P-1), w("a\x01", 0, fill('d', 3))),
			expire(w("a", P, []byte("x")), create("a/")),
		}},
		{"a later op fails: nothing changes", []step{
			one(w("a", 0, fill('a', 3*P)), create("b")),
			one(trunc("a", 0), del("a"), create("a"), w("b", 0, []byte("b")), create("b")),
			one(del("b"), trunc("a", 10*P), wNoCreate("c", 0, []byte("c"))),
			one(create("c"), w("a", 1, []byte("z")), del("c"), del("c")),
			one(trunc("a", 10), app("a", []byte("x")), create("a")),
		}},
		{"overwrite with retention passing between", []step{
			one(w("a", 0, fill('1', 3*P))), one(w("a", P-5, fill('2', 10))), expire(),
			one(w("a", 2*P-5, fill('3', 10))), one(trunc("a", 2*P)), expire(),
			one(w("a", 0, fill('4', 1))), expire(),
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, frozen := range []bool{false, true} {
				h := newHarness(t, c.name, frozen)
				for _, st := range c.steps {
					if len(st.ops) > 0 {
						h.commit(st.ops...)
					}
					h.checkAll()
					if st.advance {
						h.collect(true)
						h.checkAll()
					}
				}
			}
		})
	}
}

func describe(ops []txn.Op) string {
	var b bytes.Buffer
	for i, op := range ops {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %q", op.Kind, op.Key)
		switch op.Kind {
		case txn.OpWrite:
			fmt.Fprintf(&b, " @%d+%d create=%v", op.Offset, len(op.Data), op.Create)
		case txn.OpAppend:
			fmt.Fprintf(&b, " +%d create=%v", len(op.Data), op.Create)
		case txn.OpTruncate:
			fmt.Fprintf(&b, " to %d", op.Size)
		}
	}
	return "[" + b.String() + "]"
}

func checkResults(t *testing.T, ctx string, sub *subject, ops []txn.Op, res, want []txn.Result, next map[string][]byte) {
	t.Helper()
	if len(res) != len(ops) {
		t.Fatalf("%s: %s: %d results for %d ops", ctx, sub.name, len(res), len(ops))
	}
	versions := map[string]uint64{}
	for i, op := range ops {
		r := res[i]
		if (op.Kind == txn.OpWrite || op.Kind == txn.OpAppend) && r.Offset != want[i].Offset {
			t.Fatalf("%s: %s: op %d offset %d, want %d", ctx, sub.name, i, r.Offset, want[i].Offset)
		}
		if r.Size != want[i].Size {
			t.Fatalf("%s: %s: op %d size %d, want %d", ctx, sub.name, i, r.Size, want[i].Size)
		}
		_, exists := next[op.Key]
		if exists != (r.Version != 0) {
			t.Fatalf("%s: %s: op %d version %d for a blob that exists=%v", ctx, sub.name, i, r.Version, exists)
		}
		if v, ok := versions[op.Key]; ok && v != r.Version {
			t.Fatalf("%s: %s: op %d version %d, an earlier op on the same blob says %d", ctx, sub.name, i, r.Version, v)
		}
		versions[op.Key] = r.Version
	}
	for key, v := range versions {
		if v == 0 {
			continue
		}
		if v <= sub.lastSeen[key] {
			t.Fatalf("%s: %s: blob %q version %d not above its earlier version %d", ctx, sub.name, key, v, sub.lastSeen[key])
		}
		sub.lastSeen[key] = v
	}
}

// recordHistory notes the new state of each blob the commit changed, for
// reads at old versions, and forgets states the commit made unreadable.
func recordHistory(sub *subject, blobs, next map[string][]byte, ops []txn.Op, res []txn.Result) {
	if !sub.s.opts.MVCC {
		return
	}
	now := sub.now()
	done := map[string]bool{}
	for i, op := range ops {
		if done[op.Key] {
			continue
		}
		done[op.Key] = true
		h := sub.history[op.Key]
		if cuts(blobs, ops, op.Key) {
			h = nil
		}
		if n := len(h); n > 0 && h[n-1].supersededAt.IsZero() {
			h[n-1].supersededAt = now
		}
		if res[i].Version != 0 {
			h = append(h, snapshot{version: res[i].Version, data: next[op.Key]})
		}
		if len(h) > 6 {
			h = h[len(h)-6:]
		}
		sub.history[op.Key] = h
	}
}

// checkTouched compares the stat of a blob a commit touched with the model,
// and its bytes around every offset the ops name and every page boundary
// they cross. (checkAll compares whole blobs, less often.)
func checkTouched(t *testing.T, ctx string, sub *subject, key string, blobs map[string][]byte, ops []txn.Op, res []txn.Result) {
	t.Helper()
	want, exists := blobs[key]
	if !exists {
		checkBlob(t, ctx, sub, key, nil, false)
		return
	}
	info, err := sub.s.Stat(key)
	if err != nil || info.Size != uint64(len(want)) || info.Version != sub.lastSeen[key] {
		t.Fatalf("%s: %s: stat %q = %+v (%v), want size %d version %d", ctx, sub.name, key, info, err, len(want), sub.lastSeen[key])
	}
	points := []uint64{0, uint64(len(want))}
	for i, op := range ops {
		if op.Key != key {
			continue
		}
		start, end := op.Offset, op.Offset+uint64(len(op.Data))
		switch op.Kind {
		case txn.OpAppend:
			if res != nil {
				start, end = res[i].Offset, res[i].Offset+uint64(len(op.Data))
			}
		case txn.OpTruncate:
			start, end = op.Size, op.Size
		case txn.OpWrite:
		default:
			continue
		}
		points = append(points, start, end)
		for b := (start/PageBytes + 1) * PageBytes; b < end; b += PageBytes {
			points = append(points, b)
		}
	}
	for _, p := range points {
		if p > uint64(len(want)) {
			continue
		}
		lo, hi := p-min(p, 8), min(p+8, uint64(len(want)))
		got, _, err := sub.s.Read(key, lo, hi-lo)
		if err != nil {
			t.Fatalf("%s: %s: read %q at %d: %v", ctx, sub.name, key, lo, err)
		}
		if !bytes.Equal(got, want[lo:hi]) {
			t.Fatalf("%s: %s: read %q [%d,%d): %s", ctx, sub.name, key, lo, hi, diff(got, want[lo:hi]))
		}
	}
}

// checkBlob compares a blob's stat and whole content with the model.
func checkBlob(t *testing.T, ctx string, sub *subject, key string, want []byte, exists bool) {
	t.Helper()
	info, err := sub.s.Stat(key)
	if !exists {
		if !errors.Is(err, errs.ErrNotFound) {
			t.Fatalf("%s: %s: stat of deleted %q: %v, want not found", ctx, sub.name, key, err)
		}
		if _, _, err := sub.s.Read(key, 0, 1); !errors.Is(err, errs.ErrNotFound) {
			t.Fatalf("%s: %s: read of deleted %q: %v, want not found", ctx, sub.name, key, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s: %s: stat %q: %v", ctx, sub.name, key, err)
	}
	if info.Key != key || info.Size != uint64(len(want)) || info.Version != sub.lastSeen[key] {
		t.Fatalf("%s: %s: stat %q = %+v, want size %d version %d", ctx, sub.name, key, info, len(want), sub.lastSeen[key])
	}
	got, rinfo, err := sub.s.Read(key, 0, uint64(len(want))+10)
	if err != nil {
		t.Fatalf("%s: %s: read %q: %v", ctx, sub.name, key, err)
	}
	if rinfo != info {
		t.Fatalf("%s: %s: read info %+v, stat %+v", ctx, sub.name, rinfo, info)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %s: content of %q: %s", ctx, sub.name, key, diff(got, want))
	}
}

func checkAll(t *testing.T, ctx string, sub *subject, blobs map[string][]byte) {
	t.Helper()
	for key, want := range blobs {
		checkBlob(t, ctx, sub, key, want, true)
	}
	list, more, err := sub.s.List("", "", limits.ListLimitMax)
	if err != nil || more {
		t.Fatalf("%s: %s: list: more=%v err=%v", ctx, sub.name, more, err)
	}
	var got, want []string
	for _, b := range list {
		got = append(got, b.Key)
	}
	for key := range blobs {
		want = append(want, key)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: %s: list %q, want %q", ctx, sub.name, got, want)
	}
}

// checkRandomRead reads a random range of a random blob, often across page
// boundaries or the end.
func checkRandomRead(t *testing.T, ctx string, g *gen, sub *subject, blobs map[string][]byte) {
	t.Helper()
	key := g.keys[g.r.IntN(len(g.keys))]
	want, exists := blobs[key]
	offset := g.offset()
	if exists && g.r.IntN(3) == 0 && len(want) > 0 {
		offset = g.r.Uint64N(uint64(len(want)))
	}
	length := uint64(g.length())
	got, info, err := sub.s.Read(key, offset, length)
	if !exists {
		if !errors.Is(err, errs.ErrNotFound) {
			t.Fatalf("%s: %s: read of missing %q: %v", ctx, sub.name, key, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s: %s: read %q [%d,+%d): %v", ctx, sub.name, key, offset, length, err)
	}
	var w []byte
	if offset < uint64(len(want)) {
		w = want[offset:min(uint64(len(want)), offset+length)]
	}
	if !bytes.Equal(got, w) || info.Size != uint64(len(want)) {
		t.Fatalf("%s: %s: read %q [%d,+%d) (size %d): %s", ctx, sub.name, key, offset, length, info.Size, diff(got, w))
	}
}

// checkSnapshot reads an old state of a blob at its version, if it is
// still retained.
func checkSnapshot(t *testing.T, ctx string, sub *subject, key string, snap snapshot) {
	t.Helper()
	if sub.clock != nil && sub.s.opts.Retention == gcRetention && !snap.supersededAt.IsZero() &&
		!sub.now().Before(snap.supersededAt.Add(sub.s.opts.Linger)) {
		// May have been collected: then a read at the version must fail
		// as a conflict, never return other bytes.
		got, _, err := sub.s.ReadAt(key, 0, uint64(len(snap.data)), snap.version)
		if err != nil && !errors.Is(err, errs.ErrConflict) || err == nil && !bytes.Equal(got, snap.data) {
			t.Fatalf("%s: %s: %q at collectable version %d: %v, %s", ctx, sub.name, key, snap.version, err, diff(got, snap.data))
		}
		return
	}
	got := readAt(t, sub.s, key, snap.version, 0, len(snap.data))
	if !bytes.Equal(got, snap.data) {
		t.Fatalf("%s: %s: %q at old version %d: %s", ctx, sub.name, key, snap.version, diff(got, snap.data))
	}
}

// checkLayout checks the stored records against the model: blob records
// match, page versions hold no byte past the size, every superseded page
// version is queued for collection, and no queued entry names a page
// version that is still current. collected: every queued entry's retention
// has passed and the collector ran, so one version per page remains.
func checkLayout(t *testing.T, ctx string, sub *subject, blobs map[string][]byte, collected bool) {
	t.Helper()
	type pageID struct {
		key  string
		page uint64
	}
	it, err := sub.s.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	metas := map[string]blobMeta{}
	pages := map[pageID][]uint64{}     // versions, newest first
	deltas := map[pageID]int{}         // how many of the newest versions are deltas
	newestLen := map[pageID]int{}      // bytes in the newest version
	garbage := map[string]bool{}       // page keys named by collector records
	queuedBelow := map[pageID]uint64{} // versions below this are queued
	history := map[string]bool{}       // history keys
	histQueued := map[string]bool{}    // history keys named by collector records
	chunkVersions := map[string][]uint64{}
	for ok := it.First(); ok; ok = it.Next() {
		k := slices.Clone(it.Key())
		switch k[0] {
		case prefixMeta:
			m, err := decodeMeta(it.Value())
			if err != nil {
				t.Fatalf("%s: %s: %v", ctx, sub.name, err)
			}
			metas[string(k[1:])] = m
		case prefixPage:
			// A delta's key has one byte more; blob keys hold no NUL.
			prefixLen := len(k) - 16
			if len(k) >= 19 && k[len(k)-18] == 0 {
				prefixLen--
			}
			if len(k) < 18 || k[prefixLen-1] != 0 {
				t.Fatalf("%s: %s: malformed page key %x", ctx, sub.name, k)
			}
			key := string(k[1 : prefixLen-1])
			page, version, delta, ok := decodePageKey(k, prefixLen)
			if !ok {
				t.Fatalf("%s: %s: malformed page key %x", ctx, sub.name, k)
			}
			id := pageID{key, page}
			n := len(it.Value())
			if delta {
				if n < 4 {
					t.Fatalf("%s: %s: delta %x of %d bytes", ctx, sub.name, k, n)
				}
				n = int(deltaPageBytes(it.Value()))
				if len(pages[id]) == deltas[id] {
					deltas[id]++
				}
			}
			if len(pages[id]) == 0 {
				newestLen[id] = n
			}
			pages[id] = append(pages[id], version)
			if n > PageBytes {
				t.Fatalf("%s: %s: page %d of %q holds %d bytes", ctx, sub.name, page, key, n)
			}
		case prefixGarbage:
			garbage[string(k[9:])] = true
			named := k[9:]
			if len(named) < 18 || named[len(named)-17] != 0 {
				t.Fatalf("%s: %s: malformed garbage key %x", ctx, sub.name, k)
			}
			page, version, _, _ := decodePageKey(named, len(named)-16)
			id := pageID{string(named[1 : len(named)-17]), page}
			queuedBelow[id] = max(queuedBelow[id], version)
		case prefixHistory:
			if _, err := decodeHistory(it.Value()); err != nil {
				t.Fatalf("%s: %s: history key %x: %v", ctx, sub.name, k, err)
			}
			history[string(k)] = true
		case prefixHistGC:
			histQueued[string(k[9:])] = true
		case prefixChunk:
			if len(k) < 10 || k[len(k)-9] != 0 || len(it.Value()) != 8 {
				t.Fatalf("%s: %s: malformed chunk version %x -> %x", ctx, sub.name, k, it.Value())
			}
			chunkVersions[string(k[1:len(k)-9])] = append(chunkVersions[string(k[1:len(k)-9])], binary.BigEndian.Uint64(it.Value()))
		case prefixReclaim:
			if len(it.Value()) != 16 || binary.BigEndian.Uint64(it.Value()) == 0 {
				t.Fatalf("%s: %s: malformed reclaim marker %x -> %x", ctx, sub.name, k, it.Value())
			}
		default:
			t.Fatalf("%s: %s: unknown key %x", ctx, sub.name, k)
		}
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	for key, vs := range chunkVersions {
		m, ok := metas[key]
		for _, v := range vs {
			if !ok || v > m.Version || v == 0 {
				t.Fatalf("%s: %s: chunk version %d of %q, blob record %+v (exists %v)", ctx, sub.name, v, key, m, ok)
			}
		}
	}
	for hk := range history {
		if !histQueued[hk] {
			t.Fatalf("%s: %s: history record %x is never collected", ctx, sub.name, hk)
		}
	}
	if (collected || !sub.s.opts.MVCC) && len(history) != 0 {
		t.Fatalf("%s: %s: %d history records, want none", ctx, sub.name, len(history))
	}
	for key, m := range metas {
		want, ok := blobs[key]
		if !ok {
			t.Fatalf("%s: %s: record of deleted blob %q", ctx, sub.name, key)
		}
		if m.Size != uint64(len(want)) || m.Version != sub.lastSeen[key] {
			t.Fatalf("%s: %s: record of %q = %+v, want size %d version %d", ctx, sub.name, key, m, len(want), sub.lastSeen[key])
		}
	}
	if len(metas) != len(blobs) {
		t.Fatalf("%s: %s: %d blob records, model has %d blobs", ctx, sub.name, len(metas), len(blobs))
	}
	for id, versions := range pages {
		m, ok := metas[id.key]
		if !ok {
			t.Fatalf("%s: %s: page %d of missing blob %q", ctx, sub.name, id.page, id.key)
		}
		if end := id.page*PageBytes + uint64(newestLen[id]); end > m.Size {
			t.Fatalf("%s: %s: page %d of %q stores bytes up to %d, past the size %d", ctx, sub.name, id.page, id.key, end, m.Size)
		}
		if !sub.s.opts.MVCC && (len(versions) != 1 || versions[0] != 0) {
			t.Fatalf("%s: %s: page %d of %q has versions %v with MVCC off", ctx, sub.name, id.page, id.key, versions)
		}
		// The newest versions down to the first whole page are the page's
		// current content (keys.go, deltas).
		live := deltas[id] + 1
		if live > len(versions) || live > DeltaDepthMax+1 {
			t.Fatalf("%s: %s: page %d of %q has versions %v, the newest %d of them deltas", ctx, sub.name, id.page, id.key, versions, deltas[id])
		}
		if collected && len(versions) != live {
			t.Fatalf("%s: %s: page %d of %q has versions %v after collection, %d of them current", ctx, sub.name, id.page, id.key, versions, live)
		}
		if versions[0] > m.Version {
			t.Fatalf("%s: %s: page %d of %q at version %d, newer than the blob's %d", ctx, sub.name, id.page, id.key, versions[0], m.Version)
		}
		if queuedBelow[id] > versions[0] {
			t.Fatalf("%s: %s: current version %d of page %d of %q is older than a queued %d", ctx, sub.name, versions[0], id.page, id.key, queuedBelow[id])
		}
		for _, v := range versions[live:] {
			if queuedBelow[id] <= v {
				t.Fatalf("%s: %s: superseded version %d of page %d of %q is never collected", ctx, sub.name, v, id.page, id.key)
			}
		}
	}
	if (collected || !sub.s.opts.MVCC) && len(garbage) != 0 {
		t.Fatalf("%s: %s: %d entries queued for collection, want none", ctx, sub.name, len(garbage))
	}
}

// ---- Atomicity and locks ----

func TestAtomicity(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("mvcc=%v", on), func(t *testing.T) {
			s := openStore(t, Options{MVCC: on})
			a := bytes.Repeat([]byte("A"), 3*PageBytes)
			mustCommit(t, s, txn.Op{Key: "a", Kind: txn.OpWrite, Data: a, Create: true},
				txn.Op{Key: "b", Kind: txn.OpCreate})
			before := map[string]BlobInfo{}
			for _, k := range []string{"a", "b"} {
				info, err := s.Stat(k)
				if err != nil {
					t.Fatal(err)
				}
				before[k] = info
			}
			failing := [][]txn.Op{
				// Several ops succeed before the last one fails.
				{{Key: "a", Kind: txn.OpWrite, Offset: 10, Data: []byte("xyz")},
					{Key: "a", Kind: txn.OpTruncate, Size: 5},
					{Key: "b", Kind: txn.OpAppend, Data: []byte("bbb")},
					{Key: "c", Kind: txn.OpCreate},
					{Key: "a", Kind: txn.OpCreate}},
				{{Key: "b", Kind: txn.OpDelete},
					{Key: "a", Kind: txn.OpDelete},
					{Key: "a", Kind: txn.OpWrite, Data: []byte("x")}},
				{{Key: "c", Kind: txn.OpWrite, Data: []byte("c"), Create: true},
					{Key: "d", Kind: txn.OpTruncate, Size: 1}},
				{{Key: "a", Kind: txn.OpTruncate, Size: limits.BlobBytesMax},
					{Key: "a", Kind: txn.OpAppend, Data: []byte("x")}},
			}
			want := []error{errs.ErrExists, errs.ErrNotFound, errs.ErrNotFound, errs.ErrOutOfRange}
			for i, ops := range failing {
				if _, err := commit(s, ops...); !errors.Is(err, want[i]) {
					t.Fatalf("commit %d: got %v, want %v", i, err, want[i])
				}
				for _, k := range []string{"a", "b"} {
					info, err := s.Stat(k)
					if err != nil || info != before[k] {
						t.Fatalf("commit %d changed %q: %+v, %v; was %+v", i, k, info, err, before[k])
					}
				}
				for _, k := range []string{"c", "d"} {
					if _, err := s.Stat(k); !errors.Is(err, errs.ErrNotFound) {
						t.Fatalf("commit %d left %q behind: %v", i, k, err)
					}
				}
				if got := mustRead(t, s, "a", 0, uint64(len(a))); !bytes.Equal(got, a) {
					t.Fatalf("commit %d changed the content of a: %s", i, diff(got, a))
				}
			}
			// Nothing was queued for collection either.
			if n := countKeys(t, s, prefixGarbage); n != 0 {
				t.Fatalf("failed commits queued %d garbage entries", n)
			}
			// A prepared commit is invisible until Commit.
			p, err := s.Prepare([]txn.Op{{Key: "a", Kind: txn.OpWrite, Data: []byte("new")}})
			if err != nil {
				t.Fatal(err)
			}
			if got := mustRead(t, s, "a", 0, 3); string(got) != "AAA" {
				t.Fatalf("prepared write visible before commit: %q", got)
			}
			if err := p.Commit(); err != nil {
				t.Fatal(err)
			}
			if got := mustRead(t, s, "a", 0, 3); string(got) != "new" {
				t.Fatalf("committed write not visible: %q", got)
			}
		})
	}
}

// prepareWithin runs Prepare(ops) and fails if it does not return within d.
func prepareWithin(t *testing.T, s *Store, d time.Duration, ops ...txn.Op) *Pending {
	t.Helper()
	type out struct {
		p   *Pending
		err error
	}
	ch := make(chan out, 1)
	go func() {
		p, err := s.Prepare(ops)
		ch <- out{p, err}
	}()
	select {
	case o := <-ch:
		if o.err != nil {
			t.Fatal(o.err)
		}
		return o.p
	case <-time.After(d):
		t.Fatalf("Prepare(%s) blocked for %v", describe(ops), d)
		return nil
	}
}

func TestAbortReleasesLocks(t *testing.T) {
	s := openStore(t, Options{MVCC: true})
	mustCommit(t, s, txn.Op{Key: "k", Kind: txn.OpWrite, Data: []byte("old"), Create: true})
	for i := 0; i < 3; i++ {
		p := prepareWithin(t, s, 5*time.Second,
			txn.Op{Key: "k", Kind: txn.OpWrite, Data: []byte("new")},
			txn.Op{Key: "other", Kind: txn.OpCreate})
		p.Abort()
	}
	if got := mustRead(t, s, "k", 0, 10); string(got) != "old" {
		t.Fatalf("aborted write visible: %q", got)
	}
	if _, err := s.Stat("other"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("aborted create visible: %v", err)
	}
	p := prepareWithin(t, s, 5*time.Second, txn.Op{Key: "other", Kind: txn.OpCreate}, txn.Op{Key: "k", Kind: txn.OpDelete})
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	if len(s.locks.locks) != 0 {
		t.Fatalf("lock table not empty after commit and aborts: %d entries", len(s.locks.locks))
	}
}

func TestPrepareLocks(t *testing.T) {
	s := openStore(t, Options{MVCC: true})
	first := prepareWithin(t, s, 5*time.Second, txn.Op{Key: "k", Kind: txn.OpWrite, Data: []byte("1"), Create: true})
	// A commit on other blobs does not wait.
	prepareWithin(t, s, 5*time.Second, txn.Op{Key: "j", Kind: txn.OpCreate}).Abort()
	// A commit on the same blob waits until the first one is done, then sees it.
	done := make(chan error, 1)
	go func() {
		_, err := commit(s, txn.Op{Key: "j", Kind: txn.OpCreate}, txn.Op{Key: "k", Kind: txn.OpAppend, Data: []byte("2")})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("second commit on a locked blob did not wait: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := first.Commit(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("second commit still blocked after the first committed")
	}
	if got := mustRead(t, s, "k", 0, 10); string(got) != "12" {
		t.Fatalf("k = %q, want \"12\"", got)
	}
}

// ---- Version collection ----

func TestVersionGC(t *testing.T) {
	const (
		commits   = 200
		pages     = 3
		retention = time.Hour
	)
	clock := newFakeClock()
	// No version is in use, and unused ones linger as long as used ones
	// are retained: the collector goes by time alone (uses: TestVersionUses).
	s := openStore(t, Options{MVCC: true, Retention: retention, Linger: retention, Now: clock.Now})
	start := clock.Now()
	// Commit i writes 8 bytes at the start of each page, alternately at
	// bytes 0 and 4, so each new page version merges the new bytes into the
	// previous version. Pages stay 16 bytes long, which keeps the test
	// fast; the blob is 2 pages and 16 bytes. A change of half a page is no
	// smaller as a delta (keys.go), so every version is a whole page.
	const size = (pages-1)*PageBytes + 16
	contents := make([][]byte, commits)
	cur := make([]byte, size)
	versions := make([]uint64, commits)
	for i := range commits {
		var ops []txn.Op
		for p := range pages {
			off := uint64(p*PageBytes + 4*(i%2))
			data := bytes.Repeat([]byte{byte(i), byte(p + 1)}, 4)
			if i == 0 {
				off, data = uint64(p*PageBytes), bytes.Repeat([]byte{0xee}, 16)
			}
			copy(cur[off:], data)
			ops = append(ops, txn.Op{Key: "blob", Kind: txn.OpWrite, Offset: off, Data: data, Create: true})
		}
		contents[i] = slices.Clone(cur)
		// Commit i happens at start + i seconds.
		res := mustCommit(t, s, ops...)
		versions[i] = res[0].Version
		clock.Advance(time.Second)
	}
	content := func(i int) []byte { return contents[i] }
	last := content(commits - 1)
	checkCurrent := func(when string) {
		t.Helper()
		if got := mustRead(t, s, "blob", 0, size); !bytes.Equal(got, last) {
			t.Fatalf("%s: current content: %s", when, diff(got, last))
		}
		info, err := s.Stat("blob")
		if err != nil || info.Version != versions[commits-1] || info.Size != size {
			t.Fatalf("%s: stat %+v, %v", when, info, err)
		}
	}
	count := func(when string, wantPages, wantGarbage int) {
		t.Helper()
		if p, g := countKeys(t, s, prefixPage), countKeys(t, s, prefixGarbage); p != wantPages || g != wantGarbage {
			t.Fatalf("%s: %d page keys and %d garbage keys, want %d and %d", when, p, g, wantPages, wantGarbage)
		}
	}
	collect := func(when string, want int) {
		t.Helper()
		n, err := s.CollectGarbage()
		if err != nil || n != want {
			t.Fatalf("%s: collected %d (%v), want %d", when, n, err, want)
		}
	}

	// Before any retention passes everything is kept and readable.
	count("before retention", commits*pages, (commits-1)*pages)
	collect("before retention", 0)
	count("before retention", commits*pages, (commits-1)*pages)
	for _, i := range []int{0, 1, 99, 198} {
		if got := readAt(t, s, "blob", versions[i], 0, size); !bytes.Equal(got, content(i)) {
			t.Fatalf("version of commit %d before retention: %s", i, diff(got, content(i)))
		}
	}
	checkCurrent("before retention")

	// Commit i's versions were superseded at start+(i+1)s, so at
	// start+retention+100s those of commits 0..98 are past their deadline.
	clock.Advance(start.Add(retention + 100*time.Second).Sub(clock.Now()))
	collect("partly", 99*pages)
	count("partly", (commits-99)*pages, (commits-100)*pages)
	if got := readAt(t, s, "blob", versions[98], 0, size); !bytes.Equal(got, make([]byte, size)) {
		t.Fatalf("collected version of commit 98 still readable: %s", diff(got, make([]byte, size)))
	}
	if got := readAt(t, s, "blob", versions[99], 0, size); !bytes.Equal(got, content(99)) {
		t.Fatalf("retained version of commit 99: %s", diff(got, content(99)))
	}
	checkCurrent("partly")

	clock.Advance(retention)
	collect("after retention", (commits-100)*pages)
	count("after retention", pages, 0)
	collect("again", 0)
	checkCurrent("after retention")
	if got := readAt(t, s, "blob", versions[commits-2], 0, size); !bytes.Equal(got, make([]byte, size)) {
		t.Fatalf("collected version still readable: %s", diff(got, make([]byte, size)))
	}

	// With MVCC off nothing is ever queued: pages are overwritten in place.
	off := openStore(t, Options{MVCC: false})
	for i := range 20 {
		mustCommit(t, off, txn.Op{Key: "blob", Kind: txn.OpWrite, Data: bytes.Repeat([]byte{byte(i)}, pages*PageBytes), Create: true})
	}
	if p, g := countKeys(t, off, prefixPage), countKeys(t, off, prefixGarbage); p != pages || g != 0 {
		t.Fatalf("MVCC off: %d page keys and %d garbage keys, want %d and 0", p, g, pages)
	}
}

// TestCollectRecord: a due collector record deletes every version of its
// page older than the one it names, however many, and nothing else: not
// that version or newer ones, not the other pages of the blob (page 255
// and 256 differ first in a byte other than the last), not another blob's
// pages, and not while an older version of the blob is in use.
func TestCollectRecord(t *testing.T) {
	const linger, retention = 10 * time.Second, time.Hour
	clock := newFakeClock()
	s := openStore(t, Options{MVCC: true, Retention: retention, Linger: linger, Now: clock.Now})
	write := func(key string, pages ...uint64) uint64 {
		t.Helper()
		var ops []txn.Op
		for _, p := range pages {
			ops = append(ops, txn.Op{Key: key, Kind: txn.OpWrite, Offset: p * PageBytes, Data: []byte{byte(p), 1}, Create: true})
		}
		v := mustCommit(t, s, ops...)[0].Version
		clock.Advance(time.Second)
		return v
	}
	// versions lists the stored versions of a page, newest first.
	versions := func(key string, page uint64) []uint64 {
		t.Helper()
		prefix := pageKeyVersionless(key, page)
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixUpperBound(prefix)})
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		var out []uint64
		for ok := it.First(); ok; ok = it.Next() {
			out = append(out, ^binary.BigEndian.Uint64(it.Key()[len(prefix):]))
		}
		return out
	}
	check := func(when, key string, page uint64, want ...uint64) {
		t.Helper()
		if got := versions(key, page); !slices.Equal(got, want) {
			t.Fatalf("%s: versions of page %d of %q: %v, want %v", when, page, key, got, want)
		}
	}
	collect := func(when string, want int) {
		t.Helper()
		if n, err := s.CollectGarbage(); err != nil || n != want {
			t.Fatalf("%s: collected %d pages (%v), want %d", when, n, err, want)
		}
	}
	readable := func(version uint64) bool {
		t.Helper()
		_, _, err := s.ReadAt("k", 255*PageBytes, 2, version)
		if err != nil && !errors.Is(err, errs.ErrConflict) {
			t.Fatal(err)
		}
		return err == nil
	}

	start := clock.Now()
	at := func(d time.Duration) { clock.Advance(start.Add(d).Sub(clock.Now())) }
	v0 := write("k", 254, 255, 256)
	other := write("k0", 255)
	// The record of the j-th overwrite is due linger after start+(j+1)s.
	hot := []uint64{v0}
	for range 20 {
		hot = append(hot, write("k", 255))
	}
	slices.Reverse(hot) // newest first, as stored

	// Only the first overwrite's record is due; it takes the one older
	// version, the 19 records queued after it take none yet.
	at(linger + 2500*time.Millisecond)
	collect("first record due", 1)
	check("first record due", "k", 255, hot[:20]...)
	if readable(v0) || !readable(hot[19]) {
		t.Fatalf("first record due: version %d readable %v, version %d readable %v", v0, readable(v0), hot[19], readable(hot[19]))
	}
	// Ten more due at once: the versions below the newest of them go.
	at(linger + 12500*time.Millisecond)
	collect("ten more due", 10)
	check("ten more due", "k", 255, hot[:10]...)

	// A version in use stays, and so do the versions after it, while
	// the records of the versions before it go.
	_, release, err := s.Pin("k", 0, true)
	if err != nil {
		t.Fatal(err)
	}
	release()
	inUse := hot[0]
	later := []uint64{write("k", 255), write("k", 255)}
	clock.Advance(retention / 2)
	collect("in use", 9)
	check("in use", "k", 255, later[1], later[0], inUse)
	if !readable(inUse) {
		t.Fatal("version in use collected")
	}
	if _, err := commit(s, txn.Op{Key: "k", Kind: txn.OpReadCheck, Version: inUse}); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("stale read check: %v, want a conflict", err)
	}
	clock.Advance(linger + time.Second)
	collect("released", 2)
	check("released", "k", 255, later[1])
	collect("again", 0)

	check("end", "k", 254, v0)
	check("end", "k", 256, v0)
	check("end", "k0", 255, other)
	if n := countKeys(t, s, prefixGarbage); n != 0 {
		t.Fatalf("%d collector records left", n)
	}
}

// TestCollectCompacts: with Pebble not compacting on its own, the space of
// collected versions stays while the collector finds work, and is
// reclaimed by the first pass that finds none.
func TestCollectCompacts(t *testing.T) {
	opts := &pebble.Options{FS: vfs.NewMem(), Logger: testLogger{},
		DisableAutomaticCompactions: true, L0StopWritesThreshold: 1 << 20}
	for i := range opts.Levels { // pages take the space written
		opts.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.NoCompression }
	}
	db, err := pebble.Open("db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	clock := newFakeClock()
	s, err := Open(db, Options{MVCC: true, Retention: time.Hour, Linger: time.Second, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	const size, overwrites = 1 << 20, compactSlack/(1<<20) + 8
	data := make([]byte, size)
	for i := range overwrites {
		for p := 0; p < size; p += PageBytes {
			binary.LittleEndian.PutUint64(data[p:], uint64(i))
		}
		mustCommit(t, s, txn.Op{Key: "k", Kind: txn.OpWrite, Data: data, Create: true})
	}
	used := func() uint64 {
		t.Helper()
		n, err := db.EstimateDiskUsage(pagePrefix("k"), blobPagesEnd("k"))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	clock.Advance(2 * time.Second)
	if n, err := s.CollectGarbage(); err != nil || n != (overwrites-1)*size/PageBytes {
		t.Fatalf("collected %d pages (%v), want %d", n, err, (overwrites-1)*size/PageBytes)
	}
	if u := used(); u < compactSlack {
		t.Fatalf("pages take %d bytes after a pass that collected: compacted already, or the test wrote too little", u)
	}
	if n, err := s.CollectGarbage(); err != nil || n != 0 {
		t.Fatalf("second pass: collected %d pages (%v), want 0", n, err)
	}
	if u := used(); u > 2*size {
		t.Fatalf("pages take %d bytes after a pass with nothing to collect, want at most %d", u, 2*size)
	}
	if got := mustRead(t, s, "k", 0, size); !bytes.Equal(got, data) {
		t.Fatalf("content after compaction: %s", diff(got, data))
	}
}

// TestOlderPageVersions: the span a collector record deletes holds exactly
// the versions of its page older than the one it names.
func TestOlderPageVersions(t *testing.T) {
	const key = "k"
	for _, page := range []uint64{0, 255, 1 << 32, math.MaxUint64} {
		for _, version := range []uint64{1, 2, 1 << 40, math.MaxUint64} {
			start, end := olderPageVersions(pageKey(key, page, version))
			in := func(k []byte) bool { return bytes.Compare(start, k) <= 0 && bytes.Compare(k, end) < 0 }
			for _, v := range []uint64{0, 1, version - 1, version, version + 1, math.MaxUint64} {
				if got, want := in(pageKey(key, page, v)), v < version; got != want {
					t.Errorf("page %d, version %d: version %d in the span: %v, want %v", page, version, v, got, want)
				}
			}
			outside := [][]byte{pagePrefix(key), blobPagesEnd(key), pageKey(key+"0", page, 0), pageKey("j", page, 0)}
			if page > 0 {
				outside = append(outside, pageKey(key, page-1, 0))
			}
			if page < math.MaxUint64 {
				outside = append(outside, pageKey(key, page+1, math.MaxUint64), pageKeyVersionless(key, page+1))
			}
			for _, k := range outside {
				if in(k) {
					t.Errorf("page %d, version %d: key %x of another page in the span", page, version, k)
				}
			}
		}
	}
}

// ---- List ----

func TestList(t *testing.T) {
	s := openStore(t, Options{MVCC: true})
	keys := []string{"a", "a b", "a/b", "a/b/c", "a/c", "ab", "b", "z", "~",
		"ü", "über/x", "日本/語", "\x01", "\U0010FFFF", "\U0010FFFF/x", "a/\U0010FFFF"}
	for i, k := range keys {
		mustCommit(t, s, txn.Op{Key: k, Kind: txn.OpWrite, Data: bytes.Repeat([]byte{1}, i), Create: true})
	}
	mustCommit(t, s, txn.Op{Key: "a/gone", Kind: txn.OpCreate})
	mustCommit(t, s, txn.Op{Key: "a/gone", Kind: txn.OpDelete})
	sorted := slices.Clone(keys)
	slices.Sort(sorted) // byte order, which is code point order for UTF-8

	list := func(prefix, after string, limit int) ([]string, bool) {
		t.Helper()
		infos, more, err := s.List(prefix, after, limit)
		if err != nil {
			t.Fatalf("List(%q, %q, %d): %v", prefix, after, limit, err)
		}
		out := []string{}
		for _, info := range infos {
			want, err := s.Stat(info.Key)
			if err != nil || want != info {
				t.Fatalf("List(%q, %q, %d): %+v, stat says %+v (%v)", prefix, after, limit, info, want, err)
			}
			out = append(out, info.Key)
		}
		return out, more
	}
	filter := func(prefix, after string) []string {
		out := []string{}
		for _, k := range sorted {
			if len(k) >= len(prefix) && k[:len(prefix)] == prefix && k > after {
				out = append(out, k)
			}
		}
		return out
	}
	tests := []struct{ prefix, after string }{
		{"", ""},
		{"a", ""},
		{"a/", ""},
		{"a/b", ""},
		{"a/", "a/b"},   // startAfter inside the prefix
		{"a/", "a/b/c"}, // startAfter is a listed key
		{"a/", "a"},     // startAfter before the prefix
		{"a/", "a/zzz"}, // startAfter past every key with the prefix
		{"a/", "b"},     // startAfter past the prefix range entirely
		{"", "ab"},
		{"", "\U0010FFFF"},
		{"", "\U0010FFFF/x"},
		{"ü", ""},
		{"日本", ""},
		{"\U0010FFFF", ""},
		{"\xff", ""}, // no key starts with 0xff
		{"\xf4\x8f\xbf", ""},
		{"nope", ""},
		{"a/gone", ""},
	}
	for _, tt := range tests {
		want := filter(tt.prefix, tt.after)
		got, more := list(tt.prefix, tt.after, limits.ListLimitMax)
		if !slices.Equal(got, want) || more {
			t.Errorf("List(%q, %q) = %q more=%v, want %q", tt.prefix, tt.after, got, more, want)
		}
		// Paging with every small limit returns the same keys, in order.
		for limit := 1; limit <= 4; limit++ {
			var paged []string
			after := tt.after
			for pages := 0; ; pages++ {
				if pages > len(keys)+1 {
					t.Fatalf("List(%q) with limit %d does not end", tt.prefix, limit)
				}
				page, more := list(tt.prefix, after, limit)
				if len(page) > limit {
					t.Fatalf("List(%q, %q, %d) returned %d", tt.prefix, after, limit, len(page))
				}
				paged = append(paged, page...)
				if !more {
					break
				}
				if len(page) == 0 {
					t.Fatalf("List(%q, %q, %d): more with an empty page", tt.prefix, after, limit)
				}
				after = page[len(page)-1]
			}
			if !slices.Equal(paged, want) {
				t.Errorf("List(%q, %q) in pages of %d = %q, want %q", tt.prefix, tt.after, limit, paged, want)
			}
		}
	}
	// more is exact: a page that takes the last key says so.
	if got, more := list("a/", "", 4); len(got) != 4 || more {
		t.Errorf("List(a/, 4) = %q more=%v, want all 4 and no more", got, more)
	}
	if got, more := list("a/", "", 3); len(got) != 3 || !more {
		t.Errorf("List(a/, 3) = %q more=%v, want 3 and more", got, more)
	}
}

func TestPrefixUpperBound(t *testing.T) {
	tests := []struct{ in, want []byte }{
		{[]byte("m"), []byte("n")},
		{[]byte("ma/"), []byte("ma0")},
		{[]byte("m\xff"), []byte("n")},
		{[]byte("ma\xff\xff"), []byte("mb")},
		{[]byte("\xff\xff"), nil},
		{[]byte{}, nil},
	}
	for _, tt := range tests {
		if got := prefixUpperBound(tt.in); !bytes.Equal(got, tt.want) || (tt.want == nil) != (got == nil) {
			t.Errorf("prefixUpperBound(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// ---- Versioned reads ----

func TestReadPage(t *testing.T) {
	clock := newFakeClock()
	s := openStore(t, Options{MVCC: true, Retention: time.Minute, Now: clock.Now})
	fill := func(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }
	// v1: pages 0 and 1 (page 1 half full) and page 3 (a hole at page 2).
	v1 := mustCommit(t, s, txn.Op{Key: "a", Kind: txn.OpWrite, Data: fill('1', PageBytes+PageBytes/2), Create: true},
		txn.Op{Key: "a", Kind: txn.OpWrite, Offset: 3 * PageBytes, Data: fill('3', 10)})[0].Version
	clock.Advance(time.Second)
	// Neighbouring blobs whose page keys sort right after a's.
	mustCommit(t, s, txn.Op{Key: "a\x01", Kind: txn.OpWrite, Offset: 2 * PageBytes, Data: fill('x', 5), Create: true},
		txn.Op{Key: "a/", Kind: txn.OpWrite, Offset: 2 * PageBytes, Data: fill('y', 5), Create: true})
	// v2: rewrites page 1 only, spilling 2 bytes into page 2.
	v2 := mustCommit(t, s, txn.Op{Key: "a", Kind: txn.OpWrite, Offset: 2*PageBytes - 3, Data: fill('2', 5)})[0].Version
	clock.Advance(time.Second)
	// v3: rewrites page 0 whole (a smaller change would be a delta).
	v3 := mustCommit(t, s, txn.Op{Key: "a", Kind: txn.OpWrite, Offset: 0, Data: fill('0', PageBytes)})[0].Version
	if !(v1 < v2 && v2 < v3) {
		t.Fatalf("versions not increasing: %d %d %d", v1, v2, v3)
	}

	it, err := s.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		page, at    uint64
		ok          bool
		wantVersion uint64
		wantLen     int
		wantFirst   byte
	}{
		{0, v1 - 1, false, 0, 0, 0},
		{0, v1, true, v1, PageBytes, '1'},
		{0, v2, true, v1, PageBytes, '1'},
		{0, v3 - 1, true, v1, PageBytes, '1'},
		{0, v3, true, v3, PageBytes, '0'},
		{0, ^uint64(0), true, v3, PageBytes, '0'},
		{1, v1, true, v1, PageBytes / 2, '1'},
		{1, v2, true, v2, PageBytes, '1'},
		{1, v3, true, v2, PageBytes, '1'},
		{2, v1, false, 0, 0, 0}, // must not find page 3, nor a\x01's or a/'s page 2
		{2, v2, true, v2, 2, '2'},
		{3, v1, true, v1, 10, '3'},
		{3, ^uint64(0), true, v1, 10, '3'},
		{4, ^uint64(0), false, 0, 0, 0}, // past the last page: must not find a\x01's pages
		{^uint64(0), ^uint64(0), false, 0, 0, 0},
	}
	for _, tt := range tests {
		data, v, _, ok, err := readPage(it, "a", tt.page, tt.at)
		if err != nil {
			t.Fatal(err)
		}
		if ok != tt.ok || v != tt.wantVersion || len(data) != tt.wantLen || (ok && data[0] != tt.wantFirst) {
			t.Errorf("readPage(a, page %d, at %d) = %d bytes %q… v%d ok=%v, want %d bytes %q… v%d ok=%v",
				tt.page, tt.at, len(data), data[:min(len(data), 1)], v, ok, tt.wantLen, tt.wantFirst, tt.wantVersion, tt.ok)
		}
	}
	it.Close()

	// Whole ranges at each version, across page boundaries.
	size := 3*PageBytes + 10
	at1 := make([]byte, size)
	copy(at1, fill('1', PageBytes+PageBytes/2))
	copy(at1[3*PageBytes:], fill('3', 10))
	at2 := slices.Clone(at1)
	copy(at2[2*PageBytes-3:], fill('2', 5))
	at3 := slices.Clone(at2)
	copy(at3, fill('0', PageBytes))
	for _, c := range []struct {
		v    uint64
		want []byte
	}{{v1, at1}, {v2, at2}, {v3, at3}} {
		for _, r := range [][2]int{{0, size}, {PageBytes - 2, 4}, {2*PageBytes - 4, 8}, {3*PageBytes - 1, 11}, {5, 0}} {
			got := readAt(t, s, "a", c.v, uint64(r[0]), r[1])
			if want := c.want[r[0] : r[0]+r[1]]; !bytes.Equal(got, want) {
				t.Errorf("readRange(a, v%d, [%d,+%d)): %s", c.v, r[0], r[1], diff(got, want))
			}
		}
	}
	if got := mustRead(t, s, "a", 0, uint64(size)); !bytes.Equal(got, at3) {
		t.Errorf("Read: %s", diff(got, at3))
	}

	// Once retention passes, old versions are gone and the current one stays.
	clock.Advance(time.Minute + time.Second)
	if _, err := s.CollectGarbage(); err != nil {
		t.Fatal(err)
	}
	if got := readAt(t, s, "a", v3, 0, size); !bytes.Equal(got, at3) {
		t.Errorf("current version after collection: %s", diff(got, at3))
	}
	got := readAt(t, s, "a", v1, 0, PageBytes)
	if !bytes.Equal(got, make([]byte, PageBytes)) {
		t.Errorf("collected version of page 0 still read at v1: %s", diff(got, make([]byte, PageBytes)))
	}
}

func TestReadLimits(t *testing.T) {
	s := openStore(t, Options{MVCC: false})
	if _, _, err := s.Read("nope", 0, 1); !errors.Is(err, errs.ErrNotFound) {
		t.Errorf("read of missing blob: %v", err)
	}
	if _, err := s.Stat("nope"); !errors.Is(err, errs.ErrNotFound) {
		t.Errorf("stat of missing blob: %v", err)
	}
	mustCommit(t, s, txn.Op{Key: "k", Kind: txn.OpCreate},
		txn.Op{Key: "k", Kind: txn.OpTruncate, Size: limits.BlobBytesMax})
	if _, _, err := s.Read("k", 0, limits.PayloadBytesMax+1); !errors.Is(err, errs.ErrTooLarge) {
		t.Errorf("read over the payload limit: %v", err)
	}
	// A hole reads as zeros, at the very end of the largest blob too.
	got := mustRead(t, s, "k", limits.BlobBytesMax-PageBytes-5, PageBytes+10)
	if !bytes.Equal(got, make([]byte, PageBytes+5)) {
		t.Errorf("hole at the end: %s", diff(got, make([]byte, PageBytes+5)))
	}
	for _, off := range []uint64{limits.BlobBytesMax, limits.BlobBytesMax + 1, ^uint64(0)} {
		if got := mustRead(t, s, "k", off, 10); len(got) != 0 {
			t.Errorf("read at %d past the end returned %d bytes", off, len(got))
		}
	}
	if got := mustRead(t, s, "k", 0, 0); len(got) != 0 {
		t.Errorf("zero-length read returned %d bytes", len(got))
	}
}

// TestReadsNeverMix commits whole-blob rewrites while readers and the
// collector run: every read must see exactly one commit's bytes.
func TestReadsNeverMix(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("mvcc=%v", on), func(t *testing.T) {
			clock := newFakeClock()
			s := openStore(t, Options{MVCC: on, Retention: time.Second, Now: clock.Now})
			const size = PageBytes + 100 // two pages
			mustCommit(t, s, txn.Op{Key: "k", Kind: txn.OpWrite, Data: make([]byte, size), Create: true})
			stop := make(chan struct{})
			errc := make(chan error, 3)
			var wg sync.WaitGroup
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						data, info, err := s.Read("k", 0, size)
						if err != nil || len(data) != size || info.Size != size {
							errc <- fmt.Errorf("read: %d bytes, %+v, %v", len(data), info, err)
							return
						}
						if n := bytes.Count(data, data[:1]); n != size {
							errc <- fmt.Errorf("read mixes commits: only %d of %d bytes are %#x", n, size, data[0])
							return
						}
					}
				}()
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					clock.Advance(300 * time.Millisecond)
					if _, err := s.CollectGarbage(); err != nil {
						errc <- err
						return
					}
				}
			}()
			for i := 1; i <= 20; i++ {
				if _, err := commit(s, txn.Op{Key: "k", Kind: txn.OpWrite, Data: bytes.Repeat([]byte{byte(i)}, size)}); err != nil {
					t.Error(err)
					break
				}
			}
			close(stop)
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Error(err)
			}
			if got := mustRead(t, s, "k", 0, size); !bytes.Equal(got, bytes.Repeat([]byte{20}, size)) {
				t.Errorf("final content: %s", diff(got, bytes.Repeat([]byte{20}, size)))
			}
		})
	}
}

// TestClockStepsBackAcrossRestart: a blob deleted and re-created after a
// restart whose clock stepped back must not reuse a version that a pending
// collector record names, or the collector would delete its live page.
func TestClockStepsBackAcrossRestart(t *testing.T) {
	db, err := pebble.Open("db", &pebble.Options{FS: vfs.NewMem(), Logger: testLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	clock := int64(1000)
	opts := Options{MVCC: true, Retention: time.Second, Now: func() time.Time { return time.Unix(0, clock) }}
	s, err := Open(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	mustCommit := func(s *Store, ops ...txn.Op) {
		t.Helper()
		p, err := s.Prepare(ops)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	write := txn.Op{Key: "a", Kind: txn.OpWrite, Data: []byte("old"), Create: true}
	mustCommit(s, write) // version 1000
	clock++
	mustCommit(s, write) // version 1001; queues page version 1000
	clock++
	mustCommit(s, txn.Op{Key: "a", Kind: txn.OpDelete})

	clock = 1000 // the restarted node's clock is behind
	s, err = Open(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	mustCommit(s, txn.Op{Key: "a", Kind: txn.OpWrite, Data: []byte("new"), Create: true})
	info, err := s.Stat("a")
	if err != nil {
		t.Fatal(err)
	}
	if info.Version <= 1000 {
		t.Fatalf("re-created blob got version %d, which a collector record names", info.Version)
	}
	clock += int64(2 * time.Second)
	if _, err := s.CollectGarbage(); err != nil {
		t.Fatal(err)
	}
	got, _, err := s.Read("a", 0, 10)
	if err != nil || string(got) != "new" {
		t.Fatalf("after collection: %q, %v; want \"new\"", got, err)
	}
}

// A commit's batch of megabytes is allocated once, to about its size: a
// batch grown by doubling would have room for up to twice its data.
func TestBatchSizedUpFront(t *testing.T) {
	s := openStore(t, Options{ChunkBytes: 1 << 20, MVCC: true})
	big := bytes.Repeat([]byte("x"), 4<<20)
	for _, ops := range [][]txn.Op{
		{{Key: "big", Kind: txn.OpWrite, Data: big, Create: true}},
		// An overwrite that keeps history and queues superseded pages.
		{{Key: "big", Kind: txn.OpWrite, Offset: 1 << 10, Data: big}, {Key: "other", Kind: txn.OpAppend, Data: big[:3<<20], Create: true}},
	} {
		p, err := s.Prepare(ops)
		if err != nil {
			t.Fatal(err)
		}
		if n, room := len(p.batch.Repr()), cap(p.batch.Repr()); float64(room) > 1.05*float64(n) {
			t.Errorf("%d ops: batch of %d bytes with room for %d", len(ops), n, room)
		}
		if err := p.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSmallDeletesLeaveNoRangeDeletions: deleting or shrinking a blob of a
// few pages deletes its keys one by one, leaving no range deletion for
// later reads to step through; a blob of more pages than pointDeletesMax
// is dropped with range deletions. Either way no key of it is left.
func TestSmallDeletesLeaveNoRangeDeletions(t *testing.T) {
	s := openStore(t, Options{MVCC: true, Retention: time.Hour})
	rangeDels := func() uint64 {
		t.Helper()
		if err := s.db.Flush(); err != nil {
			t.Fatal(err)
		}
		levels, err := s.db.SSTables(pebble.WithProperties())
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, level := range levels {
			for _, table := range level {
				n += table.Properties.NumRangeDeletions
			}
		}
		return n
	}
	keysOf := func(key string) int {
		t.Helper()
		n := 0
		for _, span := range [][2][]byte{{pagePrefix(key), blobPagesEnd(key)}, {chunkPrefix(key), chunksEnd(key)}, {historyPrefix(key), historyEnd(key)}} {
			it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: span[0], UpperBound: span[1]})
			if err != nil {
				t.Fatal(err)
			}
			for ok := it.First(); ok; ok = it.Next() {
				n++
			}
			if err := it.Close(); err != nil {
				t.Fatal(err)
			}
		}
		return n
	}
	small := bytes.Repeat([]byte("s"), 3*PageBytes)
	for i := range 20 {
		key := fmt.Sprintf("small%d", i)
		mustCommit(t, s, txn.Op{Key: key, Kind: txn.OpWrite, Data: small, Create: true})
		mustCommit(t, s, txn.Op{Key: key, Kind: txn.OpWrite, Offset: 10, Data: []byte("again")}) // history to delete too
		if i%2 == 0 {
			mustCommit(t, s, txn.Op{Key: key, Kind: txn.OpTruncate, Size: PageBytes / 2})
		}
		mustCommit(t, s, txn.Op{Key: key, Kind: txn.OpDelete})
		if n := keysOf(key); n != 0 {
			t.Fatalf("%s: %d keys left after its delete", key, n)
		}
	}
	if n := rangeDels(); n != 0 {
		t.Fatalf("small deletes and truncates left %d range deletions, want 0", n)
	}
	mustCommit(t, s, txn.Op{Key: "big", Kind: txn.OpWrite, Data: make([]byte, (pointDeletesMax+1)*PageBytes), Create: true})
	mustCommit(t, s, txn.Op{Key: "big", Kind: txn.OpDelete})
	if n := keysOf("big"); n != 0 {
		t.Fatalf("big: %d keys left after its delete", n)
	}
	if n := rangeDels(); n == 0 {
		t.Fatalf("a blob of %d pages was deleted without a range deletion", pointDeletesMax+1)
	}
}

// TestAppendsWriteDeltas checks that an append to a stored page stores the
// added bytes alone (keys.go, deltas), that a chain of deltas ends at
// DeltaDepthMax, that every version reads back whole, and that the
// collector takes a chain with the whole page that superseded it.
func TestAppendsWriteDeltas(t *testing.T) {
	const retention = time.Hour
	clock := newFakeClock()
	s := openStore(t, Options{MVCC: true, Retention: retention, Linger: retention, Now: clock.Now})
	type snap struct {
		version uint64
		data    []byte
	}
	cur := bytes.Repeat([]byte("head"), 256)
	snaps := []snap{{mustCommit(t, s, txn.Op{Key: "log", Kind: txn.OpWrite, Data: cur, Create: true})[0].Version, slices.Clone(cur)}}
	wantDeltas := []uint64{}
	appendRecord := func(rec []byte) uint64 {
		t.Helper()
		clock.Advance(time.Second)
		v := mustCommit(t, s, txn.Op{Key: "log", Kind: txn.OpAppend, Data: rec})[0].Version
		cur = append(cur, rec...)
		snaps = append(snaps, snap{v, slices.Clone(cur)})
		return v
	}
	const appends = 2*DeltaDepthMax + 3
	for i := 1; i <= appends; i++ {
		v := appendRecord(fmt.Appendf(nil, "entry %03d;", i))
		if i%(DeltaDepthMax+1) != 0 {
			wantDeltas = append(wantDeltas, v)
		}
	}
	// A shrinking truncate is a delta of its cut alone, the append after it
	// another, and one adding more than the page holds is whole.
	clock.Advance(time.Second)
	cur = cur[:len(cur)-100]
	snaps = append(snaps, snap{mustCommit(t, s, txn.Op{Key: "log", Kind: txn.OpTruncate, Size: uint64(len(cur))})[0].Version, slices.Clone(cur)})
	wantDeltas = append(wantDeltas, snaps[len(snaps)-1].version, appendRecord([]byte("after the cut;")))
	appendRecord(bytes.Repeat([]byte("x"), len(cur)+1))
	slices.Reverse(wantDeltas)

	r, err := s.Retained("log")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Pages[0]) != len(snaps) || !slices.Equal(r.Deltas[0], wantDeltas) {
		t.Fatalf("page 0: versions %v, deltas %v; want %d versions, deltas %v", r.Pages[0], r.Deltas[0], len(snaps), wantDeltas)
	}
	// A delta stores the offset and the added bytes, nothing else.
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: pagePrefix("log"), UpperBound: blobPagesEnd("log")})
	if err != nil {
		t.Fatal(err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		if _, v, delta, _ := decodePageKey(it.Key(), len(pagePrefix("log"))); delta && !slices.Contains([]int{4, 4 + len("entry 000;"), 4 + len("after the cut;")}, len(it.Value())) {
			t.Errorf("delta at version %d holds %d bytes", v, len(it.Value()))
		}
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	for _, sn := range snaps {
		if got := readAt(t, s, "log", sn.version, 0, len(sn.data)); !bytes.Equal(got, sn.data) {
			t.Fatalf("at version %d: %s", sn.version, diff(got, sn.data))
		}
	}
	if got := mustRead(t, s, "log", 0, uint64(len(cur))); !bytes.Equal(got, cur) {
		t.Fatalf("current: %s", diff(got, cur))
	}

	// Past retention the collector leaves the current version alone, and
	// an old version reads as gone, never as other bytes.
	clock.Advance(2 * retention)
	if _, err := s.CollectGarbage(); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Retained("log"); err != nil || len(r.Pages[0]) != 1 || len(r.Deltas[0]) != 0 {
		t.Fatalf("after collection: page 0 versions %v, deltas %v (%v); want the last whole version alone", r.Pages[0], r.Deltas[0], err)
	}
	if got := mustRead(t, s, "log", 0, uint64(len(cur))); !bytes.Equal(got, cur) {
		t.Fatalf("current after collection: %s", diff(got, cur))
	}
	if _, _, err := s.ReadAt("log", 0, 10, snaps[1].version); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("read at collected version %d: %v, want a conflict", snaps[1].version, err)
	}
}

// TestSmallChangesWriteDeltas checks that commits changing a few bytes of
// stored pages (writes inside a page, atomic ops, a shrink, an append and
// a time stamp in one commit, as a TýrFS create does to its directory)
// store deltas of about the bytes they change, and that every version
// reads back whole, seeded.
func TestSmallChangesWriteDeltas(t *testing.T) {
	seed := seedFromEnv(t)
	r := rand.New(rand.NewPCG(seed, 7))
	clock := newFakeClock()
	s := openStore(t, Options{MVCC: true, Retention: time.Hour, Linger: time.Hour, Now: clock.Now})
	cur := make([]byte, 2*PageBytes+PageBytes/2)
	for i := range cur {
		cur[i] = byte(r.IntN(256))
	}
	type snap struct {
		version uint64
		data    []byte
	}
	snaps := []snap{{mustCommit(t, s, txn.Op{Key: "b", Kind: txn.OpWrite, Data: cur, Create: true})[0].Version, slices.Clone(cur)}}
	var changed int // bytes the commits changed
	const commits = 200
	for range commits {
		clock.Advance(time.Second)
		var ops []txn.Op
		for range 1 + r.IntN(3) {
			switch k := r.IntN(10); {
			case k < 6: // a few bytes inside the blob
				n := 1 + r.IntN(32)
				off := r.IntN(len(cur) - n)
				data := make([]byte, n)
				for i := range data {
					data[i] = byte(r.IntN(256))
				}
				copy(cur[off:], data)
				changed += n
				ops = append(ops, txn.Op{Key: "b", Kind: txn.OpWrite, Offset: uint64(off), Data: data})
			case k < 8: // an atomic add
				off := r.IntN(len(cur) - 8)
				v := binary.LittleEndian.Uint64(cur[off:]) + 1
				binary.LittleEndian.PutUint64(cur[off:], v)
				changed += 8
				ops = append(ops, txn.Op{Key: "b", Kind: txn.OpAtomic, Offset: uint64(off), Width: 8, Func: txn.FuncAdd, Operand: 1})
			case k < 9 && len(cur) > 2*PageBytes+64: // a shrink inside the last page, maybe a write past the cut
				cur = cur[:len(cur)-1-r.IntN(32)]
				ops = append(ops, txn.Op{Key: "b", Kind: txn.OpTruncate, Size: uint64(len(cur))})
				if r.IntN(2) == 0 {
					off := len(cur) + 1 + r.IntN(16)
					cur = append(cur, make([]byte, off-len(cur))...)
					cur = append(cur, 'w')
					changed++
					ops = append(ops, txn.Op{Key: "b", Kind: txn.OpWrite, Offset: uint64(off), Data: []byte{'w'}})
				}
			default: // an append
				data := bytes.Repeat([]byte{byte(r.IntN(256))}, 1+r.IntN(32))
				if len(cur)+len(data) > 3*PageBytes {
					continue
				}
				cur = append(cur, data...)
				changed += len(data)
				ops = append(ops, txn.Op{Key: "b", Kind: txn.OpAppend, Data: data})
			}
		}
		if len(ops) == 0 {
			continue
		}
		snaps = append(snaps, snap{mustCommit(t, s, ops...)[0].Version, slices.Clone(cur)})
	}
	for _, sn := range snaps {
		if got := readAt(t, s, "b", sn.version, 0, len(sn.data)); !bytes.Equal(got, sn.data) {
			t.Fatalf("seed %d: at version %d: %s", seed, sn.version, diff(got, sn.data))
		}
	}
	// Every 17th version of a page is whole; the deltas between hold
	// about the changed bytes, a piece's header each.
	var whole, deltas, deltaBytes int
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: pagePrefix("b"), UpperBound: blobPagesEnd("b")})
	if err != nil {
		t.Fatal(err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		if _, _, delta, _ := decodePageKey(it.Key(), len(pagePrefix("b"))); delta {
			deltas++
			deltaBytes += len(it.Value())
		} else {
			whole++
		}
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if wholeMax := 3 + (3*commits+DeltaDepthMax)/(DeltaDepthMax+1); deltas == 0 || whole > wholeMax {
		t.Errorf("seed %d: %d whole page versions and %d deltas; want at most %d whole", seed, whole, deltas, wholeMax)
	}
	if max := changed + deltas*(4+3*2*pieceHeaderBytes); deltaBytes > max {
		t.Errorf("seed %d: deltas hold %d bytes for %d changed; want at most %d", seed, deltaBytes, changed, max)
	}

	// A page under PiecesPageBytesMin is written whole, but for an append.
	small := bytes.Repeat([]byte("s"), PiecesPageBytesMin-1)
	mustCommit(t, s, txn.Op{Key: "small", Kind: txn.OpWrite, Data: small, Create: true})
	clock.Advance(time.Second)
	mustCommit(t, s, txn.Op{Key: "small", Kind: txn.OpWrite, Offset: 8, Data: []byte("12345678")})
	clock.Advance(time.Second)
	mustCommit(t, s, txn.Op{Key: "small", Kind: txn.OpAppend, Data: []byte("tail")})
	if r, err := s.Retained("small"); err != nil || len(r.Pages[0]) != 3 || len(r.Deltas[0]) != 1 {
		t.Errorf("small page: versions %v, deltas %v (%v); want 3 versions, the append's alone a delta", r.Pages[0], r.Deltas[0], err)
	}
}

// TestApplyDeltaCorrupt checks that a delta whose pieces do not fit its
// page is reported as corruption, never applied.
func TestApplyDeltaCorrupt(t *testing.T) {
	piece := func(head uint32, lo, n uint32, data string) []byte {
		d := binary.BigEndian.AppendUint32(nil, head)
		d = binary.BigEndian.AppendUint32(d, lo)
		d = binary.BigEndian.AppendUint32(d, n)
		return append(d, data...)
	}
	good := piece(patchMark|10, 2, 3, "abc")
	if page, err := applyDelta([]byte("0123456789xyz"), good); err != nil || string(page) != "01abc56789" {
		t.Fatalf("applyDelta = %q, %v; want \"01abc56789\"", page, err)
	}
	for name, d := range map[string][]byte{
		"short":          {0, 1},
		"past the page":  piece(patchMark|10, 8, 3, "abc"),
		"bytes missing":  piece(patchMark|10, 2, 4, "abc"),
		"header cut":     good[:9],
		"page too long":  piece(patchMark|(PageBytes+1), 2, 3, "abc"),
		"cut past limit": binary.BigEndian.AppendUint32(nil, PageBytes),
	} {
		if name == "cut past limit" {
			d = append(d, 'x')
		}
		if _, err := applyDelta([]byte("0123456789"), d); !errors.Is(err, errs.ErrCorruption) {
			t.Errorf("%s: %v, want corruption", name, err)
		}
	}
}

// TestView reads blobs through a view, in key order and back: whole
// pages, deltas, holes, short reads, missing blobs and the payload limit
// as Read answers them when the view was taken, and nothing committed
// after.
func TestView(t *testing.T) {
	s := openStore(t, Options{MVCC: true, Retention: time.Hour})
	keys := []string{"a", "a/b", "b", "c", "d"}
	mustCommit(t, s, txn.Op{Key: "a", Kind: txn.OpWrite, Data: bytes.Repeat([]byte{1}, 2*PageBytes+7), Create: true},
		txn.Op{Key: "a/b", Kind: txn.OpCreate},
		txn.Op{Key: "c", Kind: txn.OpCreate},
		txn.Op{Key: "c", Kind: txn.OpTruncate, Size: 3 * PageBytes},
		txn.Op{Key: "d", Kind: txn.OpWrite, Data: []byte("0123456789"), Create: true})
	mustCommit(t, s, txn.Op{Key: "c", Kind: txn.OpWrite, Offset: PageBytes + 3, Data: []byte("hole")})
	for i := range 3 { // small writes into a page: stored as deltas
		mustCommit(t, s, txn.Op{Key: "a", Kind: txn.OpWrite, Offset: PageBytes + uint64(i)*100, Data: []byte("delta")})
	}
	type answer struct {
		data []byte
		info BlobInfo
		err  error
	}
	type read struct{ off, n uint64 }
	reads := []read{{0, limits.PayloadBytesMax}, {PageBytes - 2, 10}, {PageBytes + 100, 5}, {5, 0}, {1 << 40, 1}}
	want := map[string][]answer{}
	for _, k := range keys {
		for _, r := range reads {
			d, info, err := s.Read(k, r.off, r.n)
			want[k] = append(want[k], answer{bytes.Clone(d), info, err})
		}
	}
	v, err := s.NewView()
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	// Committed after the view was taken: the view reads none of it.
	mustCommit(t, s, txn.Op{Key: "a", Kind: txn.OpWrite, Data: []byte("new"), Offset: 0},
		txn.Op{Key: "b", Kind: txn.OpWrite, Data: []byte("b"), Create: true},
		txn.Op{Key: "d", Kind: txn.OpDelete})
	if got, _, err := s.Read("b", 0, 1); err != nil || string(got) != "b" {
		t.Fatalf("read of b after the view: %q, %v", got, err)
	}
	back := slices.Clone(keys)
	slices.Reverse(back)
	for _, order := range [][]string{keys, back} {
		for _, k := range order {
			for i, r := range reads {
				d, info, err := v.Read(k, r.off, r.n)
				w := want[k][i]
				if !bytes.Equal(d, w.data) || info != w.info || (err == nil) != (w.err == nil) || err != nil && err.Error() != w.err.Error() {
					t.Errorf("view read of %q at %d for %d: %d bytes, %+v, %v; want %d bytes, %+v, %v",
						k, r.off, r.n, len(d), info, err, len(w.data), w.info, w.err)
				}
			}
		}
	}
	if _, _, err := v.Read("a", 0, limits.PayloadBytesMax+1); !errors.Is(err, errs.ErrTooLarge) {
		t.Errorf("view read over the payload limit: %v", err)
	}
}
