package server

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/chain"
	"github.com/tyrstore/tyr/internal/dialopt"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/membership"
	"github.com/tyrstore/tyr/internal/mvcc"
	"github.com/tyrstore/tyr/internal/node"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/storage"
	"github.com/tyrstore/tyr/internal/txn"
)

// Replication: with a node set (WithNode), commits run through the chain of
// the written blobs' live replicas, and reads, stats and listings are
// served where the data is. A request this node cannot serve itself is
// forwarded once, marked so the receiver serves it locally even if its view
// of the ring differs: a request never travels more than one extra hop.

// forwardedKey marks a request forwarded by another node.
const forwardedKey = "tyr-forwarded"

// WithNode makes s replicate through n and returns s.
func (s *Service) WithNode(n *node.Node) *Service {
	s.node = n
	return s
}

// DialPeer opens a connection to another node's RPC address, with the
// client API's message limits; it is node.Config.Dial for servers.
func DialPeer(addr string) (grpc.ClientConnInterface, error) {
	return grpc.NewClient(addr, dialopt.Options()...)
}

func forwarded(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get(forwardedKey)) > 0
}

func markForwarded(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, forwardedKey, "1")
}

// forwardedThrough marks a read forwarded to a version manager to be served
// there through the chunks' holders (see clusterRead).
const forwardedThrough = "through"

func markThrough(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, forwardedKey, forwardedThrough)
}

func through(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(forwardedKey)
	return len(v) > 0 && v[0] == forwardedThrough
}

// clusterRead serves a read in a cluster. A read within one chunk that
// names no version (and does not ask to be consistent) is direct: the
// chunk's read target serves it from its own store, one hop. Any other
// read, and a direct read of a blob the chunk's replica has no record of
// (it never held a byte of that chunk), goes through a version manager
// (node.ReadThrough). A read is forwarded at most twice: to a chunk's
// replica, then to a version manager.
func (s *Service) clusterRead(ctx context.Context, ks *storage.Keyspace, req *tyrpb.ReadRequest) (*tyrpb.ReadResponse, error) {
	if forwarded(ctx) && s.node.CatchingUp() {
		return nil, toStatus(s.node.ErrCatchingUp())
	}
	key, off, n := string(req.GetKey()), req.GetOffset(), req.GetLength()
	pl, err := s.node.Placement(ks.Name, int(ks.Config.Replication))
	if err != nil {
		return nil, toStatus(err)
	}
	cs := ks.Store.ChunkBytes()
	c := off / cs
	direct := req.GetVersion() == 0 && !req.GetConsistent() && !through(ctx) && (n == 0 || (off+n-1)/cs == c)
	if direct {
		if !forwarded(ctx) {
			target, err := pl.Target(key, c)
			if err != nil {
				return nil, toStatus(err)
			}
			if target != s.node.Self() {
				return s.forwardRead(markForwarded(ctx), target, req)
			}
		}
		if pl.ServesChunk(key, c) {
			data, info, err := storeRead(ctx, ks, key, off, n)
			if err == nil || !errors.Is(err, errs.ErrNotFound) || pl.ServesBlob(key) {
				if err != nil {
					return nil, toStatus(err)
				}
				s.metrics.countRead(readLocal)
				return &tyrpb.ReadResponse{Data: data, Size: info.Size, Version: info.Version}, nil
			}
		}
	}
	if !through(ctx) && (!pl.ServesBlob(key) || s.node.CatchingUp()) {
		// A version manager catching up may lack commits: another serves.
		target, err := pl.Target(key, 0)
		if err != nil {
			return nil, toStatus(err)
		}
		return s.forwardRead(markThrough(ctx), target, req)
	}
	data, info, err := s.node.ReadThrough(ctx, ks, pl, key, off, n, req.GetVersion(), req.GetUse() && req.GetVersion() == 0)
	if err != nil {
		return nil, toStatus(err)
	}
	s.metrics.countRead(readLocal)
	return &tyrpb.ReadResponse{Data: data, Size: info.Size, Version: info.Version}, nil
}

func (s *Service) forwardRead(ctx context.Context, target ring.NodeID, req *tyrpb.ReadRequest) (*tyrpb.ReadResponse, error) {
	conn, err := s.node.Conn(target)
	if err != nil {
		return nil, toStatus(err)
	}
	s.metrics.countRead(readForwarded)
	return tyrpb.NewTyrClient(conn).Read(ctx, req)
}

// commit runs ops on ks: through the chain of their replicas (which may
// be this node alone), or on the local store when not clustered. client is
// the client's ID of the commit, if it gave one (node/resolve.go); without
// a node it is not recorded, and Resolve is unavailable.
func (s *Service) commit(ctx context.Context, ks *storage.Keyspace, ops []txn.Op, client []byte) ([]txn.Result, error) {
	if s.node != nil {
		if pl, err := s.node.Placement(ks.Name, int(ks.Config.Replication)); err == nil {
			if turn := straddling(pl, ks.Store.ChunkBytes(), ops); len(turn) > 0 {
				return s.commitStraddling(ctx, ks, ops, turn, client)
			}
		}
		return s.node.Commit(ctx, ks.Name, int(ks.Config.Replication), ops, client)
	}
	return chain.Commit([]chain.Member{mvcc.Member{Store: ks.Store}}, ops)
}

// readTarget returns the member to forward a read of key to, or nil when
// this node serves it, and counts the read on its path. A node that is
// catching up serves no reads: it refuses a forwarded one (the sender's
// view was behind) with errs.ErrUnavailable.
func (s *Service) readTarget(ctx context.Context, ks *storage.Keyspace, key string) (tyrpb.TyrClient, error) {
	target, err := s.route(ctx, ks, key)
	switch {
	case err != nil:
	case target != nil:
		s.metrics.countRead(readForwarded)
	default:
		s.metrics.countRead(readLocal)
	}
	return target, err
}

func (s *Service) route(ctx context.Context, ks *storage.Keyspace, key string) (tyrpb.TyrClient, error) {
	if s.node == nil {
		return nil, nil
	}
	if forwarded(ctx) {
		if s.node.CatchingUp() {
			return nil, s.node.ErrCatchingUp()
		}
		return nil, nil
	}
	target, err := s.node.ReadTarget(ks.Name, int(ks.Config.Replication), key)
	if err != nil || target == s.node.Self() {
		return nil, err
	}
	conn, err := s.node.Conn(target)
	if err != nil {
		return nil, err
	}
	return tyrpb.NewTyrClient(conn), nil
}

// listOwn lists up to limit of this node's blobs. In a cluster these are
// the blobs it is a version manager of: other holders' records of a blob
// can be older, or outlive it.
func (s *Service) listOwn(ks *storage.Keyspace, prefix, startAfter string, limit int) ([]mvcc.BlobInfo, bool, error) {
	if s.node == nil {
		return ks.Store.List(prefix, startAfter, limit)
	}
	pl, err := s.node.Placement(ks.Name, int(ks.Config.Replication))
	if err != nil {
		return nil, false, err
	}
	var out []mvcc.BlobInfo
	for {
		page, more, err := ks.Store.List(prefix, startAfter, limit)
		if err != nil {
			return nil, false, err
		}
		for i, b := range page {
			if !pl.ServesBlob(b.Key) {
				continue
			}
			out = append(out, b)
			if len(out) == limit {
				return out, more || i < len(page)-1, nil
			}
		}
		if !more || len(page) == 0 {
			return out, false, nil
		}
		startAfter = page[len(page)-1].Key
	}
}

// listMembers returns the other live members whose blobs a listing must
// merge, or nil when this node's own listing is complete: when it is not
// clustered, when the request was forwarded, or when every node of the
// ring holds every blob (replication at least the ring's size) and this
// node is not catching up. Dead members count towards the ring: their
// blobs are on other replicas. Members catching up are left out.
func (s *Service) listMembers(ctx context.Context, ks *storage.Keyspace) []ring.NodeID {
	if s.node == nil || forwarded(ctx) {
		return nil
	}
	catchingUp := s.node.CatchingUp()
	inRing := 0
	var others []ring.NodeID
	for _, m := range s.cluster.View().Members() {
		if m.State == membership.StateLeft {
			continue
		}
		inRing++
		if m.Meta.ID != s.node.Self() && m.State == membership.StateAlive && !m.Meta.CatchingUp {
			others = append(others, m.Meta.ID)
		}
	}
	if inRing <= int(ks.Config.Replication) && !catchingUp {
		return nil
	}
	if others == nil {
		others = []ring.NodeID{}
	}
	return others
}

// mergeListings merges sorted listings from several members into one
// sorted listing of at most limit blobs, keeping each key's newest version.
// more is true if a member had more or the merge was cut at limit.
func mergeListings(lists [][]*tyrpb.BlobInfo, limit int) (out []*tyrpb.BlobInfo, cut bool) {
	var all []*tyrpb.BlobInfo
	for _, l := range lists {
		all = append(all, l...)
	}
	slices.SortFunc(all, func(a, b *tyrpb.BlobInfo) int {
		if c := strings.Compare(a.GetKey(), b.GetKey()); c != 0 {
			return c
		}
		return cmp.Compare(b.GetVersion(), a.GetVersion()) // newest first
	})
	for _, b := range all {
		if len(out) > 0 && out[len(out)-1].GetKey() == b.GetKey() {
			continue
		}
		if len(out) == limit {
			return out, true
		}
		out = append(out, b)
	}
	return out, false
}
