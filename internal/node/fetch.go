package node

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tyrstore/tyr/api/peerpb"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/mvcc"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/txn"
)

// Bases fetched ahead.
//
// A chain must put each blob's first version manager (its base member)
// before every other member with a part in the blob (chain.Order). When
// version managers of some blobs hold changed chunks of each other's blobs
// (large commits on small chunks, few replicas), no order does: Chain
// fails with a *cycleError naming the blobs whose holders would have to
// come first. The coordinator then fetches those blobs' records from a
// version manager each (fetchBases: a Peer.Chunks call, answered once no
// commit of the blob is in progress there), plans the chain again with
// them as given, and its Forwards carry them as the Bases of those blobs
// from the head on. Every member applies the commit to them as to any
// Base; the blob's first version manager in the chain accepts one only if
// its record is still at that version with nothing queued ahead, else it
// refuses the commit as locked (mvcc.Step.Fetched) and the coordinator
// tries again, fetching anew. So a fetched Base is checked by a version
// manager before the commit can commit, as any Base is, only later in the
// chain. It costs one round trip more, and only for such commits.

// fetchTimeout bounds each fetch of a base.
const fetchTimeout = 2 * time.Second

// cycleError is Chain's refusal of a commit no chain order fits (see
// above): blobs are the ones whose bases to fetch.
type cycleError struct {
	blobs []string
	err   error
}

func (e *cycleError) Error() string {
	return fmt.Sprintf("%v: %v (blobs %q)", errs.ErrUnavailable, e.err, e.blobs)
}

func (e *cycleError) Unwrap() []error { return []error{errs.ErrUnavailable, e.err} }

// fetchedSet returns the blobs of bases.
func fetchedSet(bases map[string]mvcc.Base) map[string]bool {
	out := make(map[string]bool, len(bases))
	for key := range bases {
		out[key] = true
	}
	return out
}

// fetchBases fetches the base of each of blobs for a commit of ops from
// the first of its version managers that serves it and is in step, in
// node ID order.
func (n *Node) fetchBases(ctx context.Context, keyspace string, rf int, ops []txn.Op, blobs []string) (map[string]mvcc.Base, error) {
	pl, cs, err := n.placed(keyspace, rf)
	if err != nil {
		return nil, err
	}
	n.stats.fetched.Add(1)
	out := make(map[string]mvcc.Base, len(blobs))
	for _, key := range blobs {
		vms, err := pl.vms(key)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
		}
		slices.Sort(vms)
		serves := pl.serving(key, 0)
		i := slices.IndexFunc(vms, func(id ring.NodeID) bool { return n.inChains(id) && serves(id) && !n.catchingUp(id) })
		if i < 0 {
			return nil, fmt.Errorf("%w: no version manager of blob %q in step to fetch its base from (%v)", errs.ErrUnavailable, key, vms)
		}
		var rec mvcc.Record
		if vms[i] == n.self {
			rec, err = n.localRecord(keyspace, key)
		} else {
			rec, err = n.fetchRecord(ctx, keyspace, key, vms[i])
		}
		if err != nil {
			return nil, err
		}
		b := mvcc.Base{Chunks: map[uint64]uint64{}}
		if rec.Exists {
			b.Version, b.Size = rec.Version, rec.Size
		}
		// The versions of the chunks the commit may change: those it
		// writes and the ones where the blob's end moves from and to.
		t := plan(ops, map[string]uint64{key: b.Size}, cs)[key]
		for _, c := range append(slices.Clone(t.Written), t.Lo/cs, (max(t.Hi, 1)-1)/cs) {
			if v := rec.Chunks[c]; v != 0 {
				b.Chunks[c] = v
			}
		}
		out[key] = b
	}
	return out, nil
}

// localRecord is blob key's record in this node's store.
func (n *Node) localRecord(keyspace, key string) (mvcc.Record, error) {
	ks, err := n.cfg.Engine.Acquire(keyspace)
	if err != nil {
		return mvcc.Record{}, err
	}
	defer ks.Release()
	return ks.Store.Record(key)
}

// fetchRecord asks version manager id for blob key's record.
func (n *Node) fetchRecord(ctx context.Context, keyspace, key string, id ring.NodeID) (mvcc.Record, error) {
	c, err := n.peerClient(id)
	if err != nil {
		return mvcc.Record{}, fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
	}
	cctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	resp, err := c.Chunks(cctx, &peerpb.ChunksRequest{Keyspace: keyspace, Key: key, Node: string(id)})
	if err != nil {
		return mvcc.Record{}, fmt.Errorf("%w: fetching the base of blob %q from %s: %w", errs.ErrUnavailable, key, id, err)
	}
	if resp.GetCatchingUp() {
		return mvcc.Record{}, fmt.Errorf("%w: fetching the base of blob %q: %s is catching up", errs.ErrUnavailable, key, id)
	}
	rec := mvcc.Record{Exists: resp.GetExists(), Version: resp.GetVersion(), Size: resp.GetSize(), Chunks: map[uint64]uint64{}}
	for _, cv := range resp.GetChunks() {
		rec.Chunks[cv.GetChunk()] = cv.GetVersion()
	}
	return rec, nil
}

// fetchedHere returns the blobs of e whose Base the coordinator fetched ahead
// and that this member (self) is the first version manager of in the
// chain: no member before it manages them.
func (e versionEntry) fetchedHere(pl Placement, self ring.NodeID) map[string]bool {
	i := slices.Index(e.chain, self)
	if i < 0 {
		return nil
	}
	var out map[string]bool
	for _, key := range slices.Sorted(maps.Keys(e.bases)) {
		if !pl.Manages(key) || slices.ContainsFunc(e.chain[:i], func(id ring.NodeID) bool { return pl.on(id, key, 0) }) {
			continue
		}
		if out == nil {
			out = map[string]bool{}
		}
		out[key] = true
	}
	return out
}
