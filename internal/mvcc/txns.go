package mvcc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
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
// commit that changed nothing in this store (it passed through). Like
// Pending.CommitLater, it is durable once a later Sync returned.
func (s *Store) PutTxn(id string, payload []byte) error {
	b := s.db.NewBatch()
	return s.commitLater(b, s.setTxn(b, id, payload))
}

// commitLater commits b, built without error err, as CommitLater does a
// commit that holds no blob.
func (s *Store) commitLater(b *pebble.Batch, err error) error {
	if s.opts.Sync && err == nil {
		defer s.syncing.beginLater(nil)()
	}
	return commitBatch(b, err, false)
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

// Missed records: a chain member that restarted and lost its stage of a
// transaction that then committed (chain.ErrStageLost) records that it
// missed the commit, so that it can tell a copy waiting for that commit
// that its copy will never hold it (internal/rebalance.Lost): the commit
// is lost with every replica's stage that held it.
//
//	'l' id -> missedFormat(1)
//
// Each is collected after MissedRetention, like a transaction record.

// prefixMissed keys missed records.
const prefixMissed = 'l'

// missedFormat is the format byte of a missed record.
const missedFormat = 1

// MissedRetention is how long a missed record is kept: a copy that waits
// for the commit longer than this after the loss waits for good.
const MissedRetention = time.Hour

// PutMissed records that transaction id committed without this store's
// copy, its stage lost in a restart. Like PutTxn, it is durable once a
// later Sync returned.
func (s *Store) PutMissed(id string) error {
	if id == "" || len(id) > TxnIDBytesMax {
		return fmt.Errorf("%w: transaction ID of %d bytes, want 1 to %d", errs.ErrInvalidArgument, len(id), TxnIDBytesMax)
	}
	k := append([]byte{prefixMissed}, id...)
	b := s.db.NewBatch()
	err := errors.Join(b.Set(k, []byte{missedFormat}, nil), b.Set(histGCKey(s.opts.Now().Add(MissedRetention), k), nil, nil))
	return s.commitLater(b, err)
}

// Missed reports whether this store recorded that transaction id committed
// without its copy (PutMissed).
func (s *Store) Missed(id string) (bool, error) {
	v, closer, err := s.db.Get(append([]byte{prefixMissed}, id...))
	if err == pebble.ErrNotFound {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%w: missed record: %w", errs.ErrUnavailable, err)
	}
	defer closer.Close()
	if len(v) != 1 || v[0] != missedFormat {
		return false, fmt.Errorf("%w: missed record of %q, format %d", errs.ErrCorruption, id, firstByte(v))
	}
	return true, nil
}

// Client transaction records: a client may name its commit with an ID of
// its own (tyr.v1.CommitRequest.txn_id), so that it can learn the outcome
// when the answer is lost (internal/node/resolve.go). A member that commits
// such a commit records the client ID beside the chain transaction ID, in
// the same batch; a member asked for an outcome it has no record of fences
// the client ID, and never stages a commit carrying it afterwards.
//
//	'k' clientid -> format(1) kind(1) payload
//
// kind 1 (committed): payload is the chain transaction ID, whose 't' record
// holds the results. kind 2 (fenced): payload is one byte, 1 if the fence
// was vouched for (see internal/node.Verdict). kind 3 (committed, part of a
// combined commit): payload is the first op and the end of the client's
// ops in the commit (big-endian uint16s), then the chain transaction ID.
// Records are collected after TxnRecordRetention, like transaction
// records.
const prefixClient = 'k'

const (
	clientFormat       = 1
	clientCommitted    = 1
	clientFenced       = 2
	clientCommittedOps = 3
)

// ClientPart is a client transaction ID a commit carries, with the ops of
// the commit that are the client's: From to To, or all of them when To is
// 0. A combined commit carries several clients' ops, each with its own ID.
type ClientPart struct {
	ID       []byte
	From, To int
}

// ClientIDBytesMax bounds a client transaction ID.
const ClientIDBytesMax = 64

// ClientRecord is what a store recorded for a client transaction ID.
type ClientRecord struct {
	// Committed: a commit carrying the ID committed here as chain
	// transaction Txn; the client's ops are From to To of it, or all of
	// them when To is 0.
	Committed bool
	Txn       string
	From, To  int
	// Fenced: no commit carrying the ID may be staged here any more;
	// Vouched is what the fence recorded with it.
	Fenced  bool
	Vouched bool
}

func clientKey(id []byte) []byte {
	k := make([]byte, 0, 1+len(id))
	k = append(k, prefixClient)
	return append(k, id...)
}

func (s *Store) setClient(b *pebble.Batch, id []byte, kind byte, payload []byte) error {
	if len(id) == 0 || len(id) > ClientIDBytesMax {
		return fmt.Errorf("%w: client transaction ID of %d bytes, want 1 to %d", errs.ErrInvalidArgument, len(id), ClientIDBytesMax)
	}
	k := clientKey(id)
	v := append([]byte{clientFormat, kind}, payload...)
	if err := b.Set(k, v, nil); err != nil {
		return err
	}
	return b.Set(histGCKey(s.opts.Now().Add(TxnRecordRetention), k), nil, nil)
}

// RecordClients adds to the commit a record that the commit, chain
// transaction txnID, carries each of the client transaction IDs parts
// name. Call it after RecordTxn, which holds the results.
func (p *Pending) RecordClients(parts []ClientPart, txnID string) error {
	return p.store.setClients(p.batch, parts, txnID)
}

// PutClients records that the chain transaction txnID carrying the client
// transaction IDs parts name committed here, for a commit that changed
// nothing in this store (it passed through). Like PutTxn, it is durable
// once a later Sync returned.
func (s *Store) PutClients(parts []ClientPart, txnID string) error {
	b := s.db.NewBatch()
	return s.commitLater(b, s.setClients(b, parts, txnID))
}

func (s *Store) setClients(b *pebble.Batch, parts []ClientPart, txnID string) error {
	for _, p := range parts {
		var err error
		switch {
		case p.To == 0:
			err = s.setClient(b, p.ID, clientCommitted, []byte(txnID))
		case p.From < 0 || p.To <= p.From || p.To > math.MaxUint16:
			err = fmt.Errorf("%w: client ops %d to %d", errs.ErrInvalidArgument, p.From, p.To)
		default:
			payload := binary.BigEndian.AppendUint16(nil, uint16(p.From))
			payload = binary.BigEndian.AppendUint16(payload, uint16(p.To))
			err = s.setClient(b, p.ID, clientCommittedOps, append(payload, txnID...))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// FenceClient records durably (fsynced whatever the keyspace's sync) that
// no commit carrying client transaction ID client may be staged here. The
// caller has checked that there is no record of it and serializes this
// with its stages.
func (s *Store) FenceClient(client []byte, vouched bool) error {
	v := byte(0)
	if vouched {
		v = 1
	}
	b := s.db.NewBatch()
	return commitBatch(b, s.setClient(b, client, clientFenced, []byte{v}), true)
}

// Client returns what is recorded for client transaction ID client, and
// whether anything is, including a record written with a commit not yet
// synced (see Pending.CommitLater): a caller whose answer leaves the node
// calls Sync first.
func (s *Store) Client(client []byte) (ClientRecord, bool, error) {
	v, closer, err := s.db.Get(clientKey(client))
	if err == pebble.ErrNotFound {
		return ClientRecord{}, false, nil
	}
	if err != nil {
		return ClientRecord{}, false, fmt.Errorf("%w: client transaction record: %w", errs.ErrUnavailable, err)
	}
	defer closer.Close()
	switch {
	case len(v) >= 2 && v[0] == clientFormat && v[1] == clientCommitted:
		return ClientRecord{Committed: true, Txn: string(v[2:])}, true, nil
	case len(v) >= 6 && v[0] == clientFormat && v[1] == clientCommittedOps:
		from, to := int(binary.BigEndian.Uint16(v[2:])), int(binary.BigEndian.Uint16(v[4:]))
		if to > from {
			return ClientRecord{Committed: true, Txn: string(v[6:]), From: from, To: to}, true, nil
		}
	case len(v) == 3 && v[0] == clientFormat && v[1] == clientFenced:
		return ClientRecord{Fenced: true, Vouched: v[2] == 1}, true, nil
	}
	return ClientRecord{}, false, fmt.Errorf("%w: client transaction record %x of %d bytes, format %d",
		errs.ErrCorruption, client, len(v), firstByte(v))
}
