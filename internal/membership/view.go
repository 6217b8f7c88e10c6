package membership

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/ring"
)

// Limits on what a member advertises and on how many members a view holds.
// Every view is held by every node and sent whole in every push/pull, so its
// size is bounded.
const (
	// MetaBytesMax is the largest encoded Meta. It equals memberlist's limit
	// on node metadata (memberlist.MetaMaxSize), which node.go checks at
	// compile time; memberlist panics on larger metadata, so Meta.Encode
	// returns an error instead.
	MetaBytesMax = 512
	// RPCAddrBytesMax is the longest RPCAddr. Chosen so that the largest
	// Meta of format 1 fits in MetaBytesMax with room to grow.
	RPCAddrBytesMax = 200
	// GossipAddrBytesMax is the longest gossip address ("host:port") a view
	// stores; a bracketed IPv6 address with a port is at most 47 bytes.
	GossipAddrBytesMax = 128
	// WeightMax is the largest Meta.Weight: weights are capacities relative
	// to a standard node of weight 1, and a bound keeps one misconfigured
	// node from making every member's ring exceed its token limit.
	WeightMax = 1024
	// MembersMax is the most members a view holds, Left members included.
	// At the largest Meta, a push/pull carries about 2.6 MiB of members.
	MembersMax = 4096
)

// metaFormatV1 is the first Meta format. Append-only: see codec.go.
const metaFormatV1 = 1

// metaBytesMaxV1 is the largest Meta of format 1: format byte, ID and
// RPCAddr with their 2-byte length prefixes, weight (5-byte varint),
// StartedUnixNano and Incarnation (10-byte varints), flags.
const metaBytesMaxV1 = 1 + (2 + ring.NodeIDBytesMax) + (2 + RPCAddrBytesMax) + 5 + 10 + 10 + 1

// Compile-time relations: the largest Meta fits memberlist's limit, and a
// length prefix of 2 bytes covers every string field.
const (
	_ uint = MetaBytesMax - metaBytesMaxV1
	_ uint = 1<<14 - 1 - ring.NodeIDBytesMax
	_ uint = 1<<14 - 1 - RPCAddrBytesMax
)

var (
	// ErrInvalid marks a bad Config, Meta, Event or argument. It is
	// errs.ErrInvalidArgument.
	ErrInvalid = errs.ErrInvalidArgument
	// ErrMalformed marks bytes from the network that do not decode. It wraps
	// errs.ErrInvalidArgument: the sender, not this node, is at fault, and
	// nothing was changed.
	ErrMalformed = fmt.Errorf("malformed gossip data (%w)", errs.ErrInvalidArgument)
	// ErrDuplicateID is returned when two processes claim one node ID: a
	// second process announces a live member's ID from a different gossip
	// endpoint and RPC address. It wraps errs.ErrExists.
	ErrDuplicateID = fmt.Errorf("membership: node ID claimed by two processes (%w)", errs.ErrExists)
	// ErrTooManyMembers is returned when a view already holds MembersMax
	// members and a new one arrives. It wraps errs.ErrTooLarge.
	ErrTooManyMembers = fmt.Errorf("membership: more than %d members (%w)", MembersMax, errs.ErrTooLarge)
)

// State is what a view believes about a member's liveness.
type State uint8

// The states of a member. Zero is unset, never a valid state.
//
// Alive and Suspect members are usable. Suspect means this node's own probes
// of the member have failed and nothing has shown it alive since; SWIM gives
// the member a suspicion timeout to refute it before the cluster declares it
// Dead. Dead members are not used for requests but keep their place in the
// ring. Left members left on purpose and are out of the ring.
const (
	StateAlive State = 1 + iota
	StateSuspect
	StateDead
	StateLeft
	stateEnd // one past the last valid state
)

// String returns the state's name.
func (s State) String() string {
	switch s {
	case StateAlive:
		return "alive"
	case StateSuspect:
		return "suspect"
	case StateDead:
		return "dead"
	case StateLeft:
		return "left"
	default:
		return fmt.Sprintf("State(%d)", uint8(s))
	}
}

// Meta is what a member advertises about itself, carried in memberlist's
// node metadata. It is encoded with Encode, at most MetaBytesMax bytes.
//
// A member's metadata is versioned by (StartedUnixNano, Incarnation): a
// process restart gives a later StartedUnixNano, and each change a running
// process makes to its own Meta increments Incarnation. Views keep the
// newest version they have seen and ignore older ones. This version is
// separate from memberlist's own incarnation number, which it does not
// expose.
type Meta struct {
	// ID is the member's node ID, also its memberlist name and its name in
	// the ring.
	ID ring.NodeID
	// RPCAddr is where the member serves tyr's RPCs ("host:port"), 1 to
	// RPCAddrBytesMax bytes.
	RPCAddr string
	// Weight is the member's capacity in the ring (ring.Node.Weight), 1 to
	// WeightMax.
	Weight uint32
	// StartedUnixNano is when the member's process started, in wall-clock
	// nanoseconds since the Unix epoch; must be positive.
	StartedUnixNano int64
	// Incarnation counts the changes the member made to its own Meta since
	// it started.
	Incarnation uint64
	// Leaving is set by a member that is leaving on purpose, just before it
	// tells memberlist to leave, so that every view can tell a departure
	// (Left, out of the ring) from a failure (Dead, still in the ring).
	Leaving bool
	// CatchingUp is set by a member that may have missed commits (it has
	// just started, or it noticed it was cut off) until it has copied what
	// it missed from the other replicas. Such a member takes part in
	// commits but serves no reads.
	CatchingUp bool
}

// Validate reports every problem with m, or nil.
func (m Meta) Validate() error {
	var problems []error
	if err := validateID(m.ID); err != nil {
		problems = append(problems, err)
	}
	if m.RPCAddr == "" || len(m.RPCAddr) > RPCAddrBytesMax {
		problems = append(problems, fmt.Errorf("RPC address %q: length must be in [1, %d]", m.RPCAddr, RPCAddrBytesMax))
	}
	if m.Weight < 1 || m.Weight > WeightMax {
		problems = append(problems, fmt.Errorf("weight %d out of range [1, %d]", m.Weight, WeightMax))
	}
	if m.StartedUnixNano <= 0 {
		problems = append(problems, fmt.Errorf("start time %d: must be positive", m.StartedUnixNano))
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("membership: %w: meta of %q: %w", ErrInvalid, m.ID, errors.Join(problems...))
}

// validateID applies ring's rules for node IDs, so that every member of a
// view can be put in a ring.
func validateID(id ring.NodeID) error {
	switch {
	case id == "":
		return fmt.Errorf("empty node ID")
	case len(id) > ring.NodeIDBytesMax:
		return fmt.Errorf("node ID is %d bytes, longer than the limit of %d", len(id), ring.NodeIDBytesMax)
	case !utf8.ValidString(string(id)):
		return fmt.Errorf("node ID %q is not valid UTF-8", id)
	}
	return nil
}

// compareVersion orders m and o by (StartedUnixNano, Incarnation).
func (m Meta) compareVersion(o Meta) int {
	if m.StartedUnixNano != o.StartedUnixNano {
		if m.StartedUnixNano < o.StartedUnixNano {
			return -1
		}
		return 1
	}
	switch {
	case m.Incarnation < o.Incarnation:
		return -1
	case m.Incarnation > o.Incarnation:
		return 1
	}
	return 0
}

// Encode returns m's encoding, format 1 (append-only; see codec.go):
//
//	byte     format (1)
//	string   ID                 (uvarint length, bytes)
//	string   RPCAddr
//	uvarint  Weight
//	varint   StartedUnixNano
//	uvarint  Incarnation
//	byte     flags              (bit 0: Leaving, bit 1: CatchingUp)
//
// It returns an error wrapping ErrInvalid if m is invalid or the encoding is
// longer than MetaBytesMax.
func (m Meta) Encode() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	e := encoder{buf: make([]byte, 0, 64)}
	m.encodeTo(&e)
	if len(e.buf) > MetaBytesMax {
		return nil, fmt.Errorf("membership: %w: meta of %q encodes to %d bytes, more than memberlist's limit of %d",
			ErrInvalid, m.ID, len(e.buf), MetaBytesMax)
	}
	return e.buf, nil
}

func (m Meta) encodeTo(e *encoder) {
	e.byte(metaFormatV1)
	e.string(string(m.ID))
	e.string(m.RPCAddr)
	e.uvarint(uint64(m.Weight))
	e.varint(m.StartedUnixNano)
	e.uvarint(m.Incarnation)
	var flags byte
	if m.Leaving {
		flags |= 1
	}
	if m.CatchingUp {
		flags |= 2
	}
	e.byte(flags)
}

// DecodeMeta decodes and validates a Meta written by Encode, or by a later
// format, whose extra fields it ignores. It returns an error wrapping
// ErrMalformed if b does not decode or is longer than MetaBytesMax, and one
// wrapping ErrInvalid if the decoded Meta is invalid.
func DecodeMeta(b []byte) (Meta, error) {
	if len(b) > MetaBytesMax {
		return Meta{}, fmt.Errorf("membership: %w: meta is %d bytes, more than the limit of %d",
			ErrMalformed, len(b), MetaBytesMax)
	}
	d := decoder{buf: b, what: "member meta"}
	m := decodeMetaFrom(&d)
	if d.err != nil {
		return Meta{}, d.err
	}
	if err := m.Validate(); err != nil {
		return Meta{}, err
	}
	return m, nil
}

func decodeMetaFrom(d *decoder) Meta {
	var m Meta
	d.formatByte()
	m.ID = ring.NodeID(d.string("ID", ring.NodeIDBytesMax))
	m.RPCAddr = d.string("RPC address", RPCAddrBytesMax)
	weight := d.uvarint()
	if weight > WeightMax {
		d.fail("weight %d out of range [1, %d]", weight, WeightMax)
	}
	m.Weight = uint32(weight)
	m.StartedUnixNano = d.varint()
	m.Incarnation = d.uvarint()
	flags := d.byte()
	m.Leaving, m.CatchingUp = flags&1 != 0, flags&2 != 0
	return m
}

// Member is one entry of a view.
type Member struct {
	Meta  Meta
	State State
	// GossipAddr is the member's memberlist endpoint ("host:port") as last
	// reported, or empty if unknown. It tells a restart of one process
	// endpoint apart from a second process claiming the same ID.
	GossipAddr string
}

// EventKind says what an Event reports.
type EventKind uint8

// The kinds of event a view applies. Numbers are not on the wire.
const (
	// EventJoin: the member is alive with this Meta; it joined, or came
	// back after being suspected or declared dead.
	EventJoin EventKind = 1 + iota
	// EventUpdate: the member is alive and changed its Meta. It has the
	// same effect as EventJoin; the two are kept apart for logs.
	EventUpdate
	// EventSuspect: this node's probes of the member failed.
	EventSuspect
	// EventDead: the failure detector declared the member dead. A member
	// whose newest Meta says Leaving becomes Left instead.
	EventDead
	// EventLeave: the member left on purpose.
	EventLeave
)

// String returns the kind's name.
func (k EventKind) String() string {
	switch k {
	case EventJoin:
		return "join"
	case EventUpdate:
		return "update"
	case EventSuspect:
		return "suspect"
	case EventDead:
		return "dead"
	case EventLeave:
		return "leave"
	default:
		return fmt.Sprintf("EventKind(%d)", uint8(k))
	}
}

// Event is a change of a member's state, as reported by the failure
// detector.
type Event struct {
	Kind EventKind
	// Meta is the member's metadata. EventJoin and EventUpdate need a valid
	// Meta. The other kinds need only Meta.ID; if Meta.StartedUnixNano is
	// zero, they apply to whichever run of the member the view knows,
	// otherwise only to that run or a newer one, and a newer, valid Meta
	// replaces the view's.
	Meta Meta
	// GossipAddr is the member's memberlist endpoint, or empty if unknown.
	GossipAddr string
}

// View is a node's knowledge of the cluster: every member it has heard of,
// with its state and metadata. It is a pure data structure: Apply and
// MergeRemote change it only as a function of their arguments and its
// contents, with no clock, randomness or I/O, so views fed the same events
// in the same order are equal.
//
// The zero View is empty and ready to use. A View is not safe for concurrent
// use, and assigning one View to another shares its contents: use Clone.
//
// Members are never removed. Dead members stay because placement must not
// change when a node fails (see Ring). Left members stay as tombstones, so
// that a delayed message about a run that left cannot bring it back; the
// same node restarted has a newer Meta and comes back as a new run. Both
// count towards MembersMax. Removing a dead node for good, and moving its
// data, is a ring change made on purpose (decommissioning), not a
// membership event.
type View struct {
	// members maps each ID to its entry; members[id].Meta.ID == id, every
	// Meta is valid and every State is in [StateAlive, StateLeft].
	members map[ring.NodeID]Member
}

// Clone returns a deep copy of v.
func (v *View) Clone() *View {
	c := &View{members: make(map[ring.NodeID]Member, len(v.members))}
	for id, m := range v.members {
		c.members[id] = m
	}
	return c
}

// Len returns the number of members, Left members included.
func (v *View) Len() int { return len(v.members) }

// Member returns the entry for id, and whether there is one.
func (v *View) Member(id ring.NodeID) (Member, bool) {
	m, ok := v.members[id]
	return m, ok
}

// Members returns every member sorted by ID. The caller owns the slice.
func (v *View) Members() []Member {
	out := make([]Member, 0, len(v.members))
	for _, m := range v.members {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(string(a.Meta.ID), string(b.Meta.ID)) })
	return out
}

// Count returns the number of members in state s.
func (v *View) Count(s State) int {
	n := 0
	for _, m := range v.members {
		if m.State == s {
			n++
		}
	}
	return n
}

// Apply applies one event and reports whether the view changed. It returns
// an error, and changes nothing, if the event is invalid (ErrInvalid), if it
// announces a live member's ID from a different gossip endpoint with a
// different RPC address (ErrDuplicateID), or if it adds a member to a full
// view (ErrTooManyMembers). Events about unknown members other than joins
// and updates, and events about an older run of a member, are ignored.
func (v *View) Apply(e Event) (bool, error) {
	if err := validateID(e.Meta.ID); err != nil {
		return false, fmt.Errorf("membership: %w: %s event: %w", ErrInvalid, e.Kind, err)
	}
	if len(e.GossipAddr) > GossipAddrBytesMax {
		return false, fmt.Errorf("membership: %w: %s event for %q: gossip address is %d bytes, longer than the limit of %d",
			ErrInvalid, e.Kind, e.Meta.ID, len(e.GossipAddr), GossipAddrBytesMax)
	}
	switch e.Kind {
	case EventJoin, EventUpdate:
		return v.applyAlive(e)
	case EventSuspect, EventDead, EventLeave:
		return v.applyFailure(e)
	default:
		return false, fmt.Errorf("membership: %w: unknown event kind %d", ErrInvalid, uint8(e.Kind))
	}
}

// applyAlive applies EventJoin and EventUpdate.
func (v *View) applyAlive(e Event) (bool, error) {
	if err := e.Meta.Validate(); err != nil {
		return false, err
	}
	current, known := v.members[e.Meta.ID]
	if !known {
		if len(v.members) >= MembersMax {
			return false, fmt.Errorf("%w: cannot add %q", ErrTooManyMembers, e.Meta.ID)
		}
		v.set(Member{Meta: e.Meta, State: StateAlive, GossipAddr: e.GossipAddr})
		return true, nil
	}
	order := e.Meta.compareVersion(current.Meta)
	if order < 0 {
		return false, nil // an older run or an older change: stale
	}
	if current.State == StateLeft && order == 0 {
		return false, nil // a run that left never comes back
	}
	if err := checkConflict(current, e.Meta, e.GossipAddr); err != nil {
		return false, err
	}
	next := current
	next.Meta = e.Meta
	next.State = StateAlive
	if e.GossipAddr != "" {
		next.GossipAddr = e.GossipAddr
	}
	if next == current {
		return false, nil
	}
	v.set(next)
	return true, nil
}

// checkConflict reports whether meta, announced from gossipAddr, comes from
// a second process claiming current's ID. While a member is alive or
// suspect, its ID belongs to its process: a different RPC address from a
// different (or unknown) gossip endpoint is another process. From the same
// gossip endpoint it is the same process restarted on a new RPC address,
// which the version check has already ordered.
func checkConflict(current Member, meta Meta, gossipAddr string) error {
	if current.State != StateAlive && current.State != StateSuspect {
		return nil
	}
	if current.Meta.RPCAddr == meta.RPCAddr {
		return nil
	}
	if current.GossipAddr != "" && current.GossipAddr == gossipAddr {
		return nil
	}
	return fmt.Errorf("%w: %q is a live member with RPC address %q (gossip address %q), and another process claims it with RPC address %q (gossip address %q)",
		ErrDuplicateID, current.Meta.ID, current.Meta.RPCAddr, current.GossipAddr, meta.RPCAddr, gossipAddr)
}

// applyFailure applies EventSuspect, EventDead and EventLeave.
func (v *View) applyFailure(e Event) (bool, error) {
	current, known := v.members[e.Meta.ID]
	if !known {
		return false, nil // nothing to place: the view never learned its weight
	}
	next := current
	adopted := false // whether the event carries a newer Meta, which replaces the view's
	if e.Meta.StartedUnixNano != 0 {
		order := e.Meta.compareVersion(current.Meta)
		if order < 0 {
			return false, nil // about an older run or an older change: stale
		}
		if order > 0 && e.Kind != EventSuspect {
			if err := e.Meta.Validate(); err != nil {
				return false, err
			}
			next.Meta = e.Meta
			if e.GossipAddr != "" {
				next.GossipAddr = e.GossipAddr
			}
			adopted = true
		}
	}
	switch {
	case current.State == StateLeft && !adopted:
		// Final for this run; only news of a newer Meta brings the ID back.
	case e.Kind == EventSuspect:
		if current.State == StateAlive {
			next.State = StateSuspect
		}
	case e.Kind == EventLeave || next.Meta.Leaving:
		next.State = StateLeft
	default: // EventDead of a member that did not say it was leaving
		next.State = StateDead
	}
	if next == current {
		return false, nil
	}
	v.set(next)
	return true, nil
}

// MergeRemote merges the members of another node's view, received in a
// push/pull state exchange, and reports whether v changed. It is the
// anti-entropy path for what the failure detector cannot tell a node: a node
// that joins late never hears of members that died or left before it came,
// yet must place data as everyone else does. The rules:
//
//   - An unknown member is added as Left if the remote says Left, and as
//     Dead otherwise: the local failure detector has already reported every
//     member it believes alive, so a member it did not report cannot be
//     vouched for. If the member is alive, the detector will report it and
//     EventJoin makes it Alive.
//   - A known Alive or Suspect member is the local detector's to judge; the
//     only remote news taken is Left for the same run (same
//     StartedUnixNano), which corrects a departure this node saw as a
//     failure because it missed the member's Leaving update.
//   - A known Dead or Left member takes a newer remote Meta (a restart, or a
//     weight change) and becomes Left if the remote says Left for that run,
//     and Dead otherwise, for the same reason as unknown members.
//
// Members are merged in ID order. Invalid members are skipped, as are new
// members beyond MembersMax; the returned error joins what was skipped, and
// the rest is merged.
func (v *View) MergeRemote(remote []Member) (bool, error) {
	sorted := slices.Clone(remote)
	slices.SortFunc(sorted, func(a, b Member) int { return strings.Compare(string(a.Meta.ID), string(b.Meta.ID)) })
	var changed bool
	var problems []error
	for _, r := range sorted {
		c, err := v.mergeMember(r)
		changed = changed || c
		if err != nil {
			problems = append(problems, err)
		}
	}
	if len(problems) > 0 {
		return changed, errs.JoinBounded(problems)
	}
	return changed, nil
}

// mergeMember merges one remote member; see MergeRemote.
func (v *View) mergeMember(r Member) (bool, error) {
	if err := r.Meta.Validate(); err != nil {
		return false, err
	}
	if r.State < StateAlive || r.State >= stateEnd {
		return false, fmt.Errorf("membership: %w: member %q has state %d", ErrInvalid, r.Meta.ID, uint8(r.State))
	}
	if len(r.GossipAddr) > GossipAddrBytesMax {
		return false, fmt.Errorf("membership: %w: member %q has a gossip address of %d bytes", ErrInvalid, r.Meta.ID, len(r.GossipAddr))
	}
	placementOnly := StateDead
	if r.State == StateLeft {
		placementOnly = StateLeft
	}
	current, known := v.members[r.Meta.ID]
	if !known {
		if len(v.members) >= MembersMax {
			return false, fmt.Errorf("%w: cannot add %q", ErrTooManyMembers, r.Meta.ID)
		}
		v.set(Member{Meta: r.Meta, State: placementOnly, GossipAddr: r.GossipAddr})
		return true, nil
	}
	next := current
	order := r.Meta.compareVersion(current.Meta)
	switch current.State {
	case StateAlive, StateSuspect:
		sameRun := r.Meta.StartedUnixNano == current.Meta.StartedUnixNano
		if r.State == StateLeft && sameRun && order >= 0 {
			next.Meta = r.Meta
			next.State = StateLeft
		}
	default: // StateDead, StateLeft
		if order > 0 {
			next.Meta = r.Meta
			next.State = placementOnly
			next.GossipAddr = r.GossipAddr
		} else if order == 0 && r.State == StateLeft {
			next.State = StateLeft
		}
	}
	if next == current {
		return false, nil
	}
	v.set(next)
	return true, nil
}

func (v *View) set(m Member) {
	if v.members == nil {
		v.members = make(map[ring.NodeID]Member)
	}
	v.members[m.Meta.ID] = m
}

// RingID identifies a ring membership: a content hash of the sorted list of
// (ID, weight) pairs of the members in the ring. Gossip gives no global
// order of membership changes, so a counter of changes would differ between
// nodes that heard of the same changes in different orders; a content hash
// is equal on every node that has the same members, whatever the order.
// Two nodes with equal RingIDs place data identically (given one
// ring.Config); different RingIDs mean they disagree, and at least one of
// them will learn more. A RingID names a membership; it does not order
// memberships, so a larger RingID is not a newer one.
//
// It is the first 8 bytes, big-endian, of the SHA-256 of "tyr/ring-id/v1\x00"
// followed, for each member in ID order, by the uvarint length of its ID,
// the ID and its weight as 4 big-endian bytes. Zero means no ring (no member
// outside Left).
type RingID uint64

// String returns id in hexadecimal.
func (id RingID) String() string { return fmt.Sprintf("%016x", uint64(id)) }

// ringIDPrefix versions the RingID hash input.
const ringIDPrefix = "tyr/ring-id/v1\x00"

// RingID returns the RingID of the ring members of v; see Ring.
func (v *View) RingID() RingID {
	return ringIDOf(v.ringNodes())
}

// ringIDOf hashes nodes, which must be sorted by ID.
func ringIDOf(nodes []ring.Node) RingID {
	if len(nodes) == 0 {
		return 0
	}
	h := sha256.New()
	buf := []byte(ringIDPrefix)
	for _, n := range nodes {
		buf = binary.AppendUvarint(buf, uint64(len(n.ID)))
		buf = append(buf, n.ID...)
		buf = binary.BigEndian.AppendUint32(buf, n.Weight)
	}
	h.Write(buf)
	sum := h.Sum(nil)
	return RingID(binary.BigEndian.Uint64(sum[:8]))
}

// ringNodes returns the ring members of v sorted by ID: every member not
// Left, whatever its liveness.
func (v *View) ringNodes() []ring.Node {
	nodes := make([]ring.Node, 0, len(v.members))
	for _, m := range v.members {
		if m.State != StateLeft {
			nodes = append(nodes, ring.Node{ID: m.Meta.ID, Weight: m.Meta.Weight})
		}
	}
	slices.SortFunc(nodes, func(a, b ring.Node) int { return strings.Compare(string(a.ID), string(b.ID)) })
	return nodes
}

// Ring builds the placement ring of v: every member that is not Left, with
// its advertised weight, at epoch RingID. The result depends only on cfg and
// on the (ID, weight) pairs of those members, so every node with the same
// members builds the same ring.
//
// Placement is separate from liveness. Dead and Suspect members stay in the
// ring: when a node dies, no chunk changes owner, so no data moves and no
// reader looks for data where it never was; requests and commit chains skip
// members that are not Alive (the View says which), and clients retry on
// another replica. A member leaves the ring only by leaving on purpose
// (Left), or later by a decommission that moves its data first.
//
// The ring's Epoch is the RingID, which identifies the membership but does
// not order it (see RingID); rings are told apart by equality of epochs
// here, not by comparison. It returns an error if no member is outside Left,
// or if ring.New rejects the membership (for example, too many tokens for
// cfg).
func (v *View) Ring(cfg ring.Config) (*ring.Ring, error) {
	nodes := v.ringNodes()
	if len(nodes) == 0 {
		return nil, fmt.Errorf("membership: %w: no member outside Left, so no ring", ErrInvalid)
	}
	r, err := ring.New(cfg, uint64(ringIDOf(nodes)), nodes)
	if err != nil {
		return nil, fmt.Errorf("membership: building the ring of %d members: %w", len(nodes), err)
	}
	return r, nil
}
