package mvcc

import (
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
	_ chain.Stager = Stager{}
	_ chain.Staged = (*Pending)(nil)
)

// Prepare implements chain.Stager. The transaction ID is not needed: the
// returned Pending holds everything Commit and Abort use.
func (s Stager) Prepare(_ chain.TxnID, ops []txn.Op) (chain.Staged, error) {
	p, err := s.Store.TryPrepare(ops)
	if err != nil {
		return nil, err
	}
	return p, nil
}
