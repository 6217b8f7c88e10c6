// Package balance computes the ring weights that keep tyr's nodes evenly
// used: weights in proportion to each node's capacity first, then corrected
// by the utilization the nodes measure, so that the ratio of the most used
// node's utilization to the mean utilization (max/mean, the OSTCost of the
// iez load balancer) approaches 1 on heterogeneous nodes and skewed data.
// It is pure and deterministic: no goroutines, clock, randomness or I/O, and
// no output depends on map order or on the order of its input. The ring
// coordinator calls it and publishes the memberships it returns; moving the
// data is not its job.
//
// # Utilization and pressure
//
// A node reports its capacity (configured or measured disk size) and the
// bytes it stores, and optionally the operations per second it serves
// (NodeReport). Its utilization is stored bytes / capacity. The pressure of
// a node compares it with the cluster as a whole:
//
//	pressure = (1 − OpsShare) × utilization / (Σ stored / Σ capacity)
//	         + OpsShare × (ops/s / capacity) / (Σ ops/s / Σ capacity)
//
// so pressure 1 means "exactly its fair part". With the default OpsShare of
// 0 the pressure is the utilization relative to the cluster's, and max/mean
// pressure is max/mean utilization. The ops term assumes that a node's
// capacity for operations grows with its disk, as it does for nodes built
// from the same parts; a cluster whose nodes differ in other ways should
// leave OpsShare at 0. An empty cluster (nothing stored, nothing served) has
// pressure 1 everywhere: it is balanced.
//
// # The weighting rule
//
// A node of capacity c starts with the capacity weight
// round(c / CapacityBytesPerWeight), at least 1 (Initial, and Join for a
// node joining a running cluster). One weight unit is
// ring.Config.VirtualNodesPerWeight tokens; load-aware clusters use 1, so a
// weight is a token count and one unit is a fine step (a 1 TiB node at the
// default 8 GiB per weight has 128 tokens: steps of 0.8%).
//
// On a schedule, and once the data of a membership change has settled, the
// coordinator calls Plan with a report measured under the current ring.
// Plan:
//
//  1. Does nothing if max/mean pressure is at most TriggerRatio (default
//     1.04, below the goal of 1.05): the cluster is balanced enough, and
//     every change moves data.
//  2. Otherwise multiplies the weight of every node whose pressure is above
//     1 + Tolerance (default 1%) or below 1 − 3 × Tolerance by
//     pressure^−Damping, rounds it, and keeps it within a factor StepMax
//     (default 1.5) of the current weight and within [capacity weight /
//     FactorMax, capacity weight × FactorMax] (default FactorMax 2).
//     Removing a token hands its arc to the next token, and a node's tokens
//     do not depend on its weight, so cutting a node's weight by x% sheds
//     about x% of its data: the rule is a Newton step on utilization. The
//     band is wider below 1 so that a node that just shed a lump of data is
//     not grown straight back, which would move the same arcs to and fro.
//  3. Predicts the outcome on the candidate ring: each node's stored bytes
//     scale with its ownership of the hash space (a node losing arcs keeps
//     its own density; a node gaining arcs gains at the cluster's mean
//     density), and ring.MovedFraction gives the exact fraction of the hash
//     space that changes primary, the fraction of data to move. Then it
//     corrects the candidate again by its predicted pressures, up to 10
//     candidate rings in all, halving the exponent whenever a candidate
//     predicts no improvement: a node's share also moves when its
//     neighbours on the ring gain or shed tokens, which one correction
//     cannot foresee but the prediction sees exactly. No data moves between
//     these refinements.
//  4. Proposes the candidate with the lowest predicted max/mean among
//     those worth moving: the moved fraction is at most MovedFractionMax
//     (default 10%), the predicted max/mean is lower than the measured one,
//     and the drop is at least GainPerMoveMin (default 0.5) × the moved
//     fraction: every 1% of the data moved must buy at least 0.005 of
//     max/mean. If no candidate is worth moving, Plan keeps the ring.
//
// One call is one step: the coordinator publishes the new membership, lets
// the data move, measures again and calls Plan again, until Plan keeps the
// ring. What the prediction cannot see is the content of the arcs that
// move: a chunk cannot be split, so the measured result differs from the
// prediction by the lumpiness of the data, which is why several steps may
// be needed and why the trigger sits below the goal. In simulation (256 and
// 1,024 nodes of capacities 1:2:4 holding Pareto-sized blobs, see
// docs/placement.md) max/mean goes from 1.18–1.39 under capacity weights to
// 1.02–1.04 in one to three steps that move 4–6% of the data in all.
//
// # Invariants
//
//   - Every weight Plan and Join return is in [max(1, ⌈b/FactorMax⌉),
//     max(that, ⌊b × FactorMax⌋)], where b = capacity / CapacityBytesPerWeight,
//     and at most math.MaxUint32. Load-awareness can therefore never give a
//     node more than FactorMax times the data its capacity calls for, nor
//     hide a wrong capacity by more than that.
//   - Plan changes a weight by at most a factor StepMax (and one unit of
//     rounding), except to bring a weight back within those bounds when the
//     node's capacity changed.
//   - A Reweight proposal moves at most MovedFractionMax of the hash space
//     (exactly, by ring.MovedFraction), predicts a max/mean below the
//     measured one, and a drop of at least GainPerMoveMin × the moved
//     fraction; otherwise Plan keeps the current weights.
//   - Join changes no existing weight, so only the newcomer's arcs move:
//     the least a join can move.
//   - Memberships are returned sorted by node ID and computed in that
//     order, so equal inputs give equal outputs whatever their order.
//
// # Limits and costs
//
// A report lists each member of the current ring exactly once, so its size
// is bounded by the ring's. Capacities must be at least 1 byte, operation
// rates finite and non-negative; stored bytes may exceed the capacity. The
// ring bounds the total number of tokens (ring.Config.TokensMax, 12 bytes
// each in every process holding the ring): 1,024 nodes of 1, 2 and 4 TiB at
// 8 GiB per weight and one token per weight need about 300,000 tokens, 3.5
// MiB, and at most FactorMax times that once corrected. Plan builds at most
// 10 candidate rings per call, each costing what ring.New costs (tens of
// milliseconds for 300,000 tokens).
package balance

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/ring"
)

// Defaults and bounds of Config. Zero fields take the default; a field that
// should be (effectively) zero, such as Tolerance, takes a tiny positive
// value instead.
const (
	// CapacityBytesPerWeightDefault is 8 GiB per unit of weight: a 1 TiB
	// node weighs 128.
	CapacityBytesPerWeightDefault = 8 << 30
	// CapacityBytesPerWeightMin bounds CapacityBytesPerWeight below (1 MiB).
	CapacityBytesPerWeightMin = 1 << 20
	// TriggerRatioDefault is the max/mean pressure above which Plan acts,
	// below the goal of 1.05 so that the cluster is corrected before it
	// misses the goal.
	TriggerRatioDefault = 1.04
	// TriggerRatioMax bounds TriggerRatio.
	TriggerRatioMax = 10.0
	// DampingDefault is the exponent of the correction: 1 is a full Newton
	// step, which removal of tokens follows closely (see the package doc).
	DampingDefault = 1.0
	// ToleranceDefault is the distance from pressure 1 within which a node
	// keeps its weight.
	ToleranceDefault = 0.01
	// ToleranceMax bounds Tolerance.
	ToleranceMax = 0.5
	// StepMaxDefault bounds one correction to a factor of 1.5 either way.
	StepMaxDefault = 1.5
	// StepMaxCeiling bounds StepMax.
	StepMaxCeiling = 4.0
	// FactorMaxDefault keeps every weight within half and twice its
	// capacity weight.
	FactorMaxDefault = 2.0
	// FactorMaxCeiling bounds FactorMax.
	FactorMaxCeiling = 16.0
	// MovedFractionMaxDefault is the largest fraction of the hash space one
	// recomputation may move: 10%.
	MovedFractionMaxDefault = 0.10
	// GainPerMoveMinDefault is the least drop of max/mean per unit of data
	// moved: 0.005 of max/mean for every 1% moved.
	GainPerMoveMinDefault = 0.5
	// GainPerMoveMinMax bounds GainPerMoveMin.
	GainPerMoveMinMax = 100.0
)

var (
	// ErrInvalid marks a bad Config, report or argument. It is
	// errs.ErrInvalidArgument.
	ErrInvalid = errs.ErrInvalidArgument
	// ErrStaleReport is returned by Plan for a report measured under
	// another ring epoch than the current one. It wraps errs.ErrConflict:
	// measure again under the current ring and retry.
	ErrStaleReport = fmt.Errorf("balance: report measured under another ring (%w)", errs.ErrConflict)
)

// Config holds the parameters of the weighting rule. The coordinator of a
// cluster uses one Config; the weights it publishes are part of the ring
// membership, so other processes need not know it.
type Config struct {
	// CapacityBytesPerWeight is the capacity that earns one unit of weight.
	// Default CapacityBytesPerWeightDefault (8 GiB), at least
	// CapacityBytesPerWeightMin. Fix it when the cluster is created: a
	// different value rescales every capacity weight, and so moves data.
	// Smaller values give finer steps and more tokens; let the smallest
	// node weigh about 100 or more, so that one unit is a step of 1% or
	// less (the simulation's smallest nodes weigh 128).
	CapacityBytesPerWeight uint64
	// TriggerRatio is the max/mean pressure at or below which Plan keeps
	// the ring. Default TriggerRatioDefault (1.04), in (1, TriggerRatioMax].
	TriggerRatio float64
	// Damping is the exponent of the correction factor pressure^−Damping.
	// Default DampingDefault (1), in (0, 1]. Lower is slower and smoother.
	Damping float64
	// Tolerance is how far from 1 a node's pressure may be before its weight
	// changes. Default ToleranceDefault (0.01), in (0, ToleranceMax].
	Tolerance float64
	// StepMax bounds the factor by which one Plan changes a weight. Default
	// StepMaxDefault (1.5), in (1, StepMaxCeiling].
	StepMax float64
	// FactorMax bounds a weight to [capacity weight / FactorMax, capacity
	// weight × FactorMax]. Default FactorMaxDefault (2), in [1,
	// FactorMaxCeiling]; 1 turns load-awareness off: weights stay the
	// capacity weights.
	FactorMax float64
	// MovedFractionMax is the largest fraction of the hash space one
	// proposal may move. Default MovedFractionMaxDefault (0.10), in (0, 1].
	MovedFractionMax float64
	// GainPerMoveMin is the least predicted drop of max/mean per fraction
	// of the hash space moved. Default GainPerMoveMinDefault (0.5), in (0,
	// GainPerMoveMinMax].
	GainPerMoveMin float64
	// OpsShare is the weight of operations per second in the pressure; the
	// rest is stored bytes. Default 0, at most 1.
	OpsShare float64
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.CapacityBytesPerWeight == 0 {
		c.CapacityBytesPerWeight = CapacityBytesPerWeightDefault
	}
	defaults := []struct {
		field *float64
		value float64
	}{
		{&c.TriggerRatio, TriggerRatioDefault},
		{&c.Damping, DampingDefault},
		{&c.Tolerance, ToleranceDefault},
		{&c.StepMax, StepMaxDefault},
		{&c.FactorMax, FactorMaxDefault},
		{&c.MovedFractionMax, MovedFractionMaxDefault},
		{&c.GainPerMoveMin, GainPerMoveMinDefault},
	}
	for _, d := range defaults {
		if *d.field == 0 {
			*d.field = d.value
		}
	}
	return c
}

// Validate reports every problem with c, or nil. Zero fields other than
// OpsShare are problems: call WithDefaults first (every function of the
// package does).
func (c Config) Validate() error {
	var problems []error
	if c.CapacityBytesPerWeight < CapacityBytesPerWeightMin {
		problems = append(problems, fmt.Errorf("capacity bytes per weight %d below the minimum of %d",
			c.CapacityBytesPerWeight, CapacityBytesPerWeightMin))
	}
	// Each check is written so that NaN fails it.
	ranges := []struct {
		name         string
		value        float64
		low, high    float64
		openLow      bool
		allowedRange string
	}{
		{"trigger ratio", c.TriggerRatio, 1, TriggerRatioMax, true, "(1, 10]"},
		{"damping", c.Damping, 0, 1, true, "(0, 1]"},
		{"tolerance", c.Tolerance, 0, ToleranceMax, true, "(0, 0.5]"},
		{"step max", c.StepMax, 1, StepMaxCeiling, true, "(1, 4]"},
		{"factor max", c.FactorMax, 1, FactorMaxCeiling, false, "[1, 16]"},
		{"moved fraction max", c.MovedFractionMax, 0, 1, true, "(0, 1]"},
		{"gain per move min", c.GainPerMoveMin, 0, GainPerMoveMinMax, true, "(0, 100]"},
		{"ops share", c.OpsShare, 0, 1, false, "[0, 1]"},
	}
	for _, r := range ranges {
		inside := r.value >= r.low && r.value <= r.high
		if r.openLow {
			inside = r.value > r.low && r.value <= r.high
		}
		if !inside {
			problems = append(problems, fmt.Errorf("%s %v out of range %s", r.name, r.value, r.allowedRange))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("balance: %w: config: %w", ErrInvalid, errors.Join(problems...))
}

// Capacity is the capacity of one node.
type Capacity struct {
	// ID names the node.
	ID ring.NodeID
	// Bytes is the node's capacity: its configured or measured disk size.
	// At least 1.
	Bytes uint64
}

// NodeReport is what one node reports about itself.
type NodeReport struct {
	// ID names the node.
	ID ring.NodeID
	// CapacityBytes is the node's capacity. At least 1.
	CapacityBytes uint64
	// StoredBytes is the number of bytes the node stores. It may exceed
	// CapacityBytes (a node overfull against a configured capacity).
	StoredBytes uint64
	// OpsPerSecond is the rate of operations the node served, averaged over
	// the reporting period. Finite and at least 0.
	OpsPerSecond float64
}

// Report is one measurement of the cluster: a NodeReport for every member
// of the ring that was active while it was taken.
type Report struct {
	// Epoch is the epoch of that ring (ring.Ring.Epoch).
	Epoch uint64
	// Nodes holds one report per member, in any order.
	Nodes []NodeReport
}

// CapacityWeight returns the capacity weight of a node of capacityBytes:
// round(capacityBytes / CapacityBytesPerWeight), at least 1. It fails,
// wrapping ErrInvalid, on a zero capacity or weight above math.MaxUint32.
func CapacityWeight(cfg Config, capacityBytes uint64) (uint32, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return 0, err
	}
	if capacityBytes == 0 {
		return 0, fmt.Errorf("balance: %w: capacity 0; a node's capacity must be at least 1 byte", ErrInvalid)
	}
	w := math.Round(baseWeight(cfg, capacityBytes))
	if w > math.MaxUint32 {
		return 0, fmt.Errorf("balance: %w: capacity %d bytes is %.0f weight units, above the limit of %d; raise capacity bytes per weight",
			ErrInvalid, capacityBytes, w, uint32(math.MaxUint32))
	}
	return max(1, uint32(w)), nil
}

// baseWeight returns capacity / CapacityBytesPerWeight, unrounded.
func baseWeight(cfg Config, capacityBytes uint64) float64 {
	return float64(capacityBytes) / float64(cfg.CapacityBytesPerWeight)
}

// weightBounds returns the least and greatest weight of a node of capacity
// weight base (unrounded): [max(1, ⌈base/FactorMax⌉), ⌊base × FactorMax⌋],
// the upper bound raised to the lower one and capped at math.MaxUint32.
func weightBounds(cfg Config, base float64) (low, high uint32) {
	lowF := max(1, math.Ceil(base/cfg.FactorMax))
	highF := max(lowF, math.Floor(base*cfg.FactorMax))
	return uint32(min(lowF, math.MaxUint32)), uint32(min(highF, math.MaxUint32))
}

// Initial returns the membership of a new cluster: every node at its
// capacity weight, sorted by ID. It fails, wrapping ErrInvalid and listing
// every problem, on an empty list, a duplicate ID or a bad capacity. Node
// IDs are checked by ring.New.
func Initial(cfg Config, capacities []Capacity) ([]ring.Node, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(capacities) == 0 {
		return nil, fmt.Errorf("balance: %w: no nodes", ErrInvalid)
	}
	var problems []error
	nodes := make([]ring.Node, 0, len(capacities))
	for _, c := range capacities {
		w, err := CapacityWeight(cfg, c.Bytes)
		if err != nil {
			problems = append(problems, fmt.Errorf("node %q: %w", c.ID, err))
			continue
		}
		nodes = append(nodes, ring.Node{ID: c.ID, Weight: w})
	}
	sortNodes(nodes)
	for i := 1; i < len(nodes); i++ {
		if nodes[i].ID == nodes[i-1].ID {
			problems = append(problems, fmt.Errorf("node %q listed more than once", nodes[i].ID))
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("balance: %w: capacities: %w", ErrInvalid, errs.JoinBounded(problems))
	}
	return nodes, nil
}

// Join returns the membership of current with newcomer added. Existing
// weights do not change, so the data that moves is exactly the newcomer's
// share. The newcomer's weight is its capacity weight times the mean
// correction of the current nodes (Σ weight / Σ capacity weight, from the
// capacities in report), so that it starts with the utilization the others
// have, within the bounds of the package doc. Only the capacities of report
// are used; its epoch is not checked. It fails, wrapping ErrInvalid, if the
// report does not list exactly the current members with valid capacities,
// if newcomer is already a member, or if its capacity is 0.
func Join(cfg Config, current *ring.Ring, report Report, newcomer Capacity) ([]ring.Node, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	states, err := matchReport(current, report)
	if err != nil {
		return nil, err
	}
	if current.Contains(newcomer.ID) {
		return nil, fmt.Errorf("balance: %w: join: node %q is already a member", ErrInvalid, newcomer.ID)
	}
	if newcomer.Bytes == 0 {
		return nil, fmt.Errorf("balance: %w: join: node %q has capacity 0; it must be at least 1 byte", ErrInvalid, newcomer.ID)
	}
	var weights, bases float64
	for _, s := range states {
		weights += float64(s.weight)
		bases += baseWeight(cfg, s.capacity)
	}
	base := baseWeight(cfg, newcomer.Bytes)
	low, high := weightBounds(cfg, base)
	w := math.Round(base * weights / bases)
	nodes := current.Nodes()
	nodes = append(nodes, ring.Node{ID: newcomer.ID, Weight: uint32(min(max(w, float64(low)), float64(high)))})
	sortNodes(nodes)
	return nodes, nil
}

// nodeState is what Plan knows of one member.
type nodeState struct {
	id       ring.NodeID
	weight   uint32
	capacity uint64
	stored   uint64
	ops      float64
}

// matchReport checks report against the members of current and returns
// one state per member, in the ring's (ID) order. It lists every problem:
// unknown or repeated nodes, members without a report, zero capacities and
// bad operation rates.
func matchReport(current *ring.Ring, report Report) ([]nodeState, error) {
	members := current.Nodes()
	states := make([]nodeState, len(members))
	seen := make([]bool, len(members))
	for i, m := range members {
		states[i] = nodeState{id: m.ID, weight: m.Weight}
	}
	var problems []error
	for _, n := range report.Nodes {
		i, ok := slices.BinarySearchFunc(members, n.ID, func(m ring.Node, id ring.NodeID) int {
			return strings.Compare(string(m.ID), string(id))
		})
		switch {
		case !ok:
			problems = append(problems, fmt.Errorf("node %q is not a member of the ring at epoch %d", n.ID, current.Epoch()))
			continue
		case seen[i]:
			problems = append(problems, fmt.Errorf("node %q reported more than once", n.ID))
			continue
		}
		seen[i] = true
		states[i].capacity, states[i].stored, states[i].ops = n.CapacityBytes, n.StoredBytes, n.OpsPerSecond
		problems = append(problems, checkFigures(states[i])...)
	}
	for i, ok := range seen {
		if !ok {
			problems = append(problems, fmt.Errorf("member %q has no report", members[i].ID))
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("balance: %w: report: %w", ErrInvalid, errs.JoinBounded(problems))
	}
	return states, nil
}

// checkFigures returns the problems with one node's reported figures.
func checkFigures(s nodeState) []error {
	var problems []error
	if s.capacity == 0 {
		problems = append(problems, fmt.Errorf("node %q: capacity 0; it must be at least 1 byte", s.id))
	}
	if !(s.ops >= 0 && s.ops <= math.MaxFloat64) { // NaN fails too
		problems = append(problems, fmt.Errorf("node %q: ops per second %v; it must be finite and at least 0", s.id, s.ops))
	}
	return problems
}

// sortNodes sorts nodes by ID.
func sortNodes(nodes []ring.Node) {
	slices.SortFunc(nodes, func(a, b ring.Node) int { return strings.Compare(string(a.ID), string(b.ID)) })
}
