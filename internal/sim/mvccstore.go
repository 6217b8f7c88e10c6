package sim

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tyrstore/tyr/internal/chain"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/mvcc"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/txn"
)

// StoreKind selects the storage behind each simulated node.
type StoreKind uint8

const (
	// StoreMem is MemStore, the simulator's in-memory model of mvcc.
	StoreMem StoreKind = iota
	// StoreMVCC is a real mvcc.Store over an in-memory Pebble database,
	// staged the way a node stages a chain's commits: at the version the
	// coordinator chose, wrapped in an mvcc.ChainStaged.
	StoreMVCC
)

func (k StoreKind) String() string {
	switch k {
	case StoreMem:
		return "mem"
	case StoreMVCC:
		return "mvcc"
	}
	return fmt.Sprintf("StoreKind(%d)", uint8(k))
}

// nodeStore is a node's storage as the simulator sees it: what its
// replica's Stager stages into (see catchup.go), what catch-up copies, and
// what the checkers read afterwards.
type nodeStore interface {
	chain.Stager
	// prepareStep stages ops as a chain member given the bases of the
	// members before it (see catchup.go): a key with a base must be at
	// its version here, or the commit is refused with a
	// *mvcc.BaseMismatchError; strict accepts no commit queued ahead. It
	// returns the bases to hand on.
	prepareStep(id chain.TxnID, ops []txn.Op, bases map[string]mvcc.Base, strict bool) (chain.Staged, map[string]mvcc.Base, error)
	// pass stages id as a commit passing through, passed commits it
	// (recording it for Committed, applying nothing), and passAborted
	// aborts it.
	pass(id chain.TxnID) error
	passed(id chain.TxnID, results []txn.Result) error
	passAborted(id chain.TxnID)
	// versionAfter is the version of key once id, of ops, applies on a
	// copy at base b (given) or on this one.
	versionAfter(id chain.TxnID, ops []txn.Op, key string, b mvcc.Base, given bool) uint64
	// locked reports whether a staged commit holds key.
	locked(key string) bool
	// putMissed records that transaction id committed without this copy,
	// its stage lost in a crash (mvcc.Store.PutMissed), durable once
	// synced, and missed reports whether it is recorded.
	putMissed(id chain.TxnID)
	missed(id chain.TxnID) bool
	// refresh makes this store's copy of key the one from has, which is
	// not locked (see catchup.go), and reports whether that changed it;
	// an error means it must be tried again later.
	refresh(key string, from nodeStore, ready bool, want uint64) (bool, error)
	// statusOf is where transaction id stands here; zero: never prepared.
	statusOf(id chain.TxnID) status
	// stagedCount is how many transactions hold locks here.
	stagedCount() int
	// storeAnomalies are contract breaches the store saw itself.
	storeAnomalies() []string
	// keyLog lists the transactions committed here on key, in commit order.
	keyLog(key string) []chain.TxnID
	// sync makes what the store committed durable (see chain.Output's
	// MustSync).
	sync()
	// crash drops what the store staged and lets a restarted replica stage
	// again what it staged or aborted. Commits synced stay; of the others,
	// rng picks which are lost, a random part of the writes since the last
	// sync, and crash returns them.
	crash(rng *rand.Rand) []chain.TxnID
	// keyState is key's current content here. Its version is the
	// MemStore's commit count or, on mvcc, the version of the last commit
	// that changed it, which its coordinator chose (0 when it is absent):
	// either way, replicas that applied the same commits agree on it.
	keyState(key string) (b blob, err error)
	// ordering returns the transactions that joined a blob's queue here
	// behind undecided ones, and those of them that then waited in the
	// replica's applying phase (see "Ordering" in chain/replica.go).
	ordering() (queued, waited map[chain.TxnID]bool)
	close() error
}

// quietLogger drops Pebble's informational messages and panics on errors,
// which the simulator's in-memory databases never expect.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)         {}
func (quietLogger) Errorf(f string, args ...any) { panic(fmt.Sprintf("pebble: "+f, args...)) }
func (quietLogger) Fatalf(f string, args ...any) { panic(fmt.Sprintf("pebble: "+f, args...)) }

// memTableBytes is the simulated stores' memtable size: more than a run
// writes to one store (see open).
const memTableBytes = 64 << 20

// simEpoch is virtual tick 0 as wall time; a tick is a millisecond.
var simEpoch = time.Unix(1_700_000_000, 0)

// mvccNode is a node backed by a real mvcc.Store. It stages each commit
// as a node does, at the version its coordinator chose, so commits that
// only apply atomic ops to a blob queue behind its undecided ones instead
// of being refused (see mvcc/order.go). It skips the ops on keys the node
// does not store and records, for the checkers, what the replica did with
// each transaction: the same history MemStore keeps.
type mvccNode struct {
	node ring.NodeID
	owns func(key string) bool
	// fs holds the database's files, which outlive a crash as far as they
	// were synced; db and store are opened again over a crash clone at
	// each one (see crash).
	fs    *vfs.MemFS
	opts  mvcc.Options
	db    *pebble.DB
	store *mvcc.Store
	// tick is the virtual time in ticks. stageTicks holds when each
	// transaction was last staged here, and commitTicks when it
	// committed here: the bounds of its collector records' deadlines,
	// which the collector checks use.
	tick                    func() int
	stageTicks, commitTicks map[chain.TxnID]int
	// versionOf is each transaction's commit version, the same on every
	// member: what a node learns with the Forward.
	versionOf func(id chain.TxnID) uint64
	trace     func(format string, args ...any)
	status    map[chain.TxnID]status
	staged    map[chain.TxnID]*mvccStaged
	logs      map[string][]chain.TxnID
	// queued and waited are what ordering reports.
	queued, waited map[chain.TxnID]bool
	// anomalies are contract breaches seen by the wrapper, such as a second
	// Prepare of one transaction.
	anomalies []string
	// unsynced lists the transactions committed or passed here since the
	// last sync: those a crash may lose.
	unsynced []chain.TxnID
}

// mvccClock is what an mvccNode knows of the virtual time: the clock of
// its store, so what the store stamps with it replays exactly, and the
// same time in ticks.
type mvccClock struct {
	now  func() time.Time
	tick func() int
}

// newMVCCNode opens an mvcc.Store for node over a fresh in-memory Pebble
// database, keeping superseded versions for linger and, while a read uses
// them, retention (mvcc.Options). versionOf gives each transaction's
// commit version, and trace records the store's ordering events in the
// run's trace.
func newMVCCNode(node ring.NodeID, owns func(key string) bool, clock mvccClock, linger, retention time.Duration,
	versionOf func(id chain.TxnID) uint64, trace func(format string, args ...any)) (*mvccNode, error) {
	s := &mvccNode{node: node, owns: owns, fs: vfs.NewCrashableMem(),
		opts: mvcc.Options{MVCC: true, Sync: true, Now: clock.now, Linger: linger, Retention: retention},
		tick: clock.tick, stageTicks: map[chain.TxnID]int{}, commitTicks: map[chain.TxnID]int{},
		versionOf: versionOf, trace: trace,
		status: map[chain.TxnID]status{}, staged: map[chain.TxnID]*mvccStaged{}, logs: map[string][]chain.TxnID{},
		queued: map[chain.TxnID]bool{}, waited: map[chain.TxnID]bool{}}
	if err := s.open(); err != nil {
		return nil, err
	}
	return s, nil
}

// open opens the database in s.fs and the store over it, as a node does
// when it starts.
func (s *mvccNode) open() error {
	// The memtable never fills in a run, so nothing is flushed in the
	// background: what a crash keeps of unsynced commits depends on the
	// run alone (a flush, at a time of Pebble's choosing, would make the
	// memtable's commits durable), and the seed replays exactly.
	o := &pebble.Options{FS: s.fs, MemTableSize: memTableBytes, Logger: quietLogger{}}
	o.Experimental.ValueSeparationPolicy = mvcc.ValueSeparation // as a node's, though nothing is flushed
	db, err := pebble.Open("db", o)
	if err != nil {
		return err
	}
	store, err := mvcc.Open(db, s.opts)
	if err != nil {
		_ = db.Close()
		return err
	}
	s.db, s.store = db, store
	return nil
}

// Prepare implements chain.Stager, for a member given no bases.
func (s *mvccNode) Prepare(id chain.TxnID, ops []txn.Op) (chain.Staged, error) {
	st, _, err := s.prepareStep(id, ops, nil, false)
	return st, err
}

// firstPrepare records an anomaly and fails if id was prepared here before.
func (s *mvccNode) firstPrepare(id chain.TxnID) error {
	if st, ok := s.status[id]; ok && st != statusLost {
		s.anomalies = append(s.anomalies, fmt.Sprintf("%s: second Prepare of %s, already %s", s.node, id, st))
		return fmt.Errorf("%w: %s prepared twice", errs.ErrConflict, id)
	}
	return nil
}

// prepareStep stages ops as a node does, with mvcc.Store.TryPrepareStep.
func (s *mvccNode) prepareStep(id chain.TxnID, ops []txn.Op, bases map[string]mvcc.Base, strict bool) (chain.Staged, map[string]mvcc.Base, error) {
	if err := s.firstPrepare(id); err != nil {
		return nil, nil, err
	}
	out := bases
	var keys []string
	results := make([]txn.Result, len(ops))
	for i, op := range ops {
		// The store passes the keys this node does not store by, as a
		// node's does (mvcc.Step.parts): their results are Unheld, and
		// those of a member after this one that stores the key take
		// their place (txn.MergeResults).
		results[i].Unheld = true
		if s.owns(op.Key) && !slices.Contains(keys, op.Key) {
			keys = append(keys, op.Key)
		}
	}
	p := &mvccStaged{node: s, id: id, keys: keys, results: results}
	if len(keys) > 0 {
		pending, err := s.store.TryPrepareStep(ops, mvcc.Step{Version: s.versionOf(id), Bases: bases, Strict: strict, Placement: ownership(keys)})
		if err != nil {
			return nil, nil, err
		}
		out = handOn(bases, pending.Bases())
		p.inner = &mvcc.ChainStaged{P: pending, ID: id, Later: true}
		p.refresh()
		if !p.inner.Ready() {
			// Staged behind undecided commits of a blob it only applies
			// atomic ops to: the path the ordering statistics count.
			s.queued[id] = true
			for _, k := range keys {
				if ahead := pending.Bases()[k].Ahead; len(ahead) > 0 {
					s.trace("%s queues %s at version %d on %s behind %v", s.node, id, s.versionOf(id), k, ahead)
				}
			}
		}
		// Nothing, except in a tyr_broken_unordered build (see
		// TestSimCatchesUnordered).
		mvcc.BreakOrder(pending)
	}
	s.status[id] = statusStaged
	s.staged[id] = p
	s.stageTicks[id] = s.tick()
	return p, out, nil
}

// pass stages id as a commit passing through (see catchup.go).
func (s *mvccNode) pass(id chain.TxnID) error {
	if err := s.firstPrepare(id); err != nil {
		return err
	}
	s.status[id] = statusStaged
	return nil
}

// passed records that id, passing through, committed, with results, as a
// node's passThrough does.
func (s *mvccNode) passed(id chain.TxnID, results []txn.Result) error {
	if err := s.store.PutTxn(id.String(), txn.EncodeResults(results)); err != nil {
		s.setStatus(id, statusAborted)
		return err
	}
	s.setStatus(id, statusPassed)
	s.unsynced = append(s.unsynced, id)
	return nil
}

func (s *mvccNode) passAborted(id chain.TxnID) { s.setStatus(id, statusAborted) }

// versionAfter is id's version: an mvcc commit gives every blob it changes
// its version.
func (s *mvccNode) versionAfter(id chain.TxnID, _ []txn.Op, _ string, _ mvcc.Base, _ bool) uint64 {
	return s.versionOf(id)
}

// setStatus moves staged transaction id to st.
func (s *mvccNode) setStatus(id chain.TxnID, st status) {
	if s.status[id] != statusStaged {
		s.anomalies = append(s.anomalies, fmt.Sprintf("%s: %s of %s, which is %s", s.node, st, id, s.status[id]))
	}
	s.status[id] = st
}

// refresh copies key from another node's store with mvcc.Store.Refresh, as
// a node's catch-up does (node.chunkSource), and then takes that node's
// log of the key, whose commits the copy holds; those not committed here
// count as committed at the copy, for the collector checks.
func (s *mvccNode) refresh(key string, from nodeStore, ready bool, want uint64) (bool, error) {
	src := from.(*mvccNode)
	// A node's catch-up reads wait for the syncs of the commits they
	// read, on both sides (see mvcc/durable.go).
	s.sync()
	src.sync()
	rs := &refreshSource{from: src.store, to: s.store, key: key, ready: ready, want: want}
	changed, err := s.store.Refresh(key, rs)
	if err != nil || !rs.taken {
		return false, err
	}
	// Taken, the source's copy is this store's now, changed or not: two
	// copies that both missed commits may end alike (a blob created and
	// deleted again), and its log is the one that counts those commits.
	changed = changed || !slices.Equal(s.logs[key], src.logs[key])
	s.logs[key] = slices.Clone(src.logs[key])
	for _, id := range s.logs[key] {
		if _, ok := s.commitTicks[id]; !ok {
			s.commitTicks[id] = s.tick()
		}
	}
	return changed, nil
}

// refreshSource is the mvcc.Source of a refresh: another node's store.
type refreshSource struct {
	from, to *mvcc.Store
	key      string
	ready    bool
	want     uint64
	cp       mvcc.Copy
	taken    bool // Copy planned the source's copy, not the local one
}

func (r *refreshSource) Copy(local mvcc.Record) (mvcc.Copy, error) {
	remote, err := r.from.Record(r.key)
	if err != nil {
		return mvcc.Copy{}, err
	}
	if remote.Exists && remote.Version < r.want {
		return mvcc.Copy{}, fmt.Errorf("%w: %w: %q is at version %d there, before the commit at %d that passed through",
			errs.ErrUnavailable, mvcc.ErrCopyBehind, r.key, remote.Version, r.want)
	}
	if !r.ready && !mvcc.StaleCopyCounts(local, remote, r.want) {
		return mvcc.Copy{Record: local}, nil
	}
	r.cp = r.to.PlanCopy(r.key, local, remote, nil)
	r.taken = true
	return r.cp, nil
}

func (r *refreshSource) Read(off, length uint64) ([]byte, error) {
	expect := r.cp.Chunks[off/r.from.ChunkBytes()]
	if expect == 0 {
		return make([]byte, length), nil // never written since the blob was created
	}
	return r.from.ReadChunks(r.key, off, length, r.cp.Version, r.cp.Size, expect)
}

// sync makes every commit written so far durable, as the node's syncer
// does; the reads of a node wait for it (see mvcc/durable.go), so the
// simulator syncs before it reads too.
func (s *mvccNode) sync() {
	if err := s.store.Sync(); err != nil {
		panic(fmt.Sprintf("sim: syncing %s's store: %v", s.node, err))
	}
	s.unsynced = s.unsynced[:0]
}

// crash drops what the store staged and opens the database and the store
// again, as a restarted node does, over what a crash leaves of its files:
// everything synced and, picked by rng, part of the rest. What lived in
// the store's memory, such as the versions running transactions use (see
// mvcc/uses.go), is gone. The commits since the last sync whose records
// did not survive are undone in the simulator's books, and returned.
func (s *mvccNode) crash(rng *rand.Rand) []chain.TxnID {
	ids := slices.SortedFunc(maps.Keys(s.staged), chain.TxnID.Compare)
	for _, id := range ids {
		if p := s.staged[id]; p.inner != nil {
			p.inner.Abort()
		}
	}
	clear(s.staged)
	loseUncommitted(s.status)
	// A crash loses everything not synced, or (one crash in four) keeps
	// it all, as when the page cache reached the disk in time. Nothing in
	// between: Pebble's CrashClone draws for each file in map order, so a
	// partial keep would not replay. Keeping it all is a sync: Pebble's
	// log writer hands the log to its file from a goroutine of its own, so
	// what the file holds unsynced depends on when that goroutine ran.
	if rng.IntN(4) == 0 {
		if err := s.store.Sync(); err != nil {
			panic(fmt.Sprintf("sim: syncing %s's store before its crash: %v", s.node, err))
		}
	}
	kept := s.fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0, RNG: rand.New(rand.NewPCG(0, 0))})
	if err := s.db.Close(); err != nil {
		panic(fmt.Sprintf("sim: closing %s's store: %v", s.node, err))
	}
	s.fs = kept
	if err := s.open(); err != nil {
		panic(fmt.Sprintf("sim: reopening %s's store: %v", s.node, err))
	}
	var lost []chain.TxnID
	for _, id := range s.unsynced {
		if _, ok, err := s.store.Txn(id.String()); err != nil {
			panic(fmt.Sprintf("sim: %s's record of %s: %v", s.node, id, err))
		} else if ok {
			continue
		}
		lost = append(lost, id)
		s.status[id] = statusLost
		delete(s.commitTicks, id)
		for k, log := range s.logs {
			s.logs[k] = slices.DeleteFunc(log, func(c chain.TxnID) bool { return c == id })
		}
	}
	s.unsynced = s.unsynced[:0]
	return lost
}

type mvccStaged struct {
	node  *mvccNode
	id    chain.TxnID
	keys  []string          // in first-touched order, which is deterministic
	inner *mvcc.ChainStaged // nil when the node stores none of the keys
	// results has an entry per op of the transaction; those of the ops on
	// keys this node does not store are Unheld.
	results []txn.Result
	waited  bool
}

var (
	_ chain.Staged  = (*mvccStaged)(nil)
	_ chain.Ordered = (*mvccStaged)(nil)
)

// ownership is the mvcc.Placement of a simulated node as a commit is
// staged, the keys it stores then (a node's Placement too is the one of
// the moment it staged): every replica of a key stores all of it and
// manages it.
type ownership []string

func (o ownership) Manages(key string) bool         { return slices.Contains(o, key) }
func (o ownership) Holds(key string, _ uint64) bool { return slices.Contains(o, key) }

// refresh copies the inner commit's results into results. It makes a new
// slice: the replica may hold the one Results returned before.
func (p *mvccStaged) refresh() {
	p.results = slices.Clone(p.inner.Results())
}

func (p *mvccStaged) finish(st status) {
	p.node.setStatus(p.id, st)
	delete(p.node.staged, p.id)
}

// Committed implements chain.Stager.
func (s *mvccNode) Committed(id chain.TxnID) ([]txn.Result, bool, error) {
	return mvcc.CommittedTxn(s.store, id)
}

// Commit implements chain.Staged.
func (p *mvccStaged) Commit(results []txn.Result) error {
	var err error
	if p.inner == nil {
		err = p.node.store.PutTxn(p.id.String(), txn.EncodeResults(results))
	} else {
		err = p.inner.Commit(results)
	}
	if err != nil {
		// The store applied nothing and released what it held: as far as
		// this copy goes, the transaction aborted.
		p.finish(statusAborted)
		return err
	}
	p.finish(statusCommitted)
	p.node.commitTicks[p.id] = p.node.tick()
	if p.inner != nil {
		// A commit that was queued is rebased as it applies: its atomic
		// ops found the values the commits ahead of it left.
		p.refresh()
	}
	for _, k := range p.keys {
		p.node.logs[k] = append(p.node.logs[k], p.id)
	}
	p.node.unsynced = append(p.node.unsynced, p.id)
	return nil
}

// Abort implements chain.Staged.
func (p *mvccStaged) Abort() {
	p.finish(statusAborted)
	if p.inner != nil {
		p.inner.Abort()
	}
}

// Results implements chain.Staged.
func (p *mvccStaged) Results() []txn.Result { return p.results }

// Ready implements chain.Ordered. The replica asks it once its transaction
// is committed; false then means the transaction waits in the applying
// phase for the commits queued ahead of it here.
func (p *mvccStaged) Ready() bool {
	if p.inner == nil || p.inner.Ready() {
		return true
	}
	if !p.waited {
		p.waited = true
		p.node.waited[p.id] = true
		p.node.trace("%s holds %s, committed, until the commits ahead of it are decided", p.node.node, p.id)
	}
	return false
}

func (s *mvccNode) statusOf(id chain.TxnID) status { return s.status[id] }

func (s *mvccNode) putMissed(id chain.TxnID) {
	if err := s.store.PutMissed(id.String()); err != nil {
		panic(fmt.Sprintf("sim: %s: recording missed %s: %v", s.node, id, err))
	}
}

func (s *mvccNode) missed(id chain.TxnID) bool {
	ok, err := s.store.Missed(id.String())
	if err != nil {
		panic(fmt.Sprintf("sim: %s: reading missed %s: %v", s.node, id, err))
	}
	return ok
}

func (s *mvccNode) stagedCount() int {
	n := 0
	for _, st := range s.status {
		if st == statusStaged {
			n++
		}
	}
	return n
}

func (s *mvccNode) storeAnomalies() []string { return s.anomalies }

func (s *mvccNode) keyLog(key string) []chain.TxnID { return s.logs[key] }

func (s *mvccNode) keyState(key string) (blob, error) {
	s.sync()
	info, err := s.store.Stat(key)
	if errors.Is(err, errs.ErrNotFound) {
		return blob{}, nil
	}
	if err != nil {
		return blob{}, err
	}
	data, _, err := s.store.Read(key, 0, info.Size)
	if err != nil {
		return blob{}, err
	}
	if uint64(len(data)) != info.Size {
		return blob{}, fmt.Errorf("read %d bytes of %q, Stat says %d", len(data), key, info.Size)
	}
	return blob{exists: true, data: data, version: info.Version}, nil
}

func (s *mvccNode) ordering() (queued, waited map[chain.TxnID]bool) { return s.queued, s.waited }

func (s *mvccNode) close() error { return s.db.Close() }
