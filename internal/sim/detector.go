package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/txn"
)

// detector is a seed's failure detector: how each client, standing for the
// node its coordinator runs on, decides which nodes its chains keep, as a
// node's membership and read leases do (node.inChains). A client leaves a
// node out once it has not reached it for detectTicks ticks in a row: the
// node is down, across a partition from the client, or suspected by the
// client though it is up and reachable (a slow node, or a detector that is
// wrong). A client that would then keep no more than half of the nodes
// leaves none out, as a node that does not see a majority alive does. A
// node is back in chains as soon as the client reaches it again.
type detector struct {
	detectTicks int
	// suspicions are the windows in which a client cannot tell a node
	// from a dead one although the network delivers between them.
	suspicions []suspicion
}

// suspicion is client viewer failing to hear from node in ticks [from, to).
type suspicion struct {
	viewer, node int // indexes in the world's clients and nodes
	from, to     int
}

// Bounds of the detector, in ticks.
const (
	detectTicksMin, detectTicksMax       = 2, 30
	suspicionTicksMin, suspicionTicksMax = 5, 64
	suspicionsMax                        = 4
)

// detectorSource is the random source of the failure detector, apart from
// the rest so that its draws do not shift the seed's other choices (the
// profile, the placement, the partition and crash schedules).
func detectorSource(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0xde7ec7)) }

// pickDetector draws the seed's detector, before the world is built: how
// soon clients leave a node out of chains, and, on half the seeds, one to
// suspicionsMax false suspicions, all over before the fault phase ends.
// On half the seeds it also stretches the replicas' outcome retention far
// past the message delay, as a node's is (a minute against seconds), so
// that the forward age (see forwardAgeTicks) exceeds the time to leave a
// node out, as it does on a node; the other half keep the tight retention
// that tests the replicas' contract with the network.
func (w *world) pickDetector(rng *rand.Rand) {
	w.det.detectTicks = detectTicksMin + rng.IntN(detectTicksMax-detectTicksMin+1)
	n := 0
	if rng.IntN(2) == 0 {
		n = 1 + rng.IntN(suspicionsMax)
	}
	if w.cfg.Suspicious {
		n = max(n, 2)
		w.det.detectTicks = min(w.det.detectTicks, detectTicksMin+rng.IntN(5))
	}
	for range n {
		from := rng.IntN(faultTicks - suspicionTicksMin)
		w.det.suspicions = append(w.det.suspicions, suspicion{
			viewer: rng.IntN(w.p.clients), node: rng.IntN(w.p.nodes),
			from: from, to: min(from+suspicionTicksMin+rng.IntN(suspicionTicksMax-suspicionTicksMin+1), faultTicks),
		})
	}
	if stretch := 2*detectTicksMax + rng.IntN(detectTicksMax); rng.IntN(2) == 0 && w.cfg.RetentionTicks == 0 {
		w.p.retentionTicks += stretch
	}
	w.views = make([][]ring.NodeID, w.p.clients)
	w.lostSince = make([][]int, w.p.clients)
	for i := range w.lostSince {
		w.lostSince[i] = make([]int, w.p.nodes+w.ring.plan.spares)
		for j := range w.lostSince[i] {
			w.lostSince[i][j] = -1
		}
	}
}

// updateViews brings every client's view up to now; it runs at the start
// of each tick.
func (w *world) updateViews() {
	if w.cfg.NoReroutes {
		return
	}
	for i, c := range w.clients {
		var out []ring.NodeID
		for j, n := range w.nodes {
			lost := &w.lostSince[i][j]
			switch {
			case w.reaches(i, j, c.ID(), n):
				*lost = -1
			case *lost < 0:
				*lost = w.now
			}
			if *lost >= 0 && w.now-*lost >= w.det.detectTicks {
				out = append(out, n)
			}
		}
		if 2*(len(w.nodes)-len(out)) <= len(w.nodes) {
			out = nil // No majority in sight: nobody is left out.
		}
		if !slices.Equal(out, w.views[i]) {
			w.trace("%s leaves %v out of chains", c.ID(), out)
			for _, n := range out {
				if !slices.Contains(w.views[i], n) {
					// The node's read lease is revoked before it is left
					// out: it catches up before it serves again.
					w.startCatchUp(n, fmt.Sprintf("left out of %s's chains", c.ID()), true)
				}
			}
			w.views[i] = out
		}
	}
}

// reaches reports whether client i, whose ID is id, hears from node j,
// whose ID is n, now.
func (w *world) reaches(i, j int, id, n ring.NodeID) bool {
	if w.down[n] || w.partitioned(id, n) {
		return false
	}
	for _, s := range w.det.suspicions {
		if s.viewer == i && s.node == j && s.from <= w.now && w.now < s.to {
			return false
		}
	}
	return true
}

// inChains is client i's view now: whether its chains keep node n.
func (w *world) inChains(i int) func(n ring.NodeID) bool {
	return func(n ring.NodeID) bool { return !slices.Contains(w.views[i], n) }
}

// keepGroups returns the groups a re-execution of ops on members must
// keep one of each of (chain.Coordinator.Begin), as a node's Chain does:
// for each key, its replicas among members that serve it. A chain without
// one would commit that key's change nowhere, or only where it may not be
// copied yet.
func (w *world) keepGroups(ops []txn.Op, members []ring.NodeID) [][]ring.NodeID {
	var out [][]ring.NodeID
	for _, op := range ops {
		out = append(out, slices.DeleteFunc(slices.Clone(w.serving[op.Key]), func(n ring.NodeID) bool { return !slices.Contains(members, n) }))
	}
	return out
}

// forwardAgeTicks is how long after its client began a transaction a
// replica still stages a Forward of it that it has no record of; an older
// one counts as one an earlier run may have handled, which is not staged
// but answered with the outcome the members after it reached (see
// "Restarts" in chain/replica.go). A node does the same with
// node.ForwardAgeMax, half its retention: a member left out of a
// re-execution keeps sending the old chain's Forward for as long as it
// waits, and the member after it may have forgotten the transaction since,
// which it does no sooner than the retention after the transaction began.
// Staging that Forward would start the transaction again.
func (w *world) forwardAgeTicks() int { return w.p.retentionTicks / 2 }

// markLeftBehind counts, for each finished transaction, the members its
// final chain left out, and marks the copies of those that did not commit
// it, when it committed, as behind on the keys it wrote: the coordinator
// left them out of the chain, which a node does only after revoking their
// read leases, so they catch up before they serve again (see
// catchup.go). A left-out member that had staged the transaction learns
// its outcome from the member after it in the older chain and commits or
// aborts it like the rest; the checkers hold it to that.
func (w *world) markLeftBehind() {
	for _, id := range w.order {
		t := w.txns[id]
		if !t.finished {
			continue
		}
		if t.reroutes > 0 && t.outcome.Committed {
			w.stats.RerouteCommitted++
		}
		for _, n := range t.placed {
			if slices.Contains(t.final, n) {
				continue
			}
			w.stats.LeftOut++
			st := w.stores[n].statusOf(id)
			if st == statusCommitted || st == statusAborted {
				w.stats.LeftStaged++
			}
			if !t.outcome.Committed || st == statusCommitted || slices.Contains(w.stageLost[id], n) {
				continue
			}
			w.stats.LeftBehind++
			w.trace("%s, left out of %s, misses its commit (%s here)", n, id, st)
			w.markBehind(n, t)
		}
	}
}
