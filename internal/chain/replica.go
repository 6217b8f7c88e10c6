package chain

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/txn"
)

// This file is the chain-commit protocol as a per-node state machine, for
// chains whose members talk over a network that may lose, repeat, delay and
// reorder messages. Commit, in chain.go, is the same protocol run in one
// process, where none of that happens.
//
// # Protocol
//
// A coordinator sends Forward to the head (index 0). A member at index i
// that receives a Forward for a transaction it does not know prepares it
// through its Stager. If Prepare fails, the member decides abort and sends
// Backward{Committed: false} to member i-1 (Reply to the coordinator when i
// is 0). If Prepare succeeds and i is the tail, the member commits and sends
// Backward{Committed: true} upstream: the tail's commit is the commit point.
// Otherwise it sends Forward to member i+1 and waits. A waiting member that
// receives Backward adopts its outcome: it commits or aborts what it staged,
// passes the outcome upstream and acknowledges the Backward with an Ack.
//
// A member that has forwarded never decides on its own: the downstream
// members may already have committed, so an abort on timeout could commit
// the transaction on some members and abort it on others. Instead it
// retransmits the Forward every RetransmitTicks until a Backward arrives.
// In the same way a member that has decided retransmits its Backward (or
// Reply) until its upstream acknowledges it, and the coordinator retransmits
// its Forward until the head replies. A member that has decided answers a
// repeated Forward by repeating its outcome, so a lost message in either
// direction is repaired by the side that is waiting.
//
// # Retransmission backs off
//
// A retransmitted Forward carries the transaction's ops, data included. A
// link slower than RetransmitTicks for a commit of megabytes (a loaded
// machine, a slow network) would carry copies faster than it delivers
// them, and every copy delays the next commit: the chain would stall under
// its own retransmissions. So each message's retransmission interval
// doubles after every retransmission, from RetransmitTicks up to
// RetransmitTicks << RetransmitBackoffMax (see retransmitAfter), and a
// member still waiting for its downstream does not forward again on a
// repeated Forward: its own timer covers the members after it, and the
// repeat only tells it its upstream has no outcome yet, which it knows.
//
// # Forgetting
//
// A member must remember a decided transaction for as long as a Forward for
// it may still arrive: if it forgot, a late Forward would prepare the
// transaction again, and, say, commit a transaction the rest of the chain
// aborted, or apply an append twice. Its upstream stops sending Forward once
// it holds the outcome, and says so with the Ack; Forward copies it sent
// before that may still be in the network. So a member forgets a
// transaction OutcomeRetentionTicks after the Ack, and the transport must
// drop messages older than that (the simulator's network delays messages by
// less).
//
// # Invariants
//
// For each transaction, at each member:
//
//  1. The member calls Stager.Prepare at most once, and after a successful
//     Prepare exactly one of Commit or Abort, once.
//  2. The member decides at most once, and never changes its decision.
//  3. A member at index i < tail decides only on a Backward from member i+1,
//     or on a refusal of its own before it forwarded; it adopts the outcome
//     the Backward carries. So all members that decide, decide alike: the
//     outcome of the first member that refused, or commit if the tail
//     prepared.
//  4. A Backward reaches member i only from member i+1, only if member i
//     forwarded, and always carries the same outcome. An Ack reaches member
//     i only after member i sent its outcome upstream.
//  5. The local Commit is written before the Backward announcing it is
//     queued, and the Output holding that Backward says MustSync (see
//     Output): the edge sends it only once the commit is durable.
//  6. The member holds state for at most TxnsMax transactions, of which at
//     most PendingMax are staged.
//
// Breaking any of them is a bug, not an operating error. The replica keeps
// 1 and 6 by construction, and panics with an *AssertionError when it sees
// 2, 4 or 6 broken: a second decision, a Backward it cannot have caused or
// one that contradicts its decision, an early Ack, or its staged count out
// of bounds. Invariant 1 across a forgotten transaction, and 3 across the
// whole chain, need a view of every member: the simulator checks them.
//
// # Ordering
//
// The Stager may stage a transaction behind others staged earlier on the
// same keys instead of refusing it (for mvcc, commits that only apply
// atomic ops to a blob; see mvcc/order.go), so that it travels down the
// chain while they are undecided. Such a Staged is Ordered: once its
// transaction is committed here (the tail prepared it, or a commit Backward
// arrived), it may not be ready to apply. The member then holds it in the
// applying phase: the outcome is known, the Ack to the downstream member is
// sent, but nothing goes upstream until the local Commit is done
// (invariant 5). After every Step and Tick the replica applies, in the
// order they began to wait, those that became ready, which happens when
// the transactions ahead of them are committed or aborted here. The Stager
// orders each key's queue by a total order that every member shares (the
// commit version), so a transaction waits only for ones that never wait for
// it. A tail that waits has told nobody yet, so if its Commit then fails it
// still aborts.
//
// # Re-execution
//
// When members die, the coordinator sends the transaction again under the
// same TxnID down the chain of the members left (Coordinator.Reroute).
// Members that already handled it resume from their record instead of
// preparing again (see reroute); a member new to the transaction cannot
// appear, since the new chain only drops members. Messages of the old
// chain that arrive afterwards are dropped, so invariants 3 and 4 hold for
// the chain a member currently follows. A member removed while still
// alive (a false suspicion) may decide differently from the rest; it is
// then behind, like a member that was down, and must catch up before it
// serves reads.
//
// # Restarts
//
// A restart loses the replica's records, not the Stager's durable state.
// A restarted member may then be sent a Forward it handled in its earlier
// run: its upstream repeats it, or a coordinator reroutes it. Preparing it
// as new could break invariant 3 two ways: by refusing it when the earlier
// run forwarded it and the members after it committed, and by committing
// it when the earlier run aborted it and told its upstream so. So:
//
//   - the Stager records every commit's TxnID durably with the commit
//     (Staged.Commit), and a member that recorded the transaction answers
//     Committed, with the recorded results, and stages nothing;
//   - otherwise, a Forward that is not Fresh (the first its sender sent,
//     which the transport never delivers to two runs of a member) for a
//     transaction an earlier run may have seen (ReplicaConfig.EarlierRun)
//     is not staged. The tail refuses it (ErrRestarted): no record means
//     its earlier run did not commit it. Another member probes: it forwards
//     the transaction with Probe set, and a member that knows it answers as
//     to any repeat, while one that neither knows nor recorded it passes
//     the probe on, or at the tail refuses it (ErrNotStaged). The prober
//     adopts the outcome; a commit is reported with ErrStageLost, since its
//     copy misses it.
//
// A member forgets a transaction only after its upstream acknowledged the
// outcome; if that upstream restarted since, it probes rather than stages,
// so a forgotten abort is never run again. A member that receives a commit
// Backward for a transaction it neither knows nor recorded reports it with
// ErrStageLost too.
//
// A restart can also make a member the tail of a re-execution with nothing
// staged: the members after it were left out, and one of them may have
// committed the transaction as the tail of an earlier chain, on the stage
// this member's earlier run lost, and served reads of it. Refusing would
// undo a commit others may have seen, so such a tail asks the members that
// followed it on the chain the transaction began on (Message.Origin; see
// ask) and decides only once one answered committed or all answered
// aborted. A member asked about a transaction it has no outcome or commit
// record of refuses it from then on. The tail waits for every one of them,
// so a member left out that never comes back blocks the transaction, as a
// reroute that would keep no replica of a blob does.

//
// # Passing through
//
// A member whose copy is behind may stage a transaction without applying
// it (a Staged that is Passing); it catches up afterwards. Such a member
// never decides a commit, since the tail's commit is the only stage that is
// durable when the outcome is decided: as the tail it refuses (ErrBehind),
// and made the tail by a re-execution it asks the members left out after
// it, as a restarted tail does, keeping its stage until one answers
// committed or all answered aborted.
//
// # Admission
//
// A record table of TxnsMax entries is shared by every chain the member
// is on, and a member that forwarded holds its record until the member
// after it answers, which needs a record there. Were any Forward admitted
// while the table had room, members whose tables are full of transactions
// waiting on each other across chains in opposite orders (a probe, which
// may never be refused, waits like a stage) would drop each other's
// Forwards for good. So the nearer the tail, the more of the table a
// Forward may use: one d members before the tail is admitted only while
// fewer than TxnsMax − d records are held, and no chain is longer than
// TxnsMax (ChainMembersMax). Then at most TxnsMax − d records are ever at
// distance d or more from their tail (distances only shrink, in
// re-executions), so a table full for a Forward at distance d holds a
// record no farther than d from its tail, which stops waiting by
// induction on the distance (a tail decides at once), and the rest leave
// on their
// own: decided records on their Ack, which the waiting upstream sends,
// and retained ones after OutcomeRetentionTicks. Every Forward is thus
// admitted once the network delivers its retransmissions; only how long
// it waits depends on the load.

// retransmitAfter is the interval, in ticks, before the next retransmission
// of a message already retransmitted resent times: base, doubled with each
// retransmission up to base << RetransmitBackoffMax.
func retransmitAfter(base, resent int) int {
	return base << min(resent, RetransmitBackoffMax)
}

// RetransmitBackoffMax is how many times the retransmission interval
// doubles: the longest is RetransmitTicks << RetransmitBackoffMax.
const RetransmitBackoffMax = 3

// Defaults for ReplicaConfig and CoordinatorConfig fields left zero.
const (
	RetransmitTicksDefault       = 5
	OutcomeRetentionTicksDefault = 100
	PendingMaxDefault            = 1024
	TxnsMaxDefault               = 16 * PendingMaxDefault
	InflightMaxDefault           = 1024
)

// ReplicaConfig configures a Replica. Zero values take the defaults.
type ReplicaConfig struct {
	// ID is this node; messages addressed elsewhere are refused.
	ID ring.NodeID
	// Stager is the local storage. Required.
	Stager Stager
	// RetransmitTicks is how many ticks a member waits for an answer
	// before sending its Forward, Backward or Reply again the first time;
	// each later time it waits twice as long as before, up to
	// RetransmitTicks << RetransmitBackoffMax. Lower repairs lost messages
	// sooner and costs more repeated traffic. Default 5.
	RetransmitTicks int
	// OutcomeRetentionTicks is how long, in ticks, a member remembers a
	// transaction after its upstream acknowledged the outcome, to recognize
	// delayed duplicate Forwards. It must exceed the longest time a message
	// can spend in the network; longer costs memory (see TxnsMax). Default
	// 100.
	OutcomeRetentionTicks int
	// PendingMax bounds the transactions staged at once, each holding its
	// keys' locks. A Forward beyond it is refused at once with ErrBusy, and
	// the transaction aborts. Default 1024.
	PendingMax int
	// TxnsMax bounds the transactions the replica holds state for: staged,
	// decided and waiting for an Ack, or retained after it. It must exceed
	// PendingMax and be at least ChainMembersMax. A Forward for a new
	// transaction that finds the table full is dropped unanswered, as if
	// the network had lost it, because even a refusal needs a record to
	// answer duplicates consistently; the upstream retransmits it later.
	// The table counts as full for a Forward d members before the tail
	// once TxnsMax − d records are held (see "Admission"). Default 16 ×
	// PendingMax.
	TxnsMax int
	// ChainMembersMax bounds the chains this replica takes part in; a
	// Forward or Query with a longer chain is invalid. At most the
	// package's ChainMembersMax, which is the default.
	ChainMembersMax int
	// EarlierRun reports whether an earlier run of this member, before a
	// restart, may have received a Forward of transaction id; it is asked
	// for a Forward of an unknown transaction that is not Fresh. Nil means
	// there was no earlier run. See "Restarts".
	EarlierRun func(id TxnID) bool
	// TestingKnobs break the protocol on purpose. Leave them zero.
	TestingKnobs TestingKnobs
}

// TestingKnobs make a replica misbehave so tests can prove their checkers
// catch it. Production code leaves them zero.
type TestingKnobs struct {
	// AbortOnForwardTimeoutTicks, if positive, makes a member that has
	// forwarded and heard nothing for this many ticks abort on its own: the
	// bug the protocol rules out, since the downstream members may have
	// committed already.
	AbortOnForwardTimeoutTicks int
	// IgnoreEarlierRuns makes a restarted member take every Forward as
	// new, as if ReplicaConfig.EarlierRun were nil: the bug that lets it
	// abort what the members after it committed, or commit what an earlier
	// run of it aborted.
	IgnoreEarlierRuns bool
}

func (c *ReplicaConfig) validate() error {
	if c.ID == "" {
		return errors.New("chain: replica ID is empty")
	}
	if c.Stager == nil {
		return errors.New("chain: replica has no Stager")
	}
	for _, f := range []struct {
		name  string
		value *int
		def   int
	}{
		{"RetransmitTicks", &c.RetransmitTicks, RetransmitTicksDefault},
		{"OutcomeRetentionTicks", &c.OutcomeRetentionTicks, OutcomeRetentionTicksDefault},
		{"PendingMax", &c.PendingMax, PendingMaxDefault},
	} {
		if *f.value < 0 {
			return fmt.Errorf("chain: %s is %d, want positive or zero for the default", f.name, *f.value)
		}
		if *f.value == 0 {
			*f.value = f.def
		}
	}
	if c.TxnsMax < 0 {
		return fmt.Errorf("chain: TxnsMax is %d, want positive or zero for the default", c.TxnsMax)
	}
	if c.TxnsMax == 0 {
		c.TxnsMax = 16 * c.PendingMax
	}
	if c.TxnsMax <= c.PendingMax {
		return fmt.Errorf("chain: TxnsMax %d must exceed PendingMax %d", c.TxnsMax, c.PendingMax)
	}
	if c.ChainMembersMax < 0 || c.ChainMembersMax > ChainMembersMax {
		return fmt.Errorf("chain: ChainMembersMax is %d, want 1 to %d, or zero for the default", c.ChainMembersMax, ChainMembersMax)
	}
	if c.ChainMembersMax == 0 {
		c.ChainMembersMax = ChainMembersMax
	}
	if c.TxnsMax < c.ChainMembersMax {
		return fmt.Errorf("chain: TxnsMax %d must be at least ChainMembersMax %d", c.TxnsMax, c.ChainMembersMax)
	}
	if c.TestingKnobs.AbortOnForwardTimeoutTicks < 0 {
		return fmt.Errorf("chain: AbortOnForwardTimeoutTicks is %d, want zero or positive",
			c.TestingKnobs.AbortOnForwardTimeoutTicks)
	}
	return nil
}

// phase is where a transaction stands at one member. Zero is invalid.
type phase uint8

const (
	// phaseWaiting: staged and forwarded; waiting for a Backward.
	phaseWaiting phase = 1 + iota
	// phaseDecided: the outcome is known and was sent upstream; waiting for
	// the Ack.
	phaseDecided
	// phaseReleased: acknowledged; kept for OutcomeRetentionTicks against
	// delayed duplicate Forwards, then forgotten.
	phaseReleased
	// phaseApplying: committed, still staged, waiting for the Stager to
	// let it apply (see "Ordering"); nothing sent upstream yet.
	phaseApplying
)

var phaseNames = [...]string{"invalid", "waiting", "decided", "released", "applying"}

// record is one transaction at one member.
type record struct {
	chain []ring.NodeID
	index int
	phase phase
	// ops is kept while waiting, to retransmit the Forward; nil after.
	ops []txn.Op
	// staged is non-nil exactly while phase is phaseWaiting and the member
	// is not probing.
	staged Staged
	// forwarded is whether this member sent a Forward downstream; only then
	// may a Backward arrive.
	forwarded bool
	// committed, err and results are the outcome once decided.
	committed bool
	err       string
	results   []txn.Result
	// ticks counts ticks since the last (re)transmission while waiting or
	// decided; resent counts the retransmissions on ticks of the message
	// now owed (see retransmitAfter).
	ticks, resent int
	// waited counts ticks spent waiting, for TestingKnobs, and applying,
	// for Stalled.
	waited int
	// forcedAbort marks an abort made by TestingKnobs, whose later
	// contradiction by a Backward is the injected bug, not an assertion.
	forcedAbort bool
	// rerouted marks a transaction that may have run here on another chain
	// before: moved onto a re-execution's chain, or first known from a
	// repeated (not fresh) Forward, which may be a re-execution's reaching
	// a member that forgot the transaction or restarted since. Messages
	// from an older chain may still arrive, and are dropped.
	rerouted bool
	// probing marks a transaction forwarded without being staged here
	// (see probe); refusal is this member's own refusal, if it refused.
	probing bool
	refusal string
	// point marks a tail that prepared the transaction itself: the commit
	// point, which may still abort if its Commit fails.
	point bool
	// origin is the chain the transaction began on, once a re-execution's
	// Forward named it (Message.Origin); nil before.
	origin []ring.NodeID
	// releasedAt is the tick the record was last released at.
	releasedAt int
	// asking lists the members after this one in origin whose outcome
	// this member, a tail with nothing staged, still waits for before it
	// decides (see ask); nil when it is not asking.
	asking []ring.NodeID
}

func (r *record) String() string {
	s := fmt.Sprintf("index=%d of %v phase=%s forwarded=%t probing=%t committed=%t err=%q",
		r.index, r.chain, phaseNames[r.phase], r.forwarded, r.probing, r.committed, r.err)
	if r.asking != nil {
		s += fmt.Sprintf(" asking=%v", r.asking)
	}
	return s
}

func (r *record) isTail() bool { return r.index == len(r.chain)-1 }

// Replica is one node's part in every chain it belongs to. It is not safe
// for concurrent use: one goroutine calls Step, Tick, Ready and Advance.
type Replica struct {
	cfg  ReplicaConfig
	txns map[TxnID]*record
	// staged counts records holding a Staged (waiting or applying); it
	// never exceeds PendingMax.
	staged int
	// applying lists the transactions in phaseApplying, in the order they
	// entered it.
	applying []TxnID
	// active holds the transactions Tick visits: every record not yet
	// released, and some released since (Tick drops those). Released
	// records, the bulk of a busy member's, wait in released instead,
	// oldest first, to be forgotten, so a Tick costs what is in flight, not
	// what is retained.
	active   map[TxnID]struct{}
	released []releasedAt
	now      int
	out      Output
	tickIDs  []TxnID
	counters ReplicaCounters
}

// releasedAt is a transaction released at tick at.
type releasedAt struct {
	id TxnID
	at int
}

// ReplicaCounters count events worth watching in production.
type ReplicaCounters struct {
	// Refused counts Forwards refused with ErrBusy.
	Refused uint64
	// Dropped counts new Forwards dropped because TxnsMax records were
	// held.
	Dropped uint64
	// Retransmits counts Forwards, Backwards and Replies sent again on
	// timeout.
	Retransmits uint64
	// Probes counts transactions forwarded as a Probe (see "Restarts").
	Probes uint64
	// Asks counts transactions this member, a re-execution's tail with
	// nothing staged or a stage that passes the transaction through,
	// asked the members left out after it about (see "Restarts").
	Asks uint64
	// Behind counts transactions this member refused as the tail because
	// its Staged passed them through (ErrBehind).
	Behind uint64
}

// NewReplica returns a replica that holds no transactions, or an error
// naming the first bad field of cfg.
func NewReplica(cfg ReplicaConfig) (*Replica, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Replica{cfg: cfg, txns: make(map[TxnID]*record), active: make(map[TxnID]struct{})}, nil
}

// ID is the node this replica runs on.
func (r *Replica) ID() ring.NodeID { return r.cfg.ID }

// Tracked is how many transactions the replica holds state for; it falls to
// zero once every transaction has been decided, acknowledged and retained
// for OutcomeRetentionTicks.
func (r *Replica) Tracked() int { return len(r.txns) }

// Staged is how many transactions are staged and waiting for a Backward.
func (r *Replica) Staged() int { return r.staged }

// StagedTxns returns, in order, the transactions that hold a Staged here:
// staged and waiting for their outcome, or committed and waiting to apply.
func (r *Replica) StagedTxns() []TxnID {
	var ids []TxnID
	for id := range r.active {
		if rec, ok := r.txns[id]; ok && rec.staged != nil {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, TxnID.Compare)
	return ids
}

// HoldsStage reports whether transaction id holds a Staged here.
func (r *Replica) HoldsStage(id TxnID) bool {
	rec, ok := r.txns[id]
	return ok && rec.staged != nil
}

// Knows reports whether the replica holds a record of transaction id.
func (r *Replica) Knows(id TxnID) bool {
	_, ok := r.txns[id]
	return ok
}

// Counters returns the replica's event counts.
func (r *Replica) Counters() ReplicaCounters { return r.counters }

// Step handles one message from the network. An error means the message
// was malformed, misaddressed or unsupported (ErrInvalidMessage,
// ErrReexecution) and was dropped with the state unchanged. Step panics with
// an *AssertionError if the message proves the protocol broken.
func (r *Replica) Step(m Message) error {
	if m.To != r.cfg.ID {
		return fmt.Errorf("%w: %s addressed to %q, this is %q", ErrInvalidMessage, m.Type, m.To, r.cfg.ID)
	}
	if m.Txn.Coordinator == "" {
		return fmt.Errorf("%w: %s has no coordinator in its transaction ID", ErrInvalidMessage, m.Type)
	}
	if m.Index < 0 || m.Index >= ChainMembersMax {
		return fmt.Errorf("%w: %s index %d", ErrInvalidMessage, m.Type, m.Index)
	}
	var err error
	switch m.Type {
	case MsgForward:
		err = r.stepForward(m)
	case MsgBackward:
		err = r.stepBackward(m)
	case MsgAck:
		err = r.stepAck(m)
	case MsgQuery:
		err = r.stepQuery(m)
	case MsgAnswer:
		err = r.stepAnswer(m)
	default:
		return fmt.Errorf("%w: a replica does not take %s", ErrInvalidMessage, m.Type)
	}
	r.applyReady()
	r.assertBounds(m.Txn)
	return err
}

// assertBounds checks invariant 6.
func (r *Replica) assertBounds(id TxnID) {
	if r.staged < 0 || r.staged > r.cfg.PendingMax || len(r.txns) > r.cfg.TxnsMax {
		r.fail(id, nil, fmt.Sprintf("%d staged and %d tracked, bounds %d and %d",
			r.staged, len(r.txns), r.cfg.PendingMax, r.cfg.TxnsMax), nil)
	}
}

func (r *Replica) stepForward(m Message) error {
	if err := r.validateChain(m.Chain); err != nil {
		return err
	}
	if m.Index >= len(m.Chain) || m.Chain[m.Index] != r.cfg.ID {
		return fmt.Errorf("%w: Forward for index %d of %v at %q", ErrInvalidMessage, m.Index, m.Chain, r.cfg.ID)
	}
	if m.From != upstreamOf(m.Txn, m.Chain, m.Index) {
		return fmt.Errorf("%w: Forward for index %d from %q, want %q",
			ErrInvalidMessage, m.Index, m.From, upstreamOf(m.Txn, m.Chain, m.Index))
	}
	if m.Origin != nil {
		if err := r.validateChain(m.Origin); err != nil {
			return err
		}
		if !isSubsequence(m.Chain, m.Origin) {
			return fmt.Errorf("%w: Forward's chain %v is not its origin %v with members removed", ErrInvalidMessage, m.Chain, m.Origin)
		}
	}
	if rec, ok := r.txns[m.Txn]; ok {
		if rec.origin == nil {
			rec.origin = m.Origin
		}
		if rec.index != m.Index || !slices.Equal(rec.chain, m.Chain) {
			return r.reroute(m, rec)
		}
		if rec.phase == phaseWaiting && rec.asking == nil {
			// A repeat from an upstream still waiting, as this member
			// is: it forwards again on its own ticks (see "Retransmission
			// backs off").
			return nil
		}
		// A duplicate: repeat what we last sent, which is what the sender
		// is missing.
		r.resend(m.Txn, rec)
		return nil
	}
	if len(r.txns) >= r.cfg.TxnsMax-(len(m.Chain)-1-m.Index) {
		r.counters.Dropped++ // See "Admission".
		return nil
	}
	results, committed, err := r.cfg.Stager.Committed(m.Txn)
	if err != nil {
		return err
	}
	rec := &record{chain: m.Chain, index: m.Index, rerouted: !m.Fresh, origin: m.Origin}
	r.track(m.Txn, rec)
	if committed {
		// An earlier run of this member committed it and lost its record
		// in a restart; its upstream still waits for the outcome.
		r.decide(m.Txn, rec, true, "", results, nil)
		return nil
	}
	earlier := !m.Fresh && r.cfg.EarlierRun != nil && r.cfg.EarlierRun(m.Txn) && !r.cfg.TestingKnobs.IgnoreEarlierRuns
	if m.Probe || earlier {
		// Staged nowhere before this member, or perhaps handled by an
		// earlier run of it, which staging it anew could contradict.
		errText := ""
		if earlier {
			errText = ErrRestarted.Error()
		}
		switch {
		case rec.isTail() && earlier && r.ask(m.Txn, rec, errText):
		case rec.isTail():
			r.decide(m.Txn, rec, false, cmp.Or(errText, ErrNotStaged.Error()), nil, nil)
		default:
			r.probe(m.Txn, rec, m.Ops, errText)
		}
		return nil
	}
	if r.staged >= r.cfg.PendingMax {
		r.counters.Refused++
		r.decide(m.Txn, rec, false, ErrBusy.Error(), nil, nil)
		return nil
	}
	staged, err := r.prepare(m.Txn, m.Ops)
	if err != nil {
		r.decide(m.Txn, rec, false, err.Error(), nil, nil)
		return nil
	}
	if rec.isTail() && PassesThrough(staged) && !brokenPassThrough {
		// The commit point must apply the commit (see Passing).
		staged.Abort()
		r.counters.Behind++
		r.decide(m.Txn, rec, false, ErrBehind.Error(), nil, nil)
		return nil
	}
	if rec.isTail() {
		// The commit point.
		rec.staged, rec.point = staged, true
		r.staged++
		r.apply(m.Txn, rec, nil)
		return nil
	}
	rec.phase = phaseWaiting
	rec.ops = m.Ops
	rec.staged = staged
	rec.forwarded = true
	r.staged++
	fwd := r.forwardMessage(m.Txn, rec)
	fwd.Fresh = m.Fresh
	r.send(fwd)
	return nil
}

// validateChain checks a chain as validateChain does, and against this
// replica's ChainMembersMax, on which its admission rule relies.
func (r *Replica) validateChain(members []ring.NodeID) error {
	if err := validateChain(members); err != nil {
		return err
	}
	if len(members) > r.cfg.ChainMembersMax {
		return fmt.Errorf("%w: chain of %d members, this replica takes at most %d",
			ErrInvalidMessage, len(members), r.cfg.ChainMembersMax)
	}
	return nil
}

// probe forwards a transaction this member does not stage, because an
// earlier run of it may have handled it (errText is then ErrRestarted's)
// or because it was probed itself, and waits for the outcome the members
// after it reached.
func (r *Replica) probe(id TxnID, rec *record, ops []txn.Op, errText string) {
	rec.phase = phaseWaiting
	rec.ops = ops
	rec.forwarded = true
	rec.probing = true
	rec.refusal = errText
	r.counters.Probes++
	r.send(r.forwardMessage(id, rec))
}

// ask makes a tail with nothing staged, because an earlier run of it may
// have handled the transaction, wait for the outcome of the members that
// followed it on the chain the transaction began on, before it decides. A
// re-execution left them all out (it is the tail now), and one of them may
// have committed the transaction as the tail of an earlier chain, which the
// stage this member lost in its restart would have led to. ask reports
// false, and does nothing, when no member followed it.
//
// The member commits if one of them answers committed (its copy misses the
// commit: ErrStageLost), and aborts with refusal once all of them answered
// aborted: a member without an outcome or a commit record answers so and
// refuses the transaction from then on (ErrQueried), and one that waits for
// its own downstream answers Undecided and is asked again. Asking waits for
// every one of them, the dead included, as Reroute waits for a blob's
// replicas.
//
// A member whose stage passes the transaction through (see Passing) asks
// the same way when a re-execution makes it the tail; it keeps that stage,
// committing it on a committed answer and aborting it once all answered
// aborted.
func (r *Replica) ask(id TxnID, rec *record, refusal string) bool {
	pos := slices.Index(rec.origin, r.cfg.ID)
	if pos < 0 || pos == len(rec.origin)-1 {
		return false
	}
	rec.phase = phaseWaiting
	rec.probing = rec.staged == nil
	rec.refusal = refusal
	rec.asking = slices.Clone(rec.origin[pos+1:])
	r.counters.Asks++
	r.resend(id, rec)
	return true
}

// stepQuery answers a tail that asks for this member's outcome (see ask).
func (r *Replica) stepQuery(m Message) error {
	if err := r.validateChain(m.Chain); err != nil {
		return err
	}
	if m.Index >= len(m.Chain) || m.Chain[m.Index] != r.cfg.ID || !slices.Contains(m.Chain[:m.Index], m.From) {
		return fmt.Errorf("%w: Query from %q for index %d of %v at %q", ErrInvalidMessage, m.From, m.Index, m.Chain, r.cfg.ID)
	}
	answer := Message{Type: MsgAnswer, From: r.cfg.ID, To: m.From, Txn: m.Txn}
	if rec, ok := r.txns[m.Txn]; ok {
		if rec.phase == phaseDecided || rec.phase == phaseReleased {
			answer.Committed, answer.Err, answer.Results = rec.committed, rec.err, rec.results
		} else {
			answer.Undecided = true
		}
		r.send(answer)
		return nil
	}
	results, committed, err := r.cfg.Stager.Committed(m.Txn)
	if err != nil {
		return err
	}
	if committed {
		answer.Committed, answer.Results = true, results
		r.send(answer)
		return nil
	}
	if len(r.txns) >= r.cfg.TxnsMax {
		r.counters.Dropped++
		return nil // As if lost: the tail asks again.
	}
	// Never staged here, or staged by an earlier run that did not commit
	// it. The record refuses any Forward of it that arrives later, as a
	// decided abort; past its retention, such a Forward is too old to
	// stage (ReplicaConfig.EarlierRun).
	rec := &record{chain: m.Chain, index: m.Index, err: ErrQueried.Error(), rerouted: true}
	r.txns[m.Txn] = rec
	r.release(m.Txn, rec)
	answer.Err = ErrQueried.Error()
	r.send(answer)
	return nil
}

// stepAnswer takes a member's answer to this member's question (see ask).
func (r *Replica) stepAnswer(m Message) error {
	rec, ok := r.txns[m.Txn]
	if !ok || rec.asking == nil || !slices.Contains(rec.asking, m.From) || m.Undecided {
		return nil // Late, repeated, or no outcome yet: asked again on the next retransmission.
	}
	switch {
	case m.Committed && rec.staged != nil:
		// A passed-through stage: committing it records the commit and
		// starts this member's catch-up.
		rec.asking = nil
		r.apply(m.Txn, rec, m.Results)
		return nil
	case m.Committed:
		r.decide(m.Txn, rec, true, "", m.Results, ErrStageLost)
		return nil
	}
	rec.asking = slices.DeleteFunc(rec.asking, func(id ring.NodeID) bool { return id == m.From })
	if len(rec.asking) == 0 {
		if rec.staged != nil {
			rec.staged.Abort()
			rec.staged = nil
			r.staged--
		}
		r.decide(m.Txn, rec, false, rec.refusal, nil, nil)
	}
	return nil
}

// reroute takes a known transaction onto the chain of a re-execution: the
// chain it knows with failed members removed (see Coordinator.Reroute).
// A waiting member that is now the tail commits, since every member after
// it is gone and no live member has decided yet; a waiting member with a
// new downstream forwards to it; a member that has decided sends its
// outcome to its new upstream and waits for that one's Ack. Only removals
// are accepted: a chain with a member the known one lacks, or in another
// order, is refused with ErrReexecution, and so is an older chain arriving
// after a newer one.
func (r *Replica) reroute(m Message, rec *record) error {
	if isSubsequence(rec.chain, m.Chain) && rec.phase == phaseApplying {
		return nil // Answered on a repeat, once applied here.
	}
	if isSubsequence(rec.chain, m.Chain) && rec.phase != phaseWaiting {
		// From a member the re-execution left out that still waits on the
		// older chain: tell it the outcome, which it adopts like any
		// Backward, so it releases what it staged.
		out := Message{Type: MsgBackward, From: r.cfg.ID, To: m.From, Txn: m.Txn, Index: m.Index - 1,
			Committed: rec.committed, Err: rec.err, Results: rec.results}
		if m.Index == 0 {
			out.Type, out.Index = MsgReply, 0
		}
		r.send(out)
		return nil
	}
	if !isSubsequence(m.Chain, rec.chain) {
		return fmt.Errorf("%w: %s known at index %d of %v, Forward names index %d of %v",
			ErrReexecution, m.Txn, rec.index, rec.chain, m.Index, m.Chain)
	}
	if rec.origin == nil {
		rec.origin = rec.chain
	}
	rec.chain, rec.index, rec.rerouted = m.Chain, m.Index, true
	rec.resent = 0 // a new neighbour: what it may miss is not known
	switch rec.phase {
	case phaseWaiting:
		if rec.asking != nil {
			return nil // Asking already; it asks again on its ticks.
		}
		if rec.isTail() && rec.probing {
			// Nothing staged here to commit; the members after it are gone.
			// If an earlier run of this member may have staged it, one of
			// them may have committed it: ask them first.
			if !(rec.refusal == ErrRestarted.Error() && r.ask(m.Txn, rec, rec.refusal)) {
				r.decide(m.Txn, rec, false, cmp.Or(rec.refusal, ErrNotStaged.Error()), nil, nil)
			}
			return nil
		}
		if rec.isTail() && Orphaned(rec.staged) {
			// A blob moved away from every member meanwhile: committing
			// would change it nowhere reads see. The members after it on
			// the origin chain may have committed, so ask them.
			if !r.ask(m.Txn, rec, ErrOrphaned.Error()) {
				r.fail(m.Txn, rec, "a waiting member made the tail follows nobody on its origin chain", &m)
			}
			return nil
		}
		if rec.isTail() && PassesThrough(rec.staged) && !brokenPassThrough {
			// This stage applies nothing here, so this member may not
			// decide a commit (see Passing): the members after it on the
			// chain the transaction began on may have, so ask them.
			if !r.ask(m.Txn, rec, ErrBehind.Error()) {
				r.fail(m.Txn, rec, "a waiting member made the tail follows nobody on its origin chain", &m)
			}
			return nil
		}
		if rec.isTail() {
			r.apply(m.Txn, rec, nil)
			return nil
		}
	case phaseReleased:
		rec.phase = phaseDecided
		r.active[m.Txn] = struct{}{}
	}
	r.resend(m.Txn, rec)
	return nil
}

// isSubsequence reports whether sub is seq with zero or more members
// removed.
func isSubsequence(sub, seq []ring.NodeID) bool {
	i := 0
	for _, id := range seq {
		if i < len(sub) && sub[i] == id {
			i++
		}
	}
	return i == len(sub)
}

func (r *Replica) prepare(id TxnID, ops []txn.Op) (Staged, error) {
	if err := txn.Validate(ops); err != nil {
		return nil, err
	}
	staged, err := r.cfg.Stager.Prepare(id, ops)
	if err == nil && staged == nil {
		r.fail(id, nil, "Stager.Prepare returned neither a Staged nor an error", nil)
	}
	return staged, err
}

func (r *Replica) stepBackward(m Message) error {
	rec, ok := r.txns[m.Txn]
	if !ok {
		// We only forget a transaction after our upstream acknowledged our
		// outcome, and we only had an outcome after the Backward from this
		// sender; so this is a repeat whose Ack was lost, or an earlier
		// run of this member forwarded it before a restart. Acknowledge
		// again; a commit not recorded here is one this copy misses.
		if m.Committed {
			if _, recorded, err := r.cfg.Stager.Committed(m.Txn); err != nil {
				return err
			} else if !recorded {
				r.out.Finished = append(r.out.Finished, Outcome{Txn: m.Txn, Committed: true, CommitErr: ErrStageLost})
			}
		}
		r.send(Message{Type: MsgAck, From: r.cfg.ID, To: m.From, Txn: m.Txn, Index: m.Index + 1})
		return nil
	}
	if rec.rerouted && (rec.isTail() || m.From != rec.chain[rec.index+1] || m.Index != rec.index) {
		// From a member, or a position, of the chain before the reroute.
		return fmt.Errorf("%w: Backward for %s from %q for index %d does not fit the rerouted chain %v at index %d",
			ErrInvalidMessage, m.Txn, m.From, m.Index, rec.chain, rec.index)
	}
	if !rec.forwarded && !rec.isTail() && m.From == rec.chain[rec.index+1] && m.Index == rec.index {
		// An earlier run of this member forwarded the transaction before a
		// restart lost its state; this run answered from its record or
		// refused. Acknowledge, so the sender stops repeating, and report
		// a commit this copy does not hold as one it misses.
		r.send(Message{Type: MsgAck, From: r.cfg.ID, To: m.From, Txn: m.Txn, Index: rec.index + 1})
		if m.Committed && !rec.committed {
			r.out.Finished = append(r.out.Finished, Outcome{Txn: m.Txn, Committed: true, CommitErr: ErrStageLost})
		}
		return nil
	}
	if !rec.forwarded || rec.isTail() {
		r.fail(m.Txn, rec, "Backward to a member that never forwarded", &m)
	}
	if m.From != rec.chain[rec.index+1] {
		return fmt.Errorf("%w: Backward for %s from %q, want %q", ErrInvalidMessage, m.Txn, m.From, rec.chain[rec.index+1])
	}
	if m.Index != rec.index {
		r.fail(m.Txn, rec, "Backward for an index this member never forwarded to", &m)
	}
	ack := Message{Type: MsgAck, From: r.cfg.ID, To: m.From, Txn: m.Txn, Index: rec.index + 1}
	if rec.phase != phaseWaiting {
		if rec.committed != m.Committed && !rec.forcedAbort {
			r.fail(m.Txn, rec, "Backward contradicts the outcome already decided", &m)
		}
		r.send(ack)
		return nil
	}
	if rec.probing {
		// Nothing staged here. A commit is one this copy misses; an abort
		// is this member's own refusal, if it refused.
		if m.Committed {
			r.decide(m.Txn, rec, true, "", m.Results, ErrStageLost)
		} else {
			r.decide(m.Txn, rec, false, cmp.Or(rec.refusal, m.Err), nil, nil)
		}
		r.send(ack)
		return nil
	}
	if !m.Committed {
		rec.staged.Abort()
		rec.staged = nil
		r.staged--
		r.decide(m.Txn, rec, false, m.Err, nil, nil)
		r.send(ack)
		return nil
	}
	// The tail committed, so the transaction is committed whatever happens
	// here: a local storage failure is reported to the caller for repair,
	// and the commit still travels upstream.
	r.apply(m.Txn, rec, m.Results)
	r.send(ack)
	return nil
}

// apply commits what the member staged for a committed transaction, and
// decides, once the Stager lets it; until then the transaction waits in
// phaseApplying (see "Ordering"). downstream are the results of the member
// after this one (nil at the tail).
func (r *Replica) apply(id TxnID, rec *record, downstream []txn.Result) {
	if o, ok := find[Ordered](rec.staged); ok && !o.Ready() {
		if rec.phase != phaseApplying {
			rec.phase = phaseApplying
			rec.committed = true
			rec.results = downstream
			rec.ops = nil
			r.applying = append(r.applying, id)
		}
		return
	}
	staged := rec.staged
	rec.staged = nil
	r.staged--
	results := txn.MergeResults(staged.Results(), downstream)
	commitErr := staged.Commit(results)
	r.out.MustSync = true
	results = txn.MergeResults(staged.Results(), results)
	if rec.point && commitErr != nil {
		// A tail whose storage fails to commit has made nothing durable
		// and told nobody, so it may still abort.
		r.decide(id, rec, false, fmt.Sprintf("chain tail %s: %v", r.cfg.ID, commitErr), nil, nil)
		return
	}
	r.decide(id, rec, true, "", results, commitErr)
}

// applyReady applies the waiting transactions that became ready, until
// none does.
func (r *Replica) applyReady() {
	for progress := true; progress && len(r.applying) > 0; {
		progress = false
		waiting := r.applying[:0]
		for _, id := range r.applying {
			rec := r.txns[id]
			if o, _ := find[Ordered](rec.staged); o.Ready() {
				r.apply(id, rec, rec.results)
				progress = true
			} else {
				waiting = append(waiting, id)
			}
		}
		clear(r.applying[len(waiting):])
		r.applying = waiting
	}
}

func (r *Replica) stepAck(m Message) error {
	rec, ok := r.txns[m.Txn]
	if !ok {
		return nil // A repeat after we forgot; nothing is owed.
	}
	if m.From != upstreamOf(m.Txn, rec.chain, rec.index) {
		return fmt.Errorf("%w: Ack for %s from %q, want %q",
			ErrInvalidMessage, m.Txn, m.From, upstreamOf(m.Txn, rec.chain, rec.index))
	}
	if m.Index != rec.index && rec.rerouted {
		return fmt.Errorf("%w: Ack for %s for index %d, rerouted to index %d", ErrInvalidMessage, m.Txn, m.Index, rec.index)
	}
	if m.Index != rec.index {
		r.fail(m.Txn, rec, "Ack for another index", &m)
	}
	switch rec.phase {
	case phaseWaiting:
		if rec.probing {
			// For the outcome an earlier run of this member sent before a
			// restart; the probe brings the same one.
			return nil
		}
		r.fail(m.Txn, rec, "Ack before this member sent an outcome", &m)
	case phaseApplying:
		r.fail(m.Txn, rec, "Ack before this member sent an outcome", &m)
	case phaseDecided:
		r.release(m.Txn, rec)
	}
	return nil
}

// Tick advances the replica's logical clock by one tick: it retransmits what
// is unanswered and forgets what has been retained long enough.
func (r *Replica) Tick() {
	r.applyReady()
	r.now++
	for len(r.released) > 0 && r.now-r.released[0].at >= r.cfg.OutcomeRetentionTicks {
		e := r.released[0]
		r.released[0] = releasedAt{}
		r.released = r.released[1:]
		if rec, ok := r.txns[e.id]; ok && rec.phase == phaseReleased && rec.releasedAt == e.at {
			delete(r.txns, e.id)
		}
	}
	ids := r.tickIDs[:0]
	for id := range r.active {
		if rec, ok := r.txns[id]; !ok || rec.phase == phaseReleased {
			delete(r.active, id)
			continue
		}
		ids = append(ids, id)
	}
	slices.SortFunc(ids, TxnID.Compare)
	for _, id := range ids {
		rec := r.txns[id]
		rec.ticks++
		switch rec.phase {
		case phaseWaiting:
			rec.waited++
			if k := r.cfg.TestingKnobs.AbortOnForwardTimeoutTicks; k > 0 && rec.waited >= k {
				r.forceAbort(id, rec)
				continue
			}
			if rec.ticks >= retransmitAfter(r.cfg.RetransmitTicks, rec.resent) {
				r.counters.Retransmits++
				rec.resent++
				r.resend(id, rec)
			}
		case phaseApplying:
			rec.waited++
		case phaseDecided:
			if rec.ticks >= retransmitAfter(r.cfg.RetransmitTicks, rec.resent) {
				r.counters.Retransmits++
				rec.resent++
				r.resend(id, rec)
			}
		}
	}
	clear(ids)
	r.tickIDs = ids[:0]
	r.assertBounds(TxnID{})
}

// track starts holding state for a new transaction.
func (r *Replica) track(id TxnID, rec *record) {
	r.txns[id] = rec
	r.active[id] = struct{}{}
}

// release marks a transaction's outcome acknowledged (or, for a record
// made to answer a Query, never owed): it is kept OutcomeRetentionTicks
// against delayed duplicates, then forgotten.
func (r *Replica) release(id TxnID, rec *record) {
	rec.phase = phaseReleased
	rec.releasedAt = r.now
	r.released = append(r.released, releasedAt{id, r.now})
}

// forceAbort is the injected bug of TestingKnobs.AbortOnForwardTimeoutTicks.
func (r *Replica) forceAbort(id TxnID, rec *record) {
	if rec.staged != nil {
		rec.staged.Abort()
		rec.staged = nil
		r.staged--
	}
	rec.forcedAbort = true
	r.decide(id, rec, false, "timed out waiting for the downstream member", nil, nil)
}

// decide records the outcome, reports it, and sends it upstream. The caller
// has already committed or aborted anything staged.
func (r *Replica) decide(id TxnID, rec *record, committed bool, errText string, results []txn.Result, commitErr error) {
	if rec.phase == phaseDecided || rec.phase == phaseReleased {
		r.fail(id, rec, "second decision", nil)
	}
	if rec.staged != nil {
		r.fail(id, rec, "decision with a transaction still staged", nil)
	}
	rec.phase = phaseDecided
	rec.ops = nil
	rec.asking = nil
	rec.committed = committed
	rec.err = errText
	rec.results = results
	rec.ticks, rec.resent = 0, 0
	r.out.Finished = append(r.out.Finished, Outcome{
		Txn: id, Committed: committed, Err: errText, Results: results, CommitErr: commitErr,
	})
	r.send(r.upstreamMessage(id, rec))
}

// resend repeats what this member last sent for the transaction and
// restarts its retransmission timer.
func (r *Replica) resend(id TxnID, rec *record) {
	if rec.phase == phaseApplying {
		return // Nothing may go upstream before the local commit.
	}
	switch {
	case rec.phase == phaseWaiting && rec.asking != nil:
		for _, n := range rec.asking {
			r.send(Message{Type: MsgQuery, From: r.cfg.ID, To: n, Txn: id, Index: slices.Index(rec.origin, n), Chain: rec.origin})
		}
	case rec.phase == phaseWaiting:
		r.send(r.forwardMessage(id, rec))
	default:
		r.send(r.upstreamMessage(id, rec))
	}
	if rec.phase != phaseReleased {
		rec.ticks = 0
	}
}

func (r *Replica) forwardMessage(id TxnID, rec *record) Message {
	return Message{
		Type: MsgForward, From: r.cfg.ID, To: rec.chain[rec.index+1], Txn: id,
		Index: rec.index + 1, Chain: rec.chain, Ops: rec.ops, Probe: rec.probing, Origin: rec.origin,
	}
}

// upstreamMessage is the outcome for the member before this one, or for the
// coordinator at the head.
func (r *Replica) upstreamMessage(id TxnID, rec *record) Message {
	m := Message{
		Type: MsgBackward, From: r.cfg.ID, To: upstreamOf(id, rec.chain, rec.index), Txn: id,
		Index: rec.index - 1, Committed: rec.committed, Err: rec.err, Results: rec.results,
	}
	if rec.index == 0 {
		m.Type, m.Index = MsgReply, 0
	}
	return m
}

// upstreamOf is who sends Forward to, and receives outcomes from, the member
// at index.
func upstreamOf(id TxnID, chain []ring.NodeID, index int) ring.NodeID {
	if index == 0 {
		return id.Coordinator
	}
	return chain[index-1]
}

func (r *Replica) send(m Message) { r.out.Messages = append(r.out.Messages, m) }

// fail panics with the context of a broken invariant.
func (r *Replica) fail(id TxnID, rec *record, invariant string, m *Message) {
	e := &AssertionError{Node: r.cfg.ID, Txn: id, Invariant: invariant, State: "unknown transaction"}
	if rec != nil {
		e.State = rec.String()
	}
	if m != nil {
		e.Message = m.String()
	}
	panic(e)
}

// Stalled describes the transactions that have been waiting for their
// outcome, or waiting to apply, for ticks ticks or more, for the logs: a
// commit stays there only while a member downstream does not answer or
// commits queued before it stay undecided.
func (r *Replica) Stalled(ticks int) []string {
	var out []string
	for id, rec := range r.txns {
		if (rec.phase != phaseWaiting && rec.phase != phaseApplying) || rec.waited < ticks {
			continue
		}
		s := fmt.Sprintf("%s %v waited %d ticks", id, rec, rec.waited)
		if w, ok := find[interface{ Waits() string }](rec.staged); ok {
			s += "; " + w.Waits()
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// HasReady reports whether Ready has anything to hand out.
func (r *Replica) HasReady() bool { return !r.out.IsEmpty() }

// Ready returns the messages to send and the transactions finished since the
// last Advance. It does not change the replica: until Advance, calls return
// the same work plus whatever Step and Tick added since.
func (r *Replica) Ready() Output { return r.out }

// Advance tells the replica the caller has taken o, which must be the value
// of an earlier Ready; what was added after that Ready stays for the next.
func (r *Replica) Advance(o Output) { r.out = advance(r.cfg.ID, r.out, o) }

func advance(id ring.NodeID, out, done Output) Output {
	if len(done.Messages) > len(out.Messages) || len(done.Finished) > len(out.Finished) {
		panic(&AssertionError{Node: id, Invariant: "Advance with more work than Ready returned",
			State: fmt.Sprintf("%d messages and %d outcomes pending; advanced %d and %d",
				len(out.Messages), len(out.Finished), len(done.Messages), len(done.Finished))})
	}
	return Output{
		Messages: clipOrNil(out.Messages[len(done.Messages):]),
		Finished: clipOrNil(out.Finished[len(done.Finished):]),
		MustSync: out.MustSync && !done.MustSync,
	}
}

// clipOrNil drops an emptied slice so the next append allocates afresh
// instead of writing into an array the caller now owns.
func clipOrNil[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return slices.Clip(s)
}
