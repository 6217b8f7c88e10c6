package node

import (
	"sync/atomic"
)

// Stats counts a node's chain traffic with the other nodes since it
// started. Messages from a node to itself never leave its loop and are not
// counted.
type Stats struct {
	// MessagesSent is the chain messages this node put into Deliver calls
	// to other nodes, retransmissions included, whether or not the call
	// succeeded.
	MessagesSent uint64
	// DeliverCalls is the Deliver calls this node made; one call carries a
	// batch of up to 256 messages for one peer.
	DeliverCalls uint64
	// DeliverFailures is the Deliver calls that returned an error. Their
	// messages may or may not have arrived.
	DeliverFailures uint64
	// MessagesDropped is the messages this node gave up on before any
	// call: the recipient had no address or could not be dialled, or its
	// queue was full. Messages still queued when a node closes are not
	// counted.
	MessagesDropped uint64
	// ForwardsCoalesced is the Forwards sent again while an earlier copy
	// was still queued or in its Deliver call, and so not sent (see
	// peer).
	ForwardsCoalesced uint64
	// MessagesReceived is the chain messages other nodes delivered to this
	// node.
	MessagesReceived uint64
	// BasesFetched is the commits this node coordinated whose chain
	// needed bases fetched ahead (fetch.go).
	BasesFetched uint64
	// Syncs is the WAL syncs this node made to make chain commits durable,
	// one per keyspace written since the previous one (sync.go); a commit
	// on a one-node ring, which Pebble syncs itself, counts one.
	Syncs uint64
	// MemberCommits is the chain commits this node wrote as a member
	// (applied or passed through); without group commit each would take
	// a sync of its own.
	MemberCommits uint64
	// CombinedCommits is the commits this node coordinated that combined
	// several requests' blind ops (combine.go), and CombinedRequests the
	// requests they carried.
	CombinedCommits, CombinedRequests uint64
	// CopiesLost is the copies of a blob this node took without a commit
	// that had passed through it, because every source that could hold
	// the commit lost its stage of it in a restart (rebalance.Lost): the
	// commit is lost, every replica that held it having failed at once.
	CopiesLost uint64
}

// counters are the live counts behind Stats.
type counters struct {
	sent, calls, failures, dropped, coalesced, received, fetched, syncs, memberCommits, copiesLost atomic.Uint64
}

// counters returns n's counters.
func (n *Node) counters() *counters { return &n.stats }

// Stats returns n's counts so far. Each count only grows; the counts are
// read one by one, so a snapshot taken while messages flow may be off by
// the calls in progress.
func (n *Node) Stats() Stats {
	c := n.counters()
	st := Stats{
		MessagesSent:      c.sent.Load(),
		DeliverCalls:      c.calls.Load(),
		DeliverFailures:   c.failures.Load(),
		MessagesDropped:   c.dropped.Load(),
		ForwardsCoalesced: c.coalesced.Load(),
		MessagesReceived:  c.received.Load(),
		BasesFetched:      c.fetched.Load(),
		Syncs:             c.syncs.Load(),
		MemberCommits:     c.memberCommits.Load(),
		CopiesLost:        c.copiesLost.Load(),
	}
	n.combiner.mu.Lock()
	st.CombinedCommits, st.CombinedRequests = n.combiner.combined, n.combiner.requests
	n.combiner.mu.Unlock()
	return st
}
