package mvcc

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/limits"
	"github.com/tyrstore/tyr/internal/txn"
)

// noCut means no stored page of the blob is dropped by the commit.
const noCut = math.MaxUint64

// blobWork is the state of one blob while a commit is being prepared: the
// stored state it started from plus the ops applied so far.
//
// Invariants: no dirty page holds a byte at or past meta.Size; every dirty
// page index is below cutPage; when !exists, dirty is empty and cutPage is 0.
type blobWork struct {
	key  string
	snap *pebble.Snapshot // the commit's point in time
	it   *pebble.Iterator // the blob's pages in snap; opened on first use
	// baseMeta is the stored record the commit builds on (zero when the blob
	// did not exist): no stored page starts at or past baseMeta.Size, and
	// pages are read as of baseMeta.Version.
	baseMeta   blobMeta
	baseExists bool
	exists     bool
	meta       blobMeta
	changed    bool
	// cutPage: stored pages at or past this index are dropped by the commit
	// (shrinking truncate, delete).
	cutPage uint64
	dirty   map[uint64][]byte
	// stored describes the stored pages the commit read, by index (nil
	// until it reads one). A dirty page changed in few of its bytes is
	// written as a delta (keys.go).
	stored map[uint64]*storedPage
	// pageBytes is the store's page size; chunkBytes its chunk size.
	pageBytes, chunkBytes uint64
	// holds reports whether this store keeps chunk c of the blob (see
	// Placement).
	holds func(c uint64) bool
	// start is the size the commit starts from, low the smallest size it
	// passed through (a truncate or delete drops the pages past it);
	// existed is whether the blob existed when the commit started.
	start, low uint64
	existed    bool
}

// version is the blob's version before the commit, 0 if it was absent.
func (w *blobWork) version() uint64 {
	if !w.baseExists {
		return 0
	}
	return w.baseMeta.Version
}

func (s *Store) loadBlob(snap *pebble.Snapshot, key string) (*blobWork, error) {
	m, ok, err := getMeta(snap, key)
	if err != nil {
		return nil, err
	}
	return &blobWork{key: key, snap: snap, baseMeta: m, baseExists: ok, exists: ok, meta: m,
		cutPage: noCut, dirty: map[uint64][]byte{}, pageBytes: s.pageBytes, chunkBytes: s.chunkBytes,
		holds: func(uint64) bool { return true }}, nil
}

// close releases the page iterator, if one was opened.
func (w *blobWork) close() {
	if w.it != nil {
		_ = w.it.Close()
	}
}

func (w *blobWork) apply(op txn.Op, now int64) (txn.Result, error) {
	if !w.exists && op.Kind != txn.OpCreate && !((op.Kind == txn.OpWrite || op.Kind == txn.OpAppend) && op.Create) {
		return txn.Result{}, errs.ErrNotFound
	}
	if !w.exists {
		w.exists = true
		w.meta = blobMeta{Version: w.meta.Version, Created: now}
	} else if op.Kind == txn.OpCreate {
		return txn.Result{}, errs.ErrExists
	}
	w.changed = true
	w.meta.Modified = now
	switch op.Kind {
	case txn.OpCreate:
		return txn.Result{}, nil
	case txn.OpWrite:
		return txn.Result{Offset: op.Offset}, w.writeAt(op.Offset, op.Data)
	case txn.OpAppend:
		offset := w.meta.Size
		if uint64(len(op.Data)) > limits.BlobBytesMax-offset {
			return txn.Result{}, fmt.Errorf("%w: append of %d bytes at %d ends past the blob size limit of %d",
				errs.ErrOutOfRange, len(op.Data), offset, limits.BlobBytesMax)
		}
		return txn.Result{Offset: offset}, w.writeAt(offset, op.Data)
	case txn.OpTruncate:
		return txn.Result{}, w.truncate(op.Size)
	case txn.OpAtomic:
		if a, b := op.Offset/w.chunkBytes, (op.Offset+uint64(op.Width)-1)/w.chunkBytes; a != b && w.holds(a) != w.holds(b) {
			return txn.Result{}, fmt.Errorf("%w: atomic op on %d bytes at offset %d spans chunks %d and %d (chunk size %d), which are on different nodes",
				errs.ErrInvalidArgument, op.Width, op.Offset, a, b, w.chunkBytes)
		}
		var cur [8]byte
		if err := w.readAt(op.Offset, cur[:op.Width]); err != nil {
			return txn.Result{}, err
		}
		v := op.Func.Apply(op.Width, binary.LittleEndian.Uint64(cur[:]), op.Operand)
		binary.LittleEndian.PutUint64(cur[:], v)
		// Only a holder of the chunk knows the value; the chain takes it
		// from one (txn.MergeResults).
		unheld := !w.holds(op.Offset / w.chunkBytes)
		return txn.Result{Offset: op.Offset, Value: v, Unheld: unheld}, w.writeAt(op.Offset, cur[:op.Width])
	case txn.OpCompareAndSwap:
		cur := make([]byte, len(op.Expected))
		if err := w.readAt(op.Offset, cur); err != nil {
			return txn.Result{}, err
		}
		if !w.equalHeld(op.Offset, cur, op.Expected) {
			return txn.Result{}, fmt.Errorf("%w: compare-and-swap at offset %d: the current %d bytes differ from the expected ones",
				errs.ErrConflict, op.Offset, len(cur))
		}
		return txn.Result{Offset: op.Offset}, w.writeAt(op.Offset, op.Data)
	case txn.OpDelete:
		w.low = 0
		w.exists = false
		w.meta.Size = 0
		w.cutPage = 0
		clear(w.dirty)
		return txn.Result{}, nil
	}
	return txn.Result{}, fmt.Errorf("%w: op kind %d", errs.ErrInvalidArgument, op.Kind)
}

// page returns the current content of a page for modification: the dirty
// copy, or a copy of the stored page, or nil for a page that holds nothing.
func (w *blobWork) page(idx uint64) ([]byte, error) {
	if buf, ok := w.dirty[idx]; ok {
		return buf, nil
	}
	if idx >= w.cutPage {
		return nil, nil
	}
	if w.it == nil {
		it, err := newPageIter(w.snap, w.key)
		if err != nil {
			return nil, err
		}
		w.it = it
	}
	data, _, depth, ok, err := readPage(w.it, w.key, idx, w.baseMeta.Version)
	if err != nil || !ok {
		return nil, err
	}
	if w.stored == nil {
		w.stored = map[uint64]*storedPage{}
	}
	n := uint64(len(data))
	w.stored[idx] = &storedPage{bytes: n, depth: depth}
	if depth > 0 {
		return data, nil // built for this call, with room to grow
	}
	return slices.Clone(data), nil
}

// storedPage is what a commit read of a stored page: its bytes, how many
// deltas its version stacks on a whole page, and the bytes the commit
// changed in it, sorted and disjoint (they may run past the page's end).
type storedPage struct {
	bytes   uint64
	depth   int
	changed []span
}

// change notes that the commit changes bytes [lo, hi) of page idx; only a
// stored page it read can become a delta, so only those keep them.
func (w *blobWork) change(idx, lo, hi uint64) {
	st, ok := w.stored[idx]
	if !ok {
		return
	}
	// Merge with every span [lo, hi) overlaps or touches.
	i := 0
	for i < len(st.changed) && st.changed[i].hi < lo {
		i++
	}
	j := i
	for j < len(st.changed) && st.changed[j].lo <= hi {
		lo, hi = min(lo, st.changed[j].lo), max(hi, st.changed[j].hi)
		j++
	}
	st.changed = slices.Replace(st.changed, i, j, span{lo, hi})
}

// delta returns dirty page idx as a delta of the stored version the commit
// read, if it may be written as one: the page is not dropped, its chain of
// deltas is shorter than DeltaDepthMax, and the delta is smaller than the
// stored page. A change that runs to the page's end is written as a cut
// (encodeDelta), any other as pieces (encodePatch), of a stored page of
// PiecesPageBytesMin or more; pieces closer than a piece's header are
// written as one.
func (w *blobWork) delta(idx uint64) ([]byte, bool) {
	st, ok := w.stored[idx]
	if !ok || idx >= w.cutPage || st.depth >= DeltaDepthMax {
		return nil, false
	}
	page := w.dirty[idx]
	end := uint64(len(page))
	var spans []span
	for _, c := range st.changed {
		// A truncate marks the bytes past its size changed: past the
		// page's end they are gone, which its length says.
		c.hi = min(c.hi, end)
		switch {
		case c.lo >= c.hi:
		case len(spans) > 0 && c.lo <= spans[len(spans)-1].hi+pieceHeaderBytes:
			spans[len(spans)-1].hi = c.hi
		default:
			spans = append(spans, c)
		}
	}
	// The bytes no span covers are the base's, or zeros past its end.
	var d []byte
	switch {
	case len(spans) == 0: // a shrink alone
		d = encodeDelta(end, nil)
	case len(spans) == 1 && spans[0].hi == end:
		d = encodeDelta(spans[0].lo, page[spans[0].lo:])
	case st.bytes < PiecesPageBytesMin:
		return nil, false
	default:
		d = encodePatch(page, spans)
	}
	if uint64(len(d)-4) >= st.bytes {
		return nil, false
	}
	return d, true
}

// readAt fills buf with the blob's current bytes (as of the ops applied so
// far) at offset; bytes past the end read as zeros.
func (w *blobWork) readAt(offset uint64, buf []byte) error {
	clear(buf)
	end := min(offset+uint64(len(buf)), w.meta.Size)
	for idx := offset / w.pageBytes; idx*w.pageBytes < end; idx++ {
		data, err := w.page(idx)
		if err != nil {
			return err
		}
		pageStart := idx * w.pageBytes
		lo := max(offset, pageStart)
		hi := min(end, pageStart+uint64(len(data)))
		if lo < hi {
			copy(buf[lo-offset:hi-offset], data[lo-pageStart:hi-pageStart])
		}
	}
	return nil
}

// writeAt writes data at offset. As with POSIX pwrite, an empty write
// changes nothing, wherever it points.
func (w *blobWork) writeAt(offset uint64, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	end := offset + uint64(len(data))
	for idx := offset / w.pageBytes; idx*w.pageBytes < end; idx++ {
		pageStart := idx * w.pageBytes
		lo, hi := max(offset, pageStart)-pageStart, min(end, pageStart+w.pageBytes)-pageStart
		// The old content matters only where this write leaves bytes of it
		// standing: before lo, or after hi up to the blob's current end.
		var buf []byte
		if lo > 0 || hi < min(w.pageBytes, w.meta.Size-min(w.meta.Size, pageStart)) {
			old, err := w.page(idx)
			if err != nil {
				return err
			}
			buf = old
		}
		if uint64(len(buf)) < hi {
			buf = append(buf, make([]byte, hi-uint64(len(buf)))...)
		}
		copy(buf[lo:hi], data[pageStart+lo-offset:pageStart+hi-offset])
		w.dirty[idx] = buf
		w.change(idx, lo, hi)
	}
	w.meta.Size = max(w.meta.Size, end)
	return nil
}

func (w *blobWork) truncate(size uint64) error {
	w.low = min(w.low, size)
	if size >= w.meta.Size {
		w.meta.Size = size
		return nil
	}
	cut := (size + w.pageBytes - 1) / w.pageBytes
	for idx := range w.dirty {
		if idx >= cut {
			delete(w.dirty, idx)
		}
	}
	if tail := size % w.pageBytes; tail != 0 {
		idx := size / w.pageBytes
		buf, err := w.page(idx)
		if err != nil {
			return err
		}
		if uint64(len(buf)) > tail {
			w.dirty[idx] = buf[:tail]
			w.change(idx, tail, w.pageBytes)
		}
	}
	w.cutPage = min(w.cutPage, cut)
	w.meta.Size = size
	return nil
}

// pointDeletesMax is the most keys deleteSpan deletes one by one.
const pointDeletesMax = 32

// deleteSpan deletes the keys in [start, end) as snap holds them: key by key
// (sized deletions) when there are at most pointDeletesMax, else with one
// range deletion. Deleting a small blob, the common case, thus leaves no
// range deletion: every iterator over a memtable holding range deletions
// fragments them, and compactions load statistics for each, so a burst of
// small deletes would slow the reads and commits after it. Sound because
// the commit holds the blob's lock from before snap was taken: no key
// appears in the span meanwhile.
func deleteSpan(batch *pebble.Batch, snap *pebble.Snapshot, start, end []byte) error {
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: end})
	if err != nil {
		return err
	}
	type sized struct {
		key  []byte
		size uint32
	}
	var keys []sized
	for ok := it.First(); ok && len(keys) <= pointDeletesMax; ok = it.Next() {
		lv := it.LazyValue()
		keys = append(keys, sized{slices.Clone(it.Key()), uint32(lv.Len())})
	}
	err = it.Error()
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if len(keys) > pointDeletesMax {
		return batch.DeleteRange(start, end, nil)
	}
	for _, k := range keys {
		if err := batch.DeleteSized(k.key, k.size, nil); err != nil {
			return err
		}
	}
	return nil
}

// emit adds the blob's changes to batch: dropped page ranges first, then new
// page versions (later entries of a batch win over its range deletions), then
// the blob record. With MVCC on, each page version it supersedes is queued
// for the collector.
func (s *Store) emit(batch *pebble.Batch, w *blobWork, now int64, manages bool) error {
	if !w.changed || !manages && !w.keepsChange() {
		return nil
	}
	if !w.exists {
		if err := deleteSpan(batch, w.snap, chunkPrefix(w.key), chunksEnd(w.key)); err != nil {
			return err
		}
	} else {
		var v [8]byte
		binary.BigEndian.PutUint64(v[:], w.meta.Version)
		if w.low < w.start {
			// A shrinking truncate: the chunks past the cut lose their
			// versions with their pages.
			if err := deleteSpan(batch, w.snap, chunkKey(w.key, (w.low+w.chunkBytes-1)/w.chunkBytes), chunksEnd(w.key)); err != nil {
				return err
			}
		}
		for _, c := range w.changedChunks() {
			if manages || w.holds(c) {
				if err := batch.Set(chunkKey(w.key, c), v[:], nil); err != nil {
					return err
				}
			}
		}
	}
	if w.cutPage != noCut {
		if err := deleteSpan(batch, w.snap, pageKeyVersionless(w.key, w.cutPage), blobPagesEnd(w.key)); err != nil {
			return err
		}
		if cut := w.cutPage * w.pageBytes; cut < w.baseMeta.Size {
			if err := markReclaim(batch, w.key, w.baseMeta.Size-cut, time.Unix(0, now)); err != nil {
				return err
			}
		}
	}
	deadline := time.Unix(0, now).Add(s.opts.Retention)
	if !w.exists {
		// Raised when prepared: an abort leaves the floor higher than
		// needed, never lower.
		s.raiseRemoved(w.meta.Version)
		if err := deleteSpan(batch, w.snap, historyPrefix(w.key), historyEnd(w.key)); err != nil {
			return err
		}
		if err := batch.Delete(floorKey(w.key), nil); err != nil {
			return err
		}
		return batch.Delete(metaKey(w.key), nil)
	}
	if s.opts.MVCC && w.baseExists {
		hkey := historyKey(w.key, w.baseMeta.Version)
		rec := historyRecord{Meta: w.baseMeta, Cut: w.cutPage}
		if err := batch.Set(hkey, rec.encode(), nil); err != nil {
			return err
		}
		if err := batch.Set(histGCKey(deadline, hkey), nil, nil); err != nil {
			return err
		}
	}
	pages := make([]uint64, 0, len(w.dirty))
	for idx := range w.dirty {
		pages = append(pages, idx)
	}
	slices.Sort(pages)
	for _, idx := range pages {
		if !w.holds(idx * w.pageBytes / w.chunkBytes) {
			continue
		}
		version := uint64(0)
		if s.opts.MVCC {
			version = w.meta.Version
			if d, ok := w.delta(idx); ok {
				if err := batch.Set(deltaKey(w.key, idx, version), d, nil); err != nil {
					return err
				}
				continue
			}
			if err := s.queueSuperseded(batch, w, idx, deadline); err != nil {
				return err
			}
		}
		if err := batch.Set(pageKey(w.key, idx, version), w.dirty[idx], nil); err != nil {
			return err
		}
	}
	return batch.Set(metaKey(w.key), w.meta.encode(), nil)
}

// emitBytes is about what emit adds to a batch for w: the pages it holds
// and, for each, a few records of about the key's length. A batch sized by
// it up front is allocated once instead of grown by doubling, which for a
// commit of megabytes would hold up to twice its data.
func (w *blobWork) emitBytes() int {
	const recordOverhead = 64 // key suffix, version, value and record lengths
	n := 4 * (len(w.key) + recordOverhead)
	for idx, p := range w.dirty {
		if w.holds(idx * w.pageBytes / w.chunkBytes) {
			n += len(p) + 3*(len(w.key)+recordOverhead)
		}
	}
	return n
}

// queueSuperseded records that the page's versions older than the one this
// commit writes may be collected after Options.Linger, or, if a transaction
// uses one, after deadline at the latest (see uses.go). It needs no read: a
// page that may have stored versions is one below the stored size and not
// dropped by the commit.
func (s *Store) queueSuperseded(batch *pebble.Batch, w *blobWork, idx uint64, deadline time.Time) error {
	if idx >= w.cutPage || idx*w.pageBytes >= w.baseMeta.Size {
		return nil // nothing stored, or the range deletion takes it all
	}
	due := deadline.Add(s.opts.Linger - s.opts.Retention)
	return batch.Set(garbageKey(due, pageKey(w.key, idx, w.meta.Version)), garbageValue(deadline), nil)
}

// lockTable holds one mutex per blob key in use. Keys are always locked in
// sorted order, so two commits never wait on each other in a cycle. A key's
// mutex is held by one commit alone, or by a queue of commits that each only
// apply atomic ops to the key (see order.go).
type lockTable struct {
	mu    sync.Mutex
	locks map[string]*keyLock // guarded by mu
}

type keyLock struct {
	mu   sync.Mutex
	refs int // guarded by lockTable.mu
	// queue lists, in version order, the commits that hold mu together;
	// nil while mu is free or held by one holder alone. Guarded by
	// lockTable.mu.
	queue []*ticket
	// waiting counts the lockers blocked on mu. While any waits, no commit
	// joins queue, so it drains and the waiter gets its turn. Guarded by
	// lockTable.mu.
	waiting int
	// readers counts the commits that hold mu together because each only
	// read-checks the key (see order.go); 0 when mu is free or held
	// otherwise. Guarded by lockTable.mu.
	readers int
	// wanted is set when a commit was refused because of the queue or the
	// readers it could not join: no other joins until they drain, so the
	// refused commit finds the key free when its coordinator tries again.
	// Guarded by lockTable.mu.
	wanted bool
}

// entry returns key's lock, made if need be, with its reference taken. The
// caller holds t.mu.
func (t *lockTable) entry(key string) *keyLock {
	if t.locks == nil {
		t.locks = map[string]*keyLock{}
	}
	l := t.locks[key]
	if l == nil {
		l = &keyLock{}
		t.locks[key] = l
	}
	l.refs++
	return l
}

func (t *lockTable) lock(sortedKeys []string) {
	for _, key := range sortedKeys {
		t.mu.Lock()
		l := t.entry(key)
		l.waiting++
		t.mu.Unlock()
		l.mu.Lock()
		t.mu.Lock()
		l.waiting--
		t.mu.Unlock()
	}
}

func (t *lockTable) unlock(sortedKeys []string) { t.release(sortedKeys, nil) }

// release gives up what tk (nil: a holder outside any queue) holds of
// sortedKeys: its place in a key's queue, and the key's mutex when it held
// it alone or was the last in the queue.
func (t *lockTable) release(sortedKeys []string, tk *ticket) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, key := range sortedKeys {
		t.releaseLocked(key, tk)
	}
}

func (t *lockTable) releaseLocked(key string, tk *ticket) {
	l := t.locks[key]
	if tk != nil && slices.Contains(tk.reads, key) {
		l.readers--
		if l.readers == 0 {
			l.wanted = false
			l.mu.Unlock()
		}
	} else if i := slices.Index(l.queue, tk); tk != nil && i >= 0 {
		l.queue = slices.Delete(l.queue, i, i+1)
		if len(l.queue) == 0 {
			l.queue, l.wanted = nil, false
			l.mu.Unlock()
		}
	} else {
		l.mu.Unlock()
	}
	l.refs--
	if l.refs == 0 {
		delete(t.locks, key)
	}
}
