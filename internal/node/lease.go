package node

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/tyrstore/tyr/api/peerpb"
	"github.com/tyrstore/tyr/internal/lease"
	"github.com/tyrstore/tyr/internal/membership"
	"github.com/tyrstore/tyr/internal/ring"
)

// Read leases (internal/lease): this node asks every member it does not
// consider dead for a grant every lease.RenewInterval, and serves reads
// only while its lease holds; it keeps every node it granted in its chains
// until the grant runs out, and drops no member from a chain while it does
// not see a majority of the ring alive.

// Lease implements peerpb.PeerServer: a grant to a caller this node sees
// alive (not suspect, not dead).
func (n *Node) Lease(_ context.Context, req *peerpb.LeaseRequest) (*peerpb.LeaseResponse, error) {
	from := ring.NodeID(req.GetFrom())
	m, ok := n.cfg.Cluster.View().Member(from)
	granted := ok && from != n.self && m.State != membership.StateSuspect && n.cfg.Cluster.Alive(from) && n.lease.Grant(from)
	return &peerpb.LeaseResponse{Granted: granted}, nil
}

// leaseLoop renews this node's lease until the node closes.
func (n *Node) leaseLoop() {
	defer close(n.leaseDone)
	if n.cfg.LeaseDuration < 0 {
		return
	}
	ticker := time.NewTicker(n.lease.Duration() / (lease.Duration / lease.RenewInterval))
	defer ticker.Stop()
	var renewing sync.WaitGroup
	defer renewing.Wait()
	for {
		for _, id := range n.livePeers() {
			renewing.Add(1)
			go func() {
				defer renewing.Done()
				n.renew(id)
			}()
		}
		select {
		case <-n.stop:
			return
		case <-ticker.C:
		}
	}
}

func (n *Node) renew(id ring.NodeID) {
	c, err := n.peerClient(id)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.lease.Duration())
	defer cancel()
	sent := n.lease.Now()
	resp, err := c.Lease(ctx, &peerpb.LeaseRequest{From: string(n.self)})
	if err == nil && resp.GetGranted() {
		n.lease.Received(id, sent)
	}
}

// checkLease notes until when this node holds its lease, and makes it
// catch up when the lease ends.
func (n *Node) checkLease() {
	if n.cfg.LeaseDuration < 0 {
		n.leaseUntil.Store(math.MaxInt64)
		return
	}
	r, err := n.currentRing()
	if err != nil {
		return
	}
	var live []ring.NodeID
	for _, m := range r.Nodes() {
		if m.ID != n.self && n.cfg.Cluster.Alive(m.ID) {
			live = append(live, m.ID)
		}
	}
	until, first := n.lease.Until(live, r.Len())
	n.leaseUntil.Store(until.UnixNano())
	held := n.leaseHeld()
	if n.leaseWasHeld.Swap(held) && !held {
		why := fmt.Sprintf("%d of %d members seen alive", len(live)+1, r.Len())
		if first != "" {
			why = "no recent grant from " + string(first)
		}
		n.startCatchUp("read lease ended: " + why)
	}
}

// leaseHeld reports whether this node holds its read lease now. Grants
// that arrived since the last check only make it end later.
func (n *Node) leaseHeld() bool { return time.Now().UnixNano() < n.leaseUntil.Load() }

// inChains reports whether chains keep member id: it is alive or suspect,
// or this node granted it a lease that has not run out, or this node does
// not see a majority of the ring alive (and so drops no member).
func (n *Node) inChains(id ring.NodeID) bool {
	return n.cfg.Cluster.Alive(id) || (n.cfg.LeaseDuration >= 0 && n.lease.Fenced(id)) || !n.majority()
}

// majority reports whether this node sees more than half of the ring's
// members alive, itself included.
func (n *Node) majority() bool {
	r, err := n.currentRing()
	if err != nil {
		return false
	}
	alive := 0
	for _, m := range r.Nodes() {
		if m.ID == n.self || n.cfg.Cluster.Alive(m.ID) {
			alive++
		}
	}
	return 2*alive > r.Len()
}
