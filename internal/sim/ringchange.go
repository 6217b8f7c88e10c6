package sim

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"

	"github.com/tyrstore/tyr/internal/chain"
	"github.com/tyrstore/tyr/internal/rebalance"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/txn"
)

// Ring changes, as nodes make them (internal/node/epoch.go), over the
// epoch records of internal/rebalance and the rings of internal/ring.
//
// On the seeds that draw them (ringSource, apart from the other sources,
// so that the seeds without ring changes run as they did), the keys are
// placed by a real ring: each key's replicas are those of its chunk 0
// under the current record's placement (rebalance.Placement), and the
// fault phase makes 1 to 3 ring changes, each proposed with
// rebalance.Propose once the epoch before it is clean: a spare node, up
// from the start outside the ring, joins; a member leaves (a
// decommission); or a member's weight changes. A virtual ring coordinator,
// the alive member of the new ring with the lowest ID
// (rebalance.Coordinator), polls the members every ringPollTicks and
// advances the epoch with rebalance.Advance on the acknowledgements of
// the members it reaches: the members up and on its side of a partition.
// Every node and client installs each phase at once (the record is the
// world's); what takes time is the acknowledgements and the copies.
//
// While ranges move (Installing to Switching), a key's replicas are the
// union of its old and new owners (rebalance.Placement.Replicas), and its
// serving replicas those of the ring reads use: the old one, and the new
// one from Switching. A replica that holds a key it does not serve gains
// it: it comes after the serving ones in chains, as members catching up
// do (chainOrder, as node.Chain), is no read target and no copy source,
// and a commit whose keys it only gains passes through it, when its copy
// is behind, without making it catch up as a whole: the key is marked
// for the move's copy (markMoveDirty), unless that copy has ended.
//
// In Copying each node that gains ranges copies them (moveCopy): a
// barrier like catch-up's, so that every commit after it includes the
// node, then each key it gains, then each key a commit passed through
// meanwhile, one at a time, from a serving replica (source), by a request
// and a reply that travel the simulated network: delayed, lost, cut by
// partitions, retried after copyTimeoutTicks. The copy happens when the
// request reaches the source, as mvcc.Store.Refresh does it (or the
// MemStore's model of it). Once done, the node acknowledges the copy and
// the coordinator marks the move copied. A node that crashes loses its
// copy and starts it again when it restarts, if the epoch is still
// copying; one that was down when the epoch went past Copying catches
// up, as after any restart, before it serves reads.
//
// Not modelled: old owners keep what they gave up (a node drops it after
// the epoch is clean), nodes and clients never see different phases of
// one epoch, and every key is one chunk, so no holder only holds chunks.

// Bounds of ring changes, in ticks.
const (
	// ringPollTicks is how often the ring coordinator polls the members.
	ringPollTicks = 3
	// copyTimeoutTicks, past the slowest round trip, is how long a copy
	// request waits for its reply before it is sent again.
	copyTimeoutTicks = 3
)

// ringPlan is what a seed draws of ring changes.
type ringPlan struct {
	// changes is how many ring changes the fault phase makes, at or after
	// the ticks at; spares how many nodes start outside the ring.
	changes int
	at      []int
	spares  int
	// seed is the keyspace seed that places the keys on the ring.
	seed uint64
	// crashPct is the chance that a node gaining or giving up ranges
	// crashes during each change.
	crashPct int
}

// ringSource is the random source of ring changes, apart from the rest
// so that adding them left every seed without one as it was.
func ringSource(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x21e6c4a)) }

func pickRing(rng *rand.Rand, cfg Config) ringPlan {
	var p ringPlan
	if rng.IntN(3) != 0 && !cfg.Moves {
		return p
	}
	p.changes = 1 + rng.IntN(3)
	p.spares = rng.IntN(2)
	p.seed = rng.Uint64()
	for range p.changes {
		p.at = append(p.at, 1+rng.IntN(faultTicks*2/3))
	}
	slices.Sort(p.at)
	if rng.IntN(2) == 0 {
		p.crashPct = 50
	}
	return p
}

// ringState is the run's ring: its record and the copies of its moves.
type ringState struct {
	plan ringPlan
	rng  *rand.Rand
	rec  rebalance.Record
	pl   rebalance.Placement // rec's rings
	// proposed counts the changes proposed; polled is the tick of the
	// coordinator's last poll, and cleanAcked whether every member it
	// waits for acknowledged the current record's Clean phase.
	proposed   int
	polled     int
	cleanAcked bool
	// moves holds each node's copy of the epoch's ranges it gains, if it
	// copies or copied them; dirty, per node, the keys commits passed
	// through that it only gains, with the newest version one left and its
	// commit (rebalance.Mark; version 0: any);
	// closed, per node, the last epoch whose copy ended there.
	moves  map[ring.NodeID]*moveCopy
	dirty  map[ring.NodeID]map[string]rebalance.Mark[chain.TxnID]
	closed map[ring.NodeID]uint64
	// drains holds each node's drain of the Active phase
	// (rebalance.Drain), begun the first tick it is up in it.
	drains map[ring.NodeID]*rebalance.Drain[chain.TxnID]
	// ids numbers the copy requests.
	ids int
	// old is the ring before rec's in Active, whose owners take no more
	// writes and delete what they gave up once Clean (the old ring of
	// rebalance.Placement.Sources); nil in other phases.
	old *ring.Ring
}

// moveCopy is one node's copy of the ranges it gains in an epoch.
type moveCopy struct {
	epoch          uint64
	active, copied bool
	answered       []bool
	cut            []chain.TxnID
	barrier        bool
	todo           []string
	// req is the copy request in flight, if any.
	req *copyReq
}

// copyReq is a request for a copy of key at least at version want, from
// node src.
type copyReq struct {
	id       int
	key      string
	want     rebalance.Mark[chain.TxnID]
	src      ring.NodeID
	deadline int
}

// ringOn reports whether this seed makes ring changes.
func (w *world) ringOn() bool { return w.ring.plan.changes > 0 }

// buildRing places the keys on the first ring: the first p.nodes nodes,
// of weight 1; the spares stay outside.
func (w *world) buildRing() {
	var nodes []ring.Node
	for _, n := range w.nodes[:w.p.nodes] {
		nodes = append(nodes, ring.Node{ID: n, Weight: 1})
	}
	rec, err := rebalance.First(w.nodes[0], nodes)
	if err != nil {
		panic(err)
	}
	w.setRing(rec)
}

// setRing makes rec the record and places every key under it.
func (w *world) setRing(rec rebalance.Record) {
	pl, err := rec.Rings(ring.Config{})
	if err != nil {
		panic(fmt.Sprintf("sim: rings of epoch %d: %v", rec.Epoch, err))
	}
	w.ring.rec, w.ring.pl = rec, pl
	w.ring.old = nil
	if rec.Phase == rebalance.PhaseActive && len(rec.Old) > 0 {
		if w.ring.old, err = ring.New(ring.Config{}, rec.Epoch-1, rec.Old); err != nil {
			panic(fmt.Sprintf("sim: ring before epoch %d: %v", rec.Epoch, err))
		}
	}
	for _, k := range w.keys {
		write, err := pl.Replicas(w.ring.plan.seed, k, 0, w.p.replicationFactor)
		if err != nil {
			panic(fmt.Sprintf("sim: replicas of %s in epoch %d: %v", k, rec.Epoch, err))
		}
		read, err := pl.Read.Replicas(w.ring.plan.seed, k, 0, w.p.replicationFactor)
		if err != nil {
			panic(fmt.Sprintf("sim: replicas of %s in epoch %d: %v", k, rec.Epoch, err))
		}
		slices.Sort(write)
		slices.Sort(read)
		w.placement[k], w.serving[k] = write, read
	}
	w.trace("ring epoch %d %v: replicas %v serving %v", rec.Epoch, rec.Phase, w.placement, w.serving)
}

// serves reports whether node n serves reads of key: it is a replica of
// key under the ring reads use.
func (w *world) serves(n ring.NodeID, key string) bool { return slices.Contains(w.serving[key], n) }

// gaining reports whether node n holds key without serving it: it gains
// it in a ring change (or, from Switching, gives it up).
func (w *world) gaining(n ring.NodeID, key string) bool { return w.owns(n, key) && !w.serves(n, key) }

// onlyGained reports whether node n only gains every key of ops in the
// current move (rebalance.Placement.OnlyGains), as node.onlyGained does.
func (w *world) onlyGained(n ring.NodeID, ops []txn.Op) bool {
	return w.ring.pl.OnlyGains(txn.Keys(ops), func(key string) bool { return w.serves(n, key) })
}

// markMoveDirty marks keys, which a commit leaving version passed through
// node n for, for the move's copy, as node.markMoveDirty does; false,
// marking nothing, once n's copy of the epoch ended, in any phase
// (rebalance.Record.LeftToCopy).
func (w *world) markMoveDirty(n ring.NodeID, keys []string, version uint64, id chain.TxnID) bool {
	rec := w.ring.rec
	if !rec.LeftToCopy(w.ring.closed[n]) {
		return false
	}
	d := w.ring.dirty[n]
	if d == nil {
		d = map[string]rebalance.Mark[chain.TxnID]{}
		w.ring.dirty[n] = d
	}
	for _, k := range keys {
		d[k] = d[k].Add(version, id)
	}
	return true
}

// ringTick is the ring's work of one tick: the coordinator's poll, and
// each node's step of its copy.
func (w *world) ringTick() {
	if !w.ringOn() {
		return
	}
	for _, n := range w.nodes {
		w.stepMove(n)
		w.stepDrain(n)
	}
	if w.now-w.ring.polled >= ringPollTicks {
		w.ring.polled = w.now
		w.coordinate()
	}
}

// coordinator is the ring coordinator: the alive member of the new ring
// with the lowest ID.
func (w *world) coordinator() (ring.NodeID, bool) {
	var cands []rebalance.Candidate
	for _, id := range w.ring.rec.Members() {
		cands = append(cands, rebalance.Candidate{ID: id, Alive: !w.down[id], Eligible: w.ring.rec.InNew(id)})
	}
	return rebalance.Coordinator(cands)
}

// coordinate is one poll of the coordinator: it collects the members'
// acknowledgements, then advances the epoch or proposes the next change.
func (w *world) coordinate() {
	coord, ok := w.coordinator()
	if !ok {
		return
	}
	rec := w.ring.rec
	acks := map[ring.NodeID]rebalance.Ack{}
	for _, id := range rec.Members() {
		if w.down[id] || w.partitioned(coord, id) {
			continue
		}
		m := w.ring.moves[id]
		drained, done := w.drain(id).Drained(w.out(id).Covers)
		acks[id] = rebalance.Ack{Epoch: rec.Epoch, Phase: rec.Phase, Copied: m != nil && m.epoch == rec.Epoch && m.copied,
			Drained: done && drained == rec.Epoch}
	}
	alive := func(id ring.NodeID) bool { return !w.down[id] }
	if rec.Phase != rebalance.PhaseClean {
		inStep := func(id ring.NodeID) bool { return !w.catchingUp(id) }
		next, changed := rebalance.Advance(rec, acks, alive, inStep)
		if changed {
			w.installRing(next)
		}
		return
	}
	w.ring.cleanAcked = true
	for _, id := range rec.Required(alive) {
		if _, ok := acks[id]; !ok {
			w.ring.cleanAcked = false
		}
	}
	if !w.ring.cleanAcked || w.ring.proposed >= w.ring.plan.changes || w.now < w.ring.plan.at[w.ring.proposed] {
		return
	}
	w.ring.proposed++
	w.propose(coord)
}

// propose proposes the next ring change, of a kind drawn among those
// possible: a spare joins, a member leaves, or a member's weight changes.
func (w *world) propose(coord ring.NodeID) {
	rng, rec := w.ring.rng, w.ring.rec
	var spares, members []ring.NodeID
	for _, n := range w.nodes {
		switch {
		case rec.InNew(n):
			members = append(members, n)
		case !slices.Contains(rec.Removed, n):
			spares = append(spares, n)
		}
	}
	kinds := []string{"reweight"}
	if len(spares) > 0 {
		kinds = append(kinds, "join")
	}
	if len(members) > w.p.replicationFactor {
		kinds = append(kinds, "leave")
	}
	next := slices.Clone(rec.New)
	var what string
	switch kinds[rng.IntN(len(kinds))] {
	case "join":
		n := spares[rng.IntN(len(spares))]
		next = append(next, ring.Node{ID: n, Weight: 1})
		what = fmt.Sprintf("%s joins", n)
	case "leave":
		i := rng.IntN(len(next))
		what = fmt.Sprintf("%s leaves", next[i].ID)
		next = slices.Delete(next, i, i+1)
	default:
		i := rng.IntN(len(next))
		weight := next[i].Weight
		for weight == next[i].Weight {
			weight = 1 + uint32(rng.IntN(3))
		}
		what = fmt.Sprintf("%s weighs %d, was %d", next[i].ID, weight, next[i].Weight)
		next[i].Weight = weight
	}
	out, err := rebalance.Propose(rec, coord, next, w.p.replicationFactor)
	if err != nil {
		w.trace("ring change refused (%s): %v", what, err)
		return
	}
	before := maps.Clone(w.placement)
	w.stats.Moves++
	w.trace("ring change proposed by %s: %s", coord, what)
	w.installRing(out)
	for _, k := range w.keys {
		for _, n := range w.placement[k] {
			if !slices.Contains(before[k], n) {
				w.stats.KeysMoved++
			}
		}
	}
	if rng.IntN(100) < w.ring.plan.crashPct {
		var ids []ring.NodeID
		for _, m := range out.Moves {
			ids = append(ids, m.To)
			ids = append(ids, m.From...)
		}
		if len(ids) > 0 {
			n := ids[rng.IntN(len(ids))]
			at := w.now + 1 + rng.IntN(30)
			w.push(&event{at: at, kind: eventCrash, node: n})
			w.push(&event{at: at + 1 + rng.IntN(crashDownTicksMax), kind: eventRestart, node: n})
		}
	}
}

// installRing makes rec, the next phase or epoch, the record, and starts
// what its phase asks: the copies of Copying; and once the epoch is past
// Copying, hands what a copy left to fetch to catch-up (node.closeMove).
func (w *world) installRing(rec rebalance.Record) {
	w.setRing(rec)
	switch rec.Phase {
	case rebalance.PhaseCopying:
		for _, m := range rec.Moves {
			if !w.down[m.To] {
				w.startMove(m.To)
			}
		}
	case rebalance.PhaseSwitching:
		for _, n := range w.nodes {
			if mc := w.ring.moves[n]; mc != nil && mc.active {
				mc.active = false
				w.trace("%s's copy of epoch %d ends unfinished", n, rec.Epoch)
			}
			w.closeMove(n, true)
		}
	}
}

// startMove starts node n's copy of the ranges it gains in the current
// epoch, if it did not copy them already.
func (w *world) startMove(n ring.NodeID) {
	rec := w.ring.rec
	if mc := w.ring.moves[n]; mc != nil && mc.epoch == rec.Epoch && (mc.active || mc.copied) {
		return
	}
	mc := &moveCopy{epoch: rec.Epoch, active: true, answered: make([]bool, len(w.clients))}
	w.ring.moves[n] = mc
	w.trace("%s copies the ranges it gains in epoch %d", n, rec.Epoch)
	if w.cfg.SwitchBeforeCopy {
		// The bug: the node reports its ranges copied before it copied
		// anything, so reads and chains switch to it while its copies of
		// what it gains are empty.
		mc.active, mc.copied = false, true
		w.ring.closed[n] = rec.Epoch
		delete(w.ring.dirty, n)
	}
}

// closeMove ends node n's copy of the current epoch (node.closeMove): not
// while keys are left to fetch, unless all, when they go to catch-up.
func (w *world) closeMove(n ring.NodeID, all bool) bool {
	if !all && len(w.ring.dirty[n]) > 0 {
		return false
	}
	w.ring.closed[n] = max(w.ring.closed[n], w.ring.rec.Epoch)
	d := w.ring.dirty[n]
	if len(d) == 0 {
		return true
	}
	for _, k := range slices.Sorted(maps.Keys(d)) {
		if w.owns(n, k) {
			w.markDirty(n, k, d[k].Version, d[k].Txn)
		}
	}
	delete(w.ring.dirty, n)
	if !w.down[n] {
		w.startCatchUp(n, fmt.Sprintf("the copy of epoch %d ended with commits passed through it left to fetch", w.ring.rec.Epoch), false)
	}
	return true
}

// stepMove takes the next step of node n's copy, if it copies.
func (w *world) stepMove(n ring.NodeID) {
	mc := w.ring.moves[n]
	if mc == nil || !mc.active || w.down[n] {
		return
	}
	if !mc.barrier {
		if !w.barrierStep(n, mc.answered, &mc.cut) {
			return
		}
		mc.barrier, mc.cut = true, nil
		for _, k := range w.keys {
			if w.gaining(n, k) {
				mc.todo = append(mc.todo, k)
			}
		}
		w.trace("%s passed the barrier of its copy: gains %v", n, mc.todo)
		return
	}
	if mc.req != nil {
		if w.now < mc.req.deadline {
			return
		}
		w.stats.CopyRetries++
		w.trace("%s sends its copy request for %s again", n, mc.req.key)
		mc.req = nil
	}
	var key string
	switch {
	case len(mc.todo) > 0:
		key = mc.todo[0]
	case len(w.ring.dirty[n]) > 0:
		key = slices.Sorted(maps.Keys(w.ring.dirty[n]))[0]
	default:
		if w.closeMove(n, false) {
			mc.active, mc.copied = false, true
			w.trace("%s copied the ranges it gains in epoch %d", n, mc.epoch)
		}
		return
	}
	src, _ := w.source(n, key)
	if src == "" {
		return // no serving replica is up: try again next tick
	}
	w.ring.ids++
	mc.req = &copyReq{id: w.ring.ids, key: key, want: w.ring.dirty[n][key], src: src,
		deadline: w.now + 2*w.p.delayTicksMax + copyTimeoutTicks}
	w.sendCopy(eventCopy, n, src, n, mc.req)
}

// sendCopy puts a copy request (kind eventCopy, from node n to src) or
// its reply (eventCopied, from src to n) on the network, which loses it
// while it is faulty and cuts it across a partition, as any message.
func (w *world) sendCopy(kind eventKind, from, to, n ring.NodeID, req *copyReq) {
	rng := w.ring.rng
	if w.partitioned(from, to) || (!w.healed && rng.IntN(100) < w.p.dropPct) {
		w.trace("copy %d of %s from %s to %s lost", req.id, req.key, from, to)
		return
	}
	w.push(&event{at: w.now + 1 + rng.IntN(w.p.delayTicksMax), kind: kind, node: n, copy: req})
}

// deliverCopy handles a copy request reaching its source, or its reply
// reaching node n.
func (w *world) deliverCopy(kind eventKind, n ring.NodeID, req *copyReq) {
	mc := w.ring.moves[n]
	current := mc != nil && mc.active && mc.req != nil && mc.req.id == req.id
	switch kind {
	case eventCopy:
		if !current || w.down[n] || w.down[req.src] || w.partitioned(n, req.src) {
			return
		}
		// The source asked first; the others as a node asks them
		// (node.moveRefresh).
		if !w.refreshKey(n, req.key, req.want.Version, req.want.Txn) {
			return // not yet: the request is sent again
		}
		w.sendCopy(eventCopied, req.src, n, n, req)
	case eventCopied:
		if !current || w.down[n] || w.partitioned(req.src, n) {
			return
		}
		mc.req = nil
		w.stats.MoveCopies++
		if len(mc.todo) > 0 && mc.todo[0] == req.key {
			mc.todo = mc.todo[1:]
		}
		if d := w.ring.dirty[n]; d != nil && d[req.key] == req.want {
			delete(d, req.key)
		}
	}
}

// ringBusy reports whether a ring change is planned or in progress.
func (w *world) ringBusy() bool {
	if !w.ringOn() {
		return false
	}
	if w.ring.rec.Phase != rebalance.PhaseClean || !w.ring.cleanAcked {
		return true
	}
	return w.ring.proposed < w.ring.plan.changes
}

// drain is node n's drain of the Active phase.
func (w *world) drain(n ring.NodeID) *rebalance.Drain[chain.TxnID] {
	d := w.ring.drains[n]
	if d == nil {
		d = &rebalance.Drain[chain.TxnID]{}
		if w.ring.drains == nil {
			w.ring.drains = map[ring.NodeID]*rebalance.Drain[chain.TxnID]{}
		}
		w.ring.drains[n] = d
	}
	return d
}

// stepDrain begins node n's drain of an Active phase over the commits its
// replica holds staged, and follows them, as a node's loop does.
func (w *world) stepDrain(n ring.NodeID) {
	if w.down[n] {
		return
	}
	d := w.drain(n)
	d.Begin(w.ring.rec, w.replicas[n].StagedTxns)
	d.Step(w.replicas[n].HoldsStage, w.out(n).Mark())
}

// ringCrash drops what node n held of the ring change in memory.
func (w *world) ringCrash(n ring.NodeID) {
	if !w.ringOn() {
		return
	}
	delete(w.ring.drains, n)
	delete(w.ring.moves, n)
	delete(w.ring.dirty, n)
	delete(w.ring.closed, n)
}

// ringRestart resumes node n's copy if the epoch is still copying and the
// coordinator has not marked it copied.
func (w *world) ringRestart(n ring.NodeID) {
	if !w.ringOn() {
		return
	}
	rec := w.ring.rec
	if m, ok := rec.Move(n); ok && !m.Copied && rec.Phase == rebalance.PhaseCopying {
		w.startMove(n)
	}
}

// ringSummary is the ring's part of the summary, on seeds with changes.
func (w *world) ringSummary() string {
	if !w.ringOn() {
		return ""
	}
	return fmt.Sprintf(" | ring: spares=%d epoch=%d moves=%d keys-moved=%d copies=%d copy-retries=%d",
		w.ring.plan.spares, w.ring.rec.Epoch, w.stats.Moves, w.stats.KeysMoved, w.stats.MoveCopies, w.stats.CopyRetries)
}
