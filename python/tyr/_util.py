"""Helpers shared by the modules that call libtyr."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, List, Sequence

from . import _lib
from .errors import Error, from_status, invalid
from .ops import Op

ffi = _lib.ffi


def name_bytes(value: Any, what: str = "key") -> bytes:
    """A key, keyspace name or prefix as the NUL-terminated UTF-8 libtyr takes (without the NUL)."""
    if isinstance(value, str):
        b = value.encode("utf-8", "surrogateescape")
    elif isinstance(value, (bytes, bytearray)):
        b = bytes(value)
    else:
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if b"\0" in b:
        raise invalid(f"{what} {value!r} holds a NUL byte")
    return b


def status() -> Any:
    """A fresh ``tyr_status *``."""
    return ffi.new("tyr_status *")


def check(rc: int, st: Any) -> None:
    """Raise the exception of a failed call (rc != TYR_OK) from its status."""
    if rc != _lib.OK:
        raise from_status(rc, st)


# rbuf and wbuf hold a buffer export of the caller's object until released:
# use them in a with statement, so the export ends with the call, also when
# it raises. Left to the garbage collector, an export of a memoryview that
# sits in the same reference cycle as the view (frames of a traceback)
# crashes CPython 3.11 (the view is cleared while exported, then released).


def rbuf(data: Any) -> Any:
    """A read-only view of a bytes-like object's memory, without copying it."""
    if isinstance(data, str):
        raise TypeError("data must be bytes-like, not str (encode it first)")
    return ffi.from_buffer(data)


def wbuf(buf: Any) -> Any:
    """A writable view of a writable buffer's memory, without copying it."""
    return ffi.from_buffer(buf, require_writable=True)


def nbytes(data: Any) -> int:
    """The size in bytes of a bytes-like object."""
    if isinstance(data, (bytes, bytearray)):
        return len(data)
    return memoryview(data).nbytes


def take_bytes(p: Any, n: int) -> bytes:
    """Copy n bytes from memory libtyr returned, then release it (tyr_free)."""
    L = _lib.lib()
    try:
        if p == ffi.NULL or n == 0:
            return b""
        return ffi.buffer(p, n)[:]
    finally:
        if p != ffi.NULL:
            L.tyr_free(p)


def take_string(p: Any) -> str:
    """Copy a NUL-terminated string libtyr returned, then release it (tyr_free)."""
    L = _lib.lib()
    if p == ffi.NULL:
        return ""
    try:
        return ffi.string(p).decode("utf-8", "replace")
    finally:
        L.tyr_free(p)


@contextlib.contextmanager
def c_ops(ops: Sequence[Op]) -> Iterator[Any]:
    """A ``tyr_op[]`` for ops during the with block; the buffers it points into are released after it."""
    if isinstance(ops, Op):
        raise TypeError("ops must be a sequence of tyr.ops.Op, not one Op")
    n = len(ops)
    arr = ffi.new("tyr_op[]", max(n, 1))
    keep: List[Any] = []
    try:
        _fill_ops(arr, ops, keep)
        yield arr
    finally:
        for b in keep:
            ffi.release(b)


def _fill_ops(arr: Any, ops: Sequence[Op], keep: List[Any]) -> None:
    for i, op in enumerate(ops):
        if not isinstance(op, Op):
            raise TypeError(f"op {i} is a {type(op).__name__}, not a tyr.ops.Op")
        c = arr[i]
        c.kind = op.kind
        key = ffi.new("char[]", name_bytes(op.key))
        keep.append(key)
        c.key = key
        c.offset = op.offset
        if op.data is not None:
            d = rbuf(op.data)
            keep.append(d)
            c.data = d
            c.len = len(d)
        if op.expected is not None:
            e = rbuf(op.expected)
            keep.append(e)
            c.expected = e
            if op.data is None:
                c.len = len(e)
        c.size = op.size
        c.create = 1 if op.create else 0
        c.width = op.width
        c.fn = op.func
        c.operand = op.operand


def closed_error(what: str) -> Error:
    """The error of a call on a closed handle."""
    return invalid(f"{what} is closed")
