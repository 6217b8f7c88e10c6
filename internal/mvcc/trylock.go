package mvcc

import (
	"fmt"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/txn"
)

// TryPrepare is Prepare for callers that must not wait, such as a chain
// replica stepping its state machine (see chain.Stager): if another
// transaction holds the lock of any blob ops touch, it returns an error
// wrapping errs.ErrConflict at once. On error nothing is held and nothing
// changed.
func (s *Store) TryPrepare(ops []txn.Op) (*Pending, error) {
	keys, err := commitKeys(ops)
	if err != nil {
		return nil, err
	}
	if busy, ok := s.locks.tryLock(keys); !ok {
		return nil, fmt.Errorf("%w: blob %q is locked by another transaction", errs.ErrConflict, busy)
	}
	p, err := s.prepareLocked(ops, keys)
	if err != nil {
		s.locks.unlock(keys)
		return nil, err
	}
	return p, nil
}

// tryLock locks all of sortedKeys, or none: if one is held, it releases the
// ones it took and returns that key. It never waits for a key's lock; it
// holds the table's mutex throughout, which lock and unlock only hold
// briefly, so the reference counts change atomically with the locking.
func (t *lockTable) tryLock(sortedKeys []string) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.locks == nil {
		t.locks = map[string]*keyLock{}
	}
	for i, key := range sortedKeys {
		l := t.locks[key]
		if l == nil {
			l = &keyLock{}
			t.locks[key] = l
		}
		if !l.mu.TryLock() {
			if l.refs == 0 {
				delete(t.locks, key)
			}
			for _, taken := range sortedKeys[:i] {
				tl := t.locks[taken]
				tl.mu.Unlock()
				tl.refs--
				if tl.refs == 0 {
					delete(t.locks, taken)
				}
			}
			return key, false
		}
		l.refs++
	}
	return "", true
}
