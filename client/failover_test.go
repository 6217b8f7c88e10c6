package client

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/tyrstore/tyr/api/tyrpb"
)

// foNode is an in-process server for the failover tests: it records the
// commits it gets (by txn ID), answers them as told, and answers Resolve,
// List and Ring.
type foNode struct {
	tyrpb.UnimplementedTyrServer
	name string
	addr string
	srv  *grpc.Server

	mu sync.Mutex
	// commits are the txn IDs of the commits that reached the node.
	commits [][]byte
	// loseAnswer: a commit that arrives stops the server, so that its
	// answer is lost after the node got it.
	loseAnswer bool
	outcome    tyrpb.Outcome // Resolve's answer; 0: fail the call
	resolves   int
	lists      int
	ring       *tyrpb.RingResponse
}

func (n *foNode) Commit(ctx context.Context, req *tyrpb.CommitRequest) (*tyrpb.CommitResponse, error) {
	n.mu.Lock()
	n.commits = append(n.commits, req.GetTxnId())
	lose := n.loseAnswer
	n.mu.Unlock()
	if lose {
		go n.srv.Stop()
		<-ctx.Done()
		return nil, ctx.Err()
	}
	out := &tyrpb.CommitResponse{}
	for range req.GetOps() {
		out.Results = append(out.Results, &tyrpb.OpResult{Version: 1})
	}
	return out, nil
}

func (n *foNode) Resolve(context.Context, *tyrpb.ResolveRequest) (*tyrpb.ResolveResponse, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.resolves++
	if n.outcome == 0 {
		return nil, status.Error(codes.Unavailable, "cannot tell")
	}
	return &tyrpb.ResolveResponse{Outcome: n.outcome, Results: []*tyrpb.OpResult{{Version: 9}}}, nil
}

func (n *foNode) List(context.Context, *tyrpb.ListRequest) (*tyrpb.ListResponse, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lists++
	return &tyrpb.ListResponse{Blobs: []*tyrpb.BlobInfo{{Key: n.name}}}, nil
}

func (n *foNode) Ring(context.Context, *tyrpb.RingRequest) (*tyrpb.RingResponse, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ring == nil {
		return nil, status.Error(codes.Unimplemented, "no ring")
	}
	r := fakeRing(1)
	r.Members = n.ring.Members
	r.Self = n.name
	return r, nil
}

// counts returns the txn IDs of the commits the node got, and how many
// resolutions and listings it answered.
func (n *foNode) counts() (commits [][]byte, resolves, lists int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([][]byte(nil), n.commits...), n.resolves, n.lists
}

func startFoNode(t *testing.T, name string) *foNode {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &foNode{name: name, addr: lis.Addr().String(), srv: grpc.NewServer()}
	tyrpb.RegisterTyrServer(n.srv, n)
	go func() { _ = n.srv.Serve(lis) }()
	t.Cleanup(n.srv.Stop)
	return n
}

// deadAddr returns an address of 127.0.0.1 nothing listens on: connecting
// to it is refused.
func deadAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

func dialT(t *testing.T, endpoint string, opts ...Option) *Client {
	t.Helper()
	c, err := Dial(endpoint, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// A commit whose endpoint refuses connections goes, as it is, to the next
// endpoint; the client stays there; listings follow it.
func TestFailoverCommitThroughDeadEndpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	b := startFoNode(t, "b")
	dead := deadAddr(t)
	c := dialT(t, dead, WithEndpoints(b.addr), WithoutRouting())
	for i := range 3 {
		if _, err := c.Commit(ctx, "ks", WriteOp("k", 0, []byte("x"), true)); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	commits, resolves, _ := b.counts()
	if len(commits) != 3 || resolves != 0 {
		t.Fatalf("node b got %d commits and %d resolutions, want 3 and 0", len(commits), resolves)
	}
	if got := c.Endpoint(); got != b.addr {
		t.Errorf("endpoint after failover %s, want %s", got, b.addr)
	}
	blobs, _, err := c.List(ctx, "ks", "", "", 0)
	if err != nil || len(blobs) != 1 || blobs[0].Key != "b" {
		t.Fatalf("list: %v, %v; want node b's", blobs, err)
	}

	// Without failover the same client fails.
	plain := dialT(t, dead, WithoutRouting())
	_, err = plain.Commit(ctx, "ks", WriteOp("k", 0, []byte("x"), true))
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("commit without failover through a dead endpoint: %v, want ErrUnavailable", err)
	}
}

// A commit no endpoint could be reached for fails at once, Refused (it
// was sent nowhere), not of unknown outcome.
func TestFailoverNothingReachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := dialT(t, deadAddr(t), WithEndpoints(deadAddr(t), deadAddr(t)), WithoutRouting())
	start := time.Now()
	_, err := c.Commit(ctx, "ks", WriteOp("k", 0, []byte("x"), true))
	if !errors.Is(err, ErrUnavailable) || !Refused(err) || errors.Is(err, ErrOutcomeUnknown) || !Retryable(err) {
		t.Fatalf("commit with every endpoint down: %v (refused %v, unknown %v); want ErrUnavailable, Refused",
			err, Refused(err), errors.Is(err, ErrOutcomeUnknown))
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("commit with every endpoint down took %v, want it at once", d)
	}
	if _, _, err := c.List(ctx, "ks", "", "", 0); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("list with every endpoint down: %v, want ErrUnavailable", err)
	}
}

// A commit that reached its endpoint and whose answer was lost is never
// sent again as it is: its outcome is learnt from the other endpoint
// (committed: the results; aborted: sent anew under a new ID), or it
// stays unknown.
func TestFailoverLostAnswer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		outcome tyrpb.Outcome
	}{
		{"committed", tyrpb.Outcome_OUTCOME_COMMITTED},
		{"aborted", tyrpb.Outcome_OUTCOME_ABORTED},
		{"unknown", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			a, b := startFoNode(t, "a"), startFoNode(t, "b")
			a.loseAnswer = true
			b.outcome = tc.outcome
			c := dialT(t, a.addr, WithEndpoints(b.addr), WithoutRouting())
			results, err := c.Commit(ctx, "ks", WriteOp("k", 0, []byte("x"), true))
			aCommits, _, _ := a.counts()
			bCommits, bResolves, _ := b.counts()
			if len(aCommits) != 1 {
				t.Fatalf("node a got %d commits, want 1", len(aCommits))
			}
			if bResolves == 0 {
				t.Errorf("node b was never asked for the outcome")
			}
			for _, id := range bCommits {
				if bytes.Equal(id, aCommits[0]) {
					t.Fatalf("the commit whose answer was lost was sent again under its ID")
				}
			}
			switch tc.outcome {
			case tyrpb.Outcome_OUTCOME_COMMITTED:
				if err != nil || len(results) != 1 || results[0].Version != 9 {
					t.Fatalf("commit resolved as committed: %v, %v; want the resolution's results", results, err)
				}
				if len(bCommits) != 0 {
					t.Fatalf("a commit resolved as committed was sent %d more times", len(bCommits))
				}
			case tyrpb.Outcome_OUTCOME_ABORTED:
				// Found not to have taken effect and never to: sent anew
				// (a new ID) through the other endpoint.
				if err != nil || len(bCommits) != 1 {
					t.Fatalf("commit resolved as aborted: %v, %d commits at node b; want it committed anew once", err, len(bCommits))
				}
			default:
				if !errors.Is(err, ErrOutcomeUnknown) || Refused(err) || Retryable(err) {
					t.Fatalf("commit of unlearnt outcome: %v; want ErrOutcomeUnknown, not refused, not retryable", err)
				}
				if len(bCommits) != 0 {
					t.Fatalf("a commit of unknown outcome was sent %d more times", len(bCommits))
				}
			}
		})
	}
}

// With WithFailover the client fails over to the ring's members, which
// it learnt from its endpoint, without being told any address.
func TestFailoverRingMembers(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	a, b := startFoNode(t, "a"), startFoNode(t, "b")
	r := fakeRing(1, [3]string{"a", a.addr, ""}, [3]string{"b", b.addr, ""})
	a.ring, b.ring = r, r
	c := dialT(t, a.addr, WithFailover())
	if _, err := c.Commit(ctx, "ks", WriteOp("k", 0, []byte("x"), true)); err != nil {
		t.Fatal(err)
	}
	a.srv.Stop()
	// Once the client found a down (its connection closed and a new one
	// refused), a commit cannot be sent to a: it goes to b as it is. (One
	// sent just before would have its answer lost, and be resolved:
	// TestFailoverLostAnswer; one sent while the closed connection still
	// looks usable may be too, so the test waits for the refusal.)
	for s := c.conn.GetState(); s != connectivity.TransientFailure; s = c.conn.GetState() {
		c.conn.Connect()
		if !c.conn.WaitForStateChange(ctx, s) {
			t.Fatalf("the connection to a stopped endpoint stayed %v", s)
		}
	}
	for i := range 3 {
		if _, err := c.Commit(ctx, "ks", WriteOp("k", 0, []byte("y"), true)); err != nil {
			t.Fatalf("commit %d with the endpoint down: %v", i, err)
		}
	}
	aCommits, _, _ := a.counts()
	bCommits, bResolves, _ := b.counts()
	if len(aCommits) != 1 || len(bCommits) != 3 || bResolves != 0 {
		t.Fatalf("commits at a %d, at b %d, resolutions at b %d; want 1, 3, 0", len(aCommits), len(bCommits), bResolves)
	}
	if blobs, _, err := c.List(ctx, "ks", "", "", 0); err != nil || len(blobs) != 1 || blobs[0].Key != "b" {
		t.Fatalf("list with the endpoint down: %v, %v; want node b's", blobs, err)
	}

}

// A call's progress: what an attempt queued counts as sent until gRPC
// retries the call transparently, which it does only for attempts the
// node never processed; an answer counts as sent and answered.
func TestCallProgress(t *testing.T) {
	for _, tc := range []struct {
		name           string
		events         []stats.RPCStats
		sent, answered bool
	}{
		{"begun", []stats.RPCStats{&stats.Begin{Client: true}}, false, false},
		{"header queued", []stats.RPCStats{&stats.Begin{Client: true}, &stats.OutHeader{Client: true}}, true, false},
		{"retried transparently", []stats.RPCStats{&stats.Begin{Client: true}, &stats.OutHeader{Client: true},
			&stats.OutPayload{Client: true}, &stats.Begin{Client: true, IsTransparentRetryAttempt: true}}, false, false},
		{"retried transparently, then sent", []stats.RPCStats{&stats.Begin{Client: true}, &stats.OutHeader{Client: true},
			&stats.Begin{Client: true, IsTransparentRetryAttempt: true}, &stats.OutHeader{Client: true}}, true, false},
		{"a second attempt of a processed call", []stats.RPCStats{&stats.Begin{Client: true}, &stats.OutHeader{Client: true},
			&stats.Begin{Client: true}}, true, false},
		{"answered", []stats.RPCStats{&stats.Begin{Client: true}, &stats.InTrailer{Client: true}}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := new(callProgress)
			ctx := context.WithValue(context.Background(), progressKey{}, p)
			for _, e := range tc.events {
				callStats{}.HandleRPC(ctx, e)
			}
			if p.sent.Load() != tc.sent || p.answered.Load() != tc.answered {
				t.Fatalf("sent %v, answered %v; want %v, %v", p.sent.Load(), p.answered.Load(), tc.sent, tc.answered)
			}
		})
	}
}
