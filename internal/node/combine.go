package node

// Combining commits on hot blobs. Many clients adding to one counter, or
// to one aggregate, each commit a few blind ops on the same blob: ops that
// apply whatever the blob holds (atomic ops, appends, writes; no read
// checks, compare-and-swaps, creates, deletes or truncates). Committed one
// by one, each costs a chain pass, a stage, a record and an outcome on
// every member, and the blob's version managers queue them one after
// another: the blob's commit rate is the chain's, whatever the clients.
//
// So the node coordinating such commits keeps at most combineInFlight
// commits in flight per blob: a request whose blobs have room goes at
// once, alone; requests arriving while a blob is full wait, and when one
// of its commits ends, the waiting ones that share blobs go together as
// one commit, their ops one after another in arrival order. That is what committing them one after another would
// do, which their concurrency allows: none of them had its answer before
// another began. The wait costs a contended blob nothing it would not have
// waited in the version managers' queue, and an uncontended one nothing.
//
// Each request gets the results of its own ops. The client IDs travel
// together, each with its run of the ops (clientParts), and every member
// records each, so a resolution answers for each client alone and gives it
// its own results (resolveHere). A combined commit refused for certain
// (one request's op fails, say, or one client ID was fenced) changed
// nothing: each of its requests is then committed alone, so one client's
// error is never another's. A combined commit whose outcome is unknown is
// unknown to each of its requests, as it would be to one alone.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/limits"
	"github.com/tyrstore/tyr/internal/mvcc"
	"github.com/tyrstore/tyr/internal/txn"
)

const (
	// combineInFlight is how many commits of blind ops a node keeps in
	// flight per blob: two, so that one fills while the other commits.
	combineInFlight = 2
	// combineRequestsMax bounds the requests one combined commit carries;
	// the ops (limits.OpsPerCommitMax) and bytes (limits.CommitBytesMax)
	// of a commit bound it too.
	combineRequestsMax = 256
)

// combiner is the node's state of combining (see the top of this file).
type combiner struct {
	mu sync.Mutex
	// busy counts, per blob, the commits of blind ops in flight on it.
	busy map[blobRef]int
	// waiting holds the requests waiting for a blob of theirs, in arrival
	// order.
	waiting []*combineReq
	// combined counts the commits that carried more than one request, and
	// requests the requests they carried.
	combined, requests uint64
}

// combineReq is one request to commit blind ops.
type combineReq struct {
	keyspace string
	rf       int
	ops      []txn.Op
	client   []byte
	keys     []blobRef
	bytes    int
	// taken, under combiner.mu: a batch took the request; from then on its
	// answer comes on done.
	taken bool
	done  chan combineResult
}

type combineResult struct {
	results []txn.Result
	err     error
}

// combinable reports whether ops are blind (see the top of this file).
func combinable(ops []txn.Op) bool {
	return len(ops) > 0 && !slices.ContainsFunc(ops, func(op txn.Op) bool {
		return op.Kind != txn.OpAtomic && op.Kind != txn.OpAppend && op.Kind != txn.OpWrite
	})
}

// commitCombined commits blind ops, combined with other requests' on the
// same blobs while a commit of them is in flight.
func (n *Node) commitCombined(ctx context.Context, keyspace string, rf int, ops []txn.Op, client []byte) ([]txn.Result, error) {
	req := &combineReq{keyspace: keyspace, rf: rf, ops: ops, client: client, done: make(chan combineResult, 1)}
	for _, op := range ops {
		req.keys = append(req.keys, blobRef{keyspace, op.Key})
		req.bytes += len(op.Data)
	}
	slices.SortFunc(req.keys, func(a, b blobRef) int { return strings.Compare(a.key, b.key) })
	req.keys = slices.Compact(req.keys)
	c := &n.combiner
	c.mu.Lock()
	if c.busy == nil {
		c.busy = map[blobRef]int{}
	}
	if !c.touchesBusy(req) {
		req.taken = true
		c.mark([]*combineReq{req})
		c.mu.Unlock()
		go n.runCombined([]*combineReq{req})
	} else {
		c.waiting = append(c.waiting, req)
		c.mu.Unlock()
	}
	select {
	case r := <-req.done:
		return r.results, r.err
	case <-ctx.Done():
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !req.taken {
		c.waiting = slices.DeleteFunc(c.waiting, func(r *combineReq) bool { return r == req })
		return nil, errs.Refused(ctx.Err())
	}
	return nil, fmt.Errorf("commit outcome unknown: %w", ctx.Err())
}

// touchesBusy reports whether a blob of r has combineInFlight commits in
// flight.
func (c *combiner) touchesBusy(r *combineReq) bool {
	return slices.ContainsFunc(r.keys, func(k blobRef) bool { return c.busy[k] >= combineInFlight })
}

// mark counts batch in flight on its blobs.
func (c *combiner) mark(batch []*combineReq) {
	for _, k := range batchKeys(batch) {
		c.busy[k]++
	}
}

// batchKeys returns the blobs of batch's requests, each once.
func batchKeys(batch []*combineReq) []blobRef {
	if len(batch) == 1 {
		return batch[0].keys
	}
	seen := map[blobRef]bool{}
	var keys []blobRef
	for _, r := range batch {
		for _, k := range r.keys {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// runCombined commits batch as one commit, answers each request, and
// starts the batches that waited for its blobs.
func (n *Node) runCombined(batch []*combineReq) {
	// Cancelled only when the node stops: a request that gives up
	// leaves its batch running. No goroutine of its own watches for the
	// stop; one per commit cost a lone client's 4 KiB writes on one node
	// a few percent (tyr bench write).
	ctx, cancel := context.WithCancel(n.stopped)
	n.commitBatch(ctx, batch)
	cancel()
	c := &n.combiner
	c.mu.Lock()
	for _, k := range batchKeys(batch) {
		if c.busy[k]--; c.busy[k] == 0 {
			delete(c.busy, k)
		}
	}
	next := c.form()
	c.mu.Unlock()
	for _, b := range next {
		go n.runCombined(b)
	}
}

// form takes the waiting requests whose blobs have room for another
// commit into batches, in arrival order: a request joins the batch that
// shares a blob with it, if it shares blobs with one batch only and the
// batch has room, or starts its own. The rest keep waiting. It marks the
// batches' blobs busy.
func (c *combiner) form() [][]*combineReq {
	var batches [][]*combineReq
	var sizes []batchSize       // of each batch
	formed := map[blobRef]int{} // blob -> index in batches + 1
	keep := c.waiting[:0]
	for _, r := range c.waiting {
		if c.touchesBusy(r) {
			keep = append(keep, r)
			continue
		}
		b := 0
		for _, k := range r.keys {
			switch i := formed[k]; {
			case i == 0:
			case b == 0:
				b = i
			case b != i:
				b = -1
			}
		}
		switch {
		case b == 0:
			batches, sizes = append(batches, []*combineReq{r}), append(sizes, batchSize{})
			b = len(batches)
			sizes[b-1].add(r)
		case b > 0 && batches[b-1][0].keyspace == r.keyspace && batches[b-1][0].rf == r.rf && sizes[b-1].fits(r):
			batches[b-1] = append(batches[b-1], r)
			sizes[b-1].add(r)
		default:
			keep = append(keep, r)
			continue
		}
		r.taken = true
		for _, k := range r.keys {
			formed[k] = b
		}
	}
	clear(c.waiting[len(keep):])
	c.waiting = keep
	for _, b := range batches {
		c.mark(b)
		if len(b) > 1 {
			c.combined++
			c.requests += uint64(len(b))
		}
	}
	return batches
}

// batchSize is what a batch being formed carries.
type batchSize struct{ requests, ops, bytes int }

func (s *batchSize) add(r *combineReq) {
	s.requests, s.ops, s.bytes = s.requests+1, s.ops+len(r.ops), s.bytes+r.bytes
}

// fits reports whether r may join the batch: its commit stays within the
// limits.
func (s batchSize) fits(r *combineReq) bool {
	return s.requests < combineRequestsMax && s.ops+len(r.ops) <= limits.OpsPerCommitMax &&
		s.bytes+r.bytes <= limits.CommitBytesMax
}

// commitBatch commits batch's ops as one commit and answers each request
// (see the top of this file).
func (n *Node) commitBatch(ctx context.Context, batch []*combineReq) {
	first := batch[0]
	if len(batch) == 1 {
		results, err := n.commit(ctx, first.keyspace, first.rf, first.ops, first.client)
		first.done <- combineResult{results, err}
		return
	}
	var ops []txn.Op
	var parts []mvcc.ClientPart
	for _, r := range batch {
		if len(r.client) > 0 {
			parts = append(parts, mvcc.ClientPart{ID: r.client, From: len(ops), To: len(ops) + len(r.ops)})
		}
		ops = append(ops, r.ops...)
	}
	var client []byte
	if len(parts) > 0 {
		client = encodeClientParts(parts)
	}
	results, err := n.commit(ctx, first.keyspace, first.rf, ops, client)
	switch {
	case err == nil:
		at := 0
		for _, r := range batch {
			r.done <- combineResult{results: results[at : at+len(r.ops) : at+len(r.ops)]}
			at += len(r.ops)
		}
	case errs.IsRefused(err):
		// Nothing applied: each alone, so that each gets its own answer.
		var wg sync.WaitGroup
		for _, r := range batch {
			wg.Go(func() {
				results, err := n.commit(ctx, r.keyspace, r.rf, r.ops, r.client)
				r.done <- combineResult{results, err}
			})
		}
		wg.Wait()
	default:
		for _, r := range batch {
			r.done <- combineResult{err: err}
		}
	}
}
