// Package sim runs a whole cluster's chain-commit protocol in one goroutine,
// on virtual time, over a simulated network that loses, repeats, delays and
// reorders messages and partitions the nodes, and then checks that no
// transaction was half-committed and that every one finished.
//
// Everything that varies comes from one seed: the cluster's shape, the
// network's fault profile (each seed picks its own, so a batch of seeds
// covers quiet networks, lossy ones and partitioned ones: swarm testing),
// the partition schedule, the clients' transactions and every delivery. One
// event queue, ordered by virtual time and then by insertion, drives the
// run, and every collection is walked in a fixed order, so a seed replays
// exactly, event for event: Result.TraceHash proves it.
//
// Each node stores its keys in a MemStore, the simulator's model of mvcc,
// or, with Config.Store = StoreMVCC, in a real mvcc.Store over an in-memory
// Pebble database whose clock is the virtual time. Each transaction has one
// commit version, which its client picks from its clock when it begins, as
// a node's coordinator does; the mvcc stores commit it under that version
// on every member. Some keys are counters, which mostly receive atomic
// ops: on mvcc, commits that only apply atomic ops to a counter queue
// behind the undecided ones there instead of being refused, and apply
// later in version order (see "Ordering" in chain/replica.go), a path the
// run counts in Stats.Queued and Stats.Waited.
//
// Nodes crash and restart too: a crash loses the node's replica state and
// what its store had staged, and keeps what the store committed, including
// its transaction records (chain.Stager.Committed); an mvcc store is
// opened again over its database, losing what it held in memory. On mvcc
// the stores' version collectors run as well, against readers of older
// versions (see gc.go). Messages sent to a
// node before it restarted reach the new run, except fresh Forwards: a
// message the sender sent once reaches at most one run of a node, and the
// simulated network repeats messages, which the transport does not. A
// member that misses a commit that way reports it (chain.ErrStageLost), and
// its copy of the transaction's keys is behind from then on.
//
// Copies behind are repaired as on a node (see catchup.go): each Forward
// carries the first replica's record of each key before the commit, a
// member whose copy is behind lets the commit pass through it
// (chain.Passing) and catches up, and so does a node that restarted, was
// left out of a chain or missed a commit. A node catching up serves no
// reads, refuses to be the first replica of a key in a chain, and copies
// each key from an up to date replica, on the virtual clock, once every
// transaction in flight when it came back has finished. The run ends once every node caught up,
// and the checkers then hold every copy of every key to the commits the
// coordinators saw committed.
//
// Each client stands for the node its coordinator runs on and has that
// node's failure detector (see detector): it leaves a node out of its
// chains once it has not reached it for a number of ticks the seed draws,
// because the node is down, across a partition, or suspected though it is
// up and reachable, unless that would leave no more than half of the
// nodes in. Views differ between clients and are often wrong. A client
// begins a transaction on the replicas its view keeps, and every tick, as
// a node's loop does, re-executes on the members left each transaction in
// flight whose chain has a member its view leaves out
// (chain.Coordinator.Reroute; see "Re-execution" in chain/replica.go); the
// run counts these reroutes in Stats. A member left out may be alive and
// still hold what it staged, including commits queued behind others: it
// learns the outcome from the member after it in the older chain, and must
// commit or abort like the rest. As on a node, a replica does not stage a
// Forward of a transaction it does not know that began more than half its
// outcome retention ago (see forwardAgeTicks), so that a left-out member
// that keeps sending the older chain's Forward cannot start the
// transaction again on a member that forgot it. A left-out member that did
// not commit a transaction that committed misses its writes; a node
// revokes the read lease of a member before it leaves it out of chains, so
// that member catches up before it serves again.
//
// On a third of the seeds the keys are placed by a real ring and the fault
// phase changes it 1 to 3 times, through the epochs of internal/rebalance:
// a spare node joins, a member leaves or a member's weight changes, and
// while ranges move, chains hold the old and the new owners and the new
// ones copy what they gain over the simulated network (see
// ringchange.go). The checkers then hold every replica under the final
// ring to the committed history.
//
// A run has two phases. In the fault phase clients begin transactions
// while the network misbehaves. Then the network heals for good and stops
// losing messages (it still delays, reorders and repeats them), clients stop
// beginning transactions, and the run continues until every transaction has
// finished, every replica has forgotten it and every node has caught up, or
// the liveness bound passes.
package sim

import (
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/tyrstore/tyr/internal/chain"
	"github.com/tyrstore/tyr/internal/mvcc"
	"github.com/tyrstore/tyr/internal/outbox"
	"github.com/tyrstore/tyr/internal/rebalance"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/txn"
)

// Config selects a run. Only Seed is needed; the rest is for tests.
type Config struct {
	Seed uint64
	// Lossy forces a network that drops at least 5% of messages, for tests
	// that need faults on every seed.
	Lossy bool
	// Duplicating forces a network that delivers at least 20% of messages
	// twice, up to 10 ticks late: late duplicates on every seed, for tests
	// of what a replica must remember of them. Chains send few copies of
	// their own, since retransmissions back off.
	Duplicating bool
	// AbortOnTimeout turns on chain.TestingKnobs.AbortOnForwardTimeoutTicks
	// in every replica: the protocol bug the checkers must catch.
	AbortOnTimeout bool
	// RetentionTicks, if positive, replaces the seed's choice of
	// chain.ReplicaConfig.OutcomeRetentionTicks, which otherwise always
	// outlasts the slowest message. Shorter breaks the replicas' contract.
	RetentionTicks int
	// Store selects each node's storage: the in-memory model (default) or
	// a real mvcc.Store over an in-memory Pebble database.
	Store StoreKind
	// Crashy forces at least two node crashes, for tests that need them on
	// every seed.
	Crashy bool
	// IgnoreEarlierRuns turns on chain.TestingKnobs.IgnoreEarlierRuns in
	// every replica: the bug that lets a restarted member take a
	// transaction it handled before for a new one.
	IgnoreEarlierRuns bool
	// Suspicious forces a failure detector that suspects nodes wrongly at
	// least twice and leaves a node out after a few ticks (see detector),
	// for tests that need re-executions on most seeds.
	Suspicious bool
	// NoReroutes makes every client keep every node in its chains, as if
	// its failure detector never took a node for dead: no transaction is
	// re-executed, or begun on fewer than all its keys' replicas.
	NoReroutes bool
	// Moves forces ring changes on every seed (see ringchange.go).
	Moves bool
	// SwitchBeforeCopy makes the nodes that gain ranges in a ring change
	// report them copied without copying them: the bug that switches
	// reads and chains to the new ring before its owners hold the data.
	SwitchBeforeCopy bool
	// Trace, if set, receives one line per event, for replaying a seed.
	Trace func(line string)
}

// Bounds of a run, in ticks.
const (
	faultTicks       = 300
	livenessTicksMax = 3000
	// probesMax uncontended transactions run one after another once the
	// run is quiet, within probeTicksMax ticks in all (see probe).
	probesMax         = 8
	probeTicksMax     = 1500
	retransmitTicks   = 5
	crashDownTicksMax = 40
)

// profile is the shape and fault mix one seed picks.
type profile struct {
	nodes, clients, keys, replicationFactor int
	// counters is how many keys, the first ones, are counters.
	counters                    int
	dropPct, duplicatePct       int
	delayTicksMax               int
	retentionTicks              int
	beginPct, clientInflightMax int
	partitions                  int
	// crashes is how many node crashes the fault phase plans; each node
	// stays down for 1 to crashDownTicksMax ticks.
	crashes int
	// pendingMax and txnsMax are the replicas' limits; zero takes the
	// defaults, which a run never reaches.
	pendingMax, txnsMax int
}

func pickProfile(rng *rand.Rand, cfg Config) profile {
	p := profile{
		nodes:             3 + rng.IntN(5),
		clients:           1 + rng.IntN(4),
		keys:              2 + rng.IntN(7),
		delayTicksMax:     1 + rng.IntN(10),
		beginPct:          5 + rng.IntN(46),
		clientInflightMax: 1 + rng.IntN(4),
	}
	p.replicationFactor = 1 + rng.IntN(min(3, p.nodes))
	if shape := shapeSource(cfg.Seed); shape.IntN(3) == 0 {
		// A third of the seeds draw from every shape a cluster may have
		// (1 to 7 nodes, replication 1 to min(nodes, 5)), from a source
		// of their own so that the other seeds keep their shapes.
		p.nodes = 1 + shape.IntN(7)
		p.replicationFactor = 1 + shape.IntN(min(5, p.nodes))
	}
	p.counters = 1 + rng.IntN((p.keys+1)/2)
	if rng.IntN(4) != 0 {
		p.dropPct = rng.IntN(31)
	}
	if cfg.Lossy {
		p.dropPct = max(p.dropPct, 5)
	}
	if rng.IntN(3) != 0 {
		p.duplicatePct = rng.IntN(21)
	}
	if cfg.Duplicating {
		p.duplicatePct = max(p.duplicatePct, 20)
		p.delayTicksMax = 10
	}
	if rng.IntN(2) == 0 {
		p.partitions = 1 + rng.IntN(4)
	}
	if rng.IntN(4) == 0 {
		// Tiny limits, so backpressure refusals and dropped Forwards happen.
		p.pendingMax = 1 + rng.IntN(3)
		p.txnsMax = p.pendingMax + 1 + rng.IntN(8) // at least one per node: see build
	}
	// Retention must outlast the slowest message (see
	// chain.ReplicaConfig.OutcomeRetentionTicks); sometimes by one tick only.
	p.retentionTicks = p.delayTicksMax + 1 + rng.IntN(20)
	if cfg.RetentionTicks > 0 {
		p.retentionTicks = cfg.RetentionTicks
	}
	return p
}

// shapeSource is the random source of the wider cluster shapes.
func shapeSource(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5a9e)) }

// crashSource is the random source of the crash schedule, apart from the
// rest so that adding crashes left every other choice of a seed as it was.
func crashSource(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0xc7a54)) }

// syncSource is the random source of sync durations and of what crashes
// keep of unsynced writes, apart from the rest like crashSource.
func syncSource(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5c1d)) }

// syncTicksMax bounds how long a node's sync takes: 1 to syncTicksMax
// ticks, during which its replica goes on and a crash may come.
const syncTicksMax = 3

func pickCrashes(rng *rand.Rand, cfg Config) int {
	n := 0
	if rng.IntN(2) == 0 {
		n = 1 + rng.IntN(3)
	}
	if cfg.Crashy {
		n = max(n, 2)
	}
	return n
}

// Result is the outcome of one run.
type Result struct {
	Seed uint64
	// Moves: the run forced ring changes (Config.Moves).
	Moves bool
	// Summary is one line: the profile and the counts.
	Summary string
	// Anomalies lists every checker failure; empty means the run passed.
	Anomalies []string
	// TraceHash is a digest of every event; equal seeds give equal hashes.
	TraceHash uint64
	Stats     Stats
}

// Stats count what happened in a run.
type Stats struct {
	Begun, Committed, Aborted        int
	Sent, Dropped, Partitioned, Dups int
	Partitions                       int
	Crashes, Lost, StagesLost        int
	Ticks                            int
	// Queued counts the transactions that joined a blob's queue behind
	// undecided commits on at least one member (mvcc only), and
	// QueuedCommitted those of them that committed; Waited counts those
	// that, once committed, waited on some member for the commits ahead
	// of them to be decided before they applied.
	Queued, QueuedCommitted, Waited int
	// Syncs counts the syncs the nodes made for their commits (see
	// chain.Output's MustSync), Held the messages that waited in a node's
	// outbox for one, HeldLost those a crash dropped there, and
	// UnsyncedLost the commits a crash took back because their sync had
	// not run (mvcc only).
	Syncs, Held, HeldLost, UnsyncedLost int
	// MultiVM counts the transactions whose keys did not all have the
	// same replicas (their version managers differ), and MultiVMCommitted
	// those of them that committed.
	MultiVM, MultiVMCommitted int
	// Probes counts the uncontended transactions run one at a time once
	// the faults are over (see probe), and ProbesCommitted those that
	// committed: progress requires every one of them to.
	Probes, ProbesCommitted int
	// ProbeKeysExcused counts the keys the progress check left out as
	// every replica failed while one of their commits was made.
	ProbeKeysExcused int
	// Reroutes counts the re-executions the coordinators sent
	// (chain.Coordinator.Reroute), Rerouted the transactions re-executed
	// at least once and RerouteCommitted those of them that committed.
	Reroutes, Rerouted, RerouteCommitted int
	// LeftOut counts the members of finished transactions that their
	// final chain left out (at Begin or by a reroute), LeftStaged those
	// of them that had staged the transaction and then learned its
	// outcome, and LeftBehind the copies that missed a commit that way
	// (a member and a transaction; see the package doc).
	LeftOut, LeftStaged, LeftBehind int
	// OldChain counts the messages of a chain a reroute replaced that a
	// replica dropped (see "Re-execution" in chain/replica.go).
	OldChain int
	// Behind counts the copies (a key on one of its replicas) that missed
	// a commit, which catch-up repaired; Copies counts them all.
	Behind, Copies int
	// Passed counts the commits that passed through a member whose copy
	// was behind (see catchup.go), PassedCommitted those of them that
	// committed there, BehindRefused the transactions a tail refused
	// because they would have passed through it (chain.ErrBehind), Asks
	// the times a re-execution's tail asked the members left out after it
	// (chain.ReplicaCounters.Asks), Unkept the pass-throughs refused
	// because the chain's tail does not store the key (unkept), and Ahead
	// the commits
	// refused by a member whose copy was ahead of the first replica's.
	// Unmanaged counts the commits a tail refused because no member of
	// its chain manages one of their keys (mvcc.Unmanaged), and Orphaned
	// the stages a re-execution made the tail of such a chain
	// (chain.Orphaning).
	Passed, PassedCommitted, BehindRefused, Asks, Unkept, Ahead, Unmanaged, Orphaned int
	// CatchUpsBegun counts the times a node began catching up, CatchUps
	// the times one caught up, and Refreshed the copies a catch-up
	// changed; AllFailed counts the commits of a key that every replica
	// of the key failed while they committed, or that a node caught up
	// without while no replica of the key was up to date, which may be
	// lost (see noteStagesLost and noteAllFailed).
	// CopiesLost counts the copies, of a catch-up or of a ring change,
	// taken without a commit that passed through the copying node, every
	// source having lost its stage of it (rebalance.Lost): the commit's
	// keys are among AllFailed's.
	CatchUpsBegun, CatchUps, Refreshed, AllFailed, CopiesLost int
	// Collections counts the collector passes (mvcc only) and Collected
	// the page versions they deleted; Pins counts the readers' pins of a
	// version, OldReads their reads of a version a commit had superseded,
	// OldServed those served and OldGone those refused (see gc.go).
	Collections, Collected             int
	Pins, OldReads, OldServed, OldGone int
	// Moves counts the ring changes proposed, KeysMoved the replicas of
	// keys they added, MoveCopies the keys the nodes gaining them copied
	// (a request and its reply over the network) and CopyRetries the
	// copy requests sent again, their request or reply lost or the copy
	// not possible yet (see ringchange.go).
	Moves, KeysMoved, MoveCopies, CopyRetries int
}

// Add adds the counts of o to s, field by field (every field is a count).
func (s *Stats) Add(o Stats) {
	sv, ov := reflect.ValueOf(s).Elem(), reflect.ValueOf(o)
	for i := range sv.NumField() {
		sv.Field(i).SetInt(sv.Field(i).Int() + ov.Field(i).Int())
	}
}

// eventKind is what an event does. Zero is invalid.
type eventKind uint8

const (
	eventDeliver eventKind = 1 + iota
	eventTick
	eventPartition
	eventCrash
	eventRestart
	// eventCopy: a ring change's copy request reaches its source;
	// eventCopied: its reply reaches the node copying.
	eventCopy
	eventCopied
	// eventSync: a node's sync returns (see syncNode).
	eventSync
)

type event struct {
	at   int
	seq  uint64
	kind eventKind
	msg  chain.Message
	sent int         // eventDeliver: when the message was sent
	node ring.NodeID // eventCrash, eventRestart, eventSync; eventCopy, eventCopied: the node copying
	// upTo and run: eventSync: the writes the sync covers (see
	// outbox.Outbox.StartSync), in the node's run that began it.
	upTo uint64
	run  int
	copy *copyReq // eventCopy, eventCopied
	// sides assigns each endpoint to one side of a partition; nil heals.
	sides map[ring.NodeID]bool
	// bases: eventDeliver of a Forward: the bases it carries (see
	// catchup.go).
	bases map[string]mvcc.Base
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return e
}

// txnRecord is the simulator's knowledge of one transaction, for checking.
type txnRecord struct {
	id      chain.TxnID
	begun   int    // tick
	version uint64 // the commit version, the same on every member
	ops     []txn.Op
	// placed are the replicas of every key the transaction writes; chain
	// those of them its client's view kept at Begin, and final the chain
	// of its last re-execution (chain when there was none). Each is a
	// subsequence of the one before.
	placed, chain, final []ring.NodeID
	// multiVM: the keys' replicas differ; probe: one of the uncontended
	// transactions of the progress check.
	multiVM, probe bool
	reroutes       int
	finished       bool
	outcome        chain.Outcome
}

// world is one run's state.
type world struct {
	cfg   Config
	p     profile
	rng   *rand.Rand
	now   int
	seq   uint64
	queue eventQueue
	// nodes and clients are sorted by ID; everything walks them in order.
	nodes    []ring.NodeID
	replicas map[ring.NodeID]*chain.Replica
	stores   map[ring.NodeID]nodeStore
	clients  []*chain.Coordinator
	// probes is how many transactions of the progress check began, and
	// probeOpen the last of them.
	probes    int
	probeOpen *txnRecord
	// skews are how many ticks each client's clock runs ahead of the
	// virtual time, so that versions do not follow begin order exactly.
	skews     []int
	keys      []string
	placement map[string][]ring.NodeID // sorted replicas of each key
	// serving are the replicas of each key that serve its reads, sorted:
	// those of placement but for the ones that only gain it in a ring
	// change (see ringchange.go).
	serving map[string][]ring.NodeID
	ring    ringState
	txns    map[chain.TxnID]*txnRecord
	order   []chain.TxnID // in begin order
	sides   map[ring.NodeID]bool
	healed  bool
	// down holds the crashed nodes; restarted is when each node last
	// restarted; behind holds, per key, the nodes whose copy missed a
	// commit (see the package doc).
	down      map[ring.NodeID]bool
	restarted map[ring.NodeID]int
	behind    map[string]map[ring.NodeID]bool
	stageLost map[chain.TxnID][]ring.NodeID
	// passedGained holds, per transaction, the nodes it passed through
	// for keys they only gained (onlyGained).
	passedGained map[chain.TxnID][]ring.NodeID
	// ownedAt holds, per transaction and key, the nodes that stored the
	// key when they prepared the transaction (noteOwners).
	ownedAt map[chain.TxnID]map[string][]ring.NodeID
	// det is the failure detector; views holds, per client, the nodes it
	// leaves out of chains now (sorted), and lostSince, per client and
	// node, the tick since which the node has been out of the client's
	// reach, or -1.
	det       detector
	views     [][]ring.NodeID
	lostSince [][]int
	inFlight  int // deliveries queued
	// gc is the seed's collector profile and gcRng its random source;
	// pins holds each reader's pin (nil: idle), collected the tick of
	// each node's last collector pass, crashTicks each node's crashes,
	// and oldReads, releases and gcFindings what the collector checks
	// look at
	// (see gc.go).
	gc         gcProfile
	gcRng      *rand.Rand
	pins       []*pin
	collected  map[ring.NodeID]int
	crashTicks map[ring.NodeID][]int
	oldReads   []oldRead
	releases   []release
	gcFindings []string
	// forwards holds, per node, what the Forwards of the transactions its
	// replica took brought (see catchup.go), catch each node's catch-up
	// state, and refreshes the catch-ups that changed a copy.
	forwards  map[ring.NodeID]map[chain.TxnID]*forward
	catch     map[ring.NodeID]*catchUp
	refreshes []refresh
	// allFailed holds, per key, the commits that may have been lost
	// because every replica of the key had failed at once (see
	// noteAllFailed and noteStagesLost).
	allFailed map[string]map[chain.TxnID]bool
	// outs holds what each node's replica sent until its commits are
	// durable; runs counts each node's crashes, so that a sync begun
	// before one is not taken for one after it; syncRng draws how long
	// each sync takes and what a crash keeps of what was not synced.
	outs        map[ring.NodeID]*outbox.Outbox[chain.Message]
	runs        map[ring.NodeID]int
	syncRng     *rand.Rand
	stats       Stats
	failures    []string
	traceHasher func([]byte)
}

// Run runs one seed and checks it. It never fails on its own; the caller
// reads Result.Anomalies.
func Run(cfg Config) Result {
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	w := &world{cfg: cfg, p: pickProfile(rng, cfg), rng: rng,
		replicas: map[ring.NodeID]*chain.Replica{}, stores: map[ring.NodeID]nodeStore{},
		placement: map[string][]ring.NodeID{}, serving: map[string][]ring.NodeID{}, txns: map[chain.TxnID]*txnRecord{},
		down: map[ring.NodeID]bool{}, restarted: map[ring.NodeID]int{}, behind: map[string]map[ring.NodeID]bool{},
		stageLost: map[chain.TxnID][]ring.NodeID{}, passedGained: map[chain.TxnID][]ring.NodeID{},
		ownedAt:   map[chain.TxnID]map[string][]ring.NodeID{},
		collected: map[ring.NodeID]int{}, crashTicks: map[ring.NodeID][]int{},
		forwards: map[ring.NodeID]map[chain.TxnID]*forward{}, catch: map[ring.NodeID]*catchUp{},
		allFailed: map[string]map[chain.TxnID]bool{},
		outs:      map[ring.NodeID]*outbox.Outbox[chain.Message]{}, runs: map[ring.NodeID]int{},
		syncRng: syncSource(cfg.Seed)}
	w.gcRng = gcSource(cfg.Seed)
	w.gc = pickGC(w.gcRng)
	w.pins = make([]*pin, w.gc.readers)
	w.p.crashes = pickCrashes(crashSource(cfg.Seed), cfg)
	w.ring = ringState{rng: ringSource(cfg.Seed), moves: map[ring.NodeID]*moveCopy{},
		dirty: map[ring.NodeID]map[string]rebalance.Mark[chain.TxnID]{}, closed: map[ring.NodeID]uint64{}}
	w.ring.plan = pickRing(w.ring.rng, cfg)
	h := fnv.New64a()
	w.traceHasher = func(b []byte) { _, _ = h.Write(b) }
	defer w.closeStores()
	w.pickDetector(detectorSource(cfg.Seed))
	w.build()
	w.schedulePartitions()
	w.scheduleCrashes(crashSource(cfg.Seed ^ 1))
	w.push(&event{at: 0, kind: eventTick})
	func() {
		defer func() {
			if p := recover(); p != nil {
				a, ok := p.(*chain.AssertionError)
				if !ok {
					panic(p)
				}
				w.failures = append(w.failures, fmt.Sprintf("tick %d: %v", w.now, a))
			}
		}()
		w.loop()
	}()
	for _, n := range w.nodes {
		if !w.down[n] {
			w.countReplica(n)
		}
	}
	w.markLeftBehind()
	w.noteStagesLost()
	for _, k := range w.keys {
		w.stats.Behind += len(w.behind[k])
		w.stats.Copies += len(w.placement[k])
	}
	w.traceStores()
	w.countOrdering()
	anomalies := slices.Clone(w.failures)
	if len(anomalies) == 0 {
		anomalies = w.check()
	}
	w.stats.Ticks = w.now
	return Result{Seed: cfg.Seed, Moves: cfg.Moves, Summary: w.summary(), Anomalies: anomalies, TraceHash: h.Sum64(), Stats: w.stats}
}

func (w *world) build() {
	p := w.p
	for i := range p.nodes + w.ring.plan.spares {
		w.nodes = append(w.nodes, ring.NodeID(fmt.Sprintf("n%d", i)))
	}
	if p.txnsMax > 0 {
		// A chain holds each node at most once, and a table must fit
		// the longest (see "Admission" in chain/replica.go).
		w.p.txnsMax = max(p.txnsMax, len(w.nodes))
	}
	for i := range p.keys {
		k := fmt.Sprintf("k%d", i)
		w.keys = append(w.keys, k)
		var set []ring.NodeID
		for _, j := range w.rng.Perm(p.nodes)[:p.replicationFactor] {
			set = append(set, w.nodes[j])
		}
		slices.Sort(set)
		w.placement[k], w.serving[k] = set, set
	}
	if w.ringOn() {
		// The draws above keep the workload's random stream as it was.
		w.buildRing()
	}
	for _, n := range w.nodes {
		owns := func(key string) bool { return slices.Contains(w.placement[key], n) }
		var store nodeStore
		switch w.cfg.Store {
		case StoreMem:
			store = NewMemStore(n, owns)
		case StoreMVCC:
			s, err := newMVCCNode(n, owns, mvccClock{now: w.clock, tick: func() int { return w.now }},
				ticks(w.gc.lingerTicks), ticks(w.gc.retentionTicks), w.versionOf, w.trace)
			if err != nil {
				panic(err)
			}
			store = s
		default:
			panic(fmt.Sprintf("sim: unknown store %v", w.cfg.Store))
		}
		w.stores[n] = store
		w.forwards[n] = map[chain.TxnID]*forward{}
		w.catch[n] = &catchUp{}
		w.replicas[n] = w.newReplica(n)
	}
	for i := range p.clients {
		c, err := chain.NewCoordinator(chain.CoordinatorConfig{
			ID: ring.NodeID(fmt.Sprintf("c%d", i)), FirstSeq: 1, RetransmitTicks: retransmitTicks,
			InflightMax: p.clientInflightMax,
		})
		if err != nil {
			panic(err)
		}
		w.clients = append(w.clients, c)
		w.skews = append(w.skews, w.rng.IntN(3))
	}
}

// newReplica is node n's replica, holding no transactions: at the start,
// and after each restart.
func (w *world) newReplica(n ring.NodeID) *chain.Replica {
	knobs := chain.TestingKnobs{IgnoreEarlierRuns: w.cfg.IgnoreEarlierRuns}
	if w.cfg.AbortOnTimeout {
		knobs.AbortOnForwardTimeoutTicks = 3 * retransmitTicks
	}
	r, err := chain.NewReplica(chain.ReplicaConfig{
		ID: n, Stager: nodeStager{w: w, n: n}, RetransmitTicks: retransmitTicks,
		OutcomeRetentionTicks: w.p.retentionTicks, PendingMax: w.p.pendingMax, TxnsMax: w.p.txnsMax,
		ChainMembersMax: w.chainMembersMax(), TestingKnobs: knobs,
		// An earlier run may have seen the transactions begun before the
		// last restart; and a transaction begun long ago counts as one
		// this member may have handled (see forwardAgeTicks).
		EarlierRun: func(id chain.TxnID) bool {
			t := w.txns[id]
			if at, ok := w.restarted[n]; ok && t.begun <= at {
				return true
			}
			return w.now-t.begun >= w.forwardAgeTicks()
		},
	})
	if err != nil {
		panic(err)
	}
	return r
}

// chainMembersMax bounds the chains of a run: one member per node, or
// the replica's default when a run leaves the tables at theirs.
func (w *world) chainMembersMax() int {
	if w.p.txnsMax == 0 {
		return 0
	}
	return len(w.nodes)
}

// scheduleCrashes plans the fault phase's crashes: each takes a node down
// at a random tick and restarts it 1 to crashDownTicksMax ticks later. A
// crash of a node that is down already does nothing.
func (w *world) scheduleCrashes(rng *rand.Rand) {
	for range w.p.crashes {
		at := 1 + rng.IntN(faultTicks-1)
		n := w.nodes[rng.IntN(len(w.nodes))]
		w.push(&event{at: at, kind: eventCrash, node: n})
		w.push(&event{at: at + 1 + rng.IntN(crashDownTicksMax), kind: eventRestart, node: n})
	}
}

// clock is the virtual time as wall time, a millisecond a tick: the clock
// of the mvcc stores, so what they stamp with it replays exactly.
func (w *world) clock() time.Time {
	return simEpoch.Add(time.Duration(w.now) * time.Millisecond)
}

// newVersion is the commit version of a transaction client i begins now:
// its clock's reading in nanoseconds, as a node's coordinator picks one,
// plus i, unique among the clients, as the low part. A client begins at
// most one transaction a tick, so no two transactions share a version.
func (w *world) newVersion(i int) uint64 {
	at := simEpoch.Add(time.Duration(w.now+w.skews[i]) * time.Millisecond)
	return uint64(at.UnixNano()) + uint64(i)
}

// versionOf is transaction id's commit version.
func (w *world) versionOf(id chain.TxnID) uint64 { return w.txns[id].version }

// countOrdering fills the ordering statistics from the stores.
func (w *world) countOrdering() {
	queued, waited := map[chain.TxnID]bool{}, map[chain.TxnID]bool{}
	for _, n := range w.nodes {
		q, wt := w.stores[n].ordering()
		maps.Copy(queued, q)
		maps.Copy(waited, wt)
	}
	w.stats.Queued, w.stats.Waited = len(queued), len(waited)
	for id := range queued {
		if t := w.txns[id]; t.finished && t.outcome.Committed {
			w.stats.QueuedCommitted++
		}
	}
}

// closeStores releases the stores' databases. A failure to close is a
// failure of the run.
func (w *world) closeStores() {
	for _, n := range w.nodes {
		if s := w.stores[n]; s != nil {
			if err := s.close(); err != nil {
				panic(fmt.Sprintf("sim: closing %s's store: %v", n, err))
			}
		}
	}
}

// traceStores records every replica's final state of every key, versions
// included, so TraceHash also proves the stores replay exactly.
func (w *world) traceStores() {
	for _, k := range w.keys {
		for _, n := range w.placement[k] {
			b, err := w.stores[n].keyState(k)
			w.trace("final %s %s exists=%t version=%d data=%q err=%v", n, k, b.exists, b.version, b.data, err)
		}
	}
}

// endpoints lists every node and client ID in a fixed order.
func (w *world) endpoints() []ring.NodeID {
	ids := slices.Clone(w.nodes)
	for _, c := range w.clients {
		ids = append(ids, c.ID())
	}
	return ids
}

// schedulePartitions plans the fault phase's partitions: each splits the
// endpoints at random into two sides for a while, and the last one heals
// before the fault phase ends. The network heals for good at its end anyway.
func (w *world) schedulePartitions() {
	at := 0
	for range w.p.partitions {
		at += 1 + w.rng.IntN(faultTicks/(w.p.partitions+1))
		if at >= faultTicks {
			break
		}
		sides := map[ring.NodeID]bool{}
		for _, id := range w.endpoints() {
			sides[id] = w.rng.IntN(2) == 0
		}
		w.push(&event{at: at, kind: eventPartition, sides: sides})
		w.stats.Partitions++
		at += 5 + w.rng.IntN(80)
		if at >= faultTicks {
			break
		}
		w.push(&event{at: at, kind: eventPartition})
	}
	w.push(&event{at: faultTicks, kind: eventPartition})
}

func (w *world) push(e *event) {
	e.seq = w.seq
	w.seq++
	heap.Push(&w.queue, e)
}

// traceMessage records a message event. It hashes the fields that matter
// instead of formatting them, which would cost half the run's time, and
// formats only when someone reads the trace.
func (w *world) traceMessage(verb string, m chain.Message) {
	var b [64]byte
	buf := binary.LittleEndian.AppendUint64(b[:0], uint64(w.now))
	buf = append(buf, verb...)
	buf = append(buf, byte(m.Type), byte(m.Index), boolByte(m.Committed))
	buf = append(buf, m.From...)
	buf = append(buf, 0)
	buf = append(buf, m.To...)
	buf = append(buf, 0)
	buf = append(buf, m.Txn.Coordinator...)
	buf = binary.LittleEndian.AppendUint64(buf, m.Txn.Seq)
	w.traceHasher(buf)
	if w.cfg.Trace != nil {
		w.cfg.Trace(fmt.Sprintf("%d %s %s", w.now, verb, m))
	}
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func (w *world) trace(format string, args ...any) {
	line := fmt.Sprintf("%d "+format, append([]any{w.now}, args...)...)
	w.traceHasher([]byte(line))
	w.traceHasher([]byte{'\n'})
	if w.cfg.Trace != nil {
		w.cfg.Trace(line)
	}
}

func (w *world) loop() {
	for w.queue.Len() > 0 {
		e := heap.Pop(&w.queue).(*event)
		w.now = e.at
		switch e.kind {
		case eventDeliver:
			w.inFlight--
			w.deliver(e.msg, e.sent, e.bases)
		case eventPartition:
			w.sides = e.sides
			if e.sides == nil {
				w.trace("heal")
			} else {
				w.trace("partition %v", e.sides)
			}
			if w.now >= faultTicks {
				w.healed = true
			}
		case eventCrash:
			if w.probes > 0 {
				// The progress check's window is fault-free: a crash a
				// finished ring change scheduled does not happen.
				w.trace("crash %s skipped in the fault-free window", e.node)
				continue
			}
			if !w.down[e.node] {
				w.trace("crash %s", e.node)
				w.down[e.node] = true
				w.runs[e.node]++
				if held := w.out(e.node).Drop(); held > 0 {
					w.stats.HeldLost += held
					w.trace("%s's outbox loses %d messages", e.node, held)
				}
				if lost := w.stores[e.node].crash(w.syncRng); len(lost) > 0 {
					w.stats.UnsyncedLost += len(lost)
					w.trace("%s loses the unsynced commits of %v", e.node, lost)
				}
				w.crashTicks[e.node] = append(w.crashTicks[e.node], w.now)
				w.countReplica(e.node)
				w.replicas[e.node] = nil
				// What the node held beside its replica is gone too.
				w.forwards[e.node] = map[chain.TxnID]*forward{}
				w.catch[e.node] = &catchUp{}
				w.ringCrash(e.node)
				w.stats.Crashes++
			}
		case eventRestart:
			if w.down[e.node] {
				w.trace("restart %s", e.node)
				delete(w.down, e.node)
				w.restarted[e.node] = w.now
				w.replicas[e.node] = w.newReplica(e.node)
				w.startCatchUp(e.node, "restarted", true)
				w.ringRestart(e.node)
			}
		case eventCopy, eventCopied:
			w.deliverCopy(e.kind, e.node, e.copy)
		case eventSync:
			if !w.down[e.node] && e.run == w.runs[e.node] {
				w.synced(e.node, e.upTo)
			}
		case eventTick:
			w.tick()
			if w.done() {
				return
			}
			if w.now < faultTicks+livenessTicksMax+probeTicksMax {
				w.push(&event{at: w.now + 1, kind: eventTick})
			}
		}
	}
}

// done reports whether the liveness phase reached quiescence: every
// transaction finished, every replica forgot everything, nothing in flight.
func (w *world) done() bool {
	if !w.quiet() {
		return false
	}
	if w.probes < probesMax {
		w.probe()
		return false
	}
	return w.probeOpen == nil || w.probeOpen.finished
}

// quiet reports whether the run is quiet: faults over, every node up and
// caught up, no ring change under way, nothing in flight or tracked.
func (w *world) quiet() bool {
	if !w.healed || w.inFlight > 0 || len(w.down) > 0 || w.ringBusy() {
		return false
	}
	for _, n := range w.nodes {
		if w.catchingUp(n) {
			return false
		}
	}
	for _, c := range w.clients {
		if c.Inflight() > 0 || c.HasReady() {
			return false
		}
	}
	for _, n := range w.nodes {
		if w.replicas[n].Tracked() > 0 || w.replicas[n].HasReady() {
			return false
		}
	}
	return true
}

func (w *world) tick() {
	w.updateViews()
	w.ringTick()
	w.gcTick()
	for _, n := range w.nodes {
		w.stepCatchUp(n)
	}
	for _, n := range w.nodes {
		if w.down[n] {
			continue
		}
		w.replicas[n].Tick()
		w.flushReplica(n)
	}
	for i, c := range w.clients {
		// As a node's loop does: retransmit, then re-execute what runs on
		// members this client's view no longer keeps in chains.
		c.Tick()
		c.Reroute(w.inChains(i))
		if w.now < faultTicks && w.rng.IntN(100) < w.p.beginPct {
			w.begin(c, i)
		}
		w.flushClient(c)
	}
}

// begin starts a random transaction of client ci on one to three keys,
// half of them counters. Its chain is the union of the keys' replicas that
// the client's view keeps in chains, ordered as a node orders them
// (chainOrder), so every
// transaction on a key passes through all of that key's replicas the view
// keeps; as a node does, the client refuses a transaction on a key none of
// whose replicas it keeps.
func (w *world) begin(c *chain.Coordinator, ci int) {
	ops := make([]txn.Op, 1+w.rng.IntN(3))
	for i := range ops {
		key := w.keys[w.rng.IntN(len(w.keys))]
		if w.rng.IntN(2) == 0 {
			key = w.keys[w.rng.IntN(w.p.counters)]
		}
		ops[i] = w.randomOp(key)
	}
	w.beginOps(c, ci, ops)
}

// probe begins the next uncontended transaction of the progress check,
// once the one before finished: the run is quiet and, from the first
// probe on, fault-free (every message arrives once, a tick later), so
// nothing conflicts with it and it must commit (checkProgress). Each writes two or three
// keys, whose replicas differ where the run's placement allows.
func (w *world) probe() {
	if w.probeOpen != nil && !w.probeOpen.finished {
		return
	}
	ci := w.probes % len(w.clients)
	// A key whose every replica failed while it committed (f = r, see
	// catchup.go) may have replicas that disagree for good: it is left
	// out, and counted (Stats.ProbeKeysExcused).
	usable := slices.DeleteFunc(slices.Clone(w.keys), func(k string) bool { return len(w.allFailed[k]) > 0 })
	if w.probes == 0 {
		w.stats.ProbeKeysExcused = len(w.keys) - len(usable)
	}
	w.probes++
	if len(usable) == 0 {
		return
	}
	first := usable[w.rng.IntN(len(usable))]
	keys := []string{first}
	for _, k := range w.rng.Perm(len(usable)) {
		if len(keys) == 3 {
			break
		}
		if k := usable[k]; k != first && (!w.samePlacement(k, first) || len(keys) == 1 && w.rng.IntN(4) == 0) {
			keys = append(keys, k)
		}
	}
	ops := []txn.Op{{Key: keys[0], Kind: txn.OpAppend, Data: []byte("p"), Create: true}}
	for _, k := range keys[1:] {
		ops = append(ops, txn.Op{Key: k, Kind: txn.OpWrite, Offset: 0, Data: []byte("q"), Create: true})
	}
	w.probeOpen = w.beginOps(w.clients[ci], ci, ops)
	if w.probeOpen == nil {
		w.failures = append(w.failures, fmt.Sprintf("tick %d: progress: client %d refused an uncontended transaction on %v in a quiet run", w.now, ci, keys))
		return
	}
	w.probeOpen.probe = true
	w.stats.Probes++
}

// samePlacement reports whether keys a and b have the same replicas.
func (w *world) samePlacement(a, b string) bool {
	return slices.Equal(slices.Sorted(slices.Values(w.placement[a])), slices.Sorted(slices.Values(w.placement[b])))
}

// beginOps begins a transaction of ops on client ci, and returns its
// record (nil if the client refused it).
func (w *world) beginOps(c *chain.Coordinator, ci int, ops []txn.Op) *txnRecord {
	var placed []ring.NodeID
	unavailable := ""
	inChains := w.inChains(ci)
	for _, op := range ops {
		placed = append(placed, w.placement[op.Key]...)
		if !slices.ContainsFunc(w.serving[op.Key], inChains) {
			unavailable = op.Key
		}
	}
	if unavailable != "" {
		w.trace("%s begin refused: no replica of %s in chains (%v left out)", c.ID(), unavailable, w.views[ci])
		return nil
	}
	slices.Sort(placed)
	placed = slices.Compact(placed)
	members := w.chainOrder(ops, slices.DeleteFunc(slices.Clone(placed), func(n ring.NodeID) bool { return !inChains(n) }))
	id, err := c.Begin(ops, members, w.keepGroups(ops, members))
	if err != nil {
		w.trace("%s begin refused: %v", c.ID(), err)
		return nil
	}
	w.stats.Begun++
	t := &txnRecord{id: id, begun: w.now, version: w.newVersion(ci), ops: ops, placed: placed, chain: members, final: members}
	for _, op := range ops {
		t.multiVM = t.multiVM || !w.samePlacement(op.Key, ops[0].Key)
	}
	if t.multiVM {
		w.stats.MultiVM++
	}
	w.txns[id] = t
	w.order = append(w.order, id)
	w.trace("%s begin %s version=%d chain=%v ops=%v", c.ID(), id, t.version, members, opsString(ops))
	return t
}

// chainOrder orders the members of a chain of ops as a node does
// (node.Chain), with chain.Order: every replica of a key is a version
// manager of it, so there are no holders; the nodes catching up, and
// those that only gain a key of ops in a ring change, are behind.
func (w *world) chainOrder(ops []txn.Op, members []ring.NodeID) []ring.NodeID {
	parts := make([]chain.Part, 0, len(members))
	for _, n := range members {
		p := chain.Part{ID: n, Behind: w.catchingUp(n)}
		for _, k := range txn.Keys(ops) {
			if w.owns(n, k) {
				p.Manages = append(p.Manages, k)
				p.Behind = p.Behind || w.gaining(n, k)
			}
		}
		parts = append(parts, p)
	}
	order, err := chain.Order(parts)
	if err != nil {
		panic(fmt.Sprintf("sim: a chain of version managers only has an order: %v", err))
	}
	return order
}

// isCounter reports whether key is one of the counters.
func (w *world) isCounter(key string) bool {
	return slices.Index(w.keys, key) < w.p.counters
}

func (w *world) randomOp(key string) txn.Op {
	if w.isCounter(key) {
		return w.counterOp(key)
	}
	data := make([]byte, 1+w.rng.IntN(6))
	for i := range data {
		data[i] = byte('a' + w.rng.IntN(26))
	}
	switch n := w.rng.IntN(100); {
	case n < 8:
		return w.atomicOp(key)
	case n < 35:
		return txn.Op{Key: key, Kind: txn.OpWrite, Offset: uint64(w.rng.IntN(12)), Data: data, Create: w.rng.IntN(4) != 0}
	case n < 60:
		return txn.Op{Key: key, Kind: txn.OpAppend, Data: data, Create: w.rng.IntN(4) != 0}
	case n < 72:
		return txn.Op{Key: key, Kind: txn.OpCreate}
	case n < 87:
		return txn.Op{Key: key, Kind: txn.OpTruncate, Size: uint64(w.rng.IntN(10))}
	default:
		return txn.Op{Key: key, Kind: txn.OpDelete}
	}
}

// counterOp is an op on a counter: mostly an atomic op, sometimes a write
// that creates it with 8 to 16 bytes, or overwrites them, and rarely a
// delete, so that the atomic ops also meet missing counters and commits
// that may not queue.
func (w *world) counterOp(key string) txn.Op {
	switch n := w.rng.IntN(100); {
	case n < 85:
		return w.atomicOp(key)
	case n < 97:
		data := make([]byte, 8+w.rng.IntN(9))
		for i := range data {
			data[i] = byte(w.rng.IntN(4))
		}
		return txn.Op{Key: key, Kind: txn.OpWrite, Data: data, Create: true}
	default:
		return txn.Op{Key: key, Kind: txn.OpDelete}
	}
}

// atomicOp is an atomic op of any function and width at a small offset,
// so that the ops on a counter overlap and their order shows in its bytes.
func (w *world) atomicOp(key string) txn.Op {
	widths := [...]int{1, 2, 4, 8}
	operand := w.rng.Uint64() >> w.rng.IntN(64)
	return txn.Op{Key: key, Kind: txn.OpAtomic, Offset: uint64(w.rng.IntN(9)), Width: widths[w.rng.IntN(len(widths))],
		Func: txn.FuncAdd + txn.AtomicFunc(w.rng.IntN(int(txn.FuncSet))), Operand: operand}
}

func opsString(ops []txn.Op) string {
	parts := make([]string, len(ops))
	for i, op := range ops {
		if op.Kind == txn.OpAtomic {
			parts[i] = fmt.Sprintf("%s(%s,%d,%s/%d,%#x)", op.Kind, op.Key, op.Offset, op.Func, op.Width, op.Operand)
			continue
		}
		parts[i] = fmt.Sprintf("%s(%s,%d,%d,%q,%t)", op.Kind, op.Key, op.Offset, op.Size, op.Data, op.Create)
	}
	return strings.Join(parts, " ")
}

func (w *world) deliver(m chain.Message, sent int, bases map[string]mvcc.Base) {
	if w.partitioned(m.From, m.To) {
		w.stats.Partitioned++
		w.traceMessage("cut", m)
		return
	}
	w.traceMessage("deliver", m)
	if m.Type == chain.MsgReply {
		c := w.client(m.To)
		if err := c.Step(m); err != nil {
			w.failures = append(w.failures, fmt.Sprintf("tick %d: %s refused %s: %v", w.now, m.To, m, err))
		}
		w.flushClient(c)
		return
	}
	if w.down[m.To] || (sent < w.restarted[m.To] && m.Fresh) {
		w.stats.Lost++
		w.traceMessage("lost", m)
		return
	}
	if m.Type == chain.MsgForward && !w.replicas[m.To].Knows(m.Txn) {
		w.noteForward(m.To, m, bases)
	}
	if err := w.replicas[m.To].Step(m); err != nil {
		if t := w.txns[m.Txn]; t != nil && t.reroutes > 0 &&
			(errors.Is(err, chain.ErrInvalidMessage) || errors.Is(err, chain.ErrReexecution)) {
			// A message of a chain a reroute replaced, which the replica
			// drops (see "Re-execution" in chain/replica.go).
			w.stats.OldChain++
			w.trace("%s dropped %s: %v", m.To, m, err)
		} else {
			w.failures = append(w.failures, fmt.Sprintf("tick %d: %s refused %s: %v", w.now, m.To, m, err))
		}
	}
	w.flushReplica(m.To)
}

func (w *world) client(id ring.NodeID) *chain.Coordinator {
	for _, c := range w.clients {
		if c.ID() == id {
			return c
		}
	}
	panic(fmt.Sprintf("sim: no client %q", id))
}

func (w *world) partitioned(a, b ring.NodeID) bool {
	return w.sides != nil && w.sides[a] != w.sides[b]
}

func (w *world) flushReplica(n ring.NodeID) {
	r := w.replicas[n]
	o := r.Ready()
	r.Advance(o)
	wrote := o.MustSync
	for _, f := range o.Finished {
		delete(w.forwards[n], f.Txn)
		switch {
		case errors.Is(f.CommitErr, chain.ErrStageLost):
			// Recorded before the Ack leaves, as node.recordMissed does.
			w.stores[n].putMissed(f.Txn)
			wrote = true
			w.stageLostAt(n, f.Txn)
			w.startCatchUp(n, fmt.Sprintf("missed the commit of %s", f.Txn), false)
		case f.CommitErr != nil:
			w.failures = append(w.failures, fmt.Sprintf("tick %d: %s failed to commit %s: %v", w.now, n, f.Txn, f.CommitErr))
		}
	}
	out := w.out(n)
	if wrote {
		out.Wrote()
	}
	sent := out.Put(o.Messages...)
	w.stats.Held += len(o.Messages) - len(sent)
	for _, m := range sent {
		w.send(m)
	}
	w.startSync(n)
}

// out is node n's outbox.
func (w *world) out(n ring.NodeID) *outbox.Outbox[chain.Message] {
	o := w.outs[n]
	if o == nil {
		o = &outbox.Outbox[chain.Message]{}
		w.outs[n] = o
	}
	return o
}

// startSync begins node n's sync if its commits wait for one and none is
// under way, as a node's loop does: it returns 1 to syncTicksMax ticks
// later, when the store syncs what it wrote until then.
func (w *world) startSync(n ring.NodeID) {
	upTo, ok := w.out(n).StartSync()
	if !ok {
		return
	}
	w.stats.Syncs++
	w.push(&event{at: w.now + 1 + w.syncRng.IntN(syncTicksMax), kind: eventSync, node: n, upTo: upTo, run: w.runs[n]})
}

// synced ends node n's sync: the store syncs, and the messages the
// outbox held go.
func (w *world) synced(n ring.NodeID, upTo uint64) {
	w.stores[n].sync()
	for _, m := range w.out(n).Synced(upTo) {
		w.send(m)
	}
	w.startSync(n)
}

// stageLostAt records that node n missed the commit of id: its copy of the
// keys id wrote is behind from now on.
func (w *world) stageLostAt(n ring.NodeID, id chain.TxnID) {
	w.stats.StagesLost++
	w.trace("%s missed the commit of %s", n, id)
	w.stageLost[id] = append(w.stageLost[id], n)
	t := w.txns[id]
	if t == nil {
		w.failures = append(w.failures, fmt.Sprintf("tick %d: %s reports missing %s, never begun", w.now, n, id))
		return
	}
	w.markBehind(n, t)
}

// markBehind marks node n's copies of the keys t wrote as behind.
func (w *world) markBehind(n ring.NodeID, t *txnRecord) {
	for _, op := range t.ops {
		if slices.Contains(w.placement[op.Key], n) {
			if w.behind[op.Key] == nil {
				w.behind[op.Key] = map[ring.NodeID]bool{}
			}
			w.behind[op.Key][n] = true
		}
	}
}

func (w *world) flushClient(c *chain.Coordinator) {
	o := c.Ready()
	c.Advance(o)
	for _, f := range o.Finished {
		t := w.txns[f.Txn]
		if t.finished {
			w.failures = append(w.failures, fmt.Sprintf("tick %d: %s reported twice", w.now, f.Txn))
		}
		t.finished, t.outcome = true, f
		if f.Committed {
			w.stats.Committed++
			if t.multiVM {
				w.stats.MultiVMCommitted++
			}
			if t.probe {
				w.stats.ProbesCommitted++
			}
		} else {
			w.stats.Aborted++
		}
		w.trace("%s finished %s committed=%t err=%q", c.ID(), f.Txn, f.Committed, f.Err)
	}
	for _, m := range o.Messages {
		if t := w.txns[m.Txn]; m.Type == chain.MsgForward && t != nil && !slices.Equal(m.Chain, t.final) {
			if t.reroutes == 0 {
				w.stats.Rerouted++
			}
			t.final = m.Chain
			t.reroutes++
			w.stats.Reroutes++
			w.trace("%s reroutes %s onto %v", c.ID(), m.Txn, m.Chain)
		}
		w.send(m)
	}
}

// send puts m on the network: lost with the profile's drop rate while the
// network is faulty or when the endpoints are partitioned, otherwise
// delivered after one to delayTicksMax ticks, sometimes twice.
func (w *world) send(m chain.Message) {
	w.stats.Sent++
	if w.partitioned(m.From, m.To) {
		w.stats.Partitioned++
		w.traceMessage("cut", m)
		return
	}
	if !w.healed && w.rng.IntN(100) < w.p.dropPct {
		w.stats.Dropped++
		w.traceMessage("drop", m)
		return
	}
	copies, delayMax := 1, w.p.delayTicksMax
	if w.probes > 0 {
		// The progress check's window is fault-free: every message
		// arrives once, a tick later (see probe).
		delayMax = 1
	} else if w.rng.IntN(100) < w.p.duplicatePct {
		copies = 2
		w.stats.Dups++
	}
	var bases map[string]mvcc.Base
	if f := w.forwards[m.From][m.Txn]; m.Type == chain.MsgForward && f != nil {
		bases = f.bases
	}
	for range copies {
		w.inFlight++
		w.push(&event{at: w.now + 1 + w.rng.IntN(delayMax), kind: eventDeliver, msg: m, sent: w.now, bases: bases})
	}
}

func (w *world) summary() string {
	p := w.p
	return fmt.Sprintf("seed=%d store=%s nodes=%d clients=%d keys=%d rf=%d drop=%d%% dup=%d%% delay<=%d retention=%d "+
		"pending<=%d txns<=%d partitions=%d crashes=%d "+
		"detect=%d suspicions=%d "+
		"| txns=%d committed=%d aborted=%d multi-vm=%d (committed %d) probes=%d (committed %d, keys excused %d) queued=%d (committed %d) waited=%d msgs=%d dropped=%d cut=%d dups=%d lost=%d stages-lost=%d "+
		"reroutes=%d rerouted=%d (committed %d) left-out=%d (staged %d, behind %d) old-chain=%d behind=%d/%d ticks=%d "+
		"| catch-up: passed=%d (committed %d) behind-refused=%d asks=%d unkept=%d ahead=%d unmanaged=%d orphaned=%d catch-ups=%d/%d refreshed=%d copies-lost=%d all-failed=%d",
		w.cfg.Seed, w.cfg.Store, p.nodes, p.clients, p.keys, p.replicationFactor, p.dropPct, p.duplicatePct, p.delayTicksMax,
		p.retentionTicks, p.pendingMax, p.txnsMax, w.stats.Partitions, w.stats.Crashes, w.det.detectTicks, len(w.det.suspicions),
		w.stats.Begun, w.stats.Committed, w.stats.Aborted,
		w.stats.MultiVM, w.stats.MultiVMCommitted, w.stats.Probes, w.stats.ProbesCommitted, w.stats.ProbeKeysExcused,
		w.stats.Queued, w.stats.QueuedCommitted, w.stats.Waited,
		w.stats.Sent, w.stats.Dropped, w.stats.Partitioned, w.stats.Dups, w.stats.Lost, w.stats.StagesLost,
		w.stats.Reroutes, w.stats.Rerouted, w.stats.RerouteCommitted, w.stats.LeftOut, w.stats.LeftStaged, w.stats.LeftBehind,
		w.stats.OldChain, w.stats.Behind, w.stats.Copies, w.now,
		w.stats.Passed, w.stats.PassedCommitted, w.stats.BehindRefused, w.stats.Asks, w.stats.Unkept, w.stats.Ahead, w.stats.Unmanaged, w.stats.Orphaned,
		w.stats.CatchUps, w.stats.CatchUpsBegun, w.stats.Refreshed, w.stats.CopiesLost, w.stats.AllFailed) + w.gcSummary() + w.ringSummary()
}

// gcSummary is the collector's part of the summary, on mvcc.
func (w *world) gcSummary() string {
	if w.cfg.Store != StoreMVCC {
		return ""
	}
	g := w.gc
	return fmt.Sprintf(" | gc: linger=%d retention=%d collect=%d%% readers=%d passes=%d collected=%d pins=%d old-reads=%d (served %d, gone %d)",
		g.lingerTicks, g.retentionTicks, g.collectPct, g.readers,
		w.stats.Collections, w.stats.Collected, w.stats.Pins, w.stats.OldReads, w.stats.OldServed, w.stats.OldGone)
}
