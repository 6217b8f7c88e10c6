package node

// Catch-up: a replica that may have missed commits gets back in step
// before it serves reads again.
//
// A node may have missed commits when it starts (it may have been down
// while the others committed without it) and when its loop finds it was
// stopped for more than PauseMax (the others may have declared it dead
// meanwhile). From then until it has caught up and holds its read lease
// again (lease.go) it is catching up: it advertises so
// (membership.Meta.CatchingUp), every node orders it after
// the other version managers or holders in the chains it belongs to (see
// Node.Chain) and sends it no reads, and it refuses to head a chain.
//
// Every Forward past the head carries the head's version of each blob
// before the commit (mvcc.Pending.Bases). A member whose blob is at
// another version does not apply the commit to its copy, which would
// diverge: if it is behind (or catching up) the commit passes through it
// and the blob is marked to fetch; if it is ahead of the head, it refuses.
// A member in step also accepts a blob at a version queued ahead of the
// commit on the head (mvcc.Base.Ahead), whose commits it stages too: the
// commits queued ahead above its own version must be queued ahead here as
// well, or it refuses the commit as locked until they are
// (mvcc.ErrAheadUnseen); a member catching up may have been left out of those, so it accepts only
// the base itself with nothing queued ahead (mvcc.Step.Strict).
// So a replica that missed commits without knowing it finds out at the
// next commit of a blob it missed, and starts catching up.
//
// Catching up (catchUpOnce) is:
//
//  1. Barrier with every live peer: each answers once it sees this node
//     alive and every commit it began before has finished. Every commit
//     after that includes this node wherever it holds what the commit
//     changes.
//  2. For each keyspace, list the blobs of the live peers (Versions), and
//     refresh every blob this node keeps a part of: a version manager's
//     copy that is not at the version an up-to-date version manager lists,
//     and any blob of which this node holds only some chunks (its record
//     may lag legitimately, so only the chunk versions tell).
//  3. Refresh the blobs commits passed through meanwhile, until none is
//     left.
//
// A refresh (refresh) holds the blob's lock here, so no commit of it
// passes this node meanwhile, and asks a version manager of the blob that
// is up to date for its record and the versions of the chunks this node
// keeps (Chunks), once no commit of the blob is in progress there: that
// version manager staged every commit this node took part in before this
// node committed it (chains run head first, commit tail first), so its
// record includes all of them. The chunks this node holds whose versions
// differ are then read, at that record's version, from another holder
// whose chunk is at that version (ReadChunks with expect), and installed
// with the record (mvcc.Store.Refresh). A version manager that is catching
// up serves when none is up to date; its copy is taken only if it is newer
// than this node's. A blob the version managers no longer have is deleted.
//
// Not covered: a network partition that leaves this node running and
// reachable by clients while the others declare it dead. Until a commit of
// a blob it missed reaches it, it can serve that blob's older value.

import (
	"context"
	"errors"
	"fmt"
	"github.com/tyrstore/tyr/internal/mvcc"
	"github.com/tyrstore/tyr/internal/rebalance"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tyrstore/tyr/api/peerpb"
	"github.com/tyrstore/tyr/internal/chain"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/limits"
	"github.com/tyrstore/tyr/internal/membership"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/storage"
	"github.com/tyrstore/tyr/internal/txn"
)

const (
	// PauseMax: a tick of the loop later than this after the one before
	// means the process was stopped or starved for that long. The others
	// declare a member dead only after several seconds without an answer
	// (membership's suspicion timeout), so a shorter pause cannot have cost
	// this node a commit.
	PauseMax = 2 * time.Second
	// catchUpRetry is the wait before a catch-up round that failed (a peer
	// not answering, a fetch behind a commit not yet there) is tried again.
	catchUpRetry = 200 * time.Millisecond
	// versionsPage is how many blobs one Versions call lists.
	versionsPage = 1000
	// catchUpCallTimeout bounds one Barrier, Versions or Fetch call.
	catchUpCallTimeout = 30 * time.Second
)

// errCatchingUp refuses what a catching-up node must not do: head a chain
// or serve a read.
var errCatchingUp = errors.New("catching up on commits it may have missed")

// blobRef names a blob of a keyspace.
type blobRef struct{ keyspace, key string }

// catchUp is the node's catch-up state.
type catchUp struct {
	active atomic.Bool
	wake   chan struct{} // capacity 1: a catch-up was asked for
	done   chan struct{} // closed when the catch-up goroutine ends
	first  chan struct{} // closed when the node first caught up

	mu    sync.Mutex
	dirty map[blobRef]dirtyMark // blobs commits passed through, with the newest version and its commit; guarded by mu
}

func (c *catchUp) init() {
	c.wake = make(chan struct{}, 1)
	c.done = make(chan struct{})
	c.first = make(chan struct{})
	c.dirty = map[blobRef]dirtyMark{}
	c.active.Store(true) // a node starts catching up
	c.wake <- struct{}{}
}

// CatchingUp reports whether this node is catching up, or does not hold
// its read lease or has not yet noted that it holds it again (lease.go),
// or has been stopped for longer than PauseMax and has not noticed yet.
func (n *Node) CatchingUp() bool {
	return n.catch.active.Load() || !n.leaseHeld() || !n.leaseWasHeld.Load() || time.Since(time.Unix(0, n.lastTick.Load())) > PauseMax
}

// ErrCatchingUp is errCatchingUp for the server's read path.
func (n *Node) ErrCatchingUp() error {
	return fmt.Errorf("%w: node %s is %w", errs.ErrUnavailable, n.self, errCatchingUp)
}

// tick notes the loop's tick and starts a catch-up after a pause.
func (n *Node) tick() {
	now := time.Now().UnixNano()
	if gap := time.Duration(now - n.lastTick.Swap(now)); gap > PauseMax {
		n.startCatchUp(fmt.Sprintf("the node was stopped for %v", gap.Round(time.Millisecond)))
	}
}

// startCatchUp makes the node catch up, if it is not already.
func (n *Node) startCatchUp(reason string) {
	if n.catch.active.CompareAndSwap(false, true) {
		n.wakeCatchUp(reason)
	}
}

// wakeCatchUp starts the round that catch.active, which the caller set,
// announces.
func (n *Node) wakeCatchUp(reason string) {
	n.cfg.Log.Warn("catching up", "reason", reason)
	select {
	case n.catch.wake <- struct{}{}:
	default:
	}
}

// markDirty records that commit id at version passed through this node
// without changing its copy of the blobs of ops (rebalance.Mark). A blob
// the commit only read-checks is fetched too, since this copy was found
// out of step, but at no particular version: the commit did not change
// it, so its version managers' copies need not ever reach version.
func (c *catchUp) markDirty(keyspace string, ops []txn.Op, version uint64, id chain.TxnID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, op := range ops {
		ref := blobRef{keyspace, op.Key}
		want := version
		if op.Kind == txn.OpReadCheck {
			want = 0
		}
		c.dirty[ref] = c.dirty[ref].Add(want, id)
	}
}

// finish ends the catch-up if no blob is left to fetch and done holds
// (checked under mu).
func (c *catchUp) finish(done func() bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.dirty) > 0 || !done() {
		return false
	}
	c.active.Store(false)
	return true
}

// passThrough is what a member that is not in step with the head stages:
// nothing. Its commit records the transaction and marks the blobs for
// catch-up.
type passThrough struct {
	n        *Node
	keyspace string
	id       chain.TxnID
	ops      []txn.Op
	// own are the ops on the blobs this member has a part in (see
	// versionEntry.hasPart): the ones catch-up fetches again.
	own     []txn.Op
	version uint64
	client  []byte
	// gained: the node only gains these blobs in a ring change and serves
	// no reads of them; the change's copy fetches them (epoch.go) and the
	// node does not catch up as a whole.
	gained bool
}

// passThrough marks its blobs when staged, so that a catch-up round that
// ends meanwhile does not finish with them left out, and again with the
// commit's version once committed, catching up anew if the round ended.
// A blob only gained is marked for the ring change's copy, unless that
// copy has ended (markMoveDirty): then the node catches up as a whole.
func (n *Node) passThrough(keyspace string, id chain.TxnID, ops, own []txn.Op, version uint64, client []byte, gained bool) passThrough {
	if gained && !n.markMoveDirty(keyspace, txn.Keys(own), 0, id) {
		gained = false
		n.catch.markDirty(keyspace, own, 0, id)
		n.startCatchUp(fmt.Sprintf("keyspace %q: a commit passed through this node for a blob it gains after its copy ended", keyspace))
	} else if !gained {
		n.catch.markDirty(keyspace, own, 0, id)
	}
	return passThrough{n: n, keyspace: keyspace, id: id, ops: ops, own: own, version: version, client: client, gained: gained}
}

func (p passThrough) Commit(results []txn.Result) error {
	if !p.gained || !p.n.markMoveDirty(p.keyspace, txn.Keys(p.own), p.version, p.id) {
		p.n.catch.markDirty(p.keyspace, p.own, p.version, p.id)
		p.n.startCatchUp(fmt.Sprintf("a commit at version %d passed through this node", p.version))
	}
	ks, err := p.n.cfg.Engine.Acquire(p.keyspace)
	if err != nil {
		return err
	}
	defer ks.Release()
	p.n.stats.memberCommits.Add(1)
	if err := ks.Store.PutTxn(p.id.String(), txn.EncodeResults(results)); err != nil {
		return err
	}
	parts, err := clientParts(p.client)
	if err != nil || len(parts) == 0 {
		return err
	}
	return ks.Store.PutClients(parts, p.id.String())
}

func (p passThrough) Abort() {}

// PassesThrough implements chain.Passing: this member applies nothing, so
// it may not be the commit point.
func (p passThrough) PassesThrough() bool { return true }

// Results are none of the commit's: each is marked Unheld, so that the
// members before this one take the values of a member after it that
// applied the commit (txn.MergeResults) instead of these zeros.
func (p passThrough) Results() []txn.Result {
	out := make([]txn.Result, len(p.ops))
	for i := range out {
		out[i].Unheld = true
	}
	return out
}

func (n *Node) catchUpLoop() {
	defer close(n.catch.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-n.stop
		cancel()
	}()
	for {
		select {
		case <-n.stop:
			return
		case <-n.catch.wake:
		}
		began := time.Now()
		if err := n.cfg.Cluster.SetCatchingUp(true); err != nil {
			n.cfg.Log.Warn("advertising catch-up", "err", err)
		}
		for again := true; again; again = n.askedDuringRound() {
			if !n.catchUpRounds(ctx) {
				return
			}
		}
		if !n.leaseWasHeld.Load() || n.catch.active.Load() {
			// Not ready to serve without a lease: getting one starts
			// another round (see checkLease), whose end counts; so does
			// the end of a round asked for meanwhile. Until then the node
			// still advertises that it is catching up: the others would
			// otherwise make it the head of chains, which it refuses
			// (CatchingUp), and send it reads, which it refuses too, for
			// as long as the lease takes (up to lease.RevokeHold after it
			// was taken for dead).
			if !n.catch.active.Load() {
				n.cfg.Log.Info("catch-up round done; waiting for the read lease", "took", time.Since(began).Round(time.Millisecond))
			}
			continue
		}
		if err := n.cfg.Cluster.SetCatchingUp(false); err != nil {
			n.cfg.Log.Warn("advertising the end of catch-up", "err", err)
		}
		n.cfg.Log.Info("caught up", "took", time.Since(began).Round(time.Millisecond))
		select {
		case <-n.catch.first:
		default:
			close(n.catch.first)
		}
	}
}

// askedDuringRound takes a catch-up asked for while a round ran (a read
// lease granted meanwhile), which needs a round that began after it, and
// reports whether there was one. The node runs that round at once, still
// advertising that it catches up, rather than saying it caught up and
// taking it back: the others would route chains and reads to it in
// between.
func (n *Node) askedDuringRound() bool {
	select {
	case <-n.catch.wake:
		n.catch.active.Store(true)
		return true
	default:
		return false
	}
}

// catchUpRounds runs catch-up rounds until one ends the catch-up (see
// catch.finish), and reports false if the node stopped first.
func (n *Node) catchUpRounds(ctx context.Context) bool {
	for {
		// A round that began before a recopy was asked for does not
		// end the catch-up (skippedCopy sets it under catch.mu).
		recopy := n.epoch.recopy.Load()
		var err error
		if !n.alone() {
			// A node alone has no one to catch up from, and no one
			// committed without it: its round ends at once.
			err = n.catchUpOnce(ctx)
		}
		if err == nil && n.catch.finish(func() bool { return n.epoch.recopy.Load() == recopy }) {
			n.epoch.recopy.CompareAndSwap(recopy, 0)
			return true
		}
		if err != nil {
			n.cfg.Log.Info("catch-up round failed; trying again", "err", err)
		}
		// Jitter: two nodes refreshing one blob from each other time
		// out (mvcc.RecordWaitMax) and must not meet again.
		select {
		case <-n.stop:
			return false
		case <-time.After(catchUpRetry/2 + rand.N(catchUpRetry)):
		}
	}
}

// alone reports whether no other node is a member: the view holds no
// other member that has not left, and the ring record, if the node has
// one, names no other node. Such a node has nothing to catch up on.
func (n *Node) alone() bool {
	for _, m := range n.cfg.Cluster.View().Members() {
		if m.Meta.ID != n.self && m.State != membership.StateLeft {
			return false
		}
	}
	n.epoch.mu.Lock()
	rec := n.epoch.mu.rec
	n.epoch.mu.Unlock()
	if rec == nil {
		return true
	}
	for _, nodes := range [][]ring.Node{rec.Old, rec.New} {
		for _, m := range nodes {
			if m.ID != n.self {
				return false
			}
		}
	}
	return true
}

// Ready returns nil once the node serves reads: it has caught up since it
// started and is not catching up now, holds its read lease (lease.go),
// knows the cluster's ring (epoch.go), and its membership sees it alive.
// Otherwise it returns an errs.ErrUnavailable error that says why. A
// server reports ready (its ready file, its health service) only then.
func (n *Node) Ready() error {
	notReady := func(why string, args ...any) error {
		return fmt.Errorf("%w: node %s %s", errs.ErrUnavailable, n.self, fmt.Sprintf(why, args...))
	}
	select {
	case <-n.catch.first:
	default:
		return notReady("has not caught up since it started")
	}
	if _, _, err := n.rings(); err != nil {
		return err
	}
	switch {
	case n.catch.active.Load():
		return notReady("is %v", errCatchingUp)
	case !n.leaseHeld() || !n.leaseWasHeld.Load():
		return notReady("does not hold its read lease (grants from a majority of the ring)")
	case time.Since(time.Unix(0, n.lastTick.Load())) > PauseMax:
		return notReady("has not ticked for %v", time.Since(time.Unix(0, n.lastTick.Load())).Round(time.Millisecond))
	case n.CatchingUp():
		return notReady("is %v", errCatchingUp)
	case !n.cfg.Cluster.Alive(n.self):
		return notReady("is not alive in its own membership view")
	}
	return nil
}

// WaitCaughtUp waits until the node has caught up once since it started,
// or ctx ends.
func (n *Node) WaitCaughtUp(ctx context.Context) error {
	select {
	case <-n.catch.first:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// livePeers returns the other members that are alive, sorted.
func (n *Node) livePeers() []ring.NodeID {
	var out []ring.NodeID
	for _, m := range n.cfg.Cluster.View().Members() {
		if id := m.Meta.ID; id != n.self && n.cfg.Cluster.Alive(id) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

func (n *Node) peerClient(id ring.NodeID) (peerpb.PeerClient, error) {
	conn, err := n.Conn(id)
	if err != nil {
		return nil, err
	}
	return peerpb.NewPeerClient(conn), nil
}

// barrier waits until each of peers answers that it sees this node alive
// and finished every commit it began before (step 1 of a catch-up round).
func (n *Node) barrier(ctx context.Context, peers []ring.NodeID) error {
	for _, id := range peers {
		c, err := n.peerClient(id)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, catchUpCallTimeout)
		_, err = c.Barrier(cctx, &peerpb.BarrierRequest{Node: string(n.self)})
		cancel()
		if err != nil {
			return fmt.Errorf("barrier with %s: %w", id, err)
		}
	}
	return nil
}

// catchUpOnce runs one round of catch-up (see the top of this file).
func (n *Node) catchUpOnce(ctx context.Context) error {
	peers := n.livePeers()
	if err := n.barrier(ctx, peers); err != nil {
		return err
	}
	for _, ks := range n.cfg.Engine.List() {
		if err := n.catchUpKeyspace(ctx, ks, peers); err != nil {
			return fmt.Errorf("keyspace %q: %w", ks.Name, err)
		}
	}
	n.catch.mu.Lock()
	dirty := maps.Clone(n.catch.dirty)
	n.catch.mu.Unlock()
	for ref, m := range dirty {
		ks, err := n.cfg.Engine.Acquire(ref.keyspace)
		if errors.Is(err, errs.ErrNotFound) {
			n.clearDirty(ref, m) // the keyspace was dropped
			continue
		}
		if err != nil {
			return err
		}
		pl, err := n.Placement(ks.Name, int(ks.Config.Replication))
		if err == nil {
			_, err = n.refreshBlob(ctx, ks, pl, ref.key, m.Version, m.Txn, false)
		}
		ks.Release()
		if err != nil {
			return err
		}
		n.clearDirty(ref, m)
	}
	return nil
}

func (n *Node) clearDirty(ref blobRef, m dirtyMark) {
	n.catch.mu.Lock()
	defer n.catch.mu.Unlock()
	if n.catch.dirty[ref] == m {
		delete(n.catch.dirty, ref)
	}
}

// catchUpKeyspace refreshes every blob of ks this node keeps a part of
// (see the top of this file).
func (n *Node) catchUpKeyspace(ctx context.Context, ks *storage.Keyspace, peers []ring.NodeID) error {
	r, err := n.currentRing()
	if err != nil {
		return err
	}
	if int(ks.Config.Replication) > r.Len() {
		return nil // more replicas than nodes: the keyspace takes no commits
	}
	pl, err := n.Placement(ks.Name, int(ks.Config.Replication))
	if err != nil {
		return err
	}
	cs := ks.Store.ChunkBytes()
	// What the live version managers of each blob list: an up-to-date one's
	// entry wins over one catching up.
	type listing struct {
		version, size uint64
		ready         bool
	}
	listed := map[string]listing{}
	for _, id := range peers {
		ready := !n.cfg.Cluster.CatchingUp(id)
		err := n.peerVersions(ctx, id, ks.Name, func(b *peerpb.BlobVersion) {
			if !pl.on(id, b.GetKey(), 0) {
				return
			}
			l, ok := listed[b.GetKey()]
			if !ok || (ready && !l.ready) || (ready == l.ready && b.GetVersion() > l.version) {
				listed[b.GetKey()] = listing{b.GetVersion(), b.GetSize(), ready}
			}
		})
		if err != nil {
			return fmt.Errorf("versions of %s: %w", id, err)
		}
	}
	local := map[string]uint64{}
	for after := ""; ; {
		infos, more, err := ks.Store.List("", after, versionsPage)
		if err != nil {
			return err
		}
		for _, info := range infos {
			local[info.Key] = info.Version
			after = info.Key
		}
		if !more {
			break
		}
	}
	var todo []string
	for key, l := range listed {
		v, have := local[key]
		switch {
		case pl.Manages(key):
			if !have || !l.ready || v != l.version || n.epoch.recopy.Load() != 0 || n.gainsAnyChunk(pl, key, l.size, cs) {
				todo = append(todo, key)
			}
		case have || pl.holdsAny(key, l.size, cs):
			todo = append(todo, key)
		}
	}
	for key := range local {
		if _, ok := listed[key]; !ok {
			todo = append(todo, key) // gone from its version managers, or they are down
		}
	}
	slices.Sort(todo)
	for _, key := range todo {
		if err := n.refresh(ctx, ks, pl, key); err != nil {
			return err
		}
	}
	return nil
}

// peerVersions calls each for every blob of keyspace id lists.
func (n *Node) peerVersions(ctx context.Context, id ring.NodeID, keyspace string, each func(*peerpb.BlobVersion)) error {
	c, err := n.peerClient(id)
	if err != nil {
		return err
	}
	for after := ""; ; {
		cctx, cancel := context.WithTimeout(ctx, catchUpCallTimeout)
		resp, err := c.Versions(cctx, &peerpb.VersionsRequest{Keyspace: keyspace, StartAfter: after, Limit: versionsPage})
		cancel()
		if err != nil {
			return err
		}
		for _, b := range resp.GetBlobs() {
			each(b)
			after = b.GetKey()
		}
		if !resp.GetMore() || len(resp.GetBlobs()) == 0 {
			return nil
		}
	}
}

// refresh brings this node's copy of blob key of ks in step with an
// up-to-date version manager's (see the top of this file).
func (n *Node) refresh(ctx context.Context, ks *storage.Keyspace, pl Placement, key string) error {
	_, err := n.refreshBlob(ctx, ks, pl, key, 0, chain.TxnID{}, false)
	return err
}

// refreshBlob is refresh, and the copy of a blob this node gains in a ring
// change (move); it reports whether the copy changed anything. If want is
// not 0 (commit txn at want passed through this node), the source's copy
// must be at least that version or the blob absent, unless every source
// lost that commit. It asks the
// sources in turn until one decides (rebalance.Refresh), and returns the
// last error if none gave a copy.
func (n *Node) refreshBlob(ctx context.Context, ks *storage.Keyspace, pl Placement, key string, want uint64, txn chain.TxnID, move bool) (bool, error) {
	vms, stale, err := pl.sourceReplicas(key, 0)
	if err != nil {
		return false, err
	}
	srcs := n.sources(vms, stale)
	if len(srcs) == 0 {
		if len(vms) == 1 && vms[0] == n.self {
			return false, nil // the only replica: nothing to copy
		}
		return false, fmt.Errorf("%w: no live version manager of blob %q to copy from (version managers %v)", errs.ErrUnavailable, key, vms)
	}
	changed := false
	var lastErr error
	answer := rebalance.Refresh(srcs, func(src rebalance.Source) (rebalance.Answer, bool) {
		cs := &chunkSource{ctx: ctx, n: n, ks: ks, pl: pl, key: key, src: src.ID, ready: src.Ready, want: want, txn: txn, move: move}
		c, err := ks.Store.Refresh(key, cs)
		if err == nil && cs.forced {
			n.noteWhole(blobRef{ks.Name, key}, pl.epoch())
		}
		changed = changed || c
		switch {
		case errors.Is(err, errCopyLost):
			lastErr = err
			return rebalance.Lost, cs.ready
		case errors.Is(err, mvcc.ErrCopyBehind):
			lastErr = err
			return rebalance.Behind, cs.ready
		case err != nil:
			lastErr = err
			return rebalance.Failed, cs.ready
		}
		return rebalance.Took, cs.ready // cs.ready: as it answered
	})
	switch rebalance.Settle(answer, n.self, vms, stale, n.cfg.Cluster.Alive) {
	case rebalance.Took:
		return changed, nil
	case rebalance.Lost:
		// Every source that could hold the commit lost its stage of it
		// (the "f = r" case): the copy takes what they hold.
		n.stats.copiesLost.Add(1)
		n.cfg.Log.Warn("every replica of a blob lost a commit that passed through this node; copying without it",
			"keyspace", ks.Name, "key", key, "version", want, "txn", txn.String(), "err", lastErr)
		c, err := n.refreshBlob(ctx, ks, pl, key, 0, chain.TxnID{}, move)
		return changed || c, err
	}
	return changed, lastErr
}

// errCopyLost marks a source's copy behind the commit a refresh waits for,
// which the source lost its stage of (rebalance.Lost).
var errCopyLost = errors.New("the source lost the commit wanted")

// sources returns the order in which this node tries ids and stale
// (Placement.sourceReplicas): rebalance.Order, by membership.
func (n *Node) sources(ids, stale []ring.NodeID) []rebalance.Source {
	return rebalance.Order(n.self, ids, stale, n.cfg.Cluster.Alive, n.cfg.Cluster.CatchingUp)
}

// source returns the first of sources(ids, nil), if any.
func (n *Node) source(ids []ring.NodeID) (id ring.NodeID, ready bool) {
	if srcs := n.sources(ids, nil); len(srcs) > 0 {
		return srcs[0].ID, srcs[0].Ready
	}
	return "", false
}

// chunkSource is the mvcc.Source of a refresh: the record from version
// manager src, the chunks from their holders.
type chunkSource struct {
	ctx context.Context
	n   *Node
	ks  *storage.Keyspace
	pl  Placement
	key string
	src ring.NodeID
	// ready: the source was up to date when chosen, and, once Copy ran,
	// when it answered.
	ready bool
	want  uint64
	// txn is the commit at want, if known: a source that lost its stage
	// of it says so (rebalance.Lost).
	txn chain.TxnID
	cp  mvcc.Copy
	// move: a ring change's copy (epoch.go), throttled and counted.
	move bool
	// forced: the copy replaces the chunks this node gains whatever their
	// versions (see Copy).
	forced bool
}

func (s *chunkSource) Copy(local mvcc.Record) (mvcc.Copy, error) {
	c, err := s.n.peerClient(s.src)
	if err != nil {
		return mvcc.Copy{}, err
	}
	cctx, cancel := context.WithTimeout(s.ctx, catchUpCallTimeout)
	defer cancel()
	resp, err := c.Chunks(cctx, &peerpb.ChunksRequest{Keyspace: s.ks.Name, Key: s.key, Node: string(s.n.self),
		TxnCoordinator: string(s.txn.Coordinator), TxnSeq: s.txn.Seq})
	if err != nil {
		return mvcc.Copy{}, fmt.Errorf("%w: chunks of blob %q from %s: %w", errs.ErrUnavailable, s.key, s.src, err)
	}
	remote := mvcc.Record{Exists: resp.GetExists(), Version: resp.GetVersion(), Size: resp.GetSize(),
		Created: resp.GetCreated(), Modified: resp.GetModified(), Chunks: map[uint64]uint64{}}
	for _, cv := range resp.GetChunks() {
		remote.Chunks[cv.GetChunk()] = cv.GetVersion()
	}
	if remote.Exists && remote.Version < s.want {
		err := fmt.Errorf("%w: %w: blob %q is at version %d on %s, before the commit at %d that passed through this node",
			errs.ErrUnavailable, mvcc.ErrCopyBehind, s.key, remote.Version, s.src, s.want)
		if rebalance.BehindAnswer(s.ready && !resp.GetCatchingUp(), resp.GetLocked(), resp.GetMissed()) == rebalance.Lost {
			err = fmt.Errorf("%w: %w (%s lost its stage of %s)", errCopyLost, err, s.src, s.txn)
		}
		return mvcc.Copy{}, err
	}
	// Membership may not show yet that the source is catching up; its
	// answer does.
	s.ready = s.ready && !resp.GetCatchingUp()
	force, gains := s.forcedChunks(remote)
	if !s.ready {
		if take, err := staleCopy(local, remote, s.want, force); !take {
			if err != nil {
				err = fmt.Errorf("%w: %w: %s is catching up: blob %q: %w", errs.ErrUnavailable, mvcc.ErrCopyBehind, s.src, s.key, err)
			}
			return mvcc.Copy{Record: local}, err
		}
	}
	s.cp = s.ks.Store.PlanCopy(s.key, local, remote, s.pl)
	for _, c := range force {
		if !slices.Contains(s.cp.Replace, c) {
			s.cp.Replace = append(s.cp.Replace, c)
		}
	}
	slices.Sort(s.cp.Replace)
	s.forced = gains
	return s.cp, nil
}

// staleCopy decides whether a refresh takes the copy (remote) of a source
// that is not up to date over this node's (local): only a newer one counts
// (mvcc.StaleCopyCounts), unless this node must copy chunks whatever their
// versions (force, see forcedChunks). Then a copy at its own version is
// its own record, whose chunks come from their holders in step with it, so
// it is taken; any other may be behind, and keeping the local copy would
// count the chunks as copied: it fails (the refresh tries another source,
// or this one later).
func staleCopy(local, remote mvcc.Record, want uint64, force []uint64) (bool, error) {
	switch {
	case mvcc.StaleCopyCounts(local, remote, want):
		return true, nil
	case len(force) == 0:
		return false, nil
	case remote.Exists && local.Exists && remote.Version == local.Version:
		return true, nil
	}
	return false, fmt.Errorf("its copy at version %d (0: absent) is not this node's, at %d, and chunks %v must be copied here",
		remote.Version, local.Version, force)
}

// forcedChunks returns the chunks of remote (a version manager's copy of
// the blob) this node copies whatever their versions, and whether it gains
// any. A version manager keeps the versions of every chunk, also of those
// whose pages it does not hold: for a chunk it gains in a ring change,
// equal versions do not mean it has the bytes. Every chunk gained is
// copied, in the change's copy and in a catch-up (a node that was down
// during the copy), until this process took one such copy of the blob in
// this change (noteWhole): a copy again, for a commit that passed through,
// takes only the chunks whose versions differ. While catch-up copies every
// chunk (recopy), every chunk held is copied.
func (s *chunkSource) forcedChunks(remote mvcc.Record) (force []uint64, gains bool) {
	if !remote.Exists {
		return nil, false
	}
	cs := s.ks.Store.ChunkBytes()
	whole := s.n.copiedWhole(blobRef{s.ks.Name, s.key}, s.pl.epoch())
	recopy := s.n.epoch.recopy.Load() != 0
	for c := uint64(0); c*cs < remote.Size; c++ {
		gained := !whole && ((s.move && s.pl.on(s.n.self, s.key, c) && !s.pl.ServesChunk(s.key, c)) || s.n.gainedChunk(s.pl, s.key, c))
		gains = gains || gained
		if remote.Chunks[c] != 0 && (gained || (recopy && s.pl.Holds(s.key, c))) {
			force = append(force, c)
		}
	}
	return force, gains
}

// Read reads a range of one chunk from a holder in step with the copy:
// those up to date first.
func (s *chunkSource) Read(off, length uint64) ([]byte, error) {
	chunk := off / s.ks.Store.ChunkBytes()
	expect := s.cp.Chunks[chunk]
	if expect == 0 {
		return make([]byte, length), nil // never written since the blob was created
	}
	reps, stale, err := s.pl.sourceReplicas(s.key, chunk)
	if err != nil {
		return nil, err
	}
	reps = append(reps, stale...) // any holder in step with the copy will do
	var errList []error
	for len(reps) > 0 {
		id, _ := s.n.source(reps)
		if id == "" {
			break
		}
		reps = slices.DeleteFunc(slices.Clone(reps), func(r ring.NodeID) bool { return r == id })
		c, err := s.n.peerClient(id)
		if err != nil {
			errList = append(errList, err)
			continue
		}
		if s.move {
			if err := s.n.epoch.throttle.wait(s.ctx, int(length)); err != nil {
				return nil, err
			}
		}
		cctx, cancel := context.WithTimeout(s.ctx, catchUpCallTimeout)
		resp, err := c.ReadChunks(cctx, &peerpb.ReadChunksRequest{Keyspace: s.ks.Name, Key: s.key, Offset: off, Length: length,
			Version: s.cp.Version, Size: s.cp.Size, Expect: expect})
		cancel()
		if err == nil {
			if s.move {
				s.n.epoch.copiedBytes.Add(uint64(len(resp.GetData())))
			}
			return resp.GetData(), nil
		}
		errList = append(errList, fmt.Errorf("%s: %w", id, err))
	}
	return nil, fmt.Errorf("%w: no holder of chunk %d of blob %q at version %d to copy from: %w",
		errs.ErrUnavailable, chunk, s.key, expect, errors.Join(errList...))
}

// Barrier implements peerpb.PeerServer (see the top of this file).
func (n *Node) Barrier(ctx context.Context, req *peerpb.BarrierRequest) (*peerpb.BarrierResponse, error) {
	id := ring.NodeID(req.GetNode())
	if !n.cfg.Cluster.Alive(id) {
		return nil, status.Errorf(codes.Unavailable, "node %s does not see %s alive yet", n.self, id)
	}
	if err := n.inflight.wait(ctx); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	return &peerpb.BarrierResponse{}, nil
}

// Versions implements peerpb.PeerServer.
func (n *Node) Versions(_ context.Context, req *peerpb.VersionsRequest) (*peerpb.VersionsResponse, error) {
	ks, err := n.cfg.Engine.Acquire(req.GetKeyspace())
	if err != nil {
		return nil, statusOf(err)
	}
	defer ks.Release()
	limit := int(min(max(req.GetLimit(), 1), limits.ListLimitMax))
	infos, more, err := ks.Store.List("", req.GetStartAfter(), limit)
	if err != nil {
		return nil, statusOf(err)
	}
	resp := &peerpb.VersionsResponse{More: more}
	for _, info := range infos {
		resp.Blobs = append(resp.Blobs, &peerpb.BlobVersion{Key: info.Key, Version: info.Version, Size: info.Size})
	}
	return resp, nil
}

// Chunks implements peerpb.PeerServer (see the top of this file).
func (n *Node) Chunks(_ context.Context, req *peerpb.ChunksRequest) (*peerpb.ChunksResponse, error) {
	ks, err := n.cfg.Engine.Acquire(req.GetKeyspace())
	if err != nil {
		return nil, statusOf(err)
	}
	defer ks.Release()
	pl, err := n.Placement(ks.Name, int(ks.Config.Replication))
	if err != nil {
		return nil, statusOf(err)
	}
	if !pl.Manages(req.GetKey()) {
		return nil, statusOf(fmt.Errorf("%w: node %s is not a version manager of blob %q", errs.ErrUnavailable, n.self, req.GetKey()))
	}
	// Asked about a commit, the lock is looked at before the record: a
	// commit that takes it after shows in the record, or is staged after
	// the answer.
	locked, missed := false, false
	if c := req.GetTxnCoordinator(); c != "" {
		locked = ks.Store.Locked(req.GetKey())
		id := chain.TxnID{Coordinator: ring.NodeID(c), Seq: req.GetTxnSeq()}
		if missed, err = ks.Store.Missed(id.String()); err != nil {
			return nil, statusOf(err)
		}
	}
	rec, err := ks.Store.Record(req.GetKey())
	if err != nil {
		return nil, statusOf(err)
	}
	to := ring.NodeID(req.GetNode())
	resp := &peerpb.ChunksResponse{Exists: rec.Exists, Version: rec.Version, Size: rec.Size, Created: rec.Created, Modified: rec.Modified,
		CatchingUp: n.CatchingUp(), Missed: missed, Locked: locked}
	for _, c := range slices.Sorted(maps.Keys(rec.Chunks)) {
		if pl.on(to, req.GetKey(), 0) || pl.on(to, req.GetKey(), c) {
			resp.Chunks = append(resp.Chunks, &peerpb.ChunkVersion{Chunk: c, Version: rec.Chunks[c]})
		}
	}
	return resp, nil
}

// statusOf is err as a gRPC status of its class.
func statusOf(err error) error {
	code, _ := errs.Code(err)
	return status.Error(code, err.Error())
}

// tracker counts the commits this node began, for Barrier.
type tracker struct {
	mu   sync.Mutex
	next uint64
	open map[uint64]struct{}
}

// Track registers a commit this node begins and returns the function that
// ends it. A caller computes the commit's chain after Track, so that a
// Barrier that returns has seen every commit whose chain was computed
// before it.
func (n *Node) Track() func() {
	t := &n.inflight
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open == nil {
		t.open = map[uint64]struct{}{}
	}
	id := t.next
	t.next++
	t.open[id] = struct{}{}
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		delete(t.open, id)
	}
}

// wait returns once every commit tracked before the call has ended.
func (t *tracker) wait(ctx context.Context) error {
	t.mu.Lock()
	cut := t.next
	t.mu.Unlock()
	for {
		t.mu.Lock()
		pending := false
		for id := range t.open {
			if id < cut {
				pending = true
				break
			}
		}
		t.mu.Unlock()
		if !pending {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}
