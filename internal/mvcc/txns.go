package mvcc

import (
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tyrstore/tyr/internal/errs"
)

// Transaction records: a commit made through a chain records its
// transaction ID in the same batch, so a member that restarts and loses its
// chain state still knows, for TxnRecordRetention, that it committed the
// transaction, and with what results (see "Restarts" in
// internal/chain/replica.go).
//
//	't' id -> format(1) payload
//
// Each record is queued for the collector under 'x' like a history record.

// prefixTxn keys transaction records.
const prefixTxn = 't'

// txnFormat is the format byte of a transaction record.
const txnFormat = 1

// TxnRecordRetention is how long a transaction record is kept. It must
// outlast the longest time a chain member may still be sent a Forward of a
// transaction (internal/node.ForwardAgeMax).
const TxnRecordRetention = 5 * time.Minute

// TxnIDBytesMax bounds a transaction ID.
const TxnIDBytesMax = 512

func txnKey(id string) []byte {
	k := make([]byte, 0, 1+len(id))
	k = append(k, prefixTxn)
	return append(k, id...)
}

func (s *Store) setTxn(b *pebble.Batch, id string, payload []byte) error {
	if id == "" || len(id) > TxnIDBytesMax {
		return fmt.Errorf("%w: transaction ID of %d bytes, want 1 to %d", errs.ErrInvalidArgument, len(id), TxnIDBytesMax)
	}
	k := txnKey(id)
	v := append([]byte{txnFormat}, payload...)
	deadline := s.opts.Now().Add(TxnRecordRetention)
	if err := b.Set(k, v, nil); err != nil {
		return err
	}
	return b.Set(histGCKey(deadline, k), nil, nil)
}

// RecordTxn adds to the commit a record that transaction id committed here,
// with payload (the caller's encoding of its results).
func (p *Pending) RecordTxn(id string, payload []byte) error {
	return p.store.setTxn(p.batch, id, payload)
}

// PutTxn records that transaction id committed here with payload, for a
// commit that changed nothing in this store (it passed through).
func (s *Store) PutTxn(id string, payload []byte) error {
	b := s.db.NewBatch()
	return commitBatch(b, s.setTxn(b, id, payload), s.opts.Sync)
}

// Txn returns the payload recorded for transaction id, and whether there is
// one.
func (s *Store) Txn(id string) ([]byte, bool, error) {
	v, closer, err := s.db.Get(txnKey(id))
	if err == pebble.ErrNotFound {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("%w: transaction record: %w", errs.ErrUnavailable, err)
	}
	defer closer.Close()
	if len(v) < 1 || v[0] != txnFormat {
		return nil, false, fmt.Errorf("%w: transaction record of %q, format %d", errs.ErrCorruption, id, firstByte(v))
	}
	return append([]byte(nil), v[1:]...), true, nil
}
