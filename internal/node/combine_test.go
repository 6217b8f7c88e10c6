package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/mvcc"
	"github.com/tyrstore/tyr/internal/txn"
)

// TestCombine: clients adding to one hot counter through every node, on
// clusters where nodes outnumber replicas, each add with its own client
// ID: every add commits once, with its own result (the new values are
// exactly 1 to the number of adds), the nodes combined adds into fewer
// commits, every replica holds the sum, and a resolution of an add's
// client ID answers committed with that add's own result. Requests that
// also add to a blob that does not exist fail alone, with not found, and
// their combined neighbours commit.
func TestCombine(t *testing.T) {
	for _, shape := range []struct{ nodes, rf int }{{3, 1}, {4, 2}, {3, 3}} {
		t.Run(fmt.Sprintf("%dn-rf%d", shape.nodes, shape.rf), func(t *testing.T) {
			const clients, each = 24, 15
			tc := startClusterRF(t, shape.nodes, shape.rf, 0, 1)
			tc.waitCaughtUp(t, 10*time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := tc.nodes[0].Commit(ctx, syncKeyspace, shape.rf,
				[]txn.Op{{Key: "hot", Kind: txn.OpWrite, Data: make([]byte, 8), Create: true}}, nil); err != nil {
				t.Fatal(err)
			}
			add := txn.Op{Key: "hot", Kind: txn.OpAtomic, Width: 8, Func: txn.FuncAdd, Operand: 1}
			type answer struct {
				via    int
				client []byte
				value  uint64
			}
			var mu sync.Mutex
			var answers []answer
			var wg sync.WaitGroup
			failures := make(chan error, clients*each)
			for c := range clients {
				wg.Go(func() {
					for i := range each {
						via := (c + i) % shape.nodes
						ops := []txn.Op{add}
						bad := c == 0 && i%3 == 0
						if bad {
							ops = append(ops, txn.Op{Key: "missing", Kind: txn.OpAtomic, Width: 8, Func: txn.FuncAdd, Operand: 1})
						}
						client := clientID(time.Now())
						res, err := tc.nodes[via].Commit(ctx, syncKeyspace, shape.rf, ops, client)
						switch {
						case bad && !errors.Is(err, errs.ErrNotFound):
							failures <- fmt.Errorf("an add to a missing blob: %v, want not found", err)
						case bad:
						case err != nil:
							failures <- err
						case len(res) != 1:
							failures <- fmt.Errorf("%d results for one op", len(res))
						default:
							mu.Lock()
							answers = append(answers, answer{via, client, res[0].Value})
							mu.Unlock()
						}
					}
				})
			}
			wg.Wait()
			close(failures)
			for err := range failures {
				t.Error(err)
			}
			if t.Failed() {
				return
			}
			values := make([]uint64, 0, len(answers))
			for _, a := range answers {
				values = append(values, a.value)
			}
			slices.Sort(values)
			for i, v := range values {
				if v != uint64(i+1) {
					t.Fatalf("add results %v...: want each of 1 to %d once", values[:min(len(values), i+3)], len(values))
				}
			}
			var combined, requests uint64
			for _, n := range tc.nodes {
				st := n.Stats()
				combined += st.CombinedCommits
				requests += st.CombinedRequests
			}
			t.Logf("%d adds, %d of them in %d combined commits", len(answers), requests, combined)
			// 24 clients on one counter: most adds wait behind a commit in
			// flight and go combined (about 9 in 10 here, idle or loaded).
			if 4*requests < uint64(len(answers)) {
				t.Errorf("%d of %d adds went in combined commits (%d), want a quarter at least", requests, len(answers), combined)
			}
			tc.checkCounter(t, syncKeyspace, "hot", shape.rf, uint64(len(answers)))
			for _, a := range answers[:10] {
				res, err := tc.nodes[(a.via+1)%shape.nodes].ResolveCommit(ctx, syncKeyspace, shape.rf, a.client, []txn.Op{add})
				if err != nil || res.Outcome != OutcomeCommitted || len(res.Results) != 1 || res.Results[0].Value != a.value {
					t.Errorf("resolution of an add answered %d: %+v, %v; want committed with value %d", a.value, res, err, a.value)
				}
			}
		})
	}
}

// TestClientParts: a combined commit's client IDs decode as they were
// encoded, one client ID alone covers every op, and bad encodings are
// refused.
func TestClientParts(t *testing.T) {
	a, b := clientID(time.Now()), clientID(time.Now())
	parts := []mvcc.ClientPart{{ID: a, From: 0, To: 2}, {ID: b, From: 3, To: 4}}
	got, err := clientParts(encodeClientParts(parts))
	if err != nil || len(got) != 2 || string(got[1].ID) != string(b) || got[0].To != 2 || got[1].From != 3 || got[1].To != 4 {
		t.Fatalf("clientParts(encode(%v)) = %v, %v", parts, got, err)
	}
	if got, err := clientParts(a); err != nil || len(got) != 1 || got[0].To != 0 {
		t.Fatalf("one client ID: %v, %v", got, err)
	}
	for name, bad := range map[string][]byte{
		"short":       a[:10],
		"overlapping": encodeClientParts([]mvcc.ClientPart{{ID: a, From: 0, To: 2}, {ID: b, From: 1, To: 3}}),
		"empty run":   encodeClientParts([]mvcc.ClientPart{{ID: a, From: 2, To: 2}}),
	} {
		if _, err := clientParts(bad); !errors.Is(err, errs.ErrInvalidArgument) {
			t.Errorf("%s: %v, want invalid argument", name, err)
		}
	}
}
