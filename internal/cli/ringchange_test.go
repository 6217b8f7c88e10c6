package cli

// These tests cover how `tyr cluster remove` asks for its ring change
// against a scripted server: an answer lost with its coordinator, a change
// already in progress, and a refusal. Run:
// go test -run 'ProposeRemove' ./internal/cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/rebalance"
	"github.com/tyrstore/tyr/internal/ring"
)

// step is a scripted answer to a RingChange call: a record or an error.
type step struct {
	resp *tyrpb.RingChangeResponse
	err  error
}

// scriptedRing answers RingChange calls from a script: each call takes the
// next step, the last step repeating.
type scriptedRing struct {
	tyrpb.UnimplementedTyrServer
	mu    sync.Mutex
	steps []step
	calls []string // the remove argument of each call
}

func (s *scriptedRing) RingChange(_ context.Context, req *tyrpb.RingChangeRequest) (*tyrpb.RingChangeResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, req.GetRemove())
	st := s.steps[min(len(s.calls), len(s.steps))-1]
	return st.resp, st.err
}

func serveScript(t *testing.T, s *scriptedRing) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	tyrpb.RegisterTyrServer(g, s)
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)
	return l.Addr().String()
}

// ringAnswer is a step answering the record of epoch in phase with members.
func ringAnswer(epoch uint64, phase rebalance.Phase, members ...ring.NodeID) step {
	rec := rebalance.Record{Epoch: epoch, Phase: phase}
	for _, id := range members {
		rec.New = append(rec.New, ring.Node{ID: id, Weight: 1})
	}
	b, err := json.Marshal(rec)
	if err != nil {
		panic(err) // a Record always marshals
	}
	return step{resp: &tyrpb.RingChangeResponse{Coordinator: "node2", Record: b}}
}

func TestProposeRemove(t *testing.T) {
	reset := step{err: status.Error(codes.Unavailable, "error reading from server: connection reset by peer")}
	busy := step{err: status.Error(codes.Unavailable, "rebalance: a ring change is still in progress (unavailable)")}
	refused := step{err: status.Error(codes.InvalidArgument, "rebalance: too few nodes (invalid argument): 2 nodes would remain, fewer than the replication factor 3")}
	for _, tc := range []struct {
		name  string
		steps []step
		epoch uint64 // of the record returned, when no error is wanted
		err   string // a part of the error wanted
		calls []string
		out   string // a part of the output wanted
	}{
		{name: "proposed at once", steps: []step{ringAnswer(5, rebalance.PhaseInstalling, "node1", "node2", "node3")},
			epoch: 5, calls: []string{"node4"}},
		// The coordinator installed the change and died before answering:
		// the ring read next shows node4 gone, and it is not asked twice.
		{name: "answer lost, change made", steps: []step{reset, ringAnswer(5, rebalance.PhaseCopying, "node1", "node2", "node3")},
			epoch: 5, calls: []string{"node4", ""}, out: "did not answer"},
		// It died before installing: node4 is still in the ring, so the
		// successor is asked again.
		{name: "answer lost, change not made", steps: []step{reset,
			ringAnswer(4, rebalance.PhaseClean, "node1", "node2", "node3", "node4"),
			ringAnswer(5, rebalance.PhaseInstalling, "node1", "node2", "node3")},
			epoch: 5, calls: []string{"node4", "", "node4"}, out: "did not answer"},
		{name: "busy, then proposed", steps: []step{busy, ringAnswer(6, rebalance.PhaseInstalling, "node1", "node2", "node3")},
			epoch: 6, calls: []string{"node4", "node4"}, out: "waiting for the ring change in progress"},
		{name: "refused", steps: []step{refused}, err: "fewer than the replication factor", calls: []string{"node4"}},
		{name: "still unavailable when the time is up", steps: []step{busy}, err: "in progress"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &scriptedRing{steps: tc.steps}
			ep := serveScript(t, s)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			var out bytes.Buffer
			rec, err := proposeRemove(ctx, &out, []string{ep}, "node4")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if rec.Epoch != tc.epoch || rec.InNew("node4") {
					t.Fatalf("record %+v, want epoch %d without node4", rec, tc.epoch)
				}
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if tc.calls != nil && strings.Join(s.calls, ",") != strings.Join(tc.calls, ",") {
				t.Fatalf("calls %q, want %q", s.calls, tc.calls)
			}
			if !strings.Contains(out.String(), tc.out) {
				t.Fatalf("output %q, want a part %q", out.String(), tc.out)
			}
		})
	}
}

// A node's shared settings are fields of node.json itself, as before they
// were grouped: a node.json written by an older build reads the same, and
// tyr cluster add copies them as one (nodeSettings) to the node it starts.
func TestNodeSettingsJSON(t *testing.T) {
	old := `{"id":"node1","listen":"127.0.0.1:1","gossip":"127.0.0.1:2","default_sync":true,"peers":null,` +
		`"reweight_interval":"5s","capacity_per_weight":"1GiB","min_free":"0","fs_home_bytes":"1MiB","fs_sweep_grace":"1s"}`
	var n localNode
	if err := json.Unmarshal([]byte(old), &n); err != nil {
		t.Fatal(err)
	}
	want := nodeSettings{Sync: true, ReweightInterval: "5s", CapacityPerWeight: "1GiB", MinFree: "0", FSHomeBytes: "1MiB", FSSweepGrace: "1s"}
	if n.nodeSettings != want {
		t.Fatalf("settings read %+v, want %+v", n.nodeSettings, want)
	}
	b, err := json.Marshal(&n)
	if err != nil {
		t.Fatal(err)
	}
	// The same fields, in whatever order.
	var got, wantFields map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(old), &wantFields); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(wantFields) {
		t.Fatalf("written as\n%s\nwant the fields of\n%s", b, old)
	}
}
