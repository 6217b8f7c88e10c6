"""File objects over blobs (:meth:`tyr.Client.open`).

``"rb"`` gives a seekable :class:`BlobReader` (an :class:`io.BufferedReader`)
whose raw reads go to the server at their offsets, straight into the caller's
buffer, and whose sequential reads become a stream that reads ahead; ``"wb"`` and ``"ab"`` give a :class:`BlobWriter` (an
:class:`io.BufferedWriter`) streaming into the blob. Each part of a stream is
atomic (at most 4 MiB), the whole is not.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any, Optional

from . import _lib
from ._util import check, rbuf, status

if TYPE_CHECKING:
    from .client import Client

__all__ = ["BlobReader", "BlobWriter", "RawBlobReader", "RawBlobWriter", "DEFAULT_BUFFER_SIZE"]

#: The buffer size of blob file objects: a read or write smaller than this
#: is gathered into one round trip.
DEFAULT_BUFFER_SIZE = 1 << 20


class RawBlobReader(io.RawIOBase):
    """Unbuffered reads of a blob at a position.

    A ``readinto`` is one ``tyr_read`` into the caller's buffer. From the
    second read that starts where the one before it ended, reads come from
    a stream (``tyr_reader``) opened at the position, which keeps a few
    4 MiB parts in flight ahead of the reader; a seek elsewhere closes it.
    Each part is read from one version of the blob, the whole not, as with
    reads at offsets.
    """

    def __init__(self, client: "Client", ks: bytes, key: bytes, name: str, size: int) -> None:
        super().__init__()
        self._client = client
        self._ks = ks
        self._key = key
        self._name = name
        self._size = size
        self._pos = 0
        self._last_end = -1  # where the last read ended
        self._stream = 0  # a tyr_reader handle at self._pos, or 0

    @property
    def name(self) -> str:
        """The blob as "keyspace/key"."""
        return self._name

    @property
    def size(self) -> int:
        """The blob's size when it was opened (or last sought from its end)."""
        return self._size

    @property
    def mode(self) -> str:
        """The mode, "rb"."""
        return "rb"

    def readable(self) -> bool:
        """True: a reader reads."""
        return True

    def seekable(self) -> bool:
        """True: a reader can seek anywhere."""
        return True

    def readinto(self, b: Any) -> int:
        """Read up to len(b) bytes at the position into b; 0 at the end of the blob."""
        if self.closed:
            raise ValueError("I/O operation on closed file")
        if self._stream == 0 and self._pos == self._last_end:
            self._stream = self._client._reader_open(self._ks, self._key, self._pos)
        if self._stream:
            n = self._client._reader_read(self._stream, b)
        else:
            n = self._client._readinto(self._ks, self._key, b, self._pos)
        self._pos += n
        self._last_end = self._pos
        return n

    def _close_stream(self) -> None:
        h, self._stream = self._stream, 0
        if h and not _lib.forked():
            _lib.lib().tyr_reader_close(h)

    def close(self) -> None:
        """Close the reader and its stream, if it has one."""
        self._close_stream()
        super().close()

    def readall(self) -> bytes:
        """Read from the position to the end of the blob, in one request (parts of it beyond 4 MiB)."""
        if self.closed:
            raise ValueError("I/O operation on closed file")
        data = self._client._read(self._ks, self._key, self._pos, None)
        self._pos += len(data)
        return data

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move the position; SEEK_END is from the blob's current size."""
        if self.closed:
            raise ValueError("I/O operation on closed file")
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            self._size = self._client._size(self._ks, self._key)
            pos = self._size + offset
        else:
            raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
        if pos < 0:
            raise ValueError(f"negative seek position {pos}")
        if pos != self._pos:
            self._close_stream()
        self._pos = pos
        return pos

    def tell(self) -> int:
        """The position."""
        return self._pos


class RawBlobWriter(io.RawIOBase):
    """Unbuffered writes streamed into a blob (``tyr_writer``); ``close`` waits for every part and raises the stream's first error."""

    def __init__(self, client: "Client", handle: int, name: str, mode: str, offset: int) -> None:
        super().__init__()
        self._client = client
        self._h = handle
        self._name = name
        self._mode = mode
        self._pos = offset

    @property
    def name(self) -> str:
        """The blob as "keyspace/key"."""
        return self._name

    @property
    def mode(self) -> str:
        """The mode, "wb" or "ab"."""
        return self._mode

    def writable(self) -> bool:
        """True: a writer writes."""
        return True

    def write(self, b: Any) -> int:
        """Write all of b at the position; return len(b) in bytes."""
        if self.closed or self._h == 0:
            raise ValueError("I/O operation on closed file")
        L = _lib.lib()  # raises in a forked child
        st = status()
        with rbuf(b) as d:
            n = len(d)
            check(L.tyr_writer_write(self._h, d, n, st), st)
        self._pos += n
        return n

    def tell(self) -> int:
        """The offset the next write lands at."""
        return self._pos

    def close(self) -> None:
        """Write the last part, wait for all, and raise the stream's first error."""
        if self.closed:
            return
        h, self._h = self._h, 0
        try:
            if h and not _lib.forked():
                L = _lib.lib()
                st = status()
                check(L.tyr_writer_close(h, st), st)
        finally:
            super().close()


class BlobReader(io.BufferedReader):
    """A seekable, buffered reader of a blob (``Client.open(ks, key, "rb")``).

    Reads of at least the buffer's size go straight into the caller's
    buffer (``readinto``) without a copy.
    """

    raw: RawBlobReader

    @property
    def size(self) -> int:
        """The blob's size when it was opened."""
        return self.raw.size


class BlobWriter(io.BufferedWriter):
    """A buffered writer streaming into a blob (``Client.open(ks, key, "wb" or "ab")``).

    ``close`` (or the end of a ``with`` block) waits for every part to be
    written and raises the first error of the stream.
    """

    raw: RawBlobWriter


def open_blob(client: "Client", ks: str, key: str, mode: str, buffer_size: Optional[int]) -> io.BufferedIOBase:
    """Open blob ks/key as a file object; see :meth:`tyr.Client.open`."""
    from ._util import name_bytes
    from .errors import NotFoundError, invalid

    if buffer_size is None:
        buffer_size = DEFAULT_BUFFER_SIZE
    if buffer_size <= 0:
        raise invalid(f"buffer_size {buffer_size} is not positive")
    ksb, kb = name_bytes(ks, "keyspace"), name_bytes(key)
    name = f"{ks}/{key}"
    m = mode.replace("b", "", 1) if mode.count("b") == 1 else None
    if m == "r":
        size = client._size(ksb, kb)
        return BlobReader(RawBlobReader(client, ksb, kb, name, size), buffer_size)
    if m in ("w", "a"):
        if m == "w":
            client.put(ks, key, b"")
            offset = 0
        else:
            try:
                offset = client._size(ksb, kb)
            except NotFoundError:
                offset = 0
        h = client._writer_open(ksb, kb, offset, True)
        return BlobWriter(RawBlobWriter(client, h, name, "wb" if m == "w" else "ab", offset), buffer_size)
    raise invalid(f"mode {mode!r}: want 'rb', 'wb' or 'ab'")

