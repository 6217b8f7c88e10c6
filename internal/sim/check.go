package sim

import (
	"bytes"
	"fmt"
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
//     store holds a staged transaction, and every replica forgot every
//     transaction (its records are bounded in time, not just in number):
//     members left out of a re-execution included, so each of them
//     learned the outcome of what it staged, queued commits too;
//   - committed means committed everywhere: a transaction the coordinator
//     saw committed is committed on every member of the chain it last ran
//     on, and appears in the commit log of every replica of every key it
//     wrote, except on members that reported missing it after a crash and
//     on members its chain left out that did not commit it (their copies
//     of its keys are behind, and left out of every check from then on;
//     see markLeftBehind);
//   - atomicity: no transaction is committed on one member and aborted on
//     another, save on a member its chain left out that aborted a commit,
//     and none the coordinator saw aborted is committed anywhere, left-out
//     members included;
//   - replicas agree: the replicas of each key committed the same
//     transactions in the same order, and hold the bytes and version that
//     replaying those transactions' ops from nothing produces;
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
			case statusCommitted:
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
// of the transactions the coordinators saw committed.
func (w *world) checkKeys(add func(string, ...any)) {
	for _, k := range w.keys {
		// The transactions reported committed that touch k, in begin order.
		var want []chain.TxnID
		for _, id := range w.order {
			t := w.txns[id]
			if t.finished && t.outcome.Committed && slices.ContainsFunc(t.ops, func(op txn.Op) bool { return op.Key == k }) {
				want = append(want, id)
			}
		}
		replicas := slices.DeleteFunc(slices.Clone(w.placement[k]), func(n ring.NodeID) bool { return w.behind[k][n] })
		if len(replicas) == 0 {
			continue
		}
		firstLog := w.stores[replicas[0]].keyLog(k)
		got := slices.Clone(firstLog)
		slices.SortFunc(got, chain.TxnID.Compare)
		slices.SortFunc(want, chain.TxnID.Compare)
		if !slices.Equal(got, want) {
			add("durability: replica %s of %s committed %v, coordinators saw committed %v", replicas[0], k, firstLog, want)
		}
		model := &blob{}
		for _, id := range firstLog {
			t := w.txns[id]
			for i, op := range t.ops {
				if op.Key != k {
					continue
				}
				r, err := model.apply(op)
				if err != nil {
					add("replay: %s on %s fails in the model: %v", id, k, err)
				}
				if got, ok := w.reportedValue(t, i); ok && op.Kind == txn.OpAtomic && got != r.Value {
					add("results: %s op %d (%s on %s) reported value %#x, the replay gives %#x", id, i, op.Kind, k, got, r.Value)
				}
			}
		}
		// A MemStore's version of a key counts the commits that changed it;
		// an mvcc store's is the version of the last one, which its
		// coordinator chose, and there is none once the key is deleted.
		wantVersion := model.version
		if w.cfg.Store == StoreMVCC {
			wantVersion = 0
			if model.exists && len(firstLog) > 0 {
				wantVersion = w.txns[firstLog[len(firstLog)-1]].version
			}
		}
		for _, n := range replicas {
			log := w.stores[n].keyLog(k)
			if !slices.Equal(log, firstLog) {
				add("agreement: %s has %s log %v, %s has %v", n, k, log, replicas[0], firstLog)
			}
			if w.cfg.Store == StoreMVCC {
				// A commit's version must exceed the key's, so a commit
				// applied out of version order would have been refused.
				for i := 1; i < len(log); i++ {
					if a, b := w.txns[log[i-1]].version, w.txns[log[i]].version; a >= b {
						add("order: %s applied %s at version %d after %s at version %d on %s", n, log[i], b, log[i-1], a, k)
					}
				}
			}
			b, err := w.stores[n].keyState(k)
			if err != nil {
				add("read: %s cannot read %s: %v", n, k, err)
				continue
			}
			if b.exists != model.exists || !bytes.Equal(b.data, model.data) || b.version != wantVersion {
				add("agreement: %s holds %s exists=%t version=%d %q, replay gives exists=%t version=%d %q",
					n, k, b.exists, b.version, b.data, model.exists, wantVersion, model.data)
			}
		}
	}
}

// reportedValue is the value the client of committed transaction t was
// told for its op i, if the report can be checked: the coordinator reports
// the results of the head that replied (of the first chain or of a
// re-execution's), and that head knows the values of the ops on the keys
// it stores, unless its copy of the key fell behind (its results may then
// have been computed on the stale copy, or taken from a member that does
// not store the key).
func (w *world) reportedValue(t *txnRecord, i int) (uint64, bool) {
	results := t.outcome.Results
	if !t.finished || !t.outcome.Committed || len(results) != len(t.ops) {
		return 0, false
	}
	head, key := t.replier, t.ops[i].Key
	if !slices.Contains(w.placement[key], head) || w.behind[key][head] {
		return 0, false
	}
	return results[i].Value, true
}
