package chain_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/tyrstore/tyr/internal/chain"
	"github.com/tyrstore/tyr/internal/ring"
)

// TestOrderTailReady: the chain's tail is a ready member wherever one can
// be without a member behind becoming a blob's first version manager.
func TestOrderTailReady(t *testing.T) {
	for _, tc := range []struct {
		name    string
		groups  [4][]ring.NodeID
		blobVMs map[string][]ring.NodeID
		want    []ring.NodeID
	}{
		{"all ready", [4][]ring.NodeID{ids("a", "b", "c")}, map[string][]ring.NodeID{"k": ids("a", "b", "c")}, ids("a", "b", "c")},
		{"one behind of three", [4][]ring.NodeID{ids("a", "c"), ids("b")}, map[string][]ring.NodeID{"k": ids("a", "b", "c")}, ids("a", "b", "c")},
		{"the last ready one behind", [4][]ring.NodeID{ids("a", "b"), ids("c")}, map[string][]ring.NodeID{"k": ids("a", "b", "c")}, ids("a", "c", "b")},
		{"two replicas, one behind", [4][]ring.NodeID{ids("a"), ids("b")}, map[string][]ring.NodeID{"k": ids("a", "b")}, ids("a", "b")},
		// a and b are each a blob's first ready manager: neither moves.
		{"first managers stay first", [4][]ring.NodeID{ids("a", "b"), ids("c")},
			map[string][]ring.NodeID{"k1": ids("a", "c"), "k2": ids("b", "c")}, ids("a", "b", "c")},
		{"a blob each", [4][]ring.NodeID{ids("a", "b", "d"), ids("c")},
			map[string][]ring.NodeID{"k1": ids("a", "c", "d"), "k2": ids("b", "c", "d")}, ids("a", "b", "c", "d")},
		{"holders: a ready one last", [4][]ring.NodeID{ids("a"), ids("b"), ids("d"), ids("c")},
			map[string][]ring.NodeID{"k": ids("a", "b")}, ids("a", "b", "c", "d")},
	} {
		if got := chain.OrderTailReady(tc.groups, tc.blobVMs); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestOrder: each blob's first version manager comes before every other
// member with a part in the blob, whatever the node IDs; holders come
// after every version manager; members behind come after the ready ones;
// a cycle is refused.
func TestOrder(t *testing.T) {
	vm := func(id string, blobs ...string) chain.Part { return chain.Part{ID: ring.NodeID(id), Manages: blobs} }
	for _, tc := range []struct {
		name  string
		parts []chain.Part
		want  []ring.NodeID
	}{
		{"one blob each, ID order", []chain.Part{vm("b", "y"), vm("a", "x")}, ids("a", "b")},
		{"a manager holding another blob's chunk follows that blob's manager",
			[]chain.Part{{ID: "a", Manages: []string{"x"}, Holds: []string{"y"}}, vm("b", "y")}, ids("b", "a")},
		{"holders after every manager",
			[]chain.Part{{ID: "a", Holds: []string{"x"}}, vm("c", "x"), vm("b", "y")}, ids("b", "c", "a")},
		{"behind after ready", []chain.Part{{ID: "a", Manages: []string{"x"}, Behind: true}, vm("b", "x"), vm("c", "x")}, ids("b", "a", "c")},
		{"a ready manager of a blob whose managers are all behind",
			[]chain.Part{{ID: "a", Manages: []string{"x"}, Holds: []string{"y"}}, {ID: "b", Manages: []string{"y"}, Behind: true}}, ids("a", "b")},
		{"a chain of three", []chain.Part{
			{ID: "a", Manages: []string{"x"}, Holds: []string{"y"}},
			{ID: "b", Manages: []string{"y"}, Holds: []string{"z"}},
			vm("c", "z")}, ids("c", "b", "a")},
	} {
		got, err := chain.Order(tc.parts)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	cycle := []chain.Part{{ID: "a", Manages: []string{"x"}, Holds: []string{"y"}}, {ID: "b", Manages: []string{"y"}, Holds: []string{"x"}}}
	if got, err := chain.Order(cycle); !errors.Is(err, chain.ErrNoOrder) {
		t.Errorf("cycle: %v, %v; want ErrNoOrder", got, err)
	}
}

func ids(s ...string) []ring.NodeID {
	out := make([]ring.NodeID, len(s))
	for i, x := range s {
		out[i] = ring.NodeID(x)
	}
	return out
}
