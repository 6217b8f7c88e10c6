package node

import (
	"fmt"
	"maps"
	"slices"
	"sync"
)

// Group commit. A chain member writes each commit without waiting for its
// fsync (mvcc.Pending.CommitLater); the replica's Output then says
// MustSync, and what the node sends after it waits in n.out (an
// outbox.Outbox) until a sync covers it. The loop keeps one sync in
// flight: the syncer goroutine syncs the WAL of every keyspace written
// since the last one began, once each, and hands the count it covered
// back; the loop then releases the messages and client outcomes that
// waited, and begins the next sync if more was written meanwhile. So the
// loop never waits on the disk, and one fsync per keyspace covers every
// commit written while the previous one ran.

// syncReq asks the syncer to make durable every write made so far to the
// keyspaces: the writes the outbox counted up to upTo.
type syncReq struct {
	upTo      uint64
	keyspaces []string
}

type syncResult struct {
	upTo uint64
	err  error
}

// startSync begins a sync when writes wait for one and none is in flight.
func (n *Node) startSync() {
	upTo, ok := n.out.StartSync()
	if !ok {
		return
	}
	req := syncReq{upTo: upTo, keyspaces: slices.Sorted(maps.Keys(n.dirty))}
	clear(n.dirty)
	n.syncReqs <- req // never blocks: one sync in flight, a buffer of one
}

// synced releases what the sync that returned r covered. A failed sync
// leaves the commits' durability unknown, and so what was said of them
// can never be sent: the node stops (see mvcc.Store.Sync).
func (n *Node) synced(r syncResult) {
	if r.err != nil {
		n.cfg.Log.Error("a WAL sync failed; stopping the node, whose commits' durability is unknown", "err", r.err)
		panic(fmt.Sprintf("node %s: WAL sync failed: %v", n.self, r.err))
	}
	for _, f := range n.out.Synced(r.upTo) {
		f()
	}
}

// syncer performs the loop's syncs, the keyspaces of one in parallel.
func (n *Node) syncer() {
	defer close(n.syncerDone)
	for {
		var req syncReq
		select {
		case <-n.stop:
			return
		case req = <-n.syncReqs:
		}
		errs := make([]error, len(req.keyspaces))
		if len(req.keyspaces) == 1 {
			// One keyspace, the common case: no hand-off to another
			// goroutine on a commit's path.
			errs[0] = n.syncKeyspace(req.keyspaces[0])
		} else {
			var wg sync.WaitGroup
			for i, name := range req.keyspaces {
				wg.Go(func() { errs[i] = n.syncKeyspace(name) })
			}
			wg.Wait()
		}
		r := syncResult{upTo: req.upTo}
		for _, err := range errs {
			if err != nil {
				r.err = err
				break
			}
		}
		select {
		case <-n.stop:
			return
		case n.syncDone <- r:
		}
	}
}

// syncKeyspace makes the commits written to keyspace name durable. A
// keyspace dropped since has nothing left to make durable.
func (n *Node) syncKeyspace(name string) error {
	ks, err := n.cfg.Engine.Acquire(name)
	if err != nil {
		return nil
	}
	defer ks.Release()
	if ks.Config.Sync {
		n.stats.syncs.Add(1)
	}
	if err := ks.Store.Sync(); err != nil {
		return fmt.Errorf("keyspace %q: %w", name, err)
	}
	return nil
}

// beginDrain begins the drain of the ring epoch's Active phase
// (rebalance.Drain) the first tick the loop sees it, over the commits the
// replicas of every keyspace hold staged then.
func (n *Node) beginDrain() {
	rec, ok := n.Ring()
	if !ok {
		return
	}
	n.drain.Begin(rec, func() []waiterKey {
		var keys []waiterKey
		for name, g := range n.groups {
			for _, id := range g.replica.StagedTxns() {
				keys = append(keys, waiterKey{name, id})
			}
		}
		return keys
	})
}

// stepDrain follows the drain: once its commits finished and a sync
// covered them, ringReport says so.
func (n *Node) stepDrain() {
	if n.drain.Waiting() {
		n.drain.Step(func(k waiterKey) bool {
			g, ok := n.groups[k.keyspace]
			return ok && g.replica.HoldsStage(k.id)
		}, n.out.Mark())
	}
	if epoch, done := n.drain.Drained(n.out.Covers); done && n.drained.Load() != epoch {
		n.drained.Store(epoch)
	}
}
