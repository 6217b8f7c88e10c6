package sim

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/tyrstore/tyr/internal/chain"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/mvcc"
	"github.com/tyrstore/tyr/internal/rebalance"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/txn"
)

// Pass-through and catch-up, as a node does them (internal/node/catchup.go).
//
// Every Forward past the first replica of a key in a chain carries that
// replica's record of the key before the commit, its base (mvcc.Base; on
// a MemStore, Version is the count of the key's commits), which each node
// keeps beside its replica with the chain the Forward named (forward) and
// hands on, with its own for the keys it was the first replica of, in the
// Forwards it sends. A member whose copy of a key is not at the base
// applies nothing: if its copy is behind, or it is catching up, the commit
// passes through it (passStaged, a chain.Passing: it stages nothing,
// reports its results Unheld, and its commit records only the transaction,
// for chain.Stager.Committed), unless the chain's tail does not store a key
// the commit changes that it stores (unkept); if its copy is ahead, it
// refuses.
//
// A node catches up from the moment it may have missed commits: when it
// restarts, when a client's failure detector leaves it out of chains (a
// node revokes a member's read lease first), when it reports missing a
// commit (chain.ErrStageLost), and when a commit passes through it. Until
// it has caught up it serves no reads (the readers of gc.go skip it),
// refuses to be the first replica of a key in a chain, accepts only a base
// with no commit queued ahead of it (mvcc.Step.Strict), and the clients
// order their chains as a node does (chainOrder). Its round of catch-up
// takes a step a tick while it is up:
//
//  1. the barrier: each client answers once it reaches the node and keeps
//     it in its chains, and the round waits until every transaction that
//     client had in flight then has finished, so that every commit after
//     it includes the node;
//  2. it refreshes each key it stores, one a tick, from the first other
//     replica that is up, reachable and not catching up, or else from the
//     first that is up and reachable, whose copy it takes only if newer;
//     on mvcc with mvcc.Store.Refresh. A refresh waits while a commit holds
//     the key on either node (a node's waits for the lock);
//  3. it refreshes the keys commits passed through meanwhile (dirty), each
//     from a copy at least at the version the commit left, and is caught
//     up once none is left.
//
// Leaving a node out of chains starts its round anew; the other causes
// start one if none runs, as a node's do. A crash loses the round.

// forward is what a node keeps beside its replica for a transaction whose
// Forward reached it, as a node's versionEntry does: the bases it hands
// on, and the chain the Forward named.
type forward struct {
	bases map[string]mvcc.Base
	chain []ring.NodeID
}

// catchUp is one node's catch-up state. The zero value is caught up.
type catchUp struct {
	active bool
	since  int // tick the node began catching up
	// answered holds, per client, whether it answered the barrier; cut
	// the transactions the clients had in flight when they did.
	answered []bool
	cut      []chain.TxnID
	barrier  bool
	// todo are the keys left to refresh in this round, once past the
	// barrier; dirty the keys commits passed through, each with the
	// version the source's copy must have reached (0: any) and the commit
	// that left it (rebalance.Mark).
	todo  []string
	dirty map[string]rebalance.Mark[chain.TxnID]
}

// refresh is a catch-up that changed a node's copy of a key.
type refresh struct {
	node ring.NodeID
	key  string
	at   int
}

// nodeStager is node n's chain.Stager: its store, staged as a node does,
// with the bases the Forward brought, and passing commits through where
// its copy is behind.
type nodeStager struct {
	w *world
	n ring.NodeID
}

func (s nodeStager) Prepare(id chain.TxnID, ops []txn.Op) (chain.Staged, error) {
	return s.w.prepare(s.n, id, ops)
}

func (s nodeStager) Committed(id chain.TxnID) ([]txn.Result, bool, error) {
	return s.w.stores[s.n].Committed(id)
}

// owns reports whether node n stores key.
func (w *world) owns(n ring.NodeID, key string) bool { return slices.Contains(w.placement[key], n) }

func (w *world) catchingUp(n ring.NodeID) bool { return w.catch[n].active }

// noteForward records what a Forward of a transaction new to node n's
// replica brought, before the replica takes it.
func (w *world) noteForward(n ring.NodeID, m chain.Message, bases map[string]mvcc.Base) {
	f := w.forwards[n][m.Txn]
	if f == nil {
		f = &forward{}
		w.forwards[n][m.Txn] = f
	}
	if f.bases == nil {
		f.bases = bases
	}
	f.chain = m.Chain
}

// prepare stages ops on node n as a member of the chain its Forward named
// (see the top of this file).
func (w *world) prepare(n ring.NodeID, id chain.TxnID, ops []txn.Op) (chain.Staged, error) {
	w.noteOwners(n, id, ops)
	f := w.forwards[n][id]
	if f == nil {
		f = &forward{}
		w.forwards[n][id] = f
	}
	if len(f.chain) > 0 && f.chain[len(f.chain)-1] == n {
		if key, ok := mvcc.Unmanaged(ops, f.bases, func(k string) bool { return w.owns(n, k) }); ok {
			w.stats.Unmanaged++
			w.trace("%s, the tail of %v, refuses %s: no version manager of %q in the chain", n, f.chain, id, key)
			return nil, fmt.Errorf("%w: %s, the tail of the chain %v, finds no version manager of %q in it", errs.ErrUnavailable, n, f.chain, key)
		}
	}
	catching := w.catchingUp(n)
	if catching {
		for _, op := range ops {
			if _, given := f.bases[op.Key]; !given && w.owns(n, op.Key) {
				// The first replica's copy is what the others check theirs
				// against.
				return nil, fmt.Errorf("%w: %s is the first replica of %q in the chain and is catching up", errs.ErrUnavailable, n, op.Key)
			}
		}
	}
	s := w.stores[n]
	staged, bases, err := s.prepareStep(id, ops, f.bases, catching)
	var mismatch *mvcc.BaseMismatchError
	if errors.As(err, &mismatch) && (mismatch.Have < mismatch.Want || catching) {
		unkept := w.unkept(n, ops, f.chain)
		// Keys it only gains in a ring change are the move's copy's to
		// fetch: the node does not catch up as a whole for them.
		gained := w.onlyGained(n, ops)
		if !gained {
			w.startCatchUp(n, fmt.Sprintf("prepare of %s: %v", id, err), false)
		}
		if unkept != nil {
			w.stats.Unkept++
			w.trace("%s refuses to pass %s through: %v", n, id, unkept)
			return nil, unkept
		}
		return w.passThrough(n, id, ops, f.bases, gained)
	}
	if mismatch != nil {
		w.stats.Ahead++
		w.trace("%s refuses %s: its copy is ahead of the first replica's: %v", n, id, err)
	}
	if err != nil {
		return nil, err
	}
	given := f.bases
	f.bases = bases
	return orphanable{Staged: staged, orphaned: func() bool {
		_, ok := mvcc.Unmanaged(ops, given, func(k string) bool { return w.owns(n, k) })
		if ok {
			w.stats.Orphaned++
			w.trace("%s, made the tail of %s, manages a key of it no more", n, id)
		}
		return ok
	}}, nil
}

// orphanable is a stage that tells whether, once a re-execution made its
// member the tail, no member of the chain manages a key it changes
// (chain.Orphaning), as a node's stage does: given no Base of it, the
// member does not manage it any more.
type orphanable struct {
	chain.Staged
	orphaned func() bool
}

func (o orphanable) Unwrap() chain.Staged { return o.Staged }

func (o orphanable) Orphaned() bool { return o.orphaned() }

// handOn is the bases a member sends on: those it was given, and its own
// records of the keys it was the first replica of.
func handOn(given, own map[string]mvcc.Base) map[string]mvcc.Base {
	out := maps.Clone(given)
	for k, b := range own {
		if _, ok := given[k]; !ok {
			if out == nil {
				out = map[string]mvcc.Base{}
			}
			out[k] = b
		}
	}
	return out
}

// unkept refuses a pass-through on node n unless every key of ops that n
// stores is kept elsewhere (rebalance.Keeps), as a node's does
// (node.unkept), by key rather than by chunk.
func (w *world) unkept(n ring.NodeID, ops []txn.Op, chainIDs []ring.NodeID) error {
	for _, op := range ops {
		if op.Kind == txn.OpReadCheck || !w.owns(n, op.Key) {
			continue
		}
		holds := func(id ring.NodeID) bool { return w.owns(id, op.Key) }
		switch rebalance.Keeps(n, chainIDs, w.serves(n, op.Key), holds, w.catchingUp) {
		case rebalance.NoChain:
			return fmt.Errorf("%w: %s: a commit passing through names no chain", errs.ErrUnavailable, n)
		case rebalance.TailLacks:
			return fmt.Errorf("%w: %s, behind on %q, stores it while the tail %s of the chain %v does not",
				errs.ErrUnavailable, n, op.Key, chainIDs[len(chainIDs)-1], chainIDs)
		case rebalance.SoleHolder:
			return fmt.Errorf("%w: %s, gaining %q, is the only member of the chain %v that stores it",
				errs.ErrUnavailable, n, op.Key, chainIDs)
		}
	}
	return nil
}

// passThrough is what node n, whose copy is behind, stages for id: nothing.
//
// gained: n only gains the keys of ops in a ring change; they are marked
// for the move's copy, unless that copy ended: then n catches up, as a
// node's passThrough does.
func (w *world) passThrough(n ring.NodeID, id chain.TxnID, ops []txn.Op, bases map[string]mvcc.Base, gained bool) (chain.Staged, error) {
	s := w.stores[n]
	if err := s.pass(id); err != nil {
		return nil, err
	}
	w.stats.Passed++
	if gained {
		w.trace("%s passes %s through: its copy of keys it gains is behind", n, id)
	} else {
		w.trace("%s passes %s through: its copy is behind", n, id)
	}
	owned := slices.DeleteFunc(txn.Keys(ops), func(k string) bool { return !w.owns(n, k) })
	if gained {
		w.passedGained[id] = append(w.passedGained[id], n)
	}
	if gained && !w.markMoveDirty(n, owned, 0, id) {
		gained = false
		w.startCatchUp(n, fmt.Sprintf("%s passed through it for a key it gains after its copy ended", id), false)
	}
	p := &passStaged{w: w, n: n, id: id, ops: ops, wants: map[string]uint64{}, gained: gained}
	for _, op := range ops {
		if !w.owns(n, op.Key) {
			continue
		}
		if !gained {
			w.markDirty(n, op.Key, 0, id)
		}
		if op.Kind != txn.OpReadCheck {
			b, given := bases[op.Key]
			p.wants[op.Key] = s.versionAfter(id, ops, op.Key, b, given)
		}
	}
	return p, nil
}

// passStaged is a commit passing through a member whose copy is behind
// (chain.Passing).
type passStaged struct {
	w     *world
	n     ring.NodeID
	id    chain.TxnID
	ops   []txn.Op
	wants map[string]uint64 // per key, the version the commit leaves
	// gained: the keys are marked for a ring change's copy, not catch-up.
	gained bool
}

var _ chain.Passing = (*passStaged)(nil)

// Commit records the transaction and marks its keys for catch-up at the
// versions it left.
func (p *passStaged) Commit(results []txn.Result) error {
	if err := p.w.stores[p.n].passed(p.id, results); err != nil {
		return err
	}
	p.w.stats.PassedCommitted++
	if p.gained && p.w.markMoveDirty(p.n, nil, 0, p.id) {
		for _, k := range slices.Sorted(maps.Keys(p.wants)) {
			p.w.markMoveDirty(p.n, []string{k}, p.wants[k], p.id)
		}
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(p.wants)) {
		p.w.markDirty(p.n, k, p.wants[k], p.id)
	}
	p.w.startCatchUp(p.n, fmt.Sprintf("%s passed through it", p.id), false)
	return nil
}

func (p *passStaged) Abort() { p.w.stores[p.n].passAborted(p.id) }

func (p *passStaged) PassesThrough() bool { return true }

// Results are none of the commit's: each is Unheld, so that the members
// before this one take a holder's (txn.MergeResults).
func (p *passStaged) Results() []txn.Result {
	out := make([]txn.Result, len(p.ops))
	for i := range out {
		out[i].Unheld = true
	}
	return out
}

// markDirty marks key for node n's catch-up: commit id, which left
// version, passed through n (rebalance.Mark), as catchUp.markDirty does.
func (w *world) markDirty(n ring.NodeID, key string, version uint64, id chain.TxnID) {
	c := w.catch[n]
	if c.dirty == nil {
		c.dirty = map[string]rebalance.Mark[chain.TxnID]{}
	}
	c.dirty[key] = c.dirty[key].Add(version, id)
}

// startCatchUp makes node n catch up: a new round if anew or if none
// runs (see the top of this file).
func (w *world) startCatchUp(n ring.NodeID, reason string, anew bool) {
	c := w.catch[n]
	if c.active && !anew {
		return
	}
	if !c.active {
		c.since = w.now
		w.stats.CatchUpsBegun++
	}
	c.active = true
	c.answered = make([]bool, len(w.clients))
	c.cut, c.barrier, c.todo = nil, false, nil
	w.trace("%s catches up: %s", n, reason)
}

// stepCatchUp takes the next step of node n's round, if it catches up.
func (w *world) stepCatchUp(n ring.NodeID) {
	c := w.catch[n]
	if !c.active || w.down[n] {
		return
	}
	if !c.barrier {
		if !w.barrierStep(n, c.answered, &c.cut) {
			return
		}
		c.barrier, c.cut = true, nil
		for _, k := range w.keys {
			if w.owns(n, k) {
				c.todo = append(c.todo, k)
			}
		}
		w.trace("%s passed the catch-up barrier", n)
		return
	}
	if len(c.todo) > 0 {
		if w.refreshKey(n, c.todo[0], 0, chain.TxnID{}) {
			c.todo = c.todo[1:]
		}
		return
	}
	if len(c.dirty) > 0 {
		k := slices.Sorted(maps.Keys(c.dirty))[0]
		m := c.dirty[k]
		if w.refreshKey(n, k, m.Version, m.Txn) && c.dirty[k] == m {
			delete(c.dirty, k)
		}
		return
	}
	c.active = false
	w.stats.CatchUps++
	w.trace("%s caught up (since tick %d)", n, c.since)
}

// barrierStep takes a step of node n's barrier (see step 1 at the top of
// this file): answered holds, per client, whether it answered, and cut
// the transactions the clients had in flight when they did. It reports
// whether the barrier is passed.
func (w *world) barrierStep(n ring.NodeID, answered []bool, cut *[]chain.TxnID) bool {
	j := slices.Index(w.nodes, n)
	for i, cl := range w.clients {
		if answered[i] || !w.reaches(i, j, cl.ID(), n) || slices.Contains(w.views[i], n) {
			continue
		}
		answered[i] = true
		for _, id := range w.order {
			if id.Coordinator == cl.ID() && !w.txns[id].finished {
				*cut = append(*cut, id)
			}
		}
	}
	return !slices.Contains(answered, false) && !slices.ContainsFunc(*cut, func(id chain.TxnID) bool { return !w.txns[id].finished })
}

// sourceReplicas are the replicas a node may copy key from
// (rebalance.Placement.Sources); without ring changes, the keys' replicas
// are drawn at random, not by a ring.
func (w *world) sourceReplicas(key string) (reps, stale []ring.NodeID) {
	reps = w.serving[key]
	if w.ringOn() {
		var err error
		reps, stale, err = w.ring.pl.Sources(w.ring.plan.seed, key, 0, w.p.replicationFactor, w.ring.old)
		if err != nil {
			panic(fmt.Sprintf("sim: sources of %s in epoch %d: %v", key, w.ring.rec.Epoch, err))
		}
	}
	return reps, stale
}

// sources are the replicas node n may copy key from, in the order a node
// tries them (rebalance.Order). Whether n reaches them is the refresh's to
// find out.
func (w *world) sources(n ring.NodeID, key string) []rebalance.Source {
	reps, stale := w.sourceReplicas(key)
	return rebalance.Order(n, reps, stale, w.alive, w.catchingUp)
}

func (w *world) alive(id ring.NodeID) bool { return !w.down[id] }

// refreshKey brings node n's copy of key in step with a source's, with a
// copy at least at version want, left by commit id (zero if not known);
// it reports whether it is done, or must be tried again later. It asks
// the sources as a node does (rebalance.Refresh, which Node.refreshBlob
// calls), and takes a copy without the commit if every source lost it
// (rebalance.Lost), as a node does.
func (w *world) refreshKey(n ring.NodeID, key string, want uint64, id chain.TxnID) bool {
	reps, stale := w.sourceReplicas(key)
	srcs := rebalance.Order(n, reps, stale, w.alive, w.catchingUp)
	if len(srcs) == 0 {
		// The only replica serving key: nothing to copy.
		return !slices.ContainsFunc(w.serving[key], func(id ring.NodeID) bool { return id != n })
	}
	a := rebalance.Refresh(srcs, func(c rebalance.Source) (rebalance.Answer, bool) {
		return w.copyKey(n, key, c.ID, c.Ready, want, id), c.Ready
	})
	switch rebalance.Settle(a, n, reps, stale, w.alive) {
	case rebalance.Took:
		return true
	case rebalance.Lost:
		w.stats.CopiesLost++
		w.trace("%s: every source of %s lost %s at version %d; copying without it", n, key, id, want)
		return w.refreshKey(n, key, 0, chain.TxnID{})
	}
	return false
}

// source is the first of sources(n, key), if any.
func (w *world) source(n ring.NodeID, key string) (ring.NodeID, bool) {
	if srcs := w.sources(n, key); len(srcs) > 0 {
		return srcs[0].ID, srcs[0].Ready
	}
	return "", false
}

// copyKey brings node n's copy of key in step with src's, with a copy at
// least at version want, left by commit id, as refreshKey does (ready: src
// is not catching up); it answers Took once done, Behind if src's copy is
// behind want (mvcc.ErrCopyBehind), Lost if src lost id too
// (rebalance.BehindAnswer), and Failed if it must be tried again later.
func (w *world) copyKey(n ring.NodeID, key string, src ring.NodeID, ready bool, want uint64, id chain.TxnID) rebalance.Answer {
	if w.partitioned(n, src) || w.stores[src].locked(key) || w.stores[n].locked(key) {
		return rebalance.Failed // a node's call fails, or waits for the lock
	}
	before := slices.Clone(w.stores[n].keyLog(key))
	changed, err := w.stores[n].refresh(key, w.stores[src], ready, want)
	switch {
	case errors.Is(err, mvcc.ErrCopyBehind):
		s := w.stores[src]
		a := rebalance.BehindAnswer(ready, s.locked(key), id != (chain.TxnID{}) && s.missed(id))
		if a == rebalance.Lost {
			w.trace("%s cannot refresh %s from %s: it lost %s: %v", n, key, src, id, err)
		} else {
			w.trace("%s cannot refresh %s from %s yet: %v", n, key, src, err)
		}
		return a
	case err != nil:
		w.trace("%s cannot refresh %s from %s yet: %v", n, key, src, err)
		return rebalance.Failed
	}
	if changed {
		w.stats.Refreshed++
		w.refreshes = append(w.refreshes, refresh{node: n, key: key, at: w.now})
		b, _ := w.stores[n].keyState(key)
		w.trace("%s refreshed %s from %s (ready=%t): exists=%t version=%d", n, key, src, ready, b.exists, b.version)
	}
	if !ready {
		w.noteAllFailed(n, key, before)
	}
	return rebalance.Took
}

// noteStagesLost records, for each committed transaction, the keys whose
// every replica (that stored the key when it prepared the commit) either
// was left out of its final chain or lost its stage of it in a crash
// before the commit reached it (chain.ErrStageLost): the
// replicas of those keys all failed while it committed (docs/
// architecture.md, "f = r"), and its change of them may be lost with its
// stages. The members before a chain's tail hold their stages in memory
// until the Backward reaches them; only the tail's commit is durable when
// the transaction is decided, and a tail that stores none of a key keeps
// nothing of it. A commit that passed through a member of its final chain
// is not excused, and neither is one whose replica in the chain did not
// report losing its stage; but a new owner that passed the commit through
// for a key it only gains, leaving the key to the move's copy, holds none
// of it yet and does not count (the in-step holder the pass-through relied
// on, rebalance.Keeps, may be one before the tail; docs/architecture.md,
// "A copy waiting for a lost commit").
func (w *world) noteStagesLost() {
	for _, id := range w.order {
		t := w.txns[id]
		if !t.finished || !t.outcome.Committed || len(w.stageLost[id]) == 0 {
			continue
		}
		for _, op := range t.ops {
			k := op.Key
			if w.allFailed[k][id] || slices.ContainsFunc(w.ownedAt[id][k], func(n ring.NodeID) bool {
				return slices.Contains(t.final, n) && !slices.Contains(w.stageLost[id], n) && !slices.Contains(w.passedGained[id], n)
			}) {
				continue
			}
			if w.allFailed[k] == nil {
				w.allFailed[k] = map[chain.TxnID]bool{}
			}
			w.allFailed[k][id] = true
			w.stats.AllFailed++
			w.trace("every replica of %s failed while %s committed (left out of %v or lost its stage)", k, id, t.final)
		}
	}
}

// noteOwners records the keys of ops node n stores as it prepares id: a
// member that no longer stores a key once a ring change moved it keeps
// nothing of the commit's change of it (see noteStagesLost).
func (w *world) noteOwners(n ring.NodeID, id chain.TxnID, ops []txn.Op) {
	for _, op := range ops {
		if !w.owns(n, op.Key) {
			continue
		}
		if w.ownedAt[id] == nil {
			w.ownedAt[id] = map[string][]ring.NodeID{}
		}
		if !slices.Contains(w.ownedAt[id][op.Key], n) {
			w.ownedAt[id][op.Key] = append(w.ownedAt[id][op.Key], n)
		}
	}
}

// noteAllFailed records, after node n caught up on key from a replica
// catching up too (no replica of key was up to date and up), the commits
// of key that another replica holds, or n held before (before), and n's
// copy now lacks. That is the case of every replica failed at once
// (docs/architecture.md, "f = r"): n becomes up to date on its own, and
// the others copy from it once they catch up, so those commits may be
// lost, as documented. (A copy taken from a replica catching up replaces
// one only if it is newer, but an absent blob has no version: a delete
// the source missed is undone.) The durability check excuses them, and
// only them: a commit no replica ever applied is lost whatever happens to
// the replicas.
func (w *world) noteAllFailed(n ring.NodeID, key string, before []chain.TxnID) {
	have := w.stores[n].keyLog(key)
	for _, id := range w.placement[key] {
		log := before
		if id != n {
			log = w.stores[id].keyLog(key)
		}
		for _, t := range log {
			if slices.Contains(have, t) || w.allFailed[key][t] {
				continue
			}
			if w.allFailed[key] == nil {
				w.allFailed[key] = map[chain.TxnID]bool{}
			}
			w.allFailed[key][t] = true
			w.stats.AllFailed++
			w.trace("%s caught up on %s without %s, which %s holds, while no replica was up to date", n, key, t, id)
		}
	}
}

// refreshedWithin reports whether a catch-up changed node n's copy of key
// in ticks [from, to]: reads of versions before the copy's are refused
// from then on (see mvcc/catchup.go).
func (w *world) refreshedWithin(n ring.NodeID, key string, from, to int) bool {
	return slices.ContainsFunc(w.refreshes, func(r refresh) bool {
		return r.node == n && r.key == key && from <= r.at && r.at <= to
	})
}

// countReplica adds node n's replica's counters to the run's, before the
// replica goes (a crash) or at the end.
func (w *world) countReplica(n ring.NodeID) {
	c := w.replicas[n].Counters()
	w.stats.BehindRefused += int(c.Behind)
	w.stats.Asks += int(c.Asks)
}
