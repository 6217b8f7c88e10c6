package node

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/mvcc"
	"github.com/tyrstore/tyr/internal/rebalance"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/txn"
)

// Placement of chunks (see mvcc.Placement). Chunk c of a blob lives on the
// ring's replicas of (key, c); the version managers are those of chunk 0.
// A commit's chain is every live version manager of the blobs it touches,
// then every live holder of a chunk it writes into or whose readable part
// it changes (the blob's end moves through it). Which chunks an append or a
// truncate changes depends on the blob's size, which only the version
// managers know: the coordinator plans the chain from the sizes it last
// saw, and the first version manager of each blob in the chain checks,
// once it staged the commit, that the chain holds every live holder of
// what the commit changes. If not, it refuses with the sizes it found and
// the coordinator plans again.

// Placement is a keyspace's placement as this node sees it under one ring:
// the mvcc.Placement of its store, and where reads go. Take one per
// request (Node.Placement) and ask it as often as needed.
//
// While a ring change moves ranges (node/epoch.go), two rings are in use:
// r, whose owners serve reads, and w, whose owners take every write too.
// Holding (Holds, Manages, the chains) is by the union; serving reads
// (Target, ServesBlob, ServesChunk) by r alone.
type Placement struct {
	n        *Node
	keyspace string
	r        *ring.Ring
	w        *ring.Ring // nil unless a move is in progress
	// old is the ring before the change while writes no longer go to its
	// owners but they have not deleted anything (rebalance.PhaseActive);
	// nil otherwise.
	old  *ring.Ring
	seed uint64
	rf   int
}

// epoch is the epoch of the newest ring in use.
func (p Placement) epoch() uint64 {
	if p.w != nil {
		return max(p.r.Epoch(), p.w.Epoch())
	}
	return p.r.Epoch()
}

// Manages reports whether this node is a version manager of key.
func (p Placement) Manages(key string) bool { return p.Holds(key, 0) }

// Holds reports whether this node holds chunk c of key.
func (p Placement) Holds(key string, c uint64) bool { return p.on(p.n.self, key, c) }

// on reports whether node id holds chunk c of key.
func (p Placement) on(id ring.NodeID, key string, c uint64) bool {
	reps, err := p.writeReplicas(key, c)
	return err == nil && slices.Contains(reps, id)
}

// writeReplicas returns the nodes that take the writes of chunk c of key:
// those of r, then those of w not among them.
func (p Placement) writeReplicas(key string, c uint64) ([]ring.NodeID, error) {
	return rebalance.Placement{Read: p.r, Also: p.w}.Replicas(p.seed, key, c, p.rf)
}

// servesChunk reports whether node id serves reads of chunk c of key.
func (p Placement) servesChunk(id ring.NodeID, key string, c uint64) bool {
	reps, err := p.r.Replicas(p.seed, key, c, p.rf)
	return err == nil && slices.Contains(reps, id)
}

// serving returns a test of whether a write replica of chunk c of key
// serves its reads: every one does unless a ring move is in progress, and
// then those of the reading ring, looked up once for all of them.
func (p Placement) serving(key string, c uint64) func(ring.NodeID) bool {
	if p.w == nil {
		return func(ring.NodeID) bool { return true }
	}
	reps, err := p.r.Replicas(p.seed, key, c, p.rf)
	return func(id ring.NodeID) bool { return err == nil && slices.Contains(reps, id) }
}

// ServesChunk reports whether this node serves reads of chunk c of key: it
// holds the chunk and is not only gaining it in a move.
func (p Placement) ServesChunk(key string, c uint64) bool { return p.servesChunk(p.n.self, key, c) }

// ServesBlob reports whether this node is a version manager of key that
// serves reads (not one only gaining it in a move).
func (p Placement) ServesBlob(key string) bool { return p.servesChunk(p.n.self, key, 0) }

// servesBlobOn reports whether node id is a version manager of key that
// serves reads.
func (p Placement) servesBlobOn(id ring.NodeID, key string) bool { return p.servesChunk(id, key, 0) }

// gains reports whether this node holds a part of blob key (size bytes,
// chunk size cs) whose reads it does not serve: a part it gains in a move.
func (p Placement) gains(key string, size, cs uint64) bool {
	if p.w == nil {
		return false
	}
	for c := uint64(0); c == 0 || c*cs < size; c++ {
		if p.on(p.n.self, key, c) && !p.servesChunk(p.n.self, key, c) {
			return true
		}
	}
	return false
}

// vms returns the version managers of key that take its writes.
func (p Placement) vms(key string) ([]ring.NodeID, error) { return p.writeReplicas(key, 0) }

// replicas returns the nodes that serve reads of chunk c of key.
func (p Placement) replicas(key string, c uint64) ([]ring.NodeID, error) {
	reps, err := p.r.Replicas(p.seed, key, c, p.rf)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
	}
	return reps, nil
}

// sourceReplicas returns the nodes a catch-up may copy chunk c of key
// from, by the phase of a ring change (rebalance.Placement.Sources).
func (p Placement) sourceReplicas(key string, c uint64) (reps, stale []ring.NodeID, err error) {
	reps, stale, err = rebalance.Placement{Read: p.r, Also: p.w}.Sources(p.seed, key, c, p.rf, p.old)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
	}
	return reps, stale, nil
}

// holdsAny reports whether this node holds a chunk of a blob of size bytes
// (chunk size cs).
func (p Placement) holdsAny(key string, size, cs uint64) bool {
	for c := uint64(0); c*cs < size; c++ {
		if p.Holds(key, c) {
			return true
		}
	}
	return false
}

// Target returns the node that serves direct reads of chunk c of key: its
// first live replica that is not catching up. Version managers come first
// in every chain and so commit last: a replica commits no later than they
// do. Target(key, 0) serves the blob's record.
func (p Placement) Target(key string, c uint64) (ring.NodeID, error) {
	reps, err := p.r.Replicas(p.seed, key, c, p.rf)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
	}
	if id, ok := ring.ReadTarget(reps, func(id ring.NodeID) bool { return p.n.cfg.Cluster.Alive(id) && !p.n.catchingUp(id) }); ok {
		return id, nil
	}
	return "", fmt.Errorf("%w: no live replica of chunk %d of blob %q that is up to date (replicas %v)", errs.ErrUnavailable, c, key, reps)
}

// Placement returns keyspace's placement under the current ring.
func (n *Node) Placement(keyspace string, rf int) (Placement, error) {
	r, w, old, err := n.ringSet()
	if err != nil {
		return Placement{}, err
	}
	size := r.Len()
	if w != nil {
		size = min(size, w.Len())
	}
	if rf > size {
		return Placement{}, fmt.Errorf("%w: keyspace %q keeps %d replicas, but the cluster has %d nodes",
			errs.ErrUnavailable, keyspace, rf, size)
	}
	return Placement{n: n, keyspace: keyspace, r: r, w: w, old: old, seed: ring.KeyspaceSeed(keyspace), rf: rf}, nil
}

// holders adds to set the replicas of every chunk of key in t (chunk size
// cs), and fails with errs.ErrUnavailable if a chunk has no replica alive
// says is alive: the commit would change it where no one could keep it. A
// long range of moved ends stops once every ring member is in. If gaining
// is not nil, the replicas that only gain a chunk in a ring move (and so
// may not hold its bytes yet) are added to it too. If keep is not nil, it
// gets, for each chunk whose bytes t changes (those written, and the ones
// the blob's end moves from and to), the group of its replicas alive a
// re-execution must keep one of: those that serve it, if any does (see
// Node.Chain).
func (p Placement) holders(set, gaining map[ring.NodeID]bool, keep *[][]ring.NodeID, key string, cs uint64, t mvcc.Touched, alive func(ring.NodeID) bool) error {
	add := func(c uint64, kept bool) error {
		reps, err := p.writeReplicas(key, c)
		if err != nil {
			return fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
		}
		if !slices.ContainsFunc(reps, alive) {
			return fmt.Errorf("%w: no live replica of chunk %d of blob %q (replicas %v)", errs.ErrUnavailable, c, key, reps)
		}
		serves := p.serving(key, c)
		for _, id := range reps {
			set[id] = true
			if gaining != nil && !serves(id) {
				gaining[id] = true
			}
		}
		if keep != nil && kept {
			held := slices.DeleteFunc(reps, func(id ring.NodeID) bool { return !alive(id) })
			if slices.ContainsFunc(held, serves) {
				held = slices.DeleteFunc(held, func(id ring.NodeID) bool { return !serves(id) })
			}
			*keep = append(*keep, held)
		}
		return nil
	}
	for _, c := range t.Written {
		if err := add(c, true); err != nil {
			return err
		}
	}
	if keep != nil && t.Hi > t.Lo {
		// The chunks the end moves from and to, whatever the range below
		// visits.
		for _, c := range []uint64{t.Lo / cs, (t.Hi - 1) / cs} {
			if err := add(c, true); err != nil {
				return err
			}
		}
	}
	for c := t.Lo / cs; c*cs < t.Hi && len(set) < p.size(); c++ {
		if err := add(c, false); err != nil {
			return err
		}
	}
	return nil
}

// plan returns, for each blob ops change, what they change if each blob is
// sizes[key] bytes long now (a guess; absent: empty).
func plan(ops []txn.Op, sizes map[string]uint64, cs uint64) map[string]mvcc.Touched {
	type state struct {
		size, start, low uint64
		written          map[uint64]bool
		changed          bool
	}
	blobs := map[string]*state{}
	for _, op := range ops {
		b := blobs[op.Key]
		if b == nil {
			s := sizes[op.Key]
			b = &state{size: s, start: s, low: s, written: map[uint64]bool{}}
			blobs[op.Key] = b
		}
		write := func(off, n uint64) {
			for c := off / cs; n > 0 && c*cs < off+n; c++ {
				b.written[c] = true
			}
			b.size = max(b.size, off+n)
			b.changed = true
		}
		switch op.Kind {
		case txn.OpWrite:
			write(op.Offset, uint64(len(op.Data)))
		case txn.OpAppend:
			write(b.size, uint64(len(op.Data)))
		case txn.OpAtomic:
			write(op.Offset, uint64(op.Width))
		case txn.OpCompareAndSwap:
			write(op.Offset, uint64(len(op.Data)))
		case txn.OpTruncate:
			b.low = min(b.low, op.Size)
			b.size = op.Size
			b.changed = true
		case txn.OpDelete:
			b.low, b.size, b.changed = 0, 0, true
		case txn.OpCreate:
			b.changed = true
		}
	}
	out := map[string]mvcc.Touched{}
	for key, b := range blobs {
		if !b.changed {
			continue
		}
		t := mvcc.Touched{Written: slices.Sorted(maps.Keys(b.written)), Lo: min(b.low, b.size), Hi: max(b.start, b.size)}
		if t.Lo == t.Hi {
			t.Lo, t.Hi = 0, 0
		}
		out[key] = t
	}
	return out
}

// replanError is the refusal of a first version manager whose chain lacks
// a holder of what the commit changes: Sizes are the sizes it found.
type replanError struct {
	Sizes map[string]uint64
	why   string
}

func (e *replanError) Error() string {
	b, _ := json.Marshal(e.Sizes)
	return fmt.Sprintf("%s%s: %s", tagReplan, b, e.why)
}

// tagReplan starts a replanError's text.
const tagReplan = "replan "

func decodeReplan(text string) (map[string]uint64, bool) {
	rest, ok := strings.CutPrefix(text, tagReplan)
	if !ok {
		return nil, false
	}
	dec := json.NewDecoder(strings.NewReader(rest))
	var sizes map[string]uint64
	if err := dec.Decode(&sizes); err != nil {
		return nil, false
	}
	return sizes, true
}

// checkCovered is the base members' check (see chain.Order): every live
// holder of what p changes in the blobs this member gave the base of comes
// after it in members. A holder missing, or one before this member (it
// passed the blob by, having no Base), means the chain was planned from a
// wrong size: the commit is refused with the sizes found, to be planned
// again.
func (n *Node) checkCovered(pl Placement, cs uint64, p *mvcc.Pending, given map[string]mvcc.Base, members []ring.NodeID) error {
	self := slices.Index(members, n.self)
	need := map[ring.NodeID]bool{}
	for key, t := range p.Touched() {
		if _, ok := given[key]; ok {
			continue
		}
		if err := pl.holders(need, nil, nil, key, cs, t, n.inChains); err != nil {
			return err
		}
	}
	var missing []ring.NodeID
	for id := range need {
		if slices.Index(members, id) <= self && id != n.self && n.inChains(id) {
			missing = append(missing, id)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	slices.Sort(missing)
	return &replanError{Sizes: p.Sizes(), why: fmt.Sprintf("the chain %v lacks holders %v of the chunks the commit changes after %s", members, missing, n.self)}
}

// sizeHints remembers the last size seen of blobs this node coordinated
// commits of, to plan chains (see plan). It is bounded: when full, it
// starts over.
type sizeHints struct {
	mu sync.Mutex
	m  map[string]uint64 // keyspace NUL key -> size
}

const sizeHintsMax = 1 << 16

func (h *sizeHints) get(keyspace string, ops []txn.Op) map[string]uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]uint64{}
	for _, op := range ops {
		if s, ok := h.m[keyspace+"\x00"+op.Key]; ok {
			out[op.Key] = s
		}
	}
	return out
}

func (h *sizeHints) set(keyspace string, sizes map[string]uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil || len(h.m)+len(sizes) > sizeHintsMax {
		h.m = map[string]uint64{}
	}
	for key, s := range sizes {
		h.m[keyspace+"\x00"+key] = s
	}
}

// learn records the sizes a commit's results report.
func (h *sizeHints) learn(keyspace string, ops []txn.Op, results []txn.Result) {
	sizes := map[string]uint64{}
	for i, op := range ops {
		if i < len(results) {
			sizes[op.Key] = results[i].Size
		}
	}
	h.set(keyspace, sizes)
}

// unkept returns an error if this member, about to let a commit pass
// through without applying it, holds a chunk the commit changes that the
// commit could be decided without anyone keeping (rebalance.Keeps). What
// the commit changes is planned from the version managers' sizes.
func (n *Node) unkept(pl Placement, cs uint64, ops []txn.Op, e versionEntry) error {
	sizes := map[string]uint64{}
	for key, b := range e.bases {
		if b.Version != 0 {
			sizes[key] = b.Size
		}
	}
	for key, t := range plan(ops, sizes, cs) {
		if !e.hasPart(pl, key) {
			continue
		}
		check := func(c uint64) error {
			if !pl.Holds(key, c) {
				return nil
			}
			holds := func(id ring.NodeID) bool { return pl.on(id, key, c) }
			switch rebalance.Keeps(n.self, e.chain, pl.ServesChunk(key, c), holds, n.cfg.Cluster.CatchingUp) {
			case rebalance.NoChain:
				return fmt.Errorf("node %s: a commit passing through names no chain: %w", n.self, errCatchingUp)
			case rebalance.TailLacks:
				return fmt.Errorf("node %s, behind on chunk %d of blob %q, holds it while the tail %s of the chain %v does not: %w",
					n.self, c, key, e.chain[len(e.chain)-1], e.chain, errCatchingUp)
			case rebalance.SoleHolder:
				return fmt.Errorf("node %s, gaining chunk %d of blob %q, is the only member of the chain %v that holds it: %w",
					n.self, c, key, e.chain, errCatchingUp)
			}
			return nil
		}
		for _, c := range t.Written {
			if err := check(c); err != nil {
				return err
			}
		}
		for c := t.Lo / cs; c*cs < t.Hi; c++ {
			if err := check(c); err != nil {
				return err
			}
		}
	}
	return nil
}

// hasPart reports whether this member has a part in blob key of the
// commit e: it manages it or was given its Base (mvcc.Step.parts).
func (e versionEntry) hasPart(pl Placement, key string) bool {
	_, given := e.bases[key]
	return given || pl.Manages(key)
}

// SameHolders reports whether chunks a and b of key live on the same
// nodes, so every chain member holds both or neither.
func (p Placement) SameHolders(key string, a, b uint64) bool {
	ra, errA := p.writeReplicas(key, a)
	rb, errB := p.writeReplicas(key, b)
	if errA != nil || errB != nil || len(ra) != len(rb) {
		return false
	}
	for _, id := range ra {
		if !slices.Contains(rb, id) {
			return false
		}
	}
	return true
}

// size is the number of nodes that may hold anything under p.
func (p Placement) size() int {
	if p.w == nil {
		return p.r.Len()
	}
	n := p.r.Len()
	for _, x := range p.w.Nodes() {
		if !p.r.Contains(x.ID) {
			n++
		}
	}
	return n
}
