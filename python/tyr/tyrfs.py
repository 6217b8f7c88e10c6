"""TýrFS, the file system ``tyr mount`` serves from a keyspace, read without FUSE.

A file at ``/a/b`` is the blob ``/a/b`` of the keyspace, its metadata in a
64-byte header before its bytes. :meth:`FileSystem.fetch_many` reads whole
files by path, each in one request to the node that holds it, after that
node checked the permissions of the user the file system acts for; the
requests bound for one node travel together, so a batch of small files
costs about one round trip per node. It suits loaders of many small files
(a training set's samples, say)::

    with client.tyrfs("home", uid=1000, gids=[100]) as fs:
        for path, data in zip(paths, fs.fetch_many(paths)):
            if isinstance(data, OSError):
                ...
"""

from __future__ import annotations

import os
from typing import Any, Iterable, List, Sequence, Union

from . import _lib
from ._util import check, closed_error, ffi, name_bytes, status, take_bytes
from .errors import invalid

#: Paths of one :meth:`FileSystem.fetch_many` call.
FETCH_MANY_MAX = _lib.FS_FETCH_MANY_MAX
#: Groups a file system acts for, beside its user.
GROUPS_MAX = _lib.FS_GROUPS_MAX


class FileSystem:
    """The TýrFS file system of one keyspace, acting for one user and groups.

    Made by :meth:`tyr.Client.tyrfs`; close it (or use it in a ``with``
    statement) when done. Thread-safe.
    """

    def __init__(self, client: Any, ks: str, uid: int = 0, gids: Iterable[int] = ()) -> None:
        L, h = client._c()
        groups = list(gids)
        if len(groups) > GROUPS_MAX:
            raise invalid(f"{len(groups)} groups, above {GROUPS_MAX}")
        if not 0 <= uid < 1 << 32 or any(not 0 <= g < 1 << 32 for g in groups):
            raise invalid("uid and gids must be in [0, 2**32)")
        out = ffi.new("tyr_fs *")
        st = status()
        check(L.tyr_fs_open(h, name_bytes(ks, "keyspace"), uid, ffi.new("uint32_t[]", groups) if groups else ffi.NULL,
                            len(groups), out, st), st)
        self._client = client  # the file system works while the client does
        self._h = int(out[0])
        self.keyspace = ks

    def close(self) -> None:
        """Release the file system. Idempotent."""
        h, self._h = self._h, 0
        if h:
            _lib.lib().tyr_fs_close(h)

    def __enter__(self) -> "FileSystem":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def fetch(self, path: str) -> bytes:
        """The whole file at the absolute path; an OSError (FileNotFoundError,
        PermissionError, IsADirectoryError, ...) if it cannot be read."""
        got = self.fetch_many([path])[0]
        if isinstance(got, OSError):
            raise got
        return got

    def fetch_many(self, paths: Sequence[str]) -> List[Union[bytes, OSError]]:
        """The whole files at the absolute paths, in order: each its bytes,
        or the OSError it failed with. Batches above FETCH_MANY_MAX paths
        are sent FETCH_MANY_MAX at a time."""
        out: List[Union[bytes, OSError]] = []
        for at in range(0, len(paths), FETCH_MANY_MAX):
            out.extend(self._fetch(paths[at:at + FETCH_MANY_MAX]))
        return out

    def _fetch(self, paths: Sequence[str]) -> List[Union[bytes, OSError]]:
        L = _lib.lib()
        if self._h == 0:
            raise closed_error("file system")
        names = [ffi.new("char[]", name_bytes(p, "path")) for p in paths]
        files = ffi.new("tyr_fs_file[]", len(paths))
        st = status()
        check(L.tyr_fs_fetch_many(self._h, ffi.new("char *[]", names), len(paths), files, st), st)
        out: List[Union[bytes, OSError]] = []
        for i, p in enumerate(paths):
            f = files[i]
            data = take_bytes(f.data, int(f.len))
            if f.err:
                out.append(OSError(f.err, os.strerror(f.err), p))
            else:
                out.append(data)
        return out

    def __repr__(self) -> str:
        return f"<tyr.FileSystem {self.keyspace!r}{' closed' if self._h == 0 else ''}>"
