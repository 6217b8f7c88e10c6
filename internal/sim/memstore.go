package sim

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/tyrstore/tyr/internal/chain"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/mvcc"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/txn"
)

// blob is one key's state on one simulated node.
type blob struct {
	exists bool
	data   []byte
	// version counts the commits that changed the key, across deletes, so
	// replicas that applied the same commits report the same versions.
	version uint64
	// log lists the transactions committed on the key, in commit order.
	log []chain.TxnID
}

// record is b as mvcc.Record describes a blob: an absent one (nil, or
// deleted) has no version.
func (b *blob) record() mvcc.Record {
	if b == nil || !b.exists {
		return mvcc.Record{}
	}
	return mvcc.Record{Exists: true, Version: b.version}
}

func (b *blob) clone() *blob {
	return &blob{exists: b.exists, data: slices.Clone(b.data), version: b.version, log: b.log}
}

// apply runs one op on b, the way mvcc does (see mvcc's blobWork.apply):
// create refuses an existing blob, and everything but a creating write or
// append refuses a missing one. It is the model the checkers replay, too.
func (b *blob) apply(op txn.Op) (txn.Result, error) {
	if !b.exists && op.Kind != txn.OpCreate && !((op.Kind == txn.OpWrite || op.Kind == txn.OpAppend) && op.Create) {
		return txn.Result{}, fmt.Errorf("%w: %s of %q", errs.ErrNotFound, op.Kind, op.Key)
	}
	var r txn.Result
	switch op.Kind {
	case txn.OpCreate:
		if b.exists {
			return txn.Result{}, fmt.Errorf("%w: %q", errs.ErrExists, op.Key)
		}
		b.exists, b.data = true, nil
	case txn.OpWrite, txn.OpAppend:
		b.exists = true
		offset := op.Offset
		if op.Kind == txn.OpAppend {
			offset = uint64(len(b.data))
		}
		b.grow(offset + uint64(len(op.Data)))
		copy(b.data[offset:], op.Data)
		r.Offset = offset
	case txn.OpAtomic:
		// The little-endian integer of Width bytes at Offset, bytes past
		// the end reading as zeros; the op extends the blob to cover it.
		var cur [8]byte
		if op.Offset < uint64(len(b.data)) {
			copy(cur[:op.Width], b.data[op.Offset:])
		}
		v := op.Func.Apply(op.Width, binary.LittleEndian.Uint64(cur[:]), op.Operand)
		binary.LittleEndian.PutUint64(cur[:], v)
		b.grow(op.Offset + uint64(op.Width))
		copy(b.data[op.Offset:], cur[:op.Width])
		r.Offset, r.Value = op.Offset, v
	case txn.OpTruncate:
		if op.Size <= uint64(len(b.data)) {
			b.data = b.data[:op.Size]
		} else {
			b.grow(op.Size)
		}
	case txn.OpDelete:
		b.exists, b.data = false, nil
	default:
		return txn.Result{}, fmt.Errorf("%w: the model has no %s", errs.ErrInvalidArgument, op.Kind)
	}
	b.version++
	r.Size = uint64(len(b.data))
	if b.exists {
		r.Version = b.version
	}
	return r, nil
}

// grow extends b's data with zeros to end bytes, if it is shorter.
func (b *blob) grow(end uint64) {
	if end > uint64(len(b.data)) {
		b.data = append(b.data, make([]byte, end-uint64(len(b.data)))...)
	}
}

// status is where a transaction stands in one MemStore. Zero is "never
// prepared here".
type status uint8

const (
	statusStaged status = 1 + iota
	statusCommitted
	statusAborted
	// statusLost: staged or aborted when the node crashed. A restarted
	// replica may prepare the transaction again.
	statusLost
	// statusPassed: committed by passing it through (see catchup.go):
	// recorded, its ops not applied.
	statusPassed
)

var statusNames = [...]string{"unknown", "staged", "committed", "aborted", "lost", "passed"}

func (s status) String() string { return statusNames[s] }

// MemStore is a node's simulated storage: blobs in memory, per-key locks
// that refuse instead of waiting (as chain.Stager requires), and the history
// the checkers read. A node stores only the keys owns reports; it skips the
// ops on other keys.
type MemStore struct {
	node   ring.NodeID
	owns   func(key string) bool
	blobs  map[string]*blob
	locks  map[string]chain.TxnID
	status map[chain.TxnID]status
	// results are the durable transaction records: what each committed
	// transaction reported here (see chain.Stager.Committed).
	results map[chain.TxnID][]txn.Result
	// missedTxns are the durable missed records (mvcc.Store.PutMissed).
	missedTxns map[chain.TxnID]bool
	// anomalies are contract breaches seen by the store itself, such as a
	// second Prepare of one transaction.
	anomalies []string
}

// NewMemStore returns an empty store for node.
func NewMemStore(node ring.NodeID, owns func(key string) bool) *MemStore {
	return &MemStore{
		node: node, owns: owns, blobs: map[string]*blob{},
		locks: map[string]chain.TxnID{}, status: map[chain.TxnID]status{},
		results: map[chain.TxnID][]txn.Result{}, missedTxns: map[chain.TxnID]bool{},
	}
}

// Prepare implements chain.Stager, for a member given no bases.
func (s *MemStore) Prepare(id chain.TxnID, ops []txn.Op) (chain.Staged, error) {
	st, _, err := s.prepareStep(id, ops, nil, false)
	return st, err
}

// firstPrepare records an anomaly and fails if id was prepared here before.
func (s *MemStore) firstPrepare(id chain.TxnID) error {
	if st, ok := s.status[id]; ok && st != statusLost {
		// The replica promises one Prepare per transaction; a second one
		// means it forgot the transaction while a Forward was still coming,
		// and would run it twice. After a crash it may stage again what it
		// had not committed, never what it had.
		s.anomalies = append(s.anomalies, fmt.Sprintf("%s: second Prepare of %s, already %s", s.node, id, st))
		return fmt.Errorf("%w: %s prepared twice", errs.ErrConflict, id)
	}
	return nil
}

// prepareStep stages ops as a chain member: a key with a base (see
// catchup.go) must be at its version here, the count of its commits, or
// the commit is refused with a *mvcc.BaseMismatchError; it returns the
// bases to hand on. A MemStore queues nothing, so strict changes nothing.
func (s *MemStore) prepareStep(id chain.TxnID, ops []txn.Op, bases map[string]mvcc.Base, strict bool) (chain.Staged, map[string]mvcc.Base, error) {
	if err := s.firstPrepare(id); err != nil {
		return nil, nil, err
	}
	own := map[string]mvcc.Base{}
	work := map[string]*blob{}
	var keys []string
	results := make([]txn.Result, len(ops))
	for i, op := range ops {
		if !s.owns(op.Key) {
			// A member that does not store the key does not know the
			// op's result: it reports the one of a member after it that
			// does (txn.MergeResults).
			results[i].Unheld = true
			continue
		}
		b, ok := work[op.Key]
		if !ok {
			if holder, locked := s.locks[op.Key]; locked {
				return nil, nil, fmt.Errorf("%w: %q is staged by %s", errs.ErrConflict, op.Key, holder)
			}
			b = &blob{}
			if cur := s.blobs[op.Key]; cur != nil {
				b = cur.clone()
			}
			if base, given := bases[op.Key]; given && base.Version != b.version {
				return nil, nil, &mvcc.BaseMismatchError{Key: op.Key, Have: b.version, Want: base.Version}
			}
			own[op.Key] = mvcc.Base{Version: b.version}
			work[op.Key] = b
			keys = append(keys, op.Key)
		}
		r, err := b.apply(op)
		if err != nil {
			return nil, nil, fmt.Errorf("op %d: %w", i, err)
		}
		results[i] = r
	}
	for _, k := range keys {
		s.locks[k] = id
	}
	s.status[id] = statusStaged
	return &memStaged{store: s, id: id, keys: keys, work: work, results: results}, handOn(bases, own), nil
}

type memStaged struct {
	store   *MemStore
	id      chain.TxnID
	keys    []string // in first-touched order, which is deterministic
	work    map[string]*blob
	results []txn.Result
}

func (p *memStaged) finish(st status) {
	s := p.store
	s.finish(p.id, st)
	for _, k := range p.keys {
		delete(s.locks, k)
	}
}

// finish moves staged transaction id to st.
func (s *MemStore) finish(id chain.TxnID, st status) {
	if s.status[id] != statusStaged {
		s.anomalies = append(s.anomalies, fmt.Sprintf("%s: %s of %s, which is %s", s.node, st, id, s.status[id]))
	}
	s.status[id] = st
}

// pass stages id as a commit passing through (see catchup.go).
func (s *MemStore) pass(id chain.TxnID) error {
	if err := s.firstPrepare(id); err != nil {
		return err
	}
	s.status[id] = statusStaged
	return nil
}

// passed records that id, passing through, committed, with results.
func (s *MemStore) passed(id chain.TxnID, results []txn.Result) error {
	s.finish(id, statusPassed)
	s.results[id] = results
	return nil
}

func (s *MemStore) passAborted(id chain.TxnID) { s.finish(id, statusAborted) }

// versionAfter is the count of key's commits once id applies on a copy at
// the base b (or on this one, if none was given).
func (s *MemStore) versionAfter(_ chain.TxnID, ops []txn.Op, key string, b mvcc.Base, given bool) uint64 {
	v := b.Version
	if !given {
		if cur := s.blobs[key]; cur != nil {
			v = cur.version
		}
	}
	for _, op := range ops {
		if op.Key == key && op.Kind != txn.OpReadCheck {
			v++
		}
	}
	return v
}

func (s *MemStore) locked(key string) bool {
	_, ok := s.locks[key]
	return ok
}

// refresh makes this copy of key from's, as mvcc.Store.Refresh does (see
// mvccNode.refresh): a source that is not ready gives its copy only if it
// is newer (mvcc.StaleCopyCounts), and one whose copy exists below version
// want gives nothing yet.
func (s *MemStore) refresh(key string, from nodeStore, ready bool, want uint64) (bool, error) {
	remote, local := from.(*MemStore).blobs[key], s.blobs[key]
	if remote != nil && remote.exists && remote.version < want {
		return false, fmt.Errorf("%w: %w: %q is at version %d there, before the commit at %d that passed through",
			errs.ErrUnavailable, mvcc.ErrCopyBehind, key, remote.version, want)
	}
	if !ready && !mvcc.StaleCopyCounts(local.record(), remote.record(), want) {
		return false, nil
	}
	if sameBlob(local, remote) {
		return false, nil
	}
	if remote == nil {
		delete(s.blobs, key)
	} else {
		s.blobs[key] = remote.clone()
	}
	return true, nil
}

func sameBlob(a, b *blob) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.exists == b.exists && a.version == b.version && slices.Equal(a.data, b.data) && slices.Equal(a.log, b.log)
}

// Committed implements chain.Stager.
func (s *MemStore) Committed(id chain.TxnID) ([]txn.Result, bool, error) {
	r, ok := s.results[id]
	return r, ok, nil
}

// Commit implements chain.Staged.
func (p *memStaged) Commit(results []txn.Result) error {
	p.finish(statusCommitted)
	p.store.results[p.id] = results
	for _, k := range p.keys {
		b := p.work[k]
		b.log = append(slices.Clip(b.log), p.id)
		p.store.blobs[k] = b
	}
	return nil
}

// Abort implements chain.Staged.
func (p *memStaged) Abort() { p.finish(statusAborted) }

// Results implements chain.Staged.
func (p *memStaged) Results() []txn.Result { return p.results }

// crash drops what the store staged and lets a restarted replica stage
// again what it staged or aborted; commits stay.
// sync does nothing: a MemStore's commits are durable at once.
func (s *MemStore) sync() {}

// crash loses what the store staged; its commits are durable at once, so
// none is lost.
func (s *MemStore) crash(*rand.Rand) []chain.TxnID {
	clear(s.locks)
	loseUncommitted(s.status)
	return nil
}

// loseUncommitted marks what a crashed node staged or aborted as lost: a
// restarted replica may stage it again.
func loseUncommitted(status map[chain.TxnID]status) {
	for id, st := range status {
		if st == statusStaged || st == statusAborted {
			status[id] = statusLost
		}
	}
}

// stagedCount is how many transactions hold locks here.
func (s *MemStore) stagedCount() int {
	n := 0
	for _, st := range s.status {
		if st == statusStaged {
			n++
		}
	}
	return n
}

func (s *MemStore) statusOf(id chain.TxnID) status { return s.status[id] }

func (s *MemStore) putMissed(id chain.TxnID) { s.missedTxns[id] = true }

func (s *MemStore) missed(id chain.TxnID) bool { return s.missedTxns[id] }

func (s *MemStore) storeAnomalies() []string { return s.anomalies }

func (s *MemStore) keyLog(key string) []chain.TxnID {
	if b := s.blobs[key]; b != nil {
		return b.log
	}
	return nil
}

func (s *MemStore) keyState(key string) (blob, error) {
	if b := s.blobs[key]; b != nil {
		return blob{exists: b.exists, data: b.data, version: b.version}, nil
	}
	return blob{}, nil
}

// ordering reports nothing: MemStore refuses a commit on a locked key, so
// none ever queues.
func (s *MemStore) ordering() (queued, waited map[chain.TxnID]bool) { return nil, nil }

func (s *MemStore) close() error { return nil }
