package mvcc

import (
	"errors"

	"github.com/tyrstore/tyr/internal/chain"
	"github.com/tyrstore/tyr/internal/txn"
)

// Member adapts a Store to a chain member.
type Member struct{ Store *Store }

// Prepare implements chain.Member.
func (m Member) Prepare(ops []txn.Op) (chain.Prepared, error) {
	p, err := m.Store.Prepare(ops)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Stager adapts a Store to a chain replica's storage. Its Prepare never
// waits: a blob locked by another staged transaction fails it with
// errs.ErrConflict (see Store.TryPrepare), as chain.Stager requires.
type Stager struct{ Store *Store }

var (
	_ chain.Stager  = Stager{}
	_ chain.Staged  = ChainStaged{}
	_ chain.Ordered = ChainStaged{}
)

// Prepare implements chain.Stager.
func (s Stager) Prepare(id chain.TxnID, ops []txn.Op) (chain.Staged, error) {
	p, err := s.Store.TryPrepare(ops)
	if err != nil {
		return nil, err
	}
	return ChainStaged{P: p, ID: id}, nil
}

// Committed implements chain.Stager from the store's transaction records.
func (s Stager) Committed(id chain.TxnID) ([]txn.Result, bool, error) {
	return CommittedTxn(s.Store, id)
}

// CommittedTxn looks transaction id up in store's transaction records.
func CommittedTxn(store *Store, id chain.TxnID) ([]txn.Result, bool, error) {
	return CommittedTxnString(store, id.String())
}

// CommittedTxnString is CommittedTxn for a transaction ID as recorded.
func CommittedTxnString(store *Store, id string) ([]txn.Result, bool, error) {
	payload, ok, err := store.Txn(id)
	if err != nil || !ok {
		return nil, false, err
	}
	results, err := txn.DecodeResults(payload)
	if err != nil {
		return nil, false, err
	}
	return results, true, nil
}

// ChainStaged is a Pending staged by a chain replica: its commit records
// the transaction ID with the results (see Store.Txn).
type ChainStaged struct {
	P  *Pending
	ID chain.TxnID
	// Clients are the client transaction IDs the commit carries, if any;
	// the commit records them too (see Store.Client).
	Clients []ClientPart
	// Later commits with CommitLater: the replica's edge syncs (see
	// chain.Output's MustSync).
	Later bool
}

// Commit implements chain.Staged. A commit queued behind others is rebased
// first (see order.go): its own results may change, and are recorded in
// place of the ones results holds for them.
func (s ChainStaged) Commit(results []txn.Result) error {
	if err := s.P.Rebase(); err != nil {
		if !errors.Is(err, ErrNotReady) {
			s.P.Abort()
		}
		return err
	}
	results = txn.MergeResults(s.P.Results(), results)
	if err := s.P.RecordTxn(s.ID.String(), txn.EncodeResults(results)); err != nil {
		s.P.Abort()
		return err
	}
	if len(s.Clients) > 0 {
		if err := s.P.RecordClients(s.Clients, s.ID.String()); err != nil {
			s.P.Abort()
			return err
		}
	}
	if s.Later {
		return s.P.CommitLater()
	}
	return s.P.Commit()
}

// Abort implements chain.Staged.
func (s ChainStaged) Abort() { s.P.Abort() }

// Ready implements chain.Ordered.
func (s ChainStaged) Ready() bool { return s.P.Ready() }

// Waits describes what the commit waits for, for the logs (see
// chain.Replica.Stalled).
func (s ChainStaged) Waits() string { return s.P.Waits() }

// Results implements chain.Staged.
func (s ChainStaged) Results() []txn.Result { return s.P.Results() }
