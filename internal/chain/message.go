package chain

import (
	"cmp"
	"errors"
	"fmt"
	"strings"

	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/txn"
)

// ChainMembersMax bounds the members of one chain. A chain holds the version
// managers and the chunk replicas of every blob a transaction writes, so it
// grows with the transaction; the bound keeps a Forward message and the
// per-member duplicate checks small.
const ChainMembersMax = 64

// TxnID names one transaction for its whole life, across retransmissions and
// duplicates: every member recognizes a message it has already handled by
// this ID alone. The coordinator picks Seq and must never reuse one, across
// its restarts too (CoordinatorConfig.FirstSeq), because a reused ID would be
// taken for a duplicate of the earlier transaction.
type TxnID struct {
	Coordinator ring.NodeID
	Seq         uint64
}

// Compare orders IDs by coordinator, then sequence. The replica uses it to
// walk its transactions in a fixed order, so its output does not depend on
// map iteration.
func (id TxnID) Compare(o TxnID) int {
	if c := strings.Compare(string(id.Coordinator), string(o.Coordinator)); c != 0 {
		return c
	}
	return cmp.Compare(id.Seq, o.Seq)
}

func (id TxnID) String() string { return fmt.Sprintf("%s/%d", id.Coordinator, id.Seq) }

// MessageType is the kind of a Message. Zero is invalid. The values are
// append-only: once messages travel between processes, a value keeps its
// meaning forever and new kinds take new values.
type MessageType uint8

const (
	// MsgForward carries a transaction down the chain: the recipient at
	// Index prepares it and passes it on, or refuses it.
	MsgForward MessageType = 1 + iota
	// MsgBackward carries the outcome up the chain, from the member at
	// Index+1 to the member at Index.
	MsgBackward
	// MsgReply carries the outcome from the head to the coordinator.
	MsgReply
	// MsgAck tells the member at Index that its upstream (the member at
	// Index-1, or the coordinator when Index is 0) has its outcome, so it
	// may stop retransmitting it and, after a retention period, forget the
	// transaction.
	MsgAck
	// MsgQuery asks a member a re-execution left out for its outcome of the
	// transaction, on behalf of a re-execution's tail that has nothing
	// staged to decide by (see "Restarts" in replica.go). Chain is the
	// chain the transaction began on and Index the recipient's place in
	// it. A recipient that has no outcome and never staged the transaction
	// refuses it from then on.
	MsgQuery
	// MsgAnswer answers a MsgQuery: Committed with Results, aborted with
	// Err, or Undecided while the recipient still waits for the members
	// after it.
	MsgAnswer
)

var messageTypeNames = [...]string{"", "Forward", "Backward", "Reply", "Ack", "Query", "Answer"}

func (t MessageType) String() string {
	if t != 0 && int(t) < len(messageTypeNames) {
		return messageTypeNames[t]
	}
	return fmt.Sprintf("MessageType(%d)", uint8(t))
}

// Message is everything the chain protocol sends between replicas and
// coordinators. The receiver does not modify its slices, and keeps Chain,
// Ops and Results after Step returns, so the sender must not modify them
// once the message is handed over.
type Message struct {
	Type     MessageType
	From, To ring.NodeID
	Txn      TxnID
	// Index is the recipient's position in the chain for Forward, Backward
	// and Ack; it is zero and unused for Reply.
	Index int
	// Chain is the whole chain, head first (Forward only). Its order is the
	// global order of the protocol: two transactions that share members meet
	// them in the same relative order.
	Chain []ring.NodeID
	// Ops is the transaction (Forward only).
	Ops []txn.Op
	// Committed is the outcome (Backward and Reply).
	Committed bool
	// Err says why the transaction aborted (Backward and Reply when
	// Committed is false): the refusing member's error text.
	Err string
	// Results is the sender's view of each op's outcome (Backward and Reply
	// when Committed); the coordinator reports the head's.
	Results []txn.Result
	// Fresh marks a Forward as the first its sender sends for the
	// transaction, on the chain the transaction began on: the recipient
	// cannot have seen it before, in this run or an earlier one (the
	// transport delivers a message to at most one run of a member). Resent
	// and rerouted Forwards are not fresh. See "Restarts" in replica.go.
	Fresh bool
	// Probe marks a Forward from a member that did not stage the
	// transaction: it asks for the outcome the members after it already
	// reached, and a member that does not know the transaction does not
	// stage it either. See "Restarts" in replica.go.
	Probe bool
	// Origin is the chain the transaction began on, on the Forwards of a
	// re-execution (whose Chain is Origin with members removed); nil on
	// the first chain. A tail with nothing staged asks the members after
	// it in Origin for their outcome (MsgQuery) before it decides.
	Origin []ring.NodeID
	// Undecided marks an Answer from a member that has no outcome yet.
	Undecided bool
}

// String formats a message on one line, for logs and scripted tests.
func (m Message) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s->%s %s %s", m.From, m.To, m.Type, m.Txn)
	switch m.Type {
	case MsgForward:
		fmt.Fprintf(&b, " index=%d chain=%v ops=%d", m.Index, m.Chain, len(m.Ops))
		if m.Probe {
			b.WriteString(" probe")
		}
		if m.Origin != nil {
			fmt.Fprintf(&b, " origin=%v", m.Origin)
		}
	case MsgBackward, MsgReply:
		if m.Type == MsgBackward {
			fmt.Fprintf(&b, " index=%d", m.Index)
		}
		if m.Committed {
			b.WriteString(" committed")
		} else {
			fmt.Fprintf(&b, " aborted err=%q", m.Err)
		}
	case MsgAck:
		fmt.Fprintf(&b, " index=%d", m.Index)
	case MsgQuery:
		fmt.Fprintf(&b, " index=%d origin=%v", m.Index, m.Chain)
	case MsgAnswer:
		switch {
		case m.Undecided:
			b.WriteString(" undecided")
		case m.Committed:
			b.WriteString(" committed")
		default:
			fmt.Fprintf(&b, " aborted err=%q", m.Err)
		}
	}
	return b.String()
}

// Outcome is a transaction finished at one replica or at its coordinator.
type Outcome struct {
	Txn       TxnID
	Committed bool
	// Err says why the transaction aborted, when it did.
	Err string
	// Results is each op's outcome when committed: the local ones at a
	// replica, the head's at the coordinator.
	Results []txn.Result
	// CommitErr is set at a replica when the chain committed the transaction
	// but the local Stager failed to commit it: this replica's copy is now
	// behind and must be repaired from the other members before it serves
	// the keys again. It is always nil at a coordinator.
	CommitErr error
}

// Output is the work a Replica or Coordinator hands to its caller.
//
// Ordering contract: every storage effect behind Messages is already
// written when Ready returns it. Stager.Commit runs inside Step, before
// the replica queues the Backward (or Reply, or Ack) that announces the
// commit, and likewise the staged state behind a Forward is in place before
// the Forward leaves. A Commit need not wait for its fsync: MustSync says
// that one ran since the last Advance, and then the caller makes the
// writes durable before any of Messages leaves the node (internal/outbox
// holds them, so one sync covers the commits of many steps). Messages the
// node sends itself may go at once: they leave nothing outside it that a
// crash could contradict. Finished outcomes a coordinator reports to a
// client wait for the same sync. Past that, the caller may send Messages
// in any order and over any channel, and may lose, repeat or delay them:
// the protocol tolerates all three.
//
// The replica does not touch the returned slices after Ready; the caller
// owns them once it calls Advance.
type Output struct {
	// Messages to send, each to its To.
	Messages []Message
	// Finished lists the transactions this replica or coordinator decided
	// since the last Advance, each exactly once.
	Finished []Outcome
	// MustSync says a Staged was committed since the last Advance: its
	// writes must be durable before Messages leave (see above).
	MustSync bool
}

// IsEmpty reports whether there is nothing to do.
func (o Output) IsEmpty() bool { return len(o.Messages) == 0 && len(o.Finished) == 0 && !o.MustSync }

// Stager is the local storage a replica stages transactions into. It is
// called synchronously from Step and Tick, so it must not block: a Prepare
// that would wait for a lock held by another transaction returns an error
// wrapping errs.ErrConflict instead, and the transaction aborts. Blocking
// here would stall every transaction on the node, and, since two chains may
// reach shared members in different phases, could deadlock the cluster.
type Stager interface {
	// Prepare validates ops against the local state and stages them,
	// holding what it needs (the written keys' locks) so that Commit cannot
	// fail for a logical reason. id is unique per transaction; the replica
	// calls Prepare at most once per id. Ops that touch keys this node does
	// not store are the Stager's to skip. On error nothing is held.
	Prepare(id TxnID, ops []txn.Op) (Staged, error)
	// Committed reports whether this node committed transaction id before
	// (in an earlier run, whose replica state a restart lost), with the
	// results it committed. Staged.Commit must record id durably, together
	// with the commit, for as long as a Forward of the transaction can
	// still arrive. An error (the record could not be read) drops the
	// message; its sender repeats it.
	Committed(id TxnID) ([]txn.Result, bool, error)
}

// Staged is a transaction prepared on one replica. The replica calls exactly
// one of Commit or Abort, once.
type Staged interface {
	// Commit writes the staged ops, visible at once, with the record
	// that the transaction committed here with results (what this member
	// reports upstream; see Stager.Committed), and releases what Prepare
	// held. The writes may become durable later, with the sync the
	// Output's MustSync asks for. An error means the local storage failed; what is held is
	// released anyway.
	Commit(results []txn.Result) error
	// Abort drops the staged ops and releases what Prepare held.
	Abort()
	// Results reports each op's outcome on this replica, in op order.
	Results() []txn.Result
}

// Ordered is implemented by a Staged that may have to wait before its
// Commit: the Stager queued it behind transactions staged earlier on the
// same keys, which must be committed or aborted here first (see "Ordering"
// in replica.go). Ready reports whether it may commit now. A Staged that is
// not Ordered is always ready.
type Ordered interface {
	Ready() bool
}

// Passing is implemented by a Staged that applies none of the
// transaction's ops on this member: its copy of the blobs is behind, so
// the commit passes through it and the member catches up afterwards.
// PassesThrough reports whether that is so.
//
// Such a member never decides a commit. The tail's commit is the commit
// point, the one step that is durable before anyone can learn that the
// transaction committed; every other member's stage lives in memory until
// the Backward reaches it. A tail that passed a commit through and decided
// it would leave the change only in the stages before it, and a crash of
// those would lose an acknowledged write. So a passing tail refuses
// (ErrBehind), and a passing member that a re-execution makes the tail
// asks the members after it for their outcome instead of committing (see
// ask in replica.go).
type Passing interface {
	PassesThrough() bool
}

// Orphaning is implemented by a Staged that can tell whether the commit
// it holds still changes only blobs its chain manages. A re-execution can
// make a member the tail after a ring change took a blob of the commit
// from every member of the new chain (see internal/mvcc.Unmanaged): its
// commit would then change that blob nowhere reads see. Such a tail may
// not decide the commit, as a passing one may not: it asks the members
// after it on the chain the transaction began on (see ask in replica.go),
// and refuses (ErrOrphaned) if none committed.
type Orphaning interface {
	Orphaned() bool
}

// Orphaned reports whether s is Orphaning and orphaned.
func Orphaned(s Staged) bool {
	o, ok := find[Orphaning](s)
	return ok && o.Orphaned()
}

// PassesThrough reports whether s is Passing and passes through.
func PassesThrough(s Staged) bool {
	p, ok := find[Passing](s)
	return ok && p.PassesThrough()
}

// Wrapper is implemented by a Staged that wraps another, say to act on
// its Commit or Abort. The replica looks through wrappers for Ordered,
// Passing and a Waits method, so a wrapper need not, and cannot forget
// to, pass them on.
type Wrapper interface {
	Unwrap() Staged
}

// find returns the first of s and the Stageds it wraps that is a T.
func find[T any](s Staged) (T, bool) {
	for s != nil {
		if t, ok := s.(T); ok {
			return t, true
		}
		w, ok := s.(Wrapper)
		if !ok {
			break
		}
		s = w.Unwrap()
	}
	var zero T
	return zero, false
}

// Errors returned or carried by the protocol.
var (
	// ErrBusy is the backpressure error: the replica already stages
	// ReplicaConfig.PendingMax transactions, or the coordinator already
	// runs CoordinatorConfig.InflightMax. The transaction did not run and
	// may be retried.
	ErrBusy = errors.New("chain: too many transactions in flight")
	// ErrInvalidMessage is returned by Step for a message that is malformed
	// or not addressed to this replica. The message is dropped and the
	// replica's state is unchanged.
	ErrInvalidMessage = errors.New("chain: invalid message")
	// ErrReexecution is returned by Step for a Forward whose transaction
	// this replica already knows with a chain the Forward's is not a
	// re-execution of (the known chain with members removed); the message
	// is dropped.
	ErrReexecution = errors.New("chain: Forward's chain is not a re-execution of the known one")
	// ErrStageLost is the CommitErr of an Outcome a replica reports when
	// the member after it reports a commit of a transaction this replica
	// never forwarded: an earlier run of this member (before a restart)
	// staged and forwarded it, and that stage was lost. This replica's
	// copy misses the commit.
	ErrStageLost = errors.New("chain: committed downstream of a stage this member lost in a restart")
	// ErrRestarted is the refusal of a member that an earlier run of may
	// have handled the transaction (see "Restarts" in replica.go).
	ErrRestarted = errors.New("chain: transaction began before this member restarted; not staged again")
	// ErrNotStaged is the refusal of a member that a Probe reaches for a
	// transaction it does not know, at the tail: no member staged it.
	ErrNotStaged = errors.New("chain: probed transaction staged nowhere")
	// ErrQueried is the outcome a member records for a transaction it is
	// asked about (MsgQuery) without having an outcome or a commit record
	// of it: it refuses the transaction from then on, so the tail that
	// asked may abort it.
	ErrQueried = errors.New("chain: asked for the outcome of a transaction never staged here; refused from now on")
	// ErrBehind is the refusal of a tail whose Staged passes the
	// transaction through (see Passing): it may not be the commit point.
	// The transaction did not run and may be retried once the member
	// caught up.
	ErrBehind = errors.New("chain: the tail's copy is behind and would pass the commit through; not committed")
	// ErrOrphaned is the refusal of a member a re-execution made the tail
	// whose Staged is orphaned (see Orphaning): no member of its chain
	// manages a blob the commit changes any more. The transaction did not
	// run and may be retried on a chain planned anew.
	ErrOrphaned = errors.New("chain: no member of the re-executed chain manages a blob the commit changes; not committed")
)

// AssertionError is the value the chain core panics with when one of its
// invariants breaks: the state it reached cannot happen in a correct
// protocol run, so continuing could commit a transaction on some members
// and abort it on others. It names the replica, the transaction and the
// state involved.
type AssertionError struct {
	Node      ring.NodeID
	Txn       TxnID
	Invariant string
	// State describes the replica's record of the transaction, if any.
	State string
	// Message is the message being handled, if any.
	Message string
}

func (e *AssertionError) Error() string {
	return fmt.Sprintf("chain: assertion failed at %s for %s: %s (state: %s; message: %s)",
		e.Node, e.Txn, e.Invariant, e.State, e.Message)
}

// validateChain checks a chain as it arrives from the network or from a
// coordinator's caller: bounded, non-empty, no empty or repeated member.
func validateChain(chain []ring.NodeID) error {
	if len(chain) == 0 || len(chain) > ChainMembersMax {
		return fmt.Errorf("%w: chain of %d members, want 1 to %d",
			ErrInvalidMessage, len(chain), ChainMembersMax)
	}
	for i, id := range chain {
		if id == "" {
			return fmt.Errorf("%w: chain member %d has an empty ID", ErrInvalidMessage, i)
		}
		for _, prev := range chain[:i] {
			if prev == id {
				return fmt.Errorf("%w: chain member %q appears twice", ErrInvalidMessage, id)
			}
		}
	}
	return nil
}
