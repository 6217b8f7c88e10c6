package client

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/membership"
	"github.com/tyrstore/tyr/internal/ring"
)

// routingView builds a membership view of the given members, all joined,
// then applies the events of each member's state.
func routingView(t *testing.T, members []testMember) *membership.View {
	t.Helper()
	var v membership.View
	for _, m := range members {
		meta := membership.Meta{ID: ring.NodeID(m.id), RPCAddr: "127.0.0.1:" + m.id, Weight: m.weight,
			StartedUnixNano: 1, CatchingUp: m.catchingUp}
		if _, err := v.Apply(membership.Event{Kind: membership.EventJoin, Meta: meta}); err != nil {
			t.Fatal(err)
		}
		var kind membership.EventKind
		switch m.state {
		case membership.StateAlive:
			continue
		case membership.StateSuspect:
			kind = membership.EventSuspect
		case membership.StateDead:
			kind = membership.EventDead
		case membership.StateLeft:
			kind = membership.EventLeave
		}
		if _, err := v.Apply(membership.Event{Kind: kind, Meta: membership.Meta{ID: ring.NodeID(m.id)}}); err != nil {
			t.Fatal(err)
		}
	}
	return &v
}

type testMember struct {
	id         string
	weight     uint32
	state      membership.State
	catchingUp bool
}

// ringOf is what a server answers Ring with (server.ringResponse) for v.
func ringOf(v *membership.View, self string, keyspaces map[string]uint32) *tyrpb.RingResponse {
	cfg := ring.Config{}.WithDefaults()
	resp := &tyrpb.RingResponse{Self: self, RingId: uint64(v.RingID()), MembersId: 1,
		VirtualNodesPerWeight: cfg.VirtualNodesPerWeight, TokensMax: cfg.TokensMax, HashVersion: cfg.HashVersion}
	for _, m := range v.Members() {
		resp.Members = append(resp.Members, &tyrpb.RingMember{Id: string(m.Meta.ID), RpcAddr: m.Meta.RPCAddr,
			Weight: m.Meta.Weight, State: m.State.String(), CatchingUp: m.Meta.CatchingUp})
	}
	for name, rf := range keyspaces {
		resp.Keyspaces = append(resp.Keyspaces, &tyrpb.RingKeyspace{Name: name, Replication: rf})
	}
	return resp
}

// serverReadTarget is node.ReadTarget over the server's view v and the
// ring r it builds: the version managers of key, in node-ID order, the first that
// is alive (membership.StateAlive, as server.Cluster.Alive) and not
// catching up.
func serverReadTarget(t *testing.T, v *membership.View, r *ring.Ring, ks string, rf int, key string) (ring.NodeID, []ring.NodeID, bool) {
	t.Helper()
	vms, err := r.VersionManagers(ring.KeyspaceSeed(ks), key, rf)
	if err != nil {
		t.Fatal(err)
	}
	sorted := slices.Clone(vms)
	slices.Sort(sorted)
	for _, id := range sorted {
		m, _ := v.Member(id)
		if m.State == membership.StateAlive && !m.Meta.CatchingUp {
			return id, vms, true
		}
	}
	return "", vms, false
}

// The client's read target of every blob is the server's, for members of
// several weights and in every state: the client builds the same ring from
// the member list on the wire and skips the same members.
func TestRouteTargetMatchesServer(t *testing.T) {
	alive := membership.StateAlive
	cases := map[string][]testMember{
		"all alive": {{"n1", 1, alive, false}, {"n2", 2, alive, false}, {"n3", 1, alive, false}, {"n4", 3, alive, false}},
		"mixed": {{"n1", 1, membership.StateDead, false}, {"n2", 2, alive, true}, {"n3", 1, membership.StateSuspect, false},
			{"n4", 3, alive, false}, {"n5", 1, membership.StateLeft, false}, {"n6", 2, alive, false}},
		"one serves": {{"a", 1, membership.StateDead, false}, {"b", 1, alive, true}, {"c", 1, alive, false}},
	}
	keyspaces := map[string]uint32{"one": 1, "two": 2, "three": 3}
	for name, members := range cases {
		t.Run(name, func(t *testing.T) {
			v := routingView(t, members)
			table, err := newRouteTable(ringOf(v, members[0].id, keyspaces))
			if err != nil {
				t.Fatal(err)
			}
			if table.ring.Epoch() != uint64(v.RingID()) {
				t.Fatalf("ring epoch %x, want the view's ring ID %s", table.ring.Epoch(), v.RingID())
			}
			serverRing, err := v.Ring(ring.Config{})
			if err != nil {
				t.Fatal(err)
			}
			serving := 0
			for _, m := range members {
				if m.state == alive && !m.catchingUp {
					serving++
				}
			}
			targets := map[ring.NodeID]int{}
			skipped := 0
			for ks, rf := range keyspaces {
				for i := range 2000 {
					key := fmt.Sprintf("blob/%d", i)
					want, vms, wantOK := serverReadTarget(t, v, serverRing, ks, int(rf), key)
					got, gotOK := table.target(ks, key, readShape{})
					if got != want || gotOK != wantOK {
						t.Fatalf("%s/%s: client target %q (%v), server %q (%v); version managers %v",
							ks, key, got, gotOK, want, wantOK, vms)
					}
					clientVMs, err := table.ring.VersionManagers(ring.KeyspaceSeed(ks), key, int(rf))
					if err != nil || !slices.Equal(clientVMs, vms) {
						t.Fatalf("%s/%s: client version managers %v (%v), server %v", ks, key, clientVMs, err, vms)
					}
					if wantOK {
						targets[want]++
						if want != slices.Min(vms) {
							skipped++
						}
					}
				}
			}
			if len(targets) != serving {
				t.Errorf("reads go to %v, not to each of the %d members that serve reads", targets, serving)
			}
			if name != "all alive" && skipped == 0 {
				t.Errorf("no read skipped a version manager that does not serve reads")
			}
			if name == "all alive" && skipped != 0 {
				t.Errorf("%d reads skipped a member although every member serves reads", skipped)
			}
		})
	}
}

// Without a ring to place by, or for a keyspace the client does not know
// or cannot place, reads go to the endpoint.
func TestRouteTargetFallsBack(t *testing.T) {
	alive := membership.StateAlive
	single := routingView(t, []testMember{{"solo", 1, alive, false}})
	table, err := newRouteTable(ringOf(single, "solo", map[string]uint32{"ks": 1}))
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := table.target("ks", "k", readShape{}); ok {
		t.Errorf("one-member ring routes to %q; want the endpoint", id)
	}
	pair := routingView(t, []testMember{{"a", 1, alive, false}, {"b", 1, alive, false}})
	table, err = newRouteTable(ringOf(pair, "a", map[string]uint32{"ks": 2, "wide": 3}))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := table.target("ks", "k", readShape{}); !ok {
		t.Errorf("a known keyspace on a two-member ring is not routed")
	}
	if id, ok := table.target("other", "k", readShape{}); ok {
		t.Errorf("unknown keyspace routed to %q", id)
	}
	if id, ok := table.target("wide", "k", readShape{}); ok {
		t.Errorf("replication above the ring's size routed to %q", id)
	}
	bad := ringOf(pair, "a", nil)
	bad.HashVersion = 99
	if _, err := newRouteTable(bad); err == nil {
		t.Errorf("a ring of an unknown hash version was built")
	}
}

// fakeNode is an in-process server that answers Ring from a shared state
// and reads with its own name, and counts what it serves.
type fakeNode struct {
	tyrpb.UnimplementedTyrServer
	name  string
	state *fakeState
	addr  string
	srv   *grpc.Server

	mu        sync.Mutex
	reads     int
	ringCalls int
}

// fakeState is the cluster the fake nodes describe.
type fakeState struct {
	mu   sync.Mutex
	ring *tyrpb.RingResponse
}

func (s *fakeState) set(r *tyrpb.RingResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ring = r
}

func (s *fakeState) get() *tyrpb.RingResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	return proto.Clone(s.ring).(*tyrpb.RingResponse)
}

func (f *fakeNode) header(ctx context.Context) {
	r := f.state.get()
	_ = grpc.SetHeader(ctx, metadata.Pairs(ringHeader, fmt.Sprintf("%016x", r.GetRingId()),
		membersHeader, fmt.Sprintf("%016x", r.GetMembersId())))
}

func (f *fakeNode) Ring(ctx context.Context, _ *tyrpb.RingRequest) (*tyrpb.RingResponse, error) {
	f.mu.Lock()
	f.ringCalls++
	f.mu.Unlock()
	f.header(ctx)
	r := f.state.get()
	r.Self = f.name
	return r, nil
}

func (f *fakeNode) Read(ctx context.Context, _ *tyrpb.ReadRequest) (*tyrpb.ReadResponse, error) {
	f.mu.Lock()
	f.reads++
	f.mu.Unlock()
	f.header(ctx)
	return &tyrpb.ReadResponse{Data: []byte(f.name)}, nil
}

func (f *fakeNode) counts() (reads, ringCalls int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads, f.ringCalls
}

// ringless hides a fake node's Ring, as a server of an older version.
type ringless struct {
	tyrpb.UnimplementedTyrServer
	f *fakeNode
}

func (r ringless) Read(ctx context.Context, req *tyrpb.ReadRequest) (*tyrpb.ReadResponse, error) {
	return r.f.Read(ctx, req)
}

func startFake(t *testing.T, name string, state *fakeState, withRing bool) *fakeNode {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeNode{name: name, state: state, addr: lis.Addr().String(), srv: grpc.NewServer()}
	if withRing {
		tyrpb.RegisterTyrServer(f.srv, f)
	} else {
		tyrpb.RegisterTyrServer(f.srv, ringless{f: f})
	}
	go func() { _ = f.srv.Serve(lis) }()
	t.Cleanup(f.srv.Stop)
	return f
}

// fakeRing describes members (id, address, catching up) all alive, with
// keyspace "ks" on both of two members.
func fakeRing(membersID uint64, members ...[3]string) *tyrpb.RingResponse {
	cfg := ring.Config{}.WithDefaults()
	r := &tyrpb.RingResponse{RingId: 7, MembersId: membersID, VirtualNodesPerWeight: cfg.VirtualNodesPerWeight,
		TokensMax: cfg.TokensMax, HashVersion: cfg.HashVersion,
		Keyspaces: []*tyrpb.RingKeyspace{{Name: "ks", Replication: uint32(min(2, len(members)))}}}
	for _, m := range members {
		r.Members = append(r.Members, &tyrpb.RingMember{Id: m[0], RpcAddr: m[1], Weight: 1, State: StateAlive,
			CatchingUp: m[2] == "catching up"})
	}
	return r
}

// A routing client reads from the read target, not its endpoint; follows
// the members' changes the replies' headers announce; honours the
// forwarded marker; and falls back to the endpoint when the target is
// gone.
func TestRouterFollowsHeaders(t *testing.T) {
	state := &fakeState{}
	endpoint := startFake(t, "endpoint", state, true)
	other := startFake(t, "other", state, true)
	// n1 sorts first, so with both members holding every blob it serves
	// every read while it may.
	state.set(fakeRing(1, [3]string{"n1", other.addr, ""}, [3]string{"n2", endpoint.addr, ""}))
	c, err := Dial(endpoint.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	readFrom := func(ctx context.Context) string {
		t.Helper()
		data, err := c.Read(ctx, "ks", "k", 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	eventually := func(want string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for readFrom(ctx) != want {
			if time.Now().After(deadline) {
				t.Fatalf("reads not served by %s within 5s", want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	if got := readFrom(ctx); got != "other" {
		t.Fatalf("read served by %s, want the read target", got)
	}
	if got := readFrom(metadata.AppendToOutgoingContext(ctx, forwardedKey, "1")); got != "endpoint" {
		t.Errorf("a read marked forwarded was served by %s, want the endpoint", got)
	}
	if reads, rings := endpoint.counts(); reads != 1 || rings != 1 {
		t.Errorf("endpoint served %d reads and %d ring fetches, want 1 and 1", reads, rings)
	}

	state.set(fakeRing(2, [3]string{"n1", other.addr, "catching up"}, [3]string{"n2", endpoint.addr, ""}))
	eventually("endpoint")
	state.set(fakeRing(3, [3]string{"n1", other.addr, ""}, [3]string{"n2", endpoint.addr, ""}))
	eventually("other")

	other.srv.Stop()
	if got := readFrom(ctx); got != "endpoint" {
		t.Errorf("with the target gone, read served by %s, want the endpoint", got)
	}
}

// A client of a single server, or of a server without the Ring RPC, sends
// every read to its endpoint, and asks for the ring once, not per read.
func TestRouterSingleServer(t *testing.T) {
	for _, withRing := range []bool{true, false} {
		state := &fakeState{}
		endpoint := startFake(t, "endpoint", state, withRing)
		state.set(fakeRing(1, [3]string{"solo", endpoint.addr, ""}))
		c, err := Dial(endpoint.addr)
		if err != nil {
			t.Fatal(err)
		}
		for range 5 {
			data, err := c.Read(context.Background(), "ks", "k", 0, 10)
			if err != nil || string(data) != "endpoint" {
				t.Fatalf("ring %v: read %q, %v", withRing, data, err)
			}
		}
		_ = c.Close()
		reads, rings := endpoint.counts()
		wantRings := 1
		if !withRing {
			wantRings = 0
		}
		if reads != 5 || rings != wantRings {
			t.Errorf("ring %v: %d reads and %d ring fetches served, want 5 and %d", withRing, reads, rings, wantRings)
		}
	}
}
