package mvcc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/limits"
	"github.com/tyrstore/tyr/internal/txn"
)

// Placement says which parts of each blob a store keeps when a cluster
// spreads a blob's chunks over nodes. Nil (one node, tests) means the store
// keeps everything.
//
// A store keeps, for each blob it has any part of:
//
//   - the pages of the chunks it Holds;
//   - a record (size, version). On a version manager (Manages: a replica of
//     chunk 0, in every chain that changes the blob) the record is the
//     blob's; on any other node it is the record as of the last commit that
//     changed one of its chunks or moved the blob's end through one of
//     them, which is all a read of those chunks needs;
//   - the chunk versions: for each chunk, the version of the last commit
//     that wrote into it. A version manager keeps them for every chunk, so
//     together with its version history it knows the vector of chunk
//     versions of each blob version; a holder keeps those of its chunks.
type Placement interface {
	Manages(key string) bool
	Holds(key string, chunk uint64) bool
}

// Base is a blob as the first version manager in a chain found it before a
// commit. The members after it apply the commit to this record rather than
// their own (a holder's may be older), and check that they are in step: a
// version manager's record is at Version, and a holder's chunks that the
// commit writes are at the versions in Chunks, and no chunk it holds lies
// between its size and Size.
type Base struct {
	Version uint64 // 0: the blob does not exist
	Size    uint64
	// Chunks is the version of every chunk the commit changes (0: never
	// written since the blob was created; see changedChunks).
	Chunks map[uint64]uint64
	// InUse is the blob's versions in use on the version manager (see
	// uses.go), for the collectors of the members after it.
	InUse InUse
	// Ahead are the versions of the commits queued before this one on the
	// blob at the version manager (see order.go), which a member may have
	// applied already: its record or chunks may be at one of them instead
	// of at Version or Chunks.
	Ahead []uint64
}

// accepts reports whether a member's record at version have is in step
// with the Base (see inStep).
func (b Base) accepts(have uint64, strict bool) bool { return inStep(have, b.Version, b.Ahead, strict) }

// inStep reports whether a member's record or chunk at version have is in
// step with the version manager's, want: at want or, unless strict, at one
// of the versions queued ahead (see Step.Strict).
func inStep(have, want uint64, ahead []uint64, strict bool) bool {
	if strict {
		return have == want && len(ahead) == 0
	}
	return have == want || slices.Contains(ahead, have)
}

// ErrAheadUnseen is wrapped, with ErrLocked and errs.ErrConflict, by
// TryPrepareStep's refusal of a Base whose commits queued ahead on the
// version manager (Base.Ahead) are neither applied nor queued here: this
// store would apply the commit without them, on the state the version
// manager had before them. If one of them then commits without this store
// (it refuses it as ahead, and a re-execution leaves it out), the version
// manager applies both and ends at the same version as this store with
// other bytes, which catch-up, comparing versions, does not see. Tried
// again once they reached this store or were decided, the commit passes.
var ErrAheadUnseen = errors.New("commits queued ahead on the version manager have not reached this member")

// aheadSeen refuses a copy of key at version have (a record's, or a held
// chunk's) that would apply a commit without one of the versions queued
// ahead of it on the version manager: every one above have must be queued
// here ahead of the commit (queued).
func aheadSeen(key string, ahead []uint64, have uint64, queued []uint64) error {
	for _, v := range ahead {
		if v > have && !slices.Contains(queued, v) {
			return fmt.Errorf("%w: %w: %w: blob %q: version %d (at %d here)", errs.ErrConflict, ErrLocked, ErrAheadUnseen, key, v, have)
		}
	}
	return nil
}

// newest is the version the blob reaches on the version manager once the
// commits queued ahead are applied, if they all commit.
func (b Base) newest() uint64 {
	if n := len(b.Ahead); n > 0 {
		return max(b.Version, b.Ahead[n-1])
	}
	return b.Version
}

// Unmanaged returns a blob of ops that no member of a chain manages, as
// the chain's tail sees it: it was given no Base of the blob, where it
// knows every one the members before it gave, and does not manage the
// blob itself (manages). Every member passes such a blob by (Step.parts),
// so a commit the tail decided would change it nowhere; the tail refuses
// it instead, and the coordinator plans a chain anew. A chain gets so when
// a re-execution keeps, of a blob's holders as placed when the commit
// began, only members a ring change has since taken the blob from.
func Unmanaged(ops []txn.Op, bases map[string]Base, manages func(key string) bool) (string, bool) {
	for _, op := range ops {
		if _, given := bases[op.Key]; !given && !manages(op.Key) {
			return op.Key, true
		}
	}
	return "", false
}

// ErrNoBase would be the refusal of a member that does not manage a blob,
// got no Base for it and still has a part in it. Step.parts passes such
// a blob by, so it is an assertion: prepareLocked never sees one.
var ErrNoBase = errors.New("no version manager of the blob came first in the chain")

// ChunkMismatchError is a holder's refusal of a commit whose chunk it holds
// is not in step with the version manager's Base: this copy missed a
// commit. It wraps errs.ErrConflict.
type ChunkMismatchError struct {
	Key      string
	Chunk    uint64
	Have     uint64
	Want     uint64
	SizeHere uint64 // this store's record size (extent mismatch)
	SizeWant uint64
	Extent   bool // the mismatch is in where the blob ends, not in a chunk's version
}

func (e *ChunkMismatchError) Error() string {
	if e.Extent {
		return fmt.Sprintf("%v: blob %q ends at %d here and at %d on its version manager, across chunk %d held here",
			errs.ErrConflict, e.Key, e.SizeHere, e.SizeWant, e.Chunk)
	}
	return fmt.Sprintf("%v: chunk %d of blob %q is at version %d here and at version %d on its version manager",
		errs.ErrConflict, e.Chunk, e.Key, e.Have, e.Want)
}

func (e *ChunkMismatchError) Unwrap() error { return errs.ErrConflict }

// 'c' key 0x00 chunk(8) -> version(8): the chunk versions (see Placement).
const prefixChunk = 'c'

func chunkPrefix(key string) []byte {
	k := make([]byte, 0, 2+len(key)+8)
	k = append(k, prefixChunk)
	k = append(k, key...)
	return append(k, 0)
}

func chunkKey(key string, chunk uint64) []byte {
	return binary.BigEndian.AppendUint64(chunkPrefix(key), chunk)
}

func chunksEnd(key string) []byte {
	k := chunkPrefix(key)
	k[len(k)-1] = 1
	return k
}

func getChunkVersion(r pebble.Reader, key string, chunk uint64) (uint64, error) {
	return getUint64(r, chunkKey(key, chunk), "chunk version", key)
}

// getUint64 reads an 8-byte value (0 if absent): what, of blob key.
func getUint64(r pebble.Reader, k []byte, what, key string) (uint64, error) {
	v, closer, err := r.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: %s of %d bytes for blob %q", errs.ErrCorruption, what, len(v), key)
	}
	return binary.BigEndian.Uint64(v), nil
}

// ChunkVersion returns the version this store keeps of chunk c of key (0:
// none; see Placement).
func (s *Store) ChunkVersion(key string, c uint64) (uint64, error) {
	return getChunkVersion(s.db, key, c)
}

// ChunkBytes is the store's chunk size.
func (s *Store) ChunkBytes() uint64 { return s.chunkBytes }

// written returns the chunks the commit writes into, sorted.
func (w *blobWork) written() []uint64 {
	set := map[uint64]bool{}
	for idx := range w.dirty {
		set[idx*w.pageBytes/w.chunkBytes] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// changedChunks returns the chunks whose bytes the commit changes, sorted:
// those it writes into, and the one a shrinking truncate cuts into. The
// cut chunk counts whether or not this store holds its bytes (a truncate
// rewrites the tail page only where the page has bytes past the cut), so
// every member of a chain finds the same set.
func (w *blobWork) changedChunks() []uint64 {
	out := w.written()
	if c := w.low / w.chunkBytes; w.low < w.start && w.low%w.chunkBytes != 0 && !slices.Contains(out, c) {
		out = append(out, c)
		slices.Sort(out)
	}
	return out
}

// keepsChangeScanMax bounds the chunks keepsChange looks at in a moved
// end; past it, it answers yes.
const keepsChangeScanMax = 1 << 16

// keepsChange reports whether this store, not a version manager of the
// blob, holds a chunk whose bytes or extent the commit changes. A member
// given the blob's Base that holds none (it is in the chain for another
// blob) writes nothing of it: it would keep a record of a blob it holds
// no part of, which no later commit need reach.
func (w *blobWork) keepsChange() bool {
	t := w.touched()
	for _, c := range t.Written {
		if w.holds(c) {
			return true
		}
	}
	for c, n := t.Lo/w.chunkBytes, 0; c*w.chunkBytes < t.Hi; c, n = c+1, n+1 {
		if n == keepsChangeScanMax || w.holds(c) {
			return true
		}
	}
	return false
}

// adopt makes the version manager's record the one the commit applies to.
func (w *blobWork) adopt(b Base, now int64) {
	w.exists = b.Version != 0
	w.meta.Size = 0
	if w.exists {
		w.meta.Size = b.Size
		if !w.baseExists {
			w.meta.Created = now
		}
	}
}

// base is what this version manager hands the members after it.
func (w *blobWork) base(snap pebble.Reader) (Base, error) {
	b := Base{Version: w.version(), Chunks: map[uint64]uint64{}}
	if w.baseExists {
		b.Size = w.baseMeta.Size
	}
	for _, c := range w.changedChunks() {
		v, err := getChunkVersion(snap, w.key, c)
		if err != nil {
			return Base{}, err
		}
		if v != 0 {
			b.Chunks[c] = v
		}
	}
	return b, nil
}

// checkHeld compares this holder's chunks with the version manager's Base:
// the chunks the commit writes, and where the blob ends.
func (w *blobWork) checkHeld(snap pebble.Reader, b Base, strict bool, queued []uint64) error {
	for _, c := range w.changedChunks() {
		if !w.holds(c) {
			continue
		}
		have, err := getChunkVersion(snap, w.key, c)
		if err != nil {
			return err
		}
		if want := b.Chunks[c]; !inStep(have, want, b.Ahead, strict) {
			return &ChunkMismatchError{Key: w.key, Chunk: c, Have: have, Want: want}
		}
		if err := aheadSeen(w.key, b.Ahead, have, queued); err != nil {
			return err
		}
	}
	here := uint64(0)
	if w.baseExists {
		here = w.baseMeta.Size
	}
	want := uint64(0)
	if b.Version != 0 {
		want = b.Size
	}
	if c, ok := w.heldBetween(here, want); ok {
		return &ChunkMismatchError{Key: w.key, Chunk: c, SizeHere: here, SizeWant: want, Extent: true}
	}
	return nil
}

// heldBetween returns a held chunk whose readable part differs between a
// blob ending at a and one ending at b, if there is one.
func (w *blobWork) heldBetween(a, b uint64) (uint64, bool) {
	if a == b {
		return 0, false
	}
	lo, hi := min(a, b), max(a, b)
	for c := lo / w.chunkBytes; c*w.chunkBytes < hi; c++ {
		if w.holds(c) {
			return c, true
		}
	}
	return 0, false
}

// ReadChunks returns up to length bytes of key from offset as of version
// (0: the newest this store holds) for a blob of the given size: what a
// version manager asks of a chunk's holder in a read that spans chunks or
// names a version. Holes read as zeros; bytes past size are not returned.
// The caller knows the range is within one chunk this store holds. A read
// at a version whose pages this store may no longer hold is refused (see
// checkPinned). If expect
// is not 0, the chunk's version here must be expect (MVCC off) or not
// older (MVCC on: the store keeps the pages as of version), or the read is
// refused: a catch-up copy must come from a holder in step.
func (s *Store) ReadChunks(key string, offset, length, version, size, expect uint64) ([]byte, error) {
	if length > limits.PayloadBytesMax {
		return nil, fmt.Errorf("%w: read of %d bytes, above the per-request limit of %d",
			errs.ErrTooLarge, length, limits.PayloadBytesMax)
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()
	s.syncing.await(key)
	if offset < size && length > 0 {
		if err := s.checkPinned(snap, key, version, offset/s.pageBytes, (min(size, offset+length)+s.pageBytes-1)/s.pageBytes); err != nil {
			return nil, err
		}
	}
	if expect != 0 {
		c := offset / s.chunkBytes
		have, err := getChunkVersion(snap, key, c)
		if err != nil {
			return nil, err
		}
		if have < expect || (have != expect && !s.opts.MVCC) {
			return nil, &ChunkMismatchError{Key: key, Chunk: c, Have: have, Want: expect}
		}
	}
	if offset >= size || length == 0 {
		return []byte{}, nil
	}
	if version == 0 {
		version = ^uint64(0) >> 1
	}
	buf := make([]byte, min(size, offset+length)-offset)
	it, err := newPageIter(snap, key)
	if err != nil {
		return nil, err
	}
	defer it.Close()
	if err := readRange(it, key, version, offset, s.pageBytes, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// equalHeld compares the bytes at off that lie in chunks this store holds;
// the holders of the other chunks compare theirs, and any of them refusing
// aborts the commit.
func (w *blobWork) equalHeld(off uint64, cur, want []byte) bool {
	for i := uint64(0); i < uint64(len(cur)); {
		c := (off + i) / w.chunkBytes
		end := min(uint64(len(cur)), (c+1)*w.chunkBytes-off)
		if w.holds(c) && !bytes.Equal(cur[i:end], want[i:end]) {
			return false
		}
		i = end
	}
	return true
}

// Touched is what a commit changes in a blob: the chunks it writes into,
// and the range [Lo, Hi) of offsets where the blob's end moved (a chunk in
// it changes where its readable part ends, or loses pages).
type Touched struct {
	Written []uint64
	Lo, Hi  uint64
}

func (w *blobWork) touched() Touched {
	end := uint64(0)
	if w.exists {
		end = w.meta.Size
	}
	t := Touched{Written: w.written(), Lo: min(w.low, end), Hi: max(w.start, end)}
	if t.Lo == t.Hi {
		t.Lo, t.Hi = 0, 0
	}
	return t
}

// Sizes returns each blob's size before the commit, as the chain's version
// managers know it (0: absent): what a coordinator plans a chain from.
func (p *Pending) Sizes() map[string]uint64 {
	out := make(map[string]uint64, len(p.bases))
	for key, b := range p.bases {
		out[key] = 0
		if b.Version != 0 {
			out[key] = b.Size
		}
	}
	return out
}

// Pin returns blob key's record as of version (0: the latest) once no
// commit of it is in progress on this store, for a version manager serving
// a read from the chunks' holders: every holder committed that version
// before this store did. With MVCC on, holders keep the pages of that
// version, and release does nothing; with MVCC off they keep only the
// newest, so Pin holds the blob's lock until release and no commit of the
// blob can pass this store meanwhile: such reads and commits of one blob
// wait for each other.
//
// With use, Pin also counts a running transaction's use of the version (see
// uses.go), under the blob's lock, so no commit of the blob is between the
// two.
func (s *Store) Pin(key string, version uint64, use bool) (BlobInfo, func(), error) {
	keys := []string{key}
	s.locks.lock(keys)
	release := func() { s.locks.unlock(keys) }
	snap := s.db.NewSnapshot()
	defer snap.Close()
	m, ok, err := getMeta(snap, key)
	s.syncing.await(key)
	if err == nil && !ok && version == 0 {
		err = fmt.Errorf("blob %q: %w", key, errs.ErrNotFound)
	}
	if err == nil && version != 0 && (!ok || m.Version != version) {
		m, err = s.historyAt(snap, key, version, ok, m)
	}
	if err != nil {
		release()
		return BlobInfo{}, func() {}, err
	}
	if use {
		s.Use(key, m.Version)
	}
	if s.opts.MVCC {
		release()
		release = func() {}
	}
	return m.info(key), release, nil
}

// Settle returns once no commit of blob key that was in progress on this
// store when it was called is still in progress (staged, not yet committed
// or aborted).
func (s *Store) Settle(key string) {
	keys := []string{key}
	s.locks.lock(keys)
	s.locks.unlock(keys)
}

// checkPinned refuses, with errs.ErrConflict, a read at version (0: the
// newest, always served) of pages [lo, hi) of key that this store may no
// longer hold as they were at that version: the version is older than the
// store's floor (see Refresh), the blob was deleted here since, a later
// commit dropped one of those pages (a shrinking truncate: the history
// records of the commits since version carry their cuts), or those records
// are gone (retention passed).
func (s *Store) checkPinned(r pebble.Reader, key string, version, lo, hi uint64) error {
	if version == 0 {
		return nil
	}
	if err := checkFloor(r, key, version); err != nil {
		return err
	}
	gone := func(why string) error {
		return fmt.Errorf("%w: blob %q: version %d no longer retained here: %s", errs.ErrConflict, key, version, why)
	}
	m, ok, err := getMeta(r, key)
	switch {
	case err != nil:
		return err
	case !ok:
		return gone("the blob was deleted since")
	case m.Version <= version:
		return nil
	case !s.opts.MVCC:
		return gone("the keyspace keeps no old versions (MVCC off)")
	}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: historyPrefix(key), UpperBound: historyEnd(key)})
	if err != nil {
		return fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
	}
	defer it.Close()
	// Newest first: each record was superseded by the commit at sup.
	sup := m.Version
	for valid := it.First(); valid && sup > version; valid = it.Next() {
		value, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		rec, err := decodeHistory(value)
		if err != nil {
			return fmt.Errorf("blob %q: %w", key, err)
		}
		if rec.Cut < hi {
			return gone("a later truncate dropped its pages")
		}
		sup = rec.Meta.Version
	}
	if err := it.Error(); err != nil {
		return err
	}
	if sup > version {
		return gone("its retention passed")
	}
	return nil
}
