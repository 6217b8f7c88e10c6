package node

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tyrstore/tyr/api/peerpb"
	"github.com/tyrstore/tyr/internal/chain"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/mvcc"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/txn"
)

// Outcome resolution: a client whose commit's answer was lost (the
// connection broke, or the node coordinating the commit died) learns the
// outcome from any node, by the ID it gave the commit (the client ID:
// tyr.v1.CommitRequest.txn_id, 16 bytes, the client's clock in unix
// nanoseconds then 8 random bytes).
//
// The client ID travels on every Forward of every attempt of the commit
// (the coordinator may try it several times under new chain transaction
// IDs, one after another, each after the previous one aborted). A member
// that stages an attempt marks the client ID pending until the attempt's
// commit is recorded here, with the client ID beside the chain transaction
// ID (mvcc.Store.Client), or until it aborts. Resolution asks every version
// manager of the commit's blobs what it knows (resolveHere):
//
//   - Committed: it recorded a commit carrying the ID.
//   - Pending: an attempt is staged here and not yet committed or aborted.
//   - Fenced: neither; before answering, it records durably that it will
//     never stage a commit carrying the ID. The fence is vouched if the
//     node held its read lease without a break since before any attempt of
//     the commit could have been staged (see vouches).
//   - Unknown: the ID's time is outside the windows below; nothing fenced.
//
// Resolve combines the answers: committed if any member recorded the
// commit; pending if any has it staged; aborted only if every version
// manager the resolving node sees alive answered, each answer is a fence,
// and at least one fence is vouched; otherwise unknown.
//
// Why aborted is safe. A vouched member V held its read lease throughout,
// and a member leaves a node out of chains only after that node's lease
// ran out (lease.go), so V was in every chain of every attempt: every
// chain holds every live version manager of every blob the commit touches
// (Chain), and a re-execution drops only members taken for dead. The
// forward pass reaches every member before the tail commits, so an attempt
// that committed, or may still commit, was staged at V before the fence:
// V would have answered committed or pending (the stage, the record and
// the fence are serialized by clients.mu). An attempt not yet staged at V
// is refused there. The other live version managers are fenced too, so
// that an attempt already past V cannot commit by being re-executed
// without V should V die later: it would be pending at one of them.
//
// Windows (on each node's own clock; the client's clock must be within
// ClientClockSkewMax of the servers'):
//
//   - a coordinator takes a commit, and begins each attempt of it, only
//     while its client time is within ClientClockSkewMax of its clock;
//   - a member stages an attempt only while now is within
//     [client time - ClientClockSkewMax, client time + StageWindow];
//   - a member answers (and fences) only until client time + ResolveWindow,
//     and not before client time - ClientClockSkewMax. Commit and fence
//     records are kept mvcc.TxnRecordRetention after they are written,
//     which is after client time - ClientClockSkewMax, so every record a
//     resolution may need is still there, and a fence outlives every stage
//     it must refuse.
//
// Limits: a vouched member is one that ran and held its lease since before
// the commit, so a commit whose version managers all restarted or lost
// their lease since resolves only to committed or unknown; resolution
// after ResolveWindow is unknown; a version manager whose data directory
// is lost takes its records with it. A member the resolving node takes for
// dead is not asked: if it is in fact alive and partitioned from the
// resolving node, holds an attempt staged, and the coordinator is alive
// and re-executes the attempt without every fenced member (all of them
// died meanwhile), that attempt could commit after an aborted answer.
const (
	// ClientIDBytes is the length of a client ID.
	ClientIDBytes = 16
	// ClientClockSkewMax is how far a client's clock may be from the
	// servers'. Longer makes a node vouch only for commits begun longer
	// after its start or its last lease break.
	ClientClockSkewMax = 30 * time.Second
	// StageWindow is how long after its client time a commit may be
	// staged: it covers the skew, the coordinator's retries (twice
	// CommitRetryMax for an atomic op across chunks) and ForwardAgeMax.
	StageWindow = 2 * time.Minute
	// ResolveWindow is how long after its client time a commit's outcome
	// can be resolved.
	ResolveWindow = 3 * time.Minute
	// resolveCallTimeout bounds one member's answer.
	resolveCallTimeout = 2 * time.Second
)

// Verdict is one member's answer about a client ID (see the top of this
// file). The values travel between nodes and are append-only.
type Verdict uint8

const (
	VerdictCommitted Verdict = 1 + iota
	VerdictPending
	VerdictFenced
	VerdictUnknown
)

// Outcome is the combined answer of Resolve.
type Outcome uint8

const (
	OutcomeUnknown Outcome = iota
	OutcomeCommitted
	OutcomeAborted
	OutcomePending
)

// Resolution is the outcome of a commit a client named.
type Resolution struct {
	Outcome Outcome
	// Results are the op results when committed, read checks included.
	Results []txn.Result
	// Detail says why the outcome is pending or unknown.
	Detail string
}

// ClientTime is the client's clock reading a client ID carries.
func ClientTime(client []byte) (time.Time, error) {
	if len(client) != ClientIDBytes {
		return time.Time{}, fmt.Errorf("%w: client transaction ID of %d bytes, want %d", errs.ErrInvalidArgument, len(client), ClientIDBytes)
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(client))), nil
}

// clientPartBytes is the size of one entry of a combined commit's client
// IDs (clientParts).
const clientPartBytes = ClientIDBytes + 4

// clientParts decodes the client IDs a commit carries: nil for none; a
// single client ID (ClientIDBytes) for a commit of one client's ops; for a
// commit combining several clients' ops (combine.go), entries of
// clientPartBytes: the ID, then the first op and the end of its ops
// (big-endian uint16s), in op order.
func clientParts(b []byte) ([]mvcc.ClientPart, error) {
	switch {
	case len(b) == 0:
		return nil, nil
	case len(b) == ClientIDBytes:
		return []mvcc.ClientPart{{ID: b}}, nil
	case len(b)%clientPartBytes != 0:
		return nil, fmt.Errorf("%w: client transaction IDs of %d bytes, want %d or a multiple of %d",
			errs.ErrInvalidArgument, len(b), ClientIDBytes, clientPartBytes)
	}
	parts := make([]mvcc.ClientPart, 0, len(b)/clientPartBytes)
	end := 0
	for e := b; len(e) > 0; e = e[clientPartBytes:] {
		p := mvcc.ClientPart{ID: e[:ClientIDBytes:ClientIDBytes],
			From: int(binary.BigEndian.Uint16(e[ClientIDBytes:])), To: int(binary.BigEndian.Uint16(e[ClientIDBytes+2:]))}
		if p.From < end || p.To <= p.From {
			return nil, fmt.Errorf("%w: client transaction ID %d covers ops %d to %d", errs.ErrInvalidArgument, len(parts), p.From, p.To)
		}
		parts, end = append(parts, p), p.To
	}
	return parts, nil
}

// encodeClientParts encodes the client IDs of a combined commit for
// clientParts.
func encodeClientParts(parts []mvcc.ClientPart) []byte {
	b := make([]byte, 0, len(parts)*clientPartBytes)
	for _, p := range parts {
		b = append(b, p.ID...)
		b = binary.BigEndian.AppendUint16(b, uint16(p.From))
		b = binary.BigEndian.AppendUint16(b, uint16(p.To))
	}
	return b
}

// checkClientIDs is CheckClientID for each client ID a commit carries.
func checkClientIDs(client []byte, now time.Time) error {
	parts, err := clientParts(client)
	if err != nil {
		return err
	}
	for _, p := range parts {
		if err := CheckClientID(p.ID, now); err != nil {
			return err
		}
	}
	return nil
}

// CheckClientID checks that a commit's client ID is well formed and that
// its time is within ClientClockSkewMax of now.
func CheckClientID(client []byte, now time.Time) error {
	tc, err := ClientTime(client)
	if err != nil {
		return err
	}
	if d := now.Sub(tc).Abs(); d > ClientClockSkewMax {
		return fmt.Errorf("%w: the client transaction ID's time is %v away from the server's clock, above %v (is the client's clock set?)",
			errs.ErrInvalidArgument, d.Round(time.Second), ClientClockSkewMax)
	}
	return nil
}

// clients tracks, per keyspace and client ID, the attempts staged here and
// not yet recorded or aborted. mu also serializes each stage's check of the
// store's record with each fence (Invariant: a client ID is never both
// fenced and staged here).
type clients struct {
	mu      sync.Mutex
	pending map[string]map[chain.TxnID]bool // keyspace NUL client ID -> attempts
}

func clientsKey(keyspace string, client []byte) string { return keyspace + "\x00" + string(client) }

// stage marks attempt id of the commit staged here under each client ID
// it carries (client, see clientParts), unless one is fenced or recorded
// here, or outside the stage window. The error is a refusal of the
// attempt, which then marks nothing.
func (c *clients) stage(store *mvcc.Store, keyspace string, client []byte, id chain.TxnID, now time.Time) error {
	parts, err := clientParts(client)
	if err != nil {
		return err
	}
	for _, p := range parts {
		tc, err := ClientTime(p.ID)
		if err != nil {
			return err
		}
		if now.Before(tc.Add(-ClientClockSkewMax)) || now.After(tc.Add(StageWindow)) {
			return fmt.Errorf("%w: commit's client time %v is outside this member's stage window", errs.ErrConflict, tc.UTC())
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range parts {
		rec, ok, err := store.Client(p.ID)
		switch {
		case err != nil:
			return err
		case ok && rec.Fenced:
			return fmt.Errorf("%w: the commit was declared aborted by an outcome resolution", errs.ErrConflict)
		case ok:
			return fmt.Errorf("%w: a commit with this client transaction ID already committed", errs.ErrConflict)
		}
	}
	if c.pending == nil {
		c.pending = map[string]map[chain.TxnID]bool{}
	}
	for _, p := range parts {
		k := clientsKey(keyspace, p.ID)
		if c.pending[k] == nil {
			c.pending[k] = map[chain.TxnID]bool{}
		}
		c.pending[k][id] = true
	}
	return nil
}

// done ends attempt id's stage: it aborted, or its commit is recorded.
func (c *clients) done(keyspace string, client []byte, id chain.TxnID) {
	parts, _ := clientParts(client) // stage accepted it
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range parts {
		k := clientsKey(keyspace, p.ID)
		delete(c.pending[k], id)
		if len(c.pending[k]) == 0 {
			delete(c.pending, k)
		}
	}
}

// clientStaged is a Staged of a commit carrying a client ID: it ends the
// client ID's stage here once its commit is recorded or it aborted. A
// Commit that fails leaves the stage in place, so this node never fences
// an ID whose commit it may yet record (or failed to record).
type clientStaged struct {
	chain.Staged
	n        *Node
	keyspace string
	client   []byte
	id       chain.TxnID
}

func (s clientStaged) Commit(results []txn.Result) error {
	err := s.Staged.Commit(results)
	if err == nil {
		s.n.clients.done(s.keyspace, s.client, s.id)
	}
	return err
}

func (s clientStaged) Abort() {
	s.Staged.Abort()
	s.n.clients.done(s.keyspace, s.client, s.id)
}

// Unwrap lets the chain see what the Staged is (chain.Wrapper): ordered,
// passing through, what it waits for.
func (s clientStaged) Unwrap() chain.Staged { return s.Staged }

// heldSince is when this node's read lease began holding without a break
// since, or the zero time if it does not hold now.
func (n *Node) heldSince() time.Time {
	if n.cfg.LeaseDuration < 0 {
		return n.started
	}
	if !n.leaseHeld() || !n.leaseWasHeld.Load() {
		return time.Time{}
	}
	return time.Unix(0, n.leaseSince.Load())
}

// vouches reports whether this node was in every chain that may have
// carried an attempt of a commit with client time tc: it has held its
// read lease without a break since before the earliest such attempt
// could begin (ClientClockSkewMax before tc, and ClockSkewMax more for the
// coordinator's clock).
func (n *Node) vouches(tc time.Time) bool {
	since := n.heldSince()
	return !since.IsZero() && since.Before(tc.Add(-ClientClockSkewMax-ClockSkewMax))
}

// resolveHere is this node's answer about client ID client in keyspace
// (see the top of this file).
func (n *Node) resolveHere(keyspace string, client []byte) (v Verdict, results []txn.Result, vouched bool, detail string, err error) {
	tc, err := ClientTime(client)
	if err != nil {
		return 0, nil, false, "", err
	}
	ks, err := n.cfg.Engine.Acquire(keyspace)
	if err != nil {
		return 0, nil, false, "", err
	}
	defer ks.Release()
	n.clients.mu.Lock()
	defer n.clients.mu.Unlock()
	if len(n.clients.pending[clientsKey(keyspace, client)]) > 0 {
		return VerdictPending, nil, false, fmt.Sprintf("staged on %s", n.self), nil
	}
	// The verdict leaves the node: the commit record it rests on must be
	// durable (see sync.go).
	if err := ks.Store.Sync(); err != nil {
		return 0, nil, false, "", err
	}
	rec, ok, err := ks.Store.Client(client)
	if err != nil {
		return 0, nil, false, "", err
	}
	if ok && rec.Committed {
		results, found, err := mvcc.CommittedTxnString(ks.Store, rec.Txn)
		if err != nil {
			return 0, nil, false, "", err
		}
		if !found {
			return VerdictUnknown, nil, false, fmt.Sprintf("%s recorded the commit, but its results are collected", n.self), nil
		}
		if rec.To > 0 {
			// A combined commit: the client's ops are a run of its ops.
			if rec.To > len(results) {
				return 0, nil, false, "", fmt.Errorf("%w: client record of ops %d to %d of %s, which has %d results",
					errs.ErrCorruption, rec.From, rec.To, rec.Txn, len(results))
			}
			results = results[rec.From:rec.To]
		}
		return VerdictCommitted, results, false, "", nil
	}
	if ok {
		return VerdictFenced, nil, rec.Vouched || n.vouches(tc), "", nil
	}
	now := time.Now()
	if now.After(tc.Add(ResolveWindow)) {
		return VerdictUnknown, nil, false, fmt.Sprintf("the commit is older than %v", ResolveWindow), nil
	}
	if now.Before(tc.Add(-ClientClockSkewMax)) {
		return VerdictUnknown, nil, false, fmt.Sprintf("the commit's client time is ahead of %s's clock by more than %v", n.self, ClientClockSkewMax), nil
	}
	vouched = n.vouches(tc)
	if err := ks.Store.FenceClient(client, vouched); err != nil {
		return 0, nil, false, "", err
	}
	return VerdictFenced, nil, vouched, "", nil
}

// Resolve implements peerpb.PeerServer: this node's answer about a client
// ID.
func (n *Node) Resolve(_ context.Context, req *peerpb.PeerResolveRequest) (*peerpb.PeerResolveResponse, error) {
	v, results, vouched, detail, err := n.resolveHere(req.GetKeyspace(), req.GetClientTxn())
	if err != nil {
		return nil, statusOf(err)
	}
	resp := &peerpb.PeerResolveResponse{Verdict: uint32(v), Vouched: vouched, Detail: detail}
	if v == VerdictCommitted {
		resp.Results = txn.EncodeResults(results)
	}
	return resp, nil
}

// answer is one version manager's answer to Resolve.
type answer struct {
	id      ring.NodeID
	verdict Verdict
	results []txn.Result
	vouched bool
	detail  string
	err     error
}

// ResolveCommit finds the outcome of the commit of ops on keyspace (with
// replication rf) that its client named client, from the answers of the
// version managers of its blobs (see the top of this file).
func (n *Node) ResolveCommit(ctx context.Context, keyspace string, rf int, client []byte, ops []txn.Op) (Resolution, error) {
	if _, err := ClientTime(client); err != nil {
		return Resolution{}, err
	}
	pl, err := n.Placement(keyspace, rf)
	if err != nil {
		return Resolution{}, err
	}
	var members []ring.NodeID
	seen := map[ring.NodeID]bool{}
	for _, op := range ops {
		vms, err := pl.vms(op.Key)
		if err != nil {
			return Resolution{}, fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
		}
		for _, id := range vms {
			if !seen[id] {
				seen[id] = true
				members = append(members, id)
			}
		}
	}
	answers := make([]answer, len(members))
	var wg sync.WaitGroup
	for i, id := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = n.ask(ctx, keyspace, id, client)
		}()
	}
	wg.Wait()
	return n.combine(answers), nil
}

// ask gets member id's answer.
func (n *Node) ask(ctx context.Context, keyspace string, id ring.NodeID, client []byte) answer {
	a := answer{id: id}
	if id == n.self {
		a.verdict, a.results, a.vouched, a.detail, a.err = n.resolveHere(keyspace, client)
		return a
	}
	c, err := n.peerClient(id)
	if err != nil {
		a.err = err
		return a
	}
	ctx, cancel := context.WithTimeout(ctx, resolveCallTimeout)
	defer cancel()
	resp, err := c.Resolve(ctx, &peerpb.PeerResolveRequest{Keyspace: keyspace, ClientTxn: client})
	if err != nil {
		a.err = err
		return a
	}
	a.verdict, a.vouched, a.detail = Verdict(resp.GetVerdict()), resp.GetVouched(), resp.GetDetail()
	if a.verdict == VerdictCommitted {
		if a.results, err = txn.DecodeResults(resp.GetResults()); err != nil {
			a.err = err
		}
	}
	return a
}

// unheld returns the index of the first result marked Unheld, or -1: a
// committed outcome's results must come from members that hold the ops'
// chunks, and a value marked Unheld is a zero no holder computed.
func unheld(results []txn.Result) int {
	return slices.IndexFunc(results, func(r txn.Result) bool { return r.Unheld })
}

// combine turns the version managers' answers into the outcome (see the
// top of this file). Invariant: aborted only if every member this node
// sees alive answered with a fence and one of the fences is vouched.
func (n *Node) combine(answers []answer) Resolution {
	var committed []txn.Result
	found := false
	for _, a := range answers {
		if a.err == nil && a.verdict == VerdictCommitted {
			if !found {
				committed, found = a.results, true
			} else {
				// Each member recorded its view of the results; values it
				// could not compute are taken from another's.
				committed = txn.MergeResults(committed, a.results)
			}
		}
	}
	if found {
		if i := unheld(committed); i >= 0 {
			// Every member that answered committed recorded a value it did
			// not compute; the one that did was not asked or did not answer.
			n.cfg.Log.Error("resolution: committed, but no holder computed a result among the members that answered",
				"op", i, "answers", fmt.Sprint(answers))
			return Resolution{Outcome: OutcomeUnknown, Detail: fmt.Sprintf("committed, but no member that answered holds the result of op %d", i)}
		}
		return Resolution{Outcome: OutcomeCommitted, Results: committed}
	}
	for _, a := range answers {
		if a.err == nil && a.verdict == VerdictPending {
			return Resolution{Outcome: OutcomePending, Detail: a.detail}
		}
	}
	vouched := false
	for _, a := range answers {
		switch {
		case a.err != nil && (a.id == n.self || n.cfg.Cluster.Alive(a.id)):
			return Resolution{Outcome: OutcomeUnknown, Detail: fmt.Sprintf("version manager %s did not answer: %v", a.id, a.err)}
		case a.err != nil:
			// Taken for dead: it may have been left out of chains, and
			// a vouched member covers what it took part in.
		case a.verdict != VerdictFenced:
			return Resolution{Outcome: OutcomeUnknown, Detail: fmt.Sprintf("version manager %s: %s", a.id, a.detail)}
		case a.vouched:
			vouched = true
		}
	}
	if !vouched {
		return Resolution{Outcome: OutcomeUnknown,
			Detail: "no version manager of the commit's blobs held its read lease without a break since the commit began (restarted or cut off)"}
	}
	return Resolution{Outcome: OutcomeAborted}
}

// clientMember is the one member of a chain of this node alone (a ring of
// one node) for a commit a client named: it stages like the chain's
// members do, and its commit records the client ID under a transaction ID
// of its own.
type clientMember struct {
	n        *Node
	keyspace string
	store    *mvcc.Store
	client   []byte
}

func (m clientMember) Prepare(ops []txn.Op) (chain.Prepared, error) {
	id := chain.TxnID{Coordinator: m.n.self + "/local", Seq: uint64(time.Now().UnixNano())}
	if err := m.n.clients.stage(m.store, m.keyspace, m.client, id, time.Now()); err != nil {
		return nil, err
	}
	p, err := m.store.Prepare(ops)
	if err != nil {
		m.n.clients.done(m.keyspace, m.client, id)
		return nil, err
	}
	return clientPrepared{Pending: p, m: m, id: id}, nil
}

type clientPrepared struct {
	*mvcc.Pending
	m  clientMember
	id chain.TxnID
}

func (p clientPrepared) Commit() error {
	err := p.RecordTxn(p.id.String(), txn.EncodeResults(p.Results()))
	if err == nil {
		var parts []mvcc.ClientPart
		if parts, err = clientParts(p.m.client); err == nil {
			err = p.RecordClients(parts, p.id.String())
		}
	}
	if err != nil {
		p.Abort()
		return err
	}
	if err := p.Pending.Commit(); err != nil {
		return err
	}
	p.m.n.clients.done(p.m.keyspace, p.m.client, p.id)
	return nil
}

func (p clientPrepared) Abort() {
	p.Pending.Abort()
	p.m.n.clients.done(p.m.keyspace, p.m.client, p.id)
}
