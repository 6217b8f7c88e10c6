"""Every call of tyr.Client against a real server."""

from __future__ import annotations

import array
import datetime as dt
import json

import pytest

import tyr
from tyr import ops

from conftest import fresh_name


def test_connect_defaults_and_ready(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TYR_ENDPOINT", endpoint)
    with tyr.connect() as c:
        assert c.endpoint == endpoint
        assert c.timeout is None
        assert c.ready() is True
        assert not c.closed
    assert c.closed
    c.close()  # idempotent
    with pytest.raises(tyr.InvalidArgumentError):
        c.ready()
    with tyr.Client(endpoint, timeout=5, routing=False, data_path=False) as c2:
        assert c2.ready() is True
        assert c2.timeout == 5


def test_connect_rejects_bad_timeout(endpoint: str) -> None:
    for bad in (0, -1, float("nan")):
        with pytest.raises(tyr.InvalidArgumentError):
            tyr.connect(endpoint, timeout=bad)


def test_keyspaces(client: tyr.Client) -> None:
    name = fresh_name("ksx")
    before = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=5)
    info = client.create_keyspace(name, chunk_size=8192, mvcc=False, sync=False)
    try:
        assert info.name == name
        assert (info.chunk_size, info.replication, info.mvcc, info.sync) == (8192, 1, False, False)
        assert info.created >= before and info.created.tzinfo is not None
        got = client.keyspace(name)
        assert (got.name, got.chunk_size, got.mvcc, got.sync) == (name, 8192, False, False)
        assert got.created == info.created
        names = [k.name for k in client.keyspaces()]
        assert name in names and names == sorted(names)
        with pytest.raises(tyr.ExistsError):
            client.create_keyspace(name)
        # Usage figures count the blobs written.
        client.put(name, "b", b"x" * 10000)
        usage = client.keyspace(name)
        assert usage.blobs == 1 and usage.logical_bytes >= 10000 and usage.disk_bytes > 0
    finally:
        client.drop_keyspace(name)
    with pytest.raises(tyr.NotFoundError):
        client.keyspace(name)
    with pytest.raises(tyr.NotFoundError):
        client.drop_keyspace(name)
    assert name not in [k.name for k in client.keyspaces()]


def test_keyspace_defaults(client: tyr.Client) -> None:
    name = fresh_name("ksd")
    info = client.create_keyspace(name)
    try:
        assert (info.chunk_size, info.replication, info.mvcc, info.sync) == (64 << 20, 1, True, True)
    finally:
        client.drop_keyspace(name)


def test_create_stat_exists_delete(client: tyr.Client, ks: str) -> None:
    assert client.exists(ks, "a") is False
    client.create(ks, "a")
    assert client.exists(ks, "a") is True
    info = client.stat(ks, "a")
    assert (info.key, info.size) == ("a", 0)
    assert info.version > 0 and info.created <= info.modified
    with pytest.raises(tyr.ExistsError):
        client.create(ks, "a")
    client.delete(ks, "a")
    assert not client.exists(ks, "a")
    with pytest.raises(tyr.NotFoundError):
        client.stat(ks, "a")
    with pytest.raises(tyr.NotFoundError):
        client.delete(ks, "a")


def test_put_get_read(client: tyr.Client, ks: str) -> None:
    data = bytes(range(256)) * 100  # 25,600 bytes: several 4 KiB chunks
    client.put(ks, "p", data)
    assert client.get(ks, "p") == data
    assert client.read(ks, "p") == data
    assert client.read(ks, "p", 100) == data[100:]
    assert client.read(ks, "p", 4000, 200) == data[4000:4200]
    assert client.read(ks, "p", len(data) - 3, 100) == data[-3:]  # short at the end
    assert client.read(ks, "p", len(data) + 10, 5) == b""
    assert client.read(ks, "p", 5, 0) == b""
    assert client.read(ks, "p", 0, 1 << 30) == data  # a generous length
    # put replaces.
    client.put(ks, "p", b"short")
    assert client.get(ks, "p") == b"short"
    assert client.stat(ks, "p").size == 5
    # Empty blobs and every bytes-like type.
    client.put(ks, "e", b"")
    assert client.get(ks, "e") == b""
    client.put(ks, "ba", bytearray(b"from bytearray"))
    assert client.get(ks, "ba") == b"from bytearray"
    client.put(ks, "mv", memoryview(b"0123456789")[2:6])
    assert client.get(ks, "mv") == b"2345"
    client.put(ks, "arr", array.array("I", [1, 2, 3]))
    assert client.get(ks, "arr") == array.array("I", [1, 2, 3]).tobytes()
    with pytest.raises(TypeError):
        client.put(ks, "s", "a str")  # type: ignore[arg-type]
    with pytest.raises(tyr.NotFoundError):
        client.get(ks, "missing")
    with pytest.raises(tyr.NotFoundError):
        client.read(ks, "missing", 0, 10)


def test_large_put_and_read(client: tyr.Client, ks: str) -> None:
    size = 9 * (1 << 20) + 123  # more than two requests' worth
    data = bytes((i * 7) % 251 for i in range(size))
    client.put(ks, "big", data)
    assert client.stat(ks, "big").size == size
    assert client.get(ks, "big") == data
    assert client.read(ks, "big", 5 << 20) == data[5 << 20:]
    buf = bytearray(size)
    assert client.readinto(ks, "big", buf) == size
    assert buf == data


def test_readinto(client: tyr.Client, ks: str) -> None:
    client.put(ks, "r", b"abcdefghij")
    buf = bytearray(4)
    assert client.readinto(ks, "r", buf) == 4 and buf == b"abcd"
    assert client.readinto(ks, "r", buf, offset=8) == 2 and buf[:2] == b"ij"
    # Into a slice of a larger buffer, through a memoryview: no copy.
    big = bytearray(b"-" * 12)
    assert client.readinto(ks, "r", memoryview(big)[1:6], offset=2) == 5
    assert big == b"-cdefg------"
    # Into an array of another item size.
    a = array.array("H", [0, 0])
    assert client.readinto(ks, "r", a) == 4
    assert a.tobytes() == b"abcd"
    with pytest.raises((TypeError, BufferError)):
        client.readinto(ks, "r", b"read-only")


def test_write(client: tyr.Client, ks: str) -> None:
    with pytest.raises(tyr.NotFoundError):
        client.write(ks, "w", b"x")
    r = client.write(ks, "w", b"hello", create=True)
    assert isinstance(r, tyr.OpResult)
    assert (r.offset, r.size) == (0, 5) and r.version == client.stat(ks, "w").version
    r2 = client.write(ks, "w", b"HE")
    assert r2.size == 5 and r2.version > r.version
    assert client.get(ks, "w") == b"HEllo"
    r3 = client.write(ks, "w", b"!", offset=10)  # a hole reads as zeros
    assert (r3.offset, r3.size) == (10, 11)
    assert client.get(ks, "w") == b"HEllo" + bytes(5) + b"!"
    with pytest.raises(tyr.InvalidArgumentError):
        client.write(ks, "w", b"x", offset=-1)


def test_append(client: tyr.Client, ks: str) -> None:
    with pytest.raises(tyr.NotFoundError):
        client.append(ks, "ap", b"x")
    client.create(ks, "ap")
    assert client.append(ks, "ap", b"one,") == 0
    assert client.append(ks, "ap", b"two,") == 4
    assert client.append(ks, "ap", memoryview(b"three")) == 8
    assert client.get(ks, "ap") == b"one,two,three"


def test_truncate(client: tyr.Client, ks: str) -> None:
    client.put(ks, "t", b"0123456789")
    client.truncate(ks, "t", 4)
    assert client.get(ks, "t") == b"0123"
    client.truncate(ks, "t", 6)
    assert client.get(ks, "t") == b"0123\0\0"
    client.truncate(ks, "t", 0)
    assert client.get(ks, "t") == b""
    with pytest.raises(tyr.NotFoundError):
        client.truncate(ks, "missing", 1)


@pytest.mark.parametrize(
    "func,start,operand,width,want",
    [
        ("add", 5, 3, 8, 8),
        ("sub", 5, 7, 1, (5 - 7) & 0xFF),
        ("mul", 6, 7, 4, 42),
        ("and", 0b1100, 0b1010, 2, 0b1000),
        ("or", 0b1100, 0b1010, 2, 0b1110),
        ("xor", 0b1100, 0b1010, 2, 0b0110),
        ("min_signed", 5, -3, 8, (-3) & (2**64 - 1)),
        ("max_signed", (-5) & 0xFFFF, 2, 2, 2),
        ("min_unsigned", 5, 3, 4, 3),
        ("max_unsigned", 5, 300, 4, 300),
        ("set", 5, 99, 8, 99),
        (tyr.Func.ADD, 255, 1, 1, 0),  # wraps at the width
        ("add", 1, -1, 8, 0),  # a negative operand is two's complement
    ],
)
def test_atomic(client: tyr.Client, ks: str, func: object, start: int, operand: int, width: int, want: int) -> None:
    client.put(ks, "n", b"\xaa" + start.to_bytes(width, "little") + b"\xbb")
    assert client.atomic(ks, "n", 1, width, func, operand) == want  # type: ignore[arg-type]
    data = client.get(ks, "n")
    assert data[0] == 0xAA and data[-1] == 0xBB
    assert int.from_bytes(data[1 : 1 + width], "little") == want


def test_atomic_grows_blob_and_errors(client: tyr.Client, ks: str) -> None:
    client.create(ks, "g")
    assert client.atomic(ks, "g", 8, 8, "add", 7) == 7
    assert client.get(ks, "g") == bytes(8) + (7).to_bytes(8, "little")
    with pytest.raises(tyr.InvalidArgumentError):
        client.atomic(ks, "g", 0, 3, "add", 1)  # the server refuses the width
    with pytest.raises(tyr.InvalidArgumentError):
        client.atomic(ks, "g", 0, 8, "pow", 1)
    with pytest.raises(tyr.NotFoundError):
        client.atomic(ks, "missing", 0, 8, "add", 1)


def test_cas(client: tyr.Client, ks: str) -> None:
    client.put(ks, "c", b"state=old;")
    assert client.cas(ks, "c", 6, b"old", b"new") is True
    assert client.get(ks, "c") == b"state=new;"
    assert client.cas(ks, "c", 6, b"old", b"xxx") is False  # nothing changed
    assert client.get(ks, "c") == b"state=new;"
    with pytest.raises(tyr.InvalidArgumentError):
        client.cas(ks, "c", 0, b"ab", b"abc")
    with pytest.raises(tyr.NotFoundError):
        client.cas(ks, "missing", 0, b"a", b"b")


def test_list(client: tyr.Client, ks: str) -> None:
    keys = [f"dir/{i:04d}" for i in range(2500)] + ["other/x", "zz"]
    # Many blobs in few round trips: one commit per 500 creates.
    for i in range(0, len(keys), 500):
        client.commit(ks, [ops.write(k, 0, k.encode(), create=True) for k in keys[i : i + 500]])
    listed = list(client.list(ks, prefix="dir/"))
    assert [b.key for b in listed] == keys[:2500]  # pages of 1,000 put together
    assert all(b.size == len(b.key) and isinstance(b.modified, dt.datetime) for b in listed)
    assert [b.key for b in client.list(ks)] == sorted(keys)
    assert [b.key for b in client.list(ks, prefix="dir/", limit=3)] == keys[:3]
    assert [b.key for b in client.list(ks, prefix="dir/", start_after="dir/2497")] == keys[2498:2500]
    assert list(client.list(ks, prefix="nothing/")) == []
    page, nxt = client.list_page(ks, prefix="dir/", limit=10)
    assert [b.key for b in page] == keys[:10] and nxt is not None
    page2, nxt2 = client.list_page(ks, prefix="dir/", start_after=nxt, limit=10)
    assert [b.key for b in page2] == keys[10:20]
    last, end = client.list_page(ks, prefix="other/")
    assert [b.key for b in last] == ["other/x"] and end is None
    with pytest.raises(tyr.InvalidArgumentError):
        client.list_page(ks, limit=tyr.LIST_LIMIT_MAX + 1)
    with pytest.raises(tyr.NotFoundError):
        list(client.list(fresh_name("nokeyspace")))


def test_commit(client: tyr.Client, ks: str) -> None:
    client.put(ks, "old", b"to be deleted")
    client.put(ks, "cas", b"AAAA")
    results = client.commit(
        ks,
        [
            ops.create("new"),
            ops.write("new", 0, b"hello"),
            ops.append("new", b" world"),
            ops.append("made", b"by append", create=True),
            ops.write("w", 2, b"xy", create=True),
            ops.truncate("new", 8),
            ops.write("ctr", 0, bytes(8), create=True),
            ops.atomic("ctr", 0, 8, tyr.Func.ADD, 41),
            ops.cas("cas", 1, b"AA", b"BB"),
            ops.delete("old"),
        ],
    )
    assert len(results) == 10
    assert results[2].offset == 5  # where the append landed
    assert results[7].value == 41
    assert results[9].version == 0  # a delete
    assert client.get(ks, "new") == b"hello wo"
    assert client.get(ks, "made") == b"by append"
    assert client.get(ks, "w") == b"\0\0xy"
    assert client.get(ks, "cas") == b"ABBA"
    assert not client.exists(ks, "old")
    with pytest.raises(tyr.InvalidArgumentError):
        client.commit(ks, [])


def test_commit_is_all_or_nothing(client: tyr.Client, ks: str) -> None:
    client.put(ks, "x", b"1")
    with pytest.raises(tyr.ExistsError):
        client.commit(ks, [ops.write("y", 0, b"2", create=True), ops.create("x")])
    assert not client.exists(ks, "y")
    with pytest.raises(tyr.ConflictError) as e:
        client.commit(ks, [ops.write("y", 0, b"2", create=True), ops.cas("x", 0, b"9", b"3")])
    assert e.value.refused
    assert not client.exists(ks, "y") and client.get(ks, "x") == b"1"
    with pytest.raises(TypeError):
        client.commit(ks, ops.create("z"))  # type: ignore[arg-type]


def test_cluster_status_and_usage(client: tyr.Client) -> None:
    status = client.cluster_status()
    assert status["Self"]
    assert len(status["Members"]) == 1 and status["Members"][0]["State"] == "alive"
    assert json.dumps(status)  # plain JSON types
    usage = client.node_usage()
    assert usage["NodeID"] == status["Self"]
    assert usage["FreeBytes"] > 0


def test_keys_are_utf8_and_nul_is_refused(client: tyr.Client, ks: str) -> None:
    key = "dïr/ünïcødé ✓"
    client.put(ks, key, b"u")
    assert client.get(ks, key) == b"u"
    assert [b.key for b in client.list(ks, prefix="dïr/")] == [key]
    with pytest.raises(tyr.InvalidArgumentError):
        client.put(ks, "a\0b", b"x")
    with pytest.raises(TypeError):
        client.get(ks, 42)  # type: ignore[arg-type]
