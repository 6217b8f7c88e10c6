package balance

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/ring"
)

// NodeUtilization is how used one node is.
type NodeUtilization struct {
	// ID names the node.
	ID ring.NodeID
	// Utilization is stored bytes / capacity.
	Utilization float64
	// OpsPerSecond is the rate the node reported.
	OpsPerSecond float64
	// Pressure is the node's utilization, blended with its operation rate
	// per capacity by Config.OpsShare, relative to the cluster's; 1 is its
	// fair part (see the package doc).
	Pressure float64
}

// Summary describes how evenly a cluster is used.
type Summary struct {
	// Nodes holds one entry per node, sorted by ID.
	Nodes []NodeUtilization
	// UtilizationMaxMean is the largest utilization divided by the mean
	// utilization (the arithmetic mean over nodes); 1 if nothing is stored.
	UtilizationMaxMean float64
	// OpsMaxMean is the same ratio for operations per second per byte of
	// capacity; 1 if no operations were served.
	OpsMaxMean float64
	// PressureMaxMean is the same ratio for pressure: the figure Plan
	// compares with Config.TriggerRatio.
	PressureMaxMean float64
}

// Summarize returns the utilization of every node of report and the
// max/mean figures. It fails, wrapping ErrInvalid and listing every
// problem, on an empty report, a repeated node, a zero capacity or a bad
// operation rate. The epoch is not checked.
func Summarize(cfg Config, report Report) (Summary, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return Summary{}, err
	}
	states, err := reportStates(report)
	if err != nil {
		return Summary{}, err
	}
	return summarize(cfg, states), nil
}

// reportStates validates report on its own and returns its states sorted
// by ID.
func reportStates(report Report) ([]nodeState, error) {
	if len(report.Nodes) == 0 {
		return nil, fmt.Errorf("balance: %w: report: no nodes", ErrInvalid)
	}
	states := make([]nodeState, len(report.Nodes))
	for i, n := range report.Nodes {
		states[i] = nodeState{id: n.ID, capacity: n.CapacityBytes, stored: n.StoredBytes, ops: n.OpsPerSecond}
	}
	slices.SortStableFunc(states, func(a, b nodeState) int { return strings.Compare(string(a.id), string(b.id)) })
	var problems []error
	for i, s := range states {
		repeated := i > 0 && s.id == states[i-1].id
		if repeated && (i == 1 || states[i-2].id != s.id) { // once per repeated ID
			problems = append(problems, fmt.Errorf("node %q reported more than once", s.id))
		}
		problems = append(problems, checkFigures(s)...)
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("balance: %w: report: %w", ErrInvalid, errs.JoinBounded(problems))
	}
	return states, nil
}

// pressures returns each node's utilization and pressure (package doc).
func pressures(cfg Config, states []nodeState) (utilization, pressure []float64) {
	stored := make([]float64, len(states))
	ops := make([]float64, len(states))
	for i, s := range states {
		stored[i], ops[i] = float64(s.stored), s.ops
	}
	return pressuresOf(cfg, states, stored, ops)
}

// pressuresOf returns the utilization and pressure of the nodes of states
// if they stored stored[i] bytes and served ops[i] operations per second.
func pressuresOf(cfg Config, states []nodeState, stored, ops []float64) (utilization, pressure []float64) {
	var capacityTotal, storedTotal, opsTotal float64
	for i, s := range states {
		capacityTotal += float64(s.capacity)
		storedTotal += stored[i]
		opsTotal += ops[i]
	}
	utilization = make([]float64, len(states))
	pressure = make([]float64, len(states))
	for i, s := range states {
		utilization[i] = stored[i] / float64(s.capacity)
		bytesTerm, opsTerm := 1.0, 1.0 // an empty cluster is balanced
		if storedTotal > 0 {
			bytesTerm = utilization[i] / (storedTotal / capacityTotal)
		}
		if opsTotal > 0 {
			opsTerm = (ops[i] / float64(s.capacity)) / (opsTotal / capacityTotal)
		}
		pressure[i] = (1-cfg.OpsShare)*bytesTerm + cfg.OpsShare*opsTerm
	}
	return utilization, pressure
}

// maxMean returns max(xs) / mean(xs), or 1 if the mean is 0. xs is not
// empty.
func maxMean(xs []float64) float64 {
	var sum float64
	for _, x := range xs {
		sum += x
	}
	if sum == 0 {
		return 1
	}
	return slices.Max(xs) / (sum / float64(len(xs)))
}

// summarize computes the Summary of valid states.
func summarize(cfg Config, states []nodeState) Summary {
	utilization, pressure := pressures(cfg, states)
	s := Summary{Nodes: make([]NodeUtilization, len(states))}
	opsPerCapacity := make([]float64, len(states))
	for i, st := range states {
		s.Nodes[i] = NodeUtilization{ID: st.id, Utilization: utilization[i], OpsPerSecond: st.ops, Pressure: pressure[i]}
		opsPerCapacity[i] = st.ops / float64(st.capacity)
	}
	s.UtilizationMaxMean = maxMean(utilization)
	s.OpsMaxMean = maxMean(opsPerCapacity)
	s.PressureMaxMean = maxMean(pressure)
	return s
}
