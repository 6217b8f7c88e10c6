package membership

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/ring"
)

// Compile-time relations with memberlist: MetaBytesMax is its metadata
// limit, exactly.
const (
	_ uint = memberlist.MetaMaxSize - MetaBytesMax
	_ uint = MetaBytesMax - memberlist.MetaMaxSize
)

// Limits of the edge.
const (
	// JoinAddressesMax is the most addresses Config.Join may list. Start
	// tries them one after the other, each for up to Config.TCPTimeout, so
	// this bounds how long a failed join takes.
	JoinAddressesMax = 16
	// BroadcastQueueMaxDefault is Config.BroadcastQueueMax when unset.
	BroadcastQueueMaxDefault = 1024
	// BroadcastQueueMaxCeiling bounds Config.BroadcastQueueMax.
	BroadcastQueueMaxCeiling = 1 << 16
	// SubscribersMax is the most live subscriptions a Node has, view and
	// catalog subscriptions counted apart.
	SubscribersMax = 64
	// ConflictsMax is how many of the latest ID conflicts a Node keeps.
	ConflictsMax = 16
)

var (
	// ErrJoin is returned by Start when none of the join addresses
	// answered. It wraps errs.ErrUnavailable.
	ErrJoin = fmt.Errorf("membership: could not join the cluster (%w)", errs.ErrUnavailable)
	// ErrClosed is returned by a Node that has been shut down. It wraps
	// errs.ErrUnavailable.
	ErrClosed = fmt.Errorf("membership: node shut down (%w)", errs.ErrUnavailable)
	// ErrBackpressure is returned by Broadcast when Config.BroadcastQueueMax
	// broadcasts wait to be sent; retry later. It wraps errs.ErrUnavailable.
	ErrBackpressure = fmt.Errorf("membership: broadcast queue full (%w)", errs.ErrUnavailable)
	// ErrTooManySubscribers is returned by Subscribe and SubscribeCatalog
	// beyond SubscribersMax subscriptions. It wraps errs.ErrTooLarge.
	ErrTooManySubscribers = fmt.Errorf("membership: more than %d subscriptions (%w)", SubscribersMax, errs.ErrTooLarge)
)

// Config configures a Node. Zero fields take their defaults; the timing
// defaults are memberlist.DefaultLocalConfig's (tuned for a LAN or one
// host) except RetransmitMult, and are the ones the detection timings in
// the package comment were measured with.
type Config struct {
	// ID is the node's ID, its memberlist name and its name in the ring.
	// Required; 1 to ring.NodeIDBytesMax bytes of UTF-8.
	ID ring.NodeID
	// BindAddr is the address the gossip listeners (UDP and TCP, same port)
	// bind to. Default "127.0.0.1", which only reaches this host; use a
	// routable address, or "0.0.0.0" with AdvertiseAddr, across hosts.
	BindAddr string
	// BindPort is the gossip port; 0 (the default) lets the kernel pick a
	// free one, which GossipAddr then reports.
	BindPort int
	// AdvertiseAddr and AdvertisePort are the gossip address other nodes
	// use to reach this one. Default: the bound address and port.
	AdvertiseAddr string
	AdvertisePort int
	// RPCAddr is where this node serves tyr's RPCs, advertised in its Meta.
	// Required; 1 to RPCAddrBytesMax bytes.
	RPCAddr string
	// Weight is the node's capacity in the ring; default 1, at most
	// WeightMax.
	Weight uint32
	// CatchingUp is the node's first Meta.CatchingUp: a node that may have
	// missed commits advertises it from its first gossip on, so no other
	// node ever takes it for a replica that can serve reads. SetCatchingUp
	// changes it.
	CatchingUp bool
	// Join lists gossip addresses ("host:port") of existing members. Empty
	// starts a new cluster. Start fails with ErrJoin unless at least one
	// answers; each is tried for up to TCPTimeout (plus name resolution for
	// host names). At most JoinAddressesMax.
	Join []string

	// ProbeInterval is how often the node probes one other member, chosen
	// round robin. Default 1s. Shorter detects failures sooner for more
	// packets per second.
	ProbeInterval time.Duration
	// ProbeTimeout is how long a probe waits for an ack before trying
	// indirect probes; it should exceed the 99th percentile round-trip
	// time. Default 200ms; must be below ProbeInterval.
	ProbeTimeout time.Duration
	// IndirectChecks is how many other members are asked to probe a member
	// that did not answer directly. Default 1.
	IndirectChecks int
	// SuspicionMult scales the suspicion timeout: a suspect member is
	// declared dead after SuspicionMult × max(1, log10(N)) × ProbeInterval
	// once SuspicionMult-2 other members independently confirm the
	// suspicion, N being the member count. Default 3: 3s for N < 10.
	SuspicionMult int
	// SuspicionMaxTimeoutMult bounds the suspicion timeout when no other
	// member confirms: SuspicionMaxTimeoutMult × the timeout above.
	// Default 6: 18s for N < 10.
	SuspicionMaxTimeoutMult int
	// GossipInterval is how often the node sends queued broadcasts to
	// GossipNodes random members. Default 100ms.
	GossipInterval time.Duration
	// GossipNodes is the gossip fanout. Default 3.
	GossipNodes int
	// RetransmitMult sets how many times each node sends a broadcast
	// (memberlist's suspicions and deaths, catalog entries, caller
	// payloads): RetransmitMult × ceil(log10(N+1)). Default 4, memberlist's
	// LAN value, not DefaultLocalConfig's 2: with 2, a cluster of a few
	// nodes sends each broadcast twice, part of it to the very node that
	// died, and a survivor regularly missed both the suspicion and the
	// death of a killed member, waiting out the 18s unconfirmed suspicion
	// timeout instead of about 3s.
	RetransmitMult int
	// PushPullInterval is how often the node exchanges its full state
	// (members and catalog) with one random member over TCP; this
	// anti-entropy repairs whatever gossip lost. Default 15s.
	PushPullInterval time.Duration
	// TCPTimeout bounds each TCP exchange: a join attempt, a push/pull, a
	// fallback probe. Default 1s.
	TCPTimeout time.Duration
	// GossipToTheDeadTime is how long memberlist keeps gossiping to, and
	// remembering, a dead member. The view keeps dead members regardless.
	// Default 15s.
	GossipToTheDeadTime time.Duration
	// BroadcastQueueMax bounds the broadcasts waiting to be sent;
	// Broadcast returns ErrBackpressure beyond it. Default
	// BroadcastQueueMaxDefault, at most BroadcastQueueMaxCeiling. Catalog
	// broadcasts count towards it but are never refused, since at most one
	// per keyspace name waits and push/pull would repair a lost one anyway.
	BroadcastQueueMax int

	// OnMessage, if set, receives every caller payload broadcast by another
	// node (see Broadcast). It is called from memberlist's packet loop, so
	// it must not block; msg is the callee's to keep. A node may receive one
	// payload more than once and in any order.
	OnMessage func(msg []byte)
	// Logger receives the node's logs and memberlist's, with attribute
	// node=ID. Default slog.Default().
	Logger *slog.Logger
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	local := memberlist.DefaultLocalConfig()
	local.RetransmitMult = memberlist.DefaultLANConfig().RetransmitMult // see Config.RetransmitMult
	setDefault(&c.BindAddr, "127.0.0.1")
	setDefault(&c.Weight, 1)
	setDefault(&c.ProbeInterval, local.ProbeInterval)
	setDefault(&c.ProbeTimeout, local.ProbeTimeout)
	setDefault(&c.IndirectChecks, local.IndirectChecks)
	setDefault(&c.SuspicionMult, local.SuspicionMult)
	setDefault(&c.SuspicionMaxTimeoutMult, local.SuspicionMaxTimeoutMult)
	setDefault(&c.GossipInterval, local.GossipInterval)
	setDefault(&c.GossipNodes, local.GossipNodes)
	setDefault(&c.RetransmitMult, local.RetransmitMult)
	setDefault(&c.PushPullInterval, local.PushPullInterval)
	setDefault(&c.TCPTimeout, local.TCPTimeout)
	setDefault(&c.GossipToTheDeadTime, local.GossipToTheDeadTime)
	setDefault(&c.BroadcastQueueMax, BroadcastQueueMaxDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func setDefault[T comparable](field *T, value T) {
	var zero T
	if *field == zero {
		*field = value
	}
}

// validate reports every problem with c, which has its defaults.
func (c Config) validate() error {
	var problems []error
	if err := validateID(c.ID); err != nil {
		problems = append(problems, err)
	}
	if c.RPCAddr == "" || len(c.RPCAddr) > RPCAddrBytesMax {
		problems = append(problems, fmt.Errorf("RPC address %q: length must be in [1, %d]", c.RPCAddr, RPCAddrBytesMax))
	}
	if c.Weight > WeightMax {
		problems = append(problems, fmt.Errorf("weight %d out of range [1, %d]", c.Weight, WeightMax))
	}
	if c.BindPort < 0 || c.BindPort > 65535 || c.AdvertisePort < 0 || c.AdvertisePort > 65535 {
		problems = append(problems, fmt.Errorf("ports %d (bind) and %d (advertise) must be in [0, 65535]", c.BindPort, c.AdvertisePort))
	}
	if len(c.Join) > JoinAddressesMax {
		problems = append(problems, fmt.Errorf("%d join addresses, more than the limit of %d", len(c.Join), JoinAddressesMax))
	}
	positive := map[string]time.Duration{
		"probe interval": c.ProbeInterval, "probe timeout": c.ProbeTimeout, "gossip interval": c.GossipInterval,
		"push/pull interval": c.PushPullInterval, "TCP timeout": c.TCPTimeout, "gossip-to-the-dead time": c.GossipToTheDeadTime,
	}
	for _, name := range sortedKeys(positive) {
		if positive[name] < 0 {
			problems = append(problems, fmt.Errorf("%s %v is negative", name, positive[name]))
		}
	}
	if c.ProbeTimeout >= c.ProbeInterval {
		problems = append(problems, fmt.Errorf("probe timeout %v must be shorter than the probe interval %v", c.ProbeTimeout, c.ProbeInterval))
	}
	counts := map[string]int{
		"indirect checks": c.IndirectChecks, "suspicion multiplier": c.SuspicionMult,
		"suspicion max timeout multiplier": c.SuspicionMaxTimeoutMult, "gossip nodes": c.GossipNodes,
		"retransmit multiplier": c.RetransmitMult,
	}
	for _, name := range sortedKeys(counts) {
		if counts[name] < 1 {
			problems = append(problems, fmt.Errorf("%s %d must be at least 1", name, counts[name]))
		}
	}
	if c.BroadcastQueueMax < 1 || c.BroadcastQueueMax > BroadcastQueueMaxCeiling {
		problems = append(problems, fmt.Errorf("broadcast queue max %d out of range [1, %d]", c.BroadcastQueueMax, BroadcastQueueMaxCeiling))
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("membership: %w: config: %w", ErrInvalid, errors.Join(problems...))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Claim is one process's claim to a node ID.
type Claim struct {
	GossipAddr string
	RPCAddr    string
}

// Conflict records two processes claiming one node ID.
type Conflict struct {
	ID ring.NodeID
	// Existing is the claim the reporting node already knew, Other the one
	// it refused.
	Existing, Other Claim
}

// Err returns the conflict as an error wrapping ErrDuplicateID.
func (c Conflict) Err() error {
	return fmt.Errorf("%w: %q is held by the process at gossip address %s (RPC address %q); the process at gossip address %s (RPC address %q) claims it too",
		ErrDuplicateID, c.ID, c.Existing.GossipAddr, c.Existing.RPCAddr, c.Other.GossipAddr, c.Other.RPCAddr)
}

// Node is a running member: memberlist's SWIM failure detector and gossip,
// driving a View and a Catalog. All methods are safe for concurrent use.
//
// Locking: memberlist calls the node's delegates while holding its own
// locks, and the delegates take Node.mu. So the node never calls into
// memberlist, nor queues a broadcast, while holding mu; and the broadcast
// queue's member count is an atomic, so the queue never waits on either.
type Node struct {
	cfg    Config
	logger *slog.Logger
	// list is set once in Start, before Start returns; delegates never use
	// it, so they may run before it is set.
	list       *memberlist.Memberlist
	gossipAddr string
	queue      *memberlist.TransmitLimitedQueue
	// usable counts Alive and Suspect members, this node included; the
	// queue derives how often to retransmit a broadcast from it.
	usable atomic.Int64
	// lifecycle serializes Leave and Shutdown, since memberlist panics on a
	// Leave after Shutdown.
	lifecycle sync.Mutex

	mu struct {
		sync.Mutex
		// meta is this node's own Meta as advertised.
		meta    Meta
		view    View
		catalog Catalog
		clock   Clock
		// conflicts holds the latest ConflictsMax ID conflicts, oldest
		// first.
		conflicts []Conflict
		views     subscribers[*View]
		catalogs  subscribers[*Catalog]
		// closed is set by Shutdown; nothing is published after it.
		closed bool
	}
}

// Start starts a node: it binds the gossip listeners, joins the cluster
// through cfg.Join (or starts a new one if empty) and returns once the node
// is a member. It returns an error, with nothing left running, if cfg is
// invalid (ErrInvalid), if the listeners cannot bind, if no join address
// answered within cfg.TCPTimeout each (ErrJoin), or if a live member
// already holds cfg.ID under another address (ErrDuplicateID): the
// newcomer refuses to start rather than fight over the ID.
func Start(cfg Config) (*Node, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, logger: cfg.Logger.With("node", string(cfg.ID))}
	n.mu.meta = Meta{ID: cfg.ID, RPCAddr: cfg.RPCAddr, Weight: cfg.Weight, StartedUnixNano: time.Now().UnixNano(),
		CatchingUp: cfg.CatchingUp}
	if _, err := n.mu.meta.Encode(); err != nil {
		return nil, err
	}
	n.queue = &memberlist.TransmitLimitedQueue{
		NumNodes:       func() int { return int(n.usable.Load()) },
		RetransmitMult: cfg.RetransmitMult,
	}
	list, err := memberlist.Create(n.memberlistConfig())
	if err != nil {
		return nil, fmt.Errorf("membership: starting node %q on %s:%d: %w", cfg.ID, cfg.BindAddr, cfg.BindPort, err)
	}
	n.list = list
	n.gossipAddr = list.LocalNode().Address()
	if len(cfg.Join) > 0 {
		began := time.Now()
		joined, err := list.Join(cfg.Join)
		if joined == 0 {
			n.shutdownQuietly()
			return nil, fmt.Errorf("%w: node %q reached none of %v after %v (each tried for up to %v): %w",
				ErrJoin, cfg.ID, cfg.Join, time.Since(began).Round(time.Millisecond), cfg.TCPTimeout, err)
		}
	}
	if c, ok := n.selfConflict(); ok {
		n.shutdownQuietly()
		return nil, n.refusal(c)
	}
	n.logger.Info("membership: node started", "gossip_addr", n.gossipAddr, "rpc_addr", cfg.RPCAddr,
		"weight", cfg.Weight, "joined_through", cfg.Join)
	go n.rejoinLoop()
	return n, nil
}

// RejoinInterval is how often a node tries to reach the members it holds
// dead. memberlist stops gossiping to a dead member after a while (15 s
// with the local defaults), so the two sides of a longer partition would
// not find each other again: this joins them. A member that is really down
// costs one failed connection attempt per interval.
const RejoinInterval = 5 * time.Second

func (n *Node) rejoinLoop() {
	ticker := time.NewTicker(RejoinInterval)
	defer ticker.Stop()
	for round := 0; ; round++ {
		<-ticker.C
		if n.isClosed() {
			return
		}
		var addrs []string
		for _, m := range n.View().Members() {
			if m.State == StateDead && m.Meta.ID != n.cfg.ID && m.GossipAddr != "" {
				addrs = append(addrs, m.GossipAddr)
			}
		}
		if len(addrs) > 0 {
			// One address a round, so a shutdown waits at most one
			// connection timeout.
			slices.Sort(addrs)
			addr := addrs[round%len(addrs)]
			n.lifecycle.Lock()
			if !n.isClosed() {
				if joined, _ := n.list.Join([]string{addr}); joined > 0 {
					n.logger.Info("membership: reached a member held dead", "addr", addr)
				}
			}
			n.lifecycle.Unlock()
		}
	}
}

// memberlistConfig translates n.cfg.
func (n *Node) memberlistConfig() *memberlist.Config {
	c := memberlist.DefaultLocalConfig()
	c.Name = string(n.cfg.ID)
	c.BindAddr = n.cfg.BindAddr
	c.BindPort = n.cfg.BindPort
	c.AdvertiseAddr = n.cfg.AdvertiseAddr
	c.AdvertisePort = n.cfg.AdvertisePort
	if c.AdvertisePort == 0 {
		c.AdvertisePort = n.cfg.BindPort // memberlist replaces 0 by the picked port
	}
	c.ProbeInterval = n.cfg.ProbeInterval
	c.ProbeTimeout = n.cfg.ProbeTimeout
	c.IndirectChecks = n.cfg.IndirectChecks
	c.SuspicionMult = n.cfg.SuspicionMult
	c.SuspicionMaxTimeoutMult = n.cfg.SuspicionMaxTimeoutMult
	c.GossipInterval = n.cfg.GossipInterval
	c.GossipNodes = n.cfg.GossipNodes
	c.RetransmitMult = n.cfg.RetransmitMult
	c.PushPullInterval = n.cfg.PushPullInterval
	c.TCPTimeout = n.cfg.TCPTimeout
	c.GossipToTheDeadTime = n.cfg.GossipToTheDeadTime
	d := &delegate{n: n}
	c.Delegate = d
	c.Events = d
	c.Conflict = d
	c.Alive = d
	c.Ping = d
	c.Logger = log.New(logBridge{n: n}, "", 0)
	return c
}

// selfConflict returns a recorded conflict over this node's own ID.
func (n *Node) selfConflict() (Conflict, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, c := range n.mu.conflicts {
		if c.ID == n.cfg.ID {
			return c, true
		}
	}
	return Conflict{}, false
}

// refusal explains why a starting node gives up its ID. Whichever side of
// the conflict memberlist called existing, the holder is the claim that is
// not this process.
func (n *Node) refusal(c Conflict) error {
	holder := c.Existing
	if holder.GossipAddr == n.gossipAddr {
		holder = c.Other
	}
	hint := ""
	if holder.RPCAddr == n.cfg.RPCAddr {
		hint = "; if it is an earlier run of this node, retry once the cluster has declared it dead"
	}
	return fmt.Errorf("%w: node %q refuses to start: a live member at gossip address %s (RPC address %q) holds the ID; this process is at gossip address %s (RPC address %q)%s",
		ErrDuplicateID, n.cfg.ID, holder.GossipAddr, holder.RPCAddr, n.gossipAddr, n.cfg.RPCAddr, hint)
}

// ID returns the node's ID.
func (n *Node) ID() ring.NodeID { return n.cfg.ID }

// GossipAddr returns the address ("host:port") other nodes join through.
func (n *Node) GossipAddr() string { return n.gossipAddr }

// Meta returns the node's own Meta as it advertises it.
func (n *Node) Meta() Meta {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.meta
}

// View returns a copy of the node's view, the caller's to keep.
func (n *Node) View() *View {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.view.Clone()
}

// Catalog returns a copy of the node's catalog, the caller's to keep.
func (n *Node) Catalog() *Catalog {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.catalog.Clone()
}

// Conflicts returns the latest ConflictsMax node ID conflicts this node has
// seen, oldest first.
func (n *Node) Conflicts() []Conflict {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.mu.conflicts)
}

// Subscribe returns a channel of the node's views, and a function that ends
// the subscription and closes the channel. The channel holds one view, and
// coalesces: a new view replaces one the subscriber has not taken yet, so a
// slow subscriber skips intermediate views but always receives the latest,
// and never slows the node down. The current view is delivered at once.
// Each view is the subscriber's to keep. Shutdown closes the channel. It
// returns ErrTooManySubscribers beyond SubscribersMax live subscriptions,
// and ErrClosed after Shutdown.
func (n *Node) Subscribe() (<-chan *View, func(), error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.closed {
		return nil, nil, ErrClosed
	}
	id, ch, err := n.mu.views.add()
	if err != nil {
		return nil, nil, err
	}
	ch <- n.mu.view.Clone()
	return ch, n.unsubscribe(func() { n.mu.views.remove(id) }), nil
}

// SubscribeCatalog is Subscribe for the catalog.
func (n *Node) SubscribeCatalog() (<-chan *Catalog, func(), error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.closed {
		return nil, nil, ErrClosed
	}
	id, ch, err := n.mu.catalogs.add()
	if err != nil {
		return nil, nil, err
	}
	ch <- n.mu.catalog.Clone()
	return ch, n.unsubscribe(func() { n.mu.catalogs.remove(id) }), nil
}

// unsubscribe wraps remove, which needs n.mu held, in an idempotent cancel
// function.
func (n *Node) unsubscribe(remove func()) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			remove()
		})
	}
}

// Broadcast sends payload to every other member by gossip, best effort:
// each member that is reachable receives it, usually within a few
// GossipIntervals, possibly more than once, in any order relative to other
// broadcasts; members that are down, or join later, never do. payload must
// be 1 to BroadcastBytesMax bytes; Broadcast copies it. It returns
// ErrBackpressure, without queueing, when Config.BroadcastQueueMax
// broadcasts are waiting, and ErrClosed after Shutdown.
func (n *Node) Broadcast(payload []byte) error {
	if len(payload) == 0 || len(payload) > BroadcastBytesMax {
		return fmt.Errorf("membership: %w: broadcast of %d bytes; payloads are 1 to %d bytes",
			ErrInvalid, len(payload), BroadcastBytesMax)
	}
	if n.isClosed() {
		return ErrClosed
	}
	if n.queue.NumQueued() >= n.cfg.BroadcastQueueMax {
		return fmt.Errorf("%w: %d broadcasts waiting", ErrBackpressure, n.queue.NumQueued())
	}
	n.queue.QueueBroadcast(&userBroadcast{msg: encodeUserMessage(payload)})
	return nil
}

// CreateKeyspace records keyspace name with its encoded config in the
// catalog and broadcasts it. It returns the new entry, or an error if name
// is live in this node's catalog (errs.ErrExists), the entry is invalid
// (ErrInvalid), the catalog is full (ErrCatalogFull) or the node is shut
// down (ErrClosed). Success means this node recorded it; the rest of the
// cluster follows within gossip and push/pull delays, and a concurrent
// creation of the same name elsewhere may win (see Catalog).
func (n *Node) CreateKeyspace(name string, config []byte) (CatalogEntry, error) {
	return n.writeCatalog(func(c *Catalog, version Timestamp) (CatalogEntry, error) {
		return c.Create(name, config, version, n.cfg.ID)
	})
}

// DropKeyspace records a tombstone for keyspace name and broadcasts it. It
// returns the tombstone, or an error if name is not live in this node's
// catalog (errs.ErrNotFound) or the node is shut down (ErrClosed).
func (n *Node) DropKeyspace(name string) (CatalogEntry, error) {
	return n.writeCatalog(func(c *Catalog, version Timestamp) (CatalogEntry, error) {
		return c.Drop(name, version, n.cfg.ID)
	})
}

// writeCatalog makes one local catalog write and broadcasts it.
func (n *Node) writeCatalog(write func(*Catalog, Timestamp) (CatalogEntry, error)) (CatalogEntry, error) {
	n.mu.Lock()
	if n.mu.closed {
		n.mu.Unlock()
		return CatalogEntry{}, ErrClosed
	}
	entry, err := write(&n.mu.catalog, n.mu.clock.Now(time.Now().UnixNano()))
	if err == nil {
		_, err = n.mu.catalog.Merge(entry)
	}
	if err == nil {
		n.publishCatalogLocked()
	}
	n.mu.Unlock()
	if err != nil {
		return CatalogEntry{}, err
	}
	n.queue.QueueBroadcast(&catalogBroadcast{name: entry.Name, msg: encodeCatalogMessage(entry)})
	n.logger.Info("membership: catalog write", "keyspace", entry.Name, "dropped", entry.Dropped, "version", entry.Version.String())
	return entry, nil
}

// Leave announces that this node leaves the cluster on purpose, so that
// every view marks it Left and drops it from the ring, instead of Dead,
// which keeps it. It first advertises a Meta with Leaving set, then tells
// memberlist to leave, waiting up to timeout in all for the two broadcasts
// to go out. The node keeps gossiping until Shutdown, which the caller
// should call next. Leave may be called more than once; it returns
// ErrClosed after Shutdown, and an error if a broadcast timed out, in which
// case other members may see this node as Dead rather than Left until a
// push/pull corrects it.
func (n *Node) Leave(timeout time.Duration) error {
	if timeout <= 0 {
		return fmt.Errorf("membership: %w: leave timeout %v must be positive", ErrInvalid, timeout)
	}
	n.lifecycle.Lock()
	defer n.lifecycle.Unlock()
	if _, err := n.changeMeta(func(m *Meta) bool {
		changed := !m.Leaving
		m.Leaving = true
		return changed
	}); err != nil {
		return err
	}

	deadline := time.Now().Add(timeout)
	updateErr := n.list.UpdateNode(timeout)
	remaining := max(time.Until(deadline), time.Millisecond) // memberlist waits forever on 0
	leaveErr := n.list.Leave(remaining)

	n.mu.Lock()
	n.applyLocked(Event{Kind: EventLeave, Meta: n.mu.meta, GossipAddr: n.gossipAddr})
	n.mu.Unlock()
	if err := errors.Join(updateErr, leaveErr); err != nil {
		return fmt.Errorf("membership: node %q leaving: %w", n.cfg.ID, err)
	}
	n.logger.Info("membership: node left")
	return nil
}

// SetCatchingUp advertises whether this node is catching up on commits it
// may have missed (Meta.CatchingUp), waiting up to timeout for the update
// to be broadcast. The local view changes at once; other views change when
// the broadcast or a push/pull reaches them.
func (n *Node) SetCatchingUp(on bool, timeout time.Duration) error {
	if timeout <= 0 {
		return fmt.Errorf("membership: %w: update timeout %v must be positive", ErrInvalid, timeout)
	}
	n.lifecycle.Lock()
	defer n.lifecycle.Unlock()
	changed, err := n.changeMeta(func(m *Meta) bool {
		changed := m.CatchingUp != on
		m.CatchingUp = on
		return changed
	})
	if err != nil || !changed {
		return err
	}
	n.mu.Lock()
	n.applyLocked(Event{Kind: EventUpdate, Meta: n.mu.meta, GossipAddr: n.gossipAddr})
	n.mu.Unlock()
	if err := n.list.UpdateNode(timeout); err != nil {
		return fmt.Errorf("membership: node %q advertising catching-up=%v: %w", n.cfg.ID, on, err)
	}
	return nil
}

// changeMeta applies change to this node's own Meta and, if change reports
// that it changed it, counts a new incarnation. The caller holds lifecycle.
// It returns ErrClosed after Shutdown.
func (n *Node) changeMeta(change func(*Meta) bool) (bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.closed {
		return false, ErrClosed
	}
	if !change(&n.mu.meta) {
		return false, nil
	}
	n.mu.meta.Incarnation++
	return true, nil
}

// Shutdown stops the node without leaving: the others see it stop
// answering, suspect it and declare it Dead, as after a crash. Call Leave
// first for a planned departure. It closes every subscription channel.
// Shutdown may be called more than once; later calls do nothing.
func (n *Node) Shutdown() error {
	n.lifecycle.Lock()
	defer n.lifecycle.Unlock()
	if n.isClosed() {
		return nil
	}
	err := n.list.Shutdown()
	n.mu.Lock()
	n.mu.closed = true
	n.mu.views.closeAll()
	n.mu.catalogs.closeAll()
	n.mu.Unlock()
	n.logger.Info("membership: node shut down")
	if err != nil {
		return fmt.Errorf("membership: shutting down node %q: %w", n.cfg.ID, err)
	}
	return nil
}

// shutdownQuietly stops a node that failed to start.
func (n *Node) shutdownQuietly() {
	if err := n.Shutdown(); err != nil {
		n.logger.Warn("membership: shutting down after a failed start", "err", err)
	}
}

func (n *Node) isClosed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.closed
}

// apply applies an event from the failure detector.
func (n *Node) apply(e Event) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.applyLocked(e)
}

// applyLocked applies e to the view, and logs and publishes the change.
func (n *Node) applyLocked(e Event) {
	before, _ := n.mu.view.Member(e.Meta.ID)
	changed, err := n.mu.view.Apply(e)
	if errors.Is(err, ErrDuplicateID) {
		n.recordConflictLocked(Conflict{
			ID:       e.Meta.ID,
			Existing: Claim{GossipAddr: before.GossipAddr, RPCAddr: before.Meta.RPCAddr},
			Other:    Claim{GossipAddr: e.GossipAddr, RPCAddr: e.Meta.RPCAddr},
		})
		return
	}
	if err != nil {
		n.logger.Warn("membership: event refused", "event", e.Kind.String(), "member", string(e.Meta.ID), "err", err)
		return
	}
	if !changed {
		return
	}
	after, _ := n.mu.view.Member(e.Meta.ID)
	if before.State != after.State {
		n.logger.Info("membership: member state changed", "member", string(e.Meta.ID),
			"from", before.State.String(), "to", after.State.String(), "event", e.Kind.String())
	}
	n.publishViewLocked()
}

// recordConflictLocked keeps c among the latest conflicts and logs it.
func (n *Node) recordConflictLocked(c Conflict) {
	if len(n.mu.conflicts) == ConflictsMax {
		n.mu.conflicts = slices.Delete(n.mu.conflicts, 0, 1)
	}
	n.mu.conflicts = append(n.mu.conflicts, c)
	n.logger.Error("membership: node ID conflict", "err", c.Err())
}

// publishViewLocked updates the usable count and sends the view to the
// subscribers.
func (n *Node) publishViewLocked() {
	n.usable.Store(int64(n.mu.view.Count(StateAlive) + n.mu.view.Count(StateSuspect)))
	if n.mu.closed {
		return
	}
	n.mu.views.publish(n.mu.view.Clone)
}

func (n *Node) publishCatalogLocked() {
	if n.mu.closed {
		return
	}
	n.mu.catalogs.publish(n.mu.catalog.Clone)
}

// subscribers is a set of coalescing subscription channels. Its methods
// need Node.mu held, which also serializes every send, so that draining a
// channel and refilling it cannot race with another send.
type subscribers[T any] struct {
	next  uint64
	chans map[uint64]chan T
}

func (s *subscribers[T]) add() (uint64, chan T, error) {
	if len(s.chans) >= SubscribersMax {
		return 0, nil, ErrTooManySubscribers
	}
	if s.chans == nil {
		s.chans = make(map[uint64]chan T)
	}
	s.next++
	ch := make(chan T, 1)
	s.chans[s.next] = ch
	return s.next, ch, nil
}

func (s *subscribers[T]) remove(id uint64) {
	if ch, ok := s.chans[id]; ok {
		delete(s.chans, id)
		close(ch)
	}
}

// publish replaces whatever each channel holds by a fresh value.
func (s *subscribers[T]) publish(fresh func() T) {
	for _, ch := range s.chans {
		select {
		case <-ch: // drop the value not taken yet: the new one supersedes it
		default:
		}
		select {
		case ch <- fresh():
		default:
			panic(fmt.Sprintf("membership: invariant broken: subscription channel (cap %d, len %d) full right after draining", cap(ch), len(ch)))
		}
	}
}

func (s *subscribers[T]) closeAll() {
	for id, ch := range s.chans {
		delete(s.chans, id)
		close(ch)
	}
}

// userBroadcast is a caller's payload in memberlist's broadcast queue. It
// is unique: it never replaces another.
type userBroadcast struct{ msg []byte }

func (b *userBroadcast) Invalidates(memberlist.Broadcast) bool { return false }
func (b *userBroadcast) Message() []byte                       { return b.msg }
func (b *userBroadcast) Finished()                             {}
func (b *userBroadcast) UniqueBroadcast()                      {}

// catalogBroadcast is a catalog entry in memberlist's broadcast queue. It is
// named after its keyspace, so a newer entry for a name replaces an older
// one still queued: a node only queues an entry that won its merge, so the
// newer one is always the larger.
type catalogBroadcast struct {
	name string
	msg  []byte
}

func (b *catalogBroadcast) Invalidates(other memberlist.Broadcast) bool {
	o, ok := other.(*catalogBroadcast)
	return ok && o.name == b.name
}
func (b *catalogBroadcast) Message() []byte { return b.msg }
func (b *catalogBroadcast) Finished()       {}
func (b *catalogBroadcast) Name() string    { return "catalog/" + b.name }

var (
	_ memberlist.UniqueBroadcast = (*userBroadcast)(nil)
	_ memberlist.NamedBroadcast  = (*catalogBroadcast)(nil)
)

// delegate receives memberlist's callbacks; it is a separate type so that
// they do not clutter Node's API. memberlist may call it from several
// goroutines at once; every callback takes Node.mu and none blocks on I/O.
type delegate struct{ n *Node }

var (
	_ memberlist.Delegate         = (*delegate)(nil)
	_ memberlist.EventDelegate    = (*delegate)(nil)
	_ memberlist.ConflictDelegate = (*delegate)(nil)
	_ memberlist.AliveDelegate    = (*delegate)(nil)
	_ memberlist.PingDelegate     = (*delegate)(nil)
)

// NodeMeta returns this node's encoded Meta. Start validated it and only
// the Leaving flag and incarnation change afterwards, so it always encodes
// within limit.
func (d *delegate) NodeMeta(limit int) []byte {
	d.n.mu.Lock()
	defer d.n.mu.Unlock()
	b, err := d.n.mu.meta.Encode()
	if err != nil || len(b) > limit {
		panic(fmt.Sprintf("membership: invariant broken: own meta %+v does not encode within memberlist's limit of %d bytes (%d bytes, err %v)",
			d.n.mu.meta, limit, len(b), err))
	}
	return b
}

// NotifyAlive validates a member's metadata where it enters: a member whose
// Meta does not decode, or names another ID, is refused by memberlist and
// never reaches the view.
func (d *delegate) NotifyAlive(peer *memberlist.Node) error {
	meta, err := DecodeMeta(peer.Meta)
	if err != nil {
		return err
	}
	if string(meta.ID) != peer.Name {
		return fmt.Errorf("membership: %w: member %q advertises meta for ID %q", ErrInvalid, peer.Name, meta.ID)
	}
	return nil
}

func (d *delegate) NotifyJoin(node *memberlist.Node)   { d.notifyAlive(EventJoin, node) }
func (d *delegate) NotifyUpdate(node *memberlist.Node) { d.notifyAlive(EventUpdate, node) }

func (d *delegate) notifyAlive(kind EventKind, node *memberlist.Node) {
	meta, err := DecodeMeta(node.Meta)
	if err != nil {
		d.n.logger.Warn("membership: ignoring member with bad meta", "member", node.Name, "err", err)
		return
	}
	d.n.apply(Event{Kind: kind, Meta: meta, GossipAddr: node.Address()})
}

// NotifyLeave reports a member that memberlist declared dead or that left;
// memberlist does not say which, so the view decides from the member's
// Leaving flag (see EventDead).
func (d *delegate) NotifyLeave(node *memberlist.Node) {
	meta, err := DecodeMeta(node.Meta)
	if err != nil {
		meta = Meta{ID: ring.NodeID(node.Name)} // applies to whichever run the view knows
	}
	d.n.apply(Event{Kind: EventDead, Meta: meta, GossipAddr: node.Address()})
}

// NotifyConflict reports a second process announcing a known member's name
// from another address.
func (d *delegate) NotifyConflict(existing, other *memberlist.Node) {
	c := Conflict{
		ID:       ring.NodeID(existing.Name),
		Existing: Claim{GossipAddr: existing.Address()},
		Other:    Claim{GossipAddr: other.Address()},
	}
	if meta, err := DecodeMeta(existing.Meta); err == nil {
		c.Existing.RPCAddr = meta.RPCAddr
	}
	if meta, err := DecodeMeta(other.Meta); err == nil {
		c.Other.RPCAddr = meta.RPCAddr
	}
	d.n.mu.Lock()
	defer d.n.mu.Unlock()
	d.n.recordConflictLocked(c)
}

func (d *delegate) AckPayload() []byte { return nil }

// NotifyPingComplete is proof that a member answered this node's probe.
// memberlist reports no event when a suspect member refutes the suspicion,
// so this is how a member this node suspected becomes Alive again.
func (d *delegate) NotifyPingComplete(other *memberlist.Node, _ time.Duration, _ []byte) {
	d.n.mu.Lock()
	defer d.n.mu.Unlock()
	m, ok := d.n.mu.view.Member(ring.NodeID(other.Name))
	if !ok || m.State != StateSuspect {
		return
	}
	meta, err := DecodeMeta(other.Meta)
	if err != nil {
		return
	}
	d.n.applyLocked(Event{Kind: EventJoin, Meta: meta, GossipAddr: other.Address()})
}

// NotifyMsg receives a broadcast. It is called from memberlist's packet
// loop and must not block, so a catalog entry that changed the catalog is
// re-queued for gossip (epidemic spread) rather than sent here.
func (d *delegate) NotifyMsg(msg []byte) {
	if len(msg) == 0 {
		return
	}
	switch msg[0] {
	case messageCatalogEntry:
		d.n.receiveCatalogEntry(msg[1:])
	case messageUser:
		if d.n.cfg.OnMessage != nil {
			d.n.cfg.OnMessage(slices.Clone(msg[1:]))
		}
	default:
		d.n.logger.Debug("membership: ignoring broadcast of unknown kind", "kind", msg[0])
	}
}

func (n *Node) receiveCatalogEntry(b []byte) {
	entry, err := decodeCatalogEntry(b)
	if err != nil {
		n.logger.Warn("membership: ignoring catalog broadcast", "err", err)
		return
	}
	n.mu.Lock()
	changed, err := n.mu.catalog.Merge(entry)
	if changed {
		n.mu.clock.Observe(entry.Version)
		n.publishCatalogLocked()
	}
	n.mu.Unlock()
	if err != nil {
		n.logger.Warn("membership: catalog broadcast refused", "keyspace", entry.Name, "err", err)
	}
	if changed {
		n.queue.QueueBroadcast(&catalogBroadcast{name: entry.Name, msg: encodeCatalogMessage(entry)})
	}
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.n.queue.GetBroadcasts(overhead, limit)
}

// LocalState returns this node's members and catalog for a push/pull.
func (d *delegate) LocalState(bool) []byte {
	d.n.mu.Lock()
	defer d.n.mu.Unlock()
	return encodeState(d.n.mu.view.Members(), d.n.mu.catalog.Entries())
}

// MergeRemoteState merges another node's push/pull state. memberlist has
// already merged the remote's member list, so every member it believes
// alive has reached the view by now (see View.MergeRemote).
func (d *delegate) MergeRemoteState(buf []byte, join bool) {
	n := d.n
	members, entries, err := decodeState(buf)
	if err != nil {
		n.logger.Warn("membership: ignoring push/pull state", "join", join, "err", err)
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	viewChanged, viewErr := n.mu.view.MergeRemote(members)
	catalogChanged, catalogErr := n.mu.catalog.MergeAll(entries)
	n.mu.clock.Observe(n.mu.catalog.MaxVersion())
	if err := errors.Join(viewErr, catalogErr); err != nil {
		n.logger.Warn("membership: parts of a push/pull state refused", "join", join, "err", err)
	}
	if viewChanged {
		n.publishViewLocked()
	}
	if catalogChanged {
		n.publishCatalogLocked()
	}
}

// logBridge turns memberlist's log lines into structured logs, and the one
// line that reports a failed probe into EventSuspect: memberlist has no
// callback for suspicion, and this line is the only report of it
// ("Suspect <name> has failed, no acks received", memberlist v0.7.0
// state.go). TestCluster fails if a memberlist upgrade changes it.
type logBridge struct{ n *Node }

const (
	suspectLinePrefix = "Suspect "
	suspectLineSuffix = " has failed, no acks received"
)

// Write receives one log line per call (log.Logger writes each line in one
// call).
func (w logBridge) Write(p []byte) (int, error) {
	line := string(p)
	if len(line) > 0 && line[len(line)-1] == '\n' {
		line = line[:len(line)-1]
	}
	level, msg := parseMemberlistLine(line)
	w.n.logger.Log(context.Background(), level, msg, "component", "memberlist")
	if rest, ok := strings.CutPrefix(msg, "memberlist: "+suspectLinePrefix); ok {
		if name, ok := strings.CutSuffix(rest, suspectLineSuffix); ok {
			w.n.apply(Event{Kind: EventSuspect, Meta: Meta{ID: ring.NodeID(name)}})
		}
	}
	return len(p), nil
}

// parseMemberlistLine splits "[LEVEL] message" into an slog level and the
// message.
func parseMemberlistLine(line string) (slog.Level, string) {
	levels := []struct {
		tag   string
		level slog.Level
	}{
		{"[DEBUG] ", slog.LevelDebug},
		{"[INFO] ", slog.LevelInfo},
		{"[WARN] ", slog.LevelWarn},
		{"[ERR] ", slog.LevelError},
		{"[ERROR] ", slog.LevelError},
	}
	for _, l := range levels {
		if msg, ok := strings.CutPrefix(line, l.tag); ok {
			return l.level, msg
		}
	}
	return slog.LevelInfo, line
}
