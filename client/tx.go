package client

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/txn"
)

// Tx is an optimistic transaction over the blobs of one keyspace.
//
// Reads go to the server at once; everything else (writes, appends,
// truncates, creates, deletes, atomics, compare-and-swaps) is buffered and
// sent in one commit by Commit. The first read of a blob fixes the version
// the transaction reads it at: later reads of that blob in the transaction
// see that version (repeatable reads) with the transaction's own buffered
// ops applied on top. Commit sends the ops together with one read check per
// blob read, and the server applies them only if none of those blobs changed
// since (serializable); otherwise Commit fails with ErrConflict and nothing
// changes, and the transaction may be run again (see RunTx). A transaction
// that only reads is validated the same way by Commit.
//
// Limits: at most OpsPerTxMax buffered ops and ReadChecksMax blobs read. A
// transaction must finish within the server's version retention (5 minutes
// by default): a repeated read of a version older than that fails with
// ErrConflict. Reads at an older version need MVCC on the keyspace; without
// it a blob changed under the transaction also fails the read with
// ErrConflict. A Tx is not safe for concurrent use.
type Tx struct {
	c       *Client
	ks      string
	ops     []Op
	reads   map[string]txRead
	err     error // sticky error of a buffering call
	done    bool
	results []OpResult
}

// txRead is the version (0: absent) and size at which a blob is read.
type txRead struct{ version, size uint64 }

// Begin starts a transaction on keyspace ks. It sends nothing.
func (c *Client) Begin(ks string) *Tx {
	return &Tx{c: c, ks: ks, reads: map[string]txRead{}}
}

// view returns n bytes of key from off as the transaction sees them after
// its first upto buffered ops, zero-padded, and the blob's size and
// existence then. The first read of a blob reads its newest version and pins
// that version (the response carries it) in the same request; later reads
// ask for the pinned version.
func (tx *Tx) view(ctx context.Context, key string, off uint64, n int, upto int) ([]byte, uint64, bool, error) {
	buf := make([]byte, n)
	r, pinned := tx.reads[key]
	if !pinned && len(tx.reads) >= ReadChecksMax {
		return nil, 0, false, &Error{Class: ErrTooLarge,
			Message: fmt.Sprintf("transaction reads more than %d blobs", ReadChecksMax)}
	}
	if !pinned || (r.version != 0 && off < r.size && n > 0) {
		resp, err := tx.c.readRPC(ctx, &tyrpb.ReadRequest{Keyspace: []byte(tx.ks), Key: []byte(key),
			Offset: off, Length: uint64(n), Version: r.version, Consistent: !pinned, Use: !pinned})
		err = fromStatus(err)
		switch {
		case !pinned && errors.Is(err, ErrNotFound):
			r = txRead{} // absent: the commit checks it stays absent
		case err != nil:
			return nil, 0, false, err
		default:
			if !pinned {
				r = txRead{version: resp.GetVersion(), size: resp.GetSize()}
			}
			copy(buf, resp.GetData())
		}
		tx.reads[key] = r
	}
	exists, size := r.version != 0, r.size
	put := func(at uint64, data []byte) {
		if len(data) == 0 {
			return
		}
		end := at + uint64(len(data))
		if lo, hi := max(at, off), min(end, off+uint64(n)); lo < hi {
			copy(buf[lo-off:hi-off], data[lo-at:hi-at])
		}
		size = max(size, end)
	}
	for i, op := range tx.ops[:upto] {
		if string(op.pb.GetKey()) != key {
			continue
		}
		switch k := op.pb.GetKind().(type) {
		case *tyrpb.Op_Create:
			exists = true
		case *tyrpb.Op_Write:
			exists = true
			put(k.Write.GetOffset(), k.Write.GetData())
		case *tyrpb.Op_Append:
			exists = true
			put(size, k.Append.GetData())
		case *tyrpb.Op_Truncate:
			if t := k.Truncate.GetSize(); t < size {
				if t < off+uint64(n) {
					clear(buf[max(t, off)-off:])
				}
			}
			size = k.Truncate.GetSize()
		case *tyrpb.Op_Delete:
			exists, size = false, 0
			clear(buf)
		case *tyrpb.Op_Atomic:
			a := k.Atomic
			w := int(a.GetWidth())
			if w != 1 && w != 2 && w != 4 && w != 8 {
				continue // the commit will be refused
			}
			cur, _, _, err := tx.view(ctx, key, a.GetOffset(), w, i)
			if err != nil {
				return nil, 0, false, err
			}
			var le [8]byte
			copy(le[:], cur)
			v := txn.AtomicFunc(a.GetFunc()).Apply(w, binary.LittleEndian.Uint64(le[:]), a.GetOperand())
			binary.LittleEndian.PutUint64(le[:], v)
			put(a.GetOffset(), le[:w])
		case *tyrpb.Op_Cas:
			cs := k.Cas
			cur, _, _, err := tx.view(ctx, key, cs.GetOffset(), len(cs.GetExpected()), i)
			if err != nil {
				return nil, 0, false, err
			}
			if bytes.Equal(cur, cs.GetExpected()) && len(cs.GetData()) == len(cur) {
				put(cs.GetOffset(), cs.GetData())
			}
		}
	}
	return buf, size, exists, nil
}

// Read returns up to n bytes (at most PayloadBytesMax) of blob key from off,
// as the transaction sees it: the blob at the version of the transaction's
// first read of it, with the transaction's buffered ops applied. It fails
// with ErrNotFound if the blob does not exist in that view; the absence is
// still checked at commit.
func (tx *Tx) Read(ctx context.Context, key string, off, n uint64) ([]byte, error) {
	if err := tx.usable(); err != nil {
		return nil, err
	}
	if n > PayloadBytesMax {
		return nil, &Error{Class: ErrTooLarge, Message: fmt.Sprintf("transaction read of %d bytes, above %d", n, PayloadBytesMax)}
	}
	buf, size, exists, err := tx.view(ctx, key, off, int(n), len(tx.ops))
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, &Error{Class: ErrNotFound, Message: fmt.Sprintf("blob %q not found (in transaction)", key)}
	}
	if off >= size {
		return []byte{}, nil
	}
	return buf[:min(n, size-off)], nil
}

// Size returns the size of blob key as the transaction sees it (see Read).
func (tx *Tx) Size(ctx context.Context, key string) (uint64, error) {
	if err := tx.usable(); err != nil {
		return 0, err
	}
	_, size, exists, err := tx.view(ctx, key, 0, 0, len(tx.ops))
	if err != nil {
		return 0, err
	}
	if !exists {
		return 0, &Error{Class: ErrNotFound, Message: fmt.Sprintf("blob %q not found (in transaction)", key)}
	}
	return size, nil
}

func (tx *Tx) usable() error {
	if tx.done {
		return &Error{Class: ErrInvalidArgument, Message: "transaction already committed or rolled back"}
	}
	return tx.err
}

// Do buffers ops for the commit. Their data must not change afterwards.
func (tx *Tx) Do(ops ...Op) error {
	if err := tx.usable(); err != nil {
		return err
	}
	if len(tx.ops)+len(ops) > OpsPerTxMax {
		tx.err = &Error{Class: ErrTooLarge, Message: fmt.Sprintf("transaction of more than %d ops", OpsPerTxMax)}
		return tx.err
	}
	tx.ops = append(tx.ops, ops...)
	return nil
}

// Write buffers a write that creates a missing blob. Errors of the
// buffering calls (too many ops) are returned by Commit.
func (tx *Tx) Write(key string, off uint64, data []byte) {
	_ = tx.Do(WriteOp(key, off, slices.Clone(data), true))
}

// Append buffers an append that creates a missing blob.
func (tx *Tx) Append(key string, data []byte) { _ = tx.Do(AppendOp(key, slices.Clone(data), true)) }

// Truncate buffers a truncate.
func (tx *Tx) Truncate(key string, size uint64) { _ = tx.Do(TruncateOp(key, size)) }

// Create buffers a create (the commit fails with ErrExists if the blob
// exists).
func (tx *Tx) Create(key string) { _ = tx.Do(CreateOp(key)) }

// Delete buffers a delete.
func (tx *Tx) Delete(key string) { _ = tx.Do(DeleteOp(key)) }

// Atomic buffers an AtomicOp; its new value is in Results after Commit.
func (tx *Tx) Atomic(key string, off uint64, width int, fn AtomicFunc, operand uint64) {
	_ = tx.Do(AtomicOp(key, off, width, fn, operand))
}

// CAS buffers a CASOp.
func (tx *Tx) CAS(key string, off uint64, expected, data []byte) {
	_ = tx.Do(CASOp(key, off, slices.Clone(expected), slices.Clone(data)))
}

// Commit sends the buffered ops with the read checks in one commit. It
// fails with ErrConflict, changing nothing, when a blob the transaction read
// changed since it was read (or a compare-and-swap failed). A transaction
// with neither ops nor reads commits without a request.
func (tx *Tx) Commit(ctx context.Context) error {
	if err := tx.usable(); err != nil {
		return err
	}
	tx.done = true
	if len(tx.ops) == 0 && len(tx.reads) == 0 {
		return nil
	}
	keys := make([]string, 0, len(tx.reads))
	for k := range tx.reads {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	checks := make([]*tyrpb.ReadCheck, len(keys))
	for i, k := range keys {
		checks[i] = &tyrpb.ReadCheck{Key: []byte(k), Version: tx.reads[k].version}
	}
	results, err := tx.c.commit(ctx, tx.ks, tx.ops, checks, true)
	if err != nil {
		return err
	}
	tx.results = results
	return nil
}

// Results returns the outcome of each buffered op after a successful Commit.
func (tx *Tx) Results() []OpResult { return tx.results }

// Rollback drops the transaction; nothing was sent but reads. It tells the
// server the versions the transaction read are no longer in use, so they
// may be collected before the read timeout (a best-effort round trip of at
// most rollbackTimeout; see ReadRequest.use).
func (tx *Tx) Rollback() {
	if tx.done {
		return
	}
	tx.done = true
	tx.ops = nil
	if len(tx.reads) == 0 {
		return
	}
	checks := make([]*tyrpb.ReadCheck, 0, len(tx.reads))
	for k, r := range tx.reads {
		checks = append(checks, &tyrpb.ReadCheck{Key: []byte(k), Version: r.version})
	}
	tx.c.release(tx.ks, checks)
}

// rollbackTimeout bounds the round trip that releases a dropped
// transaction's versions.
const rollbackTimeout = 2 * time.Second

// release ends the uses of the versions in checks: a commit of those read
// checks alone changes nothing, and each version manager it passes
// releases them (whether they are still current or not).
func (c *Client) release(ks string, checks []*tyrpb.ReadCheck) {
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	_, _ = c.commit(ctx, ks, nil, checks, false)
}

// TxOptions tune RunTx. The zero value means the defaults.
type TxOptions struct {
	// MaxRetries is how often a conflicting transaction is run again;
	// default 10.
	MaxRetries int
	// BaseBackoff and MaxBackoff bound the jittered exponential backoff
	// between attempts; defaults 1ms and 200ms.
	BaseBackoff, MaxBackoff time.Duration
}

// RunTx runs fn in a transaction and commits it, running it again on
// ErrConflict (from a read or the commit) with jittered exponential backoff,
// at most opts.MaxRetries times. Any other error of fn or Commit ends it. fn
// may run several times, so it must not have effects outside tx.
func (c *Client) RunTx(ctx context.Context, ks string, fn func(tx *Tx) error, opts *TxOptions) error {
	o := TxOptions{MaxRetries: 10, BaseBackoff: time.Millisecond, MaxBackoff: 200 * time.Millisecond}
	if opts != nil {
		if opts.MaxRetries > 0 {
			o.MaxRetries = opts.MaxRetries
		}
		if opts.BaseBackoff > 0 {
			o.BaseBackoff = opts.BaseBackoff
		}
		if opts.MaxBackoff > 0 {
			o.MaxBackoff = opts.MaxBackoff
		}
	}
	backoff := o.BaseBackoff
	for attempt := 0; ; attempt++ {
		tx := c.Begin(ks)
		err := fn(tx)
		if err == nil {
			err = tx.Commit(ctx)
		} else {
			tx.Rollback()
		}
		if err == nil || !errors.Is(err, ErrConflict) {
			return err
		}
		if attempt >= o.MaxRetries {
			return fmt.Errorf("tyr: transaction gave up after %d attempts: %w", attempt+1, err)
		}
		sleep := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, o.MaxBackoff)
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
