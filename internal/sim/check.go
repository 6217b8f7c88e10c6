package sim

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/tyrstore/tyr/internal/chain"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/txn"
)

// anomaliesMax bounds the anomalies one run reports; the first few say
// enough, and a broken run could otherwise list thousands.
const anomaliesMax = 20

// check runs every checker on the finished run and returns what they found:
//
//   - liveness: every transaction begun finished at its coordinator, no
//     store holds a staged transaction, every replica forgot every
//     transaction (its records are bounded in time, not just in number):
//     members left out of a re-execution included, so each of them
//     learned the outcome of what it staged, queued commits too; and
//     every node caught up (see catchup.go);
//   - committed means committed everywhere: a transaction the coordinator
//     saw committed is committed (applied, or passed through) on every
//     member of the chain it last ran on, except on members that reported
//     missing it after a crash, and appears in the commit log of every
//     replica of every key it wrote once they all caught up, members left
//     out and members it passed through included: no acknowledged write
//     is lost;
//   - atomicity: no transaction is committed on one member and aborted on
//     another, save on a member its chain left out that aborted a commit,
//     and none the coordinator saw aborted is committed anywhere, left-out
//     members included;
//   - replicas agree: the replicas of each key hold the same commits in
//     the same order, and the bytes and version that replaying those
//     transactions' ops from nothing produces;
//   - order: on mvcc, each key's commits apply in increasing version order
//     (a commit queued behind others applies after them, see mvcc/order.go);
//   - results: the value each committed atomic op reported to its client
//     is the one it finds in that replay;
//   - each store saw at most one Prepare per transaction and at most one
//     Commit or Abort after it.
//   - collection, on mvcc: the collector keeps every version it promises
//     to and none past the retention time, and reads at a version return
//     its bytes (see gc.go).
func (w *world) check() []string {
	var out []string
	add := func(format string, args ...any) {
		if len(out) < anomaliesMax {
			out = append(out, fmt.Sprintf(format, args...))
		}
	}
	for _, n := range w.nodes {
		for _, a := range w.stores[n].storeAnomalies() {
			add("store: %s", a)
		}
	}
	w.checkLiveness(add)
	w.checkProgress(add)
	w.checkOutcomes(add)
	w.checkKeys(add)
	if w.cfg.Store == StoreMVCC {
		w.checkCollector(add)
	}
	return out
}

func (w *world) checkLiveness(add func(string, ...any)) {
	for _, id := range w.order {
		if !w.txns[id].finished {
			add("liveness: %s never finished (chain %v)", id, w.txns[id].chain)
		}
	}
	for _, n := range w.nodes {
		if s := w.stores[n].stagedCount(); s > 0 {
			add("liveness: %s still stages %d transactions", n, s)
		}
		if t := w.replicas[n].Tracked(); t > 0 {
			add("liveness: %s still tracks %d transactions", n, t)
		}
		if c := w.catch[n]; c.active {
			add("liveness: %s still catches up, since tick %d (barrier passed %t, to refresh %v, dirty %v)",
				n, c.since, c.barrier, c.todo, c.dirty)
		}
		if m := w.ring.moves[n]; m != nil && m.active {
			add("liveness: %s still copies the ranges it gains in epoch %d (barrier passed %t, to copy %v, dirty %v)",
				n, m.epoch, m.barrier, m.todo, w.ring.dirty[n])
		}
	}
	if w.ringBusy() {
		add("liveness: ring epoch %d is %v (changes proposed %d of %d)", w.ring.rec.Epoch, w.ring.rec.Phase, w.ring.proposed, w.ring.plan.changes)
	}
}

// checkProgress holds the run to progress, not only safety: every
// uncontended transaction begun once the run was quiet (probe) committed.
func (w *world) checkProgress(add func(string, ...any)) {
	if w.probes < probesMax {
		add("progress: %d of %d uncontended transactions began before the run ended", w.probes, probesMax)
	}
	for _, id := range w.order {
		if t := w.txns[id]; t.probe && (!t.finished || !t.outcome.Committed) {
			add("progress: uncontended transaction %s (chain %v, ops %s) did not commit: %v", id, t.final, opsString(t.ops), t.outcome.Err)
		}
	}
}

func (w *world) checkOutcomes(add func(string, ...any)) {
	for _, id := range w.order {
		t := w.txns[id]
		// Members left out of the final chain that aborted are behind
		// if it committed (see markLeftBehind), not a split outcome.
		var committedAt, abortedAt []ring.NodeID
		for _, n := range t.placed {
			switch w.stores[n].statusOf(id) {
			case statusCommitted, statusPassed:
				committedAt = append(committedAt, n)
			case statusAborted:
				if slices.Contains(t.final, n) {
					abortedAt = append(abortedAt, n)
				}
			}
		}
		if len(committedAt) > 0 && len(abortedAt) > 0 {
			add("atomicity: %s committed on %v and aborted on %v (chain %v)", id, committedAt, abortedAt, t.final)
		}
		if !t.finished {
			continue
		}
		missed := w.stageLost[id]
		if t.outcome.Committed && slices.ContainsFunc(t.final, func(n ring.NodeID) bool {
			return !slices.Contains(committedAt, n) && !slices.Contains(missed, n)
		}) {
			add("durability: %s reported committed but committed only on %v of its chain %v (missed on %v)", id, committedAt, t.final, missed)
		}
		if !t.outcome.Committed && len(missed) > 0 {
			add("atomicity: %s reported aborted (%s) but %v reported missing its commit", id, t.outcome.Err, missed)
		}
		if !t.outcome.Committed && len(committedAt) > 0 {
			add("atomicity: %s reported aborted (%s) but committed on %v", id, t.outcome.Err, committedAt)
		}
	}
}

// checkKeys compares each key's replicas with each other and with a replay
// of the transactions the coordinators saw committed, in the order they
// apply: on mvcc, a key's commits apply in version order; a MemStore's, in
// the order of the first replica's log.
//
// On mvcc an absent key has no version, so a replica that missed commits
// while the key was absent takes the next commit in step: its log may
// differ from the others' before the last commit that left the key
// absent, and only what follows is compared (see sinceAbsent).
//
// Where every replica of a key failed at once (see noteAllFailed), the
// commits that may have been lost are left out, and the replicas need not
// agree: each must still hold every other commit, and the replay of its
// own log.
func (w *world) checkKeys(add func(string, ...any)) {
	for _, k := range w.keys {
		excused := func(id chain.TxnID) bool { return w.allFailed[k][id] }
		// The transactions reported committed that touch k.
		var want []chain.TxnID
		for _, id := range w.order {
			t := w.txns[id]
			if t.finished && t.outcome.Committed && !excused(id) && slices.ContainsFunc(t.ops, func(op txn.Op) bool { return op.Key == k }) {
				want = append(want, id)
			}
		}
		replicas := w.placement[k]
		firstLog := w.stores[replicas[0]].keyLog(k)
		if len(w.allFailed[k]) > 0 {
			slices.SortFunc(want, chain.TxnID.Compare)
			for _, n := range replicas {
				log := w.stores[n].keyLog(k)
				got := slices.DeleteFunc(slices.Clone(log), excused)
				slices.SortFunc(got, chain.TxnID.Compare)
				if !slices.Equal(got, want) {
					add("durability: replica %s of %s committed %v, coordinators saw committed %v (every replica failed at once: %v may be lost)",
						n, k, log, want, slices.SortedFunc(maps.Keys(w.allFailed[k]), chain.TxnID.Compare))
				}
				w.checkReplay(add, k, n, log, false)
				w.checkCopy(add, k, n, log)
			}
			continue
		}
		history := firstLog
		if w.cfg.Store == StoreMVCC {
			history = slices.SortedFunc(slices.Values(want), func(a, b chain.TxnID) int { return cmp.Compare(w.versionOf(a), w.versionOf(b)) })
		} else {
			got := slices.SortedFunc(slices.Values(firstLog), chain.TxnID.Compare)
			if sorted := slices.SortedFunc(slices.Values(want), chain.TxnID.Compare); !slices.Equal(got, sorted) {
				add("durability: replica %s of %s committed %v, coordinators saw committed %v", replicas[0], k, firstLog, sorted)
			}
		}
		w.checkReplay(add, k, "the history", history, true)
		since := w.sinceAbsent(k, history)
		for _, n := range replicas {
			log := w.stores[n].keyLog(k)
			switch {
			case w.cfg.Store != StoreMVCC && !slices.Equal(log, firstLog):
				add("agreement: %s has %s log %v, %s has %v", n, k, log, replicas[0], firstLog)
			case w.cfg.Store == StoreMVCC && !slices.Equal(w.sinceAbsent(k, log), since):
				add("durability: replica %s of %s committed %v (%v since it was last absent), coordinators saw committed %v (%v since it was last absent)",
					n, k, log, w.sinceAbsent(k, log), history, since)
			}
			if w.cfg.Store == StoreMVCC {
				w.checkOrder(add, k, n, log)
			}
			w.checkCopy(add, k, n, since)
		}
	}
}

// sinceAbsent is log, commits of key k, from after the last one that left
// k absent, on mvcc; all of log on a MemStore, whose versions count every
// commit of a key.
func (w *world) sinceAbsent(k string, log []chain.TxnID) []chain.TxnID {
	if w.cfg.Store != StoreMVCC {
		return log
	}
	model, start := &blob{}, 0
	for i, id := range log {
		applyKey(model, w.txns[id], k)
		if !model.exists {
			start = i + 1
		}
	}
	return log[start:]
}

// checkOrder checks that replica n applied log, its commits of key k, in
// version order: a commit's version must exceed the key's, so a commit
// applied out of version order would have been refused.
func (w *world) checkOrder(add func(string, ...any), k string, n ring.NodeID, log []chain.TxnID) {
	for i := 1; i < len(log); i++ {
		if a, b := w.txns[log[i-1]].version, w.txns[log[i]].version; a >= b {
			add("order: %s applied %s at version %d after %s at version %d on %s", n, log[i], b, log[i-1], a, k)
		}
	}
}

// checkReplay replays log, commits of key k (replica n's, on mvcc in
// version order), in the model, and checks the values their atomic ops
// reported, if results.
func (w *world) checkReplay(add func(string, ...any), k string, n ring.NodeID, log []chain.TxnID, results bool) {
	if n != "the history" && w.cfg.Store == StoreMVCC {
		w.checkOrder(add, k, n, log)
	}
	model := &blob{}
	for _, id := range log {
		t := w.txns[id]
		for i, op := range t.ops {
			if op.Key != k {
				continue
			}
			r, err := model.apply(op)
			if err != nil {
				add("replay: %s on %s fails in the model: %v", id, k, err)
			}
			if got, ok := w.reportedValue(t, i); ok && results && op.Kind == txn.OpAtomic && got != r.Value {
				add("results: %s op %d (%s on %s) reported value %#x, the replay gives %#x", id, i, op.Kind, k, got, r.Value)
			}
		}
	}
}

// checkCopy checks that replica n holds key k as the replay of log gives
// it.
func (w *world) checkCopy(add func(string, ...any), k string, n ring.NodeID, log []chain.TxnID) {
	model := &blob{}
	for _, id := range log {
		applyKey(model, w.txns[id], k)
	}
	// A MemStore's version of a key counts the commits that changed it;
	// an mvcc store's is the version of the last one, which its
	// coordinator chose, and there is none once the key is deleted.
	wantVersion := model.version
	if w.cfg.Store == StoreMVCC {
		wantVersion = 0
		if model.exists && len(log) > 0 {
			wantVersion = w.txns[log[len(log)-1]].version
		}
	}
	b, err := w.stores[n].keyState(k)
	if err != nil {
		add("read: %s cannot read %s: %v", n, k, err)
		return
	}
	if b.exists != model.exists || !bytes.Equal(b.data, model.data) || b.version != wantVersion {
		add("agreement: %s holds %s exists=%t version=%d %q, replay gives exists=%t version=%d %q",
			n, k, b.exists, b.version, b.data, model.exists, wantVersion, model.data)
	}
}

// reportedValue is the value the client of committed transaction t was
// told for its op i, if the report can be checked: the coordinator reports
// the results of the head that replied (of the first chain or of a
// re-execution's), which computed the values of the ops on the keys it
// stores and applied, and took the others from the members after it
// (txn.MergeResults), unless none of them applied the op (Unheld).
func (w *world) reportedValue(t *txnRecord, i int) (uint64, bool) {
	results := t.outcome.Results
	if !t.finished || !t.outcome.Committed || len(results) != len(t.ops) || results[i].Unheld {
		return 0, false
	}
	return results[i].Value, true
}
