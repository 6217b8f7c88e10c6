package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/node"
)

// Outcome resolution on real processes: commits are sent to node1, which
// coordinates them and heads their chains, and node1 is killed with
// SIGKILL while they run. Their outcomes, asked of node2, must match what
// the cluster stores: a committed append is in the blob once, at the
// offset its results give; an aborted one is not there and is refused if
// it arrives later.

// resolveBound bounds how long the test asks for an outcome: the killed
// node must first be declared dead (deadDetectedMax).
const resolveBound = deadDetectedMax + 30*time.Second

// newClientID is a client transaction ID taken now.
func newClientID() []byte {
	id := make([]byte, node.ClientIDBytes)
	binary.BigEndian.PutUint64(id, uint64(time.Now().UnixNano()))
	_, _ = rand.Read(id[8:])
	return id
}

func rawTyr(t *testing.T, endpoint string) tyrpb.TyrClient {
	t.Helper()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return tyrpb.NewTyrClient(conn)
}

// resolveUntilKnown asks api for req's outcome until it is committed or
// aborted, or resolveBound passes.
func resolveUntilKnown(t *testing.T, api tyrpb.TyrClient, req *tyrpb.CommitRequest) *tyrpb.ResolveResponse {
	t.Helper()
	deadline := time.Now().Add(resolveBound)
	var last *tyrpb.ResolveResponse
	var lastErr error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := api.Resolve(ctx, &tyrpb.ResolveRequest{Commit: req})
		cancel()
		last, lastErr = resp, err
		if err == nil && (resp.GetOutcome() == tyrpb.Outcome_OUTCOME_COMMITTED || resp.GetOutcome() == tyrpb.Outcome_OUTCOME_ABORTED) {
			return resp
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("no outcome for %x within %v: last answer %v, %v", req.GetTxnId(), resolveBound, last, lastErr)
	return nil
}

func appendRequest(ks, key, rec string) *tyrpb.CommitRequest {
	return &tyrpb.CommitRequest{Keyspace: []byte(ks), TxnId: newClientID(), Ops: []*tyrpb.Op{{Key: []byte(key),
		Kind: &tyrpb.Op_Append{Append: &tyrpb.AppendOp{Data: []byte(rec), Create: true}}}}}
}

func TestResolveAfterCoordinatorKill(t *testing.T) {
	const ks = "resolve-kill"
	lc, clients := txnCluster(t, 3, ks, client.KeyspaceConfig{Replication: 3, MVCC: true, Sync: true})
	// A node vouches for a commit only if it held its read lease since
	// before the commit could begin (node.ClientClockSkewMax before it).
	wait := node.ClientClockSkewMax + node.ClockSkewMax + 2*time.Second
	t.Logf("waiting %v so that the nodes have run long enough to vouch for new commits", wait)
	time.Sleep(wait)

	via1 := rawTyr(t, lc.Endpoints[0])
	via2 := rawTyr(t, lc.Endpoints[1])
	// The Go client through node1: it learns the ring on its first commit,
	// so it can ask the other nodes once node1 is gone.
	c1 := dial(t, lc.Endpoints[0])
	{
		ctx, cancel := opCtx()
		if _, err := c1.Commit(ctx, ks, client.AppendOp("warm", []byte("x"), true)); err != nil {
			t.Fatal(err)
		}
		cancel()
	}

	const raw, high = 24, 8
	type sent struct {
		key, rec string
		req      *tyrpb.CommitRequest
		resp     *tyrpb.CommitResponse // nil if the answer was lost
		results  []client.OpResult
		err      error
	}
	all := make([]*sent, 0, raw+high)
	for i := range raw {
		key, rec := fmt.Sprintf("raw/%d", i%4), fmt.Sprintf("<raw %d>", i)
		all = append(all, &sent{key: key, rec: rec, req: appendRequest(ks, key, rec)})
	}
	for i := range high {
		all = append(all, &sent{key: "high", rec: fmt.Sprintf("<high %d>", i)})
	}
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), resolveBound+clusterOpTimeout)
			defer cancel()
			if s.req != nil {
				s.resp, s.err = via1.Commit(ctx, s.req)
				return
			}
			s.results, s.err = c1.Commit(ctx, ks, client.AppendOp(s.key, []byte(s.rec), true))
		}()
	}
	time.Sleep(3 * time.Millisecond)
	kill9(t, lc, 1)
	wg.Wait()

	// Never reached any node: aborted, and refused when it arrives late.
	never := appendRequest(ks, "never", "<never>")
	if resp := resolveUntilKnown(t, via2, never); resp.GetOutcome() != tyrpb.Outcome_OUTCOME_ABORTED {
		t.Fatalf("a commit no node saw resolved to %v, want aborted", resp.GetOutcome())
	}
	ctx, cancel := opCtx()
	defer cancel()
	if _, err := rawTyr(t, lc.Endpoints[2]).Commit(ctx, never); err == nil {
		t.Fatal("a commit resolved as aborted was taken when it arrived later")
	}

	blobs := map[string][]byte{}
	blob := func(key string) []byte {
		if b, ok := blobs[key]; ok {
			return b
		}
		data, err := clients[1].Read(ctx, ks, key, 0, 1<<20)
		if err != nil && !errors.Is(err, client.ErrNotFound) {
			t.Fatal(err)
		}
		blobs[key] = data
		return data
	}
	if len(blob("never")) != 0 {
		t.Fatalf("blob never holds %q", blob("never"))
	}
	tally := map[string]int{}
	for _, s := range all {
		data := blob(s.key)
		n := bytes.Count(data, []byte(s.rec))
		if s.req == nil {
			// The Go client resolved it itself.
			switch {
			case s.err == nil:
				tally["client: committed"]++
				if n != 1 || !bytes.HasPrefix(data[s.results[0].Offset:], []byte(s.rec)) {
					t.Errorf("%s committed at %d, but the blob holds it %d times: %q", s.rec, s.results[0].Offset, n, data)
				}
			case errors.Is(s.err, client.ErrConflict):
				tally["client: aborted"]++
				if n != 0 {
					t.Errorf("%s aborted (%v), but the blob holds it %d times", s.rec, s.err, n)
				}
			case errors.Is(s.err, client.ErrOutcomeUnknown):
				tally["client: unknown"]++
				t.Errorf("%s: outcome not resolved: %v", s.rec, s.err)
			default:
				t.Errorf("%s: %v", s.rec, s.err)
			}
			continue
		}
		resp := resolveUntilKnown(t, via2, s.req)
		switch resp.GetOutcome() {
		case tyrpb.Outcome_OUTCOME_COMMITTED:
			off := resp.GetResults()[0].GetOffset()
			if n != 1 || !bytes.HasPrefix(data[off:], []byte(s.rec)) {
				t.Errorf("%s resolved committed at %d, but the blob holds it %d times: %q", s.rec, off, n, data)
			}
			if s.resp != nil && s.resp.GetResults()[0].GetOffset() != off {
				t.Errorf("%s committed at %d, resolved at %d", s.rec, s.resp.GetResults()[0].GetOffset(), off)
			}
		case tyrpb.Outcome_OUTCOME_ABORTED:
			if n != 0 || s.resp != nil {
				t.Errorf("%s resolved aborted, but the blob holds it %d times (acknowledged: %t)", s.rec, n, s.resp != nil)
			}
			// A late delivery of an aborted commit stays refused.
			if _, err := via2.Commit(ctx, s.req); err == nil {
				t.Errorf("%s resolved aborted, then committed when sent again", s.rec)
			}
		}
		tally[fmt.Sprintf("raw: answered %t, resolved %v", s.resp != nil, resp.GetOutcome())]++
	}
	t.Logf("outcomes: %v", tally)

	// node1, c1's endpoint, is down: c1's commits go through another node
	// once the cluster found they did not take effect there.
	actx, acancel := context.WithTimeout(context.Background(), resolveBound+clusterOpTimeout)
	defer acancel()
	res, err := c1.Commit(actx, ks, client.AppendOp("after", []byte("<after>"), true))
	if err != nil {
		t.Fatalf("a commit through a client whose endpoint is down: %v", err)
	}
	if data, err := clients[1].Read(ctx, ks, "after", 0, 1<<20); err != nil || !bytes.Equal(data, []byte("<after>")) || res[0].Offset != 0 {
		t.Errorf("after the commit through another node, blob after holds %q (%v), committed at %d", data, err, res[0].Offset)
	}
	lost := 0
	for _, s := range all {
		if s.req != nil && s.resp == nil {
			lost++
		}
	}
	if lost == 0 {
		t.Log("no raw commit lost its answer this run: the kill came after every one had finished")
	}
}
