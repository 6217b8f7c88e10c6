package server

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/node"
	"github.com/tyrstore/tyr/internal/storage"
	"github.com/tyrstore/tyr/internal/txn"
)

// Resolve implements tyrpb.TyrServer: the outcome of a commit its client
// named, from the version managers of its blobs (node/resolve.go has the
// protocol). Any node answers; the one that coordinated the commit need
// not be alive.
func (s *Service) Resolve(ctx context.Context, req *tyrpb.ResolveRequest) (*tyrpb.ResolveResponse, error) {
	if s.node == nil {
		return nil, toStatus(fmt.Errorf("%w: outcome resolution needs a cluster node", errs.ErrUnavailable))
	}
	c := req.GetCommit()
	ops, err := DecodeCommit(c)
	if err != nil {
		return nil, toStatus(err)
	}
	if _, err := node.ClientTime(c.GetTxnId()); err != nil {
		return nil, toStatus(err)
	}
	ks, err := s.engine.Acquire(string(c.GetKeyspace()))
	if err != nil {
		return nil, toStatus(err)
	}
	defer ks.Release()
	res, err := s.node.ResolveCommit(ctx, ks.Name, int(ks.Config.Replication), c.GetTxnId(), ops)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &tyrpb.ResolveResponse{Detail: res.Detail}
	switch res.Outcome {
	case node.OutcomeCommitted:
		results, err := s.straddledValues(ctx, ks, ops, res.Results)
		if err != nil {
			return &tyrpb.ResolveResponse{Outcome: tyrpb.Outcome_OUTCOME_UNKNOWN, Detail: err.Error()}, nil
		}
		resp.Outcome = tyrpb.Outcome_OUTCOME_COMMITTED
		// The read checks come after the ops and answer nothing.
		for _, r := range results[:min(len(results), len(c.GetOps()))] {
			resp.Results = append(resp.Results, &tyrpb.OpResult{Offset: r.Offset, Size: r.Size, Version: r.Version, Value: r.Value})
		}
		if len(resp.Results) != len(c.GetOps()) {
			return nil, toStatus(fmt.Errorf("%w: committed with %d results for %d ops", errs.ErrCorruption, len(resp.Results), len(c.GetOps())))
		}
	case node.OutcomeAborted:
		resp.Outcome = tyrpb.Outcome_OUTCOME_ABORTED
	case node.OutcomePending:
		resp.Outcome = tyrpb.Outcome_OUTCOME_PENDING
	default:
		resp.Outcome = tyrpb.Outcome_OUTCOME_UNKNOWN
	}
	return resp, nil
}

// straddledValues fills in the new values of the atomic ops the commit ran
// as read-modify-writes (straddle.go): the members recorded a write for
// each, so its value is read back at the commit's version. It fails when
// that version is no longer readable, or a later op of the commit touched
// the blob (the bytes read would not be the op's value).
func (s *Service) straddledValues(ctx context.Context, ks *storage.Keyspace, ops []txn.Op, results []txn.Result) ([]txn.Result, error) {
	pl, err := s.node.Placement(ks.Name, int(ks.Config.Replication))
	if err != nil {
		return nil, err
	}
	for _, i := range straddling(pl, ks.Store.ChunkBytes(), ops) {
		op := ops[i]
		for _, later := range ops[i+1:] {
			if later.Key == op.Key && later.Kind != txn.OpReadCheck {
				return nil, fmt.Errorf("committed, but the new value of op %d cannot be given: a later op of the commit changed its blob", i)
			}
		}
		if i >= len(results) {
			return nil, fmt.Errorf("committed, but with %d results for %d ops", len(results), len(ops))
		}
		resp, err := s.clusterRead(ctx, ks, &tyrpb.ReadRequest{Keyspace: []byte(ks.Name), Key: []byte(op.Key),
			Offset: op.Offset, Length: uint64(op.Width), Version: results[i].Version})
		if err != nil {
			return nil, fmt.Errorf("committed, but the new value of op %d is no longer readable: %v", i, statusError(err))
		}
		var cur [8]byte
		copy(cur[:], resp.GetData())
		results[i].Value = binary.LittleEndian.Uint64(cur[:])
	}
	return results, nil
}
