package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/frame"
	"github.com/tyrstore/tyr/internal/ring"
)

// Routing: a client of a cluster fetches the placement ring from its
// endpoint (the Ring RPC), builds the same ring the servers build, and
// sends each read and stat straight to the node that serves the blob: its
// first version manager, in node-ID order, that is alive and not catching
// up. A read therefore costs one server hop instead of two. Every reply
// carries the answering node's ring and members IDs in its header; when
// they differ from the client's copy, the client fetches the ring again in
// the background. A copy that is out of date costs a hop, not correctness:
// a node that does not serve a blob forwards the read to the one that
// does. A read that a target answers with UNAVAILABLE or a deadline of its
// own is sent once more through the endpoint.
//
// Commits, listings and keyspace calls go to the endpoint. A one-member
// ring (a single server), a server without the Ring RPC and a request
// marked "tyr-forwarded" by the caller (meant for the endpoint's own
// replica) are not routed either.

// Header keys the servers set (internal/server/routing.go).
const (
	ringHeader    = "tyr-ring"
	membersHeader = "tyr-members"
	forwardedKey  = "tyr-forwarded"
)

// Timings of routing.
const (
	// ringRefreshMin is the least time between two fetches of the ring
	// caused by replies that disagree with the client's copy, so that two
	// servers whose views briefly differ cannot make the client fetch in a
	// loop.
	ringRefreshMin = 200 * time.Millisecond
	// ringRetryAfter is how long reads go to the endpoint after a fetch of
	// the ring failed, before the client tries again.
	ringRetryAfter = 5 * time.Second
	// ringFetchTimeout bounds one fetch of the ring.
	ringFetchTimeout = 5 * time.Second
	// connDrainDelay is how long a connection to an address that left the
	// ring stays open for the requests still using it.
	connDrainDelay = 30 * time.Second
)

// Option configures Dial.
type Option func(*options)

type options struct {
	noRouting  bool
	noDataPath bool
	dialer     func(ctx context.Context, addr string) (net.Conn, error)
	// failover: endpoint calls move to another node when the endpoint
	// cannot be reached (failover.go): to endpoints, then, with
	// ringFailover, to the ring's members.
	failover     bool
	ringFailover bool
	endpoints    []string
}

// WithDialer makes the client open its connections (to the endpoint and to
// the nodes it routes to) with dial instead of a plain TCP dial: through a
// proxy, say, or from inside a network namespace.
func WithDialer(dial func(ctx context.Context, addr string) (net.Conn, error)) Option {
	return func(o *options) { o.dialer = dial }
}

// WithoutRouting makes the client send every request to its endpoint,
// which forwards the reads it does not serve itself.
func WithoutRouting() Option {
	return func(o *options) { o.noRouting = true }
}

// WithoutDataPath makes the client send reads over gRPC instead of the
// data path (data.go).
func WithoutDataPath() Option {
	return func(o *options) { o.noDataPath = true }
}

// routeMember is one ring member as the client routes to it.
type routeMember struct {
	addr string
	// reads: the member is alive and not catching up.
	reads bool
}

// routeTable is one fetched ring. It is immutable.
type routeTable struct {
	ringID, membersID uint64
	// self is the member that answered, reached through the endpoint.
	self ring.NodeID
	// ring is nil when fewer than two members are in the ring: then the
	// endpoint serves everything.
	ring        *ring.Ring
	members     map[ring.NodeID]routeMember
	replication map[string]int
	chunkSize   map[string]uint64 // keyspace -> chunk size
}

// newRouteTable builds the ring of resp: every member not left, with its
// weight, in the config resp gives, at epoch resp.RingId.
func newRouteTable(resp *tyrpb.RingResponse) (*routeTable, error) {
	t := &routeTable{
		ringID: resp.GetRingId(), membersID: resp.GetMembersId(), self: ring.NodeID(resp.GetSelf()),
		members: make(map[ring.NodeID]routeMember, len(resp.GetMembers())), replication: map[string]int{}, chunkSize: map[string]uint64{},
	}
	var nodes []ring.Node
	for _, m := range resp.GetMembers() {
		if m.GetState() == StateLeft {
			continue
		}
		id := ring.NodeID(m.GetId())
		nodes = append(nodes, ring.Node{ID: id, Weight: m.GetWeight()})
		t.members[id] = routeMember{addr: m.GetRpcAddr(),
			reads: m.GetState() == StateAlive && !m.GetCatchingUp() && m.GetRpcAddr() != ""}
	}
	for _, k := range resp.GetKeyspaces() {
		t.replication[k.GetName()] = int(k.GetReplication())
		t.chunkSize[k.GetName()] = k.GetChunkSize()
	}
	if len(nodes) < 2 {
		return t, nil
	}
	cfg := ring.Config{VirtualNodesPerWeight: resp.GetVirtualNodesPerWeight(), TokensMax: resp.GetTokensMax(),
		HashVersion: resp.GetHashVersion()}
	r, err := ring.New(cfg, t.ringID, nodes)
	if err != nil {
		return nil, fmt.Errorf("tyr: build the ring of %d members: %w", len(nodes), err)
	}
	t.ring = r
	return t, nil
}

// target returns the member that serves a read of key in keyspace ks: for
// a direct read of [off, off+n) within one chunk, the chunk's first replica
// in node-ID order that serves reads; for any other, the blob's first such
// version manager (the replicas of chunk 0). ok is false when the table
// cannot tell (no ring, an unknown keyspace, a replication above the
// ring's size, no replica that serves reads).
func (t *routeTable) target(ks, key string, rd readShape) (id ring.NodeID, ok bool) {
	rf, known := t.replication[ks]
	if t.ring == nil || !known || rf < 1 || rf > t.ring.Len() {
		return "", false
	}
	chunk := uint64(0)
	if cs := t.chunkSize[ks]; rd.direct && cs != 0 && (rd.n == 0 || rd.off/cs == (rd.off+rd.n-1)/cs) {
		chunk = rd.off / cs
	}
	reps, err := t.ring.Replicas(ring.KeyspaceSeed(ks), key, chunk, rf)
	if err != nil {
		return "", false
	}
	return ring.ReadTarget(reps, func(id ring.NodeID) bool { return t.members[id].reads })
}

// readShape is what routing needs of a request: a direct read's range, or
// nothing (direct false) for requests a version manager serves.
type readShape struct {
	direct bool
	off, n uint64
}

// router keeps the client's copy of the ring and one connection per
// member it sends reads to.
type router struct {
	// endpoint is the client's configured server.
	endpoint tyrpb.TyrClient
	dial     func(addr string) (*grpc.ClientConn, error)
	table    atomic.Pointer[routeTable]
	// fetchMu serializes fetches of the ring.
	fetchMu sync.Mutex
	wg      sync.WaitGroup

	mu         sync.Mutex
	conns      map[string]*grpc.ClientConn // by RPC address
	draining   map[*grpc.ClientConn]*time.Timer
	refreshing bool
	lastFetch  time.Time
	retryAt    time.Time // no fetch before this, after a failed one
	disabled   bool      // the server has no Ring RPC
	closed     bool
}

func newRouter(dial func(addr string) (*grpc.ClientConn, error)) *router {
	return &router{dial: dial, conns: map[string]*grpc.ClientConn{}, draining: map[*grpc.ClientConn]*time.Timer{}}
}

// intercept is the client interceptor of every connection: it reads the
// ring and members IDs of each reply.
func (r *router) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var md metadata.MD
	err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Header(&md))...)
	r.observe(md)
	return err
}

// observe starts a fetch of the ring in the background if a reply's header
// names another ring or other members than the client's copy.
func (r *router) observe(md metadata.MD) {
	rings, members := md.Get(ringHeader), md.Get(membersHeader)
	if len(rings) != 1 || len(members) != 1 {
		return
	}
	ringID, err1 := strconv.ParseUint(rings[0], 16, 64)
	membersID, err2 := strconv.ParseUint(members[0], 16, 64)
	if err1 == nil && err2 == nil {
		r.observeIDs(ringID, membersID)
	}
}

// observeIDs starts a fetch of the ring in the background if a reply
// names another ring or other members than the client's copy.
func (r *router) observeIDs(ringID, membersID uint64) {
	if r == nil {
		return
	}
	if t := r.table.Load(); t != nil && (ringID != t.ringID || membersID != t.membersID) {
		r.refresh()
	}
}

// refresh fetches the ring in the background, unless a fetch is running
// or the last one was less than ringRefreshMin ago.
func (r *router) refresh() {
	r.mu.Lock()
	if r.refreshing || r.closed || r.disabled || time.Since(r.lastFetch) < ringRefreshMin {
		r.mu.Unlock()
		return
	}
	r.refreshing = true
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		r.fetchMu.Lock()
		r.fetch(context.Background())
		r.fetchMu.Unlock()
		r.mu.Lock()
		r.refreshing = false
		r.mu.Unlock()
	}()
}

// current returns the client's copy of the ring, fetching it first if
// there is none, or nil when reads go to the endpoint.
func (r *router) current(ctx context.Context) *routeTable {
	if t := r.table.Load(); t != nil {
		return t
	}
	if !r.mayFetch() {
		return nil
	}
	r.fetchMu.Lock()
	defer r.fetchMu.Unlock()
	if t := r.table.Load(); t != nil {
		return t
	}
	if !r.mayFetch() {
		return nil
	}
	r.fetch(ctx)
	return r.table.Load()
}

func (r *router) mayFetch() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.disabled && !r.closed && !time.Now().Before(r.retryAt)
}

// fetch asks the endpoint for the ring and installs it. The caller holds
// fetchMu.
func (r *router) fetch(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, ringFetchTimeout)
	defer cancel()
	resp, err := r.endpoint.Ring(ctx, &tyrpb.RingRequest{})
	var t *routeTable
	var buildErr error
	if err == nil {
		t, buildErr = newRouteTable(resp)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastFetch = time.Now()
	switch {
	case r.closed:
	case err == nil && buildErr == nil:
		r.install(t)
	case buildErr != nil:
		// A ring this client cannot build (a newer placement hash, say):
		// reads go to the endpoint.
		r.retryAt = r.lastFetch.Add(ringRetryAfter)
		r.install(nil)
	case status.Code(err) == codes.Unimplemented:
		r.disabled = true
		r.install(nil)
	case ctx.Err() == nil:
		// The endpoint failed: the copy, if any, stays in use, since the
		// other members may still answer.
		r.retryAt = r.lastFetch.Add(ringRetryAfter)
	}
}

// install makes t the client's copy and closes, after connDrainDelay, the
// connections to addresses t does not route to. The caller holds mu.
func (r *router) install(t *routeTable) {
	r.table.Store(t)
	keep := map[string]bool{}
	if t != nil && t.ring != nil {
		for _, m := range t.members {
			keep[m.addr] = true
		}
	}
	for addr, conn := range r.conns {
		if !keep[addr] {
			delete(r.conns, addr)
			r.draining[conn] = time.AfterFunc(connDrainDelay, func() {
				r.mu.Lock()
				delete(r.draining, conn)
				r.mu.Unlock()
				_ = conn.Close()
			})
		}
	}
}

// conn returns the connection to addr, opening it on first use.
func (r *router) conn(addr string) (*grpc.ClientConn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, errors.New("tyr: client closed")
	}
	if c, ok := r.conns[addr]; ok {
		return c, nil
	}
	c, err := r.dial(addr)
	if err != nil {
		return nil, err
	}
	r.conns[addr] = c
	return c, nil
}

// pick returns the client for the node that serves reads of key, or nil
// to send the request to the endpoint.
func (r *router) pick(ctx context.Context, ks, key string, rd readShape) tyrpb.TyrClient {
	addr := r.pickAddr(ctx, ks, key, rd)
	if addr == "" {
		return nil
	}
	conn, err := r.conn(addr)
	if err != nil {
		return nil
	}
	return tyrpb.NewTyrClient(conn)
}

// pickAddr returns the address of the node that serves reads of key, or
// "" to send the request to the endpoint.
func (r *router) pickAddr(ctx context.Context, ks, key string, rd readShape) string {
	if r == nil || forwardedCall(ctx) {
		return ""
	}
	t := r.current(ctx)
	if t == nil {
		return ""
	}
	if _, known := t.replication[ks]; !known && t.ring != nil {
		r.refresh() // a keyspace created since the fetch
	}
	id, ok := t.target(ks, key, rd)
	if !ok || id == t.self {
		return ""
	}
	return t.members[id].addr
}

// forwardedCall reports whether the caller marked ctx "tyr-forwarded".
func forwardedCall(ctx context.Context) bool {
	md, ok := metadata.FromOutgoingContext(ctx)
	return ok && len(md.Get(forwardedKey)) > 0
}

// close closes every connection the router opened and waits for a
// background fetch. The endpoint's connection is the client's to close,
// first, so that a fetch in flight ends.
func (r *router) close() {
	r.mu.Lock()
	r.closed = true
	conns := slices.Collect(maps.Values(r.conns))
	for conn, timer := range r.draining {
		if timer.Stop() {
			conns = append(conns, conn)
		}
	}
	r.conns, r.draining = nil, nil
	r.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	r.wg.Wait()
}

// retryable reports whether a routed request's error calls for another
// try through the endpoint: the target was unreachable or timed out while
// the caller still waits.
func retryable(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	code := status.Code(err)
	return code == codes.Unavailable || code == codes.DeadlineExceeded
}

// routed calls rpc on the node that serves reads of key, or on the
// endpoint; a target that is unreachable gets one more try through the
// endpoint, which forwards.
func routed[Req, Resp any](ctx context.Context, c *Client, ks, key string, rd readShape, req Req,
	rpc func(tyrpb.TyrClient, context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, error) {
	if target := c.router.pick(ctx, ks, key, rd); target != nil {
		resp, err := rpc(target, ctx, req)
		if !retryable(ctx, err) {
			return resp, err
		}
		c.router.refresh()
	}
	return rpc(c.api, ctx, req)
}

// readRPC sends a read over the data path (data.go) to the node that
// serves it, or to the endpoint; a read the data path cannot deliver, or
// one marked "tyr-forwarded", goes over gRPC.
func (c *Client) readRPC(ctx context.Context, req *tyrpb.ReadRequest) (*tyrpb.ReadResponse, error) {
	rd := readShape{direct: req.GetVersion() == 0 && !req.GetConsistent(), off: req.GetOffset(), n: req.GetLength()}
	return dataFirst(ctx, c, string(req.GetKeyspace()), string(req.GetKey()), rd, req, (*dataPath).read, tyrpb.TyrClient.Read)
}

// fsFetchRPC sends a TýrFS fetch as readRPC sends a read, its answer read
// into buf when it fits there and comes over the data path.
func (c *Client) fsFetchRPC(ctx context.Context, req *tyrpb.FsFetchRequest, buf []byte) (*tyrpb.FsFetchResponse, error) {
	rd := readShape{direct: true, n: req.GetLength()}
	fetch := func(d *dataPath, ctx context.Context, addr string, req *tyrpb.FsFetchRequest) (*tyrpb.FsFetchResponse, frame.Header, error) {
		return d.fetch(ctx, addr, req, buf)
	}
	return dataFirst(ctx, c, string(req.GetKeyspace()), string(req.GetPath()), rd, req, fetch, tyrpb.TyrClient.FsFetch)
}

// dataFirst sends req over the data path (data.go) to the node that
// serves reads of key, or to the endpoint; a request the data path cannot
// deliver, or one marked "tyr-forwarded", goes over gRPC.
func dataFirst[Req, Resp any](ctx context.Context, c *Client, ks, key string, rd readShape, req Req,
	data func(*dataPath, context.Context, string, Req) (Resp, frame.Header, error),
	rpc func(tyrpb.TyrClient, context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, error) {
	if c.data != nil && !forwardedCall(ctx) {
		addr := c.router.pickAddr(ctx, ks, key, rd)
		routedRead := addr != ""
		if !routedRead {
			addr = c.dataEndpoint()
		}
		resp, h, err := data(c.data, ctx, addr, req)
		if h.Flags&frame.FlagRouting != 0 {
			c.router.observeIDs(h.RingID, h.MembersID)
		}
		switch {
		case errors.Is(err, errNoDataPath):
		case retryable(ctx, err):
			if routedRead {
				c.router.refresh()
			}
		default:
			return resp, err
		}
	}
	return routed(ctx, c, ks, key, rd, req, rpc)
}

func (c *Client) statRPC(ctx context.Context, req *tyrpb.StatRequest) (*tyrpb.BlobInfo, error) {
	return routed(ctx, c, string(req.GetKeyspace()), string(req.GetKey()), readShape{}, req, tyrpb.TyrClient.Stat)
}

// members returns a client for every other member of the ring the client
// knows, fetching the ring first if it has none; nil without routing.
func (r *router) members(ctx context.Context) []tyrpb.TyrClient {
	if r == nil {
		return nil
	}
	t := r.current(ctx)
	if t == nil || t.ring == nil {
		return nil
	}
	var out []tyrpb.TyrClient
	for _, id := range slices.Sorted(maps.Keys(t.members)) {
		m := t.members[id]
		if m.addr == "" {
			continue
		}
		if conn, err := r.conn(m.addr); err == nil {
			out = append(out, tyrpb.NewTyrClient(conn))
		}
	}
	return out
}
