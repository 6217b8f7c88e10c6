package node

// Catch-up: a replica that may have missed commits gets back in step
// before it serves reads again.
//
// A node may have missed commits when it starts (it may have been down
// while the others committed without it) and when its loop finds it was
// stopped for more than PauseMax (the others may have declared it dead
// meanwhile). From then until it has caught up it is catching up: it
// advertises so (membership.Meta.CatchingUp), every node orders it last in
// the chains it belongs to and sends it no reads, and it refuses to head a
// chain.
//
// Every Forward past the head carries the head's version of each blob
// before the commit (mvcc.Pending.Bases). A member whose blob is at
// another version does not apply the commit to its copy, which would
// diverge: if it is behind (or catching up) the commit passes through it
// and the blob is marked to fetch; if it is ahead of the head, it refuses.
// So a replica that missed commits without knowing it finds out at the
// next commit of a blob it missed, and starts catching up.
//
// Catching up (catchUpOnce) is:
//
//  1. Barrier with every live peer: each answers once it sees this node
//     alive and every commit it began before has finished. Every commit
//     after that includes this node wherever it is a version manager.
//  2. For each keyspace, list the blobs of the live peers (Versions) and
//     of the local store, and fetch every blob of this node's whose version
//     differs from the up-to-date replicas' (those not catching up, or all
//     when none is), or that they no longer have.
//  3. Fetch the blobs commits passed through meanwhile, until none is left.
//
// A fetch (Fetch) reads the blob on an up-to-date replica after waiting
// for its lock there: that replica staged every commit this node took part
// in before this node committed it (chains run head first, commit tail
// first), so the fetched state includes all of them. The copy is then
// installed only if it is newer than the local blob (mvcc.Store.Install),
// and a blob the replica no longer has is deleted only if no commit changed
// it locally meanwhile (mvcc.Store.DeleteAt).
//
// Not covered: a network partition that leaves this node running and
// reachable by clients while the others declare it dead. Until a commit of
// a blob it missed reaches it, it can serve that blob's older value.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tyrstore/tyr/api/peerpb"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/limits"
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
	dirty map[blobRef]uint64 // blobs commits passed through: the newest version; guarded by mu
}

func (c *catchUp) init() {
	c.wake = make(chan struct{}, 1)
	c.done = make(chan struct{})
	c.first = make(chan struct{})
	c.dirty = map[blobRef]uint64{}
	c.active.Store(true) // a node starts catching up
	c.wake <- struct{}{}
}

// CatchingUp reports whether this node is catching up, or has been stopped
// for longer than PauseMax and has not noticed yet.
func (n *Node) CatchingUp() bool {
	return n.catch.active.Load() || time.Since(time.Unix(0, n.lastTick.Load())) > PauseMax
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
		n.cfg.Log.Warn("catching up", "reason", reason)
		select {
		case n.catch.wake <- struct{}{}:
		default:
		}
	}
}

// markDirty records that a commit at version passed through this node
// without changing its copy of the blobs of ops.
func (c *catchUp) markDirty(keyspace string, ops []txn.Op, version uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, op := range ops {
		ref := blobRef{keyspace, op.Key}
		c.dirty[ref] = max(c.dirty[ref], version)
	}
}

// finish ends the catch-up if no blob is left to fetch.
func (c *catchUp) finish() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.dirty) > 0 {
		return false
	}
	c.active.Store(false)
	return true
}

// passThrough is what a member that is not in step with the head stages:
// nothing. Its commit marks the blobs for catch-up.
type passThrough struct {
	n        *Node
	keyspace string
	ops      []txn.Op
	version  uint64
}

func (p passThrough) Commit() error {
	p.n.catch.markDirty(p.keyspace, p.ops, p.version)
	return nil
}

func (p passThrough) Abort()                {}
func (p passThrough) Results() []txn.Result { return make([]txn.Result, len(p.ops)) }

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
		for {
			err := n.catchUpOnce(ctx)
			if err == nil && n.catch.finish() {
				break
			}
			if err != nil {
				n.cfg.Log.Info("catch-up round failed; trying again", "err", err)
			}
			select {
			case <-n.stop:
				return
			case <-time.After(catchUpRetry):
			}
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

// catchUpOnce runs one round of catch-up (see the top of this file).
func (n *Node) catchUpOnce(ctx context.Context) error {
	peers := n.livePeers()
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
	for _, ks := range n.cfg.Engine.List() {
		if err := n.catchUpKeyspace(ctx, ks, peers); err != nil {
			return fmt.Errorf("keyspace %q: %w", ks.Name, err)
		}
	}
	n.catch.mu.Lock()
	dirty := maps.Clone(n.catch.dirty)
	n.catch.mu.Unlock()
	for ref, v := range dirty {
		ks, err := n.cfg.Engine.Acquire(ref.keyspace)
		if errors.Is(err, errs.ErrNotFound) {
			n.clearDirty(ref, v) // the keyspace was dropped
			continue
		}
		if err != nil {
			return err
		}
		err = n.wholeBlobs(ks)
		if err == nil {
			err = n.fetch(ctx, ks, ref.key, v)
		}
		ks.Release()
		if err != nil {
			return err
		}
		n.clearDirty(ref, v)
	}
	return nil
}

func (n *Node) clearDirty(ref blobRef, version uint64) {
	n.catch.mu.Lock()
	defer n.catch.mu.Unlock()
	if n.catch.dirty[ref] == version {
		delete(n.catch.dirty, ref)
	}
}

// catchUpKeyspace fetches every blob of ks this node holds a copy of whose
// version differs from the up-to-date replicas'.
func (n *Node) catchUpKeyspace(ctx context.Context, ks *storage.Keyspace, peers []ring.NodeID) error {
	rf := int(ks.Config.Replication)
	if err := n.wholeBlobs(ks); err != nil {
		return err
	}
	seen := map[string]*remoteVersions{}
	for _, id := range peers {
		ready := !n.cfg.Cluster.CatchingUp(id)
		err := n.peerVersions(ctx, id, ks.Name, func(key string, version uint64) error {
			vms, err := n.replicas(ks.Name, rf, key)
			if err != nil {
				return err
			}
			if !slices.Contains(vms, n.self) || !slices.Contains(vms, id) {
				return nil
			}
			r := seen[key]
			if r == nil {
				r = &remoteVersions{}
				seen[key] = r
			}
			r.any = max(r.any, version)
			if ready {
				r.ready = max(r.ready, version)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("versions of %s: %w", id, err)
		}
	}
	// The local blobs: fetch those that differ or that no one has.
	var stale []string
	local := map[string]bool{}
	for after := ""; ; {
		infos, more, err := ks.Store.List("", after, versionsPage)
		if err != nil {
			return err
		}
		for _, info := range infos {
			local[info.Key] = true
			if n.differs(ks, info.Key, info.Version, seen[info.Key]) {
				stale = append(stale, info.Key)
			}
			after = info.Key
		}
		if !more {
			break
		}
	}
	for key := range seen {
		if !local[key] && n.differs(ks, key, 0, seen[key]) {
			stale = append(stale, key)
		}
	}
	slices.Sort(stale)
	for _, key := range stale {
		if err := n.fetch(ctx, ks, key, 0); err != nil {
			return err
		}
	}
	return nil
}

// remoteVersions is the newest version of a blob on the up-to-date peers
// (ready) and on all live peers (any).
type remoteVersions struct{ ready, any uint64 }

// differs reports whether the local copy of key (at version, 0: absent)
// must be fetched: it is a version manager's copy and the up-to-date
// replicas that listed key (r, nil if none did) hold another version.
func (n *Node) differs(ks *storage.Keyspace, key string, version uint64, r *remoteVersions) bool {
	vms, err := n.replicas(ks.Name, int(ks.Config.Replication), key)
	if err != nil || !slices.Contains(vms, n.self) {
		return false
	}
	readyPeer := false
	for _, id := range vms {
		if id != n.self && n.cfg.Cluster.Alive(id) && !n.cfg.Cluster.CatchingUp(id) {
			readyPeer = true
		}
	}
	switch {
	case r == nil:
		// No live replica has it: deleted if an up-to-date one exists.
		return readyPeer && version != 0
	case readyPeer:
		return r.ready != version
	default:
		return r.any > version
	}
}

// peerVersions calls each for every blob of keyspace id lists.
func (n *Node) peerVersions(ctx context.Context, id ring.NodeID, keyspace string, each func(string, uint64) error) error {
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
			if err := each(b.GetKey(), b.GetVersion()); err != nil {
				return err
			}
			after = b.GetKey()
		}
		if !resp.GetMore() || len(resp.GetBlobs()) == 0 {
			return nil
		}
	}
}

// fetch copies blob key of ks from an up-to-date replica: the first live
// version manager that is not catching up, or, when there is none, the
// first live one. If want is not 0 (a commit at want passed through this
// node), the copy must be at least that version or the blob absent.
func (n *Node) fetch(ctx context.Context, ks *storage.Keyspace, key string, want uint64) error {
	vms, err := n.replicas(ks.Name, int(ks.Config.Replication), key)
	if err != nil {
		return err
	}
	vms = slices.Clone(vms)
	slices.Sort(vms)
	var src, fallback ring.NodeID
	for _, id := range vms {
		if id == n.self || !n.cfg.Cluster.Alive(id) {
			continue
		}
		if !n.cfg.Cluster.CatchingUp(id) {
			src = id
			break
		}
		if fallback == "" {
			fallback = id
		}
	}
	if src == "" {
		src = fallback
	}
	if src == "" {
		if slices.Contains(vms, n.self) && len(vms) == 1 {
			return nil // the only replica: nothing to copy
		}
		return fmt.Errorf("%w: no live replica of blob %q to copy from (replicas %v)", errs.ErrUnavailable, key, vms)
	}
	before, err := ks.Store.Stat(key)
	localVersion := before.Version
	if errors.Is(err, errs.ErrNotFound) {
		localVersion = 0
	} else if err != nil {
		return err
	}
	c, err := n.peerClient(src)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, catchUpCallTimeout)
	defer cancel()
	stream, err := c.Fetch(cctx, &peerpb.FetchRequest{Keyspace: ks.Name, Key: key})
	if err != nil {
		return fmt.Errorf("fetch %q from %s: %w", key, src, err)
	}
	first, err := stream.Recv()
	if err != nil {
		return fmt.Errorf("fetch %q from %s: %w", key, src, err)
	}
	if !first.GetExists() {
		if localVersion != 0 {
			_, err := ks.Store.DeleteAt(key, localVersion)
			return err
		}
		return nil
	}
	if first.GetVersion() < want {
		return fmt.Errorf("%w: blob %q is at version %d on %s, before the commit at %d that passed through this node",
			errs.ErrUnavailable, key, first.GetVersion(), src, want)
	}
	if first.GetSize() > limits.BlobBytesMax {
		return fmt.Errorf("%w: blob %q of %d bytes from %s", errs.ErrInvalidArgument, key, first.GetSize(), src)
	}
	data := make([]byte, 0, first.GetSize())
	data = append(data, first.GetData()...)
	for {
		chunk, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("fetch %q from %s: %w", key, src, err)
		}
		data = append(data, chunk.GetData()...)
	}
	if uint64(len(data)) != first.GetSize() {
		return fmt.Errorf("fetch %q from %s: %d bytes for a blob of %d", key, src, len(data), first.GetSize())
	}
	_, err = ks.Store.Install(key, first.GetVersion(), data)
	return err
}

// Barrier implements peerpb.PeerServer (see the top of this file).
func (n *Node) Barrier(ctx context.Context, req *peerpb.BarrierRequest) (*peerpb.BarrierResponse, error) {
	id := ring.NodeID(req.GetNode())
	if !n.cfg.Cluster.Alive(id) {
		return nil, status.Errorf(codes.FailedPrecondition, "node %s does not see %s alive yet", n.self, id)
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
		resp.Blobs = append(resp.Blobs, &peerpb.BlobVersion{Key: info.Key, Version: info.Version})
	}
	return resp, nil
}

// Fetch implements peerpb.PeerServer (see the top of this file).
func (n *Node) Fetch(req *peerpb.FetchRequest, stream peerpb.Peer_FetchServer) error {
	ks, err := n.cfg.Engine.Acquire(req.GetKeyspace())
	if err != nil {
		return statusOf(err)
	}
	defer ks.Release()
	info, ok, err := ks.Store.Settled(req.GetKey())
	if err != nil {
		return statusOf(err)
	}
	first := &peerpb.FetchChunk{Exists: ok, Version: info.Version, Size: info.Size}
	for off := uint64(0); ok && off < info.Size; {
		data, _, err := ks.Store.ReadAt(req.GetKey(), off, min(info.Size-off, limits.PayloadBytesMax), info.Version)
		if err != nil {
			return statusOf(err)
		}
		if len(data) == 0 {
			return status.Errorf(codes.Internal, "blob %q: empty read at %d of %d", req.GetKey(), off, info.Size)
		}
		chunk := &peerpb.FetchChunk{Data: data}
		if first != nil {
			chunk, first = first, nil
			chunk.Data = data
		}
		if err := stream.Send(chunk); err != nil {
			return err
		}
		off += uint64(len(data))
	}
	if first != nil {
		return stream.Send(first)
	}
	return nil
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

// wholeBlobs checks that catch-up can handle ks: either every node of the
// ring holds every chunk of its blobs (catch-up copies whole blobs from one
// replica), or each chunk has one replica (there is no other copy to catch
// up from: a commit that changes a chunk whose replica is down fails).
// Where nodes hold only some chunks of a blob, each with chunk versions of
// its own, such a copy would be wrong; until catch-up goes chunk by chunk,
// the node stays catching up (it serves no reads and is no chain's first
// version manager), so it never serves a stale read.
func (n *Node) wholeBlobs(ks *storage.Keyspace) error {
	r, err := n.currentRing()
	if err != nil {
		return err
	}
	if rf := int(ks.Config.Replication); rf > 1 && rf < r.Len() {
		return fmt.Errorf("%w: keyspace %q keeps %d replicas on %d nodes, and catch-up of chunks spread over nodes is not built",
			errs.ErrUnavailable, ks.Name, rf, r.Len())
	}
	return nil
}
