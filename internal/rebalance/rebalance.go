// Package rebalance is the core of online ring changes: the ring epochs a
// ring coordinator publishes, the moves of token ranges between them, the
// rules by which an epoch advances, and where chunks go while their range
// moves. It is pure and deterministic like internal/ring: no goroutines,
// clock, randomness or I/O, and no output depends on map order or on the
// order of its input. internal/node stores the records, spreads them and
// moves the data.
//
// # Epochs and phases
//
// A Record is one ring change: the ring before (Old) and after (New), the
// nodes that gain token ranges (Moves), and a Phase. Epochs are numbered by
// the coordinator, one after another; epoch 1 is the first ring (Old empty).
// An epoch goes through these phases, each entered only once every member
// that must acknowledge has acknowledged the one before (Required):
//
//   - Installing: writes go to the owners under Old and under New (the
//     union: a moving range's chain holds its old and new owners); reads
//     stay on Old's owners. Nothing is copied yet, so that every commit
//     chained after the copy starts includes the new owners.
//   - Copying: the same placement; every node in Moves copies the blobs of
//     the ranges it gains from their Old owners, in the background.
//   - Switching: entered when every move is copied, by every node gaining
//     ranges, including one that is down: the change waits for it. Writes still go to the
//     union; reads go to New's owners, which now hold every commit. Nodes
//     still in Copying read Old's owners, which hold every commit too.
//   - Active: writes and reads on New's owners only. Entered once every
//     member reads from New (acknowledged Switching), so no reader is left
//     on an owner that no longer takes writes, and every member of New is
//     up and in step: a new owner catching up (it missed a commit, say,
//     taken for dead) copies from the old owners while they still take
//     every write.
//   - Clean: entered once every member acknowledged Active and drained it
//     (Drain), and every member of New is again up and in step: no node
//     sends anything to the old owners any more, which now delete what
//     they no longer hold. A new epoch may be proposed only from Clean,
//     acknowledged everywhere.
//
// The drain closes a gap between Active and Clean: a commit chained before
// Active may still be on its way through a new owner, staged there but not
// yet committed, or committed but not yet durable (a member syncs commits
// in groups, after writing them). Were the old owners to delete their
// copies then, a crash of that new owner would lose the commit with no
// copy left to catch up from. So each member, once it learns of Active,
// waits for every commit it then held staged to finish and for a sync
// after the last of them, and only then reports the phase drained. A
// member that restarts meanwhile lost those stages; it catches up before
// it is in step again, from old owners that still hold everything. A
// commit that stays undecided at a member (its chain waits on a member
// taken for dead, say) holds the change in Active until it is decided.
//
// A member that may have missed commits stays excluded from reads until
// caught up, as before: a new owner is never a read target before Switching,
// and the copy in Copying is a catch-up restricted to the ranges gained.
package rebalance

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/ring"
)

// Phase is an epoch's phase; see the package comment.
type Phase uint8

// Phases, in order.
const (
	PhaseInstalling Phase = 1 + iota
	PhaseCopying
	PhaseSwitching
	PhaseActive
	PhaseClean
)

func (p Phase) String() string {
	switch p {
	case PhaseInstalling:
		return "installing"
	case PhaseCopying:
		return "copying"
	case PhaseSwitching:
		return "switching"
	case PhaseActive:
		return "active"
	case PhaseClean:
		return "clean"
	default:
		return fmt.Sprintf("Phase(%d)", uint8(p))
	}
}

// Move is the token ranges one node gains in an epoch.
type Move struct {
	// To is the node that gains the ranges.
	To ring.NodeID `json:"to"`
	// From are the nodes that hold the ranges under Old and not under New,
	// sorted: those that give them up (empty when a replica is added
	// without one going, as when nodes join with fewer nodes than the
	// replication factor).
	From []ring.NodeID `json:"from,omitempty"`
	// Share is the fraction of the hash space, in [0, 1], for which To
	// becomes a replica at replication factor Record.Replication.
	Share float64 `json:"share"`
	// Copied is set once To has copied every blob of the ranges.
	Copied bool `json:"copied,omitempty"`
}

// State names the move's state in an epoch at phase p: copying, copied,
// active, or cleaned (the old owners deleted what they gave up).
func (m Move) State(p Phase) string {
	switch {
	case p >= PhaseClean:
		return "cleaned"
	case p >= PhaseActive:
		return "active"
	case m.Copied:
		return "copied"
	default:
		return "copying"
	}
}

// Record is one ring epoch.
type Record struct {
	// Epoch numbers the ring, from 1, one more at each change.
	Epoch uint64 `json:"epoch"`
	// Phase is how far the change has gone.
	Phase Phase `json:"phase"`
	// Coordinator is the node that proposed the epoch.
	Coordinator ring.NodeID `json:"coordinator"`
	// Old is the ring before the change, sorted by ID; empty for epoch 1.
	Old []ring.Node `json:"old,omitempty"`
	// New is the ring after the change, sorted by ID.
	New []ring.Node `json:"new"`
	// Replication is the largest replication factor of the keyspaces when
	// the epoch was proposed; it sizes the moves' Shares.
	Replication int `json:"replication"`
	// Moves are the nodes that gain ranges, sorted by To.
	Moves []Move `json:"moves,omitempty"`
	// Removed are the nodes decommissioned so far, sorted: the coordinator
	// never adds them back, even while they still run.
	Removed []ring.NodeID `json:"removed,omitempty"`
}

// Errors of Propose and Advance.
var (
	// ErrBusy: the previous epoch is not clean everywhere yet.
	ErrBusy = fmt.Errorf("rebalance: a ring change is still in progress (%w)", errs.ErrUnavailable)
	// ErrTooFewNodes: the new ring would have fewer nodes than a keyspace's
	// replication factor.
	ErrTooFewNodes = fmt.Errorf("rebalance: too few nodes (%w)", errs.ErrInvalidArgument)
	// ErrUnchanged: the proposed ring is the current one.
	ErrUnchanged = fmt.Errorf("rebalance: the ring already has these members and weights (%w)", errs.ErrInvalidArgument)
)

// Moving reports whether the record has two rings in use: its placement is
// the union of Old and New.
func (r Record) Moving() bool { return len(r.Old) > 0 && r.Phase < PhaseActive }

// ReadsNew reports whether reads go to New's owners.
func (r Record) ReadsNew() bool { return len(r.Old) == 0 || r.Phase >= PhaseSwitching }

// Newer reports whether r is further along than o: a later epoch, or the
// same epoch at a later phase.
func (r Record) Newer(o Record) bool {
	if r.Epoch != o.Epoch {
		return r.Epoch > o.Epoch
	}
	return r.Phase > o.Phase
}

// Members returns every node of Old and New, sorted, without repeats.
func (r Record) Members() []ring.NodeID {
	var ids []ring.NodeID
	for _, n := range r.Old {
		ids = append(ids, n.ID)
	}
	for _, n := range r.New {
		ids = append(ids, n.ID)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// InNew reports whether id is a member of the new ring.
func (r Record) InNew(id ring.NodeID) bool {
	return slices.ContainsFunc(r.New, func(n ring.Node) bool { return n.ID == id })
}

// Leaving returns the members of Old that are not in New, sorted.
func (r Record) Leaving() []ring.NodeID {
	var out []ring.NodeID
	for _, n := range r.Old {
		if !r.InNew(n.ID) {
			out = append(out, n.ID)
		}
	}
	return out
}

// Move returns id's move, if it gains ranges.
func (r Record) Move(id ring.NodeID) (Move, bool) {
	i, ok := slices.BinarySearchFunc(r.Moves, id, func(m Move, id ring.NodeID) int { return strings.Compare(string(m.To), string(id)) })
	if !ok {
		return Move{}, false
	}
	return r.Moves[i], true
}

// Validate reports every problem with r, or nil.
func (r Record) Validate() error {
	var problems []error
	if r.Epoch == 0 {
		problems = append(problems, errors.New("epoch 0"))
	}
	if r.Phase < PhaseInstalling || r.Phase > PhaseClean {
		problems = append(problems, fmt.Errorf("unknown phase %d", r.Phase))
	}
	if len(r.New) == 0 {
		problems = append(problems, errors.New("no node in the new ring"))
	}
	if len(r.Old) == 0 && r.Phase != PhaseClean {
		problems = append(problems, fmt.Errorf("a first ring at phase %v; it starts clean", r.Phase))
	}
	for _, nodes := range [][]ring.Node{r.Old, r.New} {
		if !slices.IsSortedFunc(nodes, compareNodes) {
			problems = append(problems, errors.New("nodes not sorted by ID"))
		}
		if _, err := ring.New(ring.Config{}, r.Epoch, nodes); len(nodes) > 0 && err != nil {
			problems = append(problems, err)
		}
	}
	if !slices.IsSortedFunc(r.Moves, func(a, b Move) int { return strings.Compare(string(a.To), string(b.To)) }) {
		problems = append(problems, errors.New("moves not sorted by destination"))
	}
	for _, m := range r.Moves {
		if !r.InNew(m.To) {
			problems = append(problems, fmt.Errorf("move to %q, which is not in the new ring", m.To))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("rebalance: %w: record of epoch %d: %w", errs.ErrInvalidArgument, r.Epoch, errors.Join(problems...))
}

func compareNodes(a, b ring.Node) int { return strings.Compare(string(a.ID), string(b.ID)) }

// Candidate is a member as the coordinator choice sees it.
type Candidate struct {
	ID ring.NodeID
	// Alive: not declared dead and not gone.
	Alive bool
	// Eligible: the member may coordinate (a member of the ring being
	// built, not one being removed).
	Eligible bool
}

// Coordinator returns the ring coordinator among members: the eligible,
// alive member with the lowest ID. Every node with the same view chooses
// the same one; when it fails, the next lowest takes over. ok is false if
// no member qualifies.
func Coordinator(members []Candidate) (id ring.NodeID, ok bool) {
	for _, m := range members {
		if m.Alive && m.Eligible && (!ok || m.ID < id) {
			id, ok = m.ID, true
		}
	}
	return id, ok
}

// First returns the record of the first ring, epoch 1, clean.
func First(coordinator ring.NodeID, nodes []ring.Node) (Record, error) {
	r := Record{Epoch: 1, Phase: PhaseClean, Coordinator: coordinator, New: sortedNodes(nodes)}
	return r, r.Validate()
}

func sortedNodes(nodes []ring.Node) []ring.Node {
	out := slices.Clone(nodes)
	slices.SortFunc(out, compareNodes)
	return out
}

// Propose returns the next epoch after cur, changing the ring to next
// (any order), at phase Installing, with its moves at replication factor
// rf (the largest of the keyspaces, at least 1). It fails with ErrBusy
// unless cur is Clean, with ErrUnchanged if next is cur's ring, and with
// ErrTooFewNodes if next has fewer than rf nodes.
func Propose(cur Record, coordinator ring.NodeID, next []ring.Node, rf int) (Record, error) {
	if cur.Phase != PhaseClean {
		return Record{}, fmt.Errorf("%w: epoch %d is %v", ErrBusy, cur.Epoch, cur.Phase)
	}
	rf = max(rf, 1)
	sorted := sortedNodes(next)
	if slices.Equal(sorted, cur.New) {
		return Record{}, ErrUnchanged
	}
	if len(sorted) < rf {
		return Record{}, fmt.Errorf("%w: the ring would keep %d node(s), fewer than the replication factor %d of a keyspace",
			ErrTooFewNodes, len(sorted), rf)
	}
	oldRing, err := ring.New(ring.Config{}, cur.Epoch, cur.New)
	if err != nil {
		return Record{}, err
	}
	newRing, err := ring.New(ring.Config{}, cur.Epoch+1, sorted)
	if err != nil {
		return Record{}, err
	}
	r := Record{Epoch: cur.Epoch + 1, Phase: PhaseInstalling, Coordinator: coordinator, Old: cur.New, New: sorted,
		Replication: rf, Moves: Moves(oldRing, newRing, rf), Removed: slices.Clone(cur.Removed)}
	for _, n := range cur.New {
		if !r.InNew(n.ID) && !slices.Contains(r.Removed, n.ID) {
			r.Removed = append(r.Removed, n.ID)
		}
	}
	slices.Sort(r.Removed)
	return r, r.Validate()
}

// Moves returns, for each node that becomes a replica of some range when
// the ring changes from old to new at replication factor rf, the fraction
// of the hash space it gains and the nodes that give it up, sorted by
// node. It is exact: it walks the union of both rings' tokens once,
// placing each arc between two consecutive tokens under both rings. A
// replication factor above a ring's size counts every node of that ring.
func Moves(old, new *ring.Ring, rf int) []Move {
	type gain struct {
		hi, lo uint64
		from   map[ring.NodeID]bool
	}
	gains := map[ring.NodeID]*gain{}
	positions := unionPositions(old.Tokens(), new.Tokens())
	previous := positions[len(positions)-1]
	for _, b := range positions {
		was := replicasAt(old, b, rf)
		now := replicasAt(new, b, rf)
		arc := b - previous // wraps for the first arc, as ring.Ownership
		if len(positions) == 1 {
			arc = 0 // one position: the whole ring, added below
		}
		for _, id := range now {
			if slices.Contains(was, id) {
				continue
			}
			g := gains[id]
			if g == nil {
				g = &gain{from: map[ring.NodeID]bool{}}
				gains[id] = g
			}
			var carry uint64
			g.lo, carry = bits.Add64(g.lo, arc, 0)
			g.hi += carry
			if len(positions) == 1 {
				g.hi = 1
			}
			for _, w := range was {
				if !slices.Contains(now, w) {
					g.from[w] = true
				}
			}
		}
		previous = b
	}
	const ringSize = 1 << 64
	var out []Move
	for id, g := range gains {
		m := Move{To: id, Share: float64(g.hi) + float64(g.lo)/ringSize}
		for f := range g.from {
			m.From = append(m.From, f)
		}
		slices.Sort(m.From)
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Move) int { return strings.Compare(string(a.To), string(b.To)) })
	return out
}

// unionPositions returns the distinct positions of a and b, ascending.
func unionPositions(a, b []ring.Token) []uint64 {
	out := make([]uint64, 0, len(a)+len(b))
	for _, t := range a {
		out = append(out, t.Position)
	}
	for _, t := range b {
		out = append(out, t.Position)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// replicasAt returns the first min(rf, r.Len()) distinct nodes at or after
// position p.
func replicasAt(r *ring.Ring, p uint64, rf int) []ring.NodeID {
	reps, err := r.ReplicasAt(p, min(rf, r.Len()))
	if err != nil {
		panic(fmt.Sprintf("rebalance: replicas at %#x: %v", p, err))
	}
	return reps
}

// Ack is what a member reports of the record it has installed.
type Ack struct {
	Epoch uint64
	Phase Phase
	// Copied: the member copied every range it gains in Epoch.
	Copied bool
	// Drained: the member drained Epoch's Active phase (Drain).
	Drained bool
}

// acked reports whether a has installed r's epoch at r's phase or later.
func (a Ack) acked(r Record) bool {
	return a.Epoch > r.Epoch || (a.Epoch == r.Epoch && a.Phase >= r.Phase)
}

// Required returns the members whose acknowledgement r's next phase waits
// for: every member of Old and New that alive says is alive. A dead member
// is not waited for: it serves nothing meanwhile, and when it comes back
// it takes the newest record before it serves anything, and catches up
// before it serves reads, as after any restart. Its copy is another
// matter: Advance waits for it (see Advance).
func (r Record) Required(alive func(ring.NodeID) bool) []ring.NodeID {
	var out []ring.NodeID
	for _, id := range r.Members() {
		if alive(id) {
			out = append(out, id)
		}
	}
	return out
}

// Advance returns the record after r given the members' acks, and whether
// it changed: Copied set on the moves whose node reports it, and the next
// phase if every required member acknowledged this one (and, from
// Copying, every move is copied, also to a node that is down: a range
// whose new owners are all gaining it may have no other new owner, as at
// replication factor 1, and reads must not switch to owners missing its
// commits, which the old owners then delete). From Switching and from
// Active, every member of New must also be alive and in step (inStep: not
// catching up): a commit that left the new owners of a range out (taken
// for dead) lives on its old owners only, so writes must not leave them,
// nor they delete anything, before the new owners caught up, from them if
// need be. From Active, every required member must also have drained it
// (see Drain). A Clean record does not advance: a new epoch comes from
// Propose. Advance takes one phase at a time.
func Advance(r Record, acks map[ring.NodeID]Ack, alive, inStep func(ring.NodeID) bool) (Record, bool) {
	if r.Phase == PhaseClean {
		return r, false
	}
	out := r
	out.Moves = slices.Clone(r.Moves)
	changed := false
	for i, m := range out.Moves {
		a, ok := acks[m.To]
		if !m.Copied && ok && a.Epoch == r.Epoch && a.Copied && r.Phase >= PhaseCopying {
			out.Moves[i].Copied = true
			changed = true
		}
	}
	for _, id := range r.Required(alive) {
		a, ok := acks[id]
		if !ok || !a.acked(r) || (r.Phase == PhaseActive && a.Epoch == r.Epoch && !a.Drained) {
			return out, changed
		}
	}
	if r.Phase == PhaseCopying && slices.ContainsFunc(out.Moves, func(m Move) bool { return !m.Copied }) {
		return out, changed
	}
	if (r.Phase == PhaseSwitching || r.Phase == PhaseActive) && len(r.Old) > 0 &&
		slices.ContainsFunc(r.New, func(n ring.Node) bool { return !alive(n.ID) || !inStep(n.ID) }) {
		return out, changed
	}
	out.Phase++
	return out, true
}

// Drain is one member's drain of an epoch's Active phase (see the package
// comment), over the commits it holds staged, named by K. The member
// begins it when it first sees the phase, steps it as its commits
// progress, and reports Drained to the coordinator. Marks are the counts
// of writes of the member's outbox (internal/outbox): a drain is done
// once the last commit it waited for has finished and a sync covered the
// writes made until then. The zero value has drained nothing.
type Drain[K comparable] struct {
	epoch  uint64
	left   []K
	mark   uint64
	marked bool
}

// Begin starts the drain of rec's Active phase over the commits staged
// now, which staged lists. It does nothing unless rec is a change in
// Active whose drain, or a later one, has not begun.
func (d *Drain[K]) Begin(rec Record, staged func() []K) {
	if rec.Phase != PhaseActive || len(rec.Old) == 0 || rec.Epoch <= d.epoch {
		return
	}
	*d = Drain[K]{epoch: rec.Epoch, left: staged()}
}

// Waiting reports whether the drain still waits for a commit to finish.
func (d *Drain[K]) Waiting() bool { return d.epoch != 0 && !d.marked }

// Step forgets the commits no longer staged (stillStaged false); once none
// is left it marks the writes so far (mark, from the outbox), which a sync
// must cover before the drain is done.
func (d *Drain[K]) Step(stillStaged func(K) bool, mark uint64) {
	if !d.Waiting() {
		return
	}
	d.left = slices.DeleteFunc(d.left, func(k K) bool { return !stillStaged(k) })
	if len(d.left) == 0 {
		d.mark, d.marked = mark, true
	}
}

// Drained returns the epoch of the drain last begun, and whether it is
// done: covers says whether a finished sync covered a mark.
func (d *Drain[K]) Drained(covers func(mark uint64) bool) (epoch uint64, done bool) {
	return d.epoch, d.marked && covers(d.mark)
}

// Placement is where the chunks of one keyspace go under a record.
type Placement struct {
	// Read is the ring whose owners serve reads.
	Read *ring.Ring
	// Also is the other ring of a move, whose owners take every write too;
	// nil when no range moves.
	Also *ring.Ring
}

// Rings builds r's placement.
func (r Record) Rings(cfg ring.Config) (Placement, error) {
	newRing, err := ring.New(cfg, r.Epoch, r.New)
	if err != nil {
		return Placement{}, err
	}
	if !r.Moving() {
		return Placement{Read: newRing}, nil
	}
	oldRing, err := ring.New(cfg, r.Epoch-1, r.Old)
	if err != nil {
		return Placement{}, err
	}
	if r.ReadsNew() {
		return Placement{Read: newRing, Also: oldRing}, nil
	}
	return Placement{Read: oldRing, Also: newRing}, nil
}

// Replicas returns the nodes that take writes of chunk c of key at
// replication factor rf: the Read ring's replicas, then those of Also not
// among them. Either ring may place fewer than rf (ring.ErrTooFewNodes).
func (p Placement) Replicas(seed uint64, key string, c uint64, rf int) ([]ring.NodeID, error) {
	reps, err := p.Read.Replicas(seed, key, c, rf)
	if err != nil || p.Also == nil {
		return reps, err
	}
	more, err := p.Also.Replicas(seed, key, c, rf)
	if err != nil {
		return nil, err
	}
	for _, id := range more {
		if !slices.Contains(reps, id) {
			reps = append(reps, id)
		}
	}
	return reps, nil
}

// Gains reports whether a node that takes writes of a chunk under p
// without serving its reads gains the chunk in the move: while reads stay
// on the old ring, Also is the new one, and such a node is a new owner,
// whose copy may lack commits that the move's copy fetches. Once reads
// switched, Also is the old ring and such a node an old owner giving the
// chunk up; a catch-up takes its copy as up to date (the old owners take
// every write until the new owners are in step), so one that is behind
// must catch up as any replica does, not leave it to a copy.
func (p Placement) Gains() bool { return p.Also != nil && p.Also.Epoch() > p.Read.Epoch() }

// Len returns the number of nodes of the smaller ring: the largest
// replication factor both rings can place.
func (p Placement) Len() int {
	if p.Also == nil {
		return p.Read.Len()
	}
	return min(p.Read.Len(), p.Also.Len())
}

// Chunk is one chunk of stored data, for MinimumCopies.
type Chunk struct {
	Seed  uint64
	Key   string
	Index uint64
	Bytes uint64
	// Replication is the keyspace's replication factor.
	Replication int
}

// MinimumCopies returns the bytes a change from old to new must copy for
// the chunks given: for each chunk, its size times the number of its
// replicas under new that were not replicas under old. No placement of new
// can do with less, since a new replica starts without the chunk; a copy
// that moves more is wasting bytes.
func MinimumCopies(old, new *ring.Ring, chunks []Chunk) (uint64, error) {
	var total uint64
	for _, c := range chunks {
		was, err := old.Replicas(c.Seed, c.Key, c.Index, min(c.Replication, old.Len()))
		if err != nil {
			return 0, err
		}
		now, err := new.Replicas(c.Seed, c.Key, c.Index, c.Replication)
		if err != nil {
			return 0, err
		}
		for _, id := range now {
			if !slices.Contains(was, id) {
				total += c.Bytes
			}
		}
	}
	return total, nil
}
