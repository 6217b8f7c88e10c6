// This file proves the per-node chain-commit state machine right on
// hand-written message sequences, one scripted scenario per protocol rule:
//
//   - the tail prepares, commits and sends the commit upstream, all in one
//     step; the head replies to the coordinator;
//   - a middle member forwards, retransmits while waiting, never aborts on
//     its own however long it waits, and adopts the outcome a Backward
//     brings, committing before the Backward it sends;
//   - retransmissions back off, from RetransmitTicks to RetransmitTicks <<
//     RetransmitBackoffMax;
//   - duplicates of a Forward or a Backward, early or late, never touch
//     storage again; a duplicate Forward is answered with the outcome once
//     there is one, and not at all while the member waits;
//   - a prepare failure walks back as an abort and is remembered, so a later
//     duplicate cannot prepare the transaction after all;
//   - outcomes are retransmitted until acknowledged, then forgotten after
//     the retention period;
//   - a restarted member answers a commit it recorded, and does not stage
//     anew a Forward its earlier run may have handled: it probes the
//     members after it, or refuses at the tail; a fresh Forward it stages;
//   - backpressure, config and message validation, and the assertions that
//     fire on impossible messages.
//
// Each step delivers a message or ticks the clock, then compares the
// storage calls and the Ready output, one line each, with the script. The
// tests are deterministic; a failure names the scenario and the step.
package chain_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tyrstore/tyr/internal/chain"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/txn"
)

// fakeStager logs every storage call and fails Prepare for the keys in
// refuse. committed holds its durable transaction records.
type fakeStager struct {
	log       *[]string
	refuse    map[string]bool
	committed map[chain.TxnID][]txn.Result
	// ordered stages every transaction behind the ones staged before it
	// and not yet committed or aborted: an Ordered Staged, ready once they
	// are done.
	ordered bool
	passing bool
	// orphaned: every transaction staged changes a blob no member of its
	// chain manages any more (chain.Orphaning).
	orphaned bool
	// wrapped puts each Staged in a wrapper, as a node does to act on a
	// commit carrying a client ID.
	wrapped bool
	staged  []*fakeStaged
}

func (s *fakeStager) Committed(id chain.TxnID) ([]txn.Result, bool, error) {
	r, ok := s.committed[id]
	return r, ok, nil
}

func (s *fakeStager) Prepare(id chain.TxnID, ops []txn.Op) (chain.Staged, error) {
	st, err := s.prepare(id, ops)
	if err != nil || !s.wrapped {
		return st, err
	}
	return wrapper{st}, nil
}

type wrapper struct{ chain.Staged }

func (w wrapper) Unwrap() chain.Staged { return w.Staged }

func (s *fakeStager) prepare(id chain.TxnID, ops []txn.Op) (chain.Staged, error) {
	for _, op := range ops {
		if s.refuse[op.Key] {
			*s.log = append(*s.log, "prepare "+id.String()+" refused")
			return nil, fmt.Errorf("%w: %q is locked", errs.ErrConflict, op.Key)
		}
	}
	*s.log = append(*s.log, "prepare "+id.String())
	staged := &fakeStaged{id: id, log: s.log, n: len(ops), committed: s.committed}
	if s.passing {
		return passingStaged{staged}, nil
	}
	if s.orphaned {
		return orphanedStaged{staged}, nil
	}
	if !s.ordered {
		return staged, nil
	}
	o := orderedStaged{fakeStaged: staged, before: slices.Clone(s.staged)}
	s.staged = append(s.staged, staged)
	return o, nil
}

// passingStaged stages a transaction this member's copy is behind on: it
// passes through (chain.Passing).
type passingStaged struct{ *fakeStaged }

func (passingStaged) PassesThrough() bool { return true }

// orphanedStaged stages a transaction a ring change has since moved a blob
// of away from every member of its chain (chain.Orphaning).
type orphanedStaged struct{ *fakeStaged }

func (orphanedStaged) Orphaned() bool { return true }

type orderedStaged struct {
	*fakeStaged
	before []*fakeStaged
}

func (s orderedStaged) Ready() bool {
	for _, b := range s.before {
		if !b.done {
			return false
		}
	}
	return true
}

func (s orderedStaged) Commit(results []txn.Result) error {
	if !s.Ready() {
		panic("Commit before Ready")
	}
	return s.fakeStaged.Commit(results)
}

type fakeStaged struct {
	id        chain.TxnID
	log       *[]string
	n         int
	done      bool
	committed map[chain.TxnID][]txn.Result
}

func (s *fakeStaged) Commit(results []txn.Result) error {
	if s.done {
		panic("second Commit or Abort")
	}
	s.done = true
	if s.committed != nil {
		s.committed[s.id] = results
	}
	*s.log = append(*s.log, "commit "+s.id.String())
	return nil
}

func (s *fakeStaged) Abort() {
	if s.done {
		panic("second Commit or Abort")
	}
	s.done = true
	*s.log = append(*s.log, "abort "+s.id.String())
}

func (s *fakeStaged) Results() []txn.Result { return make([]txn.Result, s.n) }

var (
	chain3 = []ring.NodeID{"n1", "n2", "n3"}
	ops1   = []txn.Op{{Key: "k", Kind: txn.OpWrite, Data: []byte("v"), Create: true}}
)

func id(seq uint64) chain.TxnID { return chain.TxnID{Coordinator: "c", Seq: seq} }

// fwd is the first Forward member index of chain3 receives for transaction
// seq, which is fresh; resent is a later one.
func fwd(seq uint64, index int) chain.Message {
	from := ring.NodeID("c")
	if index > 0 {
		from = chain3[index-1]
	}
	return chain.Message{Type: chain.MsgForward, From: from, To: chain3[index], Txn: id(seq),
		Index: index, Chain: chain3, Ops: ops1, Fresh: true}
}

func resent(seq uint64, index int) chain.Message {
	m := fwd(seq, index)
	m.Fresh = false
	return m
}

// probe is a Probe member index of chain3 receives for transaction seq.
func probe(seq uint64, index int) chain.Message {
	m := resent(seq, index)
	m.Probe = true
	return m
}

// rerouted is the Forward member index receives for transaction seq
// re-executed on chain3 without n3.
func rerouted(seq uint64, index int) chain.Message {
	m := resent(seq, index)
	m.Chain, m.Origin = chain3[:2], chain3
	return m
}

// query is n2's question to the member at index of chain3 about
// transaction seq (see ask in replica.go).
func query(seq uint64, index int) chain.Message {
	return chain.Message{Type: chain.MsgQuery, From: "n2", To: chain3[index], Txn: id(seq), Index: index, Chain: chain3}
}

// answer is n3's answer to n2's query: committed, aborted, or undecided.
func answer(seq uint64, committed, undecided bool) chain.Message {
	m := chain.Message{Type: chain.MsgAnswer, From: "n3", To: "n2", Txn: id(seq), Committed: committed, Undecided: undecided}
	if !committed && !undecided {
		m.Err = chain.ErrQueried.Error()
	}
	return m
}

// back is the Backward member index of chain3 receives for transaction seq.
func back(seq uint64, index int, committed bool) chain.Message {
	m := chain.Message{Type: chain.MsgBackward, From: chain3[index+1], To: chain3[index], Txn: id(seq),
		Index: index, Committed: committed}
	if !committed {
		m.Err = "conflict"
	}
	return m
}

// ack is the Ack member index of chain3 receives for transaction seq.
func ack(seq uint64, index int) chain.Message {
	from := ring.NodeID("c")
	if index > 0 {
		from = chain3[index-1]
	}
	return chain.Message{Type: chain.MsgAck, From: from, To: chain3[index], Txn: id(seq), Index: index}
}

// step is one line of a script: deliver msg, or tick ticks times, then
// expect want (storage calls, sent messages and finished transactions, in
// that order).
type step struct {
	msg     *chain.Message
	ticks   int
	want    []string
	wantErr error
	// wantPanic, if set, is a substring of the AssertionError expected.
	wantPanic string
}

func deliver(m chain.Message, want ...string) step { return step{msg: &m, want: want} }
func tick(n int, want ...string) step              { return step{ticks: n, want: want} }

type scenario struct {
	name   string
	node   int // index in chain3 of the replica under test
	refuse []string
	// committed lists the transactions (by seq) an earlier run of the
	// member committed: its durable records.
	committed []uint64
	// restarted: an earlier run may have seen every transaction.
	restarted bool
	pending   int
	txns      int
	knob      int
	ordered   bool
	// passing: every transaction staged passes through (chain.Passing).
	passing bool
	// orphaned: every transaction staged is orphaned (chain.Orphaning).
	orphaned bool
	// wrapped: every Staged comes in a chain.Wrapper.
	wrapped bool
	steps   []step
}

func (sc scenario) run(t *testing.T) {
	var log []string
	stager := &fakeStager{log: &log, refuse: map[string]bool{}, committed: map[chain.TxnID][]txn.Result{}, ordered: sc.ordered, passing: sc.passing, orphaned: sc.orphaned, wrapped: sc.wrapped}
	for _, k := range sc.refuse {
		stager.refuse[k] = true
	}
	for _, seq := range sc.committed {
		stager.committed[id(seq)] = []txn.Result{{Size: seq}}
	}
	r, err := chain.NewReplica(chain.ReplicaConfig{
		ID: chain3[sc.node], Stager: stager, RetransmitTicks: 3, OutcomeRetentionTicks: 10,
		PendingMax: sc.pending, TxnsMax: sc.txns, ChainMembersMax: len(chain3),
		TestingKnobs: chain.TestingKnobs{AbortOnForwardTimeoutTicks: sc.knob},
	})
	if sc.restarted {
		r, err = chain.NewReplica(chain.ReplicaConfig{
			ID: chain3[sc.node], Stager: stager, RetransmitTicks: 3, OutcomeRetentionTicks: 10,
			PendingMax: sc.pending, TxnsMax: sc.txns, ChainMembersMax: len(chain3), EarlierRun: func(chain.TxnID) bool { return true },
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range sc.steps {
		log = log[:0]
		what := fmt.Sprintf("step %d (tick %d)", i, st.ticks)
		if st.msg != nil {
			what = fmt.Sprintf("step %d (%s)", i, st.msg)
		}
		panicked, err := runStep(r, st)
		if st.wantPanic != "" {
			if panicked == nil || !strings.Contains(panicked.Error(), st.wantPanic) {
				t.Fatalf("%s: panic %v, want an assertion containing %q", what, panicked, st.wantPanic)
			}
			return
		}
		if panicked != nil {
			t.Fatalf("%s: unexpected panic: %v", what, panicked)
		}
		if !errors.Is(err, st.wantErr) || (err == nil) != (st.wantErr == nil) {
			t.Fatalf("%s: error %v, want %v", what, err, st.wantErr)
		}
		o := r.Ready()
		got := slices.Clone(log)
		for _, m := range o.Messages {
			got = append(got, "send "+m.String())
		}
		for _, f := range o.Finished {
			line := fmt.Sprintf("finish %s committed=%t", f.Txn, f.Committed)
			if f.CommitErr != nil {
				line += fmt.Sprintf(" (%v)", f.CommitErr)
			}
			got = append(got, line)
		}
		r.Advance(o)
		if !slices.Equal(got, st.want) {
			t.Fatalf("%s:\ngot:\n\t%s\nwant:\n\t%s", what, strings.Join(got, "\n\t"), strings.Join(st.want, "\n\t"))
		}
		if r.HasReady() {
			t.Fatalf("%s: Ready not empty after Advance", what)
		}
	}
}

func runStep(r *chain.Replica, st step) (panicked *chain.AssertionError, err error) {
	defer func() {
		if p := recover(); p != nil {
			a, ok := p.(*chain.AssertionError)
			if !ok {
				panic(p)
			}
			panicked = a
		}
	}()
	if st.msg != nil {
		return nil, r.Step(*st.msg)
	}
	for range st.ticks {
		r.Tick()
	}
	return nil, nil
}

const (
	fwdTo3         = "send n2->n3 Forward c/1 index=2 chain=[n1 n2 n3] ops=1"
	fwdTo2         = "send n1->n2 Forward c/1 index=1 chain=[n1 n2 n3] ops=1"
	commitTo2      = "send n3->n2 Backward c/1 index=1 committed"
	commitTo1      = "send n2->n1 Backward c/1 index=0 committed"
	abortTo1       = "send n2->n1 Backward c/1 index=0 aborted err=\"conflict\""
	ackTo3         = "send n2->n3 Ack c/1 index=2"
	ackTo2         = "send n1->n2 Ack c/1 index=1"
	finCommitted   = "finish c/1 committed=true"
	finAborted     = "finish c/1 committed=false"
	replyCommit    = "send n1->c Reply c/1 committed"
	prepare1       = "prepare c/1"
	commit1        = "commit c/1"
	abort1         = "abort c/1"
	refusedAbort1  = "send n2->n1 Backward c/1 index=0 aborted err=\"conflict: \\\"k\\\" is locked\""
	queryTo3       = "send n2->n3 Query c/1 index=2 origin=[n1 n2 n3]"
	abortRestarted = `send n2->n1 Backward c/1 index=0 aborted err="chain: transaction began before this member restarted; not staged again"`
	finStageLost   = "finish c/1 committed=true (chain: committed downstream of a stage this member lost in a restart)"
)

func TestReplicaScenarios(t *testing.T) {
	for _, sc := range []scenario{
		{
			name: "tail commits in one step and forgets after the Ack and retention",
			node: 2,
			steps: []step{
				deliver(fwd(1, 2), prepare1, commit1, commitTo2, finCommitted),
				tick(2),
				tick(1, commitTo2), // not acknowledged: retransmit
				deliver(fwd(1, 2), commitTo2),
				deliver(ack(1, 2)),
				tick(9),
				deliver(fwd(1, 2), commitTo2), // a late duplicate inside retention
				tick(1),
				// Forgotten: a Backward repeat is acknowledged from nothing.
				deliver(chain.Message{Type: chain.MsgBackward, From: "n4", To: "n3", Txn: id(1), Index: 2, Committed: true},
					"send n3->n4 Ack c/1 index=3"),
			},
		},
		{
			name: "middle member forwards, retransmits, and commits on the Backward",
			node: 1,
			steps: []step{
				deliver(fwd(1, 1), prepare1, fwdTo3),
				tick(2),
				tick(1, fwdTo3),
				deliver(fwd(1, 1)), // duplicate while waiting: no second prepare, no second Forward
				deliver(back(1, 1, true), commit1, commitTo1, ackTo3, finCommitted),
				deliver(back(1, 1, true), ackTo3),  // Backward after retransmit
				deliver(fwd(1, 1), commitTo1),      // duplicate Forward after the outcome
				tick(3, commitTo1),                 // outcome retransmitted until acknowledged
				deliver(ack(1, 1)),                 //
				tick(10),                           // forgotten
				deliver(ack(1, 1)),                 // a late Ack is ignored
				deliver(back(1, 1, true), ackTo3),  // and a late Backward acknowledged
				deliver(back(1, 1, false), ackTo3), // even a contradicting one: we cannot know
				deliver(fwd(2, 1), "prepare c/2", strings.ReplaceAll(fwdTo3, "c/1", "c/2")), // others go on
			},
		},
		{
			name: "a transaction committed behind an undecided one waits to apply, then goes upstream",
			node: 1, ordered: true,
			steps: []step{
				deliver(fwd(1, 1), prepare1, fwdTo3),
				deliver(fwd(2, 1), "prepare c/2", strings.ReplaceAll(fwdTo3, "c/1", "c/2")),
				// Committed downstream: acknowledged, but not applied
				// before c/1 is decided here, and nothing goes upstream.
				deliver(back(2, 1, true), strings.ReplaceAll(ackTo3, "c/1", "c/2")),
				deliver(fwd(2, 1)), // a duplicate Forward gets no answer yet
				deliver(back(2, 1, true), strings.ReplaceAll(ackTo3, "c/1", "c/2")), // a repeat is acknowledged
				tick(3, fwdTo3), // only the undecided c/1 is retransmitted
				deliver(back(1, 1, true), commit1, "commit c/2", commitTo1, ackTo3,
					strings.ReplaceAll(commitTo1, "c/1", "c/2"), finCommitted, "finish c/2 committed=true"),
				deliver(fwd(2, 1), strings.ReplaceAll(commitTo1, "c/1", "c/2")),
			},
		},
		{
			name: "a transaction waiting to apply behind an aborted one applies",
			node: 1, ordered: true,
			steps: []step{
				deliver(fwd(1, 1), prepare1, fwdTo3),
				deliver(fwd(2, 1), "prepare c/2", strings.ReplaceAll(fwdTo3, "c/1", "c/2")),
				deliver(back(2, 1, true), strings.ReplaceAll(ackTo3, "c/1", "c/2")),
				deliver(back(1, 1, false), abort1, "commit c/2", abortTo1, ackTo3,
					strings.ReplaceAll(commitTo1, "c/1", "c/2"), finAborted, "finish c/2 committed=true"),
			},
		},
		{
			name: "an Ack for a transaction waiting to apply is impossible",
			node: 1, ordered: true,
			steps: []step{
				deliver(fwd(1, 1), prepare1, fwdTo3),
				deliver(fwd(2, 1), "prepare c/2", strings.ReplaceAll(fwdTo3, "c/1", "c/2")),
				deliver(back(2, 1, true), strings.ReplaceAll(ackTo3, "c/1", "c/2")),
				{msg: ptr(ack(2, 1)), wantPanic: "Ack before this member sent an outcome"},
			},
		},
		{
			name: "a waiting member never aborts on its own",
			node: 1,
			steps: []step{
				deliver(fwd(1, 1), prepare1, fwdTo3),
				// Retransmissions back off, doubling the interval from 3
				// ticks to 3 << RetransmitBackoffMax, then keep that pace.
				tick(3, fwdTo3),
				tick(5),
				tick(1, fwdTo3),
				tick(11),
				tick(1, fwdTo3),
				tick(23),
				tick(1, fwdTo3),
				tick(23),
				tick(1, fwdTo3),
				tick(240, slices.Repeat([]string{fwdTo3}, 10)...),
				deliver(back(1, 1, true), commit1, commitTo1, ackTo3, finCommitted),
				// The outcome's retransmissions start again at 3 ticks.
				tick(3, commitTo1),
				tick(5),
				tick(1, commitTo1),
			},
		},
		{
			name: "an abort from downstream walks back",
			node: 1,
			steps: []step{
				deliver(fwd(1, 1), prepare1, fwdTo3),
				deliver(back(1, 1, false), abort1, abortTo1, ackTo3, finAborted),
				deliver(fwd(1, 1), abortTo1),
			},
		},
		{
			name:   "a prepare failure walks back and is remembered",
			node:   1,
			refuse: []string{"k"},
			steps: []step{
				deliver(fwd(1, 1), "prepare c/1 refused", refusedAbort1, finAborted),
				deliver(fwd(1, 1), refusedAbort1), // no second Prepare, which might succeed
				deliver(ack(1, 1)),
				tick(10),
			},
		},
		{
			name: "the head replies to the coordinator",
			node: 0,
			steps: []step{
				deliver(fwd(1, 0), prepare1, fwdTo2),
				deliver(back(1, 0, true), commit1, replyCommit, ackTo2, finCommitted),
				tick(3, replyCommit),
				deliver(ack(1, 0)),
				tick(3),
			},
		},
		{
			name:    "backpressure refuses beyond PendingMax and drops beyond TxnsMax",
			node:    1,
			pending: 1,
			txns:    3,
			steps: []step{
				deliver(fwd(1, 1), prepare1, fwdTo3),
				deliver(fwd(2, 1), `send n2->n1 Backward c/2 index=0 aborted err="chain: too many transactions in flight"`,
					"finish c/2 committed=false"),
				deliver(fwd(3, 1)), // dropped: no record to answer duplicates from
				deliver(back(1, 1, true), commit1, commitTo1, ackTo3, finCommitted),
			},
		},
		{
			// See "Admission" in replica.go: the last record is kept for
			// Forwards to a tail, so members waiting on each other across
			// chains cannot fill each other's tables.
			name:    "a table full for a Forward one member before the tail admits one to the tail",
			node:    1,
			pending: 2,
			txns:    3,
			steps: []step{
				deliver(fwd(1, 1), prepare1, fwdTo3),
				deliver(fwd(2, 1), "prepare c/2", "send n2->n3 Forward c/2 index=2 chain=[n1 n2 n3] ops=1"),
				deliver(fwd(3, 1)), // dropped: 2 records held, TxnsMax − 1 at distance 1
				// Admitted, and answered: refused, as 2 are staged.
				deliver(rerouted(4, 1), `send n2->n1 Backward c/4 index=0 aborted err="chain: too many transactions in flight"`,
					"finish c/4 committed=false"),
				deliver(fwd(5, 1)), // and the table is full for the tail too
				deliver(rerouted(6, 1)),
			},
		},
		{
			name: "the testing knob aborts on timeout, the bug the simulator must catch",
			node: 1,
			knob: 4,
			steps: []step{
				deliver(fwd(1, 1), prepare1, fwdTo3),
				tick(4, abort1, fwdTo3, `send n2->n1 Backward c/1 index=0 aborted err="timed out waiting for the downstream member"`, finAborted),
				deliver(back(1, 1, true), ackTo3), // the contradiction is not asserted
			},
		},
		{
			name: "a Backward to the tail is an assertion",
			node: 2,
			steps: []step{
				deliver(fwd(1, 2), prepare1, commit1, commitTo2, finCommitted),
				{msg: &chain.Message{Type: chain.MsgBackward, From: "n4", To: "n3", Txn: id(1), Index: 2}, wantPanic: "never forwarded"},
			},
		},
		{
			// An earlier run of this member forwarded c/1 before a restart;
			// this run refused a fresh Forward (which the transport does not
			// deliver to two runs, so this cannot happen). The Backward is
			// acknowledged, and a commit reported as missed here.
			name:   "a Backward to a member that refused a fresh Forward",
			node:   1,
			refuse: []string{"k"},
			steps: []step{
				deliver(fwd(1, 1), "prepare c/1 refused", refusedAbort1, finAborted),
				deliver(back(1, 1, false), ackTo3),
				deliver(back(1, 1, true), ackTo3, "finish c/1 committed=true (chain: committed downstream of a stage this member lost in a restart)"),
			},
		},
		{
			// An earlier run of this member committed c/1 and lost its
			// record in a restart; the upstream repeats its Forward.
			name:      "a restarted member answers a commit it recorded, without staging",
			node:      1,
			committed: []uint64{1},
			steps: []step{
				deliver(resent(1, 1), commitTo1, finCommitted),
				deliver(resent(1, 1), commitTo1),
				// The commit the earlier run forwarded comes back: it is
				// held here, so nothing is reported missing.
				deliver(back(1, 1, true), ackTo3),
				deliver(ack(1, 1)),
				tick(10),
			},
		},
		{
			// An earlier run may have forwarded c/1, and the members after
			// it committed: a repeated Forward is not staged but probes them.
			name:      "a restarted member probes downstream with a repeated Forward and adopts a commit",
			node:      1,
			restarted: true,
			steps: []step{
				deliver(resent(1, 1), fwdTo3+" probe"),
				tick(3, fwdTo3+" probe"),
				deliver(resent(1, 1)), // a repeat while waiting: its own ticks forward again
				deliver(ack(1, 1)),    // for an outcome the earlier run sent
				deliver(back(1, 1, true), commitTo1, ackTo3, "finish c/1 committed=true (chain: committed downstream of a stage this member lost in a restart)"),
				deliver(ack(1, 1)),
				tick(10),
			},
		},
		{
			name:      "a probe that comes back aborted says the member restarted",
			node:      1,
			restarted: true,
			steps: []step{
				deliver(resent(1, 1), fwdTo3+" probe"),
				deliver(back(1, 1, false), `send n2->n1 Backward c/1 index=0 aborted err="chain: transaction began before this member restarted; not staged again"`, ackTo3, finAborted),
			},
		},
		{
			name:      "a restarted tail refuses a repeated Forward it has no record of",
			node:      2,
			restarted: true,
			steps: []step{
				deliver(resent(1, 2), `send n3->n2 Backward c/1 index=1 aborted err="chain: transaction began before this member restarted; not staged again"`, finAborted),
			},
		},
		{
			// The re-execution left n3 out, which may have committed c/1
			// as the tail: the stage n2's earlier run lost would have led
			// there. n2 asks n3 before deciding, however long it takes.
			name:      "a restarted tail of a re-execution asks the member left out after it and adopts its commit",
			node:      1,
			restarted: true,
			steps: []step{
				deliver(rerouted(1, 1), queryTo3),
				tick(3, queryTo3),
				deliver(answer(1, false, true)),
				deliver(rerouted(1, 1), queryTo3),
				deliver(answer(1, true, false), "send n2->n1 Backward c/1 index=0 committed", finStageLost),
				deliver(answer(1, true, false)),
				{msg: ptr(back(1, 1, true)), wantErr: chain.ErrInvalidMessage},
				deliver(ack(1, 1)),
				tick(10),
			},
		},
		{
			name:      "a restarted tail of a re-execution aborts once the members left out after it answered aborted",
			node:      1,
			restarted: true,
			steps: []step{
				deliver(rerouted(1, 1), queryTo3),
				deliver(answer(1, false, false), abortRestarted, finAborted),
			},
		},
		{
			// n2 probed n3 (its earlier run may have forwarded c/1); then
			// the re-execution leaves n3 out.
			name:      "a restarted member probing becomes the tail of a re-execution and asks",
			node:      1,
			restarted: true,
			steps: []step{
				deliver(resent(1, 1), fwdTo3+" probe"),
				deliver(rerouted(1, 1), queryTo3),
				tick(3, queryTo3),
				deliver(answer(1, false, false), abortRestarted, finAborted),
			},
		},
		{
			// The tail's commit is the commit point; passing a commit
			// through there would decide it with the change held only in
			// the stages before it, in memory.
			name:    "a tail whose copy is behind refuses a commit it would pass through",
			node:    2,
			passing: true,
			steps: []step{
				deliver(fwd(1, 2), prepare1, abort1, `send n3->n2 Backward c/1 index=1 aborted err="`+chain.ErrBehind.Error()+`"`, finAborted),
				deliver(fwd(1, 2), `send n3->n2 Backward c/1 index=1 aborted err="`+chain.ErrBehind.Error()+`"`),
			},
		},
		{
			name:    "a member passing a commit through commits on the Backward",
			node:    1,
			passing: true,
			steps: []step{
				deliver(fwd(1, 1), prepare1, fwdTo3),
				deliver(back(1, 1, true), commit1, commitTo1, ackTo3, finCommitted),
			},
		},
		{
			// n3 may have committed c/1 as the tail before it was left
			// out; n2 holds nothing of it, so it may not decide by itself.
			name:    "a member passing a commit through, made the tail by a re-execution, asks and adopts a commit",
			node:    1,
			passing: true,
			steps: []step{
				deliver(fwd(1, 1), prepare1, fwdTo3),
				deliver(rerouted(1, 1), queryTo3),
				tick(3, queryTo3),
				deliver(rerouted(1, 1), queryTo3),
				deliver(answer(1, false, true)),
				deliver(answer(1, true, false), commit1, "send n2->n1 Backward c/1 index=0 committed", finCommitted),
				deliver(answer(1, true, false)),
			},
		},
		{
			name:    "a member passing a commit through, made the tail by a re-execution, aborts once all after it answered aborted",
			node:    1,
			passing: true,
			steps: []step{
				deliver(fwd(1, 1), prepare1, fwdTo3),
				deliver(rerouted(1, 1), queryTo3),
				deliver(answer(1, false, false), abort1, `send n2->n1 Backward c/1 index=0 aborted err="`+chain.ErrBehind.Error()+`"`, finAborted),
			},
		},
		{
			// A ring change took the blob from every member left; n3 may
			// have committed c/1 as the tail before it was left out.
			name:     "a member whose stage is orphaned, made the tail by a re-execution, asks and adopts a commit",
			node:     1,
			orphaned: true,
			steps: []step{
				deliver(fwd(1, 1), prepare1, fwdTo3),
				deliver(rerouted(1, 1), queryTo3),
				deliver(answer(1, true, false), commit1, "send n2->n1 Backward c/1 index=0 committed", finCommitted),
			},
		},
		{
			name:     "a member whose stage is orphaned, made the tail by a re-execution, aborts once all after it answered aborted",
			node:     1,
			orphaned: true,
			steps: []step{
				deliver(fwd(1, 1), prepare1, fwdTo3),
				deliver(rerouted(1, 1), queryTo3),
				deliver(answer(1, false, false), abort1, `send n2->n1 Backward c/1 index=0 aborted err="`+chain.ErrOrphaned.Error()+`"`, finAborted),
			},
		},
		{
			name: "a member asked about a transaction it never staged refuses it from then on",
			node: 2,
			steps: []step{
				deliver(query(1, 2), `send n3->n2 Answer c/1 aborted err="`+chain.ErrQueried.Error()+`"`),
				deliver(resent(1, 2), `send n3->n2 Backward c/1 index=1 aborted err="`+chain.ErrQueried.Error()+`"`),
				deliver(query(1, 2), `send n3->n2 Answer c/1 aborted err="`+chain.ErrQueried.Error()+`"`),
				tick(10),
				// Forgotten; a Forward this late is one an earlier run may have
				// seen (ReplicaConfig.EarlierRun), which the node refuses.
			},
		},
		{
			name: "a member asked about a transaction answers undecided while it waits, then its outcome",
			node: 1,
			steps: []step{
				deliver(fwd(1, 1), prepare1, fwdTo3),
				deliver(chain.Message{Type: chain.MsgQuery, From: "n1", To: "n2", Txn: id(1), Index: 1, Chain: chain3}, "send n2->n1 Answer c/1 undecided"),
				deliver(back(1, 1, true), commit1, commitTo1, ackTo3, finCommitted),
				deliver(chain.Message{Type: chain.MsgQuery, From: "n1", To: "n2", Txn: id(1), Index: 1, Chain: chain3}, "send n2->n1 Answer c/1 committed"),
				{msg: ptr(chain.Message{Type: chain.MsgQuery, From: "n3", To: "n2", Txn: id(1), Index: 1, Chain: chain3}), wantErr: chain.ErrInvalidMessage},
			},
		},
		{
			name:      "a member asked about a transaction it recorded answers committed",
			node:      2,
			committed: []uint64{1},
			steps: []step{
				deliver(query(1, 2), "send n3->n2 Answer c/1 committed"),
			},
		},
		{
			name:      "a restarted member stages a fresh Forward: no earlier run saw it",
			node:      1,
			restarted: true,
			steps: []step{
				deliver(fwd(1, 1), prepare1, fwdTo3),
				deliver(back(1, 1, true), commit1, commitTo1, ackTo3, finCommitted),
			},
		},
		{
			name: "a probe passes a member that does not know the transaction, staging nothing",
			node: 1,
			steps: []step{
				deliver(probe(1, 1), fwdTo3+" probe"),
				deliver(back(1, 1, true), commitTo1, ackTo3, "finish c/1 committed=true (chain: committed downstream of a stage this member lost in a restart)"),
			},
		},
		{
			// An earlier run staged and forwarded c/1; the commit comes back
			// to this run, which never heard of it.
			name: "a commit coming back to a restarted member that never recorded it is reported missed",
			node: 1,
			steps: []step{
				deliver(back(1, 1, true), ackTo3, "finish c/1 committed=true (chain: committed downstream of a stage this member lost in a restart)"),
				deliver(back(1, 1, false), ackTo3),
			},
		},
		{
			name: "a probe reaching a tail that does not know the transaction aborts it",
			node: 2,
			steps: []step{
				deliver(probe(1, 2), `send n3->n2 Backward c/1 index=1 aborted err="chain: probed transaction staged nowhere"`, finAborted),
			},
		},
		{
			name:      "a probe reaching a member that recorded the commit gets it",
			node:      2,
			committed: []uint64{1},
			steps: []step{
				deliver(probe(1, 2), commitTo2, finCommitted),
			},
		},
		{
			name: "a probe reaching a member that knows the transaction is a repeat",
			node: 1,
			steps: []step{
				deliver(fwd(1, 1), prepare1, fwdTo3),
				deliver(probe(1, 1)),
				deliver(back(1, 1, true), commit1, commitTo1, ackTo3, finCommitted),
				deliver(probe(1, 1), commitTo1),
			},
		},
		{
			name: "a Backward to the tail is an assertion",
			node: 2,
			steps: []step{
				deliver(fwd(1, 2), "prepare c/1", "commit c/1", "send n3->n2 Backward c/1 index=1 committed", finCommitted),
				{msg: ptr(chain.Message{Type: chain.MsgBackward, From: "n2", To: "n3", Txn: id(1), Index: 2, Committed: true}), wantPanic: "never forwarded"},
			},
		},
		{
			name: "a Backward with the wrong index is an assertion",
			node: 1,
			steps: []step{
				deliver(fwd(1, 1), prepare1, fwdTo3),
				{msg: ptr(func() chain.Message { m := back(1, 1, true); m.Index = 0; return m }()), wantPanic: "never forwarded to"},
			},
		},
		{
			name: "a Backward contradicting the outcome is an assertion",
			node: 1,
			steps: []step{
				deliver(fwd(1, 1), prepare1, fwdTo3),
				deliver(back(1, 1, true), commit1, commitTo1, ackTo3, finCommitted),
				{msg: ptr(back(1, 1, false)), wantPanic: "contradicts"},
			},
		},
		{
			name: "an Ack before the outcome is an assertion",
			node: 1,
			steps: []step{
				deliver(fwd(1, 1), prepare1, fwdTo3),
				{msg: ptr(ack(1, 1)), wantPanic: "Ack before"},
			},
		},
		{
			name: "malformed and misaddressed messages are refused without a trace",
			node: 1,
			steps: []step{
				{msg: ptr(fwd(1, 2)), wantErr: chain.ErrInvalidMessage},           // addressed to n3
				{msg: ptr(retarget(fwd(1, 2))), wantErr: chain.ErrInvalidMessage}, // n2 is not at index 2
				{msg: ptr(func() chain.Message { m := fwd(1, 1); m.From = "n3"; return m }()), wantErr: chain.ErrInvalidMessage},
				{msg: ptr(func() chain.Message {
					m := fwd(1, 1)
					m.Chain = []ring.NodeID{"n1", "n2", "n1"}
					return m
				}()), wantErr: chain.ErrInvalidMessage},
				{msg: ptr(func() chain.Message { m := fwd(1, 1); m.Txn.Coordinator = ""; return m }()), wantErr: chain.ErrInvalidMessage},
				{msg: ptr(func() chain.Message { m := fwd(1, 1); m.Type = chain.MsgReply; return m }()), wantErr: chain.ErrInvalidMessage},
				{msg: ptr(func() chain.Message {
					m := fwd(1, 1)
					m.Ops = []txn.Op{{Key: "", Kind: txn.OpDelete}}
					return m
				}()), want: []string{`send n2->n1 Backward c/1 index=0 aborted err="op 0: invalid argument key: empty"`, finAborted}},
				deliver(fwd(2, 1), "prepare c/2", strings.ReplaceAll(fwdTo3, "c/1", "c/2")),
				{msg: ptr(func() chain.Message { m := back(2, 1, true); m.From = "n1"; return m }()), wantErr: chain.ErrInvalidMessage},
				{msg: ptr(func() chain.Message {
					m := fwd(2, 1)
					m.Chain = []ring.NodeID{"n1", "n2", "n4"}
					return m
				}()), wantErr: chain.ErrReexecution},
			},
		},
	} {
		t.Run(sc.name, sc.run)
		if sc.ordered || sc.passing {
			// A wrapper hides Ordered and Passing from a type assertion;
			// the replica looks through it (chain.Wrapper).
			sc.wrapped = true
			t.Run(sc.name+" (wrapped)", sc.run)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// retarget addresses m to n2 without fixing its index.
func retarget(m chain.Message) chain.Message {
	m.To = "n2"
	return m
}

func TestReplicaConfig(t *testing.T) {
	stager := &fakeStager{log: new([]string)}
	for _, tc := range []struct {
		cfg  chain.ReplicaConfig
		want string
	}{
		{chain.ReplicaConfig{Stager: stager}, "ID is empty"},
		{chain.ReplicaConfig{ID: "n1"}, "no Stager"},
		{chain.ReplicaConfig{ID: "n1", Stager: stager, RetransmitTicks: -1}, "RetransmitTicks is -1"},
		{chain.ReplicaConfig{ID: "n1", Stager: stager, OutcomeRetentionTicks: -1}, "OutcomeRetentionTicks is -1"},
		{chain.ReplicaConfig{ID: "n1", Stager: stager, PendingMax: 8, TxnsMax: 8}, "TxnsMax 8 must exceed PendingMax 8"},
		{chain.ReplicaConfig{ID: "n1", Stager: stager, TxnsMax: -2}, "TxnsMax is -2"},
		{chain.ReplicaConfig{ID: "n1", Stager: stager, ChainMembersMax: chain.ChainMembersMax + 1}, "ChainMembersMax is 65"},
		{chain.ReplicaConfig{ID: "n1", Stager: stager, PendingMax: 4, TxnsMax: 5}, "TxnsMax 5 must be at least ChainMembersMax 64"},
		{chain.ReplicaConfig{ID: "n1", Stager: stager, PendingMax: 4, TxnsMax: 5, ChainMembersMax: 5}, ""},
		{chain.ReplicaConfig{ID: "n1", Stager: stager}, ""},
	} {
		_, err := chain.NewReplica(tc.cfg)
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("NewReplica(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	// The admission rule needs every chain to fit the table.
	r, err := chain.NewReplica(chain.ReplicaConfig{ID: "n2", Stager: stager, PendingMax: 1, TxnsMax: 2, ChainMembersMax: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Step(fwd(1, 1)); !errors.Is(err, chain.ErrInvalidMessage) {
		t.Errorf("Forward on a chain of 3 at a replica taking 2 = %v, want ErrInvalidMessage", err)
	}
	if r.Tracked() != 0 {
		t.Errorf("the refused Forward left %d records", r.Tracked())
	}
}

// TestCoordinator checks the client half: one Forward per Begin, repeated
// until the head replies, one outcome per transaction however often the
// Reply comes, and an Ack for every Reply.
func TestCoordinator(t *testing.T) {
	c, err := chain.NewCoordinator(chain.CoordinatorConfig{ID: "c", FirstSeq: 1, RetransmitTicks: 2, InflightMax: 1})
	if err != nil {
		t.Fatal(err)
	}
	take := func() []string {
		o := c.Ready()
		c.Advance(o)
		var got []string
		for _, m := range o.Messages {
			got = append(got, m.String())
		}
		for _, f := range o.Finished {
			got = append(got, fmt.Sprintf("finish %s committed=%t", f.Txn, f.Committed))
		}
		return got
	}
	expect := func(what string, want ...string) {
		t.Helper()
		if got := take(); !slices.Equal(got, want) {
			t.Fatalf("%s: got %q, want %q", what, got, want)
		}
	}
	if _, err := c.Begin(nil, chain3, nil); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Fatalf("Begin with no ops: %v", err)
	}
	if _, err := c.Begin(ops1, nil, nil); !errors.Is(err, chain.ErrInvalidMessage) {
		t.Fatalf("Begin with no chain: %v", err)
	}
	for _, keep := range [][][]ring.NodeID{{{}}, {{"n1"}, {"n4"}}} {
		if _, err := c.Begin(ops1, chain3, keep); !errors.Is(err, chain.ErrInvalidMessage) {
			t.Fatalf("Begin keeping %v on %v: %v, want ErrInvalidMessage", keep, chain3, err)
		}
	}
	got, err := c.Begin(ops1, chain3, nil)
	if err != nil || got != id(1) {
		t.Fatalf("Begin = %v, %v", got, err)
	}
	expect("begin", "c->n1 Forward c/1 index=0 chain=[n1 n2 n3] ops=1")
	if _, err := c.Begin(ops1, chain3, nil); !errors.Is(err, chain.ErrBusy) {
		t.Fatalf("Begin beyond InflightMax: %v", err)
	}
	c.Tick()
	expect("one tick")
	c.Tick()
	expect("retransmit", "c->n1 Forward c/1 index=0 chain=[n1 n2 n3] ops=1")
	reply := chain.Message{Type: chain.MsgReply, From: "n1", To: "c", Txn: id(1), Committed: true}
	if err := c.Step(reply); err != nil {
		t.Fatal(err)
	}
	expect("reply", "c->n1 Ack c/1 index=0", "finish c/1 committed=true")
	if err := c.Step(reply); err != nil {
		t.Fatal(err)
	}
	expect("repeated reply", "c->n1 Ack c/1 index=0")
	c.Tick()
	c.Tick()
	expect("nothing in flight")
	if c.Inflight() != 0 {
		t.Fatalf("Inflight = %d", c.Inflight())
	}
	wrong := reply
	wrong.To = "d"
	if err := c.Step(wrong); !errors.Is(err, chain.ErrInvalidMessage) {
		t.Fatalf("misaddressed Reply: %v", err)
	}
	func() {
		defer func() {
			if _, ok := recover().(*chain.AssertionError); !ok {
				t.Fatal("no assertion for a Reply to a transaction never begun")
			}
		}()
		never := reply
		never.Txn.Seq = 7
		_ = c.Step(never)
	}()
}

// TestChainOverPerfectNetwork runs three replicas and a coordinator with
// every message delivered at once, as a smoke test of the whole exchange:
// one commit, one abort on a conflict, and every record forgotten at the end.
func TestChainOverPerfectNetwork(t *testing.T) {
	var log []string
	locked := map[string]bool{}
	replicas := map[ring.NodeID]*chain.Replica{}
	for _, n := range chain3 {
		r, err := chain.NewReplica(chain.ReplicaConfig{ID: n, Stager: &fakeStager{log: &log, refuse: locked}})
		if err != nil {
			t.Fatal(err)
		}
		replicas[n] = r
	}
	c, err := chain.NewCoordinator(chain.CoordinatorConfig{ID: "c"})
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []chain.Outcome
	run := func() {
		for {
			o := c.Ready()
			c.Advance(o)
			outcomes = append(outcomes, o.Finished...)
			msgs := o.Messages
			for _, n := range chain3 {
				o := replicas[n].Ready()
				replicas[n].Advance(o)
				msgs = append(msgs, o.Messages...)
			}
			if len(msgs) == 0 {
				return
			}
			for _, m := range msgs {
				var err error
				if m.To == "c" {
					err = c.Step(m)
				} else {
					err = replicas[m.To].Step(m)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if _, err := c.Begin(ops1, chain3, nil); err != nil {
		t.Fatal(err)
	}
	run()
	locked["k"] = true
	if _, err := c.Begin(ops1, chain3, nil); err != nil {
		t.Fatal(err)
	}
	run()
	if len(outcomes) != 2 || !outcomes[0].Committed || outcomes[1].Committed {
		t.Fatalf("outcomes %+v, want one commit then one abort", outcomes)
	}
	for range chain.OutcomeRetentionTicksDefault {
		for _, r := range replicas {
			r.Tick()
		}
	}
	for n, r := range replicas {
		if r.Tracked() != 0 || r.HasReady() {
			t.Errorf("%s still tracks %d transactions", n, r.Tracked())
		}
	}
}

// TestCoordinatorBacksOff checks that the coordinator's retransmissions of
// a Forward back off as a member's do: the interval doubles from
// RetransmitTicks to RetransmitTicks << RetransmitBackoffMax, then holds,
// and a reroute starts it again at RetransmitTicks.
func TestCoordinatorBacksOff(t *testing.T) {
	c, err := chain.NewCoordinator(chain.CoordinatorConfig{ID: "c", FirstSeq: 1, RetransmitTicks: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Begin(ops1, chain3, nil); err != nil {
		t.Fatal(err)
	}
	sent := func() int { o := c.Ready(); c.Advance(o); return len(o.Messages) }
	if sent() != 1 {
		t.Fatal("Begin sent no Forward")
	}
	// The tick of each retransmission, counted from Begin.
	var at []int
	for tick := 1; tick <= 100; tick++ {
		c.Tick()
		if sent() > 0 {
			at = append(at, tick)
		}
	}
	want := []int{2, 6, 14, 30, 46, 62, 78, 94}
	if !slices.Equal(at, want) {
		t.Fatalf("retransmitted at ticks %v, want %v", at, want)
	}
	c.Reroute(func(id ring.NodeID) bool { return id != "n3" })
	if sent() != 1 {
		t.Fatal("the reroute sent no Forward")
	}
	for range 2 {
		c.Tick()
	}
	if sent() != 1 {
		t.Fatal("no retransmission RetransmitTicks after a reroute")
	}
}

// TestFresh checks which Forwards are fresh: the coordinator's first and a
// member's first after a fresh one; never a retransmission or a reroute.
func TestFresh(t *testing.T) {
	c, err := chain.NewCoordinator(chain.CoordinatorConfig{ID: "c", FirstSeq: 1, RetransmitTicks: 1})
	if err != nil {
		t.Fatal(err)
	}
	freshness := func(o chain.Output) []bool {
		var out []bool
		for _, m := range o.Messages {
			out = append(out, m.Fresh)
		}
		return out
	}
	take := func() []bool { o := c.Ready(); c.Advance(o); return freshness(o) }
	if _, err := c.Begin(ops1, chain3, nil); err != nil {
		t.Fatal(err)
	}
	if got := take(); !slices.Equal(got, []bool{true}) {
		t.Fatalf("Begin sent fresh=%v, want [true]", got)
	}
	c.Tick()
	if got := take(); !slices.Equal(got, []bool{false}) {
		t.Fatalf("retransmission fresh=%v, want [false]", got)
	}
	c.Reroute(func(id ring.NodeID) bool { return id != "n2" })
	if got := take(); !slices.Equal(got, []bool{false}) {
		t.Fatalf("reroute fresh=%v, want [false]", got)
	}

	for _, first := range []bool{true, false} {
		r, err := chain.NewReplica(chain.ReplicaConfig{ID: "n2", Stager: &fakeStager{log: new([]string)}, RetransmitTicks: 1})
		if err != nil {
			t.Fatal(err)
		}
		m := fwd(1, 1)
		m.Fresh = first
		if err := r.Step(m); err != nil {
			t.Fatal(err)
		}
		o := r.Ready()
		r.Advance(o)
		if got := freshness(o); !slices.Equal(got, []bool{first}) {
			t.Fatalf("forward of a Forward with fresh=%t: fresh=%v", first, got)
		}
		r.Tick()
		o = r.Ready()
		r.Advance(o)
		if got := freshness(o); !slices.Equal(got, []bool{false}) {
			t.Fatalf("retransmission fresh=%v, want [false]", got)
		}
	}
}

// TestReplicaStalled checks that a transaction waiting for its outcome or
// waiting to apply is reported once it has waited the given ticks, and
// no longer once decided.
func TestReplicaStalled(t *testing.T) {
	var log []string
	stager := &fakeStager{log: &log, committed: map[chain.TxnID][]txn.Result{}, ordered: true}
	r, err := chain.NewReplica(chain.ReplicaConfig{ID: "n2", Stager: stager, RetransmitTicks: 3, OutcomeRetentionTicks: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []chain.Message{fwd(1, 1), fwd(2, 1), back(2, 1, true)} {
		if err := r.Step(m); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		r.Tick()
	}
	if got := r.Stalled(5); len(got) != 0 {
		t.Fatalf("Stalled(5) after 4 ticks: %q, want none", got)
	}
	r.Tick()
	got := r.Stalled(5)
	if len(got) != 2 || !strings.Contains(got[0], "c/1") || !strings.Contains(got[0], "phase=waiting") ||
		!strings.Contains(got[1], "c/2") || !strings.Contains(got[1], "phase=applying") {
		t.Fatalf("Stalled(5) after 5 ticks: %q, want c/1 waiting and c/2 applying", got)
	}
	if err := r.Step(back(1, 1, true)); err != nil {
		t.Fatal(err)
	}
	if got := r.Stalled(0); len(got) != 0 {
		t.Fatalf("Stalled(0) once both committed: %q, want none", got)
	}
}

// TestCoordinatorRepliesAfterReroute: once a transaction is rerouted, an
// abort from a head the re-execution left out is acknowledged and
// ignored (it may be that head's own refusal of a late Forward, while the
// re-execution commits); the current head's Reply decides, and a commit
// reported by a left-out head is taken, since only the tail decides a
// commit.
func TestCoordinatorRepliesAfterReroute(t *testing.T) {
	for _, oldSays := range []bool{false, true} {
		t.Run(fmt.Sprintf("left-out head says committed=%t", oldSays), func(t *testing.T) {
			c, err := chain.NewCoordinator(chain.CoordinatorConfig{ID: "c", FirstSeq: 1, RetransmitTicks: 100})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Begin(ops1, chain3, nil); err != nil {
				t.Fatal(err)
			}
			c.Reroute(func(id ring.NodeID) bool { return id != "n1" })
			c.Advance(c.Ready())
			old := chain.Message{Type: chain.MsgReply, From: "n1", To: "c", Txn: id(1), Committed: oldSays}
			if !oldSays {
				old.Err = "conflict"
			}
			if err := c.Step(old); err != nil {
				t.Fatal(err)
			}
			o := c.Ready()
			c.Advance(o)
			if len(o.Messages) != 1 || o.Messages[0].Type != chain.MsgAck || o.Messages[0].To != "n1" {
				t.Fatalf("Reply of the left-out head: sent %v, want an Ack to n1", o.Messages)
			}
			if oldSays {
				if len(o.Finished) != 1 || !o.Finished[0].Committed {
					t.Fatalf("a commit reported by the left-out head: finished %v, want committed", o.Finished)
				}
				return
			}
			if len(o.Finished) != 0 {
				t.Fatalf("an abort from the left-out head finished the transaction: %v", o.Finished)
			}
			if err := c.Step(chain.Message{Type: chain.MsgReply, From: "n2", To: "c", Txn: id(1), Committed: true}); err != nil {
				t.Fatal(err)
			}
			if o := c.Ready(); len(o.Finished) != 1 || !o.Finished[0].Committed {
				t.Fatalf("the current head's commit: finished %v, want committed", o.Finished)
			}
		})
	}
}

// TestReplicaForgotThenRerouted: a member that forgot a committed
// transaction (or restarted) and learns it again from a re-execution's
// Forward answers from its record; a Backward its old downstream still
// repeats on the older chain is refused as a message of another chain,
// not taken for a broken invariant.
func TestReplicaForgotThenRerouted(t *testing.T) {
	var log []string
	stager := &fakeStager{log: &log, committed: map[chain.TxnID][]txn.Result{id(1): {{}}}}
	r, err := chain.NewReplica(chain.ReplicaConfig{ID: "n2", Stager: stager, RetransmitTicks: 3, OutcomeRetentionTicks: 10})
	if err != nil {
		t.Fatal(err)
	}
	rerouted := []ring.NodeID{"n2", "n3"}
	if err := r.Step(chain.Message{Type: chain.MsgForward, From: "c", To: "n2", Txn: id(1), Index: 0,
		Chain: rerouted, Ops: ops1}); err != nil {
		t.Fatal(err)
	}
	o := r.Ready()
	r.Advance(o)
	if len(o.Messages) != 1 || o.Messages[0].Type != chain.MsgReply || !o.Messages[0].Committed {
		t.Fatalf("re-execution's Forward of a recorded commit: sent %v, want a committed Reply", o.Messages)
	}
	err = r.Step(back(1, 1, true)) // n3 at index 2 of chain3, to n2 at index 1
	if !errors.Is(err, chain.ErrInvalidMessage) {
		t.Fatalf("Backward of the older chain: %v, want ErrInvalidMessage", err)
	}
}

// TestCoordinatorRerouteKeeps: a transaction whose members left would keep
// none of a group it was begun with (the replicas of a blob, or of a chunk,
// it changes) is not rerouted; it stays on its chain until they return.
func TestCoordinatorRerouteKeeps(t *testing.T) {
	c, err := chain.NewCoordinator(chain.CoordinatorConfig{ID: "c", FirstSeq: 1, RetransmitTicks: 100})
	if err != nil {
		t.Fatal(err)
	}
	// n1 and n2 manage the blob; only n3 holds a chunk it writes.
	if _, err := c.Begin(ops1, chain3, [][]ring.NodeID{{"n1", "n2"}, {"n3"}}); err != nil {
		t.Fatal(err)
	}
	c.Advance(c.Ready())
	c.Reroute(func(id ring.NodeID) bool { return id != "n3" })
	if o := c.Ready(); len(o.Messages) != 0 {
		t.Fatalf("rerouted away from the chunk's only replica: %v", o.Messages)
	}
	c.Reroute(func(id ring.NodeID) bool { return id == "n3" })
	if o := c.Ready(); len(o.Messages) != 0 {
		t.Fatalf("rerouted away from both of the blob's version managers: %v", o.Messages)
	}
	c.Reroute(func(id ring.NodeID) bool { return id != "n1" })
	o := c.Ready()
	if len(o.Messages) != 1 || !slices.Equal(o.Messages[0].Chain, []ring.NodeID{"n2", "n3"}) {
		t.Fatalf("reroute keeping a member of each group: sent %v, want a Forward on [n2 n3]", o.Messages)
	}
}

// TestReplicaForgetsInReleaseOrder: each released transaction is forgotten
// OutcomeRetentionTicks after its Ack, however many are retained, and a
// duplicate Forward in between is still answered from the record.
func TestReplicaForgetsInReleaseOrder(t *testing.T) {
	r, err := chain.NewReplica(chain.ReplicaConfig{ID: "n3", Stager: &fakeStager{log: new([]string)},
		RetransmitTicks: 3, OutcomeRetentionTicks: 10})
	if err != nil {
		t.Fatal(err)
	}
	settle := func(seq uint64) {
		t.Helper()
		if err := r.Step(fwd(seq, 2)); err != nil {
			t.Fatal(err)
		}
		m := ack(seq, 2)
		m.From = "n2"
		if err := r.Step(m); err != nil {
			t.Fatal(err)
		}
		r.Advance(r.Ready())
	}
	ticks := func(n, want int) {
		t.Helper()
		for range n {
			r.Tick()
		}
		if r.HasReady() {
			t.Fatalf("released transactions sent %v", r.Ready().Messages)
		}
		if got := r.Tracked(); got != want {
			t.Fatalf("tracking %d transactions, want %d", got, want)
		}
	}
	settle(1)
	ticks(5, 1)
	settle(2)
	ticks(4, 2)
	if err := r.Step(resent(1, 2)); err != nil {
		t.Fatal(err)
	}
	if o := r.Ready(); len(o.Messages) != 1 || o.Messages[0].Type != chain.MsgBackward || !o.Messages[0].Committed {
		t.Fatalf("duplicate Forward of a retained commit: sent %v, want its committed Backward", o.Messages)
	}
	r.Advance(r.Ready())
	ticks(1, 1) // c/1, acknowledged 10 ticks ago
	ticks(4, 1)
	ticks(1, 0) // c/2
}

// TestAdmissionKeepsChainsLive: two replicas with room for two records,
// each the head of two chains through the other, probing every
// transaction (their Forwards are repeats of transactions an earlier run
// may have seen). Admitting any Forward while a record was free let each
// fill its table with probes waiting on the other, which then dropped
// every Forward between them for good (docs/bugs.md row 41); with the
// admission rule every transaction finishes.
func TestAdmissionKeepsChainsLive(t *testing.T) {
	reps := map[ring.NodeID]*chain.Replica{}
	for _, id := range []ring.NodeID{"a", "b"} {
		r, err := chain.NewReplica(chain.ReplicaConfig{ID: id, Stager: &fakeStager{log: new([]string)},
			RetransmitTicks: 2, OutcomeRetentionTicks: 4, PendingMax: 1, TxnsMax: 2, ChainMembersMax: 2,
			EarlierRun: func(chain.TxnID) bool { return true }})
		if err != nil {
			t.Fatal(err)
		}
		reps[id] = r
	}
	chains := map[chain.TxnID][]ring.NodeID{id(1): {"a", "b"}, id(2): {"a", "b"}, id(3): {"b", "a"}, id(4): {"b", "a"}}
	replied := map[chain.TxnID]bool{}
	for round := 0; round < 100 && len(replied) < len(chains); round++ {
		for tx, members := range chains {
			if !replied[tx] { // the coordinator repeats its Forward
				m := chain.Message{Type: chain.MsgForward, From: "c", To: members[0], Txn: tx, Chain: members, Ops: ops1}
				if err := reps[members[0]].Step(m); err != nil {
					t.Fatal(err)
				}
			}
		}
		for busy := true; busy; {
			busy = false
			for _, r := range reps {
				o := r.Ready()
				r.Advance(o)
				for _, m := range o.Messages {
					busy = true
					if m.To != "c" {
						if err := reps[m.To].Step(m); err != nil {
							t.Fatal(err)
						}
						continue
					}
					if m.Type == chain.MsgReply {
						replied[m.Txn] = true
						if err := reps[m.From].Step(chain.Message{Type: chain.MsgAck, From: "c", To: m.From, Txn: m.Txn}); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
		}
		for _, r := range reps {
			r.Tick()
		}
	}
	if len(replied) < len(chains) {
		t.Fatalf("%d of %d transactions finished; tables hold a: %d, b: %d", len(replied), len(chains),
			reps["a"].Tracked(), reps["b"].Tracked())
	}
}
