package chain

import (
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
