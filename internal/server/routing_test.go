package server

import (
	"testing"

	"github.com/tyrstore/tyr/internal/membership"
	"github.com/tyrstore/tyr/internal/ring"
)

func routingMeta(id string, weight uint32, started int64, catchingUp bool) membership.Meta {
	return membership.Meta{ID: ring.NodeID(id), RPCAddr: "127.0.0.1:" + id, Weight: weight,
		StartedUnixNano: started, CatchingUp: catchingUp}
}

func apply(t *testing.T, v *membership.View, e membership.Event) {
	t.Helper()
	if _, err := v.Apply(e); err != nil {
		t.Fatal(err)
	}
}

// threeMembers is a view of a (weight 1), b (weight 3, catching up) and c
// (weight 2, dead); threeMembersWant is how answers list them.
func threeMembers(t *testing.T) *membership.View {
	t.Helper()
	var v membership.View
	apply(t, &v, membership.Event{Kind: membership.EventJoin, Meta: routingMeta("a", 1, 1, false)})
	apply(t, &v, membership.Event{Kind: membership.EventJoin, Meta: routingMeta("b", 3, 1, true)})
	apply(t, &v, membership.Event{Kind: membership.EventJoin, Meta: routingMeta("c", 2, 1, false)})
	apply(t, &v, membership.Event{Kind: membership.EventDead, Meta: membership.Meta{ID: "c"}})
	return &v
}

var threeMembersWant = []struct {
	id, state  string
	weight     uint32
	catchingUp bool
}{{"a", "alive", 1, false}, {"b", "alive", 3, true}, {"c", "dead", 2, false}}

// Ring's answer lists every member as the view has it, with the ring ID and
// the placement config the nodes build their rings with.
func TestRingResponse(t *testing.T) {
	v := threeMembers(t)
	resp := ringResponse(v, "a", []ringKeyspace{{"ks", 2, 4096}})
	if resp.GetSelf() != "a" || resp.GetRingId() != uint64(v.RingID()) || resp.GetMembersId() != membersID(v) {
		t.Errorf("self %q ring %x members %x; want a, %s, %x", resp.GetSelf(), resp.GetRingId(), resp.GetMembersId(),
			v.RingID(), membersID(v))
	}
	r, err := v.Ring(ring.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg := r.Config(); resp.GetVirtualNodesPerWeight() != cfg.VirtualNodesPerWeight ||
		resp.GetTokensMax() != cfg.TokensMax || resp.GetHashVersion() != cfg.HashVersion {
		t.Errorf("config %d/%d/%d, the view's ring has %+v", resp.GetVirtualNodesPerWeight(), resp.GetTokensMax(),
			resp.GetHashVersion(), cfg)
	}
	want := threeMembersWant
	if len(resp.GetMembers()) != len(want) {
		t.Fatalf("%d members, want %d", len(resp.GetMembers()), len(want))
	}
	for i, m := range resp.GetMembers() {
		w := want[i]
		if m.GetId() != w.id || m.GetState() != w.state || m.GetWeight() != w.weight ||
			m.GetCatchingUp() != w.catchingUp || m.GetRpcAddr() != "127.0.0.1:"+w.id {
			t.Errorf("member %d: %v, want %+v", i, m, w)
		}
	}
	if ks := resp.GetKeyspaces(); len(ks) != 1 || ks[0].GetName() != "ks" || ks[0].GetReplication() != 2 {
		t.Errorf("keyspaces %v", ks)
	}
}

// The members ID changes whenever a client's read targets may change
// without the ring changing: a member dies or comes back, starts or ends
// catching up, or moves to another address; it ignores what does not
// matter to reads.
func TestMembersID(t *testing.T) {
	var v membership.View
	if membersID(&v) != 0 {
		t.Errorf("members ID of an empty view is not 0")
	}
	apply(t, &v, membership.Event{Kind: membership.EventJoin, Meta: routingMeta("a", 1, 1, false)})
	apply(t, &v, membership.Event{Kind: membership.EventJoin, Meta: routingMeta("b", 1, 1, false)})
	step := func(what string, changes bool, e membership.Event) {
		t.Helper()
		before, ring := membersID(&v), v.RingID()
		apply(t, &v, e)
		after := membersID(&v)
		if (after != before) != changes {
			t.Errorf("%s: members ID %x -> %x; want a change: %v", what, before, after, changes)
		}
		if v.RingID() != ring && what != "b leaves" {
			t.Errorf("%s changed the ring ID", what)
		}
	}
	step("b starts catching up", true, membership.Event{Kind: membership.EventUpdate, Meta: routingMeta("b", 1, 2, true)})
	step("b caught up", true, membership.Event{Kind: membership.EventUpdate, Meta: routingMeta("b", 1, 3, false)})
	step("b changes nothing reads depend on", false, membership.Event{Kind: membership.EventUpdate,
		Meta: membership.Meta{ID: "b", RPCAddr: "127.0.0.1:b", Weight: 1, StartedUnixNano: 3, Incarnation: 1}})
	step("b suspected", true, membership.Event{Kind: membership.EventSuspect, Meta: membership.Meta{ID: "b"}})
	step("b dead", false, membership.Event{Kind: membership.EventDead, Meta: membership.Meta{ID: "b"}})
	moved := routingMeta("b", 1, 4, false)
	moved.RPCAddr = "127.0.0.1:other"
	step("b back at another address", true, membership.Event{Kind: membership.EventJoin, Meta: moved})
	step("b leaves", true, membership.Event{Kind: membership.EventLeave, Meta: membership.Meta{ID: "b"}})
}

// ClusterStatus lists every member with its state, weight, ring share and
// whether it says it is catching up.
func TestStatusMembers(t *testing.T) {
	v := threeMembers(t)
	ms, err := statusMembers(v)
	if err != nil {
		t.Fatal(err)
	}
	want := threeMembersWant
	if len(ms) != len(want) {
		t.Fatalf("%d members, want %d", len(ms), len(want))
	}
	share := 0.0
	for i, m := range ms {
		w := want[i]
		if m.GetId() != w.id || m.GetState() != w.state || m.GetWeight() != w.weight ||
			m.GetCatchingUp() != w.catchingUp || m.GetRpcAddr() != "127.0.0.1:"+w.id || m.GetStartedUnixNano() != 1 {
			t.Errorf("member %d: %v, want %+v", i, m, w)
		}
		share += m.GetRingShare()
	}
	if share < 0.999 || share > 1.001 {
		t.Errorf("ring shares sum to %v, want 1", share)
	}
}
