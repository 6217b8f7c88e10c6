package sim

import (
	"errors"
	"fmt"
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
	// staged through mvcc.Stager.
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

// nodeStore is a node's storage as the simulator sees it: the Stager its
// replica uses, and what the checkers read afterwards.
type nodeStore interface {
	chain.Stager
	// statusOf is where transaction id stands here; zero: never prepared.
	statusOf(id chain.TxnID) status
	// stagedCount is how many transactions hold locks here.
	stagedCount() int
	// storeAnomalies are contract breaches the store saw itself.
	storeAnomalies() []string
	// keyLog lists the transactions committed here on key, in commit order.
	keyLog(key string) []chain.TxnID
	// crash drops what the store staged and lets a restarted replica stage
	// again what it staged or aborted; commits stay.
	crash()
	// keyState is key's current content here. Its version is the
	// MemStore's commit count, which replicas agree on, or mvcc's version,
	// which each replica draws from the clock at its own Prepare.
	keyState(key string) (b blob, err error)
	close() error
}

// quietLogger drops Pebble's informational messages and panics on errors,
// which the simulator's in-memory databases never expect.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)         {}
func (quietLogger) Errorf(f string, args ...any) { panic(fmt.Sprintf("pebble: "+f, args...)) }
func (quietLogger) Fatalf(f string, args ...any) { panic(fmt.Sprintf("pebble: "+f, args...)) }

// simEpoch is virtual tick 0 as wall time; a tick is a millisecond.
var simEpoch = time.Unix(1_700_000_000, 0)

// mvccNode is a node backed by a real mvcc.Store. It wraps mvcc.Stager to
// skip the ops on keys the node does not store and to record, for the
// checkers, what the replica did with each transaction: the same history
// MemStore keeps.
type mvccNode struct {
	node   ring.NodeID
	owns   func(key string) bool
	db     *pebble.DB
	store  *mvcc.Store
	stager mvcc.Stager
	status map[chain.TxnID]status
	staged map[chain.TxnID]*mvccStaged
	logs   map[string][]chain.TxnID
	// anomalies are contract breaches seen by the wrapper, such as a second
	// Prepare of one transaction.
	anomalies []string
}

// newMVCCNode opens an mvcc.Store for node over a fresh in-memory Pebble
// database. now is the simulator's clock, so versions replay exactly.
func newMVCCNode(node ring.NodeID, owns func(key string) bool, now func() time.Time) (*mvccNode, error) {
	db, err := pebble.Open("db", &pebble.Options{
		FS: vfs.NewMem(), MemTableSize: 256 << 10, Logger: quietLogger{},
	})
	if err != nil {
		return nil, err
	}
	store, err := mvcc.Open(db, mvcc.Options{MVCC: true, Sync: false, Now: now})
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return &mvccNode{node: node, owns: owns, db: db, store: store, stager: mvcc.Stager{Store: store},
		status: map[chain.TxnID]status{}, staged: map[chain.TxnID]*mvccStaged{}, logs: map[string][]chain.TxnID{}}, nil
}

// Prepare implements chain.Stager.
func (s *mvccNode) Prepare(id chain.TxnID, ops []txn.Op) (chain.Staged, error) {
	if st, ok := s.status[id]; ok && st != statusLost {
		s.anomalies = append(s.anomalies, fmt.Sprintf("%s: second Prepare of %s, already %s", s.node, id, st))
		return nil, fmt.Errorf("%w: %s prepared twice", errs.ErrConflict, id)
	}
	var local []txn.Op
	var index []int // index[j] is local[j]'s position in ops
	var keys []string
	for i, op := range ops {
		if !s.owns(op.Key) {
			continue
		}
		local = append(local, op)
		index = append(index, i)
		if !slices.Contains(keys, op.Key) {
			keys = append(keys, op.Key)
		}
	}
	results := make([]txn.Result, len(ops))
	p := &mvccStaged{node: s, id: id, keys: keys, results: results}
	if len(local) > 0 {
		inner, err := s.stager.Prepare(id, local)
		if err != nil {
			return nil, err
		}
		for j, r := range inner.Results() {
			results[index[j]] = r
		}
		p.inner = inner
	}
	s.status[id] = statusStaged
	s.staged[id] = p
	return p, nil
}

func (s *mvccNode) crash() {
	for _, p := range s.staged {
		if p.inner != nil {
			p.inner.Abort()
		}
	}
	clear(s.staged)
	loseUncommitted(s.status)
}

type mvccStaged struct {
	node    *mvccNode
	id      chain.TxnID
	keys    []string     // in first-touched order, which is deterministic
	inner   chain.Staged // nil when the node stores none of the keys
	results []txn.Result
}

func (p *mvccStaged) finish(st status) {
	s := p.node
	if s.status[p.id] != statusStaged {
		s.anomalies = append(s.anomalies, fmt.Sprintf("%s: %s of %s, which is %s", s.node, st, p.id, s.status[p.id]))
	}
	s.status[p.id] = st
	delete(s.staged, p.id)
}

// Committed implements chain.Stager.
func (s *mvccNode) Committed(id chain.TxnID) ([]txn.Result, bool, error) {
	return s.stager.Committed(id)
}

// Commit implements chain.Staged.
func (p *mvccStaged) Commit(results []txn.Result) error {
	p.finish(statusCommitted)
	if p.inner == nil {
		if err := p.node.store.PutTxn(p.id.String(), txn.EncodeResults(results)); err != nil {
			return err
		}
	} else if err := p.inner.Commit(results); err != nil {
		return err
	}
	for _, k := range p.keys {
		p.node.logs[k] = append(p.node.logs[k], p.id)
	}
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

func (s *mvccNode) statusOf(id chain.TxnID) status { return s.status[id] }

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

func (s *mvccNode) close() error { return s.db.Close() }
