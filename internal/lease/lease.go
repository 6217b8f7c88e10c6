// Package lease decides when a node may serve reads from its own copy, and
// until when it must keep another node in its chains, so that a node cut off
// from the cluster stops serving reads before the others commit without it.
//
// Each node asks every other member it does not consider dead for a grant,
// every RenewInterval. A member grants only a node it considers alive (not
// suspect, not dead), and remembers when it last did. The protocol's rules:
//
//   - Holder: a node's lease is valid at time now while every member it
//     does not consider dead granted a request the node sent after
//     now - Duration, and those members and the node are a majority of the
//     ring. A node without a valid lease serves no reads: it catches up
//     first (internal/node).
//   - Granter: a member keeps a node it granted in its chains (as if alive)
//     until Duration after the last grant, whatever its membership view
//     says. Since the grant answered a request sent no later than the grant,
//     the holder's lease from that request ends no later than this fence.
//   - Commits need a majority: a node that does not see a majority of the
//     ring alive drops no member from its chains (internal/node).
//
// So a member that leaves a node out of a commit either is one the node
// counts on, which waited out its fence, so that the node's lease, which
// needed its grant, had ended; or is one the node considers dead, which in
// a clean partition (sides that cannot reach each other, each side
// connected) cannot see a majority, since the node's side had one. A node
// whose lease ends catches up before it serves again, which waits for the
// commits begun without it (internal/node/catchup.go). Durations are
// measured on each node's own monotonic clock; clocks may differ in value,
// not in rate (a drift of a few parts per million is far inside the margin
// between Duration and the membership's suspicion timeout).
//
// Partial partitions, where two members cannot reach each other but both
// reach others, are covered only as far as the failure detector's
// indirect probes keep such members from declaring each other dead
// (internal/membership).
//
// Tracker is safe for concurrent use and does no I/O: the caller sends the
// requests and reports the answers.
package lease

import (
	"sync"
	"time"

	"github.com/tyrstore/tyr/internal/ring"
)

// Defaults.
const (
	// Duration is how long a grant counts. It must be well below the
	// membership's shortest time from the first suspicion of a member to
	// its death (3 s with the default membership settings), which is the
	// earliest a member can leave another out of its chains on its own.
	Duration = 1500 * time.Millisecond
	// RenewInterval is how often a node asks each member for a grant; a
	// few requests fit in one Duration, so one lost answer does not end
	// the lease.
	RenewInterval = 250 * time.Millisecond
)

// Tracker holds one node's grants, received and given.
type Tracker struct {
	duration time.Duration
	now      func() time.Time

	mu       sync.Mutex
	received map[ring.NodeID]time.Time // member -> send time of the newest granted request
	given    map[ring.NodeID]time.Time // node -> when this node last granted it
}

// New returns a Tracker with grants lasting duration (Duration if zero),
// on clock now (time.Now if nil).
func New(duration time.Duration, now func() time.Time) *Tracker {
	if duration <= 0 {
		duration = Duration
	}
	if now == nil {
		now = time.Now
	}
	return &Tracker{duration: duration, now: now,
		received: map[ring.NodeID]time.Time{}, given: map[ring.NodeID]time.Time{}}
}

// Duration is how long a grant counts.
func (t *Tracker) Duration() time.Duration { return t.duration }

// Now is the tracker's clock, for stamping requests.
func (t *Tracker) Now() time.Time { return t.now() }

// Received records that member granted a request this node sent at sent.
func (t *Tracker) Received(member ring.NodeID, sent time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if sent.After(t.received[member]) {
		t.received[member] = sent
	}
}

// Grant records that this node grants node a lease now, and returns true;
// call it only when this node considers node alive.
func (t *Tracker) Grant(node ring.NodeID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.given[node] = t.now()
	return true
}

// Until returns when this node's lease ends, given the grants received so
// far: Duration after the send time of the oldest of the newest granted
// requests of the members in live, if live plus this node are more than
// half of ringSize members; the zero time otherwise. live lists the members
// this node does not consider dead, itself excluded. It also returns the
// member whose grant ends first (or is missing), if any.
func (t *Tracker) Until(live []ring.NodeID, ringSize int) (time.Time, ring.NodeID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if 2*(len(live)+1) <= ringSize {
		return time.Time{}, ""
	}
	var until time.Time
	var first ring.NodeID
	for i, id := range live {
		sent, ok := t.received[id]
		if !ok {
			return time.Time{}, id
		}
		if end := sent.Add(t.duration); i == 0 || end.Before(until) {
			until, first = end, id
		}
	}
	if len(live) == 0 {
		return time.Unix(1<<62, 0), ""
	}
	return until, first
}

// Valid reports whether this node's lease holds now (see Until), and
// otherwise the member whose grant is missing or ran out, if any.
func (t *Tracker) Valid(live []ring.NodeID, ringSize int) (bool, ring.NodeID) {
	until, first := t.Until(live, ringSize)
	if t.now().Before(until) {
		return true, ""
	}
	return false, first
}

// Fenced reports whether this node granted node a lease within the last
// Duration, so must keep node in its chains whatever its view says.
func (t *Tracker) Fenced(node ring.NodeID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	g, ok := t.given[node]
	return ok && t.now().Sub(g) < t.duration
}
