package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/tyrstore/tyr/api/peerpb"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/keyspace"
	"github.com/tyrstore/tyr/internal/limits"
	"github.com/tyrstore/tyr/internal/membership"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/storage"
	"github.com/tyrstore/tyr/internal/testseed"
	"github.com/tyrstore/tyr/internal/txn"
)

// fakeCluster is a fixed membership whose members' liveness a test sets.
type fakeCluster struct {
	self       ring.NodeID
	view       *membership.View
	dead       *sync.Map // ring.NodeID → true
	catchingUp *sync.Map // ring.NodeID → true, set by the member itself
	said       *catchUpSays
}

// catchUpSays records what each member said of its catch-up, in order.
type catchUpSays struct {
	mu  sync.Mutex
	log map[ring.NodeID][]bool
}

func (a *catchUpSays) of(id ring.NodeID) []bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.log[id])
}

func (c fakeCluster) Self() ring.NodeID      { return c.self }
func (c fakeCluster) View() *membership.View { return c.view }
func (c fakeCluster) RPCAddr(id ring.NodeID) (string, bool) {
	m, ok := c.view.Member(id)
	return m.Meta.RPCAddr, ok
}
func (c fakeCluster) Alive(id ring.NodeID) bool {
	_, dead := c.dead.Load(id)
	return !dead
}
func (c fakeCluster) CatchingUp(id ring.NodeID) bool {
	_, on := c.catchingUp.Load(id)
	return on
}
func (c fakeCluster) SetCatchingUp(on bool) error {
	if c.said != nil {
		c.said.mu.Lock()
		c.said.log[c.self] = append(c.said.log[c.self], on)
		c.said.mu.Unlock()
	}
	if on {
		c.catchingUp.Store(c.self, true)
	} else {
		c.catchingUp.Delete(c.self)
	}
	return nil
}

// network delivers Deliver calls between in-process nodes, losing each
// batch with probability loss.
type network struct {
	mu    sync.Mutex
	nodes map[string]*Node // by address
	rng   *rand.Rand
	loss  float64
	cut   map[string]bool // addresses nothing reaches
	// isolated holds addresses that reach nothing either.
	isolated map[string]bool
	calls    atomic.Int64
	// oversize counts Deliver calls larger than the transport takes
	// (limits.MessageBytesMax); they fail, as gRPC fails them.
	oversize atomic.Int64
	// perMiB, if set, is how long a Deliver call takes per MiB it
	// carries: a slow link (each sender's calls are one at a time). bytes
	// counts what Deliver calls carried.
	perMiB atomic.Int64 // a time.Duration
	bytes  atomic.Int64
}

// netConn is a connection of the in-process network, from the node at
// address from (empty: from outside the cluster).
type netConn struct {
	net  *network
	addr string
	from string
}

func (c netConn) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	if method == peerpb.Peer_Deliver_FullMethodName {
		_, err := c.deliver(ctx, args.(*peerpb.DeliverRequest))
		return err
	}
	n, err := c.reach()
	if err != nil {
		return err
	}
	var resp proto.Message
	switch method {
	case peerpb.Peer_Barrier_FullMethodName:
		resp, err = n.Barrier(ctx, args.(*peerpb.BarrierRequest))
	case peerpb.Peer_Versions_FullMethodName:
		resp, err = n.Versions(ctx, args.(*peerpb.VersionsRequest))
	case peerpb.Peer_Chunks_FullMethodName:
		resp, err = n.Chunks(ctx, args.(*peerpb.ChunksRequest))
	case peerpb.Peer_ReadChunks_FullMethodName:
		resp, err = n.ReadChunks(ctx, args.(*peerpb.ReadChunksRequest))
	case peerpb.Peer_Lease_FullMethodName:
		resp, err = n.Lease(ctx, args.(*peerpb.LeaseRequest))
	case peerpb.Peer_Revoke_FullMethodName:
		resp, err = n.Revoke(ctx, args.(*peerpb.RevokeRequest))
	case peerpb.Peer_Resolve_FullMethodName:
		resp, err = n.Resolve(ctx, args.(*peerpb.PeerResolveRequest))
	default:
		return fmt.Errorf("netConn: %s not supported", method)
	}
	if err != nil {
		return err
	}
	proto.Merge(reply.(proto.Message), resp)
	return nil
}

// reach returns the node at c's address unless the network cuts it off.
func (c netConn) reach() (*Node, error) {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	n := c.net.nodes[c.addr]
	if n == nil || c.net.cut[c.addr] || c.net.isolated[c.from] {
		return nil, errors.New("unreachable")
	}
	return n, nil
}

// NewStream: the peer protocol has no streams.
func (c netConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, errors.New("netConn: no streams")
}

func (c netConn) deliver(ctx context.Context, req *peerpb.DeliverRequest) (*peerpb.DeliverResponse, error) {
	c.net.calls.Add(1)
	size := proto.Size(req)
	c.net.bytes.Add(int64(size))
	if d := time.Duration(c.net.perMiB.Load()); d > 0 {
		time.Sleep(d * time.Duration(size) / (1 << 20))
	}
	if size > limits.MessageBytesMax {
		c.net.oversize.Add(1)
		return nil, errors.New("message larger than the transport's limit")
	}
	c.net.mu.Lock()
	lost := c.net.rng.Float64() < c.net.loss || c.net.cut[c.addr] || c.net.isolated[c.from]
	n := c.net.nodes[c.addr]
	c.net.mu.Unlock()
	if lost || n == nil {
		return nil, errors.New("lost")
	}
	return n.Deliver(ctx, req)
}

type testCluster struct {
	nodes      []*Node
	engines    []*storage.Engine
	net        *network
	dead       *sync.Map
	catchingUp *sync.Map
	said       *catchUpSays
	rf         int // replicas of each chunk
}

const testKeyspace = "nodes"

func startCluster(t testing.TB, size int, loss float64, seed uint64) *testCluster {
	t.Helper()
	return startClusterRF(t, size, size, loss, seed)
}

// startClusterRF is startCluster with rf replicas of each chunk.
func startClusterRF(t testing.TB, size, rf int, loss float64, seed uint64) *testCluster {
	t.Helper()
	return startClusterWith(t, size, rf, loss, seed, -1)
}

// startClusterWith is startClusterRF with read leases of leaseDuration
// (negative: off, as the instant failure detection of the fake cluster
// wants).
func startClusterWith(t testing.TB, size, rf int, loss float64, seed uint64, leaseDuration time.Duration) *testCluster {
	t.Helper()
	view := &membership.View{}
	for i := range size {
		id := ring.NodeID(fmt.Sprintf("n%d", i+1))
		if _, err := view.Apply(membership.Event{Kind: membership.EventJoin, Meta: membership.Meta{
			ID: id, RPCAddr: "addr-" + string(id), Weight: 1, StartedUnixNano: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	tc := &testCluster{net: &network{nodes: map[string]*Node{}, rng: rand.New(rand.NewPCG(seed, 1)), loss: loss,
		cut: map[string]bool{}, isolated: map[string]bool{}},
		dead: &sync.Map{}, catchingUp: &sync.Map{}, said: &catchUpSays{log: map[ring.NodeID][]bool{}}, rf: rf}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for i := range size {
		id := ring.NodeID(fmt.Sprintf("n%d", i+1))
		eng, err := storage.Open(storage.Options{Dir: t.TempDir(), CacheBytes: 8 << 20, MemTableBytes: 1 << 20, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := eng.Create(testKeyspace, keyspace.Config{ChunkBytes: 4 << 10, Replication: uint32(rf), MVCC: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := eng.Create(syncKeyspace, keyspace.Config{ChunkBytes: 4 << 10, Replication: uint32(rf), MVCC: true, Sync: true}); err != nil {
			t.Fatal(err)
		}
		n, err := Start(Config{Cluster: fakeCluster{self: id, view: view, dead: tc.dead, catchingUp: tc.catchingUp, said: tc.said}, Engine: eng, Log: log.With("node", id), FirstRun: true, LeaseDuration: leaseDuration,
			Dial: func(addr string) (grpc.ClientConnInterface, error) {
				return netConn{tc.net, addr, "addr-" + string(id)}, nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		tc.net.mu.Lock()
		tc.net.nodes["addr-"+string(id)] = n
		tc.net.mu.Unlock()
		tc.nodes = append(tc.nodes, n)
		tc.engines = append(tc.engines, eng)
	}
	t.Cleanup(func() {
		for i, n := range tc.nodes {
			n.Close()
			if err := tc.engines[i].Close(); err != nil {
				t.Error(err)
			}
		}
	})
	return tc
}

func (tc *testCluster) commit(ctx context.Context, via int, ops ...txn.Op) ([]txn.Result, error) {
	return tc.nodes[via].Commit(ctx, testKeyspace, tc.rf, ops, nil)
}

// read returns blob key as stored on node i, with its version.
func (tc *testCluster) read(t *testing.T, i int, key string) (string, uint64) {
	t.Helper()
	ks, err := tc.engines[i].Acquire(testKeyspace)
	if err != nil {
		t.Fatal(err)
	}
	defer ks.Release()
	data, info, err := ks.Store.Read(key, 0, 1<<20)
	if errors.Is(err, errs.ErrNotFound) {
		return "<absent>", 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(data), info.Version
}

func appendOp(key, data string) txn.Op {
	return txn.Op{Key: key, Kind: txn.OpAppend, Data: []byte(data), Create: true}
}

// Concurrent appends to one blob, coordinated by every node, over a network
// that loses one batch in twenty: each acknowledged append lands exactly
// once, and every replica ends with the same bytes under the same version.
func TestReplicatedAppends(t *testing.T) {
	seed := testseed.FromEnv(t, "TYR_NODE_SEED")
	tc := startCluster(t, 3, 0.05, seed)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const writers, each = 4, 10
	var wg sync.WaitGroup
	var acked sync.Map
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				rec := fmt.Sprintf("<%d.%d>", w, i)
				if _, err := tc.commit(ctx, w%3, appendOp("log", rec)); err != nil {
					t.Errorf("append %s: %v", rec, err)
					return
				}
				acked.Store(rec, true)
			}
		}()
	}
	wg.Wait()
	want, wantVersion := tc.read(t, 0, "log")
	for i := 1; i < 3; i++ {
		got, version := tc.read(t, i, "log")
		if got != want || version != wantVersion {
			t.Fatalf("replica n%d differs from n1: version %d vs %d, %d vs %d bytes", i+1, version, wantVersion, len(got), len(want))
		}
	}
	count, total := 0, 0
	acked.Range(func(k, _ any) bool {
		count++
		total += len(k.(string))
		if n := countOf(want, k.(string)); n != 1 {
			t.Errorf("append %s appears %d times", k, n)
		}
		return true
	})
	if count != writers*each {
		t.Fatalf("%d appends acknowledged, want %d", count, writers*each)
	}
	if len(want) != total {
		t.Fatalf("blob has %d bytes, the %d acknowledged appends %d: something landed twice or not at all", len(want), count, total)
	}
	t.Logf("%d appends, %d Deliver calls (one in twenty lost)", count, tc.net.calls.Load())
}

func countOf(s, sub string) int {
	n := 0
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			n++
		}
	}
	return n
}

// A refusal keeps its error class across the chain and changes nothing on
// any replica; a dead member is left out of the chain and the survivors
// still commit.
func TestRefusalsAndDeadMembers(t *testing.T) {
	tc := startCluster(t, 3, 0, 1)
	ctx := context.Background()
	if _, err := tc.commit(ctx, 1, txn.Op{Key: "a", Kind: txn.OpWrite, Data: []byte("x")}); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("write without create of a missing blob: %v; want not found", err)
	}
	if _, err := tc.commit(ctx, 2, txn.Op{Key: "a", Kind: txn.OpCreate}); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.commit(ctx, 0, txn.Op{Key: "a", Kind: txn.OpCreate}); !errors.Is(err, errs.ErrExists) {
		t.Fatalf("second create: %v; want already exists", err)
	}
	res, err := tc.commit(ctx, 0, txn.Op{Key: "a", Kind: txn.OpWrite, Data: []byte("hello")})
	if err != nil {
		t.Fatal(err)
	}
	// A read check at the committed version passes on every member, since
	// every member stored the commit under the same version.
	if _, err := tc.commit(ctx, 1, txn.Op{Key: "a", Kind: txn.OpReadCheck, Version: res[0].Version},
		txn.Op{Key: "b", Kind: txn.OpCreate}); err != nil {
		t.Fatalf("read check at the acknowledged version: %v", err)
	}
	if _, err := tc.commit(ctx, 1, txn.Op{Key: "a", Kind: txn.OpReadCheck, Version: res[0].Version - 1},
		txn.Op{Key: "c", Kind: txn.OpCreate}); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("stale read check: %v; want conflict", err)
	}
	for i := range 3 {
		if got, _ := tc.read(t, i, "c"); got != "<absent>" {
			t.Fatalf("a refused commit created c on n%d", i+1)
		}
	}

	tc.dead.Store(ring.NodeID("n3"), true)
	if _, err := tc.commit(ctx, 0, txn.Op{Key: "a", Kind: txn.OpWrite, Data: []byte("HELLO")}); err != nil {
		t.Fatalf("commit with n3 dead: %v", err)
	}
	for i, want := range []string{"HELLO", "HELLO", "hello"} {
		if got, _ := tc.read(t, i, "a"); got != want {
			t.Errorf("n%d holds %q, want %q", i+1, got, want)
		}
	}
	if target, err := tc.nodes[0].ReadTarget(testKeyspace, 3, "a"); err != nil || target == "n3" {
		t.Errorf("read target with n3 dead: %q, %v", target, err)
	}
	for _, id := range []ring.NodeID{"n1", "n2"} {
		tc.dead.Store(id, true)
	}
	if _, err := tc.commit(ctx, 0, txn.Op{Key: "a", Kind: txn.OpCreate}); !errors.Is(err, errs.ErrUnavailable) {
		t.Fatalf("commit with every replica dead: %v; want unavailable", err)
	}
}

// A commit whose chain has a member that stopped answering waits, holding
// the blob's locks on the members that prepared it; once membership
// reports the member dead, the coordinator re-executes the commit on the
// members left, it commits, and the blob takes commits again.
func TestReexecutionAfterDeath(t *testing.T) {
	tc := startCluster(t, 3, 0, 1)
	ctx := context.Background()
	if _, err := tc.commit(ctx, 0, appendOp("k", "a")); err != nil {
		t.Fatal(err)
	}
	tc.net.mu.Lock()
	tc.net.cut["addr-n3"] = true
	tc.net.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		_, err := tc.commit(ctx, 0, appendOp("k", "b"))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("commit finished with a member unreachable and not reported dead: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	tc.dead.Store(ring.NodeID("n3"), true)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("re-executed commit: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the commit did not finish after its member was reported dead")
	}
	if _, err := tc.commit(ctx, 1, appendOp("k", "c")); err != nil {
		t.Fatalf("next commit on the blob: %v", err)
	}
	for i, want := range []string{"abc", "abc", "a"} {
		if got, _ := tc.read(t, i, "k"); got != want {
			t.Errorf("n%d holds %q, want %q", i+1, got, want)
		}
	}
}
