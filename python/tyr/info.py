"""The data classes tyr returns: :class:`BlobInfo`, :class:`KeyspaceInfo` and :class:`OpResult`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Optional

from . import _lib

__all__ = ["BlobInfo", "KeyspaceInfo", "OpResult"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def time_from_ns(ns: int) -> datetime:
    """A Unix time in nanoseconds as an aware UTC datetime (to the microsecond)."""
    return _EPOCH + timedelta(microseconds=ns // 1000)


@dataclass(frozen=True)
class BlobInfo:
    """A blob's metadata (:meth:`tyr.Client.stat`, :meth:`tyr.Client.list`).

    Attributes:
        key: the blob's key.
        size: its size in bytes.
        version: its version, which every commit that changes it raises.
        created: when it was created (UTC).
        modified: when it was last changed (UTC).
    """

    key: str
    size: int
    version: int
    created: datetime
    modified: datetime

    @classmethod
    def _from_c(cls, c: Any, key: Optional[str] = None) -> "BlobInfo":
        if key is None:
            key = _lib.ffi.string(c.key).decode("utf-8", "surrogateescape") if c.key else ""
        return cls(
            key=key,
            size=int(c.size),
            version=int(c.version),
            created=time_from_ns(int(c.created_ns)),
            modified=time_from_ns(int(c.modified_ns)),
        )


@dataclass(frozen=True)
class KeyspaceInfo:
    """A keyspace's configuration and, from :meth:`tyr.Client.keyspace`, the answering node's figures.

    Attributes:
        name: the keyspace's name.
        chunk_size: the size of the chunks its blobs are striped into.
        replication: how many replicas of each chunk a cluster keeps.
        mvcc: whether old versions stay readable for transactions.
        sync: whether every commit is synced to disk before it is acknowledged.
        created: when it was created (UTC).
        disk_bytes: bytes it takes on the answering node's disk (0 unless from ``keyspace()``).
        logical_bytes: bytes of its blobs' data on that node.
        reclaim_bytes: bytes on that node waiting to be reclaimed.
        blobs: blobs on that node.
    """

    name: str
    chunk_size: int
    replication: int
    mvcc: bool
    sync: bool
    created: datetime
    disk_bytes: int = 0
    logical_bytes: int = 0
    reclaim_bytes: int = 0
    blobs: int = 0

    @classmethod
    def _from_c(cls, c: Any) -> "KeyspaceInfo":
        return cls(
            name=_lib.ffi.string(c.name).decode("utf-8", "replace"),
            chunk_size=int(c.config.chunk_size),
            replication=int(c.config.replication),
            mvcc=bool(c.config.mvcc),
            sync=bool(c.config.sync),
            created=time_from_ns(int(c.created_ns)),
            disk_bytes=int(c.disk_bytes),
            logical_bytes=int(c.logical_bytes),
            reclaim_bytes=int(c.reclaim_bytes),
            blobs=int(c.blobs),
        )


@dataclass(frozen=True)
class OpResult:
    """One committed op's outcome.

    Attributes:
        offset: where the data landed (write, append).
        size: the blob's size after the commit.
        version: the blob's version after it; 0 after a delete.
        value: the new value (atomic).
    """

    offset: int
    size: int
    version: int
    value: int

    @classmethod
    def _from_c(cls, c: Any) -> "OpResult":
        return cls(offset=int(c.offset), size=int(c.size), version=int(c.version), value=int(c.value))
