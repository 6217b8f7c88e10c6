package chain_test

import (
	"slices"
	"testing"

	"github.com/tyrstore/tyr/internal/chain"
	"github.com/tyrstore/tyr/internal/ring"
)

// TestOrderTailReady: the chain's tail is a ready member wherever one can
// be without a member behind becoming a blob's first version manager.
func TestOrderTailReady(t *testing.T) {
	ids := func(s ...string) []ring.NodeID {
		out := make([]ring.NodeID, len(s))
		for i, x := range s {
			out[i] = ring.NodeID(x)
		}
		return out
	}
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
