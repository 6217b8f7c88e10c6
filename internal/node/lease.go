package node

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/tyrstore/tyr/api/peerpb"
	"github.com/tyrstore/tyr/internal/membership"
	"github.com/tyrstore/tyr/internal/ring"
)

// Read leases (internal/lease): this node asks the other members for a
// grant every renewal, and serves reads only while grants from a majority
// of the ring hold. Before it leaves a member it takes for dead out of its
// chains, it revokes that member's grants on a majority and waits until
// the grants they gave it ran out; it keeps revoking while the member is
// dead in its view. A node that does not see a majority alive leaves no
// member out.

// exclusions holds, for each member this node takes for dead, when it may
// leave the member out of its chains (see revokeRound).
type exclusions struct {
	mu    sync.Mutex
	after map[ring.NodeID]time.Time
}

// Lease implements peerpb.PeerServer: a grant to a caller this node sees
// alive (not suspect, not dead) and has not revoked lately.
func (n *Node) Lease(_ context.Context, req *peerpb.LeaseRequest) (*peerpb.LeaseResponse, error) {
	from := ring.NodeID(req.GetFrom())
	m, ok := n.cfg.Cluster.View().Member(from)
	granted := ok && from != n.self && m.State != membership.StateSuspect && n.cfg.Cluster.Alive(from) && n.lease.Grant(from)
	return &peerpb.LeaseResponse{Granted: granted}, nil
}

// Revoke implements peerpb.PeerServer. A node that is no member was never
// granted anything, and is not remembered.
func (n *Node) Revoke(_ context.Context, req *peerpb.RevokeRequest) (*peerpb.RevokeResponse, error) {
	node := ring.NodeID(req.GetNode())
	if _, ok := n.cfg.Cluster.View().Member(node); !ok {
		return &peerpb.RevokeResponse{}, nil
	}
	age, granted := n.lease.Revoke(node)
	return &peerpb.RevokeResponse{Granted: granted, AgeNanos: int64(age)}, nil
}

// leaseLoop renews this node's lease and revokes the grants of the members
// it takes for dead, every renewal, until the node closes.
func (n *Node) leaseLoop() {
	defer close(n.leaseDone)
	if n.cfg.LeaseDuration < 0 {
		return
	}
	ticker := time.NewTicker(n.lease.RenewInterval())
	defer ticker.Stop()
	var work sync.WaitGroup
	defer work.Wait()
	for {
		if r, err := n.currentRing(); err == nil {
			for _, m := range r.Nodes() {
				id := m.ID
				switch {
				case id == n.self:
					continue
				case n.cfg.Cluster.Alive(id):
					n.excl.mu.Lock()
					delete(n.excl.after, id)
					n.excl.mu.Unlock()
					work.Add(1)
					go func() { defer work.Done(); n.renew(id) }()
				default:
					work.Add(1)
					go func() { defer work.Done(); n.revokeRound(r, id) }()
				}
			}
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

// revokeRound revokes dead's grants here and on every member this node sees
// alive; once a majority of the ring (this node included) did, this node
// may leave dead out of its chains from when the newest of their grants
// runs out.
func (n *Node) revokeRound(r *ring.Ring, dead ring.NodeID) {
	var mu sync.Mutex
	revoked := 1
	age, granted := n.lease.Revoke(dead)
	after := n.lease.Now()
	if granted {
		after = after.Add(n.lease.Duration() - age)
	}
	var wg sync.WaitGroup
	for _, m := range r.Nodes() {
		id := m.ID
		if id == n.self || id == dead || !n.cfg.Cluster.Alive(id) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := n.peerClient(id)
			if err != nil {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), n.lease.Duration())
			defer cancel()
			resp, err := c.Revoke(ctx, &peerpb.RevokeRequest{Node: string(dead)})
			if err != nil {
				return
			}
			// The grant was given age before the member answered, so
			// before now on this node's clock.
			end := n.lease.Now().Add(n.lease.Duration() - time.Duration(resp.GetAgeNanos()))
			mu.Lock()
			defer mu.Unlock()
			revoked++
			if resp.GetGranted() && end.After(after) {
				after = end
			}
		}()
	}
	wg.Wait()
	if 2*revoked <= r.Len() {
		return
	}
	n.excl.mu.Lock()
	defer n.excl.mu.Unlock()
	if prev, ok := n.excl.after[dead]; !ok || after.Before(prev) {
		n.excl.after[dead] = after
	}
}

// checkLease notes until when this node holds its lease, and makes it
// catch up when the lease ends.
func (n *Node) checkLease() {
	if n.cfg.LeaseDuration < 0 {
		n.holdLeaseForGood()
		return
	}
	r, err := n.currentRing()
	if err != nil {
		return
	}
	var others []ring.NodeID
	for _, m := range r.Nodes() {
		if m.ID != n.self {
			others = append(others, m.ID)
		}
	}
	n.leaseUntil.Store(n.lease.Until(others).UnixNano())
	switch held, was := n.leaseHeld(), n.leaseWasHeld.Load(); {
	case held && !was:
		// The others may have committed without this node while it held
		// no lease: it catches up before it serves. CatchingUp stays true
		// throughout: the catch-up is on before leaseWasHeld is set, and
		// leaseWasHeld is set before the wake-up, so a round that ended
		// without it (and waits for another) gets one.
		n.catch.active.Store(true)
		n.leaseSince.Store(time.Now().UnixNano())
		n.leaseWasHeld.Store(true)
		n.wakeCatchUp("read lease granted: catching up on what the others may have committed without this node")
	case !held && was:
		n.leaseWasHeld.Store(false)
		n.startCatchUp("read lease ended: no grants from a majority of the cluster")
	}
}

// holdLeaseForGood is the lease without leases (Config.LeaseDuration
// negative): held from the start and never ending. Start notes it before
// the catch-up loop runs, so that the end of the first catch-up counts even
// if it comes before the loop's first tick: with no lease to be granted,
// checkLease starts no round whose end would count instead.
func (n *Node) holdLeaseForGood() {
	n.leaseUntil.Store(math.MaxInt64)
	n.leaseWasHeld.Store(true)
}

// holdLeaseAlone notes the lease of a node that starts alone (see alone):
// a ring of this node alone is its own majority, so it holds the lease at
// once, and its first catch-up round, which has nothing to do, counts (see
// catchUpLoop) without waiting for a tick to note the lease. Once other
// members join, checkLease finds the lease needs their grants.
func (n *Node) holdLeaseAlone() {
	n.leaseUntil.Store(n.lease.Until(nil).UnixNano())
	n.leaseSince.Store(time.Now().UnixNano())
	n.leaseWasHeld.Store(true)
}

// leaseHeld reports whether this node holds its read lease now. Grants
// that arrived since the last check only make it end later.
func (n *Node) leaseHeld() bool { return time.Now().UnixNano() < n.leaseUntil.Load() }

// inChains reports whether chains keep member id: it is alive or suspect,
// or this node does not see a majority of the ring alive (and so leaves no
// member out), or the grants id may hold have not been revoked on a
// majority and run out.
func (n *Node) inChains(id ring.NodeID) bool {
	if n.cfg.Cluster.Alive(id) || !n.majority() {
		return true
	}
	if n.cfg.LeaseDuration < 0 {
		return false
	}
	n.excl.mu.Lock()
	after, ok := n.excl.after[id]
	n.excl.mu.Unlock()
	return !ok || n.lease.Now().Before(after)
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
