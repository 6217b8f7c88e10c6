package main

/*
#include <stdlib.h>
#define TYR_TYPES_ONLY
#include "tyr.h"

int tyr_call_tx_fn(tyr_tx_fn fn, tyr_tx tx, void *arg);
*/
import "C"

import (
	"bytes"
	"context"
	"unsafe"

	"github.com/tyrstore/tyr/client"
)

// goOps turns n C ops into the client's. With keep, their data is copied,
// for ops the call keeps after it returns.
func goOps(ops *C.tyr_op, n C.size_t, keep bool) ([]client.Op, error) {
	if n > 0 && ops == nil {
		return nil, invalid("ops is NULL")
	}
	if n > client.OpsPerTxMax {
		return nil, invalid("%d ops, more than %d", uint64(n), client.OpsPerTxMax)
	}
	data := func(p unsafe.Pointer, n C.size_t) []byte {
		if keep {
			return bytes.Clone(bytesIn(p, n))
		}
		return bytesIn(p, n)
	}
	out := make([]client.Op, 0, int(n))
	for i, op := range unsafe.Slice(ops, int(n)) {
		key := C.GoString(op.key)
		switch op.kind {
		case C.TYR_OP_CREATE:
			out = append(out, client.CreateOp(key))
		case C.TYR_OP_WRITE:
			out = append(out, client.WriteOp(key, uint64(op.offset), data(op.data, op.len), op.create != 0))
		case C.TYR_OP_APPEND:
			out = append(out, client.AppendOp(key, data(op.data, op.len), op.create != 0))
		case C.TYR_OP_TRUNCATE:
			out = append(out, client.TruncateOp(key, uint64(op.size)))
		case C.TYR_OP_DELETE:
			out = append(out, client.DeleteOp(key))
		case C.TYR_OP_ATOMIC:
			out = append(out, client.AtomicOp(key, uint64(op.offset), int(op.width), client.AtomicFunc(op.fn), uint64(op.operand)))
		case C.TYR_OP_CAS:
			out = append(out, client.CASOp(key, uint64(op.offset), data(op.expected, op.len), data(op.data, op.len)))
		default:
			return nil, invalid("op %d: unknown kind %d", i, int(op.kind))
		}
	}
	return out, nil
}

func opResults(out *C.tyr_op_result, capacity C.size_t, rs []client.OpResult) {
	if out == nil {
		return
	}
	slots := unsafe.Slice(out, int(capacity))
	for i := range min(len(slots), len(rs)) {
		opResult(&slots[i], rs[i])
	}
}

//export tyr_commit
func tyr_commit(h C.tyr_client, ks *C.char, ops *C.tyr_op, n C.size_t, results *C.tyr_op_result, st *C.tyr_status) C.int {
	return withConn(st, h, func(ctx context.Context, c *conn) error {
		gops, err := goOps(ops, n, false)
		if err != nil {
			return err
		}
		rs, err := c.c.Commit(ctx, C.GoString(ks), gops...)
		if err == nil {
			opResults(results, n, rs)
		}
		return err
	})
}

// txn is an open transaction and the client it belongs to.
type txn struct {
	tx *client.Tx
	c  *conn
}

// withTx runs f with transaction handle h and a context for one call.
func withTx(st *C.tyr_status, h C.tyr_tx, f func(ctx context.Context, t *txn) error) C.int {
	return call(st, func() error {
		t, err := lookup[*txn](uint64(h))
		if err != nil {
			return err
		}
		ctx, cancel := t.c.ctx()
		defer cancel()
		return f(ctx, t)
	})
}

//export tyr_tx_begin
func tyr_tx_begin(h C.tyr_client, ks *C.char, out *C.tyr_tx, st *C.tyr_status) C.int {
	return withConn(st, h, func(_ context.Context, c *conn) error {
		if out == nil {
			return invalid("tyr_tx_begin: out is NULL")
		}
		*out = C.tyr_tx(newHandle(&txn{tx: c.c.Begin(C.GoString(ks)), c: c}))
		return nil
	})
}

//export tyr_tx_read
func tyr_tx_read(h C.tyr_tx, key *C.char, offset C.uint64_t, buf unsafe.Pointer, n C.size_t, got *C.size_t, st *C.tyr_status) C.int {
	return withTx(st, h, func(ctx context.Context, t *txn) error {
		if got == nil || (buf == nil && n > 0) {
			return invalid("tyr_tx_read: buf or n is NULL")
		}
		data, err := t.tx.Read(ctx, C.GoString(key), uint64(offset), uint64(n))
		if err == nil {
			*got = C.size_t(copy(bytesIn(buf, n), data))
		}
		return err
	})
}

//export tyr_tx_size
func tyr_tx_size(h C.tyr_tx, key *C.char, size *C.uint64_t, st *C.tyr_status) C.int {
	return withTx(st, h, func(ctx context.Context, t *txn) error {
		if size == nil {
			return invalid("tyr_tx_size: size is NULL")
		}
		s, err := t.tx.Size(ctx, C.GoString(key))
		if err == nil {
			*size = C.uint64_t(s)
		}
		return err
	})
}

//export tyr_tx_do
func tyr_tx_do(h C.tyr_tx, ops *C.tyr_op, n C.size_t, st *C.tyr_status) C.int {
	return withTx(st, h, func(_ context.Context, t *txn) error {
		gops, err := goOps(ops, n, true)
		if err != nil {
			return err
		}
		return t.tx.Do(gops...)
	})
}

// txDo buffers op; an op's data must be a copy, as C may free its own on
// return. A transaction that is done, or over its limits, fails the call.
func txDo(st *C.tyr_status, h C.tyr_tx, op client.Op) C.int {
	return withTx(st, h, func(_ context.Context, t *txn) error { return t.tx.Do(op) })
}

//export tyr_tx_write
func tyr_tx_write(h C.tyr_tx, key *C.char, offset C.uint64_t, data unsafe.Pointer, n C.size_t, st *C.tyr_status) C.int {
	return txDo(st, h, client.WriteOp(C.GoString(key), uint64(offset), bytes.Clone(bytesIn(data, n)), true))
}

//export tyr_tx_append
func tyr_tx_append(h C.tyr_tx, key *C.char, data unsafe.Pointer, n C.size_t, st *C.tyr_status) C.int {
	return txDo(st, h, client.AppendOp(C.GoString(key), bytes.Clone(bytesIn(data, n)), true))
}

//export tyr_tx_truncate
func tyr_tx_truncate(h C.tyr_tx, key *C.char, size C.uint64_t, st *C.tyr_status) C.int {
	return txDo(st, h, client.TruncateOp(C.GoString(key), uint64(size)))
}

//export tyr_tx_create
func tyr_tx_create(h C.tyr_tx, key *C.char, st *C.tyr_status) C.int {
	return txDo(st, h, client.CreateOp(C.GoString(key)))
}

//export tyr_tx_delete
func tyr_tx_delete(h C.tyr_tx, key *C.char, st *C.tyr_status) C.int {
	return txDo(st, h, client.DeleteOp(C.GoString(key)))
}

//export tyr_tx_commit
func tyr_tx_commit(h C.tyr_tx, results *C.tyr_op_result, capacity C.size_t, n *C.size_t, st *C.tyr_status) C.int {
	return withTx(st, h, func(ctx context.Context, t *txn) error {
		if err := t.tx.Commit(ctx); err != nil {
			return err
		}
		rs := t.tx.Results()
		opResults(results, capacity, rs)
		if n != nil {
			*n = C.size_t(len(rs))
		}
		return nil
	})
}

//export tyr_tx_close
func tyr_tx_close(h C.tyr_tx) {
	call(nil, func() error {
		t, err := release[*txn](uint64(h))
		if err == nil {
			t.tx.Rollback() // does nothing after a commit
		}
		return err
	})
}

//export tyr_run_tx
func tyr_run_tx(h C.tyr_client, ks *C.char, fn C.tyr_tx_fn, arg unsafe.Pointer, maxRetries C.int, st *C.tyr_status) C.int {
	return withConn(st, h, func(ctx context.Context, c *conn) error {
		if fn == nil {
			return invalid("tyr_run_tx: fn is NULL")
		}
		body := func(tx *client.Tx) error {
			th := newHandle(&txn{tx: tx, c: c})
			defer release[*txn](th)
			if code := C.tyr_call_tx_fn(fn, C.tyr_tx(th), arg); code != C.TYR_OK {
				return codeError{code}
			}
			return nil
		}
		return c.c.RunTx(ctx, C.GoString(ks), body, &client.TxOptions{MaxRetries: int(maxRetries)})
	})
}
