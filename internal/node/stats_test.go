package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tyrstore/tyr/api/peerpb"
	"github.com/tyrstore/tyr/internal/keyspace"
	"github.com/tyrstore/tyr/internal/membership"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/storage"
)

// tally is what one sender's connections saw: the Deliver calls made, the
// messages in them and the calls that failed. failTo makes every Deliver
// call to an address fail; noDial makes dialling it fail.
type tally struct {
	mu                    sync.Mutex
	calls, msgs, failures uint64
	failTo, noDial        map[string]bool
}

func (t *tally) get() (calls, msgs, failures uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.calls, t.msgs, t.failures
}

func (t *tally) set(m map[string]bool, addr string, on bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m[addr] = on
}

// tallyConn is a netConn whose Deliver calls are recorded in the sender's
// tally.
type tallyConn struct {
	netConn
	t *tally
}

func (c tallyConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if method != peerpb.Peer_Deliver_FullMethodName {
		return c.netConn.Invoke(ctx, method, args, reply, opts...)
	}
	c.t.mu.Lock()
	fail := c.t.failTo[c.addr]
	c.t.calls++
	c.t.msgs += uint64(len(args.(*peerpb.DeliverRequest).GetMessages()))
	if fail {
		c.t.failures++
	}
	c.t.mu.Unlock()
	if fail {
		return errors.New("lost")
	}
	return c.netConn.Invoke(ctx, method, args, reply, opts...)
}

// startTallied starts a lossless cluster of two nodes, n1 and n2, that
// replicate testKeyspace to both; each node's Deliver calls are recorded
// in its own tally.
func startTallied(t *testing.T) (*testCluster, []*tally) {
	t.Helper()
	view := &membership.View{}
	ids := []ring.NodeID{"n1", "n2"}
	for _, id := range ids {
		if _, err := view.Apply(membership.Event{Kind: membership.EventJoin, Meta: membership.Meta{
			ID: id, RPCAddr: "addr-" + string(id), Weight: 1, StartedUnixNano: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	tc := &testCluster{net: &network{nodes: map[string]*Node{}, rng: rand.New(rand.NewPCG(1, 1)), cut: map[string]bool{}},
		dead: &sync.Map{}, catchingUp: &sync.Map{}, rf: len(ids)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var tallies []*tally
	t.Cleanup(func() {
		for i, n := range tc.nodes {
			n.Close()
			if err := tc.engines[i].Close(); err != nil {
				t.Error(err)
			}
		}
	})
	for _, id := range ids {
		eng, err := storage.Open(storage.Options{Dir: t.TempDir(), CacheBytes: 8 << 20, MemTableBytes: 1 << 20, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := eng.Create(testKeyspace, keyspace.Config{ChunkBytes: 4 << 10, Replication: uint32(len(ids)), MVCC: true}); err != nil {
			_ = eng.Close()
			t.Fatal(err)
		}
		tal := &tally{failTo: map[string]bool{}, noDial: map[string]bool{}}
		dial := func(addr string) (grpc.ClientConnInterface, error) {
			tal.mu.Lock()
			defer tal.mu.Unlock()
			if tal.noDial[addr] {
				return nil, errors.New("unreachable")
			}
			return tallyConn{netConn: netConn{net: tc.net, addr: addr}, t: tal}, nil
		}
		n, err := Start(Config{Cluster: fakeCluster{self: id, view: view, dead: tc.dead, catchingUp: tc.catchingUp},
			Engine: eng, Log: log, Dial: dial, FirstRun: true, LeaseDuration: -1})
		if err != nil {
			_ = eng.Close()
			t.Fatal(err)
		}
		tc.net.mu.Lock()
		tc.net.nodes["addr-"+string(id)] = n
		tc.net.mu.Unlock()
		tc.nodes = append(tc.nodes, n)
		tc.engines = append(tc.engines, eng)
		tallies = append(tallies, tal)
	}
	tc.waitCaughtUp(t, 30*time.Second)
	return tc, tallies
}

// settled waits until node i's counts of Deliver calls, messages and
// failed calls equal what its connections recorded, as they do whenever
// no call is in progress, and returns its stats.
func settled(t *testing.T, tc *testCluster, tallies []*tally, i int) Stats {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		calls, msgs, failures := tallies[i].get()
		st := tc.nodes[i].Stats()
		if st.DeliverCalls == calls && st.MessagesSent == msgs && st.DeliverFailures == failures {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("n%d: stats %+v; its connections saw %d calls, %d messages, %d failed calls",
				i+1, st, calls, msgs, failures)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Each node counts exactly the Deliver calls it makes, the messages in them
// and the calls that fail; a message it cannot hand to any connection
// counts as dropped and as nothing else.
func TestStatsCountPeerTraffic(t *testing.T) {
	tc, tallies := startTallied(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	before := make([]Stats, len(tc.nodes))
	for i := range tc.nodes {
		before[i] = settled(t, tc, tallies, i)
	}
	const commits = 10
	for i := range commits {
		if _, err := tc.commit(ctx, i%2, appendOp(fmt.Sprintf("k%d", i%3), "x")); err != nil {
			t.Fatal(err)
		}
	}
	var sent uint64
	for i := range tc.nodes {
		st := settled(t, tc, tallies, i)
		if st.DeliverCalls == before[i].DeliverCalls || st.MessagesSent < st.DeliverCalls ||
			st.DeliverFailures != 0 || st.MessagesDropped != 0 {
			t.Errorf("n%d after %d lossless commits: %+v", i+1, commits, st)
		}
		sent += st.MessagesSent - before[i].MessagesSent
	}
	// Lossless: each node receives what the other sent (a call counted as
	// made may still be on its way in). The sender's count is read after
	// the receiver's: a late message of the commits (an ack, a resend)
	// may be sent after the counts above were taken.
	for i := range tc.nodes {
		other := 1 - i
		deadline := time.Now().Add(2 * time.Second)
		for {
			got := tc.nodes[i].Stats().MessagesReceived - before[i].MessagesReceived
			want := tc.nodes[other].Stats().MessagesSent - before[other].MessagesSent
			if got == want {
				break
			}
			if got > want || time.Now().After(deadline) {
				t.Errorf("n%d received %d messages, n%d sent it %d", i+1, got, other+1, want)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// A commit on a two-member chain crosses between the nodes at least
	// twice: to the other member and back.
	if sent < 2*commits {
		t.Errorf("%d messages sent for %d two-member commits, want at least %d", sent, commits, 2*commits)
	}

	// Every call from n1 to n2 fails: the commit cannot finish, n1 keeps
	// retransmitting, and each of its calls counts as failed.
	tallies[0].set(tallies[0].failTo, "addr-n2", true)
	failedBefore := tc.nodes[0].Stats().DeliverFailures
	short, stop := context.WithTimeout(ctx, 600*time.Millisecond)
	_, err := tc.commit(short, 0, appendOp("lossy", "x"))
	stop()
	if err == nil {
		t.Fatal("a commit finished while every call to the other member failed")
	}
	tallies[0].set(tallies[0].failTo, "addr-n2", false)
	waitCommitted(t, tc, "lossy")
	if st := settled(t, tc, tallies, 0); st.DeliverFailures <= failedBefore {
		t.Errorf("n1's failed calls went from %d to %d while its calls to n2 failed", failedBefore, st.DeliverFailures)
	}

	// n2 cannot dial n1: whatever it sends n1 is dropped before any call.
	tallies[1].set(tallies[1].noDial, "addr-n1", true)
	tc.nodes[1].peersMu.Lock()
	for _, p := range tc.nodes[1].peers {
		p.close()
	}
	clear(tc.nodes[1].peers)
	tc.nodes[1].peersMu.Unlock()
	b := settled(t, tc, tallies, 1)
	short, stop = context.WithTimeout(ctx, 600*time.Millisecond)
	_, err = tc.commit(short, 1, appendOp("undialled", "x"))
	stop()
	if err == nil {
		t.Fatal("a commit finished while the other member could not be dialled")
	}
	st := settled(t, tc, tallies, 1)
	if st.MessagesDropped == b.MessagesDropped {
		t.Errorf("n2 dropped nothing while n1 could not be dialled: %+v", st)
	}
	if st.DeliverCalls != b.DeliverCalls || st.MessagesSent != b.MessagesSent {
		t.Errorf("n2 counted calls it could not make: before %+v, after %+v", b, st)
	}
	tallies[1].set(tallies[1].noDial, "addr-n1", false)
	waitCommitted(t, tc, "undialled")
}

// waitCommitted waits until blob key exists on every node, so that no
// commit of it holds its keyspace when the test ends.
func waitCommitted(t *testing.T, tc *testCluster, key string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for i := range tc.nodes {
		for {
			if got, _ := tc.read(t, i, key); got != "<absent>" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("n%d: %s not committed after its calls were let through", i+1, key)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
