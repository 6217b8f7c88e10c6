package chain

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/tyrstore/tyr/internal/ring"
)

// OrderTailReady joins the groups of a chain (ready version managers,
// managers behind, ready holders, holders behind; each sorted by node ID)
// into a chain whose tail is a ready member where one may be: the tail's
// commit decides the transaction, and a member behind, which would only
// pass it through, refuses to be the tail (Passing). With holders, the
// ready ones go last. Without, the last ready manager that is not the
// first ready manager of any blob goes after the managers behind: each
// blob's first version manager in the chain (blobVMs holds each blob's
// managers in the chain) must stay a ready one. Otherwise (two replicas,
// one behind) the order stays, and a tail behind on the blob refuses
// until it caught up.
func OrderTailReady(groups [4][]ring.NodeID, blobVMs map[string][]ring.NodeID) []ring.NodeID {
	ready, behind := groups[0], groups[1]
	out := make([]ring.NodeID, 0, len(groups[0])+len(groups[1])+len(groups[2])+len(groups[3]))
	if len(groups[2])+len(groups[3]) > 0 {
		out = append(append(append(out, ready...), behind...), groups[3]...)
		return append(out, groups[2]...)
	}
	if len(behind) > 0 {
		first := map[ring.NodeID]bool{}
		for _, ids := range blobVMs {
			if i := slices.IndexFunc(ready, func(id ring.NodeID) bool { return slices.Contains(ids, id) }); i >= 0 {
				first[ready[i]] = true
			}
		}
		for i := len(ready) - 1; i >= 0; i-- {
			if !first[ready[i]] {
				out = append(append(out, ready[:i]...), ready[i+1:]...)
				return append(append(out, behind...), ready[i])
			}
		}
	}
	return append(append(out, ready...), behind...)
}

// Part is what Order needs to know of one member of a commit's chain: its part in the commit.
type Part struct {
	ID ring.NodeID
	// Manages are the blobs of the commit this member is a version
	// manager of.
	Manages []string
	// Holds are the other blobs of the commit whose changed chunks this
	// member holds.
	Holds []string
	// Behind: the member is catching up, or only gains in a ring move
	// what it would serve; it heads nothing it can avoid heading.
	Behind bool
}

// ErrNoOrder is Order's refusal of members that no order can satisfy:
// two members each hold changed chunks of a blob the other is the only
// possible first version manager of.
var ErrNoOrder = errors.New("no chain order puts each blob's version manager before the other holders of its changed chunks")

// Order returns the chain of a commit whose members are ms: the rule
// every chain follows, for the node and the simulation alike.
//
// The base rule. A blob's *base member* is the first of its version
// managers in the chain: it checks the blob as it stores it and hands its
// record on as the Base (mvcc.Base) that every later member applies the
// commit to. Every other member with a part in the blob (its other
// version managers, the holders of the chunks the commit changes) must
// come after the base member, and a member before it has no part in the
// blob and passes it by (mvcc.Step: a blob neither managed here nor given
// a Base is none of this member's business). So:
//
//   - version managers come before every member that manages nothing
//     (the backward pass commits tail first, so a version manager commits
//     a version only after every holder did, and a read it pins a version
//     for finds that version on the holders);
//   - among version managers, one that holds changed chunks of a blob it
//     does not manage comes after a version manager of that blob;
//   - in each group, members behind come after the ready ones, and a
//     ready member is the tail where one may be (OrderTailReady);
//   - otherwise members go in node ID order, the protocol's global order.
//
// The base member of each blob checks, when it stages the commit, that
// every live holder of what the commit changes comes after it
// (node.checkCovered): a chain planned from a wrong guess of a blob's
// size is refused and planned again. Order fails with ErrNoOrder when the
// version managers' holdings form a cycle.
func Order(ms []Part) ([]ring.NodeID, error) {
	var groups [4][]Part // ready managers, managers behind, ready holders, holders behind
	blobVMs := map[string][]ring.NodeID{}
	for _, m := range ms {
		g := 0
		if m.Behind {
			g = 1
		}
		if len(m.Manages) == 0 {
			g += 2
		}
		groups[g] = append(groups[g], m)
		for _, k := range m.Manages {
			blobVMs[k] = append(blobVMs[k], m.ID)
		}
	}
	readyVM := map[string]bool{}
	for _, m := range groups[0] {
		for _, k := range m.Manages {
			readyVM[k] = true
		}
	}
	based := map[string]bool{} // blobs whose base member is placed
	var ordered [4][]ring.NodeID
	for g := range groups {
		slices.SortFunc(groups[g], func(a, b Part) int { return cmp.Compare(a.ID, b.ID) })
		rest := groups[g]
		for len(rest) > 0 {
			// A ready manager holding chunks of a blob whose managers are
			// all behind cannot follow a ready one; the blob's first
			// manager, behind, refuses the commit until it caught up.
			i := slices.IndexFunc(rest, func(m Part) bool {
				return !slices.ContainsFunc(m.Holds, func(k string) bool { return !based[k] && (g > 0 || readyVM[k]) })
			})
			if i < 0 {
				return nil, fmt.Errorf("%w: %v", ErrNoOrder, memberIDs(rest))
			}
			m := rest[i]
			rest = slices.Delete(slices.Clone(rest), i, i+1)
			ordered[g] = append(ordered[g], m.ID)
			for _, k := range m.Manages {
				based[k] = true
			}
		}
	}
	return OrderTailReady(ordered, blobVMs), nil
}

func memberIDs(ms []Part) []ring.NodeID {
	out := make([]ring.NodeID, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}
