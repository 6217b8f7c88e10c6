package balance_test

// Unit and property tests of the weighting rule:
//
//   - Bad configs and reports give errors naming every problem, wrapping
//     ErrInvalid (or ErrStaleReport for a report of another epoch).
//   - Capacity weights round as documented; Initial and Join return sorted
//     memberships, and Join changes no existing weight.
//   - Plan keeps a balanced or empty cluster, and on random clusters every
//     proposal keeps the invariants of the package doc: weights within
//     their bounds and within StepMax of the current ones, bounded and
//     exactly reported movement, predicted gain worth the movement.
//   - Plan's output does not depend on the order of the report.
//   - OpsShare moves weight away from a node hot in operations.
//
// The property test prints its seed; rerun one with
//
//	TYR_SEED=N go test ./internal/balance -run TestPlanInvariants

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tyrstore/tyr/internal/balance"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/testseed"
)

// unit is the capacity per weight of the small clusters of these tests: a
// node of 64 units has 64 tokens.
const unit = 1 << 20

var testConfig = balance.Config{CapacityBytesPerWeight: unit}

// cluster is a small test cluster: capacities in units, stored bytes.
type cluster struct {
	ids        []ring.NodeID
	capacities []uint64
	stored     []uint64
	ops        []float64
}

// newCluster returns nodes n00, n01, ... of the given capacities (in units),
// all storing fill × their capacity.
func newCluster(capacityUnits []uint64, fill float64) cluster {
	var c cluster
	for i, u := range capacityUnits {
		c.ids = append(c.ids, ring.NodeID(fmt.Sprintf("n%02d", i)))
		c.capacities = append(c.capacities, u*unit)
		c.stored = append(c.stored, uint64(fill*float64(u*unit)))
		c.ops = append(c.ops, 0)
	}
	return c
}

func (c cluster) capacityList() []balance.Capacity {
	list := make([]balance.Capacity, len(c.ids))
	for i, id := range c.ids {
		list[i] = balance.Capacity{ID: id, Bytes: c.capacities[i]}
	}
	return list
}

func (c cluster) report(epoch uint64) balance.Report {
	r := balance.Report{Epoch: epoch}
	for i, id := range c.ids {
		r.Nodes = append(r.Nodes, balance.NodeReport{ID: id, CapacityBytes: c.capacities[i], StoredBytes: c.stored[i], OpsPerSecond: c.ops[i]})
	}
	return r
}

// initialRing builds the capacity-weighted ring of c at epoch 1.
func (c cluster) initialRing(t testing.TB) *ring.Ring {
	t.Helper()
	nodes, err := balance.Initial(testConfig, c.capacityList())
	if err != nil {
		t.Fatal(err)
	}
	return mustRing(t, 1, nodes)
}

func mustRing(t testing.TB, epoch uint64, nodes []ring.Node) *ring.Ring {
	t.Helper()
	r, err := ring.New(ring.Config{VirtualNodesPerWeight: 1}, epoch, nodes)
	if err != nil {
		t.Fatalf("ring.New: %v", err)
	}
	return r
}

// wantInvalid checks that err wraps ErrInvalid, has the package prefix and
// contains every one of want.
func wantInvalid(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", want)
	}
	if !errors.Is(err, balance.ErrInvalid) || !errors.Is(err, errs.ErrInvalidArgument) {
		t.Errorf("error %v does not wrap ErrInvalid", err)
	}
	if !strings.HasPrefix(err.Error(), "balance: ") {
		t.Errorf("error %q lacks the package prefix", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name string
		cfg  balance.Config
		want []string // nil means valid
	}{
		{name: "defaults", cfg: balance.Config{}},
		{name: "explicit", cfg: balance.Config{CapacityBytesPerWeight: 1 << 30, TriggerRatio: 1.1, Damping: 0.5,
			Tolerance: 0.02, StepMax: 2, FactorMax: 1, MovedFractionMax: 1, GainPerMoveMin: 1, OpsShare: 1}},
		{name: "unit too small", cfg: balance.Config{CapacityBytesPerWeight: 1}, want: []string{"capacity bytes per weight 1 below the minimum"}},
		{name: "trigger 1", cfg: balance.Config{TriggerRatio: 1}, want: []string{"trigger ratio 1 out of range (1, 10]"}},
		{name: "trigger NaN", cfg: balance.Config{TriggerRatio: math.NaN()}, want: []string{"trigger ratio NaN"}},
		{name: "damping", cfg: balance.Config{Damping: 1.5}, want: []string{"damping 1.5 out of range"}},
		{name: "tolerance", cfg: balance.Config{Tolerance: -0.1}, want: []string{"tolerance -0.1 out of range"}},
		{name: "step max", cfg: balance.Config{StepMax: math.Inf(1)}, want: []string{"step max +Inf out of range"}},
		{name: "factor max", cfg: balance.Config{FactorMax: 0.5}, want: []string{"factor max 0.5 out of range [1, 16]"}},
		{name: "moved fraction", cfg: balance.Config{MovedFractionMax: 2}, want: []string{"moved fraction max 2 out of range"}},
		{name: "gain", cfg: balance.Config{GainPerMoveMin: -1}, want: []string{"gain per move min -1 out of range"}},
		{name: "ops share", cfg: balance.Config{OpsShare: math.NaN()}, want: []string{"ops share NaN out of range [0, 1]"}},
		{name: "every problem", cfg: balance.Config{Damping: 2, OpsShare: 2},
			want: []string{"damping 2", "ops share 2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.WithDefaults().Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			wantInvalid(t, err, tt.want...)
			// Every entry point validates.
			_, err = balance.CapacityWeight(tt.cfg, unit)
			wantInvalid(t, err, tt.want...)
		})
	}
}

func TestCapacityWeight(t *testing.T) {
	tests := []struct {
		cfg      balance.Config
		capacity uint64
		want     uint32
	}{
		{balance.Config{}, 1 << 40, 128}, // 1 TiB at the default 8 GiB per weight
		{testConfig, 64 * unit, 64},
		{testConfig, 3 * unit / 2, 2}, // rounds half away from zero
		{testConfig, 14 * unit / 10, 1},
		{testConfig, 1, 1}, // at least 1
	}
	for _, tt := range tests {
		got, err := balance.CapacityWeight(tt.cfg, tt.capacity)
		if err != nil || got != tt.want {
			t.Errorf("CapacityWeight(%d bytes) = %d, %v; want %d", tt.capacity, got, err, tt.want)
		}
	}
	_, err := balance.CapacityWeight(testConfig, 0)
	wantInvalid(t, err, "capacity 0")
	_, err = balance.CapacityWeight(testConfig, math.MaxUint64)
	wantInvalid(t, err, "above the limit of 4294967295")
}

func TestInitial(t *testing.T) {
	nodes, err := balance.Initial(testConfig, []balance.Capacity{{"c", 4 * unit}, {"a", unit}, {"b", 2 * unit}})
	want := []ring.Node{{ID: "a", Weight: 1}, {ID: "b", Weight: 2}, {ID: "c", Weight: 4}}
	if err != nil || !reflect.DeepEqual(nodes, want) {
		t.Fatalf("Initial = %v, %v; want %v", nodes, err, want)
	}
	_, err = balance.Initial(testConfig, nil)
	wantInvalid(t, err, "no nodes")
	_, err = balance.Initial(testConfig, []balance.Capacity{{"a", 0}, {"b", unit}, {"b", unit}})
	wantInvalid(t, err, `node "a": `, "capacity 0", `node "b" listed more than once`)
}

func TestPlanRejectsBadReports(t *testing.T) {
	c := newCluster([]uint64{64, 64, 64}, 0.5)
	r := c.initialRing(t)
	good := c.report(1)
	tests := []struct {
		name   string
		change func(*balance.Report)
		want   []string
	}{
		{"unknown node", func(rep *balance.Report) { rep.Nodes[0].ID = "stranger" },
			[]string{`node "stranger" is not a member of the ring at epoch 1`, `member "n00" has no report`}},
		{"missing node", func(rep *balance.Report) { rep.Nodes = rep.Nodes[1:] }, []string{`member "n00" has no report`}},
		{"repeated node", func(rep *balance.Report) { rep.Nodes = append(rep.Nodes, rep.Nodes[1]) },
			[]string{`node "n01" reported more than once`}},
		{"zero capacity", func(rep *balance.Report) { rep.Nodes[2].CapacityBytes = 0 }, []string{`node "n02": capacity 0`}},
		{"NaN ops", func(rep *balance.Report) { rep.Nodes[0].OpsPerSecond = math.NaN() }, []string{"ops per second NaN"}},
		{"infinite ops", func(rep *balance.Report) { rep.Nodes[0].OpsPerSecond = math.Inf(1) }, []string{"ops per second +Inf"}},
		{"negative ops", func(rep *balance.Report) { rep.Nodes[0].OpsPerSecond = -1 }, []string{"ops per second -1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := good
			rep.Nodes = slices.Clone(good.Nodes)
			tt.change(&rep)
			_, err := balance.Plan(testConfig, r, rep)
			wantInvalid(t, err, tt.want...)
			_, err = balance.Join(testConfig, r, rep, balance.Capacity{ID: "new", Bytes: unit})
			wantInvalid(t, err, tt.want...)
		})
	}

	stale := c.report(2)
	_, err := balance.Plan(testConfig, r, stale)
	if !errors.Is(err, balance.ErrStaleReport) || !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("Plan with a report of epoch 2 on a ring of epoch 1: %v; want ErrStaleReport", err)
	}
	_, err = balance.Plan(balance.Config{Damping: 3}, r, good)
	wantInvalid(t, err, "damping 3")
}

func TestPlanKeepsBalancedAndEmptyClusters(t *testing.T) {
	for _, fill := range []float64{0.5, 0} {
		c := newCluster([]uint64{64, 128, 256, 64}, fill)
		r := c.initialRing(t)
		p, err := balance.Plan(testConfig, r, c.report(1))
		if err != nil {
			t.Fatal(err)
		}
		if p.Decision != balance.KeepBalanced || p.MaxMeanBefore > 1.0001 || p.Changed != 0 ||
			!reflect.DeepEqual(p.Nodes, r.Nodes()) {
			t.Errorf("fill %.1f: Plan = %+v; want to keep the ring, max/mean 1", fill, p)
		}
	}
}

// randomCluster returns a cluster of 4 to 40 nodes of capacities 1:2:4 (32
// to 128 units), with stored bytes spread ±50% around an even fill, and now
// and then an empty node.
func randomCluster(rng *rand.Rand) cluster {
	n := 4 + rng.IntN(37)
	units := make([]uint64, n)
	for i := range units {
		units[i] = 32 << rng.IntN(3)
	}
	c := newCluster(units, 0.4)
	for i := range c.stored {
		c.stored[i] = uint64(float64(c.stored[i]) * (0.5 + rng.Float64()))
		if rng.IntN(20) == 0 {
			c.stored[i] = 0
		}
	}
	return c
}

// TestPlanInvariants checks every invariant of the package doc on the
// proposals for random clusters, starting both from capacity weights and
// from weights already corrected.
func TestPlanInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(testseed.FromEnv(t, "TYR_SEED"), 0xba1a))
	cfg := testConfig.WithDefaults()
	decisions := map[balance.Decision]int{}
	for range 40 {
		c := randomCluster(rng)
		r := c.initialRing(t)
		if rng.IntN(2) == 0 { // start from corrected weights
			nodes := r.Nodes()
			for i := range nodes {
				nodes[i].Weight = max(1, uint32(float64(nodes[i].Weight)*(0.7+0.6*rng.Float64())))
			}
			r = mustRing(t, 1, nodes)
		}
		p, err := balance.Plan(cfg, r, c.report(1))
		if err != nil {
			t.Fatal(err)
		}
		decisions[p.Decision]++
		checkProposal(t, cfg, c, r, p)
	}
	t.Logf("decisions: %v", decisions)
	if decisions[balance.Reweight] == 0 {
		t.Error("no random cluster was reweighted; the test checks nothing")
	}
}

// checkProposal asserts the invariants of one proposal for c on r.
func checkProposal(t *testing.T, cfg balance.Config, c cluster, r *ring.Ring, p balance.Proposal) {
	t.Helper()
	if !slices.IsSortedFunc(p.Nodes, func(a, b ring.Node) int { return strings.Compare(string(a.ID), string(b.ID)) }) {
		t.Fatalf("proposal nodes not sorted by ID: %v", p.Nodes)
	}
	switch p.Decision {
	case balance.KeepBalanced:
		if p.MaxMeanBefore > cfg.TriggerRatio {
			t.Errorf("kept as balanced at max/mean %.4f, above the trigger %.2f", p.MaxMeanBefore, cfg.TriggerRatio)
		}
		return
	case balance.KeepNotWorthMoving:
		if !reflect.DeepEqual(p.Nodes, r.Nodes()) {
			t.Errorf("kept, but the nodes differ from the current ones")
		}
		return
	case balance.Reweight:
	default:
		t.Fatalf("decision %v", p.Decision)
	}
	current := r.Nodes()
	capacity := map[ring.NodeID]uint64{}
	for i, id := range c.ids {
		capacity[id] = c.capacities[i]
	}
	changed := 0
	for i, n := range p.Nodes {
		base := float64(capacity[n.ID]) / float64(cfg.CapacityBytesPerWeight)
		low := max(1, math.Ceil(base/cfg.FactorMax))
		high := max(low, math.Floor(base*cfg.FactorMax))
		w, was := float64(n.Weight), float64(current[i].Weight)
		if w < low || w > high {
			t.Errorf("%s: weight %v outside its bounds [%v, %v]", n.ID, w, low, high)
		}
		inBounds := was >= low && was <= high
		if inBounds && (w > math.Round(was*cfg.StepMax)+1 || w < math.Round(was/cfg.StepMax)-1) {
			t.Errorf("%s: weight %v -> %v, more than a factor %v", n.ID, was, w, cfg.StepMax)
		}
		if w != was {
			changed++
		}
	}
	if changed != p.Changed || changed == 0 {
		t.Errorf("Changed %d, but %d weights differ", p.Changed, changed)
	}
	moved := ring.MovedFraction(r, mustRing(t, 2, p.Nodes))
	if moved != p.MovedFraction || moved > cfg.MovedFractionMax {
		t.Errorf("MovedFraction %v reported, %v exact, limit %v", p.MovedFraction, moved, cfg.MovedFractionMax)
	}
	gain := p.MaxMeanBefore - p.MaxMeanPredicted
	if p.MaxMeanBefore <= cfg.TriggerRatio || gain <= 0 || gain < cfg.GainPerMoveMin*moved {
		t.Errorf("reweighted from %.4f to a predicted %.4f moving %.4f: not worth it", p.MaxMeanBefore, p.MaxMeanPredicted, moved)
	}
}

// TestPlanIgnoresReportOrder shuffles the report: the proposal is the same.
func TestPlanIgnoresReportOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5 {
		c := randomCluster(rng)
		r := c.initialRing(t)
		rep := c.report(1)
		want, err := balance.Plan(testConfig, r, rep)
		if err != nil {
			t.Fatal(err)
		}
		rng.Shuffle(len(rep.Nodes), func(i, j int) { rep.Nodes[i], rep.Nodes[j] = rep.Nodes[j], rep.Nodes[i] })
		got, err := balance.Plan(testConfig, r, rep)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("shuffled report: %+v, %v; want %+v", got, err, want)
		}
	}
}

// TestPlanLimits checks that the limits on movement and gain hold when
// they bind, and that FactorMax 1 keeps the capacity weights.
func TestPlanLimits(t *testing.T) {
	c := newCluster([]uint64{64, 64, 64, 64, 128, 128, 256, 256}, 0.4)
	c.stored[0] *= 2 // one node twice as used as the rest
	r := c.initialRing(t)
	rep := c.report(1)

	free, err := balance.Plan(testConfig, r, rep)
	if err != nil || free.Decision != balance.Reweight {
		t.Fatalf("Plan = %+v, %v; want a reweighting", free, err)
	}
	t.Logf("unconstrained: %.4f -> %.4f moving %.4f", free.MaxMeanBefore, free.MaxMeanPredicted, free.MovedFraction)

	bounded := testConfig
	bounded.MovedFractionMax = free.MovedFraction / 2
	p, err := balance.Plan(bounded, r, rep)
	if err != nil || p.MovedFraction > bounded.MovedFractionMax {
		t.Errorf("MovedFractionMax %.4f: Plan = %+v, %v", bounded.MovedFractionMax, p, err)
	}

	greedy := testConfig
	greedy.GainPerMoveMin = balance.GainPerMoveMinMax
	p, err = balance.Plan(greedy, r, rep)
	if err != nil || p.Decision != balance.KeepNotWorthMoving {
		t.Errorf("GainPerMoveMin %v: Plan = %v, %v; want %v", greedy.GainPerMoveMin, p.Decision, err, balance.KeepNotWorthMoving)
	}

	fixed := testConfig
	fixed.FactorMax = 1
	p, err = balance.Plan(fixed, r, rep)
	if err != nil || p.Decision != balance.KeepNotWorthMoving || !reflect.DeepEqual(p.Nodes, r.Nodes()) {
		t.Errorf("FactorMax 1: Plan = %+v, %v; want the capacity weights kept", p, err)
	}
}

// TestPlanOpsShare gives one node three times the operations of the others
// on an even spread of bytes: ignored by default, shed with OpsShare.
func TestPlanOpsShare(t *testing.T) {
	c := newCluster([]uint64{64, 64, 64, 64, 64, 64}, 0.5)
	for i := range c.ops {
		c.ops[i] = 100
	}
	c.ops[2] = 300
	r := c.initialRing(t) // every node half full: only operations differ
	p, err := balance.Plan(testConfig, r, c.report(1))
	if err != nil || p.Decision != balance.KeepBalanced {
		t.Fatalf("OpsShare 0: Plan = %v, %v; want %v", p.Decision, err, balance.KeepBalanced)
	}
	cfg := testConfig
	cfg.OpsShare = 0.5
	p, err = balance.Plan(cfg, r, c.report(1))
	if err != nil || p.Decision != balance.Reweight {
		t.Fatalf("OpsShare 0.5: Plan = %+v, %v; want a reweighting", p, err)
	}
	if w := p.Nodes[2].Weight; w >= 64 {
		t.Errorf("the hot node keeps weight %d, want less than 64", w)
	}
}

func TestJoin(t *testing.T) {
	c := newCluster([]uint64{64, 128, 256}, 0.5)
	// Corrected weights averaging 1.25 × the capacity weights.
	nodes := []ring.Node{{ID: "n00", Weight: 80}, {ID: "n01", Weight: 160}, {ID: "n02", Weight: 320}}
	r := mustRing(t, 1, nodes)
	joined, err := balance.Join(testConfig, r, c.report(1), balance.Capacity{ID: "m", Bytes: 100 * unit})
	if err != nil {
		t.Fatal(err)
	}
	want := append(slices.Clone(nodes), ring.Node{ID: "m", Weight: 125})
	slices.SortFunc(want, func(a, b ring.Node) int { return strings.Compare(string(a.ID), string(b.ID)) })
	if !reflect.DeepEqual(joined, want) {
		t.Fatalf("Join = %v, want %v", joined, want)
	}
	after := mustRing(t, 2, joined)
	if moved, owns := ring.MovedFraction(r, after), after.Ownership()["m"]; moved != owns {
		t.Errorf("the join moves %v of the hash space; the newcomer owns %v", moved, owns)
	}

	_, err = balance.Join(testConfig, r, c.report(1), balance.Capacity{ID: "n01", Bytes: unit})
	wantInvalid(t, err, `node "n01" is already a member`)
	_, err = balance.Join(testConfig, r, c.report(1), balance.Capacity{ID: "m", Bytes: 0})
	wantInvalid(t, err, "capacity 0")
}

func TestSummarize(t *testing.T) {
	rep := balance.Report{Nodes: []balance.NodeReport{
		{ID: "b", CapacityBytes: 200, StoredBytes: 50, OpsPerSecond: 10},
		{ID: "a", CapacityBytes: 100, StoredBytes: 50, OpsPerSecond: 10},
	}}
	s, err := balance.Summarize(balance.Config{}, rep)
	if err != nil {
		t.Fatal(err)
	}
	// Utilizations 0.5 and 0.25, mean 0.375; pressures 1.5 and 0.75.
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-12 }
	if s.Nodes[0].ID != "a" || !near(s.Nodes[0].Utilization, 0.5) || !near(s.Nodes[1].Utilization, 0.25) ||
		!near(s.Nodes[0].Pressure, 1.5) || !near(s.Nodes[1].Pressure, 0.75) {
		t.Errorf("nodes %+v", s.Nodes)
	}
	if !near(s.UtilizationMaxMean, 0.5/0.375) || !near(s.OpsMaxMean, 0.1/0.075) || !near(s.PressureMaxMean, 1.5/1.125) {
		t.Errorf("summary %+v", s)
	}

	_, err = balance.Summarize(balance.Config{}, balance.Report{})
	wantInvalid(t, err, "no nodes")
	rep.Nodes = append(rep.Nodes, rep.Nodes[0], rep.Nodes[0], balance.NodeReport{ID: "c"})
	_, err = balance.Summarize(balance.Config{}, rep)
	wantInvalid(t, err, `node "b" reported more than once`, `node "c": capacity 0`)
	if strings.Count(err.Error(), "more than once") != 1 {
		t.Errorf("a node repeated twice is reported more than once: %v", err)
	}
}

func TestDecisionString(t *testing.T) {
	for d, want := range map[balance.Decision]string{
		balance.KeepBalanced: "keep (balanced)", balance.KeepNotWorthMoving: "keep (not worth moving)",
		balance.Reweight: "reweight", 0: "Decision(0)",
	} {
		if got := d.String(); got != want {
			t.Errorf("%d: %q, want %q", d, got, want)
		}
	}
}
