"""The client of tyr: :func:`connect` and :class:`Client`."""

from __future__ import annotations

import functools
import json
import math
import os
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar, Union

from . import _lib
from . import ops as _ops
from ._util import c_ops, check, closed_error, ffi, name_bytes, rbuf, status, take_bytes, take_string, wbuf
from .errors import ConflictError, Error, NotFoundError, invalid
from .files import open_blob
from .info import BlobInfo, KeyspaceInfo, OpResult
from .ops import BytesLike, Func
from .transaction import Transaction, expire, lent

__all__ = ["Client", "connect", "DEFAULT_ENDPOINT"]

#: Where a local server listens by default.
DEFAULT_ENDPOINT = "127.0.0.1:7420"

T = TypeVar("T")

# A read of an explicit length above this asks the blob's size first, so
# that a generous length does not allocate memory the blob cannot fill.
_READ_PREALLOC_MAX = 16 << 20


def connect(
    endpoint: Optional[str] = None,
    *,
    timeout: Optional[float] = None,
    routing: bool = True,
    data_path: bool = True,
) -> "Client":
    """Make a client of the tyr server or cluster at endpoint ("host:port").

    Args:
        endpoint: the server's address; None means ``$TYR_ENDPOINT``, else
            "127.0.0.1:7420".
        timeout: seconds each call may take (None: no deadline). A call
            that runs out raises :class:`tyr.TimeoutError`.
        routing: send reads of a cluster's blobs straight to the node that
            serves them (False: everything goes to endpoint).
        data_path: read over the data path's plain TCP connections (False:
            over gRPC).

    It does not wait for a connection; the first call does. The first call
    of the process loads libtyr.
    """
    return Client(endpoint, timeout=timeout, routing=routing, data_path=data_path)


class _RunState:
    """The state of one run(): the function, its last result and exception."""

    def __init__(self, fn: Callable[[Transaction], Any], ks: str) -> None:
        self.fn = fn
        self.ks = ks
        self.result: Any = None
        self.exc: Optional[BaseException] = None
        self.attempts = 0

    def call(self, handle: int) -> int:
        self.attempts += 1
        self.exc = None
        tx = lent(handle, self.ks)
        try:
            self.result = self.fn(tx)
            return _lib.OK
        except ConflictError as e:
            # A conflict in the body runs it again, as one of the commit does.
            self.exc = e
            return _lib.CONFLICT
        except BaseException as e:  # re-raised by run() once tyr_run_tx returns
            self.exc = e
            return _lib.UNKNOWN
        finally:
            expire(tx)


def _run_body(handle: int, arg: Any) -> int:
    return ffi.from_handle(arg).call(handle)


# One callback for every run(): the state travels in arg. An exception that
# escaped it anyway gives up the transaction (TYR_UNKNOWN), never commits.
_run_body_c = ffi.callback("tyr_tx_fn", _run_body, error=_lib.UNKNOWN)


class Client:
    """A client of a tyr server or cluster; make one with :func:`tyr.connect`.

    Safe to share between threads (calls release the GIL while they wait on
    the network). Use it as a context manager, or call :meth:`close`, to
    close its connections. Keys and keyspace names are str (UTF-8); data is
    any bytes-like object and is passed to libtyr without a copy.
    """

    def __init__(
        self,
        endpoint: Optional[str] = None,
        *,
        timeout: Optional[float] = None,
        routing: bool = True,
        data_path: bool = True,
    ) -> None:
        """Connect as :func:`tyr.connect` does."""
        self._h = 0
        self._lock = threading.Lock()
        if endpoint is None:
            endpoint = os.environ.get("TYR_ENDPOINT") or DEFAULT_ENDPOINT
        if timeout is None:
            timeout_ms = 0
        else:
            if not timeout > 0:
                raise invalid(f"timeout {timeout!r}: want a positive number of seconds, or None")
            timeout_ms = max(1, math.ceil(timeout * 1000))
        flags = 0
        if not routing:
            flags |= _lib.CONNECT_NO_ROUTING
        if not data_path:
            flags |= _lib.CONNECT_NO_DATA_PATH
        self._endpoint = endpoint
        self._timeout = timeout
        L = _lib.lib()
        out = ffi.new("tyr_client *")
        st = status()
        check(L.tyr_connect(name_bytes(endpoint, "endpoint"), timeout_ms, flags, out, st), st)
        self._h = int(out[0])

    # Handles and life cycle.

    @property
    def endpoint(self) -> str:
        """The address the client was made for."""
        return self._endpoint

    @property
    def timeout(self) -> Optional[float]:
        """Seconds each call may take, or None."""
        return self._timeout

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._h == 0

    def _c(self) -> Tuple[Any, int]:
        L = _lib.lib()
        h = self._h
        if h == 0:
            raise closed_error("client")
        return L, h

    def close(self) -> None:
        """Close the client's connections; calls in flight fail. Idempotent."""
        with self._lock:
            h, self._h = self._h, 0
        if h and not _lib.forked():
            _lib.lib().tyr_close(h)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if getattr(self, "_h", 0):
                self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<tyr.Client {self._endpoint} {state}>"

    def ready(self) -> bool:
        """Whether the endpoint serves reads: it is up, has caught up and knows the cluster's ring.

        False when it does not (or cannot be reached, or the call timed out);
        raises :class:`tyr.Error` on other errors.
        """
        L, h = self._c()
        st = status()
        rc = L.tyr_ready(h, st)
        if rc == _lib.OK:
            return True
        if rc in (_lib.UNAVAILABLE, _lib.TIMEOUT):
            return False
        raise _error(rc, st)

    def cluster_status(self) -> Dict[str, Any]:
        """The cluster as the endpoint sees it: the Go client's ClusterStatus as a dict."""
        L, h = self._c()
        p = ffi.new("char **")
        st = status()
        check(L.tyr_cluster_status_json(h, p, st), st)
        return json.loads(take_string(p[0]))

    def node_usage(self) -> Dict[str, Any]:
        """The endpoint's disk usage: the Go client's NodeUsage as a dict."""
        L, h = self._c()
        p = ffi.new("char **")
        st = status()
        check(L.tyr_node_usage_json(h, p, st), st)
        return json.loads(take_string(p[0]))

    # Keyspaces.

    def create_keyspace(
        self,
        name: str,
        *,
        chunk_size: int = 0,
        replication: int = 0,
        mvcc: bool = True,
        sync: bool = True,
    ) -> KeyspaceInfo:
        """Create a keyspace. ExistsError if it exists.

        Args:
            name: 3 to 63 of a-z, 0-9, '-' and '.'.
            chunk_size: bytes per chunk its blobs are striped into (0: the
                server's default, 64 MiB).
            replication: replicas of each chunk in a cluster (0: the
                server's default, 1).
            mvcc: keep old versions readable for transactions.
            sync: sync every commit to disk before acknowledging it.
        """
        L, h = self._c()
        cfg = ffi.new("tyr_keyspace_config *")
        cfg.chunk_size = _ops.uint("chunk_size", chunk_size)
        if not 0 <= replication < (1 << 32):
            raise invalid(f"replication {replication} is out of range")
        cfg.replication = replication
        cfg.mvcc = 1 if mvcc else 0
        cfg.sync = 1 if sync else 0
        info = ffi.new("tyr_keyspace_info *")
        st = status()
        check(L.tyr_keyspace_create(h, name_bytes(name, "keyspace"), cfg, info, st), st)
        return KeyspaceInfo._from_c(info)

    def drop_keyspace(self, name: str) -> None:
        """Drop a keyspace and every blob in it. NotFoundError if it does not exist."""
        L, h = self._c()
        st = status()
        check(L.tyr_keyspace_drop(h, name_bytes(name, "keyspace"), st), st)

    def keyspace(self, name: str) -> KeyspaceInfo:
        """Describe a keyspace, with the answering node's usage figures. NotFoundError if it does not exist."""
        L, h = self._c()
        info = ffi.new("tyr_keyspace_info *")
        st = status()
        check(L.tyr_keyspace_get(h, name_bytes(name, "keyspace"), info, st), st)
        return KeyspaceInfo._from_c(info)

    def keyspaces(self) -> List[KeyspaceInfo]:
        """Every keyspace, by name."""
        L, h = self._c()
        out = ffi.new("tyr_keyspace_info **")
        n = ffi.new("size_t *")
        st = status()
        check(L.tyr_keyspace_list(h, out, n, st), st)
        arr = out[0]
        try:
            return [KeyspaceInfo._from_c(arr[i]) for i in range(int(n[0]))]
        finally:
            if arr != ffi.NULL:
                L.tyr_free(arr)

    # Blobs.

    def create(self, ks: str, key: str) -> None:
        """Create an empty blob. ExistsError if it exists."""
        L, h = self._c()
        st = status()
        check(L.tyr_create(h, name_bytes(ks, "keyspace"), name_bytes(key), st), st)

    def delete(self, ks: str, key: str) -> None:
        """Delete a blob. NotFoundError if it does not exist."""
        L, h = self._c()
        st = status()
        check(L.tyr_delete(h, name_bytes(ks, "keyspace"), name_bytes(key), st), st)

    def stat(self, ks: str, key: str) -> BlobInfo:
        """A blob's size, version and times. NotFoundError if it does not exist."""
        L, h = self._c()
        out = ffi.new("tyr_blob_info *")
        st = status()
        check(L.tyr_stat(h, name_bytes(ks, "keyspace"), name_bytes(key), out, st), st)
        return BlobInfo._from_c(out, key)

    def exists(self, ks: str, key: str) -> bool:
        """Whether the blob exists (False also when the keyspace does not)."""
        L, h = self._c()
        out = ffi.new("tyr_blob_info *")
        st = status()
        rc = L.tyr_stat(h, name_bytes(ks, "keyspace"), name_bytes(key), out, st)
        if rc == _lib.OK:
            return True
        err = _error(rc, st)
        if isinstance(err, NotFoundError):
            return False
        raise err

    def truncate(self, ks: str, key: str, size: int) -> None:
        """Set a blob's size: cut it, or extend it with zeros. NotFoundError if it does not exist."""
        L, h = self._c()
        st = status()
        check(L.tyr_truncate(h, name_bytes(ks, "keyspace"), name_bytes(key), _ops.uint("size", size), st), st)

    def get(self, ks: str, key: str) -> bytes:
        """The whole blob, read from one version. NotFoundError if it does not exist."""
        return self._get(name_bytes(ks, "keyspace"), name_bytes(key))

    def _get(self, ksb: bytes, kb: bytes) -> bytes:
        L, h = self._c()
        p = ffi.new("void **")
        n = ffi.new("size_t *")
        st = status()
        check(L.tyr_get(h, ksb, kb, p, n, st), st)
        return take_bytes(p[0], int(n[0]))

    def put(self, ks: str, key: str, data: BytesLike) -> None:
        """Create or replace the blob with data.

        Atomic up to 4 MiB; a larger put empties the blob and streams the
        data into it, which readers may see in part.
        """
        L, h = self._c()
        st = status()
        with rbuf(data) as d:
            check(L.tyr_put(h, name_bytes(ks, "keyspace"), name_bytes(key), d, len(d), st), st)

    def read(self, ks: str, key: str, offset: int = 0, length: Optional[int] = None) -> bytes:
        """Read up to length bytes from offset (length None: to the end), all from one version.

        Short at the end of the blob; NotFoundError if it does not exist.
        """
        if length is not None:
            length = _ops.uint("length", length)
        return self._read(name_bytes(ks, "keyspace"), name_bytes(key), _ops.uint("offset", offset), length)

    def _read(self, ksb: bytes, kb: bytes, offset: int, length: Optional[int]) -> bytes:
        if length is None:
            if offset == 0:
                return self._get(ksb, kb)
            length = max(self._size(ksb, kb) - offset, 0)
        elif length > _READ_PREALLOC_MAX:
            length = min(length, max(self._size(ksb, kb) - offset, 0))
        L, h = self._c()
        buf = _lib.alloc_uncleared("char[]", max(length, 1))
        n = ffi.new("size_t *")
        st = status()
        check(L.tyr_read(h, ksb, kb, offset, buf, length, n, st), st)
        return ffi.buffer(buf, int(n[0]))[:]

    def readinto(self, ks: str, key: str, buf: Any, offset: int = 0) -> int:
        """Read into the writable buffer buf (bytearray, memoryview, numpy array, ...) from offset, without a copy.

        Returns the number of bytes read: short at the end of the blob.
        """
        return self._readinto(name_bytes(ks, "keyspace"), name_bytes(key), buf, _ops.uint("offset", offset))

    def _readinto(self, ksb: bytes, kb: bytes, buf: Any, offset: int) -> int:
        L, h = self._c()
        n = ffi.new("size_t *")
        st = status()
        with wbuf(buf) as b:
            check(L.tyr_read(h, ksb, kb, offset, b, len(b), n, st), st)
        return int(n[0])

    def _size(self, ksb: bytes, kb: bytes) -> int:
        L, h = self._c()
        out = ffi.new("tyr_blob_info *")
        st = status()
        check(L.tyr_stat(h, ksb, kb, out, st), st)
        return int(out.size)

    def write(self, ks: str, key: str, data: BytesLike, offset: int = 0, *, create: bool = False) -> OpResult:
        """Write data at offset. With create a missing blob is created, otherwise NotFoundError.

        Atomic up to 4 MiB; more is written in parts, each atomic, the whole not.
        """
        L, h = self._c()
        res = ffi.new("tyr_op_result *")
        st = status()
        with rbuf(data) as d:
            check(
                L.tyr_write(
                    h, name_bytes(ks, "keyspace"), name_bytes(key), _ops.uint("offset", offset), d, len(d),
                    1 if create else 0, res, st,
                ),
                st,
        )
        return OpResult._from_c(res)

    def append(self, ks: str, key: str, data: BytesLike) -> int:
        """Append data atomically to an existing blob; return the offset where it landed.

        TooLargeError above 4 MiB; NotFoundError if the blob does not exist.
        """
        L, h = self._c()
        off = ffi.new("uint64_t *")
        st = status()
        with rbuf(data) as d:
            check(L.tyr_append(h, name_bytes(ks, "keyspace"), name_bytes(key), d, len(d), off, st), st)
        return int(off[0])

    def atomic(self, ks: str, key: str, offset: int, width: int, func: Union[str, Func], operand: int) -> int:
        """Apply func to the little-endian unsigned integer of width bytes (1, 2, 4 or 8) at offset; return the new value.

        func is a :class:`tyr.Func` or its name: "add", "sub", "mul", "and",
        "or", "xor", "min_signed", "max_signed", "min_unsigned",
        "max_unsigned" or "set". Arithmetic wraps at the width; a negative
        operand is taken as two's complement. The blob must exist; bytes
        past its end read as zeros and it grows to cover the integer.
        """
        L, h = self._c()
        fn = _ops.func_code(func)
        bits = _ops.operand_bits(operand)
        if isinstance(width, bool) or not isinstance(width, int):
            raise TypeError(f"width must be an int, not {type(width).__name__}")
        if not -(1 << 31) <= width < (1 << 31):
            raise invalid(f"width {width}: want 1, 2, 4 or 8")
        value = ffi.new("uint64_t *")
        st = status()
        check(
            L.tyr_atomic(h, name_bytes(ks, "keyspace"), name_bytes(key), _ops.uint("offset", offset), width, fn,
                         bits, value, st),
            st,
        )
        return int(value[0])

    def cas(self, ks: str, key: str, offset: int, expected: BytesLike, data: BytesLike) -> bool:
        """Replace the bytes at offset with data if they equal expected; False, changing nothing, if they do not.

        expected and data have the same length (at most 4 KiB).
        """
        L, h = self._c()
        st = status()
        with rbuf(expected) as e, rbuf(data) as d:
            if len(e) != len(d):
                raise invalid(f"compare-and-swap: expected is {len(e)} bytes, data {len(d)}")
            rc = L.tyr_cas(h, name_bytes(ks, "keyspace"), name_bytes(key), _ops.uint("offset", offset), e, d, len(d), st)
        if rc == _lib.CONFLICT:
            return False
        check(rc, st)
        return True

    def list_page(
        self, ks: str, prefix: str = "", start_after: str = "", limit: int = 0
    ) -> Tuple[List[BlobInfo], Optional[str]]:
        """One page of the blobs whose keys start with prefix and sort after start_after, in key order.

        limit is the page's size (0: 1000, at most 10000). Returns the page
        and the start_after of the next one, None at the end.
        """
        L, h = self._c()
        if not 0 <= limit <= _lib.LIST_LIMIT_MAX:
            raise invalid(f"limit {limit}: want 0 to {_lib.LIST_LIMIT_MAX}")
        out = ffi.new("tyr_blob_info **")
        n = ffi.new("size_t *")
        nxt = ffi.new("char **")
        st = status()
        pb = name_bytes(prefix, "prefix") if prefix else ffi.NULL
        sb = name_bytes(start_after, "start_after") if start_after else ffi.NULL
        check(L.tyr_list(h, name_bytes(ks, "keyspace"), pb, sb, limit, out, n, nxt, st), st)
        arr = out[0]
        try:
            page = [BlobInfo._from_c(arr[i]) for i in range(int(n[0]))]
        finally:
            if arr != ffi.NULL:
                L.tyr_free(arr)
        nb = nxt[0]
        next_key: Optional[str] = None
        if nb != ffi.NULL:
            next_key = ffi.string(nb).decode("utf-8", "surrogateescape")
            L.tyr_free(nb)
        return page, next_key

    def list(self, ks: str, prefix: str = "", start_after: str = "", limit: Optional[int] = None) -> Iterator[BlobInfo]:
        """Iterate over the blobs whose keys start with prefix and sort after start_after, in key order.

        Pages through all of them, a request per page; stops after limit
        items if limit is given.
        """
        if limit is not None and limit < 0:
            raise invalid(f"limit {limit} is negative")
        return self._list(ks, prefix, start_after, limit)

    def _list(self, ks: str, prefix: str, start_after: str, limit: Optional[int]) -> Iterator[BlobInfo]:
        after = start_after
        left = limit
        while left is None or left > 0:
            page, nxt = self.list_page(ks, prefix, after, 0 if left is None else min(left, _lib.LIST_LIMIT_MAX))
            for info in page:
                yield info
            if left is not None:
                left -= len(page)
            if nxt is None:
                return
            after = nxt

    def commit(self, ks: str, ops: Sequence[_ops.Op]) -> List[OpResult]:
        """Apply ops (built with :mod:`tyr.ops`) to blobs of ks atomically: all or none, in order.

        Returns each op's outcome. A lost answer is resolved as the Go
        client does: the call returns the results if the commit took effect,
        raises ConflictError (refused) if it did not and never will, and
        OutcomeUnknownError if that could not be learnt.
        """
        L, h = self._c()
        n = len(ops)
        results = ffi.new("tyr_op_result[]", max(n, 1))
        st = status()
        with c_ops(ops) as arr:
            check(L.tyr_commit(h, name_bytes(ks, "keyspace"), arr, n, results, st), st)
        return [OpResult._from_c(results[i]) for i in range(n)]

    # Transactions.

    def transaction(self, ks: str) -> Transaction:
        """Begin a transaction on keyspace ks (sends nothing yet).

        Use it as a context manager: it commits when the block ends and
        rolls back when the block raises.
        """
        L, h = self._c()
        out = ffi.new("tyr_tx *")
        st = status()
        check(L.tyr_tx_begin(h, name_bytes(ks, "keyspace"), out, st), st)
        return Transaction(int(out[0]), ks)

    def run(self, ks: str, fn: Callable[[Transaction], T], *, max_retries: int = 10) -> T:
        """Run fn in a transaction on ks and commit it, running it again after a conflict; return what fn returned.

        A conflict (from a read, the commit, or a ConflictError raised by
        fn) runs fn again with jittered exponential backoff, at most
        max_retries times (libtyr's tyr_run_tx, the Go client's RunTx); then
        ConflictError. Any other exception of fn rolls back and is raised
        as it is. fn may run several times, so it must have no effects
        outside the transaction; it must not commit or roll back.
        """
        L, h = self._c()
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise invalid(f"max_retries {max_retries!r}: want a non-negative int")
        state = _RunState(fn, ks)
        arg = ffi.new_handle(state)
        st = status()
        rc = L.tyr_run_tx(h, name_bytes(ks, "keyspace"), _run_body_c, arg, max_retries, st)
        del arg
        if rc == _lib.OK:
            return state.result  # type: ignore[no-any-return]
        exc = state.exc
        if exc is not None and not isinstance(exc, ConflictError):
            raise exc
        raise _error(rc, st) from exc

    def transactional(self, ks: str, *, max_retries: int = 10) -> Callable[[Callable[..., T]], Callable[..., T]]:
        """A decorator running the function in a transaction with :meth:`run`.

        ::

            @client.transactional("bank")
            def transfer(tx, src, dst, amount): ...

            transfer("alice", "bob", 10)   # tx is passed first
        """

        def decorate(fn: Callable[..., T]) -> Callable[..., T]:
            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> T:
                return self.run(ks, lambda tx: fn(tx, *args, **kwargs), max_retries=max_retries)

            return wrapper

        return decorate

    # Files.

    def tyrfs(self, ks: str, *, uid: int = 0, gids: Sequence[int] = ()) -> Any:
        """The TýrFS file system of keyspace ks (the one ``tyr mount`` serves),
        acting for uid and gids (root by default): a :class:`tyr.tyrfs.FileSystem`
        whose ``fetch`` and ``fetch_many`` read whole files by path."""
        from .tyrfs import FileSystem

        return FileSystem(self, ks, uid, gids)

    def open(self, ks: str, key: str, mode: str = "rb", *, buffer_size: Optional[int] = None) -> Any:
        """Open a blob as a binary file object.

        "rb": a seekable :class:`tyr.files.BlobReader` (NotFoundError if the
        blob does not exist); "wb": creates or empties the blob and streams
        into it; "ab": streams onto its end (created if missing). Writers
        raise the stream's first error at close. buffer_size defaults to
        1 MiB.
        """
        return open_blob(self, ks, key, mode, buffer_size)

    def _reader_open(self, ksb: bytes, kb: bytes, offset: int) -> int:
        L, h = self._c()
        out = ffi.new("tyr_reader *")
        st = status()
        check(L.tyr_reader_open(h, ksb, kb, offset, -1, out, st), st)
        return int(out[0])

    def _reader_read(self, r: int, buf: Any) -> int:
        L = _lib.lib()
        n = ffi.new("size_t *")
        st = status()
        with wbuf(buf) as b:
            check(L.tyr_reader_read(r, b, len(b), n, st), st)
        return int(n[0])

    def _writer_open(self, ksb: bytes, kb: bytes, offset: int, create: bool) -> int:
        L, h = self._c()
        out = ffi.new("tyr_writer *")
        st = status()
        check(L.tyr_writer_open(h, ksb, kb, offset, 1 if create else 0, out, st), st)
        return int(out[0])


def _error(rc: int, st: Any) -> Error:
    from .errors import from_status

    return from_status(rc, st)

