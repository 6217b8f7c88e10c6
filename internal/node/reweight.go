package node

// Weighted tokens: the ring coordinator gives each node a share of the
// ring from its capacity and the bytes it stores (internal/balance).
//
// The first ring takes the weights the members advertise, the view's ring
// by which they placed chunks before it (epoch.go); the change from it
// gives every member the capacity weight of the capacity it reports
// (balance.CapacityWeight, firstChange), and a node that joins a ring
// later takes its capacity weight too, when the coordinator can ask it.
// Both move data like any ring change. And once an epoch has been clean
// everywhere for Config.ReweightInterval, with no membership change
// waiting, the coordinator asks every member of the ring for its usage,
// builds a balance.Report and calls balance.Plan: if the plan is to
// reweight, it proposes the next epoch, with the same members and the new
// weights, which moves data like any ring change; otherwise it keeps the
// ring and waits another interval. A member that does not answer skips the
// round: Plan needs every member's figures.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tyrstore/tyr/internal/balance"
	"github.com/tyrstore/tyr/internal/rebalance"
	"github.com/tyrstore/tyr/internal/ring"
)

// ReweightIntervalDefault is the reweight interval servers use unless told
// otherwise: off; the ring takes the advertised weights.
const ReweightIntervalDefault = 0

// UsageFunc returns the usage a ring member reports: its capacity, the
// bytes it stores and the rate of operations it serves (NodeUsage).
type UsageFunc func(ctx context.Context, id ring.NodeID) (balance.NodeReport, error)

// reweightDue reports whether the reweight check is due for rec, clean
// everywhere: ReweightInterval after the coordinator first saw it so.
func (n *Node) reweightDue(rec rebalance.Record) bool {
	if n.cfg.ReweightInterval <= 0 || n.cfg.Usage == nil {
		return false
	}
	e := &n.epoch
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	if e.mu.reweightEpoch != rec.Epoch || e.mu.reweightAt.IsZero() {
		e.mu.reweightEpoch, e.mu.reweightAt = rec.Epoch, now
		return false
	}
	if now.Sub(e.mu.reweightAt) < n.cfg.ReweightInterval {
		return false
	}
	e.mu.reweightAt = now
	return true
}

// reweight is the coordinator's periodic check of rec, clean everywhere
// with no membership change waiting (see the top of this file).
func (n *Node) reweight(ctx context.Context, rec rebalance.Record) error {
	if !n.reweightDue(rec) {
		return nil
	}
	p, err := planReweight(ctx, n.cfg.Usage, n.cfg.Balance, rec)
	if err != nil {
		n.cfg.Log.Debug("ring reweight skipped", "epoch", rec.Epoch, "err", err)
		return nil
	}
	if p.Decision != balance.Reweight {
		n.cfg.Log.Debug("ring reweight", "epoch", rec.Epoch, "decision", p.Decision.String(),
			"max_mean", p.MaxMeanBefore)
		return nil
	}
	next, err := rebalance.Propose(rec, n.self, p.Nodes, n.replicationMax())
	if err != nil {
		return err
	}
	n.cfg.Log.Info("ring reweight proposed", "epoch", next.Epoch, "weights", weightsString(next.New),
		"changed", p.Changed, "max_mean", p.MaxMeanBefore, "max_mean_predicted", p.MaxMeanPredicted,
		"moved_fraction", p.MovedFraction)
	_, err = n.installRing(next)
	return err
}

// planReweight asks every member of rec's ring for its usage and applies
// the weighting rule (balance.Plan) to the ring and the figures. It fails
// if a member does not answer.
func planReweight(ctx context.Context, usage UsageFunc, cfg balance.Config, rec rebalance.Record) (balance.Proposal, error) {
	cur, err := ring.New(ring.Config{}, rec.Epoch, rec.New)
	if err != nil {
		return balance.Proposal{}, err
	}
	ids := make([]ring.NodeID, len(rec.New))
	for i, x := range rec.New {
		ids[i] = x.ID
	}
	reports, err := gatherUsage(ctx, usage, ids)
	if err != nil {
		return balance.Proposal{}, err
	}
	return balance.Plan(cfg, cur, balance.Report{Epoch: rec.Epoch, Nodes: reports})
}

// gatherUsage asks each of ids for its usage at once, each call bounded by
// ringCallTimeout. It fails with the first member's error.
func gatherUsage(ctx context.Context, usage UsageFunc, ids []ring.NodeID) ([]balance.NodeReport, error) {
	out := make([]balance.NodeReport, len(ids))
	errsOut := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, ringCallTimeout)
			defer cancel()
			r, err := usage(cctx, id)
			if err == nil && r.CapacityBytes == 0 {
				err = fmt.Errorf("capacity 0")
			}
			r.ID = id
			out[i], errsOut[i] = r, err
		}()
	}
	wg.Wait()
	for i, err := range errsOut {
		if err != nil {
			return nil, fmt.Errorf("usage of %s: %w", ids[i], err)
		}
	}
	return out, nil
}

// joinWeight returns the weight newcomer id takes in the ring: the
// capacity weight of the capacity it reports, or advertised if it cannot
// be asked.
func (n *Node) joinWeight(ctx context.Context, id ring.NodeID, advertised uint32) uint32 {
	if n.cfg.Usage == nil {
		return advertised
	}
	cctx, cancel := context.WithTimeout(ctx, ringCallTimeout)
	defer cancel()
	r, err := n.cfg.Usage(cctx, id)
	if err != nil || r.CapacityBytes == 0 {
		n.cfg.Log.Debug("joining node's capacity unknown; using its advertised weight", "node", id, "weight", advertised, "err", err)
		return advertised
	}
	w, err := balance.CapacityWeight(n.cfg.Balance, r.CapacityBytes)
	if err != nil {
		return advertised
	}
	return w
}

// weightsString renders a membership's weights as "a=1 b=2".
func weightsString(nodes []ring.Node) string {
	s := ""
	for i, x := range nodes {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%s=%d", x.ID, x.Weight)
	}
	return s
}
