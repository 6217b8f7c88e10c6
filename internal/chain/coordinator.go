package chain

import (
	"errors"
	"fmt"
	"slices"

	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/txn"
)

// CoordinatorConfig configures a Coordinator. Zero values take the defaults.
type CoordinatorConfig struct {
	// ID names the coordinator; it is the Coordinator of every TxnID it
	// issues and the address the head replies to. A coordinator may share
	// its node's ID with a Replica on the same node: the node then hands
	// Reply messages to the Coordinator and every other kind to the Replica.
	ID ring.NodeID
	// FirstSeq is the sequence number of the first transaction. A
	// coordinator that restarts must start above every sequence number it
	// issued before, or a new transaction would be taken for an old one.
	FirstSeq uint64
	// RetransmitTicks is how many ticks the coordinator waits for the
	// head's Reply before sending the Forward again the first time; it
	// backs off as a member does (see ReplicaConfig.RetransmitTicks).
	// Default 5.
	RetransmitTicks int
	// InflightMax bounds the transactions begun and not yet finished. Begin
	// beyond it returns ErrBusy. Default 1024.
	InflightMax int
}

// Coordinator starts transactions on their chains and reports each outcome
// once. It is the client half of the protocol: it retransmits the Forward to
// the head until the head replies, and acknowledges every Reply, so the head
// may forget the transaction.
//
// A coordinator forgets a transaction as soon as it reports the outcome and
// never sends its Forward again; that is what lets the head forget it later.
//
// When members of a chain fail, Reroute re-executes the transaction on the
// members left, under the same ID.
//
// It is not safe for concurrent use.
type Coordinator struct {
	cfg      CoordinatorConfig
	nextSeq  uint64
	inflight map[TxnID]*inflight
	out      Output
	tickIDs  []TxnID
}

type inflight struct {
	chain []ring.NodeID
	// first is the chain Begin was given. A rerouted transaction may still
	// be answered by a head the re-execution left out (it was only
	// suspected): its Reply is acknowledged, and taken only if it says
	// committed. An abort from such a head may be its own refusal of a
	// Forward that reached it late, while the re-execution commits; only
	// the current head's abort is the transaction's.
	first []ring.NodeID
	// keep: groups of members of first, each holding a replica of
	// something the transaction changes; a re-execution keeps one of each.
	keep [][]ring.NodeID
	ops  []txn.Op
	// ticks counts ticks since the Forward was last sent; resent counts
	// its retransmissions on ticks (see retransmitAfter).
	ticks, resent int
}

// NewCoordinator returns a coordinator with nothing in flight, or an error
// naming the first bad field of cfg.
func NewCoordinator(cfg CoordinatorConfig) (*Coordinator, error) {
	if cfg.ID == "" {
		return nil, errors.New("chain: coordinator ID is empty")
	}
	if cfg.RetransmitTicks < 0 || cfg.InflightMax < 0 {
		return nil, fmt.Errorf("chain: coordinator RetransmitTicks %d and InflightMax %d must be positive or zero for the default",
			cfg.RetransmitTicks, cfg.InflightMax)
	}
	if cfg.RetransmitTicks == 0 {
		cfg.RetransmitTicks = RetransmitTicksDefault
	}
	if cfg.InflightMax == 0 {
		cfg.InflightMax = InflightMaxDefault
	}
	return &Coordinator{cfg: cfg, nextSeq: cfg.FirstSeq, inflight: make(map[TxnID]*inflight)}, nil
}

// ID is the coordinator's address.
func (c *Coordinator) ID() ring.NodeID { return c.cfg.ID }

// Inflight is how many transactions are begun and not yet finished.
func (c *Coordinator) Inflight() int { return len(c.inflight) }

// Begin starts a transaction of ops on chain, head first, and queues its
// Forward to the head. The chain must already be in the protocol's global
// order; Begin checks only that it is non-empty, bounded and has no repeated
// member. keep lists groups of members that each hold a replica of
// something the transaction changes (a blob's version managers, the
// holders of a chunk it writes): a re-execution must keep a member of every
// group (see Reroute), so each must be a non-empty subset of chain. It
// returns ErrBusy when InflightMax transactions are in flight, and the
// validation error for bad ops or groups; in both cases nothing was
// started. Begin takes ownership of ops, chain and keep.
func (c *Coordinator) Begin(ops []txn.Op, chain []ring.NodeID, keep [][]ring.NodeID) (TxnID, error) {
	if len(c.inflight) >= c.cfg.InflightMax {
		return TxnID{}, ErrBusy
	}
	if err := validateChain(chain); err != nil {
		return TxnID{}, err
	}
	for _, g := range keep {
		if len(g) == 0 || slices.ContainsFunc(g, func(id ring.NodeID) bool { return !slices.Contains(chain, id) }) {
			return TxnID{}, fmt.Errorf("%w: group %v to keep is empty or not within the chain %v", ErrInvalidMessage, g, chain)
		}
	}
	if err := txn.Validate(ops); err != nil {
		return TxnID{}, err
	}
	id := TxnID{Coordinator: c.cfg.ID, Seq: c.nextSeq}
	c.nextSeq++
	t := &inflight{chain: chain, first: chain, keep: keep, ops: ops}
	c.inflight[id] = t
	m := c.forwardMessage(id, t)
	m.Fresh = true
	c.send(m)
	return id, nil
}

// Step handles a Reply from a head. The first Reply for a transaction in
// flight finishes it; every Reply, first or repeated, is acknowledged. An
// error means the message was malformed or misaddressed and was dropped.
func (c *Coordinator) Step(m Message) error {
	if m.Type != MsgReply {
		return fmt.Errorf("%w: a coordinator does not take %s", ErrInvalidMessage, m.Type)
	}
	if m.To != c.cfg.ID || m.Txn.Coordinator != c.cfg.ID {
		return fmt.Errorf("%w: Reply for %s addressed to %q, this is %q", ErrInvalidMessage, m.Txn, m.To, c.cfg.ID)
	}
	if t, ok := c.inflight[m.Txn]; ok {
		if !slices.Contains(t.first, m.From) {
			return fmt.Errorf("%w: Reply for %s from %q, not a member of its chain %v", ErrInvalidMessage, m.Txn, m.From, t.first)
		}
		if m.From != t.chain[0] && !m.Committed {
			c.send(Message{Type: MsgAck, From: c.cfg.ID, To: m.From, Txn: m.Txn})
			return nil
		}
		delete(c.inflight, m.Txn)
		c.out.Finished = append(c.out.Finished, Outcome{
			Txn: m.Txn, Committed: m.Committed, Err: m.Err, Results: m.Results,
		})
	} else if m.Txn.Seq >= c.nextSeq {
		panic(&AssertionError{Node: c.cfg.ID, Txn: m.Txn, Invariant: "Reply for a transaction never begun",
			State: fmt.Sprintf("next sequence number %d", c.nextSeq), Message: m.String()})
	}
	c.send(Message{Type: MsgAck, From: c.cfg.ID, To: m.From, Txn: m.Txn})
	return nil
}

// Tick advances the coordinator's logical clock by one tick, sending again
// each Forward unanswered for its retransmission interval.
func (c *Coordinator) Tick() {
	c.eachInflight(func(id TxnID, t *inflight) {
		t.ticks++
		if t.ticks >= retransmitAfter(c.cfg.RetransmitTicks, t.resent) {
			t.ticks = 0
			t.resent++
			c.send(c.forwardMessage(id, t))
		}
	})
}

// eachInflight calls f for each transaction in flight, in ID order, so the
// output does not depend on map iteration.
func (c *Coordinator) eachInflight(f func(TxnID, *inflight)) {
	ids := c.tickIDs[:0]
	for id := range c.inflight {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, TxnID.Compare)
	for _, id := range ids {
		f(id, c.inflight[id])
	}
	clear(ids)
	c.tickIDs = ids[:0]
}

// Reroute re-executes every transaction in flight whose chain has a member
// alive reports false for: it sends the transaction, under the same ID, to
// the chain of the members left, in the same order (see the replica's
// "Re-execution"). A transaction none of whose members is alive stays on
// its chain, and so does one whose members left miss every member of one
// of the groups Begin was given to keep (every replica of a blob or of a
// chunk it changes is among the dead): committed there, that change would
// be stored nowhere. The caller decides what alive means; a member it
// wrongly reports dead is left behind, and must catch up before serving
// reads.
func (c *Coordinator) Reroute(alive func(ring.NodeID) bool) {
	dead := func(id ring.NodeID) bool { return !alive(id) }
	c.eachInflight(func(id TxnID, t *inflight) {
		if !slices.ContainsFunc(t.chain, dead) {
			return
		}
		live := slices.DeleteFunc(slices.Clone(t.chain), dead)
		lost := func(g []ring.NodeID) bool {
			return !slices.ContainsFunc(g, func(id ring.NodeID) bool { return slices.Contains(live, id) })
		}
		if len(live) == 0 || slices.ContainsFunc(t.keep, lost) {
			return
		}
		t.chain = live
		t.ticks, t.resent = 0, 0
		c.send(c.forwardMessage(id, t))
	})
}

func (c *Coordinator) forwardMessage(id TxnID, t *inflight) Message {
	m := Message{Type: MsgForward, From: c.cfg.ID, To: t.chain[0], Txn: id, Chain: t.chain, Ops: t.ops}
	if len(t.chain) < len(t.first) {
		m.Origin = t.first
	}
	return m
}

func (c *Coordinator) send(m Message) { c.out.Messages = append(c.out.Messages, m) }

// HasReady reports whether Ready has anything to hand out.
func (c *Coordinator) HasReady() bool { return !c.out.IsEmpty() }

// Ready returns the messages to send and the transactions finished since the
// last Advance, each finished transaction exactly once across all Advances.
func (c *Coordinator) Ready() Output { return c.out }

// Advance tells the coordinator the caller has taken o, the value of an
// earlier Ready.
func (c *Coordinator) Advance(o Output) { c.out = advance(c.cfg.ID, c.out, o) }
