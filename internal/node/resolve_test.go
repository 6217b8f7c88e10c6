package node

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/chain"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/txn"
)

// clientID returns a client ID of time tc.
func clientID(tc time.Time) []byte {
	id := make([]byte, ClientIDBytes)
	binary.BigEndian.PutUint64(id, uint64(tc.UnixNano()))
	_, _ = rand.Read(id[8:])
	return id
}

// startedLongAgo makes every node of tc vouch for commits begun from now
// on, as if it had run and held its lease for an hour. Leases are off in
// these clusters, so a node holds its lease since it started.
func startedLongAgo(tc *testCluster) {
	for _, n := range tc.nodes {
		n.started = n.started.Add(-time.Hour)
	}
}

func resolve(t *testing.T, tc *testCluster, via int, client []byte, ops ...txn.Op) Resolution {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := tc.nodes[via].ResolveCommit(ctx, testKeyspace, tc.rf, client, ops)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A commit a client named resolves, through another node, to committed
// with the coordinator's results; resolving again gives the same.
func TestResolveCommitted(t *testing.T) {
	tc := startCluster(t, 3, 0, 1)
	startedLongAgo(tc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := clientID(time.Now())
	ops := []txn.Op{appendOp("a", "one"), appendOp("a", "two")}
	want, err := tc.nodes[0].Commit(ctx, testKeyspace, tc.rf, ops, client)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		res := resolve(t, tc, 1, client, ops...)
		if res.Outcome != OutcomeCommitted || len(res.Results) != len(want) {
			t.Fatalf("resolved %+v, want committed with %v", res, want)
		}
		for i := range want {
			if res.Results[i] != want[i] {
				t.Fatalf("result %d: %+v, want %+v", i, res.Results[i], want[i])
			}
		}
	}
	// A second commit under the same client ID is refused everywhere.
	if _, err := tc.nodes[2].Commit(ctx, testKeyspace, tc.rf, ops, client); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("commit reusing a committed client ID: %v, want a conflict", err)
	}
	if got, _ := tc.read(t, 2, "a"); got != "onetwo" {
		t.Fatalf("blob a is %q, want %q", got, "onetwo")
	}
}

// A client ID no node saw resolves to aborted once vouched for, and fences
// it: a commit carrying it afterwards (a late delivery) changes nothing.
// Without a vouching member, the answer is unknown, and the fences hold
// all the same.
func TestResolveFences(t *testing.T) {
	tc := startCluster(t, 3, 0, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ops := []txn.Op{appendOp("b", "x")}

	unvouched := clientID(time.Now())
	if res := resolve(t, tc, 1, unvouched, ops...); res.Outcome != OutcomeUnknown {
		t.Fatalf("resolved %+v with no member running before the commit, want unknown", res)
	}
	startedLongAgo(tc)

	unseen := clientID(time.Now())
	if res := resolve(t, tc, 1, unseen, ops...); res.Outcome != OutcomeAborted {
		t.Fatalf("resolved %+v, want aborted", res)
	}
	for _, client := range [][]byte{unvouched, unseen} {
		for via := range tc.nodes {
			if _, err := tc.nodes[via].Commit(ctx, testKeyspace, tc.rf, ops, client); !errors.Is(err, errs.ErrConflict) {
				t.Fatalf("late commit of a fenced client ID via node %d: %v, want a conflict", via, err)
			}
		}
	}
	for i := range tc.nodes {
		if got, _ := tc.read(t, i, "b"); got != "<absent>" {
			t.Fatalf("node %d: blob b is %q after fenced commits", i, got)
		}
	}
	if res := resolve(t, tc, 2, unseen, ops...); res.Outcome != OutcomeAborted {
		t.Fatalf("resolved again %+v, want aborted", res)
	}
}

// An attempt staged on a member answers pending, and the member does not
// fence; once the stage ends the client ID can be fenced. A version
// manager that is alive and does not answer makes the outcome unknown; one
// taken for dead does not.
func TestResolvePendingAndUnreachable(t *testing.T) {
	tc := startCluster(t, 3, 0, 1)
	startedLongAgo(tc)
	ops := []txn.Op{appendOp("c", "x")}
	client := clientID(time.Now())
	ks, err := tc.engines[2].Acquire(testKeyspace)
	if err != nil {
		t.Fatal(err)
	}
	defer ks.Release()
	attempt := chain.TxnID{Coordinator: "n1", Seq: 7}
	if err := tc.nodes[2].clients.stage(ks.Store, testKeyspace, client, attempt, time.Now()); err != nil {
		t.Fatal(err)
	}
	if res := resolve(t, tc, 0, client, ops...); res.Outcome != OutcomePending {
		t.Fatalf("resolved %+v with an attempt staged on n3, want pending", res)
	}
	if rec, ok, err := ks.Store.Client(client); ok || err != nil {
		t.Fatalf("n3 recorded %+v, %v while the attempt is staged there", rec, err)
	}
	tc.nodes[2].clients.done(testKeyspace, client, attempt)

	// n3 alive but cut off: unknown.
	tc.net.mu.Lock()
	tc.net.cut["addr-n3"] = true
	tc.net.mu.Unlock()
	if res := resolve(t, tc, 0, client, ops...); res.Outcome != OutcomeUnknown {
		t.Fatalf("resolved %+v with a live version manager unreachable, want unknown", res)
	}
	// n3 taken for dead: the vouching members decide.
	tc.dead.Store(ring.NodeID("n3"), true)
	if res := resolve(t, tc, 0, client, ops...); res.Outcome != OutcomeAborted {
		t.Fatalf("resolved %+v with n3 dead, want aborted", res)
	}
	// The stage window is checked whatever the fences.
	old := clientID(time.Now().Add(-StageWindow - time.Second))
	if err := tc.nodes[0].clients.stage(ks.Store, testKeyspace, old, attempt, time.Now()); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("staged a commit past its stage window: %v", err)
	}
}

func TestCheckClientID(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		id []byte
		ok bool
	}{
		{clientID(now), true},
		{clientID(now.Add(-ClientClockSkewMax + time.Second)), true},
		{clientID(now.Add(ClientClockSkewMax + time.Second)), false},
		{clientID(now.Add(-ClientClockSkewMax - time.Second)), false},
		{make([]byte, 8), false},
	} {
		if err := CheckClientID(tc.id, now); (err == nil) != tc.ok {
			t.Errorf("CheckClientID(%x) = %v, want ok %t", tc.id, err, tc.ok)
		}
	}
}

// TestCombineUnheld: the committed answers' results are merged, a value one
// member could not compute taken from another; when no member that answered
// computed it, the outcome is unknown rather than a committed zero.
func TestCombineUnheld(t *testing.T) {
	n := &Node{cfg: Config{Log: slog.New(slog.DiscardHandler)}}
	held := []txn.Result{{Value: 7, Version: 3}}
	none := func() []txn.Result { return []txn.Result{{Unheld: true}} }
	got := n.combine([]answer{{id: "n1", verdict: VerdictCommitted, results: none()}, {id: "n2", verdict: VerdictCommitted, results: held}})
	if got.Outcome != OutcomeCommitted || len(got.Results) != 1 || got.Results[0] != held[0] {
		t.Fatalf("a held value among the answers: %+v, want committed with %+v", got, held)
	}
	got = n.combine([]answer{{id: "n1", verdict: VerdictCommitted, results: none()}, {id: "n2", err: errors.New("down")}})
	if got.Outcome != OutcomeUnknown {
		t.Fatalf("no held value among the answers: %+v, want unknown", got)
	}
}
