"""fsspec support for tyr: ``tyr://KEYSPACE/KEY`` URLs.

Installing the ``tyr`` package registers :class:`TyrFileSystem` under the
protocol ``tyr`` (entry point ``fsspec.specs``), so ``fsspec.open``,
``fsspec.filesystem("tyr")``, pandas, pyarrow and dask read and write tyr
blobs without importing this module first::

    import pandas as pd

    df.to_parquet("tyr://demo/tables/x.parquet",
                  storage_options={"endpoint": "127.0.0.1:7420"})
    pd.read_parquet("tyr://demo/tables/x.parquet",
                    storage_options={"endpoint": "127.0.0.1:7420"})

See :class:`TyrFileSystem` for how keyspaces, keys and directories map onto
paths.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Generator, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from glob import has_magic
from typing import Any

from fsspec.spec import AbstractBufferedFile, AbstractFileSystem
from fsspec.utils import tokenize

import tyr
from tyr import ops as tyr_ops

__all__ = ["TyrFile", "TyrFileSystem"]

#: One request's data: a write or read of at most this many bytes is one
#: atomic request.
PAYLOAD_BYTES_MAX = tyr.PAYLOAD_BYTES_MAX
#: The longest key, prefix or start_after the server takes.
KEY_BYTES_MAX = tyr.KEY_BYTES_MAX
#: Blobs per list request (at most tyr.LIST_LIMIT_MAX).
LIST_PAGE_DEFAULT = 1000
LIST_PAGE_MAX = tyr.LIST_LIMIT_MAX
#: Deletes per commit when removing many blobs (at most tyr.OPS_PER_TX_MAX).
DELETES_PER_COMMIT = 1000

# The largest code point: a key starting with a prefix P sorts at or before
# P followed by as many of these as fit in KEY_BYTES_MAX bytes, except for
# keys that start with all of them, which a listing then simply reads.
_MAX_CHAR = "\U0010ffff"


def _os_error(exc: tyr.Error, path: str) -> BaseException:
    """The OSError an fsspec caller expects for a tyr error, or exc itself."""
    message = getattr(exc, "message", "") or str(exc)
    if isinstance(exc, tyr.NotFoundError):
        return FileNotFoundError(errno.ENOENT, message, path)
    if isinstance(exc, tyr.ExistsError):
        return FileExistsError(errno.EEXIST, message, path)
    if isinstance(exc, tyr.NoSpaceError):
        return OSError(errno.ENOSPC, message, path)
    if isinstance(exc, tyr.TooLargeError):
        return OSError(errno.EFBIG, message, path)
    return exc


@contextmanager
def _errors(path: str) -> Iterator[None]:
    """Raises the fsspec-style OSError of a tyr error inside the block."""
    try:
        yield
    except tyr.Error as exc:
        translated = _os_error(exc, path)
        if translated is exc:
            raise
        raise translated from exc


def _past_prefix(prefix: str) -> str:
    """A start_after that skips (almost) every key starting with prefix.

    Every key that starts with prefix and is at most KEY_BYTES_MAX bytes long
    sorts at or before the result, unless it starts with the result itself;
    those few are still listed, so the result is only ever an optimisation.
    """
    room = KEY_BYTES_MAX - len(prefix.encode())
    return prefix + _MAX_CHAR * (room // len(_MAX_CHAR.encode()))


class TyrFileSystem(AbstractFileSystem):
    """An fsspec file system over a tyr server or cluster.

    Paths are ``KEYSPACE/KEY`` (URLs ``tyr://KEYSPACE/KEY``): the first path
    component names a keyspace, the rest is the blob's key. The root ``""``
    lists the keyspaces as directories.

    Directories are virtual, as in S3: a directory ``KEYSPACE/a/b`` exists
    while some key starts with ``a/b/``; there are no empty directories
    below a keyspace. Keyspaces themselves are real directories:

    - ``mkdir("ks")``/``makedirs("ks")`` create the keyspace (keyword
      arguments of ``mkdir`` - ``chunk_size``, ``replication``, ``mvcc``,
      ``sync`` - go to ``Client.create_keyspace``); ``mkdir``/``makedirs``
      of a deeper path create the keyspace if it is missing (with
      ``create_parents``, the default) and otherwise do nothing.
    - ``rmdir("ks")`` drops an empty keyspace; ``rm("ks", recursive=True)``
      drops the keyspace with all its blobs. ``rmdir`` of a deeper path
      raises ``OSError(ENOTEMPTY)`` while keys remain under it and otherwise
      does nothing.
    - Writing to a keyspace that does not exist raises FileNotFoundError
      (``put``/``put_file`` create it, through ``makedirs`` of the parent).

    Keys are flat strings in tyr; keys with an empty path component (``a//b``,
    a leading ``/``) cannot be addressed through this interface, and a key
    ending in ``/`` is taken as a marker of its directory and not listed.

    Writes: ``open(path, "wb")`` replaces the blob with its first block (one
    atomic put when the file is at most one block, 4 MiB by default) and
    writes each following block at its offset, so a file of any size needs
    one block of memory; readers may see a partly written file meanwhile.
    ``"ab"`` appends each block (atomically up to 4 MiB), ``"xb"`` creates
    the blob when opened and raises FileExistsError if it exists.
    ``pipe_file(..., mode="create")`` is atomic for up to 4 MiB. fsspec
    transactions (``autocommit=False``) are not supported.

    Reads: ``cat_file`` with a range is one read; files opened ``"rb"`` read
    blocks at offsets through fsspec's cache (``readahead`` by default).
    ``cp_file`` copies on the client, streaming large blobs in parts.

    Parameters
    ----------
    endpoint:
        ``host:port`` of a server of the cluster; default ``$TYR_ENDPOINT``,
        else ``127.0.0.1:7420``.
    timeout:
        Seconds each call may take (None: no deadline).
    list_page_size:
        Blobs per list request (at most 10000).

    The client is made at the first call and is shared by threads. Like
    libtyr, it does not survive ``fork()``: use the ``spawn`` or
    ``forkserver`` start methods for processes (the file system pickles by
    its options, so a new process connects anew).
    """

    protocol = "tyr"
    root_marker = ""

    def __init__(
        self,
        endpoint: str | None = None,
        timeout: float | None = None,
        list_page_size: int = LIST_PAGE_DEFAULT,
        **kwargs: Any,
    ) -> None:
        super().__init__(endpoint=endpoint, timeout=timeout, list_page_size=list_page_size, **kwargs)
        if not 1 <= list_page_size <= LIST_PAGE_MAX:
            raise ValueError(f"list_page_size {list_page_size} not in [1, {LIST_PAGE_MAX}]")
        self.endpoint: str = endpoint or os.environ.get("TYR_ENDPOINT") or "127.0.0.1:7420"
        self.timeout = timeout
        self.list_page_size = list_page_size
        self._client: tyr.Client | None = None
        self._client_lock = threading.Lock()

    # -- plumbing --------------------------------------------------------

    @property
    def client(self) -> tyr.Client:
        """The tyr client, connected at first use."""
        client = self._client
        if client is None:
            with self._client_lock:
                if self._client is None:
                    self._client = tyr.connect(self.endpoint, timeout=self.timeout)
                client = self._client
        return client

    def close(self) -> None:
        """Closes the client; a later call connects again."""
        with self._client_lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    @property
    def fsid(self) -> str:
        """Identifies the cluster by the endpoint it is reached through."""
        return f"tyr_{self.endpoint}"

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        """``tyr://ks/a/b/`` -> ``ks/a/b``; lists are stripped item by item."""
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = super()._strip_protocol(path)
        return path.strip("/")

    def unstrip_protocol(self, name: str) -> str:
        """``ks/a`` -> ``tyr://ks/a``."""
        if name.startswith("tyr://"):
            return name
        return "tyr://" + name.lstrip("/")

    def split_path(self, path: str) -> tuple[str, str]:
        """Splits a path into (keyspace, key); either may be ``""``."""
        path = self._strip_protocol(path)
        ks, _, key = path.partition("/")
        return ks, key

    def _blob_path(self, path: str) -> tuple[str, str]:
        """(keyspace, key) of a path that must name a blob."""
        ks, key = self.split_path(path)
        if not ks or not key:
            raise IsADirectoryError(errno.EISDIR, "a keyspace or the root is not a file", path)
        return ks, key

    @staticmethod
    def _file_info(ks: str, blob: Any) -> dict[str, Any]:
        return {
            "name": f"{ks}/{blob.key}",
            "size": blob.size,
            "type": "file",
            "version": blob.version,
            "created": blob.created,
            "modified": blob.modified,
            "mtime": blob.modified,
        }

    @staticmethod
    def _dir_info(name: str, **extra: Any) -> dict[str, Any]:
        return {"name": name, "size": 0, "type": "directory", **extra}

    @classmethod
    def _keyspace_info(cls, ks: Any) -> dict[str, Any]:
        return cls._dir_info(
            ks.name,
            created=ks.created,
            chunk_size=ks.chunk_size,
            replication=ks.replication,
            mvcc=ks.mvcc,
            sync=ks.sync,
        )

    def _pages(
        self, ks: str, prefix: str, start_after: str = ""
    ) -> Generator[tuple[list[Any], str | None], str | None, None]:
        """Pages of the blobs under prefix; send() a new start_after to skip."""
        while True:
            page, nxt = self.client.list_page(ks, prefix=prefix, start_after=start_after, limit=self.list_page_size)
            skip = yield page, nxt
            if nxt is None:
                return
            start_after = max(nxt, skip) if skip else nxt

    def _list_dir(self, ks: str, prefix: str) -> tuple[list[dict[str, Any]], bool]:
        """The entries of the directory prefix (``""`` or ending in ``/``).

        Keys are grouped client-side: a key with a ``/`` after prefix makes a
        sub-directory. When a page ends inside a sub-directory, the next page
        starts after that sub-directory's keys, so a listing costs about one
        request per page of entries and per sub-directory, not per key below.
        Returns the entries and whether anything (a marker key included) is
        under prefix.
        """
        files: list[dict[str, Any]] = []
        dirs: dict[str, None] = {}
        found = False
        pages = self._pages(ks, prefix)
        skip: str | None = None
        try:
            page, nxt = next(pages)
            while True:
                for blob in page:
                    found = True
                    rest = blob.key[len(prefix):]
                    if not rest:
                        continue  # the directory's own marker
                    cut = rest.find("/")
                    if cut < 0:
                        files.append(self._file_info(ks, blob))
                    else:
                        dirs.setdefault(rest[:cut])
                if nxt is None:
                    break
                rest = nxt[len(prefix):]
                cut = rest.find("/")
                skip = _past_prefix(prefix + rest[: cut + 1]) if cut >= 0 else None
                page, nxt = pages.send(skip)
        finally:
            pages.close()
        base = f"{ks}/{prefix}"
        entries = [self._dir_info(base + d) for d in dirs if d]
        entries.extend(files)
        entries.sort(key=lambda e: e["name"])
        return entries, found

    # -- listing and metadata -----------------------------------------------

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        """Lists a directory (a keyspace, a prefix, or the root's keyspaces).

        A path that names a blob and no directory lists that blob. Raises
        FileNotFoundError when nothing is at path.
        """
        path = self._strip_protocol(path)
        ks, key = self.split_path(path)
        if not ks:
            with _errors(path):
                entries = [self._keyspace_info(k) for k in self.client.keyspaces()]
        else:
            prefix = key + "/" if key else ""
            with _errors(path):
                entries, found = self._list_dir(ks, prefix)
                if not found and key:
                    entries = [self._file_info(ks, self.client.stat(ks, key)) | {"name": path}]
        if detail:
            return entries
        return [e["name"] for e in entries]

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        """Details of a blob (a stat), a keyspace, or a virtual directory."""
        path = self._strip_protocol(path)
        ks, key = self.split_path(path)
        if not ks:
            return self._dir_info("")
        with _errors(path):
            if not key:
                return self._keyspace_info(self.client.keyspace(ks))
            try:
                return self._file_info(ks, self.client.stat(ks, key)) | {"name": path}
            except tyr.NotFoundError:
                page, _ = self.client.list_page(ks, prefix=key + "/", limit=1)
                if page:
                    return self._dir_info(path)
                raise

    def exists(self, path: str, **kwargs: Any) -> bool:
        """Whether a blob, keyspace or non-empty directory is at path."""
        try:
            self.info(path)
            return True
        except (FileNotFoundError, ValueError):
            return False

    def find(
        self,
        path: str,
        maxdepth: int | None = None,
        withdirs: bool = False,
        detail: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Everything below path; without maxdepth one flat listing of keys."""
        path = self._strip_protocol(path)
        ks, key = self.split_path(path)
        if maxdepth is not None or not ks:
            return super().find(path, maxdepth=maxdepth, withdirs=withdirs, detail=detail, **kwargs)
        prefix = key + "/" if key else ""
        out: dict[str, dict[str, Any]] = {}
        found = False
        try:
            for blob in self.client.list(ks, prefix=prefix):
                found = True
                rest = blob.key[len(prefix):]
                parts = rest.split("/")
                if withdirs:
                    base = path
                    for part in parts[:-1]:
                        base = f"{base}/{part}"
                        if part and base not in out:
                            out[base] = self._dir_info(base)
                if rest and parts[-1] and "" not in parts:
                    out[f"{ks}/{blob.key}"] = self._file_info(ks, blob)
        except tyr.NotFoundError:
            return {} if detail else []
        if withdirs and (found or not key):
            out[path] = self._dir_info(path)
        if not found and key:
            try:
                out[path] = self.info(path)
            except FileNotFoundError:
                pass
        names = sorted(out)
        if detail:
            return {n: out[n] for n in names}
        return names

    def du(
        self,
        path: str,
        total: bool = True,
        maxdepth: int | None = None,
        withdirs: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Bytes of the blobs under path, from the listing (no stat per blob)."""
        found = self.find(path, maxdepth=maxdepth, withdirs=withdirs, detail=True, **kwargs)
        sizes = {name: info.get("size", 0) or 0 for name, info in found.items()}
        if total:
            return sum(sizes.values())
        return sizes

    def modified(self, path: str) -> datetime:
        """When the blob was last changed (a keyspace: when it was created)."""
        info = self.info(path)
        if "modified" in info:
            return info["modified"]
        if "created" in info:
            return info["created"]
        raise IsADirectoryError(errno.EISDIR, "a virtual directory has no times", path)

    def created(self, path: str) -> datetime:
        """When the blob (or keyspace) was created."""
        info = self.info(path)
        if "created" in info:
            return info["created"]
        raise IsADirectoryError(errno.EISDIR, "a virtual directory has no times", path)

    def checksum(self, path: str) -> int:
        """Changes whenever the blob does: its version and times."""
        info = self.info(path)
        return int(
            tokenize(info["name"], info["type"], info.get("size"), info.get("version"),
                     str(info.get("created")), str(info.get("modified"))),
            16,
        )

    def ukey(self, path: str) -> str:
        """Hash of the blob's identity and version."""
        return hex(self.checksum(path))[2:]

    # -- directories ---------------------------------------------------------

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        """Creates a keyspace (``mkdir("ks", chunk_size=..., ...)``).

        Deeper paths are virtual directories: the keyspace is created if it
        is missing and create_parents is true, else FileNotFoundError.
        """
        path = self._strip_protocol(path)
        ks, key = self.split_path(path)
        if not ks:
            raise FileExistsError(errno.EEXIST, "the root exists", path)
        with _errors(path):
            if not key:
                self.client.create_keyspace(ks, **kwargs)
                return
            try:
                self.client.keyspace(ks)
            except tyr.NotFoundError:
                if not create_parents:
                    raise
                try:
                    self.client.create_keyspace(ks, **kwargs)
                except tyr.ExistsError:
                    pass

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        """Creates the keyspace of path if missing; a no-op for prefixes.

        FileExistsError only for an existing keyspace (path ``"ks"``) when
        not exist_ok: virtual directories are not checked.
        """
        path = self._strip_protocol(path)
        ks, key = self.split_path(path)
        if not ks:
            if exist_ok:
                return
            raise FileExistsError(errno.EEXIST, "the root exists", path)
        with _errors(path):
            try:
                self.client.create_keyspace(ks)
            except tyr.ExistsError:
                if key or exist_ok:
                    return
                raise

    def rmdir(self, path: str) -> None:
        """Drops an empty keyspace; for a prefix, fails only if not empty."""
        path = self._strip_protocol(path)
        ks, key = self.split_path(path)
        if not ks:
            raise PermissionError(errno.EPERM, "cannot remove the root", path)
        with _errors(path):
            page, _ = self.client.list_page(ks, prefix=key + "/" if key else "", limit=1)
            if page:
                raise OSError(errno.ENOTEMPTY, "directory not empty", path)
            if not key:
                self.client.drop_keyspace(ks)
            elif self.client.exists(ks, key):
                raise NotADirectoryError(errno.ENOTDIR, "a file, not a directory", path)

    # -- reading and writing ---------------------------------------------------

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        """The blob's bytes [start, end) (negative: from the end), in one read.

        Negative offsets first need the blob's size (a stat).
        """
        path = self._strip_protocol(path)
        ks, key = self._blob_path(path)
        with _errors(path):
            if (start is not None and start < 0) or (end is not None and end < 0):
                size = self.client.stat(ks, key).size
                if start is not None and start < 0:
                    start = max(0, size + start)
                if end is not None and end < 0:
                    end = max(0, size + end)
            offset = start or 0
            if end is None:
                return self.client.read(ks, key, offset)
            if end <= offset:
                self.client.stat(ks, key)
                return b""
            return self.client.read(ks, key, offset, end - offset)

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        """Creates or replaces the blob (atomic up to 4 MiB).

        mode="create" raises FileExistsError if the blob exists (atomically:
        the blob is created in the same commit as its first 4 MiB).
        """
        path = self._strip_protocol(path)
        ks, key = self._blob_path(path)
        data = memoryview(value).cast("B")
        with _errors(path):
            if mode == "create":
                head, rest = data[:PAYLOAD_BYTES_MAX], data[PAYLOAD_BYTES_MAX:]
                operations = [tyr_ops.create(key)]
                if len(head):
                    operations.append(tyr_ops.write(key, 0, head))
                self.client.commit(ks, operations)
                if len(rest):
                    self.client.write(ks, key, rest, offset=len(head))
            elif mode == "overwrite":
                self.client.put(ks, key, data)
            else:
                raise ValueError(f"pipe_file mode {mode!r}: 'overwrite' or 'create'")

    def rm_file(self, path: str) -> None:
        """Deletes one blob."""
        path = self._strip_protocol(path)
        ks, key = self._blob_path(path)
        with _errors(path):
            self.client.delete(ks, key)

    def _rm(self, path: str) -> None:
        self.rm_file(path)

    def _delete_keys(self, ks: str, keys: Sequence[str]) -> list[str]:
        """Deletes keys of ks, many per commit; returns the keys not found.

        A commit is all or nothing, so a batch that meets a missing key is
        done again one delete at a time.
        """
        missing: list[str] = []
        for i in range(0, len(keys), DELETES_PER_COMMIT):
            batch = keys[i:i + DELETES_PER_COMMIT]
            try:
                if len(batch) == 1:
                    self.client.delete(ks, batch[0])
                else:
                    self.client.commit(ks, [tyr_ops.delete(k) for k in batch])
                continue
            except tyr.NotFoundError:
                if len(batch) == 1:
                    missing.append(batch[0])
                    continue
            for k in batch:
                try:
                    self.client.delete(ks, k)
                except tyr.NotFoundError:
                    missing.append(k)
        return missing

    def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> None:
        """Deletes blobs; with recursive, directories with all below them.

        ``rm("ks", recursive=True)`` drops the whole keyspace. Without
        maxdepth, a recursive rm deletes every key under the directory (one
        listing, markers included) and the blob named by the path itself if
        there is one. Blobs of one keyspace are deleted up to 1000 per
        commit. A directory without recursive raises IsADirectoryError, a
        missing path FileNotFoundError.
        """
        given = [path] if isinstance(path, (str, os.PathLike)) else list(path)
        paths: list[str] = [self._strip_protocol(os.fspath(p)) for p in given]
        if any(not p for p in paths):
            raise PermissionError(errno.EPERM, "cannot remove the root", "")
        drop: dict[str, None] = {}
        # keyspace -> key -> whether it must exist (else nothing was found)
        deletes: dict[str, dict[str, bool]] = {}
        for p in paths:
            ks, key = self.split_path(p)
            if has_magic(p) or (recursive and maxdepth is not None):
                for name, info in self._expand(p, recursive, maxdepth).items():
                    name_ks, name_key = self.split_path(name)
                    if not name_key:
                        if recursive and maxdepth is None:
                            drop[name_ks] = None
                    elif info["type"] == "file":
                        deletes.setdefault(name_ks, {})[name_key] = False
                continue
            if not key:
                if not recursive:
                    raise IsADirectoryError(errno.EISDIR, "a keyspace; use recursive=True", p)
                drop[ks] = None
                continue
            keys = deletes.setdefault(ks, {})
            if recursive:
                with _errors(p):
                    below = [b.key for b in self.client.list(ks, prefix=key + "/")]
                keys.update(dict.fromkeys(below, False))
                keys[key] = keys.get(key, False) or not below
            else:
                keys[key] = True
        for ks in drop:
            with _errors(ks):
                self.client.keyspace(ks)
            deletes.pop(ks, None)
        for ks, keys in deletes.items():
            with _errors(f"{ks}/"):
                missing = self._delete_keys(ks, list(keys))
            for key in missing:
                name = f"{ks}/{key}"
                if not keys[key]:
                    continue
                if not recursive and self.isdir(name):
                    raise IsADirectoryError(errno.EISDIR, "a directory; use recursive=True", name)
                raise FileNotFoundError(errno.ENOENT, "no such file or directory", name)
        for ks in drop:
            with _errors(ks):
                self.client.drop_keyspace(ks)
        self.invalidate_cache()

    def _expand(self, path: str, recursive: bool, maxdepth: int | None) -> dict[str, dict[str, Any]]:
        """expand_path of one path, with each name's info."""
        if maxdepth is not None and maxdepth < 1:
            raise ValueError("maxdepth must be at least 1")
        out: dict[str, dict[str, Any]] = {}
        if has_magic(path):
            bit = self.glob(path, maxdepth=maxdepth, detail=True)
            out.update(bit)
            if recursive and (maxdepth is None or maxdepth > 1):
                for name, info in bit.items():
                    if info["type"] == "directory":
                        out.update(self.find(name, maxdepth=maxdepth - 1 if maxdepth else None,
                                             withdirs=True, detail=True))
        else:
            out.update(self.find(path, maxdepth=maxdepth, withdirs=True, detail=True))
        if not out:
            raise FileNotFoundError(errno.ENOENT, "no such file or directory", path)
        return out

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        """Copies a blob on the client (tyr has no server-side copy).

        Up to 4 MiB it is one read and one atomic put; larger blobs stream in
        parts, so memory stays bounded. Copying a directory does nothing
        (directories are virtual).
        """
        path1, path2 = self._strip_protocol(path1), self._strip_protocol(path2)
        src_ks, src_key = self.split_path(path1)
        if not src_key:
            if self.isdir(path1):
                return
            raise FileNotFoundError(errno.ENOENT, "no such blob", path1)
        dst_ks, dst_key = self._blob_path(path2)
        with _errors(path1):
            try:
                size = self.client.stat(src_ks, src_key).size
            except tyr.NotFoundError:
                if self.isdir(path1):
                    return
                raise
            if size <= PAYLOAD_BYTES_MAX:
                data = self.client.read(src_ks, src_key, 0, PAYLOAD_BYTES_MAX + 1)
                if len(data) <= PAYLOAD_BYTES_MAX:
                    with _errors(path2):
                        self.client.put(dst_ks, dst_key, data)
                    return
            buf = bytearray(PAYLOAD_BYTES_MAX)
            view = memoryview(buf)
            with self.client.open(src_ks, src_key, "rb") as src:
                with _errors(path2), self.client.open(dst_ks, dst_key, "wb") as dst:
                    while True:
                        n = src.readinto(view)
                        if not n:
                            break
                        dst.write(view[:n])

    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: int | str | None = None,
        autocommit: bool = True,
        cache_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> TyrFile:
        """A buffered file over the blob (modes rb, wb, ab, xb)."""
        if not autocommit:
            raise NotImplementedError("tyr files do not support fsspec transactions (autocommit=False)")
        return TyrFile(self, path, mode, block_size=block_size, cache_options=cache_options, **kwargs)

    def touch(self, path: str, truncate: bool = True, **kwargs: Any) -> None:
        """Creates an empty blob, or empties it (truncate=True); without
        truncate an existing blob is left as it is."""
        path = self._strip_protocol(path)
        ks, key = self._blob_path(path)
        with _errors(path):
            if truncate:
                self.client.put(ks, key, b"")
                return
            try:
                self.client.create(ks, key)
            except tyr.ExistsError:
                pass


class TyrFile(AbstractBufferedFile):
    """A blob opened through :class:`TyrFileSystem`.

    Reading fetches ranges (one read each) through fsspec's cache. Writing
    (``wb``) puts the first block, replacing any old blob, then writes each
    later block at its offset; ``ab`` appends each block; ``xb`` creates
    the blob when opened (FileExistsError if it exists).
    """

    #: One request's payload: each block read or written is one request.
    DEFAULT_BLOCK_SIZE = PAYLOAD_BYTES_MAX

    fs: TyrFileSystem

    def __init__(
        self,
        fs: TyrFileSystem,
        path: str,
        mode: str = "rb",
        block_size: int | str | None = "default",
        autocommit: bool = True,
        cache_type: str = "readahead",
        cache_options: dict[str, Any] | None = None,
        size: int | None = None,
        **kwargs: Any,
    ) -> None:
        path = fs._strip_protocol(path)
        self.keyspace, self.key = fs._blob_path(path)
        if mode == "rb" and size is None:
            info = fs.info(path)
            if info["type"] != "file":
                raise IsADirectoryError(errno.EISDIR, "a directory, not a file", path)
            size = info["size"]
            self._details = info
        super().__init__(
            fs, path, mode=mode, block_size=block_size, autocommit=autocommit,
            cache_type=cache_type, cache_options=cache_options, size=size, **kwargs,
        )
        if mode == "xb":
            with _errors(path):
                fs.client.create(self.keyspace, self.key)
        elif mode == "ab":
            with _errors(path):
                try:
                    fs.client.create(self.keyspace, self.key)
                except tyr.ExistsError:
                    pass

    def _fetch_range(self, start: int, end: int) -> bytes:
        """Bytes [start, end) of the blob, in one read."""
        if end <= start:
            return b""
        with _errors(self.path):
            return self.fs.client.read(self.keyspace, self.key, start, end - start)

    def _initiate_upload(self) -> None:
        """Nothing to do: the first block's put replaces the old blob."""

    def _upload_chunk(self, final: bool = False) -> bool:
        """Writes the buffered block at its offset in the blob."""
        client = self.fs.client
        with _errors(self.path), self.buffer.getbuffer() as data:
            if self.mode == "wb" and self.offset == 0:
                client.put(self.keyspace, self.key, data)
            elif self.mode == "ab":
                for i in range(0, len(data), PAYLOAD_BYTES_MAX):
                    client.append(self.keyspace, self.key, data[i:i + PAYLOAD_BYTES_MAX])
            elif len(data):
                client.write(self.keyspace, self.key, data, offset=self.offset)
        return True
