package client

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/errs"
)

// Failover: a client dialed with WithEndpoints or WithFailover sends what
// goes to "the endpoint" (commits, listings, keyspace and cluster calls,
// fetches of the ring, outcome resolution, reads routing does not send
// elsewhere) to its current endpoint, and moves to the next one it knows
// when that one cannot be reached. Each call is told apart by how far it
// got, as gRPC reports it to the client's stats handler:
//
//   - not sent: no stream of the call was opened on a connection (the
//     connection was refused, or is down and waiting to dial again), but
//     for attempts gRPC then retried transparently, which it does only
//     when the node did not process them (a stream whose connection
//     closed before its headers were written, or that the node refused).
//     The node never saw the request, so the call goes to the next
//     endpoint, whatever it is.
//   - sent, then the connection broke before any answer: the node may have
//     run the request. Calls that change nothing (reads, stats, listings,
//     keyspace and cluster descriptions, ring fetches, resolutions, health
//     checks) go to the next endpoint; any other call (a commit, a
//     keyspace's creation or removal, a ring change, a method the client
//     does not know) fails with the error as it is, so that a commit's
//     outcome is learnt by resolution under its ID (resolve.go), never
//     guessed by sending it again.
//   - answered: the node's answer, an error included, is the call's.
//
// The endpoint that answers becomes the current one. When no endpoint
// could be reached and none was sent a call that changes something, the
// call fails with ErrUnavailable, and a commit's error is Refused: it
// changed nothing, and never will.

// WithEndpoints gives the client more endpoints (host:port), tried in
// order after the one given to Dial when the current one cannot be
// reached; see WithFailover for the guarantees, which are the same.
func WithEndpoints(addrs ...string) Option {
	return func(o *options) {
		for _, a := range addrs {
			if a = strings.TrimSpace(a); a != "" {
				o.endpoints = append(o.endpoints, a)
			}
		}
		o.failover = true
	}
}

// WithFailover makes the client send what goes to its endpoint (commits,
// listings, keyspace and cluster calls, fetches of the ring, reads it does
// not route) to another node when the endpoint cannot be reached: to the
// endpoints of WithEndpoints, in order, then to the ring's members, those
// serving reads first, in node-ID order. The client learns the ring from
// its endpoint soon after Dial and keeps it current (see routing.go), so it
// needs routing: with WithoutRouting only the endpoints of WithEndpoints
// are tried. The node that answers stays the endpoint until it too cannot
// be reached; Ready and NodeUsage describe it.
//
// Guarantees. A request goes to another node only when the one it was
// sent to certainly did not get it (the connection was refused or down
// before the request was written to it), or when it changes nothing (a
// read, a stat, a listing, a description, a ring fetch, a resolution),
// which may be sent again at no risk. A commit that was sent and whose
// answer was lost is never sent again as it is: Commit learns its outcome
// from the cluster under its ID as without failover (see Commit and
// ErrOutcomeUnknown) and sends it anew, under a new ID, only once the
// cluster found it did not take effect and never will. So a commit takes
// effect at most once, an error wrapping ErrOutcomeUnknown still means the
// commit may or may not have taken effect, and an error that is Refused
// still means it certainly did not. A commit no node could be reached for
// fails at once, Refused.
//
// Not covered: a node that is down while its connection stays open (a
// network partition rather than a dead process) holds a call until the
// call's deadline, as without failover. Failing over moves the client's
// calls, not the cluster's: until the other nodes find the dead one dead
// (a few seconds), the reads they forward to it and the commits whose
// chains hold it fail with ErrUnavailable, and the data only it keeps is
// unavailable until it is back.
func WithFailover() Option {
	return func(o *options) {
		o.failover = true
		o.ringFailover = true
	}
}

// resendable are the methods a node changes nothing for, or nothing a
// second call would change again: a call of one that may have reached a
// node whose answer was lost can go to another.
var resendable = map[string]bool{
	tyrpb.Tyr_ListKeyspaces_FullMethodName: true,
	tyrpb.Tyr_GetKeyspace_FullMethodName:   true,
	tyrpb.Tyr_Read_FullMethodName:          true,
	tyrpb.Tyr_Stat_FullMethodName:          true,
	tyrpb.Tyr_List_FullMethodName:          true,
	tyrpb.Tyr_ClusterStatus_FullMethodName: true,
	tyrpb.Tyr_Ring_FullMethodName:          true,
	tyrpb.Tyr_Resolve_FullMethodName:       true,
	tyrpb.Tyr_NodeUsage_FullMethodName:     true,
	tyrpb.Tyr_FsFetch_FullMethodName:       true,
	// Dropping copies of permissions twice drops them once.
	tyrpb.Tyr_FsInvalidate_FullMethodName: true,
	healthpb.Health_Check_FullMethodName:  true,
}

// callProgress is how far one call to one node got, as gRPC's stats
// handler tells (callStats).
type callProgress struct {
	// sent: a stream of the call was opened on a connection, so its
	// request may have reached the node.
	sent atomic.Bool
	// answered: the node answered (headers or trailers).
	answered atomic.Bool
}

type progressKey struct{}

// callStats is the stats handler of a failing-over client's connections:
// it records on the callProgress in a call's context how far the call got.
type callStats struct{}

func (callStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (callStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (callStats) HandleConn(context.Context, stats.ConnStats)                       {}

func (callStats) HandleRPC(ctx context.Context, s stats.RPCStats) {
	p, ok := ctx.Value(progressKey{}).(*callProgress)
	if !ok {
		return
	}
	switch s := s.(type) {
	case *stats.Begin:
		// gRPC retries a call transparently only when no earlier
		// attempt reached the node's application (its stream was never
		// written, or the node refused it unprocessed), so what those
		// attempts queued was not received: the call counts as sent only
		// if this attempt sends it.
		if s.IsTransparentRetryAttempt {
			p.sent.Store(false)
		}
	case *stats.OutHeader, *stats.OutPayload:
		p.sent.Store(true)
	case *stats.InHeader, *stats.InTrailer, *stats.InPayload:
		p.sent.Store(true)
		p.answered.Store(true)
	}
}

// failover is the connection of a failing-over client's endpoint calls: a
// grpc.ClientConnInterface that sends each call to the current endpoint,
// and on to the next as the package comment above says.
type failover struct {
	primary string
	extra   []string
	// router gives the ring's members when ringMembers; nil without
	// routing.
	router      *router
	ringMembers bool
	dial        func(addr string) (*grpc.ClientConn, error)

	mu     sync.Mutex
	cur    string
	conns  map[string]*grpc.ClientConn // primary's is the Client's
	closed bool
}

func newFailover(primary string, primaryConn *grpc.ClientConn, o options, r *router,
	dial func(addr string) (*grpc.ClientConn, error)) *failover {
	return &failover{primary: primary, extra: o.endpoints, router: r, ringMembers: o.ringFailover, dial: dial,
		cur: primary, conns: map[string]*grpc.ClientConn{primary: primaryConn}}
}

// conn returns the connection to addr, opening it on first use.
func (f *failover) conn(addr string) (*grpc.ClientConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, status.Error(codes.Canceled, "tyr: client closed")
	}
	if c, ok := f.conns[addr]; ok {
		return c, nil
	}
	c, err := f.dial(addr)
	if err != nil {
		return nil, err
	}
	f.conns[addr] = c
	return c, nil
}

// down reports whether the connection to addr is known down: gRPC failed
// to connect and waits to try again, failing calls at once meanwhile.
func (f *failover) down(addr string) bool {
	f.mu.Lock()
	c := f.conns[addr]
	f.mu.Unlock()
	return c != nil && c.GetState() == connectivity.TransientFailure
}

// candidates returns the endpoints to try, in order: the current one, the
// configured ones, then the ring's members (those serving reads first),
// with the ones known down moved last.
func (f *failover) candidates() []string {
	f.mu.Lock()
	cur := f.cur
	f.mu.Unlock()
	seen := map[string]bool{}
	var up, down []string
	add := func(addr string) {
		if addr == "" || seen[addr] {
			return
		}
		seen[addr] = true
		if f.down(addr) {
			down = append(down, addr)
		} else {
			up = append(up, addr)
		}
	}
	add(cur)
	add(f.primary)
	for _, a := range f.extra {
		add(a)
	}
	if f.ringMembers && f.router != nil {
		// The copy the router has: fetching here would call back into
		// the failover.
		if t := f.router.table.Load(); t != nil {
			ids := slices.Sorted(maps.Keys(t.members))
			for _, serving := range []bool{true, false} {
				for _, id := range ids {
					if m := t.members[id]; m.reads == serving {
						add(m.addr)
					}
				}
			}
		}
	}
	return append(up, down...)
}

// current returns the address of the endpoint a call would go to first.
func (f *failover) current() string {
	f.mu.Lock()
	cur := f.cur
	f.mu.Unlock()
	if !f.down(cur) {
		return cur
	}
	return f.candidates()[0]
}

// settle makes addr, which answered, the current endpoint.
func (f *failover) settle(addr string) {
	f.mu.Lock()
	f.cur = addr
	f.mu.Unlock()
}

// Invoke sends a unary call to the current endpoint, and on to the next as
// the package comment above says.
func (f *failover) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	var tried []string
	var first error
	sent := false
	for _, addr := range f.candidates() {
		conn, err := f.conn(addr)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", addr, err))
			continue
		}
		p := new(callProgress)
		err = conn.Invoke(context.WithValue(ctx, progressKey{}, p), method, args, reply, opts...)
		code := status.Code(err)
		if err == nil || p.answered.Load() || (code != codes.Unavailable && code != codes.DeadlineExceeded && code != codes.Canceled) {
			f.settle(addr)
			return err
		}
		if code != codes.Unavailable || ctx.Err() != nil {
			return err
		}
		if p.sent.Load() {
			if !resendable[method] {
				// The answer was lost: the caller learns the outcome.
				return err
			}
			sent = true
		}
		if first == nil {
			first = err
		}
		tried = append(tried, fmt.Sprintf("%s: %s", addr, status.Convert(err).Message()))
	}
	if !sent {
		// No node got the call: it changed nothing, and never will.
		for _, o := range opts {
			if t, ok := o.(grpc.TrailerCallOption); ok {
				*t.TrailerAddr = metadata.Pairs(errs.RefusedTrailer, "1")
			}
		}
	}
	if len(tried) == 1 && first != nil {
		return first
	}
	return status.Error(codes.Unavailable, fmt.Sprintf("no endpoint could be reached (%s)", strings.Join(tried, "; ")))
}

// NewStream opens a stream on the current endpoint. The API's calls are
// unary; a stream does not fail over.
func (f *failover) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	conn, err := f.conn(f.current())
	if err != nil {
		return nil, err
	}
	return conn.NewStream(ctx, desc, method, opts...)
}

// close closes the connections the failover opened; the primary's is the
// Client's to close.
func (f *failover) close() {
	f.mu.Lock()
	f.closed = true
	conns := f.conns
	f.conns = nil
	f.mu.Unlock()
	for addr, c := range conns {
		if addr != f.primary {
			_ = c.Close()
		}
	}
}

// dataEndpoint is the address reads that routing does not send elsewhere
// go to over the data path: the current endpoint.
func (c *Client) dataEndpoint() string {
	if c.fo != nil {
		return c.fo.current()
	}
	return c.endpointAddr
}

// Endpoint returns the address of the node the client sends what is not
// routed to: the endpoint given to Dial or, with failover, the one it
// moved to.
func (c *Client) Endpoint() string { return c.dataEndpoint() }

var _ grpc.ClientConnInterface = (*failover)(nil)
