package mvcc

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/limits"
)

// Catch-up chunk by chunk: a replica that may have missed commits makes its
// copy of a blob match an up-to-date version manager's (the protocol around
// it is in internal/node/catchup.go). What must match is what the store
// keeps (see Placement): the record, the chunk versions, and the pages of
// the chunks it holds. A chunk's version changes with every commit that
// changes its bytes (a write into it, a shrinking truncate that cuts it,
// see Store.emit), so two copies of a chunk at one version are the same
// bytes, and only the chunks whose versions differ are copied.
//
// A copied chunk's older page versions are dropped: the store never had
// some of the commits between them. The blob's floor ('f' key) is then the
// copy's version, and reads of the blob at older versions are refused
// (ReadChunks; ReadAt finds no history record before it).

// Record is a blob as one store keeps it.
type Record struct {
	Exists            bool
	Version, Size     uint64
	Created, Modified int64 // unix nanoseconds
	// Chunks are the chunk versions the store keeps (absent: 0).
	Chunks map[uint64]uint64
}

// Copy is a blob as a catch-up source has it: the record and chunk
// versions the store is to keep (every chunk's on a version manager, its
// own chunks' on another holder), and the held chunks whose bytes it
// replaces, sorted.
type Copy struct {
	Record
	Replace []uint64
}

// ErrCopyBehind is a Source's answer when its copy of the blob is older
// than the version the refresh needs (a commit that passed through this
// member): the refresh may try another source, or this one later.
var ErrCopyBehind = errors.New("the source's copy is before the version needed")

// StaleCopyCounts reports whether a refresh takes the copy (remote) of a
// source that is not up to date (a replica catching up, or one a ring
// change keeps apart, see node.Placement.sourceReplicas) over this store's
// (local). Only a newer copy counts: one that exists, and is at a later
// version than local's or, local absent, at least at want, the version of
// a commit this store knows it missed (0: none). An absent copy carries no
// version (a delete drops the record), so it never counts, and neither
// does any copy over an absent local one without want: the source may
// hold the blob from before a delete this store applied.
func StaleCopyCounts(local, remote Record, want uint64) bool {
	switch {
	case !remote.Exists:
		return false
	case local.Exists:
		return remote.Version > local.Version
	default:
		return want != 0 && remote.Version >= want
	}
}

// Source is where Refresh copies a blob from.
type Source interface {
	// Copy returns the blob as the source has it, given this store's
	// record. Returning the local record with nothing to replace changes
	// nothing.
	Copy(local Record) (Copy, error)
	// Read returns the length bytes at off of the copy; the range lies in
	// one chunk of Copy.Replace and below Copy.Size.
	Read(off, length uint64) ([]byte, error)
}

// PlanCopy returns the Copy that makes this store's record of key (local)
// the source's (remote): the chunk versions this store keeps under pl (nil:
// all), and the chunks it holds whose versions differ.
func (s *Store) PlanCopy(key string, local, remote Record, pl Placement) Copy {
	if !remote.Exists {
		return Copy{Record: remote}
	}
	n := (remote.Size + s.chunkBytes - 1) / s.chunkBytes
	keeps := func(c uint64) bool { return pl == nil || pl.Manages(key) || pl.Holds(key, c) }
	cp := Copy{Record: remote}
	cp.Chunks = map[uint64]uint64{}
	for c, v := range remote.Chunks {
		if c < n && keeps(c) {
			cp.Chunks[c] = v
		}
	}
	// Chunks at version 0 on both sides were never written: no pages.
	differ := map[uint64]bool{}
	for c := range remote.Chunks {
		differ[c] = true
	}
	for c := range local.Chunks {
		differ[c] = true
	}
	for c := range differ {
		if c < n && (pl == nil || pl.Holds(key, c)) && remote.Chunks[c] != local.Chunks[c] {
			cp.Replace = append(cp.Replace, c)
		}
	}
	slices.Sort(cp.Replace)
	return cp
}

// prefixFloor: 'f' key -> version(8), the oldest version of the blob
// this store can serve reads at (see the top of this file).
const prefixFloor = 'f'

func floorKey(key string) []byte {
	k := make([]byte, 0, 1+len(key))
	k = append(k, prefixFloor)
	return append(k, key...)
}

func getFloor(r pebble.Reader, key string) (uint64, error) {
	return getUint64(r, floorKey(key), "floor", key)
}

// RecordWaitMax bounds how long Record waits for a blob's lock.
const RecordWaitMax = time.Second

// Record returns blob key as this store keeps it, once no commit of it is
// in progress here (it waits for the blob's lock) and the last one is
// durable. If the lock stays taken for RecordWaitMax (a commit waiting on
// a slow member, or this store's own Refresh of the blob, which may be
// waiting for the caller's), it fails with errs.ErrUnavailable.
func (s *Store) Record(key string) (Record, error) {
	keys := []string{key}
	if !s.locks.lockWithin(keys, RecordWaitMax) {
		return Record{}, fmt.Errorf("%w: blob %q stayed locked for %v", errs.ErrUnavailable, key, RecordWaitMax)
	}
	snap := s.db.NewSnapshot()
	s.locks.unlock(keys)
	defer snap.Close()
	s.syncing.await(key)
	return readRecord(snap, key)
}

func readRecord(r pebble.Reader, key string) (Record, error) {
	m, ok, err := getMeta(r, key)
	if err != nil || !ok {
		return Record{Chunks: map[uint64]uint64{}}, err
	}
	rec := Record{Exists: true, Version: m.Version, Size: m.Size, Created: m.Created, Modified: m.Modified, Chunks: map[uint64]uint64{}}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: chunkPrefix(key), UpperBound: chunksEnd(key)})
	if err != nil {
		return Record{}, fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
	}
	defer it.Close()
	n := len(chunkPrefix(key))
	for valid := it.First(); valid; valid = it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) != n+8 || len(v) != 8 {
			return Record{}, fmt.Errorf("%w: chunk version entry of blob %q", errs.ErrCorruption, key)
		}
		rec.Chunks[binary.BigEndian.Uint64(k[n:])] = binary.BigEndian.Uint64(v)
	}
	return rec, it.Error()
}

// Locked reports whether a commit holds blob key's lock, shares it or
// waits for it, so that Refresh and Pin of key would wait: a commit
// staged by a chain holds the lock of every blob it was given a Base of,
// managed here or not, until it is decided. For a caller that must not
// wait, as the simulation, whose one goroutine would wait on itself.
func (s *Store) Locked(key string) bool {
	s.locks.mu.Lock()
	defer s.locks.mu.Unlock()
	_, ok := s.locks.locks[key]
	return ok
}

// Refresh makes this store's copy of blob key the one src gives, holding
// the blob's lock throughout (commits of the blob here wait or, staged by
// a chain, are refused as locked). It reports whether anything changed.
// The record and chunk versions are written last, in one batch, after the
// replaced chunks' pages; a crash in between leaves the old record, and
// the next catch-up copies again.
func (s *Store) Refresh(key string, src Source) (bool, error) {
	keys := []string{key}
	s.locks.lock(keys)
	defer s.locks.unlock(keys)
	local, err := readRecord(s.db, key)
	if err != nil {
		return false, err
	}
	cp, err := src.Copy(local)
	if err != nil {
		return false, err
	}
	if !cp.Exists {
		if !local.Exists {
			return false, nil
		}
		return true, s.dropBlob(key, local.Size, local.Version)
	}
	if err := s.checkCopy(key, cp); err != nil {
		return false, err
	}
	if s.opts.Room != nil && len(cp.Replace) > 0 {
		if err := s.opts.Room(); err != nil {
			return false, err
		}
	}
	cut := local.Exists && local.Size > cp.Size
	if len(cp.Replace) == 0 && !cut && sameRecord(local, cp.Record) {
		return false, nil
	}
	pages := func(c uint64) uint64 { return c * s.chunkBytes / s.pageBytes }
	if len(cp.Replace) > 0 && !s.besideOld(local, cp) {
		// Reads before the copy's version are refused from here on, since
		// the copied chunks' pages will not match them. With MVCC on, the
		// copies are written beside the pages they replace, which go only
		// in the last batch, so a copy that fails half way destroys
		// nothing; with it off, pages have one version, and the replaced
		// ones go first. When every copied page is newer than the local
		// copy (besideOld), reads of the local versions stay as they were
		// until the last batch, which raises the floor: a copy that fails
		// leaves this node serving the versions it holds, which another
		// holder catching up may need.
		b := s.db.NewBatch()
		err := b.Set(floorKey(key), binary.BigEndian.AppendUint64(nil, cp.Version), nil)
		for _, c := range cp.Replace {
			if err == nil && !s.opts.MVCC {
				err = b.DeleteRange(pageKeyVersionless(key, pages(c)), pageKeyVersionless(key, pages(c+1)), nil)
			}
		}
		if err := commitBatch(b, err, false); err != nil {
			return false, err
		}
	}
	versions := map[uint64]uint64{}
	for _, c := range cp.Replace {
		v, err := s.copyChunk(key, c, cp, src)
		if err != nil {
			return false, err
		}
		versions[c] = v
	}
	b := s.db.NewBatch()
	if cut || len(cp.Replace) > 0 {
		err = b.Set(floorKey(key), binary.BigEndian.AppendUint64(nil, cp.Version), nil)
	}
	for _, c := range cp.Replace {
		for p := pages(c); p < pages(c+1) && err == nil && s.opts.MVCC; p++ {
			err = s.keepOnly(b, key, p, versions[c])
		}
	}
	if err == nil {
		err = b.DeleteRange(pageKeyVersionless(key, (cp.Size+s.pageBytes-1)/s.pageBytes), blobPagesEnd(key), nil)
	}
	if err == nil {
		err = b.DeleteRange(chunkPrefix(key), chunksEnd(key), nil)
	}
	for _, c := range slices.Sorted(maps.Keys(cp.Chunks)) {
		if v := cp.Chunks[c]; err == nil && v != 0 {
			err = b.Set(chunkKey(key, c), binary.BigEndian.AppendUint64(nil, v), nil)
		}
	}
	if removed := s.replacedBytes(local, cp); err == nil && removed > 0 {
		err = markReclaim(b, key, removed, s.opts.Now())
	}
	if err == nil && local.Version != cp.Version {
		// The history records describe versions this copy may not match.
		err = b.DeleteRange(historyPrefix(key), historyEnd(key), nil)
	}
	if err == nil {
		m := blobMeta{Size: cp.Size, Version: cp.Version, Created: cp.Created, Modified: cp.Modified}
		err = b.Set(metaKey(key), m.encode(), nil)
	}
	if err := commitBatch(b, err, s.opts.Sync); err != nil {
		return false, err
	}
	s.raiseRemoved(max(local.Version, cp.Version))
	return true, nil
}

// besideOld reports whether copying cp over local leaves every read of a
// version local holds as it was: MVCC keeps the old pages, and each chunk
// replaced is copied at a version newer than local's.
func (s *Store) besideOld(local Record, cp Copy) bool {
	if !s.opts.MVCC || !local.Exists {
		return false
	}
	for _, c := range cp.Replace {
		if v := cmp.Or(cp.Chunks[c], cp.Version); v <= local.Version {
			return false
		}
	}
	return true
}

func sameRecord(a, b Record) bool {
	if a.Exists != b.Exists || a.Version != b.Version || a.Size != b.Size || len(a.Chunks) != len(b.Chunks) {
		return false
	}
	for c, v := range a.Chunks {
		if b.Chunks[c] != v {
			return false
		}
	}
	return true
}

// checkCopy refuses a copy that does not describe a blob this store could
// hold.
func (s *Store) checkCopy(key string, cp Copy) error {
	chunks := (cp.Size + s.chunkBytes - 1) / s.chunkBytes
	switch {
	case cp.Version == 0:
		return fmt.Errorf("%w: copy of blob %q at version 0", errs.ErrInvalidArgument, key)
	case cp.Size > limits.BlobBytesMax:
		return fmt.Errorf("%w: copy of blob %q of %d bytes", errs.ErrInvalidArgument, key, cp.Size)
	case !slices.IsSorted(cp.Replace) || len(slices.Compact(slices.Clone(cp.Replace))) != len(cp.Replace):
		return fmt.Errorf("%w: copy of blob %q: chunks to replace %v not sorted and distinct", errs.ErrInvalidArgument, key, cp.Replace)
	case len(cp.Replace) > 0 && cp.Replace[len(cp.Replace)-1] >= chunks:
		return fmt.Errorf("%w: copy of blob %q: chunk %d past its %d bytes", errs.ErrInvalidArgument, key, cp.Replace[len(cp.Replace)-1], cp.Size)
	}
	for c, v := range cp.Chunks {
		if c >= chunks || v > cp.Version {
			return fmt.Errorf("%w: copy of blob %q at version %d of %d bytes: chunk %d at version %d",
				errs.ErrInvalidArgument, key, cp.Version, cp.Size, c, v)
		}
	}
	return nil
}

// keepOnly deletes in b every version of page p of blob key but version's
// whole page, which the copy wrote: a delta at version would lose its base.
func (s *Store) keepOnly(b *pebble.Batch, key string, p, version uint64) error {
	err := b.DeleteRange(pageKeyVersionless(key, p), pageKey(key, p, version), nil)
	if err == nil {
		err = b.Delete(deltaKey(key, p, version), nil)
	}
	if err == nil && version > 0 {
		err = b.DeleteRange(pageKey(key, p, version-1), pageKeyVersionless(key, p+1), nil)
	}
	return err
}

// copyChunk writes chunk c of the copy, read from src a request at a time,
// and returns the version its pages got. Pages of zeros are not stored
// (holes read as zeros). With MVCC on, the pages get the chunk's version,
// the last commit that changed them; with it off, version 0, the only one.
func (s *Store) copyChunk(key string, c uint64, cp Copy, src Source) (uint64, error) {
	version := uint64(0)
	if s.opts.MVCC {
		version = cp.Chunks[c]
		if version == 0 {
			version = cp.Version
		}
	}
	end := min(cp.Size, (c+1)*s.chunkBytes)
	for off := c * s.chunkBytes; off < end; {
		n := min(end-off, limits.PayloadBytesMax)
		data, err := src.Read(off, n)
		if err != nil {
			return 0, err
		}
		if uint64(len(data)) != n {
			return 0, fmt.Errorf("%w: copy of blob %q: %d bytes at %d, want %d", errs.ErrUnavailable, key, len(data), off, n)
		}
		b := s.db.NewBatch()
		for i := uint64(0); i < n && err == nil; i += s.pageBytes {
			page := data[i:min(n, i+s.pageBytes)]
			if len(bytes.TrimRight(page, "\x00")) > 0 {
				err = b.Set(pageKey(key, (off+i)/s.pageBytes, version), page, nil)
			}
		}
		if err := commitBatch(b, err, false); err != nil {
			return 0, err
		}
		off += n
	}
	return version, nil
}

// replacedBytes is about the bytes of page versions that copying cp over
// local removes: the replaced chunks' (the old versions of their pages),
// and those past a smaller size.
func (s *Store) replacedBytes(local Record, cp Copy) uint64 {
	if !local.Exists {
		return 0
	}
	var n uint64
	for _, c := range cp.Replace {
		if start := c * s.chunkBytes; start < local.Size {
			n += min(local.Size, start+s.chunkBytes) - start
		}
	}
	if local.Size > cp.Size {
		n += local.Size - cp.Size
	}
	return n
}

// dropBlob deletes everything the store keeps of blob key, of size bytes
// at version; the caller holds its lock.
func (s *Store) dropBlob(key string, size, version uint64) error {
	s.raiseRemoved(version)
	b := s.db.NewBatch()
	err := b.DeleteRange(chunkPrefix(key), chunksEnd(key), nil)
	if err == nil && size > 0 {
		err = markReclaim(b, key, size, s.opts.Now())
	}
	if err == nil {
		err = b.DeleteRange(pagePrefix(key), blobPagesEnd(key), nil)
	}
	if err == nil {
		err = b.DeleteRange(historyPrefix(key), historyEnd(key), nil)
	}
	if err == nil {
		err = b.Delete(floorKey(key), nil)
	}
	if err == nil {
		err = b.Delete(metaKey(key), nil)
	}
	return commitBatch(b, err, s.opts.Sync)
}

// commitBatch commits b unless building it failed (err), and closes it.
func commitBatch(b *pebble.Batch, err error, sync bool) error {
	if err == nil {
		opt := pebble.NoSync
		if sync {
			opt = pebble.Sync
		}
		err = b.Commit(opt)
	}
	if closeErr := b.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
	}
	return nil
}

// checkFloor refuses a read at version (0: the newest) older than what
// catch-up left this store able to serve.
func checkFloor(r pebble.Reader, key string, version uint64) error {
	if version == 0 {
		return nil
	}
	floor, err := getFloor(r, key)
	if err != nil {
		return err
	}
	if version < floor {
		return fmt.Errorf("%w: blob %q: version %d no longer retained here: this replica copied version %d in catch-up",
			errs.ErrConflict, key, version, floor)
	}
	return nil
}
