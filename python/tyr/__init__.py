"""tyr: the Python client of tyr, a distributed transactional blob store.

::

    import tyr

    with tyr.connect("127.0.0.1:7420") as client:
        client.create_keyspace("demo")
        client.put("demo", "greeting", b"hello")
        assert client.get("demo", "greeting") == b"hello"

        client.put("demo", "counter", (0).to_bytes(8, "little"))

        @client.transactional("demo")
        def bump(tx, by):
            n = int.from_bytes(tx.read("counter"), "little") + by
            tx.write("counter", n.to_bytes(8, "little"))
            return n

        bump(5)  # runs again after a conflict; returns 5

The bindings call libtyr (the Go client built as a C library, ``libtyr/tyr.h``)
through cffi: routing, transactions, retries and the resolution of a commit
whose answer was lost are the Go client's. The library is loaded at the first
:func:`connect`; the ``TYR_LIBRARY`` environment variable names another copy.
libtyr does not survive ``fork()``: use the "spawn" or "forkserver"
multiprocessing start methods.
"""

from __future__ import annotations

from . import ops, tyrfs
from ._lib import (
    BLOB_BYTES_MAX,
    CAS_BYTES_MAX,
    KEY_BYTES_MAX,
    KEYSPACE_NAME_BYTES_MAX,
    LIST_LIMIT_MAX,
    OPS_PER_TX_MAX,
    PAYLOAD_BYTES_MAX,
    READ_CHECKS_MAX,
)
from .client import DEFAULT_ENDPOINT, Client, connect
from .errors import (
    ConflictError,
    CorruptionError,
    Error,
    ExistsError,
    InvalidArgumentError,
    NoSpaceError,
    NotFoundError,
    OutcomeUnknownError,
    OutOfRangeError,
    TimeoutError,
    TooLargeError,
    UnavailableError,
)
from .files import BlobReader, BlobWriter
from .info import BlobInfo, KeyspaceInfo, OpResult
from .ops import Func, Op
from .transaction import Transaction

#: The version of this package.
__version__ = "0.1.0"

__all__ = [
    "connect",
    "Client",
    "Transaction",
    "BlobReader",
    "BlobWriter",
    "BlobInfo",
    "KeyspaceInfo",
    "OpResult",
    "Func",
    "Op",
    "ops",
    "tyrfs",
    "Error",
    "NotFoundError",
    "ExistsError",
    "InvalidArgumentError",
    "OutOfRangeError",
    "TooLargeError",
    "UnavailableError",
    "OutcomeUnknownError",
    "ConflictError",
    "CorruptionError",
    "NoSpaceError",
    "TimeoutError",
    "DEFAULT_ENDPOINT",
    "PAYLOAD_BYTES_MAX",
    "KEY_BYTES_MAX",
    "KEYSPACE_NAME_BYTES_MAX",
    "BLOB_BYTES_MAX",
    "LIST_LIMIT_MAX",
    "CAS_BYTES_MAX",
    "OPS_PER_TX_MAX",
    "READ_CHECKS_MAX",
    "__version__",
]
