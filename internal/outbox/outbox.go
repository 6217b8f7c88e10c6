// Package outbox holds a node's outputs until the writes made before them
// are durable: the deterministic half of group commit.
//
// A chain member writes a commit without waiting for its fsync, so that
// one sync can cover many commits (chain.Output.MustSync). What the member
// then says about the commit (a Backward upstream, an Ack downstream, a
// Reply to the coordinator) must not leave the node before the write is
// durable: a crash in between would lose a commit the rest of the chain
// was told of. The Outbox is where that rule lives. The edge reports each
// write (Wrote) and puts each output in (Put); it gets back at once only
// outputs that no unsynced write precedes. It asks for one sync at a time
// (StartSync), which must cover every write reported before the call, and
// reports its end (Synced), which releases the outputs it covered, in the
// order they were put.
//
// Invariants, asserted by panics with an *AssertionError:
//
//  1. An output is released only once every write reported before it was
//     put is covered by a finished sync.
//  2. Outputs leave in the order they were put.
//  3. At most one sync is in flight, and Synced ends the one that began.
//
// The node (internal/node) and the simulation (internal/sim) both run it;
// a crash loses what it holds (Drop).
package outbox

import "fmt"

// AssertionError reports a broken invariant of the Outbox: a bug in its
// caller, not an operating error.
type AssertionError struct{ Invariant string }

func (e *AssertionError) Error() string { return "outbox: invariant broken: " + e.Invariant }

// Outbox holds outputs of type T. The zero value is empty and ready. It is
// not safe for concurrent use.
type Outbox[T any] struct {
	// written counts the writes reported; synced is the count a finished
	// sync covered, and syncing the one covered by the sync in flight, 0
	// when none is.
	written, synced, syncing uint64
	held                     []held[T]
}

type held[T any] struct {
	after uint64 // written when put: the writes that must be durable first
	item  T
}

// Wrote reports a write that every output put after it must wait for.
func (o *Outbox[T]) Wrote() { o.written++ }

// Mark returns the count of writes reported so far, for Covers.
func (o *Outbox[T]) Mark() uint64 { return o.written }

// Covers reports whether a finished sync covered every write reported
// before Mark returned mark.
func (o *Outbox[T]) Covers(mark uint64) bool { return o.synced >= mark }

// Put adds items, put after every write reported so far, and returns those
// that may leave now, in order: all of them when nothing written is
// unsynced and nothing is held, none otherwise.
func (o *Outbox[T]) Put(items ...T) []T {
	if brokenSendBeforeSync || (o.written == o.synced && len(o.held) == 0) {
		return items
	}
	for _, it := range items {
		o.held = append(o.held, held[T]{after: o.written, item: it})
	}
	return nil
}

// StartSync begins a sync when writes are unsynced and none is in flight.
// It returns the count of writes the sync must cover: the caller makes
// every write reported so far durable, then calls Synced with it.
func (o *Outbox[T]) StartSync() (upTo uint64, ok bool) {
	if o.syncing != 0 || o.written == o.synced {
		return 0, false
	}
	o.syncing = o.written
	return o.syncing, true
}

// Synced ends the sync StartSync began, which returned upTo, and returns
// the outputs it released, in the order they were put.
func (o *Outbox[T]) Synced(upTo uint64) []T {
	if o.syncing == 0 || upTo != o.syncing {
		panic(&AssertionError{Invariant: fmt.Sprintf("Synced(%d) while the sync in flight covers %d (0: none)", upTo, o.syncing)})
	}
	o.synced, o.syncing = upTo, 0
	n := 0
	for n < len(o.held) && o.held[n].after <= o.synced {
		n++
	}
	out := make([]T, n)
	for i := range n {
		out[i] = o.held[i].item
	}
	o.held = o.held[n:]
	if len(o.held) == 0 {
		o.held = nil
	}
	return out
}

// Drop forgets everything, as a crash does: the held outputs never leave,
// and the writes they waited for may be lost. It returns how many outputs
// it dropped.
func (o *Outbox[T]) Drop() int {
	n := len(o.held)
	*o = Outbox[T]{}
	return n
}
