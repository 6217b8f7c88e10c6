package balance

import (
	"fmt"
	"math"

	"github.com/tyrstore/tyr/internal/ring"
)

// Decision is what Plan decided.
type Decision uint8

// Plan's decisions. Zero is unset.
const (
	// KeepBalanced: max/mean pressure is at or below Config.TriggerRatio.
	KeepBalanced Decision = 1 + iota
	// KeepNotWorthMoving: no candidate weighting passed the rule on moved
	// data and gain (package doc, step 4).
	KeepNotWorthMoving
	// Reweight: publish Proposal.Nodes as the next ring.
	Reweight
)

// String returns the decision's name.
func (d Decision) String() string {
	switch d {
	case KeepBalanced:
		return "keep (balanced)"
	case KeepNotWorthMoving:
		return "keep (not worth moving)"
	case Reweight:
		return "reweight"
	}
	return fmt.Sprintf("Decision(%d)", uint8(d))
}

// Proposal is the outcome of Plan.
type Proposal struct {
	// Decision says whether to publish a new ring.
	Decision Decision
	// Nodes is the membership to publish, sorted by ID: the new weights for
	// Reweight, the current ones otherwise. The caller owns the slice.
	Nodes []ring.Node
	// Changed counts the nodes whose weight differs from the current one.
	Changed int
	// MaxMeanBefore is the measured max/mean pressure.
	MaxMeanBefore float64
	// MaxMeanPredicted is the max/mean pressure predicted for Nodes.
	MaxMeanPredicted float64
	// MovedFraction is the fraction of the hash space whose primary changes
	// if Nodes is published (ring.MovedFraction): the expected fraction of
	// stored data to move.
	MovedFraction float64
}

// planCandidatesMax bounds the candidate rings one Plan builds: the bound on
// its work.
const planCandidatesMax = 10

// Plan applies the weighting rule of the package doc to the ring current
// and a report measured while it was active, and proposes the next
// membership or keeps the current one. It fails with ErrStaleReport if the
// report's epoch is not current's, and wrapping ErrInvalid if cfg is
// invalid or the report does not list exactly the members of current with
// valid figures, or if a candidate ring cannot be built (too many tokens
// for current's ring.Config: raise CapacityBytesPerWeight or TokensMax).
func Plan(cfg Config, current *ring.Ring, report Report) (Proposal, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return Proposal{}, err
	}
	if report.Epoch != current.Epoch() {
		return Proposal{}, fmt.Errorf("%w: report of epoch %d, current ring of epoch %d", ErrStaleReport, report.Epoch, current.Epoch())
	}
	states, err := matchReport(current, report)
	if err != nil {
		return Proposal{}, err
	}
	_, pressure := pressures(cfg, states)
	keep := Proposal{Nodes: current.Nodes(), MaxMeanBefore: maxMean(pressure)}
	keep.MaxMeanPredicted = keep.MaxMeanBefore
	if keep.MaxMeanBefore <= cfg.TriggerRatio {
		keep.Decision = KeepBalanced
		return keep, nil
	}
	keep.Decision = KeepNotWorthMoving
	m := model{cfg: cfg, current: current, states: states, owned: current.Ownership(), measured: pressure}
	p, ok, err := m.refine()
	if err != nil || !ok {
		return keep, err
	}
	return p, nil
}

// model predicts how the measured cluster would look under other weights.
type model struct {
	cfg      Config
	current  *ring.Ring
	states   []nodeState // the current members, sorted by ID
	owned    map[ring.NodeID]float64
	measured []float64 // pressures, in states' order
}

// refine is steps 2 to 4 of the rule. It corrects the current weights by
// the measured pressures, then corrects that candidate again by its
// predicted pressures, and so on, up to planCandidatesMax candidates: the
// prediction accounts exactly for the arcs that change hands, which one
// correction cannot foresee (a node's pressure also moves when its
// neighbours on the ring gain or shed tokens), and no data moves between
// refinements. A candidate that moves more than MovedFractionMax is
// dropped and retried with half the exponent; one that predicts no
// improvement is refined further with half the exponent, which damps the
// oscillation a full step can fall into. It returns the worthwhile
// candidate with the lowest predicted max/mean, and whether there is one.
func (m model) refine() (chosen Proposal, ok bool, err error) {
	weights := make([]uint32, len(m.states))
	for i, s := range m.states {
		weights[i] = s.weight
	}
	pressure, predicted := m.measured, maxMean(m.measured)
	exponent := m.cfg.Damping
	for range planCandidatesMax {
		nodes, changed := correct(m.cfg, m.states, weights, pressure, exponent)
		if changed == 0 {
			break // nothing left to correct at this exponent or below
		}
		candidate, err := ring.New(m.current.Config(), m.current.Epoch(), nodes)
		if err != nil {
			return Proposal{}, false, fmt.Errorf("balance: plan: candidate ring: %w", err)
		}
		next := m.predict(candidate.Ownership())
		p := Proposal{
			Decision: Reweight, Nodes: nodes,
			MaxMeanBefore:    maxMean(m.measured),
			MaxMeanPredicted: maxMean(next),
			MovedFraction:    ring.MovedFraction(m.current, candidate),
		}
		if p.MovedFraction > m.cfg.MovedFractionMax {
			exponent /= 2 // retry smaller from the same weights
			continue
		}
		if p.MaxMeanPredicted >= predicted {
			exponent /= 2 // refine this candidate, but more gently
		}
		for i, n := range nodes {
			weights[i] = n.Weight
		}
		pressure, predicted = next, min(predicted, p.MaxMeanPredicted)
		if worthMoving(m.cfg, p) && (!ok || p.MaxMeanPredicted < chosen.MaxMeanPredicted) {
			chosen, ok = p, true
		}
	}
	if ok {
		for i, n := range chosen.Nodes {
			if n.Weight != m.states[i].weight {
				chosen.Changed++
			}
		}
	}
	return chosen, ok, nil
}

// worthMoving is step 4 of the rule: bounded movement, bought by enough
// predicted gain.
func worthMoving(cfg Config, p Proposal) bool {
	if p.MovedFraction > cfg.MovedFractionMax {
		return false
	}
	gain := p.MaxMeanBefore - p.MaxMeanPredicted
	return gain > 0 && gain >= cfg.GainPerMoveMin*p.MovedFraction
}

// correct is step 2 of the rule: weights (a candidate, in states' order),
// those of nodes outside the band [1 − growBand × Tolerance, 1 + Tolerance]
// multiplied by pressure^−exponent, all kept within a factor StepMax of the
// current weights and within the capacity bounds. It returns the
// membership, sorted by ID like states, and how many weights differ from
// weights.
func correct(cfg Config, states []nodeState, weights []uint32, pressure []float64, exponent float64) ([]ring.Node, int) {
	nodes := make([]ring.Node, len(states))
	changed := 0
	for i, s := range states {
		w := float64(weights[i])
		if pressure[i] > 1+cfg.Tolerance || pressure[i] < 1-growBand*cfg.Tolerance {
			// pressure 0 gives +Inf, which the step bound clamps.
			w = math.Round(w * math.Pow(pressure[i], -exponent))
		}
		current := float64(s.weight)
		w = min(max(w, math.Round(current/cfg.StepMax)), math.Round(current*cfg.StepMax))
		low, high := weightBounds(cfg, baseWeight(cfg, s.capacity))
		weight := uint32(min(max(w, float64(low)), float64(high)))
		nodes[i] = ring.Node{ID: s.id, Weight: weight}
		if weight != weights[i] {
			changed++
		}
	}
	return nodes, changed
}

// growBand widens the band below pressure 1 within which a node keeps its
// weight: a node grows only below 1 − growBand × Tolerance.
const growBand = 3

// predict is step 3 of the rule: the pressures expected once the data
// follows a candidate ring whose ownership is after. A node's stored bytes
// and operations scale with its ownership when it shrinks (it sheds parts
// of its own arcs); a growing node gains at the cluster's mean density.
func (m model) predict(after map[ring.NodeID]float64) []float64 {
	var storedTotal, opsTotal float64
	for _, s := range m.states {
		storedTotal += float64(s.stored)
		opsTotal += s.ops
	}
	stored := make([]float64, len(m.states))
	ops := make([]float64, len(m.states))
	for i, s := range m.states {
		stored[i] = follow(float64(s.stored), storedTotal, m.owned[s.id], after[s.id])
		ops[i] = follow(s.ops, opsTotal, m.owned[s.id], after[s.id])
	}
	// The pressure is relative to the totals, so the prediction need not
	// be scaled back to them.
	_, pressure := pressuresOf(m.cfg, m.states, stored, ops)
	return pressure
}

// follow returns the amount a node holding amount of a cluster-wide total
// is expected to hold when its ownership goes from before to after.
func follow(amount, total, before, after float64) float64 {
	switch {
	case after >= before:
		return amount + (after-before)*total
	case before > 0:
		return amount * after / before
	}
	return amount
}
