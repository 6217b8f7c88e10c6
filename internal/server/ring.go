package server

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/ring"
)

// RingChange implements tyrpb.TyrServer: the ring coordinator answers
// (internal/node/epoch.go); any other node forwards the call to the
// coordinator of its view.
func (s *Service) RingChange(ctx context.Context, req *tyrpb.RingChangeRequest) (*tyrpb.RingChangeResponse, error) {
	if s.node == nil {
		return nil, toStatus(fmt.Errorf("%w: this server runs without cluster membership", errs.ErrUnavailable))
	}
	coordinator, ok := s.node.RingCoordinator()
	if !ok {
		return nil, toStatus(fmt.Errorf("%w: no ring coordinator alive in the view of %s", errs.ErrUnavailable, s.node.Self()))
	}
	if coordinator != s.node.Self() {
		if forwarded(ctx) {
			return nil, toStatus(fmt.Errorf("%w: node %s is not the ring coordinator in its own view (%s is)", errs.ErrUnavailable, s.node.Self(), coordinator))
		}
		conn, err := s.node.Conn(coordinator)
		if err != nil {
			return nil, toStatus(err)
		}
		return tyrpb.NewTyrClient(conn).RingChange(markForwarded(ctx), req)
	}
	if id := req.GetRemove(); id != "" {
		if _, err := s.node.Decommission(ring.NodeID(id)); err != nil {
			return nil, toStatus(err)
		}
	}
	rec, progress, ok := s.node.RingProgress()
	resp := &tyrpb.RingChangeResponse{Coordinator: string(coordinator)}
	if !ok {
		return resp, nil
	}
	resp.Record, _ = json.Marshal(rec)
	for _, p := range progress {
		resp.Moves = append(resp.Moves, &tyrpb.MoveProgress{Node: string(p.Node), CopiedBytes: p.Bytes, CopiedBlobs: p.Blobs,
			Copied: p.Copied, Share: p.Share})
	}
	return resp, nil
}
