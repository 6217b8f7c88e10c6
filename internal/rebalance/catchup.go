package rebalance

import (
	"slices"

	"github.com/tyrstore/tyr/internal/ring"
)

// The rules of this file decide how a replica that is behind catches up
// and when a commit may pass through it without being applied. A node
// (internal/node) and the simulation (internal/sim) both call them, so the
// simulation checks the rules that ship: each caller supplies what it
// knows of the cluster (who is alive, who is catching up, who holds what)
// as functions, and formats its own errors.

// Sources returns the nodes a catch-up may copy chunk c of key from under
// p at replication factor rf: its read replicas, and others by the phase
// of a ring change. old is the ring before the current change while its
// owners, no longer written to, still hold what they gave up (PhaseActive
// until the drain ends); nil otherwise.
//
//   - While ranges are copied (PhaseInstalling, PhaseCopying), the new
//     owners, apart (stale): they take every write, and one that staged a
//     commit was in step with the first replica's copy, so it may hold a
//     commit that every read replica lost its stage of (a crash after the
//     new owner, as the tail, decided it). Only a newer copy of theirs
//     counts.
//   - While reads switch to the new ring (PhaseSwitching), the old ring's
//     replicas, among reps: they take every write until the new owners are
//     all in step, and a new owner left out of a commit may have no other
//     new owner to copy it from.
//   - Once writes left the old owners (PhaseActive), and until they delete
//     what they gave up, the old owners, apart (stale): they hold every
//     commit begun before, which a new owner may have missed (its stage
//     lost in a crash), but not those begun since, so only a newer copy of
//     theirs counts.
//
// An old ring that cannot place the chunk adds nothing.
func (p Placement) Sources(seed uint64, key string, c uint64, rf int, old *ring.Ring) (reps, stale []ring.NodeID, err error) {
	reps, err = p.Read.Replicas(seed, key, c, rf)
	if err != nil {
		return nil, nil, err
	}
	other, full := old, false
	if p.Also != nil {
		other, full = p.Also, !p.Gains()
	}
	if other == nil {
		return reps, nil, nil
	}
	owners, err := other.Replicas(seed, key, c, min(rf, other.Len()))
	if err != nil {
		return reps, nil, nil
	}
	for _, id := range owners {
		switch {
		case slices.Contains(reps, id):
		case full:
			reps = append(reps, id)
		default:
			stale = append(stale, id)
		}
	}
	return reps, stale, nil
}

// Source is a node to copy from, and whether it was up to date (alive
// and not catching up) when chosen.
type Source struct {
	ID    ring.NodeID
	Ready bool
}

// Order returns the order in which node self tries the sources reps and
// stale (Sources): the members of reps that are alive and not catching up
// (ready), then the live members of stale (never ready: only a newer copy
// of theirs counts), then the live members of reps catching up; each group
// sorted, never self.
func Order(self ring.NodeID, reps, stale []ring.NodeID, alive, catchingUp func(ring.NodeID) bool) []Source {
	var ready, old, rest []Source
	for _, id := range slices.Sorted(slices.Values(reps)) {
		switch {
		case id == self || !alive(id):
		case catchingUp(id):
			rest = append(rest, Source{id, false})
		default:
			ready = append(ready, Source{id, true})
		}
	}
	for _, id := range slices.Sorted(slices.Values(stale)) {
		if id != self && alive(id) {
			old = append(old, Source{id, false})
		}
	}
	return slices.Concat(ready, old, rest)
}

// Answer is how a source answered a catch-up's request for its copy of a
// blob.
type Answer int

const (
	// Behind: the source's copy is before the version wanted (that of a
	// commit which passed through the asking node). It may never get it
	// (it lost its stage, every replica having failed at once) while
	// another source has it.
	Behind Answer = iota
	// Failed: the copy failed otherwise (the source is unreachable, say).
	Failed
	// Took: the asking node took the copy, or found nothing to take.
	Took
	// Lost: the source's copy is behind the version wanted because the
	// source lost its stage of that commit in a restart (it was told of
	// the commit only afterwards: chain.ErrStageLost). It is up to date
	// otherwise and holds no commit of the blob in flight, so it will
	// never have the version. Only an up-to-date source answers so.
	Lost
)

// Mark is what a copy of a blob (a ring change's, or a catch-up's) waits
// for, as the commits that passed through the copying node marked it: the newest
// version one left (0 while undecided), the commit ID that left it, and
// how many marks the blob got. A copy clears a mark only if it is still
// the one the copy began with, so that one added meanwhile is copied too:
// a commit marked after a newer one is covered by the newer version,
// unless every source lost that one (Lost) and the copy took a copy
// without it.
type Mark[ID comparable] struct {
	Version uint64
	Txn     ID
	Marks   uint64
}

// Add is m marked by the commit id, which left version.
func (m Mark[ID]) Add(version uint64, id ID) Mark[ID] {
	if version > m.Version {
		m.Version, m.Txn = version, id
	}
	m.Marks++
	return m
}

// BehindAnswer is the answer of a source whose copy is behind the version
// wanted: Lost if it is up to date (ready), no commit of the blob holds
// the blob's lock there (locked: one may still bring the version), and it
// recorded that it missed the commit wanted (missed: it lost its stage of
// it in a restart, mvcc.Store.PutMissed); otherwise Behind.
func BehindAnswer(ready, locked, missed bool) Answer {
	if ready && !locked && missed {
		return Lost
	}
	return Behind
}

// Settle is Refresh's answer a as the caller acts on it, for the sources
// Order drew from reps and stale: Lost only if every one of them but self
// is alive, so that Order dropped none. A replica that is down may hold
// the commit wanted, and the caller waits for it (Behind).
func Settle(a Answer, self ring.NodeID, reps, stale []ring.NodeID, alive func(ring.NodeID) bool) Answer {
	down := func(id ring.NodeID) bool { return id != self && !alive(id) }
	if a == Lost && (slices.ContainsFunc(reps, down) || slices.ContainsFunc(stale, down)) {
		return Behind
	}
	return a
}

// Refresh asks sources, in the order given (Order), for their copy of a
// blob until one decides, and returns the answer that counts. A source
// behind the version wanted, or that lost it, is passed over. An
// up-to-date source (ready, as it answered: membership may not show yet
// that it is catching up) that answers otherwise decides. A source that is
// not up to date gives only a newer copy, and a later one may have a newer
// one still, so all of them are asked: then Refresh answers Took if any
// copy was taken, and otherwise the last source's answer. Lost counts only
// if every source was asked and answered Behind or Lost, one at least
// Lost: then no source has the commit wanted or may still get it, and the
// caller takes a copy without it (the commit is lost with the stages of
// every replica that held it, the "f = r" case).
func Refresh(srcs []Source, ask func(Source) (a Answer, ready bool)) Answer {
	last, took, lost, other := Failed, false, false, false
	for _, src := range srcs {
		a, ready := ask(src)
		switch {
		case a == Behind:
		case a == Lost:
			lost = true
		case ready:
			return a
		case a == Took:
			took = true
		}
		other = other || (a != Behind && a != Lost)
		last = a
	}
	switch {
	case took:
		return Took
	case lost && !other:
		return Lost
	case last == Lost:
		return Behind
	}
	return last
}

// LeftToCopy reports whether a node that passes a commit through for a
// blob it gains under r may leave the blob to its copy of the epoch's
// ranges, the last epoch whose copy ended there being closed: only while
// that copy runs. Once it ended, nothing fetches the blob again in this
// epoch, in any phase: the node must catch up instead. (A commit that
// passed through while the copy ran may be decided after the copy
// ended, once reads switched to the node.)
func (r Record) LeftToCopy(closed uint64) bool { return closed != r.Epoch }

// Keeping is the verdict of Keeps on a part (a chunk, or in the simulation
// a key) that a chain member, behind on it, would let a commit pass
// through without applying.
type Keeping int

const (
	// Kept: the commit is decided only with the part kept elsewhere, or
	// the member is the tail, whose chain refuses a commit it is behind
	// on (chain.ErrBehind).
	Kept Keeping = iota
	// NoChain: the commit names no chain to judge by.
	NoChain
	// TailLacks: the member serves reads of the part and the chain's tail
	// does not hold it.
	TailLacks
	// SoleHolder: the member only gains the part in a ring change and no
	// other member holding it is up to date.
	SoleHolder
)

// Keeps judges whether node self may let a commit pass through it without
// applying a part it holds and is behind on. The tail's commit is the only
// stage durable when the commit is decided; the other members keep theirs
// in memory until the Backward reaches them, and a re-execution may leave
// them out. So for a part self serves reads of (serves), the tail must
// hold it too: it applies the change durably before deciding, or refuses
// the commit if it is behind as well. For a part self only gains in a
// ring change, an extra replica beside those serving it, another member
// of chain that holds it (holds) and is not catching up is enough.
func Keeps(self ring.NodeID, chain []ring.NodeID, serves bool, holds, catchingUp func(ring.NodeID) bool) Keeping {
	if len(chain) == 0 {
		return NoChain
	}
	tail := chain[len(chain)-1]
	switch {
	case tail == self:
		return Kept
	case serves && holds(tail):
		return Kept
	case serves:
		return TailLacks
	}
	for _, id := range chain {
		if id != self && holds(id) && !catchingUp(id) {
			return Kept
		}
	}
	return SoleHolder
}

// OnlyGains reports whether a member, behind on the blobs keys of a
// commit, gains every one of them in the current move: it serves reads of
// none (serves), and reads have not switched (Gains). Such a member leaves
// them to the move's copy rather than catching up as a whole.
func (p Placement) OnlyGains(keys []string, serves func(key string) bool) bool {
	return p.Gains() && !slices.ContainsFunc(keys, serves)
}
