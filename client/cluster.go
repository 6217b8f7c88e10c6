package client

import (
	"context"
	"time"

	"github.com/tyrstore/tyr/api/tyrpb"
)

// Member states as ClusterStatus reports them.
const (
	StateAlive   = "alive"
	StateSuspect = "suspect"
	StateDead    = "dead"
	StateLeft    = "left"
)

// ClusterMember is one member of the cluster as the answering node sees it.
type ClusterMember struct {
	ID string
	// RPCAddr is where the member serves the client API.
	RPCAddr string
	// GossipAddr is its membership address, empty if unknown.
	GossipAddr string
	// State is StateAlive, StateSuspect, StateDead or StateLeft.
	State  string
	Weight uint32
	// RingShare is the fraction of the hash space the member is primary
	// for; the shares of the ring's members sum to 1. Left members have 0.
	RingShare float64
	Started   time.Time
	// CatchingUp is whether the member says it is catching up on commits
	// it may have missed (after a start, a pause or a lapsed read lease):
	// until it is done it heads no commit and serves no read, so a blob
	// whose only live replicas are catching up is unavailable meanwhile.
	CatchingUp bool
}

// ClusterStatus is one node's view of the cluster. Views converge by
// gossip, so two nodes may briefly disagree.
type ClusterStatus struct {
	// Self is the ID of the answering node.
	Self string
	// RingID identifies the ring's members and weights; nodes with the same
	// ring report the same RingID.
	RingID string
	// Members are sorted by ID, left members included.
	Members []ClusterMember
	// Keyspaces are the live keyspaces of the cluster catalog, by name;
	// Created is when the catalog recorded them and DiskBytes is 0.
	Keyspaces []KeyspaceInfo
}

// Alive returns the number of members in StateAlive.
func (s ClusterStatus) Alive() int {
	n := 0
	for _, m := range s.Members {
		if m.State == StateAlive {
			n++
		}
	}
	return n
}

// Member returns the member with the given ID, and whether there is one.
func (s ClusterStatus) Member(id string) (ClusterMember, bool) {
	for _, m := range s.Members {
		if m.ID == id {
			return m, true
		}
	}
	return ClusterMember{}, false
}

// ClusterStatus returns the answering node's view of the cluster.
func (c *Client) ClusterStatus(ctx context.Context) (ClusterStatus, error) {
	resp, err := c.api.ClusterStatus(ctx, &tyrpb.ClusterStatusRequest{})
	if err != nil {
		return ClusterStatus{}, fromStatus(err)
	}
	out := ClusterStatus{Self: resp.GetSelf(), RingID: resp.GetRingId()}
	for _, m := range resp.GetMembers() {
		out.Members = append(out.Members, ClusterMember{
			ID: m.GetId(), RPCAddr: m.GetRpcAddr(), GossipAddr: m.GetGossipAddr(), State: m.GetState(),
			Weight: m.GetWeight(), RingShare: m.GetRingShare(), Started: time.Unix(0, m.GetStartedUnixNano()),
			CatchingUp: m.GetCatchingUp(),
		})
	}
	for _, k := range resp.GetKeyspaces() {
		out.Keyspaces = append(out.Keyspaces, keyspaceInfo(k))
	}
	return out, nil
}

// NodeUsage is one node's own figures for balancing, as it reports them.
type NodeUsage struct {
	// NodeID is the answering node's ID; empty for a server without
	// cluster membership.
	NodeID string
	// CapacityBytes is the node's capacity, at least 1: its --capacity, or
	// the size of the file system holding its data directory.
	CapacityBytes uint64
	// CapacityConfigured is true when CapacityBytes is the configured
	// --capacity, false when it was measured.
	CapacityConfigured bool
	// StoredBytes is the approximate space the node's keyspaces occupy on
	// disk, every replica it holds included.
	StoredBytes uint64
	// OpsPerSecond is the rate of client operations (commits, reads, stats
	// and listings) the node answered, averaged over OpsWindow.
	OpsPerSecond float64
	// OpsWindow is the span of that average: the last minute, or the time
	// since the server started if shorter; 0 in the server's first second.
	OpsWindow time.Duration
	// LogicalBytes is the bytes of the chunks the node holds over every
	// keyspace: what its data is, beside StoredBytes, what it takes.
	LogicalBytes uint64
	// ReclaimBytes is the removed bytes whose space is yet to be
	// reclaimed.
	ReclaimBytes uint64
	// FreeBytes is the free space of the file system holding the data
	// directory; MinFreeBytes the floor below which the node refuses
	// writes (--min-free; 0: none).
	FreeBytes, MinFreeBytes uint64
}

// NodeUsage returns the figures of the node the client is connected to
// (the endpoint given to Dial, or the one it failed over to; never routed
// elsewhere). A server older than
// the call answers with an error whose Code is codes.Unimplemented.
func (c *Client) NodeUsage(ctx context.Context) (NodeUsage, error) {
	resp, err := c.api.NodeUsage(ctx, &tyrpb.NodeUsageRequest{})
	if err != nil {
		return NodeUsage{}, fromStatus(err)
	}
	return NodeUsage{
		NodeID: resp.GetNodeId(), CapacityBytes: resp.GetCapacityBytes(), CapacityConfigured: resp.GetCapacityConfigured(),
		StoredBytes: resp.GetStoredBytes(), OpsPerSecond: resp.GetOpsPerSecond(),
		OpsWindow:    time.Duration(resp.GetOpsWindowSeconds() * float64(time.Second)),
		LogicalBytes: resp.GetLogicalBytes(), ReclaimBytes: resp.GetReclaimBytes(),
		FreeBytes: resp.GetFreeBytes(), MinFreeBytes: resp.GetMinFreeBytes(),
	}, nil
}

// RingMove is the copy progress of one node gaining ranges in a ring
// change.
type RingMove struct {
	Node        string
	CopiedBytes uint64
	CopiedBlobs uint64
	Copied      bool
	// Share is the fraction of the hash space the node gains.
	Share float64
}

// RingChange is the ring coordinator's report of the current ring epoch.
type RingChange struct {
	Coordinator string
	// Record is the epoch's record (internal/rebalance.Record, JSON);
	// empty before the cluster's first epoch.
	Record []byte
	Moves  []RingMove
}

// RingChange asks the ring coordinator, through the endpoint, for the
// current ring epoch and its moves; with remove not empty it first asks it
// to decommission that node (see tyrpb.Tyr.RingChange).
func (c *Client) RingChange(ctx context.Context, remove string) (RingChange, error) {
	resp, err := c.api.RingChange(ctx, &tyrpb.RingChangeRequest{Remove: remove})
	if err != nil {
		return RingChange{}, fromStatus(err)
	}
	out := RingChange{Coordinator: resp.GetCoordinator(), Record: resp.GetRecord()}
	for _, m := range resp.GetMoves() {
		out.Moves = append(out.Moves, RingMove{Node: m.GetNode(), CopiedBytes: m.GetCopiedBytes(), CopiedBlobs: m.GetCopiedBlobs(),
			Copied: m.GetCopied(), Share: m.GetShare()})
	}
	return out, nil
}
