package node

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/balance"
	"github.com/tyrstore/tyr/internal/rebalance"
	"github.com/tyrstore/tyr/internal/ring"
)

const mib = 1 << 20

// fakeUsage answers from a table of reports, and fails for a missing node.
func fakeUsage(reports map[ring.NodeID]balance.NodeReport) UsageFunc {
	return func(_ context.Context, id ring.NodeID) (balance.NodeReport, error) {
		r, ok := reports[id]
		if !ok {
			return balance.NodeReport{}, errors.New("no answer")
		}
		return r, nil
	}
}

func equalRecord(t *testing.T, weight uint32) rebalance.Record {
	t.Helper()
	rec, err := rebalance.First("a", []ring.Node{{ID: "a", Weight: weight}, {ID: "b", Weight: weight}, {ID: "c", Weight: weight}})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// Capacities 1:2:4 under equal weights, each node storing the same: the
// small node is the most used, and the plan gives weights that follow the
// capacities.
func TestPlanReweightFollowsCapacity(t *testing.T) {
	rec := equalRecord(t, 128)
	usage := fakeUsage(map[ring.NodeID]balance.NodeReport{
		"a": {CapacityBytes: 64 * mib, StoredBytes: 30 * mib},
		"b": {CapacityBytes: 128 * mib, StoredBytes: 30 * mib},
		"c": {CapacityBytes: 256 * mib, StoredBytes: 30 * mib},
	})
	cfg := balance.Config{CapacityBytesPerWeight: mib}
	p, err := planReweight(context.Background(), usage, cfg, rec)
	if err != nil {
		t.Fatal(err)
	}
	if p.Decision != balance.Reweight {
		t.Fatalf("decision %v, want reweight (max/mean %.3f)", p.Decision, p.MaxMeanBefore)
	}
	w := map[ring.NodeID]uint32{}
	for _, x := range p.Nodes {
		w[x.ID] = x.Weight
	}
	if !(w["a"] < w["b"] && w["b"] < w["c"]) {
		t.Fatalf("weights %v do not follow capacities 1:2:4", p.Nodes)
	}
	if p.MovedFraction > balance.MovedFractionMaxDefault {
		t.Fatalf("moves %.3f of the data, above the bound %.2f", p.MovedFraction, balance.MovedFractionMaxDefault)
	}
	next, err := rebalance.Propose(rec, "a", p.Nodes, 2)
	if err != nil {
		t.Fatal(err)
	}
	if next.Epoch != rec.Epoch+1 || len(next.New) != 3 || len(next.Removed) != 0 {
		t.Fatalf("proposal %+v: want the next epoch with the same three members", next)
	}
}

// Usage in proportion to capacity is balanced: no reweight.
func TestPlanReweightBalancedKeeps(t *testing.T) {
	rec := equalRecord(t, 128)
	usage := fakeUsage(map[ring.NodeID]balance.NodeReport{
		"a": {CapacityBytes: 64 * mib, StoredBytes: 10 * mib},
		"b": {CapacityBytes: 128 * mib, StoredBytes: 20 * mib},
		"c": {CapacityBytes: 256 * mib, StoredBytes: 40 * mib},
	})
	p, err := planReweight(context.Background(), usage, balance.Config{CapacityBytesPerWeight: mib}, rec)
	if err != nil {
		t.Fatal(err)
	}
	if p.Decision != balance.KeepBalanced {
		t.Fatalf("decision %v, want keep (balanced)", p.Decision)
	}
}

// A member that does not answer skips the round.
func TestPlanReweightMissingMember(t *testing.T) {
	rec := equalRecord(t, 128)
	usage := fakeUsage(map[ring.NodeID]balance.NodeReport{
		"a": {CapacityBytes: 64 * mib, StoredBytes: 30 * mib},
		"b": {CapacityBytes: 128 * mib, StoredBytes: 30 * mib},
	})
	if _, err := planReweight(context.Background(), usage, balance.Config{CapacityBytesPerWeight: mib}, rec); err == nil {
		t.Fatal("planned without c's figures")
	}
}

func TestReweightDue(t *testing.T) {
	n := &Node{cfg: Config{ReweightInterval: 50 * time.Millisecond, Usage: fakeUsage(nil)}}
	rec := equalRecord(t, 1)
	if n.reweightDue(rec) {
		t.Fatal("due as soon as the epoch is clean")
	}
	time.Sleep(60 * time.Millisecond)
	if !n.reweightDue(rec) {
		t.Fatal("not due an interval after the epoch became clean")
	}
	if n.reweightDue(rec) {
		t.Fatal("due twice within an interval")
	}
	rec.Epoch++
	time.Sleep(60 * time.Millisecond)
	if n.reweightDue(rec) {
		t.Fatal("due at once for a new epoch")
	}
	off := &Node{cfg: Config{Usage: fakeUsage(nil)}}
	for range 2 {
		if off.reweightDue(rec) {
			t.Fatal("due with reweighting off")
		}
	}
}

func TestJoinWeight(t *testing.T) {
	n := &Node{cfg: Config{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Balance: balance.Config{CapacityBytesPerWeight: mib},
		Usage: fakeUsage(map[ring.NodeID]balance.NodeReport{"d": {CapacityBytes: 256 * mib}})}}
	if w := n.joinWeight(context.Background(), "d", 1); w != 256 {
		t.Fatalf("weight %d, want the capacity weight 256", w)
	}
	if w := n.joinWeight(context.Background(), "e", 3); w != 3 {
		t.Fatalf("weight %d, want the advertised 3 for a node that does not answer", w)
	}
	n.cfg.Usage = nil
	if w := n.joinWeight(context.Background(), "d", 2); w != 2 {
		t.Fatalf("weight %d, want the advertised 2 without usage", w)
	}
}

// The first ring takes the advertised weights (the view's ring, under
// which chunks were placed before it); the change from it, and only from
// it, gives every member its capacity weight, one that does not answer
// keeping its weight.
func TestFirstChange(t *testing.T) {
	n := &Node{cfg: Config{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Balance: balance.Config{CapacityBytesPerWeight: mib},
		Usage: fakeUsage(map[ring.NodeID]balance.NodeReport{"a": {CapacityBytes: 64 * mib}, "b": {CapacityBytes: 128 * mib}})}}
	first := equalRecord(t, 1)
	want := slices.Clone(first.New)
	if !n.firstChange(context.Background(), first, want) {
		t.Fatal("no change from the first ring")
	}
	if got := weightsString(want); got != "a=64 b=128 c=1" {
		t.Fatalf("weights %s, want a=64 b=128 c=1", got)
	}
	next, err := rebalance.Propose(first, "a", want, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(next.Moves) == 0 {
		t.Fatalf("epoch %d moves nothing", next.Epoch)
	}
	if n.firstChange(context.Background(), next, slices.Clone(next.New)) {
		t.Fatal("a change from a later ring")
	}
	n.cfg.Usage = nil
	if n.firstChange(context.Background(), first, slices.Clone(first.New)) {
		t.Fatal("a change without weighted tokens")
	}
}
