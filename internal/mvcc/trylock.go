package mvcc

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/txn"
)

// TryPrepare is Prepare for callers that must not wait, such as a chain
// replica stepping its state machine (see chain.Stager): if another
// transaction holds the lock of any blob ops touch, it returns an error
// wrapping errs.ErrConflict at once. On error nothing is held and nothing
// changed.
func (s *Store) TryPrepare(ops []txn.Op) (*Pending, error) {
	return s.TryPrepareAt(ops, 0)
}

// ErrLocked is wrapped, with errs.ErrConflict, by TryPrepare's error for a
// blob whose lock another transaction holds: the commit may succeed if
// tried again.
var ErrLocked = errors.New("blob locked by another transaction")

// StaleVersionError is TryPrepareAt's refusal of a version that is not
// above what the store holds. It wraps errs.ErrConflict; a coordinator
// tries again with a version above Floor.
type StaleVersionError struct {
	Key     string
	Version uint64 // the version asked for
	Floor   uint64 // the version must exceed this
}

func (e *StaleVersionError) Error() string {
	return fmt.Sprintf("%v: blob %q: commit version %d is not above %d", errs.ErrConflict, e.Key, e.Version, e.Floor)
}

func (e *StaleVersionError) Unwrap() error { return errs.ErrConflict }

// TryPrepareAt is TryPrepare with the new version of every changed blob
// fixed by the caller (0: drawn from the store's clock). The members of a
// replicated commit all store it under the version its coordinator chose,
// so a version names the same commit on every replica. The version must
// exceed each changed blob's current version, and, for a blob that does not
// exist here, the version of every record this store removed and every
// version a pending collector record names (which keeps a blob's versions
// increasing, and page keys unique, across a delete and re-create, see
// Open); otherwise the commit is refused with a *StaleVersionError.
// Commits creating different blobs never refuse each other here.
func (s *Store) TryPrepareAt(ops []txn.Op, version uint64) (*Pending, error) {
	return s.TryPrepareStep(ops, Step{Version: version})
}

// BaseMismatchError is TryPrepareStep's refusal of a commit whose blob is not
// at the version the chain's head had: the two replicas differ, and the
// commit would not apply to the same state here. It wraps errs.ErrConflict.
type BaseMismatchError struct {
	Key  string
	Have uint64 // this store's version (0: absent)
	Want uint64 // the head's version (0: absent)
}

func (e *BaseMismatchError) Error() string {
	return fmt.Sprintf("%v: blob %q is at version %d here and at version %d on the chain's head (0: absent)",
		errs.ErrConflict, e.Key, e.Have, e.Want)
}

func (e *BaseMismatchError) Unwrap() error { return errs.ErrConflict }

// Step is what a chain member's store is told about a commit.
type Step struct {
	// Version is the commit's version (see TryPrepareAt); 0 draws one.
	Version uint64
	// Bases are the records the chain's version managers found (see Base):
	// a version manager of a blob checks that its record is at the Base's
	// version, any other member applies the commit to the Base and checks
	// its chunks against it. A blob without a Base is checked by no one,
	// and this store's record is the Base it hands on (Pending.Bases).
	Bases map[string]Base
	// Placement says which chunks this store keeps; nil: all of them.
	Placement Placement
	// Fetched are the blobs whose Base the chain's coordinator fetched
	// from a version manager before the commit began, for a chain in
	// which some holder of a blob's changed chunks comes before every
	// version manager of it (chain.ErrNoOrder). This store, the first
	// version manager of such a blob in the chain, accepts the Base only
	// if its record is still at that version with no commit queued ahead
	// (else it refuses, as locked: the coordinator fetches it again), and
	// hands its own record on.
	Fetched map[string]bool
	// Strict accepts a blob only at its Base, never at one of the
	// versions queued ahead on the version manager (Base.Ahead): for a
	// store that may have missed commits (a member catching up). A store
	// in step stages every commit of the Ahead list that commits, so the
	// commit waits for them here; one that was left out of such a commit
	// would apply this one without it, computing other values and holding
	// other bytes under the same version. A strict store refuses any Base
	// with commits ahead as one it is behind.
	Strict bool
}

// parts returns the keys this member has a part in: those it manages and
// those it was given a Base for. A blob it neither manages nor got a Base
// for comes before the blob's base member in the chain (chain.Order), and
// a member there holds nothing the commit changes of it: it passes the
// blob by, neither locking nor changing it, and its results for the
// blob's ops are Unheld (a later member's take their place). If the chain
// was planned from a wrong size and this member does hold a changed chunk
// of the blob, the base member finds it before the blob's holders in the
// chain and refuses the commit (node.checkCovered).
func (st Step) parts(keys []string) []string {
	if st.Placement == nil || brokenNoBase {
		return keys
	}
	return slices.DeleteFunc(keys, func(key string) bool {
		_, given := st.Bases[key]
		return !given && !st.Placement.Manages(key)
	})
}

// TryPrepareStep is TryPrepareAt for a member of a chain. A blob this store
// manages that is not at the version its Base names is refused with a
// *BaseMismatchError, a held chunk out of step with it with a
// *ChunkMismatchError; nothing is held then. A blob this store does not
// manage and got no Base for is passed by (see parts).
func (s *Store) TryPrepareStep(ops []txn.Op, st Step) (*Pending, error) {
	keys, err := commitKeys(ops)
	if err != nil {
		return nil, err
	}
	keys = st.parts(keys)
	tk := newTicket(ops, st.Version)
	if busy, ok := s.locks.tryLock(keys, tk); !ok {
		return nil, fmt.Errorf("%w: %w: blob %q", errs.ErrConflict, ErrLocked, busy)
	}
	o := prepareOpts{version: st.Version, bases: st.Bases, placement: st.Placement, strict: st.Strict, fetched: st.Fetched}
	if tk != nil {
		o.queued = tk.ahead
	}
	p, err := s.prepareLocked(ops, keys, o)
	if err != nil {
		s.locks.release(keys, tk)
		return nil, err
	}
	p.ticket, p.ops, p.opts = tk, ops, o
	if tk != nil && !s.locks.check(tk, func(key string) bool { return p.kept[key] }) {
		p.Abort()
		return nil, fmt.Errorf("%w: %w: a blob queued on changes size or existence; it waits for the commits before it", errs.ErrConflict, ErrLocked)
	}
	if tk != nil {
		for key, ahead := range tk.ahead {
			if _, given := st.Bases[key]; !given || st.Fetched[key] {
				b := p.bases[key]
				b.Ahead = ahead
				p.bases[key] = b
			}
		}
	}
	return p, nil
}

// tryLock locks all of sortedKeys, or none: if one is held, it releases the
// ones it took and returns that key. It never waits for a key's lock; it
// holds the table's mutex throughout, which lock and release only hold
// briefly, so the reference counts and queues change atomically with the
// locking. With a ticket, a key the commit only updates blindly is held in a
// queue that later such commits may join, and one it only read-checks is
// held together with other commits that only read-check it (see order.go).
func (t *lockTable) tryLock(sortedKeys []string, tk *ticket) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, key := range sortedKeys {
		l := t.entry(key)
		blind := tk != nil && tk.blind[key]
		reader := tk != nil && tk.read[key]
		switch {
		case l.mu.TryLock():
			if blind {
				l.queue = []*ticket{tk}
				tk.shared = append(tk.shared, key)
			} else if reader {
				l.readers = 1
				tk.reads = append(tk.reads, key)
			}
		case blind && tk.mayJoin(l):
			for _, before := range l.queue {
				tk.ahead[key] = append(tk.ahead[key], before.version)
			}
			l.queue = append(l.queue, tk)
			tk.shared = append(tk.shared, key)
			tk.behind = true
		case reader && l.readers > 0 && l.waiting == 0 && !l.wanted:
			l.readers++
			tk.reads = append(tk.reads, key)
		default:
			if (!blind && len(l.queue) > 0) || (!reader && l.readers > 0) {
				l.wanted = true
			}
			l.refs--
			if l.refs == 0 {
				delete(t.locks, key)
			}
			for _, taken := range sortedKeys[:i] {
				t.releaseLocked(taken, tk)
			}
			tk.reset()
			return key, false
		}
	}
	return "", true
}

// lockWithin locks sortedKeys, waiting at most d for them in turn with
// the other waiters; it reports whether it did (on false nothing is held:
// a lock taken after the deadline is released at once).
func (t *lockTable) lockWithin(sortedKeys []string, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		t.lock(sortedKeys)
		close(done)
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
		return true
	case <-timer.C:
		go func() {
			<-done
			t.unlock(sortedKeys)
		}()
		return false
	}
}
