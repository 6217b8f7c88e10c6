package server

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/membership"
	"github.com/tyrstore/tyr/internal/ring"
)

// Client routing: a client fetches the placement ring once (Ring), builds
// the same ring, and sends each read or stat straight to the node that
// serves it, so a read costs one server hop. Every reply carries the
// answering node's ring ID and members ID in its header; a client whose
// copy differs fetches the ring again. A client with an outdated copy is
// still served correctly: a node that is not a blob's read target forwards
// the request, as it does for every client.

// Response header keys naming the answering node's view; the client
// package spells them too.
const (
	// ringHeader carries membership.View.RingID in hexadecimal.
	ringHeader = "tyr-ring"
	// membersHeader carries the members ID (see membersID) in hexadecimal.
	membersHeader = "tyr-members"
)

// placementConfig is the ring config every node builds its placement ring
// with (node.Node and the cluster status use ring.Config{} as well).
var placementConfig = ring.Config{}.WithDefaults()

// membersIDPrefix versions the members ID hash input.
const membersIDPrefix = "tyr/members-id/v1\x00"

// servesReads reports whether m may be sent reads: it is alive in this
// view and not catching up on commits it missed.
func servesReads(m membership.Member) bool {
	return m.State == membership.StateAlive && !m.Meta.CatchingUp
}

// membersID identifies, for every ring member of v (every member not
// Left), its RPC address and whether it serves reads: the first 8 bytes,
// big-endian, of the SHA-256 of membersIDPrefix followed, in ID order, by
// each member's uvarint-prefixed ID and RPC address and a byte that is 1
// if it serves reads. Zero means no ring.
func membersID(v *membership.View) uint64 {
	buf := []byte(membersIDPrefix)
	n := 0
	for _, m := range v.Members() {
		if m.State == membership.StateLeft {
			continue
		}
		n++
		buf = binary.AppendUvarint(buf, uint64(len(m.Meta.ID)))
		buf = append(buf, m.Meta.ID...)
		buf = binary.AppendUvarint(buf, uint64(len(m.Meta.RPCAddr)))
		buf = append(buf, m.Meta.RPCAddr...)
		if servesReads(m) {
			buf = append(buf, 1)
		} else {
			buf = append(buf, 0)
		}
	}
	if n == 0 {
		return 0
	}
	sum := sha256.Sum256(buf)
	return binary.BigEndian.Uint64(sum[:8])
}

// formatRoutingID formats a ring or members ID as the headers carry it.
func formatRoutingID(id uint64) string { return fmt.Sprintf("%016x", id) }

// ringKeyspace is a live keyspace's name and replication.
type ringKeyspace struct {
	name        string
	replication uint32
	chunkSize   uint64
}

// ringResponse answers Ring from view, as node self sees it, with the live
// keyspaces of the catalog.
func ringResponse(view *membership.View, self ring.NodeID, keyspaces []ringKeyspace) *tyrpb.RingResponse {
	resp := &tyrpb.RingResponse{
		Self: string(self), RingId: uint64(view.RingID()), MembersId: membersID(view),
		VirtualNodesPerWeight: placementConfig.VirtualNodesPerWeight,
		TokensMax:             placementConfig.TokensMax,
		HashVersion:           placementConfig.HashVersion,
	}
	for _, m := range view.Members() {
		resp.Members = append(resp.Members, &tyrpb.RingMember{
			Id: string(m.Meta.ID), RpcAddr: m.Meta.RPCAddr, Weight: m.Meta.Weight,
			State: m.State.String(), CatchingUp: m.Meta.CatchingUp,
		})
	}
	for _, k := range keyspaces {
		resp.Keyspaces = append(resp.Keyspaces, &tyrpb.RingKeyspace{Name: k.name, Replication: k.replication, ChunkSize: k.chunkSize})
	}
	return resp
}

// Ring implements tyrpb.TyrServer. Without a cluster it reports
// errs.ErrUnavailable.
func (s *Service) Ring(context.Context, *tyrpb.RingRequest) (*tyrpb.RingResponse, error) {
	if s.cluster == nil {
		return nil, toStatus(fmt.Errorf("%w: this server runs without cluster membership", errs.ErrUnavailable))
	}
	view := s.cluster.View()
	var keyspaces []ringKeyspace
	for _, e := range s.cluster.Node().Catalog().Live() {
		cfg, err := decodeConfig(e.Config)
		if err != nil {
			return nil, toStatus(err)
		}
		keyspaces = append(keyspaces, ringKeyspace{name: e.Name, replication: cfg.WithDefaults().Replication, chunkSize: cfg.WithDefaults().ChunkBytes})
	}
	return ringResponse(view, s.cluster.Self(), keyspaces), nil
}

// routingIDs are the ring and members IDs of one view, and their header.
type routingIDs struct {
	view              *membership.View
	ringID, membersID uint64
	md                metadata.MD
}

// currentRouting returns the routing IDs of this node's current view, or
// nil outside a cluster. They are computed once per view: a membership
// change installs a new View.
func (s *Service) currentRouting() *routingIDs {
	if s.cluster == nil {
		return nil
	}
	view := s.cluster.View()
	ids := s.routing.Load()
	if ids == nil || ids.view != view {
		ids = &routingIDs{view: view, ringID: uint64(view.RingID()), membersID: membersID(view)}
		ids.md = metadata.Pairs(ringHeader, formatRoutingID(ids.ringID), membersHeader, formatRoutingID(ids.membersID))
		s.routing.Store(ids)
	}
	return ids
}

// routingHeaders returns the interceptor that puts the ring ID and members
// ID of this node's current view in the header of every reply.
func (s *Service) routingHeaders() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if ids := s.currentRouting(); ids != nil {
			// SetHeader fails only if the header was sent already, which
			// no handler has done before this point.
			_ = grpc.SetHeader(ctx, ids.md)
		}
		return handler(ctx, req)
	}
}
