"""Ops of an atomic commit (:meth:`tyr.Client.commit`) and of a transaction.

Build them with the functions of this module::

    from tyr import ops
    client.commit("ks", [ops.create("a"), ops.write("a", 0, b"hello"), ops.delete("b")])

An op keeps a reference to its data, not a copy: the data is read when the
commit is sent.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional, Union

from . import _lib
from .errors import invalid

__all__ = [
    "Func",
    "Op",
    "BytesLike",
    "create",
    "write",
    "append",
    "truncate",
    "delete",
    "atomic",
    "cas",
    "func_code",
]

#: Data accepted without copying: anything with the buffer protocol
#: (bytes, bytearray, memoryview, array.array, numpy arrays, ...).
BytesLike = Union[bytes, bytearray, memoryview]

_U64 = (1 << 64) - 1


class Func(enum.IntEnum):
    """The atomic functions (``tyr_func``).

    Arithmetic wraps at the width; SUB is current - operand; the signed ones
    read two's complement.
    """

    ADD = 1
    SUB = 2
    MUL = 3
    AND = 4
    OR = 5
    XOR = 6
    MIN_SIGNED = 7
    MAX_SIGNED = 8
    MIN_UNSIGNED = 9
    MAX_UNSIGNED = 10
    SET = 11


def func_code(func: Union[str, Func, int]) -> int:
    """The code of an atomic function given as a :class:`Func` or its name ("add", "min_signed", ...)."""
    if isinstance(func, str):
        name = func.strip().upper().replace("-", "_")
        try:
            return int(Func[name])
        except KeyError:
            names = ", ".join(f.name.lower() for f in Func)
            raise invalid(f"unknown atomic function {func!r}: want one of {names}") from None
    if isinstance(func, bool) or not isinstance(func, int):
        raise TypeError(f"atomic function must be a str or tyr.Func, not {type(func).__name__}")
    try:
        return int(Func(func))
    except ValueError:
        raise invalid(f"unknown atomic function {func!r}") from None


def operand_bits(operand: int) -> int:
    """An operand as the 64 bits sent: a negative one as two's complement."""
    if isinstance(operand, bool) or not isinstance(operand, int):
        raise TypeError(f"operand must be an int, not {type(operand).__name__}")
    if operand < -(1 << 63) or operand > _U64:
        raise invalid(f"operand {operand} does not fit in 64 bits")
    return operand & _U64


def uint(name: str, value: int) -> int:
    """Check that value is an int in [0, 2**64) and return it."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 0 or value > _U64:
        raise invalid(f"{name} {value} is out of range [0, 2**64)")
    return value


@dataclass(frozen=True)
class Op:
    """One op of an atomic commit. Build it with the functions of :mod:`tyr.ops`.

    Attributes:
        kind: the op kind (``tyr_op_kind``: 1 create, 2 write, 3 append,
            4 truncate, 5 delete, 6 atomic, 7 cas).
        key: the blob's key.
        offset: where a write, atomic or cas applies.
        data: the data of a write, append or cas.
        expected: the bytes a cas expects.
        size: the size a truncate sets.
        create: whether a write or append creates a missing blob.
        width: the integer width of an atomic (1, 2, 4 or 8).
        func: the atomic function's code (:class:`Func`).
        operand: the atomic's operand, as 64 bits.
    """

    kind: int
    key: str
    offset: int = 0
    data: Optional[BytesLike] = None
    expected: Optional[BytesLike] = None
    size: int = 0
    create: bool = False
    width: int = 0
    func: int = 0
    operand: int = 0


def create(key: str) -> Op:
    """Create an empty blob; the commit fails with ExistsError if it exists."""
    return Op(_lib.OP_CREATE, key)


def write(key: str, offset: int, data: BytesLike, create: bool = False) -> Op:
    """Write data at offset; with create a missing blob is created, else NotFoundError."""
    return Op(_lib.OP_WRITE, key, offset=uint("offset", offset), data=data, create=bool(create))


def append(key: str, data: BytesLike, create: bool = False) -> Op:
    """Append data at the blob's end; with create a missing blob is created."""
    return Op(_lib.OP_APPEND, key, data=data, create=bool(create))


def truncate(key: str, size: int) -> Op:
    """Set the blob's size: cut it, or extend it with zeros."""
    return Op(_lib.OP_TRUNCATE, key, size=uint("size", size))


def delete(key: str) -> Op:
    """Delete the blob."""
    return Op(_lib.OP_DELETE, key)


def atomic(key: str, offset: int, width: int, func: Union[str, Func], operand: int) -> Op:
    """Apply func to the little-endian integer of width bytes at offset; its new value is the result's ``value``."""
    return Op(
        _lib.OP_ATOMIC,
        key,
        offset=uint("offset", offset),
        width=int(width),
        func=func_code(func),
        operand=operand_bits(operand),
    )


def cas(key: str, offset: int, expected: BytesLike, data: BytesLike) -> Op:
    """Replace the bytes at offset with data if they equal expected (same length); else the commit fails with ConflictError."""
    if memoryview(expected).nbytes != memoryview(data).nbytes:
        raise invalid("compare-and-swap: expected and data differ in length")
    return Op(_lib.OP_CAS, key, offset=uint("offset", offset), expected=expected, data=data)
