"""Transactions: optimistic and serializable over the blobs of one keyspace.

Reads go to the server at once and pin the version of each blob read
(repeatable reads, with the transaction's own ops applied on top); the other
ops are buffered (their data copied) and sent by :meth:`Transaction.commit`
with a check of every blob read: a :class:`~tyr.ConflictError`, changing
nothing, if one changed since.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import List, Optional, Type, Union

from . import _lib
from ._util import c_ops, check, closed_error, ffi, name_bytes, rbuf, status
from .errors import invalid
from .info import OpResult
from .ops import BytesLike, Func
from . import ops as _ops

__all__ = ["Transaction"]


class Transaction:
    """A transaction on one keyspace (:meth:`tyr.Client.transaction`, :meth:`tyr.Client.run`).

    Used as a context manager it commits when the block ends normally and
    rolls back when it raises::

        with client.transaction("ks") as tx:
            n = int.from_bytes(tx.read("counter"), "little")
            tx.write("counter", (n + 1).to_bytes(8, "little"))

    A transaction is used by one thread at a time.
    """

    def __init__(self, handle: int, keyspace: str, *, owned: bool = True) -> None:
        self._h = handle
        self._ks = keyspace
        # owned: the handle is this object's to commit and close (not one
        # lent to the body of tyr_run_tx).
        self._owned = owned
        self._nops = 0
        self._done = False
        self._lock = threading.Lock()

    @property
    def keyspace(self) -> str:
        """The keyspace the transaction runs on."""
        return self._ks

    def _handle(self) -> int:
        _lib.check_fork()
        if self._done or self._h == 0:
            raise closed_error("transaction (committed or rolled back)")
        return self._h

    # Reads.

    def size(self, key: str) -> int:
        """The size of blob key as the transaction sees it; NotFoundError if it does not exist in that view."""
        h = self._handle()
        L = _lib.lib()
        out = ffi.new("uint64_t *")
        st = status()
        check(L.tyr_tx_size(h, name_bytes(key), out, st), st)
        return int(out[0])

    def read(self, key: str, offset: int = 0, length: Optional[int] = None) -> bytes:
        """Read up to length bytes of key from offset (length None: to the end) as the transaction sees it.

        The first read of a blob pins its version: later reads in the
        transaction see that version with the transaction's buffered ops on
        top. NotFoundError if the blob does not exist in that view.
        """
        h = self._handle()
        offset = _ops.uint("offset", offset)
        kb = name_bytes(key)
        if length is None:
            length = max(self.size(key) - offset, 0)
        length = _ops.uint("length", length)
        L = _lib.lib()
        buf = _lib.alloc_uncleared("char[]", max(length, 1))
        got = 0
        n = ffi.new("size_t *")
        # One read carries at most PAYLOAD_BYTES_MAX bytes; the pinned
        # version keeps the parts of a longer one consistent.
        while True:
            part = min(length - got, _lib.PAYLOAD_BYTES_MAX)
            st = status()
            check(L.tyr_tx_read(h, kb, offset + got, buf + got, part, n, st), st)
            got += int(n[0])
            if int(n[0]) < part or got >= length:
                break
        return ffi.buffer(buf, got)[:]

    # Buffered ops.

    def write(self, key: str, data: BytesLike, offset: int = 0) -> None:
        """Buffer a write of data at offset; it creates a missing blob."""
        h = self._handle()
        L = _lib.lib()
        st = status()
        with rbuf(data) as d:
            check(L.tyr_tx_write(h, name_bytes(key), _ops.uint("offset", offset), d, len(d), st), st)
        self._nops += 1

    def append(self, key: str, data: BytesLike) -> None:
        """Buffer an append of data; it creates a missing blob."""
        h = self._handle()
        L = _lib.lib()
        st = status()
        with rbuf(data) as d:
            check(L.tyr_tx_append(h, name_bytes(key), d, len(d), st), st)
        self._nops += 1

    def truncate(self, key: str, size: int) -> None:
        """Buffer a truncate of key to size."""
        h = self._handle()
        L = _lib.lib()
        st = status()
        check(L.tyr_tx_truncate(h, name_bytes(key), _ops.uint("size", size), st), st)
        self._nops += 1

    def create(self, key: str) -> None:
        """Buffer a create; the commit fails with ExistsError if the blob exists."""
        h = self._handle()
        L = _lib.lib()
        st = status()
        check(L.tyr_tx_create(h, name_bytes(key), st), st)
        self._nops += 1

    def delete(self, key: str) -> None:
        """Buffer a delete of key."""
        h = self._handle()
        L = _lib.lib()
        st = status()
        check(L.tyr_tx_delete(h, name_bytes(key), st), st)
        self._nops += 1

    def atomic(self, key: str, offset: int, width: int, func: Union[str, Func], operand: int) -> None:
        """Buffer an atomic function on the integer of width bytes at offset; its new value is in commit()'s result."""
        self._do(_ops.atomic(key, offset, width, func, operand))

    def cas(self, key: str, offset: int, expected: BytesLike, data: BytesLike) -> None:
        """Buffer a compare-and-swap: the commit fails with ConflictError if the bytes at offset differ from expected."""
        self._do(_ops.cas(key, offset, expected, data))

    def do(self, *ops: _ops.Op) -> None:
        """Buffer ops built with :mod:`tyr.ops`."""
        self._do(*ops)

    def _do(self, *ops: _ops.Op) -> None:
        h = self._handle()
        L = _lib.lib()
        st = status()
        with c_ops(ops) as arr:
            check(L.tyr_tx_do(h, arr, len(ops), st), st)
        self._nops += len(ops)

    # Ending.

    def commit(self) -> List[OpResult]:
        """Send the buffered ops with a check of every blob read, and return each op's outcome.

        ConflictError, changing nothing, if a blob the transaction read
        changed since (or a compare-and-swap failed). The transaction is done
        afterwards, whether the commit succeeded or not.
        """
        if not self._owned:
            raise invalid("the transaction of run() is committed by run() when the function returns")
        h = self._handle()
        L = _lib.lib()
        with self._lock:
            self._done = True
        cap = self._nops
        results = ffi.new("tyr_op_result[]", max(cap, 1))
        n = ffi.new("size_t *")
        st = status()
        try:
            check(L.tyr_tx_commit(h, results, cap, n, st), st)
        finally:
            self._release()
        return [OpResult._from_c(results[i]) for i in range(min(int(n[0]), cap))]

    def rollback(self) -> None:
        """Drop the transaction: nothing buffered is sent. A no-op once it is done."""
        if not self._owned:
            raise invalid("the transaction of run() is rolled back by raising from the function")
        with self._lock:
            if self._done:
                return
            self._done = True
        self._release()

    def _release(self) -> None:
        h, self._h = self._h, 0
        if h and self._owned and not _lib.forked():
            _lib.lib().tyr_tx_close(h)

    @property
    def done(self) -> bool:
        """Whether the transaction was committed or rolled back."""
        return self._done

    def __enter__(self) -> "Transaction":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if exc_type is not None:
            self.rollback()
        elif not self._done:
            self.commit()

    def __del__(self) -> None:
        try:
            if self._owned and not self._done and self._h:
                self._done = True
                self._release()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "done" if self._done else "open"
        return f"<tyr.Transaction on {self._ks!r}, {self._nops} ops buffered, {state}>"


def lent(handle: int, keyspace: str) -> Transaction:
    """A Transaction over a handle lent to the body of tyr_run_tx (valid only during the call)."""
    return Transaction(handle, keyspace, owned=False)


def expire(tx: Transaction) -> None:
    """Mark a lent transaction unusable once its call returned."""
    tx._done = True
    tx._h = 0

