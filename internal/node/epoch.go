package node

// Ring epochs (internal/rebalance): once a cluster has a ring record, the
// placement comes from the record, not from the membership view, and a
// joining or leaving node changes it only through the ring coordinator.
//
// Every node keeps the record of the current epoch in a file beside its
// data (Config.RingFile), written and synced before it acts on it or
// acknowledges it. The coordinator, the alive member of the ring with the
// lowest ID (rebalance.Coordinator), polls every member with PutRing every
// ringTick: the call hands over its record and brings back the member's,
// which acknowledges it, and the member's copy progress. A member whose
// record is further along wins: a coordinator that took over from one that
// died adopts the newest record any member holds before it acts, so a
// change is picked up where it stopped. The coordinator then advances the
// epoch (rebalance.Advance) or, when it is clean, proposes the next one on
// a membership change or a decommission (rebalance.Propose).
//
// A node that has no record yet (it has just joined, with an empty data
// directory) asks the live members for theirs before it serves anything:
// until one answers, or all answer that they have none (a cluster that has
// not yet published its first ring: the ring then follows the view, as
// before), Placement fails with errs.ErrUnavailable.
//
// In phase Copying, each node that gains ranges copies their blobs from
// the old owners (moveCopy): a barrier with every live peer, then a refresh
// of every blob it holds a part of that it does not yet keep in step,
// then of every blob a commit passed through meanwhile. The copy is
// throttled to Config.MoveBytesPerSecond. A commit that passes through a
// node for a blob it only gains (it serves no reads of it) marks the blob
// for this copy rather than making the whole node catch up. A restart in
// the middle of a copy starts it again; blobs already in step cost a
// listing, not a copy.
//
// In phase Clean, each node of the old ring drops what it no longer holds
// (cleanUp): the blobs of which it holds no part, and the chunks it gave
// up of the others, after cleanGrace, so that reads routed before the
// last acknowledgement have ended.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tyrstore/tyr/api/peerpb"
	"github.com/tyrstore/tyr/internal/chain"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/membership"
	"github.com/tyrstore/tyr/internal/mvcc"
	"github.com/tyrstore/tyr/internal/rebalance"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/storage"
	"github.com/tyrstore/tyr/internal/txn"
)

const (
	// ringTick is the coordinator's polling period.
	ringTick = 300 * time.Millisecond
	// ringCallTimeout bounds one PutRing call.
	ringCallTimeout = 2 * time.Second
	// joinSettle: a membership change is planned once the view has not
	// changed for this long, so that nodes joining together move together.
	joinSettle = 2 * time.Second
	// cleanGrace is how long an old owner waits, once the epoch is clean,
	// before it drops what it gave up.
	cleanGrace = 2 * time.Second
	// MoveBytesPerSecondDefault is Config.MoveBytesPerSecond when unset:
	// 32 MiB/s.
	MoveBytesPerSecondDefault = 32 << 20
)

// epochState is the node's ring record and what derives from it.
type epochState struct {
	mu struct {
		sync.Mutex
		rec   *rebalance.Record
		known bool // rec, or the knowledge that no member has one
		// noRecord is the view's ring ID when the node last learnt that
		// no member has a record (rec nil and known): the view ring it
		// may place by. Another view ring makes it ask again (rings).
		noRecord membership.RingID
		pl       rebalance.Placement
		// old is the ring before rec's change, nil for a first ring.
		old *ring.Ring
		// copying is the epoch a copy runs for; copied the last epoch
		// whose copy finished; cleaned the last epoch cleaned.
		copying, copied, cleaned uint64
		// viewAt is when the coordinator last saw the view change.
		view   *membership.View
		viewAt time.Time
		// progress is the latest progress each member reported.
		progress map[ring.NodeID]*peerpb.PutRingResponse
		// reweightEpoch is the clean epoch the coordinator last checked
		// for a reweight (reweight.go), and reweightAt when.
		reweightEpoch uint64
		reweightAt    time.Time
	}
	copiedBytes atomic.Uint64
	copiedBlobs atomic.Uint64
	// relearning: a learnRing started by rings runs.
	relearning atomic.Bool
	// recopy, when not 0, makes catch-up copy every chunk the node holds,
	// not only those the current epoch's change gains (skippedCopy); the
	// first catch-up round that starts after it was set and ends clears it.
	recopy   atomic.Uint64
	throttle throttle
	// dirty: blobs a commit passed through that this node only gains.
	dirtyMu sync.Mutex
	dirty   map[blobRef]dirtyMark
	// closed is the last epoch whose copy has ended, guarded by dirtyMu:
	// from then on no copy fetches what dirty names (markMoveDirty).
	closed uint64
	// whole holds, per blob, the epoch in which this process last took a
	// copy of it with the bytes of every chunk it gains (guarded by
	// dirtyMu; see chunkSource.Copy).
	whole map[blobRef]uint64
}

// dirtyMark is what the move's copy, or catch-up, of a blob a commit
// passed through waits for.
type dirtyMark = rebalance.Mark[chain.TxnID]

// loadRing reads the record file at start.
func (n *Node) loadRing() error {
	e := &n.epoch
	e.mu.progress = map[ring.NodeID]*peerpb.PutRingResponse{}
	e.dirty = map[blobRef]dirtyMark{}
	e.whole = map[blobRef]uint64{}
	rate := n.cfg.MoveBytesPerSecond
	if rate == 0 {
		rate = MoveBytesPerSecondDefault
	}
	e.throttle.rate = float64(rate)
	if n.cfg.RingFile == "" {
		e.mu.known = true // no epochs: the ring follows the view
		return nil
	}
	b, err := os.ReadFile(n.cfg.RingFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var rec rebalance.Record
	if err := json.Unmarshal(b, &rec); err != nil {
		return fmt.Errorf("node: ring record %s: %w", n.cfg.RingFile, err)
	}
	if err := rec.Validate(); err != nil {
		return fmt.Errorf("node: ring record %s: %w", n.cfg.RingFile, err)
	}
	return n.setRing(rec)
}

// Ring returns the node's ring record, if it has one.
func (n *Node) Ring() (rebalance.Record, bool) {
	n.epoch.mu.Lock()
	defer n.epoch.mu.Unlock()
	if n.epoch.mu.rec == nil {
		return rebalance.Record{}, false
	}
	return *n.epoch.mu.rec, true
}

// setRing makes rec the node's record in memory.
func (n *Node) setRing(rec rebalance.Record) error {
	pl, err := rec.Rings(ring.Config{})
	if err != nil {
		return err
	}
	var old *ring.Ring
	if len(rec.Old) > 0 {
		if old, err = ring.New(ring.Config{}, rec.Epoch-1, rec.Old); err != nil {
			return err
		}
	}
	n.epoch.mu.Lock()
	n.epoch.mu.rec, n.epoch.mu.pl, n.epoch.mu.old = &rec, pl, old
	n.epoch.mu.Unlock()
	return nil
}

// installRing stores rec durably, then makes it the node's record, if it
// is further along than the one held. It reports whether it did.
func (n *Node) installRing(rec rebalance.Record) (bool, error) {
	if err := rec.Validate(); err != nil {
		return false, err
	}
	n.ringInstallMu.Lock()
	defer n.ringInstallMu.Unlock()
	cur, has := n.Ring()
	if has && !rec.Newer(cur) {
		return false, nil
	}
	if skip, all := n.skippedCopy(cur, has, rec); skip {
		// Before the placement changes: reads of what the node gains
		// switch to it with rec, and it has not copied it.
		if all {
			n.catch.mu.Lock()
			n.epoch.recopy.Add(1)
			n.catch.mu.Unlock()
		}
		n.startCatchUp(fmt.Sprintf("ring epoch %d %v: the ranges this node gains were not copied here", rec.Epoch, rec.Phase))
	}
	if n.cfg.RingFile != "" {
		b, _ := json.MarshalIndent(rec, "", "  ")
		if err := writeSynced(n.cfg.RingFile, b); err != nil {
			return false, err
		}
	}
	if err := n.setRing(rec); err != nil {
		return false, err
	}
	n.cfg.Log.Info("ring epoch installed", "epoch", rec.Epoch, "phase", rec.Phase.String(), "coordinator", rec.Coordinator)
	n.ringActions(rec)
	return true, nil
}

// skippedCopy reports whether, going from cur (has: the node holds a
// record) to rec, the node comes to serve reads of ranges it gains without
// having copied them: the epoch of its move went past Copying without its
// copy (the coordinator went on while it counted the node dead, or the
// node was down), or it missed whole epochs. It then must catch up before
// it serves reads. all reports that catch-up must copy every chunk the node
// holds: the ring before rec's change is not the one the node last held
// chunks by, so gainedChunk does not name them all.
func (n *Node) skippedCopy(cur rebalance.Record, has bool, rec rebalance.Record) (skip, all bool) {
	n.epoch.mu.Lock()
	copied := n.epoch.mu.copied
	n.epoch.mu.Unlock()
	uncopied := func(r rebalance.Record) bool {
		m, ok := r.Move(n.self)
		return ok && !m.Copied && copied != r.Epoch
	}
	switch {
	case !has:
		return false, false // a node without a record holds nothing yet
	case rec.Epoch > cur.Epoch+1:
		return true, true
	case rec.Epoch > cur.Epoch:
		if cur.Phase <= rebalance.PhaseCopying && uncopied(cur) {
			return true, true
		}
		return rec.Phase >= rebalance.PhaseSwitching && uncopied(rec), false
	default:
		return cur.Phase <= rebalance.PhaseCopying && rec.Phase >= rebalance.PhaseSwitching && uncopied(rec), false
	}
}

// untrustedChunk reports whether this node, catching up, may hold chunk c
// of key under p at a version it has not the bytes of: a version manager
// keeps the versions of chunks it does not hold, so for a chunk it gained
// in a ring change and has not copied yet, or while catch-up copies every
// chunk (recopy), its version says nothing of its pages.
func (n *Node) untrustedChunk(p Placement, key string, c uint64) bool {
	if n.epoch.recopy.Load() != 0 {
		return true
	}
	rec, ok := n.Ring()
	n.epoch.mu.Lock()
	copied := n.epoch.mu.copied
	n.epoch.mu.Unlock()
	return ok && copied != rec.Epoch && n.gainedChunk(p, key, c)
}

// writeSynced replaces path with b durably.
func writeSynced(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		if d, derr := os.Open(filepath.Dir(path)); derr == nil {
			err = d.Sync()
			_ = d.Close()
		}
	}
	return err
}

// ringActions starts what rec's phase asks of this node: the copy of the
// ranges it gains, or the cleanup of those it gave up.
func (n *Node) ringActions(rec rebalance.Record) {
	e := &n.epoch
	e.mu.Lock()
	defer e.mu.Unlock()
	if m, ok := rec.Move(n.self); ok && !m.Copied && rec.Phase == rebalance.PhaseCopying &&
		e.mu.copying != rec.Epoch && e.mu.copied != rec.Epoch {
		e.mu.copying = rec.Epoch
		e.copiedBytes.Store(0)
		e.copiedBlobs.Store(0)
		e.dirtyMu.Lock()
		clear(e.whole)
		e.dirtyMu.Unlock()
		go n.moveCopy(rec.Epoch)
	}
	inOld := slices.ContainsFunc(rec.Old, func(x ring.Node) bool { return x.ID == n.self })
	if rec.Phase == rebalance.PhaseClean && inOld && e.mu.cleaned != rec.Epoch {
		e.mu.cleaned = rec.Epoch
		go n.cleanUp(rec.Epoch)
	}
}

// rings returns the read ring and the other ring of a move (nil if none),
// from the record or, without one, from the view. It fails with
// errs.ErrUnavailable while the node does not know yet whether the
// cluster has a record.
func (n *Node) rings() (read, also *ring.Ring, err error) {
	read, also, _, err = n.ringSet()
	return read, also, err
}

// ringSet is rings, and the ring before the current epoch's change while
// the epoch is Active (see Placement.old), else nil, read under one lock.
func (n *Node) ringSet() (read, also, stale *ring.Ring, err error) {
	n.epoch.mu.Lock()
	rec, pl, known := n.epoch.mu.rec, n.epoch.mu.pl, n.epoch.mu.known
	if rec != nil && rec.Phase == rebalance.PhaseActive {
		stale = n.epoch.mu.old
	}
	if known && rec == nil && n.cfg.RingFile != "" && n.cfg.Cluster.View().RingID() != n.epoch.mu.noRecord {
		// The membership changed since the members said they had no
		// record. The ring coordinator may have published the first
		// epoch meanwhile, taking the membership as it was: a node that
		// placed chunks by the new view's ring (one that just joined, say)
		// before it installs that epoch would put them where the others
		// do not look for them. Ask again first.
		n.epoch.mu.known = false
		known = false
		if n.epoch.relearning.CompareAndSwap(false, true) {
			go func() {
				defer n.epoch.relearning.Store(false)
				n.learnRing()
			}()
		}
	}
	n.epoch.mu.Unlock()
	if !known {
		return nil, nil, nil, fmt.Errorf("%w: node %s is learning the cluster's ring epoch", errs.ErrUnavailable, n.self)
	}
	if rec != nil {
		return pl.Read, pl.Also, stale, nil
	}
	r, err := n.viewRing()
	return r, nil, nil, err
}

// learnRing runs at start: it asks the live members for their records and
// takes the newest, until every one answered (a node that was down may
// have missed epochs). Until then the node serves nothing that depends on
// placement. It runs again when the membership changes while no member
// has a record (rings).
func (n *Node) learnRing() {
	for {
		view := n.cfg.Cluster.View().RingID()
		peers := n.livePeers()
		answered := 0
		for _, id := range peers {
			resp, err := n.putRing(context.Background(), id, nil)
			if err != nil {
				continue
			}
			if len(resp.GetRecord()) == 0 {
				answered++
				continue
			}
			var rec rebalance.Record
			if err := json.Unmarshal(resp.GetRecord(), &rec); err == nil {
				if _, err := n.installRing(rec); err != nil {
					n.cfg.Log.Warn("installing a peer's ring record", "peer", id, "err", err)
				}
			}
			answered++
		}
		if answered == len(peers) {
			n.epoch.mu.Lock()
			n.epoch.mu.known, n.epoch.mu.noRecord = true, view
			n.epoch.mu.Unlock()
			return
		}
		select {
		case <-n.stop:
			return
		case <-time.After(ringTick):
		}
	}
}

func (n *Node) putRing(ctx context.Context, id ring.NodeID, rec []byte) (*peerpb.PutRingResponse, error) {
	c, err := n.peerClient(id)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, ringCallTimeout)
	defer cancel()
	return c.PutRing(cctx, &peerpb.PutRingRequest{Record: rec})
}

// PutRing implements peerpb.PeerServer (see the top of this file).
func (n *Node) PutRing(_ context.Context, req *peerpb.PutRingRequest) (*peerpb.PutRingResponse, error) {
	if len(req.GetRecord()) > 0 {
		var rec rebalance.Record
		if err := json.Unmarshal(req.GetRecord(), &rec); err != nil {
			return nil, statusOf(fmt.Errorf("%w: ring record: %w", errs.ErrInvalidArgument, err))
		}
		if _, err := n.installRing(rec); err != nil {
			return nil, statusOf(err)
		}
	}
	return n.ringReport(), nil
}

// ringReport is this node's answer to PutRing.
func (n *Node) ringReport() *peerpb.PutRingResponse {
	resp := &peerpb.PutRingResponse{CopiedBytes: n.epoch.copiedBytes.Load(), CopiedBlobs: n.epoch.copiedBlobs.Load()}
	rec, ok := n.Ring()
	if !ok {
		return resp
	}
	resp.Record, _ = json.Marshal(rec)
	n.epoch.mu.Lock()
	resp.Copied = n.epoch.mu.copied == rec.Epoch
	n.epoch.mu.Unlock()
	resp.Drained = n.drained.Load() == rec.Epoch
	return resp
}

// ringLoop runs the coordinator's work whenever this node is the
// coordinator.
func (n *Node) ringLoop() {
	defer close(n.ringDone)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-n.stop
		cancel()
	}()
	if n.cfg.RingFile == "" {
		return // no epochs: the ring follows the view
	}
	n.learnRing()
	if rec, ok := n.Ring(); ok {
		n.ringActions(rec) // resume a copy or a cleanup after a restart
	}
	for {
		select {
		case <-n.stop:
			return
		case <-time.After(ringTick):
		}
		if err := n.coordinate(ctx); err != nil {
			n.cfg.Log.Info("ring coordinator", "err", err)
		}
	}
}

// IsRingCoordinator reports whether this node is the ring coordinator in
// its own view.
func (n *Node) IsRingCoordinator() bool {
	id, ok := n.ringCoordinator()
	return ok && id == n.self
}

func (n *Node) ringCoordinator() (ring.NodeID, bool) {
	rec, has := n.Ring()
	var cands []rebalance.Candidate
	for _, m := range n.cfg.Cluster.View().Members() {
		id := m.Meta.ID
		alive := m.State == membership.StateAlive || (id == n.self && m.State != membership.StateLeft)
		cands = append(cands, rebalance.Candidate{ID: id, Alive: alive && !m.Meta.Leaving,
			Eligible: !has || rec.InNew(id)})
	}
	return rebalance.Coordinator(cands)
}

// RingCoordinator returns the coordinator in this node's view.
func (n *Node) RingCoordinator() (ring.NodeID, bool) { return n.ringCoordinator() }

// coordinate is one tick of the coordinator.
func (n *Node) coordinate(ctx context.Context) error {
	view := n.cfg.Cluster.View()
	e := &n.epoch
	e.mu.Lock()
	if view.RingID() != ringIDOrZero(e.mu.view) || e.mu.view == nil {
		e.mu.view, e.mu.viewAt = view, time.Now()
	}
	settled := time.Since(e.mu.viewAt) >= joinSettle
	known := e.mu.known
	e.mu.Unlock()
	if !known || !n.IsRingCoordinator() {
		return nil
	}
	rec, has := n.Ring()
	var body []byte
	if has {
		body, _ = json.Marshal(rec)
	}
	// Poll every member: the view's alive ones and the record's.
	targets := map[ring.NodeID]bool{}
	for _, m := range view.Members() {
		if m.State == membership.StateAlive && m.Meta.ID != n.self {
			targets[m.Meta.ID] = true
		}
	}
	if has {
		for _, id := range rec.Members() {
			if id != n.self && n.cfg.Cluster.Alive(id) {
				targets[id] = true
			}
		}
	}
	acks := map[ring.NodeID]rebalance.Ack{}
	progress := map[ring.NodeID]*peerpb.PutRingResponse{n.self: n.ringReport()}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var newest *rebalance.Record
	for id := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := n.putRing(ctx, id, body)
			if err != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			progress[id] = resp
			if len(resp.GetRecord()) == 0 {
				return
			}
			var theirs rebalance.Record
			if json.Unmarshal(resp.GetRecord(), &theirs) != nil {
				return
			}
			acks[id] = rebalance.Ack{Epoch: theirs.Epoch, Phase: theirs.Phase, Copied: resp.GetCopied(), Drained: resp.GetDrained()}
			if (!has || theirs.Newer(rec)) && (newest == nil || theirs.Newer(*newest)) {
				newest = &theirs
			}
		}()
	}
	wg.Wait()
	e.mu.Lock()
	e.mu.progress = progress
	e.mu.Unlock()
	if newest != nil {
		// A member is further along: a coordinator before this one got
		// there. Take its record and go on from it next tick.
		_, err := n.installRing(*newest)
		return err
	}
	if !has {
		if !settled {
			return nil
		}
		// The first ring is the view's, with the weights the members
		// advertise: until a node installs it, it places chunks, stages
		// commits and serves reads by the view's ring, and the nodes
		// install it up to a tick apart, with no data moving. Any other
		// ring (capacity weights) would place chunks where no write put
		// them; it comes as a ring change instead, which copies them
		// (firstChange).
		first, err := rebalance.First(n.self, viewRingNodes(view))
		if err != nil {
			return err
		}
		_, err = n.installRing(first)
		return err
	}
	mine := n.ringReport()
	acks[n.self] = rebalance.Ack{Epoch: rec.Epoch, Phase: rec.Phase, Copied: mine.GetCopied(), Drained: mine.GetDrained()}
	if rec.Phase != rebalance.PhaseClean {
		inStep := func(id ring.NodeID) bool {
			if id == n.self {
				return !n.CatchingUp()
			}
			return !n.cfg.Cluster.CatchingUp(id)
		}
		next, changed := rebalance.Advance(rec, acks, n.cfg.Cluster.Alive, inStep)
		if !changed {
			return nil
		}
		_, err := n.installRing(next)
		return err
	}
	for _, id := range rec.Required(n.cfg.Cluster.Alive) {
		if a := acks[id]; a.Epoch != rec.Epoch || a.Phase != rebalance.PhaseClean {
			return nil // not clean everywhere yet
		}
	}
	if !settled {
		return nil
	}
	want := n.wantedRing(ctx, view, rec)
	capacity := n.firstChange(ctx, rec, want)
	if len(want) == len(rec.New) && !capacity {
		return n.reweight(ctx, rec) // no membership change waiting
	}
	next, err := rebalance.Propose(rec, n.self, want, n.replicationMax())
	switch {
	case errors.Is(err, rebalance.ErrUnchanged):
		return nil
	case err != nil:
		return err
	}
	if capacity {
		n.cfg.Log.Info("ring capacity weights proposed", "epoch", next.Epoch, "weights", weightsString(next.New))
	}
	n.cfg.Log.Info("ring change proposed", "epoch", next.Epoch, "members", len(next.New), "moves", len(next.Moves))
	_, err = n.installRing(next)
	return err
}

// firstChange gives, with weighted tokens on, every member of want its
// capacity weight (joinWeight) if rec is the first ring, which took the
// advertised weights: the change from it moves the data to the capacity
// weights like any ring change. It reports whether a weight changed.
func (n *Node) firstChange(ctx context.Context, rec rebalance.Record, want []ring.Node) bool {
	if n.cfg.Usage == nil || rec.Epoch != 1 {
		return false
	}
	changed := false
	for i := range want {
		if w := n.joinWeight(ctx, want[i].ID, want[i].Weight); w != want[i].Weight {
			want[i].Weight, changed = w, true
		}
	}
	return changed
}

func ringIDOrZero(v *membership.View) membership.RingID {
	if v == nil {
		return 0
	}
	return v.RingID()
}

// viewRingNodes returns the ring members of view: every member not Left.
func viewRingNodes(view *membership.View) []ring.Node {
	var out []ring.Node
	for _, m := range view.Members() {
		if m.State != membership.StateLeft {
			out = append(out, ring.Node{ID: m.Meta.ID, Weight: m.Meta.Weight})
		}
	}
	return out
}

// wantedRing is the ring the coordinator aims for: the record's, plus the
// alive members not in it and never removed. A member that stops or
// leaves stays in the ring, like a dead one: only a decommission
// (Decommission) takes a node out, after moving its data. A newcomer takes
// the capacity weight of the capacity it reports (joinWeight).
func (n *Node) wantedRing(ctx context.Context, view *membership.View, rec rebalance.Record) []ring.Node {
	out := slices.Clone(rec.New)
	for _, m := range view.Members() {
		if m.State == membership.StateAlive && !m.Meta.Leaving && !rec.InNew(m.Meta.ID) && !slices.Contains(rec.Removed, m.Meta.ID) {
			out = append(out, ring.Node{ID: m.Meta.ID, Weight: n.joinWeight(ctx, m.Meta.ID, m.Meta.Weight)})
		}
	}
	return out
}

// replicationMax is the largest replication factor of the keyspaces.
func (n *Node) replicationMax() int {
	rf := 1
	for _, ks := range n.cfg.Engine.List() {
		rf = max(rf, int(ks.Config.Replication))
	}
	return rf
}

// Decommission asks this node, the coordinator, to take id out of the
// ring: it proposes the epoch without id at once, or fails with
// rebalance.ErrBusy while another change is in progress, with
// rebalance.ErrTooFewNodes if fewer nodes than a keyspace's replication
// factor would remain.
func (n *Node) Decommission(id ring.NodeID) (rebalance.Record, error) {
	if !n.IsRingCoordinator() {
		return rebalance.Record{}, fmt.Errorf("%w: node %s is not the ring coordinator", errs.ErrUnavailable, n.self)
	}
	rec, ok := n.Ring()
	if !ok {
		return rebalance.Record{}, fmt.Errorf("%w: the cluster has no ring epoch yet", errs.ErrUnavailable)
	}
	if !rec.InNew(id) {
		if slices.ContainsFunc(rec.Old, func(x ring.Node) bool { return x.ID == id }) {
			return rec, nil // already being removed
		}
		return rebalance.Record{}, fmt.Errorf("%w: node %q is not in the ring", errs.ErrNotFound, id)
	}
	var next []ring.Node
	for _, x := range rec.New {
		if x.ID != id {
			next = append(next, x)
		}
	}
	out, err := rebalance.Propose(rec, n.self, next, n.replicationMax())
	if err != nil {
		return rebalance.Record{}, err
	}
	if _, err := n.installRing(out); err != nil {
		return rebalance.Record{}, err
	}
	return out, nil
}

// MoveProgress is one node's copy progress as the coordinator last saw it.
type MoveProgress struct {
	Node         ring.NodeID
	Bytes, Blobs uint64
	Copied       bool
	Share        float64
}

// RingProgress returns the record and the copy progress of each node
// gaining ranges, as this node (the coordinator) last polled them.
func (n *Node) RingProgress() (rebalance.Record, []MoveProgress, bool) {
	rec, ok := n.Ring()
	if !ok {
		return rec, nil, false
	}
	n.epoch.mu.Lock()
	defer n.epoch.mu.Unlock()
	var out []MoveProgress
	for _, m := range rec.Moves {
		p := MoveProgress{Node: m.To, Copied: m.Copied, Share: m.Share}
		if resp := n.epoch.mu.progress[m.To]; resp != nil {
			p.Bytes, p.Blobs = resp.GetCopiedBytes(), resp.GetCopiedBlobs()
			p.Copied = p.Copied || resp.GetCopied()
		}
		out = append(out, p)
	}
	return rec, out, true
}

// gainedChunk reports whether this node holds chunk c of key under p but
// did not under the ring before the current epoch's change: a chunk whose
// bytes it may lack even if, as a version manager, it knows its version.
func (n *Node) gainedChunk(p Placement, key string, c uint64) bool {
	n.epoch.mu.Lock()
	old := n.epoch.mu.old
	n.epoch.mu.Unlock()
	if old == nil || !p.on(n.self, key, c) {
		return false
	}
	reps, err := old.Replicas(p.seed, key, c, min(p.rf, old.Len()))
	return err == nil && !slices.Contains(reps, n.self)
}

// gainsAnyChunk reports whether gainedChunk holds for a chunk of blob key
// (size bytes, chunk size cs).
func (n *Node) gainsAnyChunk(p Placement, key string, size, cs uint64) bool {
	for c := uint64(0); c*cs < size; c++ {
		if n.gainedChunk(p, key, c) {
			return true
		}
	}
	return false
}

// onlyGained reports whether this node only gains, in the current move,
// every blob of ops it has a part in (rebalance.Placement.OnlyGains): it
// serves reads of no part of any.
func (n *Node) onlyGained(pl Placement, cs uint64, ops []txn.Op, e versionEntry) bool {
	sizes := map[string]uint64{}
	for key, b := range e.bases {
		if b.Version != 0 {
			sizes[key] = b.Size
		}
	}
	touched := plan(ops, sizes, cs)
	keys := slices.DeleteFunc(txn.Keys(ops), func(key string) bool { return !e.hasPart(pl, key) })
	return rebalance.Placement{Read: pl.r, Also: pl.w}.OnlyGains(keys, func(key string) bool {
		size := sizes[key]
		if t, ok := touched[key]; ok {
			size = max(size, t.Hi)
			for _, c := range t.Written {
				size = max(size, (c+1)*cs)
			}
		}
		if pl.ServesBlob(key) {
			return true
		}
		for c := uint64(0); c*cs < size; c++ {
			if pl.ServesChunk(key, c) {
				return true
			}
		}
		return false
	})
}

// markMoveDirty records that a commit at version passed through this node
// for blobs it only gains: the copy fetches them again. It reports false,
// marking nothing, once the copy of the current epoch has ended, in any
// phase (rebalance.Record.LeftToCopy): no copy would fetch them, and the
// caller makes the node catch up instead, so that it serves none of them
// before it has them. A commit that passed through during the copy may be
// decided after it, once reads switched to this node (docs/bugs.md row
// 59).
func (n *Node) markMoveDirty(keyspace string, keys []string, version uint64, id chain.TxnID) bool {
	rec, _ := n.Ring()
	n.epoch.dirtyMu.Lock()
	defer n.epoch.dirtyMu.Unlock()
	if !rec.LeftToCopy(n.epoch.closed) {
		return false
	}
	for _, key := range keys {
		ref := blobRef{keyspace, key}
		n.epoch.dirty[ref] = n.epoch.dirty[ref].Add(version, id)
	}
	return true
}

// closeMove ends the copy of epoch and reports whether it did: not while
// dirty names a blob left to fetch, unless all (the epoch went on without
// the copy), when what dirty names is handed to catch-up. From then on a
// commit that passes through for a blob the node gains makes it catch up
// (markMoveDirty).
func (n *Node) closeMove(epoch uint64, all bool) bool {
	n.epoch.dirtyMu.Lock()
	defer n.epoch.dirtyMu.Unlock()
	if !all && len(n.epoch.dirty) > 0 {
		return false
	}
	n.epoch.closed = max(n.epoch.closed, epoch)
	if len(n.epoch.dirty) == 0 {
		return true
	}
	n.catch.mu.Lock()
	for ref, m := range n.epoch.dirty {
		n.catch.dirty[ref] = n.catch.dirty[ref].Add(m.Version, m.Txn)
	}
	n.catch.mu.Unlock()
	clear(n.epoch.dirty)
	n.startCatchUp(fmt.Sprintf("the copy of epoch %d ended with commits passed through this node left to fetch", epoch))
	return true
}

// moveCopy copies the ranges this node gains in epoch (see the top of
// this file), retrying until it succeeds or the epoch moves on.
func (n *Node) moveCopy(epoch uint64) {
	began := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-n.stop:
		case <-ctx.Done():
		}
		cancel()
	}()
	for {
		rec, ok := n.Ring()
		if !ok || rec.Epoch != epoch || rec.Phase != rebalance.PhaseCopying {
			n.epoch.mu.Lock()
			if n.epoch.mu.copying == epoch {
				n.epoch.mu.copying = 0
			}
			n.epoch.mu.Unlock()
			if ok && rec.Epoch == epoch {
				n.closeMove(epoch, true) // the epoch went on without this copy
			}
			return
		}
		err := n.moveCopyOnce(ctx, epoch)
		if err == nil {
			n.epoch.mu.Lock()
			n.epoch.mu.copied = epoch
			n.epoch.mu.Unlock()
			n.cfg.Log.Info("ranges copied", "epoch", epoch, "bytes", n.epoch.copiedBytes.Load(),
				"blobs", n.epoch.copiedBlobs.Load(), "took", time.Since(began).Round(time.Millisecond))
			return
		}
		n.cfg.Log.Info("copying ranges; trying again", "epoch", epoch, "err", err)
		select {
		case <-n.stop:
			return
		case <-time.After(catchUpRetry):
		}
	}
}

func (n *Node) moveCopyOnce(ctx context.Context, epoch uint64) error {
	peers := n.livePeers()
	if err := n.barrier(ctx, peers); err != nil {
		return err
	}
	// This node's own commits too: one whose chain was computed before it
	// installed the epoch may leave it out, and may reach the version
	// manager the copy reads from only after the copy read it.
	if err := n.inflight.wait(ctx); err != nil {
		return err
	}
	for _, ks := range n.cfg.Engine.List() {
		if err := n.moveKeyspace(ctx, ks, peers); err != nil {
			return fmt.Errorf("keyspace %q: %w", ks.Name, err)
		}
	}
	for {
		n.epoch.dirtyMu.Lock()
		var ref blobRef
		var m dirtyMark
		found := false
		for r, mark := range n.epoch.dirty {
			ref, m, found = r, mark, true
			break
		}
		n.epoch.dirtyMu.Unlock()
		if !found {
			if n.closeMove(epoch, false) {
				return nil
			}
			continue // a commit passed through meanwhile
		}
		ks, err := n.cfg.Engine.Acquire(ref.keyspace)
		if errors.Is(err, errs.ErrNotFound) {
			n.clearMoveDirty(ref, m)
			continue
		}
		if err != nil {
			return err
		}
		pl, err := n.Placement(ks.Name, int(ks.Config.Replication))
		if err == nil {
			err = n.moveRefresh(ctx, ks, pl, ref.key, m)
		}
		ks.Release()
		if err != nil {
			return err
		}
		n.clearMoveDirty(ref, m)
	}
}

// copiedWhole reports whether this process took a copy of blob ref with
// the bytes of every chunk it gains in epoch's change (noteWhole).
func (n *Node) copiedWhole(ref blobRef, epoch uint64) bool {
	n.epoch.dirtyMu.Lock()
	defer n.epoch.dirtyMu.Unlock()
	return n.epoch.whole[ref] == epoch
}

// noteWhole records that a copy of blob ref took the bytes of every chunk
// this node gains in epoch's change. From then on, until the process
// ends, every commit this node applies writes the pages of the chunks it
// holds, and after one it passes through, the next copy finds the chunks
// that commit wrote at other versions than this node's, and replaces them:
// a chunk's version is proof of its bytes again.
func (n *Node) noteWhole(ref blobRef, epoch uint64) {
	n.epoch.dirtyMu.Lock()
	defer n.epoch.dirtyMu.Unlock()
	n.epoch.whole[ref] = epoch
}

func (n *Node) clearMoveDirty(ref blobRef, m dirtyMark) {
	n.epoch.dirtyMu.Lock()
	defer n.epoch.dirtyMu.Unlock()
	if n.epoch.dirty[ref] == m {
		delete(n.epoch.dirty, ref)
	}
}

// moveKeyspace refreshes every blob of ks of which this node holds a part
// it serves no reads of.
func (n *Node) moveKeyspace(ctx context.Context, ks *storage.Keyspace, peers []ring.NodeID) error {
	pl, err := n.Placement(ks.Name, int(ks.Config.Replication))
	if err != nil {
		return err
	}
	if pl.w == nil {
		return nil
	}
	cs := ks.Store.ChunkBytes()
	sizes := map[string]uint64{}
	for _, id := range peers {
		err := n.peerVersions(ctx, id, ks.Name, func(b *peerpb.BlobVersion) {
			if pl.servesBlobOn(id, b.GetKey()) {
				sizes[b.GetKey()] = max(sizes[b.GetKey()], b.GetSize())
			}
		})
		if err != nil {
			return fmt.Errorf("versions of %s: %w", id, err)
		}
	}
	keys := make([]string, 0, len(sizes))
	for key := range sizes {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	for _, key := range keys {
		if !pl.gains(key, sizes[key], cs) {
			continue
		}
		// A commit that passed through before counts as copied by this
		// refresh, which waits for the source to have it.
		ref := blobRef{ks.Name, key}
		n.epoch.dirtyMu.Lock()
		want := n.epoch.dirty[ref]
		n.epoch.dirtyMu.Unlock()
		if err := n.moveRefresh(ctx, ks, pl, key, want); err != nil {
			return err
		}
		if want.Version != 0 {
			n.clearMoveDirty(ref, want)
		}
	}
	return nil
}

// moveRefresh is refresh for the copy: throttled and counted.
func (n *Node) moveRefresh(ctx context.Context, ks *storage.Keyspace, pl Placement, key string, want dirtyMark) error {
	changed, err := n.refreshBlob(ctx, ks, pl, key, want.Version, want.Txn, true)
	if err == nil && changed {
		n.epoch.copiedBlobs.Add(1)
	}
	return err
}

// cleanUp drops, on an old owner, what it no longer holds under the
// clean epoch's ring: the blobs of which it holds no part, and from the
// blobs it keeps, the chunks it gave up (mvcc.Store.Trim). A newer epoch
// that begins meanwhile stops it: that epoch's own cleanup, which this
// node runs too as one of its old owners, goes over every blob again
// under the newer ring (a node out of the newer ring holds nothing and
// goes on). Either way it logs what it dropped, and how many blobs it
// failed to trim (the first failure with its error).
func (n *Node) cleanUp(epoch uint64) {
	select {
	case <-n.stop:
		return
	case <-time.After(cleanGrace):
	}
	var blobs, chunks, failed int
	var newer uint64 // the epoch that stopped it, if one did
	stopped := false
	// superseded reports whether a newer epoch began whose cleanup will
	// revisit what this one has not done yet.
	superseded := func() bool {
		rec, ok := n.Ring()
		if ok && rec.Epoch == epoch {
			return false
		}
		if ok && !slices.Contains(rec.Members(), n.self) {
			return false // out of the ring: it holds nothing under any later epoch
		}
		newer, stopped = rec.Epoch, true
		return true
	}
keyspaces:
	for _, ks := range n.cfg.Engine.List() {
		var pl mvcc.Placement
		p, err := n.Placement(ks.Name, int(ks.Config.Replication))
		switch {
		case err == nil:
			pl = p
		case n.outOfRing():
			pl = holdsNothing{}
		default:
			n.cfg.Log.Warn("cleaning up after a ring change", "keyspace", ks.Name, "err", err)
			continue
		}
		for after := ""; ; {
			infos, more, err := ks.Store.List("", after, versionsPage)
			if err != nil {
				n.cfg.Log.Warn("cleaning up after a ring change", "keyspace", ks.Name, "err", err)
				break
			}
			for _, info := range infos {
				after = info.Key
				if superseded() {
					break keyspaces
				}
				t, err := ks.Store.TrimChunks(info.Key, pl)
				if err != nil {
					if failed++; failed == 1 {
						n.cfg.Log.Warn("cleaning up after a ring change", "keyspace", ks.Name, "key", info.Key, "err", err)
					}
					continue
				}
				if t.Blob {
					blobs++
				}
				chunks += t.Chunks
			}
			if !more {
				break
			}
		}
	}
	msg, attrs := "ring change cleaned up", []any{"epoch", epoch, "blobs dropped", blobs, "chunks dropped", chunks}
	if stopped {
		msg, attrs = "ring change cleanup stopped", append(attrs, "newer epoch", newer)
	}
	if failed > 0 {
		n.cfg.Log.Warn(msg, append(attrs, "blobs failed", failed)...)
		return
	}
	n.cfg.Log.Info(msg, attrs...)
}

// outOfRing reports whether this node's record leaves it out of the ring.
func (n *Node) outOfRing() bool {
	rec, ok := n.Ring()
	return ok && !rec.InNew(n.self)
}

// holdsNothing is the mvcc.Placement of a node out of the ring.
type holdsNothing struct{}

func (holdsNothing) Manages(string) bool       { return false }
func (holdsNothing) Holds(string, uint64) bool { return false }

// throttle paces the copy at rate bytes per second.
type throttle struct {
	mu   sync.Mutex
	rate float64
	next time.Time
}

// wait returns once n more bytes fit under the rate, or ctx ends.
func (t *throttle) wait(ctx context.Context, n int) error {
	t.mu.Lock()
	now := time.Now()
	if t.next.Before(now) {
		t.next = now
	}
	at := t.next
	t.next = t.next.Add(time.Duration(float64(n) / t.rate * float64(time.Second)))
	t.mu.Unlock()
	if d := time.Until(at); d > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
	}
	return nil
}
