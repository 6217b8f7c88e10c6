// Package mvcc stores one keyspace's blobs on one node as versioned pages in
// an embedded LSM (Pebble), and applies transactions to them.
//
// Writers never block readers: a commit writes new page versions and a new
// blob record in one atomic batch, and a read sees one point-in-time view of
// the database, so it returns the blob as of exactly one commit. With MVCC on,
// page versions superseded by a write stay readable for Options.Retention,
// after which a background collector deletes them; with MVCC off, pages are
// overwritten in place. Pages removed by a delete or a shrinking truncate
// are dropped at once, in every version: a read that names an older version
// of them (ReadAt) fails with errs.ErrConflict.
//
// Prepare also evaluates read checks (txn.OpReadCheck: the validation of a
// transaction's read set) with their blobs locked along with the written
// ones, and applies atomics and compare-and-swaps as read-modify-writes of
// the working copy, so under the chain they are part of the forward pass.
//
// Commits go through two steps, the local half of the chain commit: Prepare
// validates the ops against the current state and builds the batch while
// holding the written blobs' locks (the forward pass); Pending.Commit makes it
// durable and visible, and Pending.Abort drops it (the backward pass).
package mvcc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tyrstore/tyr/internal/bufpool"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/limits"
	"github.com/tyrstore/tyr/internal/txn"
)

// Options configure a Store.
type Options struct {
	// MVCC keeps superseded page versions for Retention (see package doc).
	MVCC bool
	// Sync makes Pending.Commit wait for fsync.
	Sync bool
	// Retention is how long a superseded version stays readable while a
	// running transaction uses it: the transactions' read timeout (see
	// uses.go). Default 5 minutes.
	Retention time.Duration
	// Linger is how long a superseded version no transaction uses stays
	// readable. Default LingerDefault; at most Retention.
	Linger time.Duration
	// Now is the clock, default time.Now. Versions are drawn from it.
	Now func() time.Time
	// ChunkBytes is the keyspace's chunk size, the unit of placement: a
	// power of two, default ChunkBytesDefault. Pages are never larger, so
	// a page belongs to one chunk.
	ChunkBytes uint64
	// Room, when set, says whether the store may take more data: nil, or
	// an error of class errs.ErrNoSpace. Commits that write data and
	// catch-up copies are refused while it fails; deletes and truncates
	// are not, since they free space.
	Room func() error
}

// FormatMajorVersion is the oldest on-disk format of the LSM a Store
// works on; Open upgrades an older one. It is the first that separates
// values (ValueSeparation).
const FormatMajorVersion = pebble.FormatValueSeparation

// ValueSeparation is the LSM's policy for large values: pages of
// SeparateBytesMin bytes or more leave the sstables for blob files when
// their memtable is flushed, so compactions move a reference, not the
// page. Chunk data is most of a store and is written once per version, so
// compactions that rewrote it were most of the LSM's write traffic (1 MiB
// PUTs: +20% throughput and +45% for 1 MiB reads, measured with tyr bench
// object at 32 clients). A blob file is rewritten once a fifth of it is
// garbage and it is a minute old, which bounds the space deleted pages
// keep.
func ValueSeparation() pebble.ValueSeparationPolicy {
	return pebble.ValueSeparationPolicy{Enabled: true, MinimumSize: SeparateBytesMin, MaxBlobReferenceDepth: 10,
		RewriteMinimumAge: time.Minute, TargetGarbageRatio: 0.2}
}

// SeparateBytesMin is the smallest page ValueSeparation moves to a blob
// file; smaller ones stay inline, where a read finds them in one block.
const SeparateBytesMin = 16 << 10

// LingerDefault is Options.Linger when zero.
const LingerDefault = 10 * time.Second

// ChunkBytesDefault is Options.ChunkBytes when zero (the keyspace default).
const ChunkBytesDefault = limits.ChunkBytesDefault

// Store is one keyspace's data on one node. It is safe for concurrent use.
type Store struct {
	db    *pebble.DB
	opts  Options
	locks lockTable
	// chunkBytes and pageBytes (min(PageBytes, chunkBytes)) never change.
	chunkBytes, pageBytes uint64
	// syncing holds the durable commits between visible and synced; reads
	// wait for the ones on blobs they read (see durable.go).
	syncing syncing

	versionMu sync.Mutex
	// lastVersion is the newest version this store issued or accepted.
	// removed is the newest version of a commit that removed a blob's
	// record here, or that a pending collector record names: a blob with
	// no record takes only versions above it (see acceptVersion). Both
	// are guarded by versionMu; removed <= lastVersion.
	lastVersion, removed uint64

	// uses counts the versions running transactions read (uses.go).
	uses uses

	// collectMu is held by CollectGarbage throughout.
	collectMu sync.Mutex
	// collected holds the blobs whose page versions the collector deleted
	// since compactCollected last looked at them, at most collectBatchMax
	// (the others are left to Pebble). Guarded by collectMu.
	collected map[string]bool
	// reclaimPending is the removed bytes the last Reclaim pass left
	// marked (reclaim.go).
	reclaimPending atomic.Uint64
}

// Open wraps db, which the caller opened and closes after the Store is done.
//
// Versions come from the clock, which may step back across a restart. A
// re-created blob could then write a page at a version older than one a
// pending collector record names, and the collector would delete that live
// page. So Open starts issuing versions above the newest one any collector
// record names, and takes no version at or below it for a blob without a
// record; such records cover at most the retention period, which bounds the
// scan.
func Open(db *pebble.DB, opts Options) (*Store, error) {
	if opts.Retention <= 0 {
		opts.Retention = 5 * time.Minute
	}
	if opts.Linger <= 0 {
		opts.Linger = LingerDefault
	}
	opts.Linger = min(opts.Linger, opts.Retention)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ChunkBytes == 0 {
		opts.ChunkBytes = ChunkBytesDefault
	}
	if opts.ChunkBytes&(opts.ChunkBytes-1) != 0 {
		return nil, fmt.Errorf("%w: chunk size %d is not a power of two", errs.ErrInvalidArgument, opts.ChunkBytes)
	}
	// Every store is kept at one format: storage creates new ones at it,
	// and older ones are upgraded here.
	if db.FormatMajorVersion() < FormatMajorVersion {
		if err := db.RatchetFormatMajorVersion(FormatMajorVersion); err != nil {
			return nil, fmt.Errorf("%w: upgrading the store's format: %w", errs.ErrUnavailable, err)
		}
	}
	s := &Store{db: db, opts: opts, chunkBytes: opts.ChunkBytes, pageBytes: min(PageBytes, opts.ChunkBytes)}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixGarbage}, UpperBound: []byte{prefixGarbage + 1}})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) < 9+1+1+16 {
			return nil, fmt.Errorf("%w: garbage key %x", errs.ErrCorruption, k)
		}
		s.raiseRemoved(^binary.BigEndian.Uint64(k[len(k)-8:]))
	}
	return s, it.Error()
}

// raiseRemoved records that a blob's record at version v, or a version of
// its pages, was removed here or is pending collection: a blob re-created
// under that key must take a newer version.
func (s *Store) raiseRemoved(v uint64) {
	s.versionMu.Lock()
	defer s.versionMu.Unlock()
	s.removed = max(s.removed, v)
	s.lastVersion = max(s.lastVersion, v)
}

// nextVersion returns a version larger than any this Store issued before and
// than floor. Versions are clock-based (unix nanoseconds) so they keep
// increasing across restarts and across delete and re-create of a key, which
// keeps every page key unique for the version collector.
func (s *Store) nextVersion(floor uint64) uint64 {
	s.versionMu.Lock()
	defer s.versionMu.Unlock()
	v := max(uint64(s.opts.Now().UnixNano()), s.lastVersion+1, floor+1)
	s.lastVersion = v
	return v
}

// acceptVersion checks a caller's version for the changed blobs (see
// TryPrepareAt) and, if it passes, records it as issued.
func (s *Store) acceptVersion(blobs map[string]*blobWork, keys []string, version uint64, o prepareOpts, manages map[string]bool) error {
	s.versionMu.Lock()
	defer s.versionMu.Unlock()
	for _, key := range keys {
		w := blobs[key]
		if !w.changed || !manages[key] && !w.keepsChange() {
			continue // nothing of it is written here (see emit)
		}
		floor := w.baseMeta.Version
		if b, given := o.bases[key]; !w.baseExists && given && !manages[key] {
			// A holder without a record of the blob: the version
			// manager that handed the Base on checked the version
			// against the blob's history; this store's newest version
			// of any blob says nothing of this one.
			floor = b.Version
		} else if !w.baseExists {
			// Only a blob removed here may have versions in this store
			// under the key; the floor is a store-wide bound on them, so
			// concurrent creates of other blobs never refuse each other.
			floor = s.removed
		}
		if version <= floor {
			return &StaleVersionError{Key: key, Version: version, Floor: floor}
		}
	}
	s.lastVersion = max(s.lastVersion, version)
	return nil
}

// Pending is a prepared commit: validated, its batch built, its blobs locked.
// Exactly one of Commit or Abort must be called.
type Pending struct {
	store   *Store
	batch   *pebble.Batch
	keys    []string
	results []txn.Result
	bases   map[string]Base
	given   map[string]Base // the bases an earlier member handed on
	touched map[string]Touched
	// ticket is the commit's place in its blobs' queues, nil if it holds
	// its locks alone; ops and opts rebuild it on the blobs as the commits
	// before it in a queue left them (see order.go).
	ticket  *ticket
	ops     []txn.Op
	opts    prepareOpts
	rebased bool
	// kept are the blobs whose size and existence the commit keeps.
	kept map[string]bool
}

// Touched returns, for each blob the commit changes, the parts of it the
// commit changes: whose holders must all be in its chain.
func (p *Pending) Touched() map[string]Touched { return p.touched }

// Bases returns each blob of the commit as its version manager found it
// before the commit (this store's own record where no earlier member gave
// one): what the members after this one must apply the commit to (see
// TryPrepareStep).
func (p *Pending) Bases() map[string]Base { return p.bases }

// commitKeys validates ops and returns the blobs they touch, sorted and
// unique: the order in which a commit takes their locks.
func commitKeys(ops []txn.Op) ([]string, error) {
	if err := txn.Validate(ops); err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(ops))
	for _, op := range ops {
		keys = append(keys, op.Key)
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

// Prepare validates ops against the current state and builds their batch.
// On error nothing is held and nothing changed.
func (s *Store) Prepare(ops []txn.Op) (*Pending, error) {
	keys, err := commitKeys(ops)
	if err != nil {
		return nil, err
	}
	s.locks.lock(keys)
	p, err := s.prepareLocked(ops, keys, prepareOpts{})
	if err != nil {
		s.locks.unlock(keys)
		return nil, err
	}
	return p, nil
}

// prepareOpts are what the callers of prepareLocked fix about a commit.
type prepareOpts struct {
	// version is the new version of every changed blob, or 0 to draw one
	// from the clock (see TryPrepareAt).
	version uint64
	// bases are the version managers' records of the blobs (see Base and
	// TryPrepareStep); a blob without one is checked by no one.
	bases map[string]Base
	// placement says which chunks this store keeps; nil: all of them.
	placement Placement
	// copied marks a copy from another replica (Install): version is taken
	// as it is, without acceptVersion's checks.
	copied bool
	// rebase rebuilds a queued commit whose checks passed when it was
	// staged (see Pending.Rebase): they are not made again, and its read
	// checks release no use a second time.
	rebase bool
	// strict accepts no Base.Ahead version (see Step.Strict).
	strict bool
	// fetched are the blobs whose Base was fetched ahead (Step.Fetched).
	fetched map[string]bool
	// queued are, per blob, the versions queued here ahead of the commit
	// (ticket.ahead): a Base.Ahead version above this store's must be one
	// of them (see ErrAheadUnseen).
	queued map[string][]uint64
}

// room refuses ops that add data while Options.Room fails. A commit
// queued or copied here was admitted before, and is not refused (see
// prepareOpts.rebase and copied).
func (s *Store) room(ops []txn.Op) error {
	if s.opts.Room == nil {
		return nil
	}
	for _, op := range ops {
		switch op.Kind {
		case txn.OpDelete, txn.OpTruncate, txn.OpReadCheck:
		default:
			return s.opts.Room()
		}
	}
	return nil
}

// prepareLocked builds the commit of ops on keys, whose locks the caller
// holds.
func (s *Store) prepareLocked(ops []txn.Op, keys []string, o prepareOpts) (*Pending, error) {
	if !o.rebase && !o.copied {
		if err := s.room(ops); err != nil {
			return nil, err
		}
	}
	version := o.version
	// One snapshot gives every blob of the commit the same point in time;
	// the locks keep the blobs themselves from changing meanwhile.
	snap := s.db.NewSnapshot()
	defer snap.Close()
	now := s.opts.Now().UnixNano()
	blobs := make(map[string]*blobWork, len(keys))
	defer func() {
		for _, w := range blobs {
			w.close()
		}
	}()
	results := make([]txn.Result, len(ops))
	manages := map[string]bool{}
	for _, key := range keys {
		w, err := s.loadBlob(snap, key)
		if err != nil {
			return nil, err
		}
		blobs[key] = w
		manages[key] = true
		if pl := o.placement; pl != nil {
			manages[key] = pl.Manages(key)
			w.holds = func(c uint64) bool { return pl.Holds(key, c) }
		}
		b, given := o.bases[key]
		switch {
		case given && manages[key] && o.fetched[key] && !o.rebase:
			switch have := w.version(); {
			case have < b.Version:
				return nil, &BaseMismatchError{Key: key, Have: have, Want: b.Version}
			case have > b.Version || len(o.queued[key]) > 0:
				return nil, fmt.Errorf("%w: %w: blob %q: the base fetched ahead of the commit names version %d, and it is at version %d here with %d commits queued ahead",
					errs.ErrConflict, ErrLocked, key, b.Version, have, len(o.queued[key]))
			}
		case given && manages[key]:
			if have := w.version(); !o.rebase && !b.accepts(have, o.strict) {
				want := b.Version
				if o.strict {
					want = b.newest()
				}
				return nil, &BaseMismatchError{Key: key, Have: have, Want: want}
			} else if !o.rebase {
				if err := aheadSeen(key, b.Ahead, have, o.queued[key]); err != nil {
					return nil, err
				}
			}
		case given:
			w.adopt(b, now)
		case !manages[key]:
			return nil, fmt.Errorf("%w: blob %q: %w", errs.ErrConflict, key, ErrNoBase)
		}
	}
	for _, w := range blobs {
		if w.exists {
			w.start = w.meta.Size
		}
		w.low = w.start
		w.existed = w.exists
	}
	// Read checks first: the transaction's reads are still current only if
	// no blob it read changed since, and then its ops apply as it saw them.
	for i, op := range ops {
		if op.Kind != txn.OpReadCheck || !manages[op.Key] || o.rebase {
			continue // the version managers check reads
		}
		w := blobs[op.Key]
		current := uint64(0)
		if w.exists {
			current = w.meta.Version
		}
		// The transaction's use of the version ends here, whatever the
		// outcome (see uses.go).
		s.uses.release(op.Key, op.Version)
		if current != op.Version && !brokenSkipReadChecks {
			return nil, fmt.Errorf("%w: op %d: read check of blob %q: read at version %d, now at version %d (0: absent)",
				errs.ErrConflict, i, op.Key, op.Version, current)
		}
	}
	for i, op := range ops {
		if op.Kind == txn.OpReadCheck {
			continue
		}
		w := blobs[op.Key]
		if w == nil {
			results[i].Unheld = true // passed by (Step.parts)
			continue
		}
		r, err := w.apply(op, now)
		if err != nil {
			return nil, fmt.Errorf("op %d (%s %q): %w", i, op.Kind, op.Key, err)
		}
		results[i] = r
	}
	for _, key := range keys {
		w := blobs[key]
		if b, given := o.bases[key]; given && !manages[key] && !o.rebase {
			if err := w.checkHeld(snap, b, o.strict, o.queued[key]); err != nil {
				return nil, err
			}
		}
	}
	bases := make(map[string]Base, len(keys))
	for _, key := range keys {
		if b, given := o.bases[key]; given && !o.fetched[key] {
			bases[key] = b
			continue
		}
		b, err := blobs[key].base(snap)
		if err != nil {
			return nil, err
		}
		b.InUse = s.uses.of(key, time.Unix(0, now))
		bases[key] = b
	}
	switch {
	case o.copied:
		s.raiseRemoved(version)
	case version != 0 && !o.rebase:
		// A rebased commit's version was accepted when it was staged; its
		// own records and the floor have moved past it since.
		if err := s.acceptVersion(blobs, keys, version, o, manages); err != nil {
			return nil, err
		}
	}
	size := 0
	for _, key := range keys {
		size += blobs[key].emitBytes()
	}
	batch := s.db.NewBatchWithSize(size)
	for _, key := range keys {
		w := blobs[key]
		switch {
		case w.changed && version != 0:
			w.meta.Version = version
		case w.changed:
			w.meta.Version = s.nextVersion(w.meta.Version)
		}
		if err := s.emit(batch, w, now, manages[key]); err != nil {
			_ = batch.Close()
			return nil, err
		}
	}
	for i, op := range ops {
		if w := blobs[op.Key]; w == nil {
			continue
		} else if w.exists {
			results[i].Size = w.meta.Size
			results[i].Version = w.meta.Version
		} else {
			results[i].Size, results[i].Version = 0, 0
		}
	}
	touched := make(map[string]Touched, len(keys))
	var kept map[string]bool
	if version != 0 {
		// Only a commit at a fixed version may queue (see order.go).
		kept = make(map[string]bool, len(keys))
	}
	for _, key := range keys {
		w := blobs[key]
		if w.changed {
			touched[key] = w.touched()
		}
		if kept != nil {
			kept[key] = w.existed && w.exists && w.meta.Size == w.start && w.low == w.start && w.cutPage == noCut
		}
	}
	return &Pending{store: s, batch: batch, keys: keys, results: results, bases: bases, given: o.bases, touched: touched, kept: kept}, nil
}

// Commit makes the prepared ops durable (when Sync) and visible, atomically.
// A commit queued behind others (see order.go) must be Ready; it is rebased
// first.
func (p *Pending) Commit() error { return p.commit(false) }

// CommitLater is Commit without waiting for the sync: the ops are visible
// to the commits staged after this one at once, and durable once a Sync
// that began after CommitLater returned has returned. Reads of the blobs
// wait for that Sync (see durable.go), so the owner of the store must call
// it: a chain member's edge does, for the Output that says MustSync.
func (p *Pending) CommitLater() error { return p.commit(true) }

func (p *Pending) commit(later bool) error {
	if err := p.Rebase(); err != nil {
		if errors.Is(err, ErrNotReady) {
			return err
		}
		p.Abort()
		return fmt.Errorf("%w: commit: %w", errs.ErrUnavailable, err)
	}
	defer p.store.locks.release(p.keys, p.ticket)
	opt := pebble.NoSync
	switch {
	case p.store.opts.Sync && later:
		defer p.store.syncing.beginLater(p.keys)()
	case p.store.opts.Sync:
		opt = pebble.Sync
		defer p.store.syncing.begin(p.keys)()
	}
	err := p.batch.Commit(opt)
	closeErr := p.batch.Close()
	if err != nil {
		return fmt.Errorf("%w: commit: %w", errs.ErrUnavailable, err)
	}
	if closeErr != nil {
		return fmt.Errorf("%w: commit: %w", errs.ErrUnavailable, closeErr)
	}
	for key, b := range p.given {
		p.store.uses.note(key, b.InUse)
	}
	return nil
}

// Sync makes every commit made with CommitLater before the call durable,
// with one WAL sync, and lets the reads waiting for them go on. It does
// nothing when there is none, or when the store does not sync. Should it
// fail, the commits' durability is unknown and their readers keep
// waiting: the caller must stop using the store.
func (s *Store) Sync() error {
	s.syncing.syncMu.Lock()
	defer s.syncing.syncMu.Unlock()
	done, keys := s.syncing.takeLater()
	if done == nil {
		return nil
	}
	if err := s.db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("%w: sync: %w", errs.ErrUnavailable, err)
	}
	s.syncing.end(done, keys)
	return nil
}

// Abort drops the prepared ops.
func (p *Pending) Abort() {
	_ = p.batch.Close()
	p.store.locks.release(p.keys, p.ticket)
}

// BlobInfo describes a blob.
type BlobInfo struct {
	Key      string
	Size     uint64
	Version  uint64
	Created  time.Time
	Modified time.Time
}

func (m blobMeta) info(key string) BlobInfo {
	return BlobInfo{Key: key, Size: m.Size, Version: m.Version,
		Created: time.Unix(0, m.Created), Modified: time.Unix(0, m.Modified)}
}

// Stat describes blob key, or returns errs.ErrNotFound.
func (s *Store) Stat(key string) (BlobInfo, error) {
	m, ok, err := getMeta(s.db, key)
	s.syncing.await(key)
	if err != nil {
		return BlobInfo{}, err
	}
	if !ok {
		return BlobInfo{}, fmt.Errorf("blob %q: %w", key, errs.ErrNotFound)
	}
	return m.info(key), nil
}

// Read returns up to length bytes of blob key from offset, with the blob's
// info at the version read. The bytes belong to one commit: the record and
// the pages are read from one snapshot. A read at or past the end returns no
// bytes; holes read as zeros.
func (s *Store) Read(key string, offset, length uint64) ([]byte, BlobInfo, error) {
	return s.ReadAt(key, offset, length, 0)
}

// ReadAt is Read as of version, a version of the blob a read or commit
// returned, or 0 for the current one. An older version is readable while
// the store retains it (MVCC on, for Options.Retention after a commit
// superseded it, and no later truncate or delete dropped its pages);
// otherwise ReadAt fails with errs.ErrConflict, so a transaction that read
// the blob at version retries.
func (s *Store) ReadAt(key string, offset, length, version uint64) ([]byte, BlobInfo, error) {
	if err := checkReadLength(length); err != nil {
		return nil, BlobInfo{}, err
	}
	if version == 0 {
		return s.readLatest(key, offset, length)
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()
	s.syncing.await(key)
	m, ok, err := getMeta(snap, key)
	if err != nil {
		return nil, BlobInfo{}, err
	}
	if !ok || m.Version != version {
		if m, err = s.historyAt(snap, key, version, ok, m); err != nil {
			return nil, BlobInfo{}, err
		}
	}
	if offset >= m.Size || length == 0 {
		return []byte{}, m.info(key), nil
	}
	it, err := newPageIter(snap, key)
	if err != nil {
		return nil, BlobInfo{}, err
	}
	defer it.Close()
	return readBlob(it, key, m, offset, length, s.pageBytes)
}

// readLatest is ReadAt of the current version. One iterator, a
// point-in-time view like a snapshot, finds both the blob's record and its
// pages: a read costs no snapshot and no separate lookup of the record.
func (s *Store) readLatest(key string, offset, length uint64) ([]byte, BlobInfo, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: metaKey(key), UpperBound: blobPagesEnd(key)})
	if err != nil {
		return nil, BlobInfo{}, fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
	}
	defer it.Close()
	return s.readIn(it, it, key, offset, length)
}

// readIn reads as readLatest does, the record through metas and the pages
// through pages, two iterators over one view of the store.
func (s *Store) readIn(metas, pages *pebble.Iterator, key string, offset, length uint64) ([]byte, BlobInfo, error) {
	mk := metaKey(key)
	// After the view is taken: the commits it holds are durable once this
	// returns.
	s.syncing.await(key)
	// Limited to the record's key: a missing blob's seek stops there, not
	// at the next live key past every deleted one.
	if metas.SeekGEWithLimit(mk, append(mk, 0)) != pebble.IterValid || !bytes.Equal(metas.Key(), mk) {
		if err := metas.Error(); err != nil {
			return nil, BlobInfo{}, fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
		}
		return nil, BlobInfo{}, fmt.Errorf("blob %q: %w", key, errs.ErrNotFound)
	}
	value, err := metas.ValueAndErr()
	if err != nil {
		return nil, BlobInfo{}, fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
	}
	m, err := decodeMeta(value)
	if err != nil {
		return nil, BlobInfo{}, fmt.Errorf("blob %q: %w", key, err)
	}
	if offset >= m.Size || length == 0 {
		return []byte{}, m.info(key), nil
	}
	return readBlob(pages, key, m, offset, length, s.pageBytes)
}

// A View is the store as it was when the view was taken, for a run of
// reads of the newest versions that may all be answered from one moment:
// requests that had all arrived before it was taken. Reads through one
// view share its iterators, and a run of them in key order seeks forward
// through the LSM instead of starting over for each. A View is for one
// goroutine; close it before the store.
type View struct {
	s            *Store
	metas, pages *pebble.Iterator
}

// NewView takes a view of the store.
func (s *Store) NewView() (*View, error) {
	metas, err := s.db.NewIter(nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
	}
	pages, err := metas.Clone(pebble.CloneOptions{})
	if err != nil {
		_ = metas.Close()
		return nil, fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
	}
	return &View{s: s, metas: metas, pages: pages}, nil
}

// Read is Store.Read as of the view.
func (v *View) Read(key string, offset, length uint64) ([]byte, BlobInfo, error) {
	if err := checkReadLength(length); err != nil {
		return nil, BlobInfo{}, err
	}
	return v.s.readIn(v.metas, v.pages, key, offset, length)
}

// checkReadLength refuses a read of more than a request's payload.
func checkReadLength(length uint64) error {
	if length > limits.PayloadBytesMax {
		return fmt.Errorf("%w: read of %d bytes, above the per-request limit of %d",
			errs.ErrTooLarge, length, limits.PayloadBytesMax)
	}
	return nil
}

// Close releases the view.
func (v *View) Close() {
	_ = v.metas.Close()
	_ = v.pages.Close()
}

// readBlob reads [offset, offset+length) of the blob m describes, cut at
// its end, through it.
// The result is drawn from bufpool: whoever writes it out and holds the
// only reference to it may give it back.
func readBlob(it *pebble.Iterator, key string, m blobMeta, offset, length, pageBytes uint64) ([]byte, BlobInfo, error) {
	buf := bufpool.Get(int(min(m.Size, offset+length) - offset))
	if err := readRange(it, key, m.Version, offset, pageBytes, buf); err != nil {
		return nil, BlobInfo{}, err
	}
	return buf, m.info(key), nil
}

// historyAt returns the blob record of key as of an older version, checking
// that its pages are all still stored. cur is the current record (ok: the
// blob exists).
func (s *Store) historyAt(snap *pebble.Snapshot, key string, version uint64, ok bool, cur blobMeta) (blobMeta, error) {
	gone := func(why string) error {
		return fmt.Errorf("%w: blob %q: version %d no longer retained: %s", errs.ErrConflict, key, version, why)
	}
	switch {
	case !ok:
		return blobMeta{}, gone("the blob was deleted")
	case !s.opts.MVCC:
		return blobMeta{}, gone("the keyspace keeps no old versions (MVCC off)")
	case version > cur.Version:
		return blobMeta{}, gone(fmt.Sprintf("newer than the current version %d", cur.Version))
	}
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: historyPrefix(key), UpperBound: historyEnd(key)})
	if err != nil {
		return blobMeta{}, fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
	}
	defer it.Close()
	// Newest first: every commit from version on may have cut pages.
	cut := uint64(noCut)
	target := historyKey(key, version)
	for valid := it.First(); valid && bytes.Compare(it.Key(), target) <= 0; valid = it.Next() {
		value, err := it.ValueAndErr()
		if err != nil {
			return blobMeta{}, err
		}
		rec, err := decodeHistory(value)
		if err != nil {
			return blobMeta{}, fmt.Errorf("blob %q: %w", key, err)
		}
		cut = min(cut, rec.Cut)
		if !bytes.Equal(it.Key(), target) {
			continue
		}
		if cut != noCut && cut < (rec.Meta.Size+s.pageBytes-1)/s.pageBytes {
			return blobMeta{}, gone("a later truncate dropped its pages")
		}
		return rec.Meta, nil
	}
	if err := it.Error(); err != nil {
		return blobMeta{}, err
	}
	return blobMeta{}, gone("its retention passed")
}

// newPageIter returns an iterator over the pages of blob key only; the bounds
// let Pebble skip every file that holds none of them.
func newPageIter(r pebble.Reader, key string) (*pebble.Iterator, error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: pagePrefix(key), UpperBound: blobPagesEnd(key)})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
	}
	return it, nil
}

// readRange fills buf with the blob's bytes at [offset, offset+len(buf)) as
// of version: zeros where no page, or no byte of a short page, was stored
// (a sparse blob's holes). buf's earlier bytes do not matter.
func readRange(it *pebble.Iterator, key string, version, offset, pageBytes uint64, buf []byte) error {
	end := offset + uint64(len(buf))
	filled := offset // buf holds the blob's bytes up to here
	for page := offset / pageBytes; page*pageBytes < end; page++ {
		data, _, _, ok, err := readPage(it, key, page, version)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		pageStart := page * pageBytes
		lo := max(offset, pageStart)
		hi := min(end, pageStart+uint64(len(data)))
		if lo < hi {
			clear(buf[filled-offset : lo-offset])
			copy(buf[lo-offset:hi-offset], data[lo-pageStart:hi-pageStart])
			filled = hi
		}
	}
	clear(buf[filled-offset:])
	return nil
}

// readPage returns the newest version of a page not newer than version,
// applying its deltas to the whole page they stack on, and the number of
// deltas (keys.go). With no delta the returned bytes are only valid until
// the iterator moves; with deltas they are the caller's (applyDeltas).
func readPage(it *pebble.Iterator, key string, page, version uint64) ([]byte, uint64, int, bool, error) {
	prefix := pageKeyVersionless(key, page)
	// Limited to the page's keys: a hole's seek stops there, through an
	// iterator without bounds too (View).
	if it.SeekGEWithLimit(pageKey(key, page, version), prefixUpperBound(prefix)) != pebble.IterValid ||
		!bytes.HasPrefix(it.Key(), prefix) {
		return nil, 0, 0, false, it.Error()
	}
	var newest uint64
	var deltas [][]byte
	for {
		_, v, delta, ok := decodePageKey(it.Key(), len(prefix)-8)
		if !ok {
			return nil, 0, 0, false, fmt.Errorf("%w: page key %x", errs.ErrCorruption, it.Key())
		}
		if deltas == nil {
			newest = v
		}
		value, err := it.ValueAndErr()
		if err != nil {
			return nil, 0, 0, false, err
		}
		if len(value) > PageBytes+4 || !delta && len(value) > PageBytes {
			return nil, 0, 0, false, fmt.Errorf("%w: page of %d bytes", errs.ErrCorruption, len(value))
		}
		if !delta {
			if len(deltas) == 0 {
				return value, newest, 0, true, nil
			}
			data, err := applyDeltas(value, deltas)
			return data, newest, len(deltas), err == nil, err
		}
		deltas = append(deltas, slices.Clone(value))
		if !it.Next() || !bytes.HasPrefix(it.Key(), prefix) {
			if err := it.Error(); err != nil {
				return nil, 0, 0, false, err
			}
			return nil, 0, 0, false, fmt.Errorf("%w: page %d of blob %q: delta at version %d without a whole page under it",
				errs.ErrCorruption, page, key, newest)
		}
	}
}

func getMeta(r pebble.Reader, key string) (blobMeta, bool, error) {
	value, closer, err := r.Get(metaKey(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return blobMeta{}, false, nil
	}
	if err != nil {
		return blobMeta{}, false, fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
	}
	defer closer.Close()
	m, err := decodeMeta(value)
	if err != nil {
		return blobMeta{}, false, fmt.Errorf("blob %q: %w", key, err)
	}
	return m, true, nil
}

// List returns up to limit blobs whose keys start with prefix and sort after
// startAfter, in key order, and whether more may follow.
func (s *Store) List(prefix, startAfter string, limit int) ([]BlobInfo, bool, error) {
	lower := metaKey(prefix)
	if after := metaKey(startAfter + "\x00"); startAfter != "" && bytes.Compare(after, lower) > 0 {
		lower = after
	}
	upper := prefixUpperBound(metaKey(prefix))
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
	}
	defer it.Close()
	s.syncing.awaitPrefix(prefix, startAfter)
	var out []BlobInfo
	for ok := it.First(); ok; ok = it.Next() {
		if len(out) == limit {
			return out, true, nil
		}
		value, err := it.ValueAndErr()
		if err != nil {
			return nil, false, err
		}
		key := string(it.Key()[1:])
		m, err := decodeMeta(value)
		if err != nil {
			return nil, false, fmt.Errorf("blob %q: %w", key, err)
		}
		out = append(out, m.info(key))
	}
	return out, false, it.Error()
}

// prefixUpperBound returns the smallest key greater than every key with
// prefix p, or nil when there is none.
func prefixUpperBound(p []byte) []byte {
	end := slices.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// collectBatchMax bounds the records one collector batch works off, so a
// large backlog is worked off in steps of bounded memory.
const collectBatchMax = 4096

// CollectGarbage works off the collector records that are due and returns
// how many pages it collected: the records whose older page versions it
// deleted, each a page superseded by a commit; records put off because a
// version is in use are not counted. It is idempotent and safe to run
// concurrently with everything else.
//
// It first drops history records past their deadline, then page versions,
// with one clock reading, so no history record outlives the pages it
// describes. When there was nothing to collect, it compacts the space
// of what it collected before (see compactCollected).
func (s *Store) CollectGarbage() (int, error) {
	s.collectMu.Lock()
	defer s.collectMu.Unlock()
	now := s.opts.Now()
	for {
		n, err := s.collectHistoryBatch(now)
		if err != nil {
			return 0, err
		}
		if n < collectBatchMax {
			break
		}
	}
	total := 0
	for {
		records, collected, err := s.collectBatch(now)
		total += collected
		if err != nil {
			return total, err
		}
		if records < collectBatchMax {
			break
		}
	}
	if total > 0 {
		return total, nil
	}
	return 0, s.compactCollected()
}

// compactSlack is how much more space than twice its size a blob's pages
// must take before compactCollected compacts them.
const compactSlack = 64 << 20

// compactCollected compacts the pages of each blob collected since it last
// ran whose deleted versions take much of their space, and forgets the
// blobs.
//
// Pebble compacts as writes come in, so under steady writes deleted
// versions go in time; but when writes stop, what is left may stay for
// good: a collector's range deletion covers one page's versions while
// each file holds many pages', so no file is deleted whole. So this runs
// when a collector pass finds nothing to do, never while one finds work:
// compacting under writes competes with the compactions they need.
//
// Its work is about the space the blob's pages take, plus at each level
// the files at the span's ends, which may hold other blobs. Compacting
// only when that space is above twice the blob's size plus compactSlack
// keeps the rest under twice the space reclaimed.
func (s *Store) compactCollected() error {
	for _, key := range slices.Sorted(maps.Keys(s.collected)) {
		delete(s.collected, key)
		start, end := pagePrefix(key), blobPagesEnd(key)
		used, err := s.db.EstimateDiskUsage(start, end)
		if err != nil {
			return err
		}
		m, _, err := getMeta(s.db, key)
		if err != nil {
			return err
		}
		if used > 2*m.Size+compactSlack {
			if err := s.db.Compact(context.Background(), start, end, false); err != nil {
				return fmt.Errorf("compacting the pages of blob %q: %w", key, err)
			}
		}
	}
	return nil
}

// collectHistoryBatch deletes up to collectBatchMax due history records and
// their collector records.
func (s *Store) collectHistoryBatch(now time.Time) (int, error) {
	upper := histGCKey(now, nil)
	due, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixHistGC}, UpperBound: upper})
	if err != nil {
		return 0, err
	}
	defer due.Close()
	batch := s.db.NewBatch()
	defer batch.Close()
	n := 0
	for ok := due.First(); ok && n < collectBatchMax; ok = due.Next() {
		k := due.Key()
		if len(k) < 9+2 {
			return n, fmt.Errorf("%w: history collector key %x", errs.ErrCorruption, k)
		}
		if err := errors.Join(batch.Delete(k[9:], nil), batch.Delete(k, nil)); err != nil {
			return n, err
		}
		n++
	}
	if err := due.Error(); err != nil || n == 0 {
		return n, err
	}
	return n, batch.Commit(pebble.NoSync)
}

// collectBatch works off up to collectBatchMax due collector records and
// returns how many it worked off and how many of those it collected; it
// notes the blobs collected in s.collected. The caller holds collectMu.
//
// A record names a page version, newer, and is due to delete the version
// newer superseded, with the history records of the blob versions that
// would read it. Every page version is superseded once, so each is deleted
// by one record, and the cost of a record does not grow with the page's
// history: it never walks over the versions deleted before, which
// compaction may not have dropped yet (a walk made each record on a page
// overwritten often cost more than the last). It issues no range
// deletions either: every iterator built over a memtable fragments all of
// its range deletions, and thousands of them (a hot blob's backlog) made
// each read and commit slow and took gigabytes.
func (s *Store) collectBatch(now time.Time) (records, collected int, err error) {
	upper := garbageKey(now, nil)
	due, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixGarbage}, UpperBound: upper})
	if err != nil {
		return 0, 0, err
	}
	defer due.Close()
	// Bounds are set for each record, so no seek steps outside the span
	// the record covers.
	pages, err := s.db.NewIter(nil)
	if err != nil {
		return 0, 0, err
	}
	defer pages.Close()
	history, err := s.db.NewIter(nil)
	if err != nil {
		return 0, 0, err
	}
	defer history.Close()
	batch := s.db.NewBatch()
	defer batch.Close()
	// The iterators do not see this batch's deletions.
	deleted := map[string]bool{}
	for ok := due.First(); ok && records < collectBatchMax; ok = due.Next() {
		k := due.Key()
		if len(k) < 9+1+1+16 {
			return records, collected, fmt.Errorf("%w: garbage key %x", errs.ErrCorruption, k)
		}
		newer := k[9:]
		newerVersion := ^binary.BigEndian.Uint64(newer[len(newer)-8:])
		key := pageBlob(newer)
		value, err := due.ValueAndErr()
		if err != nil {
			return records, collected, err
		}
		records++
		latest := garbageLatest(value, int64(binary.BigEndian.Uint64(k[1:9])))
		if u := s.uses.of(key, now); !brokenCollectInUse && u.Oldest != 0 && u.Oldest < newerVersion && now.UnixNano() < latest {
			// A transaction may still read an older version: look again
			// after another linger time, or when its use lapses (see
			// uses.go).
			later := garbageKey(time.Unix(0, min(u.Until, now.Add(s.opts.Linger).UnixNano(), latest)), newer)
			if err := errors.Join(batch.Delete(k, nil), batch.Set(later, value, nil)); err != nil {
				return records, collected, err
			}
			continue
		}
		if err := batch.Delete(k, nil); err != nil {
			return records, collected, err
		}
		// The page version newer superseded is the newest older one still
		// stored; the versions before it went with the records of the
		// versions that superseded them. So one point deletion, found
		// without stepping over the deletions of those: they sort after it.
		start, end := olderPageVersions(newer)
		pages.SetBounds(start, end)
		found := pages.First()
		for found && deleted[string(pages.Key())] {
			found = pages.Next()
		}
		if err := pages.Error(); err != nil {
			return records, collected, err
		}
		if !found {
			continue
		}
		// That version goes with the deltas it is the newest of, down to
		// the whole page they stack on (keys.go, invariant 2).
		prefixLen := len(newer) - 16
		var olderVersion uint64
		for found {
			older := slices.Clone(pages.Key())
			_, v, delta, ok := decodePageKey(older, prefixLen)
			if !ok {
				return records, collected, fmt.Errorf("%w: page key %x", errs.ErrCorruption, older)
			}
			deleted[string(older)] = true
			olderVersion = v
			// Each page version is written once: a sized delete tells the
			// LSM how much space compacting it away reclaims.
			lv := pages.LazyValue()
			if err := batch.DeleteSized(older, uint32(lv.Len()), nil); err != nil {
				return records, collected, err
			}
			if !delta {
				break
			}
			found = pages.Next()
		}
		if err := pages.Error(); err != nil {
			return records, collected, err
		}
		// No read at a blob version that would find the deleted page may
		// be served: its history records go with it (from newer's version
		// down to the deleted page's).
		history.SetBounds(historyKey(key, newerVersion-1), slices.Concat(historyKey(key, olderVersion), []byte{0}))
		for ok := history.First(); ok; ok = history.Next() {
			if err := batch.Delete(history.Key(), nil); err != nil {
				return records, collected, err
			}
		}
		if err := history.Error(); err != nil {
			return records, collected, err
		}
		collected++
		if s.collected == nil {
			s.collected = map[string]bool{}
		}
		if len(s.collected) < collectBatchMax {
			s.collected[key] = true
		}
	}
	if err := due.Error(); err != nil || records == 0 {
		return records, collected, err
	}
	return records, collected, batch.Commit(pebble.NoSync)
}

var _ io.Closer = (*pebble.Iterator)(nil)

// Results reports each op's outcome.
func (p *Pending) Results() []txn.Result { return p.results }
