// Package node runs the chain-commit protocol of internal/chain between the
// processes of a cluster: it is the I/O edge around the deterministic
// Replica and Coordinator state machines.
//
// One goroutine (the loop) owns every state machine of the node: per
// keyspace one chain.Replica, whose Stager is the keyspace's mvcc.Store,
// and one chain.Coordinator for the commits this node's clients send. The
// loop takes in peer messages, new commits and clock ticks, steps the state
// machines, and hands their output to per-peer sender goroutines, which
// batch it into Peer.Deliver calls. A message to this node itself never
// leaves the loop. Delivery is best effort: the protocol retransmits what
// is lost, and a receiver drops messages older than MessageAgeMax, which
// keeps every message inside the replicas' outcome retention (see
// chain.ReplicaConfig.OutcomeRetentionTicks).
//
// Placement (Chain, ReadTarget) is per blob for now: every member of a
// blob's chain is one of its version managers (the replicas of chunk 0)
// and stores the whole blob. The coordinator chooses each commit's version
// from its clock and every member stores the commit under it, so a version
// names the same commit on every replica (mvcc.Store.TryPrepareAt).
//
// When membership reports a member of a commit in flight dead, the
// coordinator re-executes the commit on the members left
// (chain.Coordinator.Reroute), so a crash never leaves blobs locked.
//
// A member that may have missed commits catches up before it serves reads
// again (catchup.go).
//
// Not yet here (see docs/architecture.md): persistence of the replicas'
// transaction records across restarts, and storage effects off the loop
// (each member's fsync runs inside Step, one at a time per node).
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc"

	"github.com/tyrstore/tyr/api/peerpb"
	"github.com/tyrstore/tyr/internal/balance"
	"github.com/tyrstore/tyr/internal/chain"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/lease"
	"github.com/tyrstore/tyr/internal/limits"
	"github.com/tyrstore/tyr/internal/membership"
	"github.com/tyrstore/tyr/internal/mvcc"
	"github.com/tyrstore/tyr/internal/outbox"
	"github.com/tyrstore/tyr/internal/rebalance"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/storage"
	"github.com/tyrstore/tyr/internal/txn"
)

// Timing of the protocol on a node.
const (
	// Tick is the state machines' clock period.
	Tick = 10 * time.Millisecond
	// StalledAfter: a commit this node is a member of that has had no
	// outcome, or waited to apply, for this long is logged (and again
	// every StalledAfter).
	StalledAfter = 5 * time.Second
	// RetransmitTicks: a Forward, Backward or Reply unanswered for 200ms is
	// sent again, then after 400ms, 800ms and every 1.6s (see
	// chain.RetransmitBackoffMax).
	RetransmitTicks = 20
	// OutcomeRetentionTicks: a member remembers a finished commit for 60s
	// after its upstream acknowledged it.
	OutcomeRetentionTicks = 6000
	// TxnsMax bounds the commits a replica remembers (see
	// chain.ReplicaConfig.TxnsMax); it must cover the retention at the
	// commit rate a node sustains.
	TxnsMax = 1 << 18
	// MessageAgeMax is how old a message may be when it arrives; older ones
	// are dropped, since a replica may have forgotten their commit. A
	// fraction of the retention, leaving room for clock differences
	// between hosts.
	MessageAgeMax = 5 * time.Second
	// ForwardAgeMax is how long after its coordinator began a commit a
	// replica still stages a Forward for it that it has no record of. A
	// member left out of a re-execution keeps retransmitting the old
	// chain's Forward; once the others may have forgotten the commit, that
	// Forward must not start it again: an older one is taken as one this
	// node may have handled (see earlierRun), which is not staged but
	// answered with the outcome the members after it reached, so the
	// member waiting on it is released. Half the retention; re-executions
	// happen well within it (failure detection takes seconds).
	ForwardAgeMax = OutcomeRetentionTicks * Tick / 2
	// ClockSkewMax is how far apart the hosts' clocks are assumed to be
	// at most. A commit begun less than this after a node started may have
	// been begun before, by the node's clock, and the node's earlier run
	// may have handled it (see earlierRun).
	ClockSkewMax = time.Second
	// CommitRetryMax bounds how long Commit keeps trying a commit refused
	// for a retryable reason (a blob locked by another commit, a version
	// below a replica's) before it returns the conflict.
	CommitRetryMax = 10 * time.Second
	// inboxMax and peerQueueMax bound the messages waiting for the loop and
	// for each peer's sender, and peerQueueBytesMax the bytes waiting for
	// each sender; a full peer queue drops, like the network. One Deliver
	// call carries at most deliverBatch messages and deliverBytesMax bytes
	// (a commit of limits.CommitBytesMax fits alone);
	// deliverMessageOverhead is what a message adds to the call beyond its
	// own encoding.
	inboxMax               = 4096
	peerQueueMax           = 4096
	peerQueueBytesMax      = 64 << 20
	deliverBatch           = 256
	deliverBytesMax        = limits.MessageBytesMax - 64<<10
	deliverMessageOverhead = 8
	// CommitBytesInFlightMax bounds the data (the payload of writes,
	// appends and compare-and-swaps) of the commits this node heads at
	// once. A commit beyond it waits for room, or is refused, changing
	// nothing, if its context ends first. It bounds what the chains hold
	// in memory: every member keeps a commit's data until it is durable.
	CommitBytesInFlightMax = 32 << 20
	// deliverTimeout bounds one Peer.Deliver call.
	deliverTimeout = 2 * time.Second
)

// Cluster is what the node needs of membership.
type Cluster interface {
	Self() ring.NodeID
	// View returns the newest view; a membership change installs a new
	// View instead of changing the one returned.
	View() *membership.View
	RPCAddr(id ring.NodeID) (string, bool)
	// Alive reports whether id is a member not declared dead (alive or
	// suspect): chains run through it, and drop it only once it is dead.
	Alive(id ring.NodeID) bool
	// CatchingUp reports whether member id advertises that it is catching
	// up (membership.Meta.CatchingUp).
	CatchingUp(id ring.NodeID) bool
	// SetCatchingUp advertises this node's catching-up state.
	SetCatchingUp(on bool) error
}

// Dialer opens a connection to a peer's RPC address. The node keeps one per
// peer, for chain messages and for the requests the server forwards.
type Dialer func(addr string) (grpc.ClientConnInterface, error)

// Config configures a Node.
type Config struct {
	Cluster Cluster
	Engine  *storage.Engine
	Dial    Dialer
	Log     *slog.Logger
	// FirstRun says the node runs on its data for the first time, so no
	// earlier run of it took part in any commit (see earlierRun). Leave it
	// false when unsure: the node then treats commits begun before it
	// started as ones it may have handled.
	FirstRun bool
	// LeaseDuration is how long a read lease grant counts (see lease.go);
	// zero takes lease.Duration. Negative turns leases off: the node always
	// holds its lease and fences no one, which is right only where failure
	// detection is instant and exact (tests of other parts).
	LeaseDuration time.Duration
	// RingFile is where the node keeps its ring epoch record (epoch.go).
	// Empty turns ring epochs off: the ring follows the membership view, a
	// joining node takes its share at once and catches up, and nothing
	// moves in the background (tests of other parts).
	RingFile string
	// MoveBytesPerSecond caps the copy of the ranges this node gains in a
	// ring change; zero takes MoveBytesPerSecondDefault.
	MoveBytesPerSecond int64
	// ReweightInterval is how long a ring epoch stays clean, with no
	// membership change, before the coordinator weighs the ring against
	// the members' usage and may propose new weights (reweight.go). Zero
	// turns reweighting off.
	ReweightInterval time.Duration
	// Usage asks a ring member for its usage. Nil turns reweighting off,
	// and a joining node then takes the weight it advertises.
	Usage UsageFunc
	// Balance configures the weighting rule; zero fields take the
	// defaults of balance.Config.
	Balance balance.Config
}

// Node is a running chain-commit endpoint. Its methods are safe for
// concurrent use.
type Node struct {
	peerpb.UnimplementedPeerServer
	cfg  Config
	self ring.NodeID
	// started is when this run of the node began, and earlier holds the
	// keyspaces it found then, which an earlier run may have committed in
	// (see earlierRun).
	started time.Time
	earlier map[string]bool

	// lease is this node's read lease and the grants it gave (lease.go);
	// leaseUntil is when the lease ends (unix nanoseconds) as of the last
	// check, and leaseWasHeld whether it held then.
	lease        *lease.Tracker
	leaseUntil   atomic.Int64
	leaseWasHeld atomic.Bool
	// leaseSince is when the lease last began to hold (unix nanoseconds),
	// for outcome resolution (resolve.go).
	leaseSince atomic.Int64
	leaseDone  chan struct{}
	excl       exclusions

	// admit holds the bytes of data of the commits this node heads
	// (CommitBytesInFlightMax).
	admit *semaphore.Weighted

	inbox  chan envelope
	begins chan beginReq
	stop   chan struct{}
	done   chan struct{}
	// stopped is cancelled as stop closes: the context of work that
	// outlives its request but not the node (runCombined), watched by no
	// goroutine of its own.
	stopped    context.Context
	cancelStop context.CancelFunc

	ringMu   sync.Mutex
	ringView *membership.View // the view ring was last checked against
	ring     *ring.Ring       // cached for ringID
	ringID   membership.RingID

	peersMu sync.Mutex
	peers   map[ring.NodeID]*peer // guarded by peersMu

	clockMu sync.Mutex
	last    uint64 // newest commit version chosen; guarded by clockMu
	// hints are the sizes of blobs seen last, to plan chains (see plan).
	hints sizeHints

	catch catchUp
	// epoch is the ring epoch record and its moves (epoch.go).
	epoch         epochState
	ringInstallMu sync.Mutex
	ringDone      chan struct{}
	inflight      tracker
	// clients tracks the commits staged here that carry a client ID
	// (resolve.go).
	clients  clients
	stats    counters
	combiner combiner
	lastTick atomic.Int64 // unix nanoseconds of the loop's last tick
	// drained is the epoch whose Active phase the loop drained (drain).
	drained atomic.Uint64

	// syncReqs and syncDone carry the loop's one sync in flight to the
	// syncer goroutine and back (see syncer).
	syncReqs   chan syncReq
	syncDone   chan syncResult
	syncerDone chan struct{}

	// Owned by the loop goroutine.
	// out holds what leaves the node until the commits before it are
	// durable; dirty lists the keyspaces written since the last sync
	// began.
	out      outbox.Outbox[func()]
	dirty    map[string]bool
	drain    rebalance.Drain[waiterKey]
	groups   map[string]*group
	waiters  map[waiterKey]chan beginResult
	versions map[waiterKey]versionEntry
	local    []envelope
}

type group struct {
	replica *chain.Replica
	coord   *chain.Coordinator
}

type waiterKey struct {
	keyspace string
	id       chain.TxnID
}

// versionEntry is what the node keeps per commit beside the state
// machines: the commit version and when the coordinator began it, both
// carried on every Forward.
type versionEntry struct {
	version uint64
	begun   int64 // unix nanoseconds
	at      time.Time
	// bases: what the Forward brought, then once staged here what this
	// member hands on (see mvcc.Pending.Bases).
	bases map[string]mvcc.Base
	// fetched are the bases this node fetched as the coordinator
	// (fetch.go), which its own Forwards carry.
	fetched map[string]mvcc.Base
	// chain is the chain the Forward named.
	chain []ring.NodeID
	// client is the client ID the commit carries, if any (resolve.go).
	client []byte
}

type beginReq struct {
	keyspace string
	ops      []txn.Op
	chain    []ring.NodeID
	// keep: the groups of chain a re-execution keeps one of each of.
	keep    [][]ring.NodeID
	version uint64
	client  []byte
	// bases are those the coordinator fetched ahead (fetchBases), which
	// its Forwards carry from the head on.
	bases map[string]mvcc.Base
	done  chan beginResult
}

type beginResult struct {
	outcome chain.Outcome
	err     error
}

// Start starts the node's loop.
func Start(cfg Config) (*Node, error) {
	if cfg.Cluster == nil || cfg.Engine == nil || cfg.Dial == nil {
		return nil, errors.New("node: Cluster, Engine and Dial are required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	n := &Node{
		cfg: cfg, self: cfg.Cluster.Self(), started: time.Now(), earlier: map[string]bool{},
		lease: lease.New(max(cfg.LeaseDuration, 0), nil), leaseDone: make(chan struct{}),
		excl:  exclusions{after: map[ring.NodeID]time.Time{}},
		inbox: make(chan envelope, inboxMax), begins: make(chan beginReq),
		admit: semaphore.NewWeighted(CommitBytesInFlightMax),
		stop:  make(chan struct{}), done: make(chan struct{}),
		peers:  map[ring.NodeID]*peer{},
		groups: map[string]*group{}, waiters: map[waiterKey]chan beginResult{},
		versions: map[waiterKey]versionEntry{},
		syncReqs: make(chan syncReq, 1), syncDone: make(chan syncResult, 1), syncerDone: make(chan struct{}),
		dirty: map[string]bool{},
	}
	n.stopped, n.cancelStop = context.WithCancel(context.Background())
	for _, ks := range cfg.Engine.List() {
		n.earlier[ks.Name] = !cfg.FirstRun
	}
	n.catch.init()
	n.ringDone = make(chan struct{})
	if err := n.loadRing(); err != nil {
		return nil, err
	}
	if cfg.LeaseDuration < 0 {
		n.holdLeaseForGood()
	} else if n.alone() {
		n.holdLeaseAlone()
	}
	n.lastTick.Store(time.Now().UnixNano())
	go n.loop()
	go n.syncer()
	go n.ringLoop()
	go n.catchUpLoop()
	go n.leaseLoop()
	return n, nil
}

// Close stops the loop and the senders. Commits in flight return
// ErrUnavailable.
func (n *Node) Close() {
	close(n.stop)
	n.cancelStop()
	<-n.done
	<-n.syncerDone
	<-n.catch.done
	<-n.leaseDone
	<-n.ringDone
	n.peersMu.Lock()
	defer n.peersMu.Unlock()
	for _, p := range n.peers {
		p.close()
	}
	n.peers = map[ring.NodeID]*peer{}
}

// Self is this node's ID.
func (n *Node) Self() ring.NodeID { return n.self }

// currentRing returns the ring whose owners serve reads: the ring
// epoch's (epoch.go) or, before the cluster has one, the view's.
func (n *Node) currentRing() (*ring.Ring, error) {
	r, _, err := n.rings()
	return r, err
}

// viewRing returns the ring of the current view. A new view (any
// membership change) costs a RingID hash; the ring is rebuilt only when
// the ring's members or weights changed, not on a change of liveness.
func (n *Node) viewRing() (*ring.Ring, error) {
	view := n.cfg.Cluster.View()
	n.ringMu.Lock()
	defer n.ringMu.Unlock()
	if n.ring != nil && view == n.ringView {
		return n.ring, nil
	}
	id := view.RingID()
	if n.ring == nil || id != n.ringID {
		r, err := view.Ring(ring.Config{})
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
		}
		n.ring, n.ringID = r, id
	}
	n.ringView = view
	return n.ring, nil
}

// Chain returns the live members a commit of ops must run through if each
// blob is sizes[key] bytes long (see placement.go): the live version
// managers of every blob it touches, then the live holders of the chunks it
// changes. Among the version managers those catching up come after the
// others, so that the first version manager of each blob holds every
// commit of it, and a ready member is the tail where one may be
// (chain.OrderTailReady); each group is sorted by node ID (the protocol's global
// order; see chain.Order for the whole rule). It fails with
// errs.ErrUnavailable when a blob has no live version manager, and with a
// *cycleError when no order puts each blob's first version manager before
// the holders of its changed chunks: the coordinator then fetches those
// blobs' bases ahead and plans again with them in fetched, whose holders
// may come anywhere.
//
// It also returns the groups of members a re-execution must keep one of
// each of (chain.Coordinator.Begin): for every blob its version managers
// in the chain that serve it, and for every chunk whose bytes the commit
// changes (those it writes, and the ones where the blob's end moves from
// and to) its holders in the chain, those that serve it if any do. A
// re-execution that kept a version manager of each blob but no holder of
// a chunk written would commit that chunk's new bytes nowhere.
func (n *Node) Chain(keyspace string, rf int, ops []txn.Op, sizes map[string]uint64, fetched map[string]bool) ([]ring.NodeID, [][]ring.NodeID, error) {
	pl, cs, err := n.placed(keyspace, rf)
	if err != nil {
		return nil, nil, err
	}
	var keep [][]ring.NodeID
	blobVMs := map[string][]ring.NodeID{} // each blob's live version managers
	// gaining: version managers that only gain a blob in a move and so
	// may not hold it yet; they come after those that serve it, like
	// members catching up, and so do holders only gaining a chunk.
	gaining := map[ring.NodeID]bool{}
	for _, op := range ops {
		if _, seen := blobVMs[op.Key]; seen {
			continue
		}
		ids, err := pl.vms(op.Key)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
		}
		live := 0
		blobVMs[op.Key] = nil
		serves := pl.serving(op.Key, 0)
		for _, id := range ids {
			if n.inChains(id) {
				blobVMs[op.Key] = append(blobVMs[op.Key], id)
				if serves(id) {
					live++
				} else {
					gaining[id] = true
				}
			}
		}
		keep = append(keep, slices.DeleteFunc(slices.Clone(blobVMs[op.Key]), func(id ring.NodeID) bool { return !serves(id) }))
		if live == 0 {
			return nil, nil, fmt.Errorf("%w: no live replica of blob %q that serves it (replicas %v)", errs.ErrUnavailable, op.Key, ids)
		}
	}
	parts := map[ring.NodeID]*chain.Part{}
	part := func(id ring.NodeID) *chain.Part {
		p := parts[id]
		if p == nil {
			p = &chain.Part{ID: id, Behind: n.catchingUp(id) || gaining[id]}
			parts[id] = p
		}
		return p
	}
	for key, ids := range blobVMs {
		for _, id := range ids {
			part(id).Manages = append(part(id).Manages, key)
		}
	}
	for key, t := range plan(ops, sizes, cs) {
		holders, gainingChunks := map[ring.NodeID]bool{}, map[ring.NodeID]bool{}
		if err := pl.holders(holders, gainingChunks, &keep, key, cs, t, n.inChains); err != nil {
			return nil, nil, err
		}
		for id := range holders {
			if !n.inChains(id) || slices.Contains(blobVMs[key], id) {
				continue
			}
			p := part(id)
			if !fetched[key] {
				p.Holds = append(p.Holds, key)
			}
			if len(p.Manages) == 0 && gainingChunks[id] {
				p.Behind = true
			}
		}
	}
	members := make([]chain.Part, 0, len(parts))
	for _, p := range parts {
		members = append(members, *p)
	}
	order, err := chain.Order(members)
	if errors.Is(err, chain.ErrNoOrder) && fetched == nil {
		cyc := &cycleError{err: err}
		for _, p := range members {
			if len(p.Manages) > 0 {
				cyc.blobs = append(cyc.blobs, p.Holds...)
			}
		}
		slices.Sort(cyc.blobs)
		cyc.blobs = slices.Compact(cyc.blobs)
		return nil, nil, cyc
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
	}
	for _, g := range keep {
		slices.Sort(g)
	}
	slices.SortFunc(keep, slices.Compare)
	return order, slices.CompactFunc(keep, slices.Equal), nil
}

// placed returns keyspace's placement and chunk size.
func (n *Node) placed(keyspace string, rf int) (Placement, uint64, error) {
	pl, err := n.Placement(keyspace, rf)
	if err != nil {
		return Placement{}, 0, err
	}
	ks, err := n.cfg.Engine.Acquire(keyspace)
	if err != nil {
		return Placement{}, 0, err
	}
	defer ks.Release()
	return pl, ks.Store.ChunkBytes(), nil
}

// catchingUp reports whether member id is catching up, as far as this node
// knows: its own state for itself, the view's for the others.
func (n *Node) catchingUp(id ring.NodeID) bool {
	if id == n.self {
		return n.CatchingUp()
	}
	return n.cfg.Cluster.CatchingUp(id)
}

// ReadTarget returns the node that serves reads of key's record (see
// Placement.Target).
func (n *Node) ReadTarget(keyspace string, rf int, key string) (ring.NodeID, error) {
	pl, err := n.Placement(keyspace, rf)
	if err != nil {
		return "", err
	}
	return pl.Target(key, 0)
}

// nextVersion returns a commit version from the clock, above every one this
// node chose before and above floor.
func (n *Node) nextVersion(floor uint64) uint64 {
	n.clockMu.Lock()
	defer n.clockMu.Unlock()
	n.last = max(uint64(time.Now().UnixNano()), n.last+1, floor+1)
	return n.last
}

// Commit runs ops through the chain of their live replicas (see Chain)
// and returns the head's results; a chain of just this node commits on the
// local store. A refusal for a blob locked by a concurrent commit, for a
// version below a replica's, or by a head that is catching up, is tried
// again with backoff, on a chain computed anew, for up to CommitRetryMax;
// other refusals return the refusing member's error. If ctx ends first the
// outcome is unknown: the commit may still take effect. client, if not
// empty, is the client's ID of the commit (see resolve.go): every attempt
// carries it, and none begins once its time is ClientClockSkewMax past.
//
// Commits of blind ops only are combined with others on the same blobs
// while one is in flight (combine.go).
func (n *Node) Commit(ctx context.Context, keyspace string, rf int, ops []txn.Op, client []byte) ([]txn.Result, error) {
	if b := dataBytes(ops); b > 0 {
		if err := n.admit.Acquire(ctx, b); err != nil {
			return nil, errs.Refused(fmt.Errorf("%w: gave up waiting for room for %d bytes among the commits in flight: %w", errs.ErrUnavailable, b, err))
		}
		defer n.admit.Release(b)
	}
	if combinable(ops) {
		return n.commitCombined(ctx, keyspace, rf, ops, client)
	}
	return n.commit(ctx, keyspace, rf, ops, client)
}

// dataBytes is the payload ops carry, counted against
// CommitBytesInFlightMax.
func dataBytes(ops []txn.Op) int64 {
	var b int64
	for _, op := range ops {
		b += int64(len(op.Data) + len(op.Expected))
	}
	return min(b, CommitBytesInFlightMax)
}

// commit is Commit without combining.
func (n *Node) commit(ctx context.Context, keyspace string, rf int, ops []txn.Op, client []byte) ([]txn.Result, error) {
	deadline := time.Now().Add(CommitRetryMax)
	backoff := time.Millisecond
	floor := uint64(0)
	for {
		if len(client) > 0 {
			// Attempts begin only inside the window the members' stage
			// windows and resolution rely on. Every earlier attempt
			// aborted, so nothing was applied.
			if err := checkClientIDs(client, time.Now()); err != nil {
				return nil, fmt.Errorf("%w: gave up the commit: %v", errs.ErrConflict, err)
			}
		}
		o, err := n.attempt(ctx, keyspace, rf, ops, n.nextVersion(floor), client)
		if err != nil {
			return nil, err
		}
		if o.Committed {
			if i := unheld(o.Results); i >= 0 {
				// A protocol bug: the member that decided reported no value
				// a holder computed. The commit took effect; its result is
				// not known here, so the client must not get the zero.
				n.cfg.Log.Error("a committed outcome carries a result no holder computed",
					"txn", o.Txn.String(), "op", i, "results", fmt.Sprint(o.Results), "commit_err", fmt.Sprint(o.CommitErr))
				return nil, fmt.Errorf("%w: committed, but the result of op %d is not known here", errs.ErrUnavailable, i)
			}
			n.hints.learn(keyspace, ops, o.Results)
			return o.Results, nil
		}
		if sizes, ok := decodeReplan(o.Err); ok && time.Now().Before(deadline) {
			n.hints.set(keyspace, sizes)
			continue
		}
		r := decodeRefusal(o.Err)
		if (!r.locked && r.floor == 0) || time.Now().After(deadline) {
			return nil, errs.Refused(r.err) // the chain aborted every attempt
		}
		floor = max(floor, r.floor)
		wait := backoff/2 + rand.N(backoff)
		backoff = min(2*backoff, 50*time.Millisecond)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// attempt runs one try of a commit. It is tracked from before its chain is
// computed until it ends (see Barrier).
func (n *Node) attempt(ctx context.Context, keyspace string, rf int, ops []txn.Op, version uint64, client []byte) (chain.Outcome, error) {
	defer n.Track()()
	// Errors before the commit is handed to the loop or the local store are
	// definite refusals (errs.Refused): nothing was sent.
	if !n.majority() {
		return chain.Outcome{}, errs.Refused(fmt.Errorf("%w: node %s does not see a majority of the cluster alive", errs.ErrUnavailable, n.self))
	}
	sizes := n.hints.get(keyspace, ops)
	members, keep, err := n.Chain(keyspace, rf, ops, sizes, nil)
	var bases map[string]mvcc.Base
	if cyc := (*cycleError)(nil); errors.As(err, &cyc) {
		bases, err = n.fetchBases(ctx, keyspace, rf, ops, cyc.blobs)
		if err == nil {
			if sizes == nil {
				sizes = map[string]uint64{}
			}
			for key, b := range bases {
				sizes[key] = b.Size
			}
			members, keep, err = n.Chain(keyspace, rf, ops, sizes, fetchedSet(bases))
		}
	}
	if err != nil {
		return chain.Outcome{}, errs.Refused(err)
	}
	if r, err := n.currentRing(); err != nil {
		return chain.Outcome{}, errs.Refused(err)
	} else if r.Len() > 1 {
		// Even a chain of this node alone checks that it holds every chunk
		// the commit changes (see checkCovered).
		return n.run(ctx, keyspace, ops, members, keep, version, client, bases)
	}
	if n.CatchingUp() {
		return chain.Outcome{Err: taggedError{fmt.Errorf("node %s is the only live replica: %w", n.self, errCatchingUp)}.Error()}, nil
	}
	ks, err := n.cfg.Engine.Acquire(keyspace)
	if err != nil {
		return chain.Outcome{}, errs.Refused(err)
	}
	defer ks.Release()
	var member chain.Member = mvcc.Member{Store: ks.Store}
	if len(client) > 0 {
		member = clientMember{n: n, keyspace: keyspace, store: ks.Store, client: client}
	}
	results, err := chain.Commit([]chain.Member{member}, ops)
	if err != nil {
		return chain.Outcome{}, err
	}
	if ks.Config.Sync {
		n.stats.syncs.Add(1)
	}
	return chain.Outcome{Committed: true, Results: results}, nil
}

func (n *Node) run(ctx context.Context, keyspace string, ops []txn.Op, members []ring.NodeID, keep [][]ring.NodeID, version uint64, client []byte, bases map[string]mvcc.Base) (chain.Outcome, error) {
	done := make(chan beginResult, 1)
	req := beginReq{keyspace: keyspace, ops: ops, chain: slices.Clone(members), keep: keep, version: version, client: client, bases: bases, done: done}
	select {
	case n.begins <- req:
	case <-ctx.Done():
		return chain.Outcome{}, ctx.Err()
	case <-n.stop:
		return chain.Outcome{}, errs.Refused(fmt.Errorf("%w: node shutting down", errs.ErrUnavailable))
	}
	select {
	case r := <-done:
		return r.outcome, r.err
	case <-ctx.Done():
		return chain.Outcome{}, fmt.Errorf("commit outcome unknown: %w", ctx.Err())
	case <-n.stop:
		return chain.Outcome{}, fmt.Errorf("%w: node shutting down; commit outcome unknown", errs.ErrUnavailable)
	}
}

// Deliver implements peerpb.PeerServer: it queues the messages for the
// loop. Malformed messages are dropped.
func (n *Node) Deliver(ctx context.Context, req *peerpb.DeliverRequest) (*peerpb.DeliverResponse, error) {
	n.stats.received.Add(uint64(len(req.GetMessages())))
	for _, m := range req.GetMessages() {
		env, err := decodeEnvelope(m)
		if err != nil {
			n.cfg.Log.Warn("dropped a malformed peer message", "from", m.GetFrom(), "err", err)
			continue
		}
		select {
		case n.inbox <- env:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-n.stop:
			return nil, fmt.Errorf("%w: node shutting down", errs.ErrUnavailable)
		}
	}
	return &peerpb.DeliverResponse{}, nil
}

func (n *Node) loop() {
	defer close(n.done)
	ticker := time.NewTicker(Tick)
	defer ticker.Stop()
	sweep, stalls := time.Now(), time.Now()
	for {
		select {
		case <-n.stop:
			for _, w := range n.waiters {
				w <- beginResult{err: fmt.Errorf("%w: node shutting down; commit outcome unknown", errs.ErrUnavailable)}
			}
			return
		case env := <-n.inbox:
			n.step(env)
		case req := <-n.begins:
			n.begin(req)
		case r := <-n.syncDone:
			n.synced(r)
		case <-ticker.C:
			n.tick()
			n.checkLease()
			n.beginDrain()
			for name, g := range n.groups {
				g.replica.Tick()
				g.coord.Tick()
				g.coord.Reroute(n.inChains)
				n.flush(name, g)
			}
			if time.Since(sweep) > time.Minute {
				n.sweepVersions()
				sweep = time.Now()
			}
			if time.Since(stalls) > StalledAfter {
				n.logStalled()
				stalls = time.Now()
			}
		}
		for len(n.local) > 0 {
			env := n.local[0]
			n.local = n.local[1:]
			n.step(env)
		}
		n.startSync()
		n.stepDrain()
	}
}

// logStalled logs the commits this node has been a member of for longer
// than StalledAfter without an outcome, or waiting that long to apply.
func (n *Node) logStalled() {
	for name, g := range n.groups {
		for _, s := range g.replica.Stalled(int(StalledAfter / Tick)) {
			n.cfg.Log.Warn("commit stalled", "keyspace", name, "txn", s)
		}
	}
}

func (n *Node) group(keyspace string) (*group, error) {
	if g, ok := n.groups[keyspace]; ok {
		return g, nil
	}
	r, err := chain.NewReplica(chain.ReplicaConfig{ID: n.self, Stager: stager{n: n, keyspace: keyspace},
		RetransmitTicks: RetransmitTicks, OutcomeRetentionTicks: OutcomeRetentionTicks, TxnsMax: TxnsMax,
		EarlierRun: func(id chain.TxnID) bool { return n.earlierRun(keyspace, id) }})
	if err != nil {
		return nil, err
	}
	// Sequence numbers start at the clock so a restarted node never reuses
	// one (see chain.CoordinatorConfig.FirstSeq).
	c, err := chain.NewCoordinator(chain.CoordinatorConfig{ID: n.self, FirstSeq: uint64(time.Now().UnixNano()),
		RetransmitTicks: RetransmitTicks})
	if err != nil {
		return nil, err
	}
	g := &group{replica: r, coord: c}
	n.groups[keyspace] = g
	return g, nil
}

// earlierRun reports whether an earlier run of this node (before a
// restart) may have received a Forward of transaction id: whether the
// keyspace was there when this run started and the commit's coordinator
// began it before then, allowing for clock skew. A commit begun more than
// ForwardAgeMax ago counts as one too.
// The commit's begin time arrived with the Forward (see step).
func (n *Node) earlierRun(keyspace string, id chain.TxnID) bool {
	e, ok := n.versions[waiterKey{keyspace, id}]
	switch {
	case !ok:
		return true
	case time.Since(time.Unix(0, e.begun)) > ForwardAgeMax:
		return true // as good as handled before: see ForwardAgeMax
	case !n.earlier[keyspace]:
		return false
	}
	return e.begun < n.started.Add(ClockSkewMax).UnixNano()
}

func (n *Node) begin(req beginReq) {
	g, err := n.group(req.keyspace)
	if err != nil {
		req.done <- beginResult{err: errs.Refused(err)}
		return
	}
	id, err := g.coord.Begin(req.ops, req.chain, req.keep)
	if err != nil {
		if errors.Is(err, chain.ErrBusy) {
			err = fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
		}
		req.done <- beginResult{err: errs.Refused(err)}
		return
	}
	key := waiterKey{req.keyspace, id}
	n.waiters[key] = req.done
	now := time.Now()
	n.versions[key] = versionEntry{version: req.version, begun: now.UnixNano(), at: now, client: req.client, fetched: req.bases}
	n.flush(req.keyspace, g)
}

func (n *Node) step(env envelope) {
	if age := time.Since(time.Unix(0, env.sent)); age > MessageAgeMax {
		n.cfg.Log.Debug("dropped a stale peer message", "msg", env.msg.String(), "age", age)
		return
	}
	g, err := n.group(env.keyspace)
	if err != nil {
		n.cfg.Log.Warn("no chain group", "keyspace", env.keyspace, "err", err)
		return
	}
	key := waiterKey{env.keyspace, env.msg.Txn}
	if env.msg.Type == chain.MsgForward && !g.replica.Knows(env.msg.Txn) {
		e, ok := n.versions[key]
		if !ok {
			e = versionEntry{version: env.version, begun: env.begun, at: time.Now(), client: env.client}
		}
		if e.bases == nil {
			e.bases = env.bases
		}
		e.chain = env.msg.Chain
		n.versions[key] = e
	}
	if env.msg.Type == chain.MsgReply {
		err = g.coord.Step(env.msg)
	} else {
		err = g.replica.Step(env.msg)
	}
	if err != nil {
		n.cfg.Log.Debug("chain refused a message", "msg", env.msg.String(), "err", err)
	}
	n.flush(env.keyspace, g)
}

// recordMissed records, for each commit of finished this member's copy
// missed because a restart lost its stage (chain.ErrStageLost), that it
// missed it (mvcc.Store.PutMissed), and reports whether it recorded any:
// the messages of the same output, the Ack among them, wait for the sync
// that makes the records durable. A copy (a ring change's or a
// catch-up's) that waits for such a commit learns from the record that
// this copy will never hold it (Chunks). A failed record is logged; the
// copy then waits for good.
func (n *Node) recordMissed(keyspace string, finished []chain.Outcome) bool {
	wrote := false
	for _, f := range finished {
		if !errors.Is(f.CommitErr, chain.ErrStageLost) {
			continue
		}
		ks, err := n.cfg.Engine.Acquire(keyspace)
		if err == nil {
			err = ks.Store.PutMissed(f.Txn.String())
			ks.Release()
		}
		if err != nil {
			n.cfg.Log.Error("recording a commit this copy missed", "keyspace", keyspace, "txn", f.Txn.String(), "err", err)
			continue
		}
		wrote = true
	}
	return wrote
}

// flush sends what the state machines produced and reports finished
// commits to their waiters.
func (n *Node) flush(keyspace string, g *group) {
	for g.replica.HasReady() || g.coord.HasReady() {
		if g.replica.HasReady() {
			o := g.replica.Ready()
			g.replica.Advance(o)
			if n.recordMissed(keyspace, o.Finished) || o.MustSync {
				n.out.Wrote()
				n.dirty[keyspace] = true
			}
			n.emit(keyspace, o.Messages, false)
			for _, f := range o.Finished {
				if f.CommitErr != nil {
					n.cfg.Log.Error("local commit failed after the chain committed; this replica is behind",
						"keyspace", keyspace, "txn", f.Txn.String(), "err", f.CommitErr)
					n.startCatchUp(fmt.Sprintf("keyspace %q: transaction %s committed without this copy: %v", keyspace, f.Txn, f.CommitErr))
				}
				key := waiterKey{keyspace, f.Txn}
				if _, coordinated := n.waiters[key]; !coordinated {
					delete(n.versions, key)
				}
			}
		}
		if g.coord.HasReady() {
			o := g.coord.Ready()
			g.coord.Advance(o)
			n.emit(keyspace, o.Messages, true)
			for _, f := range o.Finished {
				key := waiterKey{keyspace, f.Txn}
				if w, ok := n.waiters[key]; ok {
					// The outcome may rest on this node's own commit
					// (a Reply from its replica as the head).
					n.release(func() { w <- beginResult{outcome: f} })
					delete(n.waiters, key)
				}
				delete(n.versions, key)
			}
		}
	}
}

func (n *Node) emit(keyspace string, msgs []chain.Message, coordinator bool) {
	now := time.Now().UnixNano()
	for _, m := range msgs {
		env := envelope{keyspace: keyspace, msg: m, sent: now}
		if m.Type == chain.MsgForward {
			v := n.versions[waiterKey{keyspace, m.Txn}]
			env.version, env.begun, env.bases, env.client = v.version, v.begun, v.bases, v.client
			if coordinator {
				// The coordinator's Forwards carry the bases it fetched
				// (fetch.go), never those this node staged as a member.
				env.bases = v.fetched
			}
		}
		if m.To == n.self {
			n.local = append(n.local, env)
			continue
		}
		n.release(func() { n.send(env) })
	}
}

// release performs f once the commits written before it are durable: at
// once when there are none, otherwise when the sync covering them returns
// (see internal/outbox).
func (n *Node) release(f func()) {
	for _, g := range n.out.Put(f) {
		g()
	}
}

// sweepVersions drops commit versions kept for transactions the replica
// will not forward again: those whose Forward arrived but that it never
// staged (refused unanswered, or a duplicate of a finished one).
func (n *Node) sweepVersions() {
	for key, v := range n.versions {
		if _, coordinated := n.waiters[key]; !coordinated && time.Since(v.at) > 10*time.Minute {
			delete(n.versions, key)
		}
	}
}

// stager is a keyspace's chain.Stager: the keyspace's store, staging each
// commit under the version its coordinator chose.
type stager struct {
	n        *Node
	keyspace string
}

func (s stager) Prepare(id chain.TxnID, ops []txn.Op) (chain.Staged, error) {
	client := s.n.versions[waiterKey{s.keyspace, id}].client
	if len(client) == 0 {
		return s.prepare(id, ops)
	}
	// A commit a client named is staged only if its client ID is not
	// fenced here, and stays marked staged until it is recorded or aborted
	// (resolve.go).
	ks, err := s.n.cfg.Engine.Acquire(s.keyspace)
	if err != nil {
		return nil, taggedError{err}
	}
	err = s.n.clients.stage(ks.Store, s.keyspace, client, id, time.Now())
	ks.Release()
	if err != nil {
		return nil, taggedError{err}
	}
	st, err := s.prepare(id, ops)
	if err != nil {
		s.n.clients.done(s.keyspace, client, id)
		return nil, err
	}
	return clientStaged{Staged: st, n: s.n, keyspace: s.keyspace, client: client, id: id}, nil
}

func (s stager) prepare(id chain.TxnID, ops []txn.Op) (chain.Staged, error) {
	key := waiterKey{s.keyspace, id}
	e := s.n.versions[key]
	ks, err := s.n.cfg.Engine.Acquire(s.keyspace)
	if err != nil {
		return nil, taggedError{err}
	}
	pl, err := s.n.Placement(s.keyspace, int(ks.Config.Replication))
	if err != nil {
		ks.Release()
		return nil, taggedError{err}
	}
	for _, op := range ops {
		if _, given := e.bases[op.Key]; !given && pl.Manages(op.Key) && !pl.ServesBlob(op.Key) {
			// A version manager that only gains the blob in a ring change
			// may not hold it yet.
			ks.Release()
			return nil, taggedError{fmt.Errorf("node %s is the first version manager of blob %q in the chain but only gains it in a ring change: %w",
				s.n.self, op.Key, errCatchingUp)}
		}
	}
	if len(e.chain) > 0 && e.chain[len(e.chain)-1] == s.n.self {
		if key, ok := mvcc.Unmanaged(ops, e.bases, pl.Manages); ok {
			ks.Release()
			return nil, taggedError{fmt.Errorf("node %s, the tail of the chain %v, finds no version manager of blob %q in it: %w",
				s.n.self, e.chain, key, errCatchingUp)}
		}
	}
	if s.n.CatchingUp() {
		for _, op := range ops {
			if _, given := e.bases[op.Key]; !given && pl.Manages(op.Key) {
				// The first version manager's state is what the others
				// check theirs against.
				ks.Release()
				return nil, taggedError{fmt.Errorf("node %s is the first version manager of blob %q in the chain: %w", s.n.self, op.Key, errCatchingUp)}
			}
		}
	}
	// A member catching up may have been left out of commits queued ahead
	// of this one on the head: it accepts no Base with commits ahead.
	p, err := ks.Store.TryPrepareStep(ops, mvcc.Step{Version: e.version, Bases: e.bases, Placement: pl, Strict: s.n.CatchingUp(), Fetched: e.fetchedHere(pl, s.n.self)})
	var mismatch *mvcc.BaseMismatchError
	var chunkMismatch *mvcc.ChunkMismatchError
	behind := errors.As(err, &chunkMismatch) ||
		(errors.As(err, &mismatch) && (mismatch.Have < mismatch.Want || s.n.CatchingUp()))
	if behind {
		// This copy is behind the version manager's: the commit passes
		// through, and catch-up copies its blobs once it is committed,
		// unless the commit could be decided with what it changes kept
		// nowhere (unkept). As the tail it may not pass it through
		// (chain.Passing): the chain refuses.
		sole := s.n.unkept(pl, ks.Store.ChunkBytes(), ops, e)
		gained := s.n.onlyGained(pl, ks.Store.ChunkBytes(), ops, e)
		ks.Release()
		if !gained {
			s.n.startCatchUp(fmt.Sprintf("keyspace %q: %v", s.keyspace, err))
		}
		if sole != nil {
			return nil, taggedError{sole}
		}
		own := slices.DeleteFunc(slices.Clone(ops), func(op txn.Op) bool { return !e.hasPart(pl, op.Key) })
		return s.n.passThrough(s.keyspace, id, ops, own, e.version, e.client, gained), nil
	}
	if err != nil {
		ks.Release()
		if mismatch != nil {
			s.n.cfg.Log.Error("this replica is ahead of the chain's version manager; refusing the commit",
				"keyspace", s.keyspace, "txn", id.String(), "err", err)
		}
		return nil, taggedError{err}
	}
	if err := s.n.checkCovered(pl, ks.Store.ChunkBytes(), p, e.bases, e.chain); err != nil {
		p.Abort()
		ks.Release()
		return nil, err
	}
	given := e.bases
	e.bases = p.Bases()
	s.n.versions[key] = e
	clients, _ := clientParts(e.client) // decodeEnvelope or Commit checked it
	return staged{ChainStaged: mvcc.ChainStaged{P: p, ID: id, Clients: clients, Later: true}, n: s.n, release: ks.Release,
		keyspace: s.keyspace, rf: int(ks.Config.Replication), ops: ops, given: given}, nil
}

// Committed implements chain.Stager from the keyspace's transaction
// records.
func (s stager) Committed(id chain.TxnID) ([]txn.Result, bool, error) {
	ks, err := s.n.cfg.Engine.Acquire(s.keyspace)
	if err != nil {
		return nil, false, err
	}
	defer ks.Release()
	return mvcc.CommittedTxn(ks.Store, id)
}

type staged struct {
	mvcc.ChainStaged
	n       *Node
	release func()
	// keyspace, rf, ops and the bases the members before this one gave
	// (given), for Orphaned.
	keyspace string
	rf       int
	ops      []txn.Op
	given    map[string]mvcc.Base
}

// Orphaned implements chain.Orphaning: a re-execution made this member the
// tail, and it was given no Base of a blob it no longer manages, so that
// no member of the chain manages it (mvcc.Unmanaged, as prepare checks a
// tail).
func (s staged) Orphaned() bool {
	pl, err := s.n.Placement(s.keyspace, s.rf)
	if err != nil {
		return false
	}
	_, ok := mvcc.Unmanaged(s.ops, s.given, pl.Manages)
	return ok
}

func (s staged) Commit(results []txn.Result) error {
	defer s.release()
	s.n.stats.memberCommits.Add(1)
	return s.ChainStaged.Commit(results)
}

func (s staged) Abort() {
	s.ChainStaged.Abort()
	s.release()
}
