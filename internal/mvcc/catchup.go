package mvcc

import (
	"fmt"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/limits"
	"github.com/tyrstore/tyr/internal/txn"
)

// Catch-up: a replica that missed commits copies the blobs it is behind on
// from another replica. A copy is conditional, so it never moves a blob
// backwards past a commit that reached this replica meanwhile.

// Install makes blob key hold exactly data at version, as copied from
// another replica, unless the blob is already at version or newer. It
// reports whether it changed the blob. Versions name the same commit on
// every replica (see TryPrepareAt), so the copy is the other replica's
// state at that commit. The copy is one atomic batch; data is held in
// memory whole.
func (s *Store) Install(key string, version uint64, data []byte) (bool, error) {
	if version == 0 {
		return false, fmt.Errorf("%w: install of blob %q at version 0", errs.ErrInvalidArgument, key)
	}
	return s.replaceIf(key, func(cur uint64, _ bool) bool { return cur < version }, func(exists bool) []txn.Op {
		var ops []txn.Op
		if exists {
			ops = append(ops, txn.Op{Key: key, Kind: txn.OpTruncate, Size: 0})
		} else {
			ops = append(ops, txn.Op{Key: key, Kind: txn.OpCreate})
		}
		for off := 0; off < len(data); off += limits.PayloadBytesMax {
			end := min(off+limits.PayloadBytesMax, len(data))
			ops = append(ops, txn.Op{Key: key, Kind: txn.OpWrite, Offset: uint64(off), Data: data[off:end]})
		}
		return ops
	}, version)
}

// DeleteAt deletes blob key if it is still at version: catch-up found it
// deleted on the replicas that are up to date. It reports whether it
// deleted the blob.
func (s *Store) DeleteAt(key string, version uint64) (bool, error) {
	return s.replaceIf(key, func(cur uint64, exists bool) bool { return exists && cur == version }, func(bool) []txn.Op {
		return []txn.Op{{Key: key, Kind: txn.OpDelete}}
	}, 0)
}

// replaceIf commits ops(exists) on key, holding its lock, if ok(current
// version, exists) holds; version 0 draws one from the clock.
func (s *Store) replaceIf(key string, ok func(uint64, bool) bool, ops func(bool) []txn.Op, version uint64) (bool, error) {
	keys := []string{key}
	s.locks.lock(keys)
	m, exists, err := getMeta(s.db, key)
	if err != nil {
		s.locks.unlock(keys)
		return false, err
	}
	cur := uint64(0)
	if exists {
		cur = m.Version
	}
	if !ok(cur, exists) {
		s.locks.unlock(keys)
		return false, nil
	}
	p, err := s.prepareLocked(ops(exists), keys, prepareOpts{version: version, copied: version != 0})
	if err != nil {
		s.locks.unlock(keys)
		return false, err
	}
	if err := p.Commit(); err != nil {
		return false, err
	}
	return true, nil
}

// Settled returns blob key's current record once no commit of it is in
// progress on this store (it waits for the blob's lock) and the last one is
// durable: a commit that another replica staged after this one can no
// longer be missing from it. ok is false if the blob does not exist.
func (s *Store) Settled(key string) (info BlobInfo, ok bool, err error) {
	keys := []string{key}
	s.locks.lock(keys)
	m, ok, err := getMeta(s.db, key)
	s.locks.unlock(keys)
	s.syncing.await(key)
	if err != nil || !ok {
		return BlobInfo{}, false, err
	}
	return m.info(key), true, nil
}
