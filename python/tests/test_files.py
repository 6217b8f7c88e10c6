"""File objects: Client.open in "rb", "wb" and "ab"."""

from __future__ import annotations

import io
import shutil

import pytest

import tyr


def pattern(n: int) -> bytes:
    return bytes((i * 31 + 7) % 256 for i in range(n))


def test_read_seek_tell(client: tyr.Client, ks: str) -> None:
    data = pattern(100_000)
    client.put(ks, "f", data)
    with client.open(ks, "f") as f:
        assert isinstance(f, io.BufferedIOBase) and isinstance(f, tyr.BlobReader)
        assert f.readable() and f.seekable() and not f.writable()
        assert f.name == f"{ks}/f" and f.size == len(data)
        assert f.read(10) == data[:10]
        assert f.tell() == 10
        assert f.seek(50_000) == 50_000
        assert f.read(5) == data[50_000:50_005]
        assert f.seek(-5, io.SEEK_CUR) == 50_000
        assert f.seek(-3, io.SEEK_END) == len(data) - 3
        assert f.read() == data[-3:]
        assert f.read(10) == b""  # at the end
        f.seek(0)
        assert f.read() == data
        f.seek(99_990)
        assert f.read(100) == data[99_990:]  # short at the end
        with pytest.raises(ValueError):
            f.seek(-1)
    assert f.closed
    with pytest.raises(ValueError):
        f.read(1)


def test_readinto_goes_straight_into_the_buffer(client: tyr.Client, ks: str) -> None:
    data = pattern(3 << 20)
    client.put(ks, "f", data)
    with client.open(ks, "f", buffer_size=64 * 1024) as f:
        small = bytearray(100)
        assert f.readinto(small) == 100 and small == data[:100]
        big = bytearray(2 << 20)  # larger than the buffer: read in place
        n = f.readinto(big)
        assert n == len(big) and big == data[100 : 100 + n]
        view = memoryview(bytearray(len(data)))
        f.seek(0)
        total = 0
        while True:
            got = f.readinto(view[total:])
            if not got:
                break
            total += got
        assert total == len(data) and view.tobytes() == data


def test_readline_and_iteration(client: tyr.Client, ks: str) -> None:
    client.put(ks, "lines", b"one\ntwo\nthree")
    with client.open(ks, "lines") as f:
        assert list(f) == [b"one\n", b"two\n", b"three"]
    with client.open(ks, "lines") as f:
        text = io.TextIOWrapper(f, encoding="utf-8")
        assert text.read().splitlines() == ["one", "two", "three"]


def test_open_missing_for_reading(client: tyr.Client, ks: str) -> None:
    with pytest.raises(tyr.NotFoundError):
        client.open(ks, "missing", "rb")


def test_write_creates_and_empties(client: tyr.Client, ks: str) -> None:
    with client.open(ks, "w", "wb") as f:
        assert isinstance(f, tyr.BlobWriter) and f.writable() and not f.readable()
        assert f.name == f"{ks}/w"
        for i in range(100):
            f.write(b"line %d\n" % i)
        f.write(memoryview(b"tail"))
    assert f.closed
    want = b"".join(b"line %d\n" % i for i in range(100)) + b"tail"
    assert client.get(ks, "w") == want
    # "wb" on an existing blob empties it first.
    with client.open(ks, "w", "wb") as f:
        f.write(b"short")
    assert client.get(ks, "w") == b"short"
    with client.open(ks, "w", "wb"):
        pass
    assert client.get(ks, "w") == b""


def test_large_streamed_write(client: tyr.Client, ks: str) -> None:
    data = pattern(11 << 20)  # several parts of 4 MiB
    with client.open(ks, "big", "wb") as f:
        f.write(data[:1000])
        f.write(memoryview(data)[1000 : 7 << 20])  # larger than the buffer
        f.write(data[7 << 20 :])
        assert f.tell() == len(data)
    assert client.stat(ks, "big").size == len(data)
    assert client.get(ks, "big") == data
    with client.open(ks, "big") as r:
        assert r.read() == data


def test_append_mode(client: tyr.Client, ks: str) -> None:
    with client.open(ks, "log", "ab") as f:  # created
        f.write(b"first,")
    with client.open(ks, "log", "ab") as f:
        assert f.tell() == 6
        f.write(b"second")
    assert client.get(ks, "log") == b"first,second"


def test_copyfileobj_between_blobs(client: tyr.Client, ks: str) -> None:
    data = pattern(5 << 20)
    client.put(ks, "src", data)
    with client.open(ks, "src") as src, client.open(ks, "dst", "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    assert client.get(ks, "dst") == data


def test_bad_modes(client: tyr.Client, ks: str) -> None:
    for mode in ("r", "w", "a", "r+b", "xb", "rbb", ""):
        with pytest.raises(tyr.InvalidArgumentError):
            client.open(ks, "x", mode)
    with pytest.raises(tyr.InvalidArgumentError):
        client.open(ks, "x", "wb", buffer_size=0)


def test_writer_error_at_close(client: tyr.Client) -> None:
    # A stream into a keyspace dropped meanwhile: the error comes out of
    # write or close, never silently.
    from conftest import fresh_name

    name = fresh_name("drop")
    client.create_keyspace(name, chunk_size=4096, sync=False)
    f = client.open(name, "k", "wb")
    client.drop_keyspace(name)
    with pytest.raises(tyr.NotFoundError):
        try:
            f.write(pattern(6 << 20))
        finally:
            f.close()
    assert f.closed and f.raw.closed
