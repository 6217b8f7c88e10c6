// Tests of the pure view: Meta encoding and its limits, the state machine
// of View.Apply, conflict detection, anti-entropy (MergeRemote), and the
// ring a view builds: dead members stay in it, left members leave it, and
// the RingID depends only on the (ID, weight) set, never on the order of
// events. No sockets or clocks are involved; everything is deterministic.
// The randomized test prints its seed; reproduce a failure with
//
//	go test ./internal/membership/ -run TestView_RingID_orderIndependent -seed=N
package membership

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/ring"
)

// meta returns a valid Meta for id, started at run.
func meta(id string, run int64) Meta {
	return Meta{ID: ring.NodeID(id), RPCAddr: id + ":7000", Weight: 1, StartedUnixNano: run}
}

func join(m Meta) Event { return Event{Kind: EventJoin, Meta: m, GossipAddr: "gossip-" + string(m.ID)} }

func mustApply(t *testing.T, v *View, e Event) bool {
	t.Helper()
	changed, err := v.Apply(e)
	if err != nil {
		t.Fatalf("Apply(%s %q): %v", e.Kind, e.Meta.ID, err)
	}
	return changed
}

func stateOf(v *View, id string) State {
	m, _ := v.Member(ring.NodeID(id))
	return m.State
}

func TestMeta_Encode_roundTrip(t *testing.T) {
	cases := []Meta{
		meta("a", 1),
		{ID: "c", RPCAddr: "127.0.0.1:1", Weight: 1, StartedUnixNano: 1, CatchingUp: true},
		{ID: "n-1", RPCAddr: "10.0.0.1:7000", Weight: 3, StartedUnixNano: 1_700_000_000_000_000_000, Incarnation: 42, Leaving: true, CatchingUp: true},
		{ID: ring.NodeID(strings.Repeat("é", ring.NodeIDBytesMax/2)), RPCAddr: strings.Repeat("r", RPCAddrBytesMax),
			Weight: WeightMax, StartedUnixNano: 1<<63 - 1, Incarnation: 1<<64 - 1, Leaving: true},
	}
	for _, m := range cases {
		b, err := m.Encode()
		if err != nil {
			t.Fatalf("Encode(%+v): %v", m, err)
		}
		if len(b) > MetaBytesMax {
			t.Fatalf("Encode(%+v) = %d bytes, over the limit of %d", m, len(b), MetaBytesMax)
		}
		got, err := DecodeMeta(b)
		if err != nil || got != m {
			t.Fatalf("DecodeMeta(Encode(%+v)) = %+v, %v", m, got, err)
		}
		// Later formats append fields; this decoder must ignore them.
		longer := append(bytes.Clone(b), 0xff, 0x01)
		if got, err := DecodeMeta(longer); err != nil || got != m {
			t.Fatalf("DecodeMeta with appended fields = %+v, %v; want %+v", got, err, m)
		}
	}
}

func TestMeta_Encode_rejectsInvalid(t *testing.T) {
	cases := map[string]Meta{
		"empty ID":       {RPCAddr: "x:1", Weight: 1, StartedUnixNano: 1},
		"long ID":        {ID: ring.NodeID(strings.Repeat("i", ring.NodeIDBytesMax+1)), RPCAddr: "x:1", Weight: 1, StartedUnixNano: 1},
		"empty RPC addr": {ID: "a", Weight: 1, StartedUnixNano: 1},
		"long RPC addr":  {ID: "a", RPCAddr: strings.Repeat("r", RPCAddrBytesMax+1), Weight: 1, StartedUnixNano: 1},
		"zero weight":    {ID: "a", RPCAddr: "x:1", StartedUnixNano: 1},
		"huge weight":    {ID: "a", RPCAddr: "x:1", Weight: WeightMax + 1, StartedUnixNano: 1},
		"no start time":  {ID: "a", RPCAddr: "x:1", Weight: 1},
	}
	for name, m := range cases {
		if _, err := m.Encode(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Encode = %v, want ErrInvalid", name, err)
		}
	}
}

func TestDecodeMeta_rejectsMalformed(t *testing.T) {
	good, err := meta("a", 1).Encode()
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string][]byte{
		"empty":             nil,
		"format 0":          append([]byte{0}, good[1:]...),
		"over memberlist's": append(bytes.Clone(good), make([]byte, MetaBytesMax)...),
	}
	for i := 1; i < len(good); i++ {
		cases[fmt.Sprintf("truncated to %d", i)] = good[:i]
	}
	for name, b := range cases {
		if _, err := DecodeMeta(b); !errors.Is(err, errs.ErrInvalidArgument) {
			t.Errorf("%s: DecodeMeta = %v, want an invalid-argument error", name, err)
		}
	}
}

// TestView_Apply walks the state machine through scripted event sequences.
func TestView_Apply(t *testing.T) {
	a1 := meta("a", 100)
	a1Leaving := a1
	a1Leaving.Incarnation, a1Leaving.Leaving = 1, true
	a2 := meta("a", 200) // the same node, restarted
	cases := []struct {
		name   string
		events []Event
		want   State
	}{
		{"join", []Event{join(a1)}, StateAlive},
		{"suspect", []Event{join(a1), {Kind: EventSuspect, Meta: Meta{ID: "a"}}}, StateSuspect},
		{"suspect then refuted", []Event{join(a1), {Kind: EventSuspect, Meta: Meta{ID: "a"}}, join(a1)}, StateAlive},
		{"dead", []Event{join(a1), {Kind: EventDead, Meta: a1}}, StateDead},
		{"dead by ID only", []Event{join(a1), {Kind: EventDead, Meta: Meta{ID: "a"}}}, StateDead},
		{"suspect does not revive the dead", []Event{join(a1), {Kind: EventDead, Meta: a1}, {Kind: EventSuspect, Meta: Meta{ID: "a"}}}, StateDead},
		{"dead comes back", []Event{join(a1), {Kind: EventDead, Meta: a1}, join(a1)}, StateAlive},
		{"leave", []Event{join(a1), {Kind: EventLeave, Meta: a1}}, StateLeft},
		{"dead after Leaving is left", []Event{join(a1), {Kind: EventUpdate, Meta: a1Leaving}, {Kind: EventDead, Meta: Meta{ID: "a"}}}, StateLeft},
		{"dead carrying Leaving is left", []Event{join(a1), {Kind: EventDead, Meta: a1Leaving}}, StateLeft},
		{"left run never comes back", []Event{join(a1), {Kind: EventLeave, Meta: a1}, join(a1)}, StateLeft},
		{"left node restarted comes back", []Event{join(a1), {Kind: EventLeave, Meta: a1}, join(a2)}, StateAlive},
		{"stale dead of older run ignored", []Event{join(a2), {Kind: EventDead, Meta: a1}}, StateAlive},
		{"stale join of older run ignored", []Event{join(a2), {Kind: EventDead, Meta: a2}, join(a1)}, StateDead},
		{"dead of unknown ignored", []Event{{Kind: EventDead, Meta: a1}}, 0},
		{"suspect of unknown ignored", []Event{{Kind: EventSuspect, Meta: Meta{ID: "a"}}}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var v View
			for _, e := range c.events {
				mustApply(t, &v, e)
			}
			if got := stateOf(&v, "a"); got != c.want {
				t.Fatalf("state of a = %v, want %v", got, c.want)
			}
		})
	}
}

func TestView_Apply_reportsChange(t *testing.T) {
	var v View
	if !mustApply(t, &v, join(meta("a", 1))) {
		t.Fatal("first join reported no change")
	}
	if mustApply(t, &v, join(meta("a", 1))) {
		t.Fatal("repeated join reported a change")
	}
	if mustApply(t, &v, Event{Kind: EventDead, Meta: meta("a", 0)}) != true {
		t.Fatal("death reported no change")
	}
	if mustApply(t, &v, Event{Kind: EventDead, Meta: Meta{ID: "a"}}) {
		t.Fatal("repeated death reported a change")
	}
}

func TestView_Apply_rejectsBadEvents(t *testing.T) {
	var v View
	cases := map[string]Event{
		"unknown kind":   {Kind: 99, Meta: meta("a", 1)},
		"zero kind":      {Meta: meta("a", 1)},
		"empty ID":       {Kind: EventDead},
		"invalid meta":   {Kind: EventJoin, Meta: Meta{ID: "a"}},
		"long gossip":    {Kind: EventJoin, Meta: meta("a", 1), GossipAddr: strings.Repeat("g", GossipAddrBytesMax+1)},
		"bad newer meta": {Kind: EventDead, Meta: Meta{ID: "b", StartedUnixNano: 5}},
	}
	mustApply(t, &v, join(meta("b", 1)))
	for name, e := range cases {
		if changed, err := v.Apply(e); !errors.Is(err, ErrInvalid) || changed {
			t.Errorf("%s: Apply = %v, %v; want ErrInvalid and no change", name, changed, err)
		}
	}
	if v.Len() != 1 || stateOf(&v, "b") != StateAlive {
		t.Fatalf("bad events changed the view: %+v", v.Members())
	}
}

func TestView_Apply_conflict(t *testing.T) {
	var v View
	first := meta("a", 1)
	mustApply(t, &v, Event{Kind: EventJoin, Meta: first, GossipAddr: "10.0.0.1:7946"})

	impostor := meta("a", 2)
	impostor.RPCAddr = "10.0.0.2:7000"
	changed, err := v.Apply(Event{Kind: EventJoin, Meta: impostor, GossipAddr: "10.0.0.2:7946"})
	if !errors.Is(err, ErrDuplicateID) || changed {
		t.Fatalf("second process with the same ID: Apply = %v, %v; want ErrDuplicateID", changed, err)
	}
	if m, _ := v.Member("a"); m.Meta != first {
		t.Fatalf("conflict changed the member: %+v", m)
	}

	// The same gossip endpoint restarted on a new RPC address is the same node.
	restarted := meta("a", 3)
	restarted.RPCAddr = "10.0.0.1:7001"
	mustApply(t, &v, Event{Kind: EventJoin, Meta: restarted, GossipAddr: "10.0.0.1:7946"})
	if m, _ := v.Member("a"); m.Meta != restarted {
		t.Fatalf("restart on a new RPC address not taken: %+v", m)
	}

	// Once the holder is dead, a new process may take the ID.
	mustApply(t, &v, Event{Kind: EventDead, Meta: Meta{ID: "a"}})
	impostor.StartedUnixNano = 4
	mustApply(t, &v, Event{Kind: EventJoin, Meta: impostor, GossipAddr: "10.0.0.2:7946"})
	if stateOf(&v, "a") != StateAlive {
		t.Fatalf("replacement of a dead member refused: %+v", v.Members())
	}
}

func TestView_Apply_membersMax(t *testing.T) {
	var v View
	for i := range MembersMax {
		mustApply(t, &v, join(meta(fmt.Sprintf("n%05d", i), 1)))
	}
	changed, err := v.Apply(join(meta("one-too-many", 1)))
	if !errors.Is(err, ErrTooManyMembers) || changed {
		t.Fatalf("Apply beyond MembersMax = %v, %v; want ErrTooManyMembers", changed, err)
	}
	// Known members still change.
	mustApply(t, &v, Event{Kind: EventDead, Meta: Meta{ID: "n00000"}})
}

// TestView_Ring checks that placement ignores liveness: death keeps a
// member in the ring and keeps the RingID; leaving removes it.
func TestView_Ring(t *testing.T) {
	var v View
	for _, id := range []string{"a", "b", "c", "d"} {
		mustApply(t, &v, join(meta(id, 1)))
	}
	cfg := ring.Config{VirtualNodesPerWeight: 16}
	all, err := v.Ring(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if all.Len() != 4 || all.Epoch() != uint64(v.RingID()) || v.RingID() == 0 {
		t.Fatalf("ring of 4 alive members: len %d, epoch %x, RingID %v", all.Len(), all.Epoch(), v.RingID())
	}
	before := v.RingID()

	mustApply(t, &v, Event{Kind: EventSuspect, Meta: Meta{ID: "b"}})
	mustApply(t, &v, Event{Kind: EventDead, Meta: Meta{ID: "c"}})
	if v.RingID() != before {
		t.Fatalf("RingID changed from %v to %v when members failed", before, v.RingID())
	}
	withDead, err := v.Ring(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for chunk := range uint64(200) {
		x, _ := all.Replicas(7, "blob", chunk, 2)
		y, _ := withDead.Replicas(7, "blob", chunk, 2)
		if fmt.Sprint(x) != fmt.Sprint(y) {
			t.Fatalf("chunk %d moved from %v to %v when members failed", chunk, x, y)
		}
	}

	mustApply(t, &v, Event{Kind: EventLeave, Meta: Meta{ID: "d"}})
	if v.RingID() == before {
		t.Fatal("RingID unchanged after a member left")
	}
	withoutD, err := v.Ring(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if withoutD.Len() != 3 || withoutD.Contains("d") || !withoutD.Contains("c") {
		t.Fatalf("ring after d left and c died: %v", withoutD.Nodes())
	}

	for _, id := range []string{"a", "b", "c"} {
		mustApply(t, &v, Event{Kind: EventLeave, Meta: Meta{ID: ring.NodeID(id)}})
	}
	if _, err := v.Ring(cfg); !errors.Is(err, ErrInvalid) || v.RingID() != 0 {
		t.Fatalf("ring of an all-left view: %v, RingID %v; want ErrInvalid and 0", err, v.RingID())
	}
}

// TestView_RingID_orderIndependent applies one set of events in random
// orders and checks that every order gives the same view and RingID, and
// that the RingID changes with weights.
func TestView_RingID_orderIndependent(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	var events []Event
	for i := range 12 {
		m := meta(fmt.Sprintf("n%02d", i), 1)
		m.Weight = uint32(1 + i%3)
		events = append(events, join(m))
	}
	var reference View
	for _, e := range events {
		mustApply(t, &reference, e)
	}
	for round := range 50 {
		rng.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
		var v View
		for _, e := range events {
			mustApply(t, &v, e)
		}
		if v.RingID() != reference.RingID() || fmt.Sprint(v.Members()) != fmt.Sprint(reference.Members()) {
			t.Fatalf("seed %d round %d: order changed the view: RingID %v vs %v", seed, round, v.RingID(), reference.RingID())
		}
	}
	heavier := reference.Clone()
	m, _ := heavier.Member("n00")
	m.Meta.Weight++
	m.Meta.Incarnation++
	mustApply(t, heavier, Event{Kind: EventUpdate, Meta: m.Meta})
	if heavier.RingID() == reference.RingID() {
		t.Fatal("RingID unchanged by a weight change")
	}
}

func TestView_Clone_isIndependent(t *testing.T) {
	var v View
	mustApply(t, &v, join(meta("a", 1)))
	c := v.Clone()
	mustApply(t, &v, Event{Kind: EventDead, Meta: Meta{ID: "a"}})
	if stateOf(c, "a") != StateAlive {
		t.Fatal("a change to the view reached its clone")
	}
}

func TestView_MergeRemote(t *testing.T) {
	a, b := meta("a", 10), meta("b", 10)
	var v View
	mustApply(t, &v, join(a))
	mustApply(t, &v, join(b))
	mustApply(t, &v, Event{Kind: EventDead, Meta: Meta{ID: "b"}})

	bRestarted := meta("b", 20)
	bRestarted.Weight = 2
	aLeft := a
	aLeft.Incarnation, aLeft.Leaving = 1, true
	remote := []Member{
		{Meta: meta("unknown-alive", 1), State: StateAlive},
		{Meta: meta("unknown-left", 1), State: StateLeft},
		{Meta: aLeft, State: StateLeft},                      // a left; this node missed the Leaving update
		{Meta: bRestarted, State: StateAlive},                // b restarted with weight 2
		{Meta: meta("a", 5), State: StateDead},               // an older run of a: ignored
		{Meta: Meta{ID: "broken"}, State: StateAlive},        // invalid: skipped
		{Meta: meta("bad-state", 1), State: State(stateEnd)}, // invalid: skipped
	}
	changed, err := v.MergeRemote(remote)
	if !changed || !errors.Is(err, ErrInvalid) {
		t.Fatalf("MergeRemote = %v, %v; want a change and ErrInvalid for the skipped members", changed, err)
	}
	want := map[string]State{"a": StateLeft, "b": StateDead, "unknown-alive": StateDead, "unknown-left": StateLeft}
	for id, s := range want {
		if got := stateOf(&v, id); got != s {
			t.Errorf("state of %s = %v, want %v", id, got, s)
		}
	}
	if m, _ := v.Member("b"); m.Meta != bRestarted {
		t.Errorf("b's newer meta not taken: %+v", m.Meta)
	}
	if v.Len() != 4 {
		t.Errorf("view has %d members, want 4: %+v", v.Len(), v.Members())
	}
	if again, _ := v.MergeRemote(remote); again {
		t.Error("merging the same state twice changed the view")
	}
}

// TestView_MergeRemote_keepsLiveMembers checks that remote news never
// overrides the local failure detector about a member it believes alive,
// and never lets another process take a live member's ID.
func TestView_MergeRemote_keepsLiveMembers(t *testing.T) {
	a := meta("a", 10)
	var v View
	mustApply(t, &v, join(a))
	impostor := meta("a", 20)
	impostor.RPCAddr = "elsewhere:1"
	olderLeft := meta("a", 5)
	remote := []Member{
		{Meta: impostor, State: StateAlive},
		{Meta: a, State: StateDead},
		{Meta: olderLeft, State: StateLeft},
	}
	for _, r := range remote {
		if changed, err := v.MergeRemote([]Member{r}); changed || err != nil {
			t.Fatalf("MergeRemote(%+v) = %v, %v; want no change", r, changed, err)
		}
	}
	if m, _ := v.Member("a"); m.Meta != a || m.State != StateAlive {
		t.Fatalf("live member changed by remote news: %+v", m)
	}
}
