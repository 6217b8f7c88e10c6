package mvcc

import (
	"errors"
	"fmt"

	"github.com/tyrstore/tyr/internal/txn"
)

// Ordering commits that only apply atomic ops.
//
// A staged commit holds its blobs' locks until its chain decides it, which
// takes a round trip down the chain and back. A second commit that finds a
// blob locked is refused (ErrLocked) and its coordinator tries again later,
// so on a hot blob the commits take turns, one round trip each, and most
// tries are wasted.
//
// Atomic ops need not wait. A commit whose every op on a blob is an atomic
// op (no read check, no compare-and-swap, nothing that changes the blob's
// size) cannot fail on that blob because of what the commits staged before
// it do there: those are atomic ops too, so the blob exists and has the same
// size whatever they decide. Such a commit joins the blob's queue instead of
// being refused, is validated at once, and travels down its chain while the
// commits before it are still undecided. It is applied only after each of
// them has been committed or aborted on this store (Pending.Ready), on the
// blob as they left it (Pending.Rebase): the ordering of conflicting
// transactions the chain protocol of Týr (after Warp) keeps in a dependency
// graph, here one queue per blob.
//
// Invariants:
//
//  1. A queue holds commits in increasing version order: a commit joins only
//     above the last one's version. So on every store a blob's commits apply
//     in version order, the same order everywhere, and a commit only ever
//     waits for commits of lower versions, which never wait for it: no
//     cycle, no deadlock.
//  2. Every commit in a queue applies only atomic ops to the blob, so its
//     size and existence are those of the last commit before the queue, and
//     a commit validated against them stays valid whatever the others
//     decide.
//  3. The key's mutex is held while the queue is not empty; blocking
//     lockers (reads that count a use, catch-up, Settle) wait for the queue
//     to drain, and while one waits no commit joins, so it does drain.
//     Likewise, once a commit that may not queue (a read-modify-write, a
//     compare-and-swap) is refused because of the queue, no commit joins
//     until it drains, so the refused one is not starved by a stream of
//     atomic ops.
//
// A queue is bounded (QueueMax): beyond it, or when the versions are out of
// order, a commit is refused as before and its coordinator tries again.

// QueueMax bounds the commits queued on one blob (see "Ordering").
const QueueMax = 64

// ErrNotReady is Pending.Rebase's error for a commit queued behind commits
// still staged on this store: it must wait until Ready.
var ErrNotReady = errors.New("commit queued behind undecided commits of the same blob")

// ticket is a commit's place in the queues of the blobs it holds shared.
type ticket struct {
	version uint64
	// atomic are the blobs the commit applies only atomic ops to.
	atomic map[string]bool
	// shared are the blobs it holds in a queue; behind is whether it
	// joined one after another commit, and so must be rebased.
	shared []string
	behind bool
	// ahead are, per blob, the versions queued before it when it joined.
	ahead map[string][]uint64
}

// newTicket returns the ticket of a commit at version, or nil if the commit
// may not queue: its version is not fixed, or it applies only atomic ops to
// no blob.
func newTicket(ops []txn.Op, version uint64) *ticket {
	if version == 0 {
		return nil
	}
	atomic := map[string]bool{}
	for _, op := range ops {
		if _, seen := atomic[op.Key]; !seen {
			atomic[op.Key] = true
		}
		if op.Kind != txn.OpAtomic {
			atomic[op.Key] = false
		}
	}
	for key, ok := range atomic {
		if !ok {
			delete(atomic, key)
		}
	}
	if len(atomic) == 0 {
		return nil
	}
	return &ticket{version: version, atomic: atomic, ahead: map[string][]uint64{}}
}

func (tk *ticket) atomicOnly(key string) bool { return tk.atomic[key] }

// mayJoin reports whether the commit may join l's queue (see "Ordering").
// The caller holds the lock table's mutex.
func (tk *ticket) mayJoin(l *keyLock) bool {
	n := len(l.queue)
	return n > 0 && n < QueueMax && l.waiting == 0 && !l.wanted && tk.version > l.queue[n-1].version
}

// reset forgets the queues of a lock attempt that failed.
func (tk *ticket) reset() {
	if tk != nil {
		tk.shared, tk.behind = nil, false
		clear(tk.ahead)
	}
}

// first reports whether tk heads every queue it is in.
func (t *lockTable) first(tk *ticket) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, key := range tk.shared {
		if t.locks[key].queue[0] != tk {
			return false
		}
	}
	return true
}

// Ready reports whether the commit may be applied: every commit queued
// before it on a blob has been committed or aborted here.
func (p *Pending) Ready() bool {
	return p.ticket == nil || !p.ticket.behind || p.rebased || p.store.locks.first(p.ticket)
}

// Rebase builds the commit anew on the blobs as the commits queued before it
// left them, once it is Ready (ErrNotReady before). Its results change with
// the values its atomic ops find. Commit calls it; a caller that records
// the results with the commit calls it first. It does nothing for a commit
// that queued behind no other, and after its first success. On error, the
// commit is as before and may still be aborted.
func (p *Pending) Rebase() error {
	if p.ticket == nil || !p.ticket.behind || p.rebased {
		return nil
	}
	if !p.store.locks.first(p.ticket) {
		return ErrNotReady
	}
	o := p.opts
	o.rebase = true
	q, err := p.store.prepareLocked(p.ops, p.keys, o)
	if err != nil {
		// Invariant 2 rules this out: the checks that could fail passed
		// at Prepare and nothing they depend on changed.
		return fmt.Errorf("rebasing a queued commit: %w", err)
	}
	_ = p.batch.Close()
	p.batch, p.results, p.rebased = q.batch, q.results, true
	return nil
}
