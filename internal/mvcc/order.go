package mvcc

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/tyrstore/tyr/internal/txn"
)

// Ordering blind updates of a blob.
//
// A staged commit holds its blobs' locks until its chain decides it, which
// takes a round trip down the chain and back. A second commit that finds a
// blob locked is refused (ErrLocked) and its coordinator tries again later,
// so on a hot blob the commits take turns, one round trip each, and most
// tries are wasted.
//
// Blind updates need not wait. A commit whose every op on a blob is an
// atomic op or a write that ends inside the blob (no read check, no
// compare-and-swap, nothing that changes the blob's size or existence)
// cannot fail on that blob because of what the commits staged before it do
// there: those are such updates too, so the blob exists and has the same
// size whatever they decide. Such a commit joins the blob's queue instead of
// being refused, is validated at once, and travels down its chain while the
// commits before it are still undecided. Whether a write ends inside the
// blob is known only once the blob's record is read, so a commit is queued
// provisionally and checked after it is prepared: one that turns out to
// change the size leaves the queue (refused if it joined behind another,
// holding the blob alone if it started the queue), and no commit joins a
// queue whose first commit is not checked yet.
//
// A queued commit is applied only after each commit ahead of it has been
// committed or aborted on this store (Pending.Ready), on the blob as they
// left it (Pending.Rebase): the ordering of conflicting transactions the
// chain protocol of Týr (after Warp) keeps in a dependency graph, here one
// queue per blob.
//
// Invariants:
//
//  1. A queue holds commits in increasing version order: a commit joins only
//     above the last one's version. So on every store a blob's commits apply
//     in version order, the same order everywhere, and a commit only ever
//     waits for commits of lower versions, which never wait for it: no
//     cycle, no deadlock.
//  2. Every checked commit in a queue applies only atomic ops and writes
//     to the blob and keeps its size and existence, which are therefore
//     those of the last commit before the queue, and a commit validated
//     against them stays valid whatever the others decide.
//  3. The key's mutex is held while the queue is not empty; blocking
//     lockers (reads that count a use, catch-up, Settle) wait for the queue
//     to drain, and while one waits no commit joins, so it does drain.
//     Likewise, once a commit that may not queue (a read-modify-write, a
//     compare-and-swap) is refused because of the queue, no commit joins
//     until it drains, so the refused one is not starved by a stream of
//     blind updates.
//
// A queue is bounded (QueueMax): beyond it, or when the versions are out of
// order, a commit is refused as before and its coordinator tries again.
//
// Reads do not conflict with reads: commits that only read-check a blob
// hold it together (keyLock.readers), in any order, since none changes it.
// A commit that changes the blob is refused while they hold it, and one
// that read-checks it is refused while a commit that changes it holds it:
// a transaction may not read what an undecided one writes, nor write what
// an undecided one read.

// QueueMax bounds the commits queued on one blob (see "Ordering").
const QueueMax = 64

// ErrNotReady is Pending.Rebase's error for a commit queued behind commits
// still staged on this store: it must wait until Ready.
var ErrNotReady = errors.New("commit queued behind undecided commits of the same blob")

// ticket is a commit's place in the queues of the blobs it holds shared.
type ticket struct {
	version uint64
	// blind are the blobs the commit applies only atomic ops and writes
	// to: those it may queue on.
	blind map[string]bool
	// checked is set once the commit is prepared and known to keep the
	// size of every blob it queues on.
	checked bool
	// read are the blobs the commit only read-checks, reads those it holds
	// together with other such commits.
	read  map[string]bool
	reads []string
	// shared are the blobs it holds in a queue; behind is whether it
	// joined one after another commit, and so must be rebased.
	shared []string
	behind bool
	// ahead are, per blob, the versions queued before it when it joined.
	ahead map[string][]uint64
}

// newTicket returns the ticket of a commit at version, or nil if the commit
// holds every blob alone: its version is not fixed, or no blob gets only
// blind updates or only read checks from it.
func newTicket(ops []txn.Op, version uint64) *ticket {
	if version == 0 {
		return nil
	}
	blind := onlyOps(ops, func(op txn.Op) bool { return op.Kind == txn.OpAtomic || op.Kind == txn.OpWrite })
	read := onlyOps(ops, func(op txn.Op) bool { return op.Kind == txn.OpReadCheck })
	if len(blind) == 0 && len(read) == 0 {
		return nil
	}
	return &ticket{version: version, blind: blind, read: read, ahead: map[string][]uint64{}}
}

// onlyOps returns the blobs whose every op in ops is one that ok accepts.
func onlyOps(ops []txn.Op, ok func(txn.Op) bool) map[string]bool {
	only := map[string]bool{}
	for _, op := range ops {
		if was, seen := only[op.Key]; !seen || was {
			only[op.Key] = ok(op)
		}
	}
	for key, yes := range only {
		if !yes {
			delete(only, key)
		}
	}
	return only
}

// mayJoin reports whether the commit may join l's queue (see "Ordering").
// The caller holds the lock table's mutex.
func (tk *ticket) mayJoin(l *keyLock) bool {
	n := len(l.queue)
	return n > 0 && n < QueueMax && l.queue[0].checked && l.waiting == 0 && !l.wanted &&
		tk.version > l.queue[n-1].version
}

// check settles a provisional ticket once its commit is prepared: it keeps
// its place on the blobs whose size and existence the commit keeps, and
// gives up the others (see "Ordering"). If it joined a queue behind another
// commit on a blob it changes otherwise, it fails: the commit must be
// refused. On a blob it started the queue of, it holds the blob alone.
func (t *lockTable) check(tk *ticket, keeps func(key string) bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	shared := tk.shared[:0]
	for _, key := range tk.shared {
		l := t.locks[key]
		switch {
		case keeps(key):
			shared = append(shared, key)
		case l.queue[0] != tk:
			return false
		default:
			// Started the queue; nobody joined it, since tk was not
			// checked: hold the key alone.
			l.queue = nil
		}
	}
	tk.shared = shared
	tk.checked = true
	return true
}

// reset forgets the queues of a lock attempt that failed.
func (tk *ticket) reset() {
	if tk != nil {
		tk.shared, tk.reads, tk.behind = nil, nil, false
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

// Waits describes the commit's place in the queues it holds, for the logs:
// per blob, the versions queued there (checked ones marked so) with its
// own in brackets.
func (p *Pending) Waits() string {
	if p.ticket == nil {
		return fmt.Sprintf("holds its blobs alone (%d)", len(p.keys))
	}
	t := &p.store.locks
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "version %d behind=%t rebased=%t", p.ticket.version, p.ticket.behind, p.rebased)
	for _, key := range p.ticket.shared {
		l := t.locks[key]
		fmt.Fprintf(&b, "; blob %q waiting=%d wanted=%t queue", key, l.waiting, l.wanted)
		for _, tk := range l.queue {
			v := strconv.FormatUint(tk.version, 10)
			if !tk.checked {
				v += "?"
			}
			if tk == p.ticket {
				v = "[" + v + "]"
			}
			b.WriteString(" " + v)
		}
	}
	if len(p.ticket.reads) > 0 {
		fmt.Fprintf(&b, "; reads %q", p.ticket.reads)
	}
	return b.String()
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
		// at Prepare, nothing they depend on changed, and the version
		// check is not made again.
		return fmt.Errorf("rebasing a queued commit: %w", err)
	}
	_ = p.batch.Close()
	p.batch, p.results, p.rebased = q.batch, q.results, true
	return nil
}
