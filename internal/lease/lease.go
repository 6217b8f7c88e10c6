// Package lease decides when a node may serve reads from its own copy, and
// when a member may leave a node it takes for dead out of its chains, so
// that a node cut off from the cluster stops serving reads before the
// others commit without it.
//
// Each node asks the other members for a grant every RenewInterval. A member
// grants a node it sees alive (not suspect, not dead) unless it revoked the
// node's grants in the last RevokeHold. The rules:
//
//   - Holder: a node's lease is valid while more than half of the ring's
//     members (itself included) granted it a request sent within the last
//     Duration. A node without a valid lease serves no reads; it catches up
//     first (internal/node).
//   - Excluder: before a member leaves a node out of a chain, it revokes
//     the node's grants on more than half of the ring (itself included),
//     and waits until every grant those members gave it has run out
//     (Duration after the grant). It keeps revoking while it leaves the
//     node out.
//
// Two majorities of one ring share a member, and a member that revoked
// grants nothing for RevokeHold, so once the excluder's wait ends the node
// cannot hold grants from a majority: its lease has ended. A node whose
// lease ends catches up before it serves again, which waits for the commits
// begun without it (internal/node/catchup.go). Revoking needs a majority
// too, so a member cut off with a minority leaves no one out: commits that
// need the others wait (or fail) instead.
//
// Time is measured on each node's own monotonic clock; a revoking member
// learns how long ago each grant was given, not when. Clocks may differ in
// value, not in rate (a drift of a few parts per million is far inside the
// margins).
//
// Tracker is safe for concurrent use and does no I/O: the caller sends the
// requests and reports the answers.
package lease

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/tyrstore/tyr/internal/ring"
)

// Defaults.
const (
	// Duration is how long a grant counts. Shorter makes a cut-off node
	// stop serving sooner and makes the others wait less before leaving it
	// out; it must leave room for a few renewals.
	Duration = 1500 * time.Millisecond
	// RenewInterval is how often a node asks each member for a grant; a
	// few requests fit in one Duration, so one lost answer does not end
	// the lease.
	RenewInterval = 250 * time.Millisecond
)

// Tracker holds one node's grants, received and given, and its revocations.
type Tracker struct {
	duration time.Duration
	now      func() time.Time

	mu       sync.Mutex
	received map[ring.NodeID]time.Time // member -> send time of the newest granted request
	given    map[ring.NodeID]time.Time // node -> when this node last granted it
	revoked  map[ring.NodeID]time.Time // node -> when this node last revoked its grants
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
	return &Tracker{duration: duration, now: now, received: map[ring.NodeID]time.Time{},
		given: map[ring.NodeID]time.Time{}, revoked: map[ring.NodeID]time.Time{}}
}

// Duration is how long a grant counts.
func (t *Tracker) Duration() time.Duration { return t.duration }

// RenewInterval is how often to ask for grants: RenewInterval scaled to
// this tracker's Duration.
func (t *Tracker) RenewInterval() time.Duration { return t.duration * RenewInterval / Duration }

// RevokeHold is how long a revocation stops grants: two Durations, so an
// excluder that keeps revoking every RenewInterval keeps the node without
// grants from this member.
func (t *Tracker) RevokeHold() time.Duration { return 2 * t.duration }

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

// Grant grants node a lease now unless this node revoked its grants within
// RevokeHold; call it only when this node sees node alive.
func (t *Tracker) Grant(node ring.NodeID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if r, ok := t.revoked[node]; ok && now.Sub(r) < t.RevokeHold() {
		return false
	}
	t.given[node] = now
	return true
}

// Revoke stops grants to node for RevokeHold and returns how long ago this
// node last granted it, or false if it never did.
func (t *Tracker) Revoke(node ring.NodeID) (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.revoked[node] = now
	g, ok := t.given[node]
	return now.Sub(g), ok
}

// Until returns when this node's lease ends, given the grants received so
// far from members (the ring's other members): Duration after the send time
// of the request whose grant, counting from the newest, completes a
// majority of the ring with this node. The zero time if there is no such
// majority yet; far in the future for a ring of this node alone.
func (t *Tracker) Until(members []ring.NodeID) time.Time {
	need := (len(members) + 1) / 2 // grants that make a majority of the ring with this node
	if need == 0 {
		return time.Unix(0, math.MaxInt64)
	}
	t.mu.Lock()
	sent := make([]time.Time, 0, len(members))
	for _, id := range members {
		if s, ok := t.received[id]; ok {
			sent = append(sent, s)
		}
	}
	t.mu.Unlock()
	if len(sent) < need {
		return time.Time{}
	}
	slices.SortFunc(sent, func(a, b time.Time) int { return b.Compare(a) })
	return sent[need-1].Add(t.duration)
}
