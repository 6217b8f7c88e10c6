package sim

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/tyrstore/tyr/internal/chain"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/mvcc"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/txn"
)

// Version collection, on the mvcc stores.
//
// Each mvcc store keeps the versions its commits supersede for a linger
// time and, while a running transaction uses one, up to a retention time
// (mvcc.Options.Linger and Retention; see mvcc/uses.go), both in ticks a
// seed draws, far shorter than a node's so that they pass many times in a
// run. Every tick, each node that is up runs its collector
// (mvcc.Store.CollectGarbage) with a probability the seed draws, on the
// virtual clock, in the simulator's one goroutine, as a node's background
// loop does every second. A crash reopens the store, which forgets the
// versions in use, as a restarted node does.
//
// Readers stand for transactions that read a blob at the version they
// first saw: a reader pins a key's current version on one of its replicas
// (mvcc.Store.Pin, counting a use of it two times in three), reads the key
// at that version on that replica now and then for a while, whatever
// commits supersede it meanwhile, and then releases its use, as a
// transaction's read check does, or goes away and lets it lapse. The
// checkers then hold each read to what the store promises
// (checkCollector):
//
//   - a read that returns bytes returns those of the version it named:
//     the replay of the replica's commits up to that version;
//   - a version is readable while it is current, until the linger time
//     after a commit superseded it, and, while a reader's use of it is
//     counted (not released, not lapsed, the replica not restarted since,
//     and no stale release of the version by another reader since, which
//     may end that use instead: mvcc counts uses, it does not tell them
//     apart), until the retention time after the use began; only a later delete,
//     or truncate that dropped its pages, excuses a refusal, which must be
//     a conflict;
//   - once a collector pass ran more than the retention time after a
//     commit superseded a version, that version is gone: a read of it
//     fails;
//   - after every pass, what the store keeps of a blob (mvcc.Store.Retained)
//     is bounded: no superseded page version or history record whose
//     superseding commit is older than the retention time, so no more
//     versions than one plus the commits of the last retention time.
//
// That the newest version of every key is intact on every replica is the
// key checks' (checkKeys), with the collector running throughout.

// gcProfile is the collector's and readers' part of a seed.
type gcProfile struct {
	// lingerTicks and retentionTicks are mvcc.Options.Linger and Retention.
	lingerTicks, retentionTicks int
	// collectPct is each up node's chance per tick of a collector pass.
	collectPct int
	// readers is how many readers there are; each idle one pins a key with
	// pinPct per tick, counting a use usePct of the time, and each busy one
	// reads with readPct per tick.
	readers, pinPct, usePct, readPct int
}

// gcSource is the random source of the collector and the readers, apart
// from the rest so that their draws leave the seed's other choices as they
// were.
func gcSource(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x6c0113c7)) }

func pickGC(rng *rand.Rand) gcProfile {
	g := gcProfile{lingerTicks: 1 + rng.IntN(30), collectPct: 5 + rng.IntN(96),
		readers: 1 + rng.IntN(3), pinPct: 5 + rng.IntN(30), usePct: 67, readPct: 20 + rng.IntN(61)}
	// Longer than the linger time, so a use keeps a version past it.
	g.retentionTicks = g.lingerTicks + 1 + rng.IntN(120)
	return g
}

// ticks is n ticks of the virtual clock as a duration.
func ticks(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// readBytesMax bounds a reader's read; the simulated keys are far shorter.
const readBytesMax = 1 << 16

// pin is one reader's pin of a key's version on one replica.
type pin struct {
	reader  int
	node    ring.NodeID
	key     string
	version uint64
	at      int  // tick it pinned
	use     bool // it counted a use of the version
	until   int  // tick it stops reading
}

// release is a reader's release of its use of a version. It is stale when
// that use had lapsed, or the node had restarted since the pin: it then
// ends another use of the version, if any is counted (see mvcc/uses.go).
type release struct {
	pin   *pin
	at    int
	stale bool
}

// oldRead is one read of a pin's version.
type oldRead struct {
	pin *pin
	at  int
	// log is the node's log of the key then, and collected the tick of
	// the node's last collector pass (-1: none).
	log       []chain.TxnID
	collected int
	data      []byte
	err       error
}

func (w *world) mvccNode(n ring.NodeID) *mvccNode { return w.stores[n].(*mvccNode) }

// gcTick runs, on mvcc, the collector passes and the readers' steps of a
// tick.
func (w *world) gcTick() {
	if w.cfg.Store != StoreMVCC {
		return
	}
	for _, n := range w.nodes {
		if !w.down[n] && w.gcRng.IntN(100) < w.gc.collectPct {
			w.collect(n)
		}
	}
	for i := range w.pins {
		w.stepReader(i)
	}
}

// collect runs a collector pass on node n and checks what the store then
// keeps of each of its keys.
func (w *world) collect(n ring.NodeID) {
	s := w.mvccNode(n)
	c, err := s.store.CollectGarbage()
	if err != nil {
		w.failures = append(w.failures, fmt.Sprintf("tick %d: %s's collector: %v", w.now, n, err))
		return
	}
	w.stats.Collections++
	w.stats.Collected += c
	w.collected[n] = w.now
	if c > 0 {
		w.trace("%s collects %d page versions", n, c)
	}
	for _, k := range w.keys {
		if slices.Contains(w.placement[k], n) {
			w.checkRetained(s, k)
		}
	}
}

// checkRetained checks, right after a collector pass on s, that s keeps
// no version of key k past the retention time (see the top of this file).
func (w *world) checkRetained(s *mvccNode, k string) {
	r, err := s.store.Retained(k)
	if err != nil {
		w.failures = append(w.failures, fmt.Sprintf("tick %d: %s: listing the versions of %s: %v", w.now, s.node, k, err))
		return
	}
	finding := func(format string, args ...any) { w.gcFindings = append(w.gcFindings, fmt.Sprintf(format, args...)) }
	log := s.logs[k]
	// index is the position in the log of the commit of version v; find
	// also checks that a later commit superseded it.
	index := func(v uint64) int {
		return slices.IndexFunc(log, func(id chain.TxnID) bool { return w.txns[id].version == v })
	}
	find := func(what string, v uint64) (i int, ok bool) {
		if i = index(v); i < 0 || i+1 >= len(log) {
			finding("tick %d: %s keeps %s version %d of %s, which no commit here superseded (log %v)", w.now, s.node, what, v, k, log)
			return 0, false
		}
		return i, true
	}
	oldest := w.now - w.gc.retentionTicks
	expired := func(what string, v uint64, sup int) {
		finding("tick %d: after a collector pass %s keeps %s version %d of %s, superseded at tick %d, past the retention of %d ticks",
			w.now, s.node, what, v, k, sup, w.gc.retentionTicks)
	}
	recent := 0 // commits of the last retention time
	for _, id := range log {
		if s.commitTicks[id] >= oldest {
			recent++
		}
	}
	if len(r.History) > recent {
		finding("tick %d: %s keeps %d older versions of %s, above the %d commits of the last %d ticks",
			w.now, s.node, len(r.History), k, recent, w.gc.retentionTicks)
	}
	for _, v := range r.History {
		if i, ok := find("the history record of", v); ok && s.commitTicks[log[i+1]] < oldest {
			expired("the history record of", v, s.commitTicks[log[i+1]])
		}
	}
	for _, page := range slices.Sorted(maps.Keys(r.Pages)) {
		vs := r.Pages[page]
		// The newest versions down to the first whole page are the page's
		// content: a delta needs the versions under it (mvcc/keys.go).
		deltas := map[uint64]bool{}
		for _, v := range r.Deltas[page] {
			deltas[v] = true
		}
		delta := func(j int) bool { return deltas[vs[j]] }
		live := 1
		for live < len(vs) && delta(live-1) {
			live++
		}
		if delta(live - 1) {
			finding("tick %d: %s keeps page %d of %s as deltas %v without a whole page under them", w.now, s.node, page, k, vs)
			continue
		}
		// Each superseded whole version ends a chain of versions that one
		// commit superseded.
		chains, depth := 0, 0
		for j := range vs {
			if depth++; depth > 1+mvcc.DeltaDepthMax {
				finding("tick %d: %s keeps page %d of %s as more than %d deltas: %v", w.now, s.node, page, k, mvcc.DeltaDepthMax, vs)
			}
			if !delta(j) {
				chains, depth = chains+1, 0
			}
		}
		if chains-1 > recent {
			finding("tick %d: %s keeps %d versions of page %d of %s, %d current, above the %d commits of the last %d ticks",
				w.now, s.node, len(vs), page, k, live, recent, w.gc.retentionTicks)
		}
		// A page version is superseded by the next commit that wrote the
		// page whole: the nearest newer whole version kept, or one before
		// it.
		what := fmt.Sprintf("page %d of", page)
		for j := live; j < len(vs); j++ {
			if _, ok := find(what, vs[j]); !ok {
				continue
			}
			newer := j - 1
			for delta(newer) {
				newer--
			}
			if i := index(vs[newer]); i < 0 {
				finding("tick %d: %s keeps %s version %d of %s, never committed here (log %v)", w.now, s.node, what, vs[newer], k, log)
			} else if s.commitTicks[log[i]] < oldest {
				expired(what, vs[j], s.commitTicks[log[i]])
			}
		}
	}
}

// isCurrent reports whether version v is key k's newest commit on s.
func (w *world) isCurrent(s *mvccNode, k string, v uint64) bool {
	log := s.logs[k]
	return len(log) > 0 && w.txns[log[len(log)-1]].version == v
}

// locked reports whether a transaction staged on s holds key k, which
// Pin and Refresh would wait for: the store's own answer, since a commit
// holds the blobs it was given Bases of as well as those s stores.
func (s *mvccNode) locked(k string) bool { return s.store.Locked(k) }

// stepReader runs reader i's step of this tick: pin a version if idle,
// read it, or stop.
func (w *world) stepReader(i int) {
	rng := w.gcRng
	p := w.pins[i]
	if p == nil {
		if rng.IntN(100) >= w.gc.pinPct {
			return
		}
		k := w.keys[rng.IntN(len(w.keys))]
		n := w.serving[k][rng.IntN(len(w.serving[k]))] // a node gaining k serves no reads
		use := rng.IntN(100) < w.gc.usePct
		hold := 1 + rng.IntN(2*w.gc.retentionTicks+w.gc.lingerTicks)
		if w.down[n] || w.catchingUp(n) {
			return // a node catching up serves no reads
		}
		s := w.mvccNode(n)
		if s.locked(k) {
			return // a node's Pin would wait for the commit
		}
		s.sync() // a node's reads wait for the sync of what they read
		info, release, err := s.store.Pin(k, 0, use)
		release()
		if errors.Is(err, errs.ErrNotFound) {
			return
		}
		if err != nil {
			w.failures = append(w.failures, fmt.Sprintf("tick %d: reader %d: pinning %s on %s: %v", w.now, i, k, n, err))
			return
		}
		p = &pin{reader: i, node: n, key: k, version: info.Version, at: w.now, use: use, until: w.now + hold}
		w.pins[i] = p
		w.stats.Pins++
		w.trace("reader %d pins %s at version %d on %s use=%t until %d", i, k, p.version, n, use, p.until)
		w.readOld(p)
		return
	}
	if w.now >= p.until {
		w.pins[i] = nil
		if !p.use || w.down[p.node] || rng.IntN(2) == 0 {
			w.trace("reader %d leaves %s at version %d on %s", i, p.key, p.version, p.node)
			return
		}
		// A read check of the version releases the use, as the commit of
		// the transaction that read it does, whatever its outcome.
		s := w.mvccNode(p.node)
		pending, err := s.store.TryPrepareAt([]txn.Op{{Key: p.key, Kind: txn.OpReadCheck, Version: p.version}}, 0)
		if errors.Is(err, mvcc.ErrLocked) {
			w.trace("reader %d leaves %s at version %d on %s: locked", i, p.key, p.version, p.node)
			return
		}
		if err == nil {
			pending.Abort()
		}
		stale := w.now >= p.at+w.gc.retentionTicks || w.crashedWithin(p.node, p.at, w.now)
		w.releases = append(w.releases, release{pin: p, at: w.now, stale: stale})
		w.trace("reader %d releases %s at version %d on %s stale=%t", i, p.key, p.version, p.node, stale)
		return
	}
	if !w.down[p.node] && !w.catchingUp(p.node) && rng.IntN(100) < w.gc.readPct {
		w.readOld(p)
	}
}

// readOld reads p's key at p's version on p's node and records it.
func (w *world) readOld(p *pin) {
	s := w.mvccNode(p.node)
	s.sync()
	data, _, err := s.store.ReadAt(p.key, 0, readBytesMax, p.version)
	collected, ok := w.collected[p.node]
	if !ok {
		collected = -1
	}
	w.oldReads = append(w.oldReads, oldRead{pin: p, at: w.now, log: s.logs[p.key], collected: collected, data: data, err: err})
	if !w.isCurrent(s, p.key, p.version) {
		w.stats.OldReads++
		if err == nil {
			w.stats.OldServed++
		} else {
			w.stats.OldGone++
		}
	}
	w.trace("reader %d reads %s at version %d on %s: %q err=%v", p.reader, p.key, p.version, p.node, data, err)
}

// crashedWithin reports whether node n crashed in ticks [from, to].
func (w *world) crashedWithin(n ring.NodeID, from, to int) bool {
	return slices.ContainsFunc(w.crashTicks[n], func(at int) bool { return from <= at && at <= to })
}

// stolen reports whether a stale release of p's version on p's node by
// another reader came between p's pin and tick at: it may have ended p's
// use (see mvcc/uses.go).
func (w *world) stolen(p *pin, at int) bool {
	return slices.ContainsFunc(w.releases, func(r release) bool {
		q := r.pin
		return r.stale && q != p && q.node == p.node && q.key == p.key && q.version == p.version && p.at <= r.at && r.at <= at
	})
}

// checkCollector checks the readers' reads and reports the findings of
// the checks made after each collector pass (see the top of this file).
func (w *world) checkCollector(add func(string, ...any)) {
	for _, f := range w.gcFindings {
		add("gc: %s", f)
	}
	L, R := w.gc.lingerTicks, w.gc.retentionTicks
	// One anomaly per pin: its later reads mostly repeat the first.
	reported := map[*pin]bool{}
	for _, o := range w.oldReads {
		p := o.pin
		if reported[p] {
			continue
		}
		add := func(format string, args ...any) {
			reported[p] = true
			add(format, args...)
		}
		s := w.mvccNode(p.node)
		log := o.log
		i := slices.IndexFunc(log, func(id chain.TxnID) bool { return w.txns[id].version == p.version })
		where := fmt.Sprintf("reader %d's read of %s at version %d on %s at tick %d (pinned at tick %d, use=%t)",
			p.reader, p.key, p.version, p.node, o.at, p.at, p.use)
		if o.err != nil && errors.Is(o.err, errs.ErrConflict) && w.refreshedWithin(p.node, p.key, p.at, o.at) {
			// A catch-up copied the key since the pin: the versions before
			// the copy's are gone from this replica (mvcc/catchup.go).
			continue
		}
		if i < 0 {
			add("gc: %s: %s committed no such version of %s (log %v)", where, p.node, p.key, log)
			continue
		}
		model := &blob{}
		for _, id := range log[:i+1] {
			applyKey(model, w.txns[id], p.key)
		}
		if o.err == nil && (!model.exists || !bytes.Equal(o.data, model.data)) {
			add("gc: %s returned %q, the replay of its commits up to that version gives exists=%t %q", where, o.data, model.exists, model.data)
		}
		if o.err != nil && !errors.Is(o.err, errs.ErrConflict) {
			add("gc: %s failed, not as a conflict: %v", where, o.err)
		}
		if i+1 == len(log) {
			if o.err != nil {
				add("gc: %s failed, and that version is the newest there: %v", where, o.err)
			}
			continue
		}
		// Superseded by log[i+1], whose records fall due no sooner than
		// the linger time after it was staged, or after the version it
		// superseded committed, whichever is later (a commit queued ahead
		// of it rebuilds its batch, with new deadlines, once first).
		sup := log[i+1]
		if o.err != nil && !cutSince(model, w.txns, log[i+1:], p.key) {
			lingers := o.at < max(s.stageTicks[sup], s.commitTicks[log[i]])+L
			used := p.use && o.at < p.at+R && !w.crashedWithin(p.node, p.at, o.at) && !w.stolen(p, o.at)
			if lingers || used {
				add("gc: %s failed while the version is retained (superseded by %s, staged at tick %d; linger %d, retention %d ticks): %v",
					where, sup, s.stageTicks[sup], L, R, o.err)
			}
		}
		if o.err == nil && o.collected > s.commitTicks[sup]+R {
			add("gc: %s returned the version though a collector pass at tick %d came more than the retention of %d ticks after %s superseded it at tick %d",
				where, o.collected, R, sup, s.commitTicks[sup])
		}
	}
}

// applyKey replays t's ops on key k on b; errors are the key checks'.
func applyKey(b *blob, t *txnRecord, k string) {
	for _, op := range t.ops {
		if op.Key == k {
			_, _ = b.apply(op)
		}
	}
}

// cutSince reports whether one of the commits ids, applied to b (which it
// leaves as it was), deleted the blob or dropped a page it had: reads of
// b's version then fail (see mvcc's history records).
func cutSince(b *blob, txns map[chain.TxnID]*txnRecord, ids []chain.TxnID, k string) bool {
	pages := func(size uint64) uint64 { return (size + mvcc.PageBytes - 1) / mvcc.PageBytes }
	had := pages(uint64(len(b.data)))
	cur := b.clone()
	for _, id := range ids {
		for _, op := range txns[id].ops {
			if op.Key != k {
				continue
			}
			switch {
			case op.Kind == txn.OpDelete:
				return true
			case op.Kind == txn.OpTruncate && op.Size < uint64(len(cur.data)) && pages(op.Size) < had:
				return true
			}
			_, _ = cur.apply(op)
		}
	}
	return false
}
