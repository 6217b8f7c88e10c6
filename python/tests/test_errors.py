"""Each exception class, raised by a real server where the error can be provoked."""

from __future__ import annotations

import pickle
import socket
import threading
import time
from typing import Callable, Iterator

import pytest

import tyr
from tyr import _lib, ops

from conftest import Server, fresh_name


def test_hierarchy() -> None:
    assert issubclass(tyr.NotFoundError, LookupError)
    assert issubclass(tyr.InvalidArgumentError, ValueError)
    assert issubclass(tyr.TimeoutError, TimeoutError) and tyr.TimeoutError is not TimeoutError
    assert issubclass(tyr.OutcomeUnknownError, tyr.UnavailableError)
    for cls in (
        tyr.NotFoundError, tyr.ExistsError, tyr.InvalidArgumentError, tyr.OutOfRangeError, tyr.TooLargeError,
        tyr.UnavailableError, tyr.OutcomeUnknownError, tyr.ConflictError, tyr.CorruptionError,
        tyr.NoSpaceError, tyr.TimeoutError,
    ):
        assert issubclass(cls, tyr.Error) and issubclass(cls, Exception)
        assert cls.__doc__


@pytest.mark.parametrize(
    "code,flags,cls",
    [
        (_lib.NOT_FOUND, _lib.FLAG_REFUSED, tyr.NotFoundError),
        (_lib.EXISTS, _lib.FLAG_REFUSED, tyr.ExistsError),
        (_lib.INVALID_ARGUMENT, 0, tyr.InvalidArgumentError),
        (_lib.OUT_OF_RANGE, 0, tyr.OutOfRangeError),
        (_lib.TOO_LARGE, 0, tyr.TooLargeError),
        (_lib.UNAVAILABLE, _lib.FLAG_RETRYABLE, tyr.UnavailableError),
        (_lib.UNAVAILABLE, _lib.FLAG_OUTCOME_UNKNOWN, tyr.OutcomeUnknownError),
        (_lib.CONFLICT, _lib.FLAG_REFUSED | _lib.FLAG_RETRYABLE, tyr.ConflictError),
        (_lib.CORRUPTION, 0, tyr.CorruptionError),
        (_lib.NO_SPACE, _lib.FLAG_RETRYABLE, tyr.NoSpaceError),
        (_lib.TIMEOUT, 0, tyr.TimeoutError),
        (_lib.UNKNOWN, 0, tyr.Error),
        (99, 0, tyr.Error),  # a code of a later API version
    ],
)
def test_mapping_and_pickling(code: int, flags: int, cls: type) -> None:
    e = tyr.errors.error_for(code, flags, "tyr: some text")
    assert type(e) is cls
    assert (e.code, e.message, str(e)) == (code, "tyr: some text", "tyr: some text")
    assert e.refused == bool(flags & _lib.FLAG_REFUSED)
    assert e.retryable == bool(flags & _lib.FLAG_RETRYABLE)
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is cls and (back.code, back.message, back.refused, back.retryable) == (
        e.code, e.message, e.refused, e.retryable)


def test_not_found_and_exists(client: tyr.Client, ks: str) -> None:
    with pytest.raises(tyr.NotFoundError) as e:
        client.get(ks, "missing")
    assert e.value.code == _lib.NOT_FOUND and "not found" in e.value.message
    assert e.value.refused and not e.value.retryable
    with pytest.raises(LookupError):
        client.stat(ks, "missing")
    with pytest.raises(tyr.NotFoundError):
        client.keyspace(fresh_name("absent"))
    client.create(ks, "x")
    with pytest.raises(tyr.ExistsError) as ex:
        client.create(ks, "x")
    assert ex.value.code == _lib.EXISTS and ex.value.refused


def test_invalid_argument(client: tyr.Client, ks: str) -> None:
    # From the server: a keyspace name with forbidden characters or too short.
    for name in ("Bad Name", "ab", "x" * 64):
        with pytest.raises(tyr.InvalidArgumentError) as e:
            client.create_keyspace(name)
        assert e.value.code == _lib.INVALID_ARGUMENT and not e.value.retryable
    client.create(ks, "w")
    with pytest.raises(ValueError):  # also a ValueError
        client.atomic(ks, "w", 0, 3, "add", 1)
    with pytest.raises(tyr.InvalidArgumentError):
        client.commit(ks, [ops.atomic("w", 0, 16, "add", 1)])
    # Found before any request.
    with pytest.raises(tyr.InvalidArgumentError):
        client.read(ks, "w", -1)
    with pytest.raises(tyr.InvalidArgumentError):
        client.open(ks, "w", "r+")


def test_too_large(client: tyr.Client, ks: str) -> None:
    client.create(ks, "a")
    with pytest.raises(tyr.TooLargeError) as e:
        client.append(ks, "a", bytes(tyr.PAYLOAD_BYTES_MAX + 1))
    assert e.value.code == _lib.TOO_LARGE and e.value.refused
    assert client.stat(ks, "a").size == 0  # nothing changed
    with pytest.raises((tyr.TooLargeError, tyr.InvalidArgumentError)):
        client.put(ks, "k" * (tyr.KEY_BYTES_MAX + 1), b"x")
    with pytest.raises(tyr.InvalidArgumentError):  # the server's word for it
        client.cas(ks, "a", 0, bytes(tyr.CAS_BYTES_MAX + 1), bytes(tyr.CAS_BYTES_MAX + 1))
    with pytest.raises(tyr.TooLargeError):
        with client.transaction(ks) as tx:
            for i in range(tyr.OPS_PER_TX_MAX + 1):
                tx.create(f"op{i}")
    assert not client.exists(ks, "op0")


def test_out_of_range(client: tyr.Client, ks: str) -> None:
    client.create(ks, "o")
    with pytest.raises(tyr.OutOfRangeError) as e:
        client.truncate(ks, "o", tyr.BLOB_BYTES_MAX + 1)
    assert e.value.code == _lib.OUT_OF_RANGE and e.value.refused
    with pytest.raises(tyr.OutOfRangeError):
        client.write(ks, "o", b"x", offset=tyr.BLOB_BYTES_MAX)
    assert client.stat(ks, "o").size == 0


def test_conflict_from_changed_read(client: tyr.Client, ks: str) -> None:
    client.put(ks, "r", b"v1")
    tx = client.transaction(ks)
    assert tx.read("r") == b"v1"
    client.put(ks, "r", b"v2")  # another writer, after the read
    tx.write("w", b"depends on r")
    with pytest.raises(tyr.ConflictError) as e:
        tx.commit()
    assert e.value.code == _lib.CONFLICT and e.value.refused and e.value.retryable
    assert not client.exists(ks, "w")  # nothing changed
    assert tx.done


def test_cas_false_is_not_an_error(client: tyr.Client, ks: str) -> None:
    client.put(ks, "c", b"1234")
    assert client.cas(ks, "c", 0, b"9", b"0") is False
    assert client.get(ks, "c") == b"1234"


def test_no_space(start_server: Callable[..., Server]) -> None:
    # A free-space floor no disk meets: writes are refused as "no space".
    s = start_server("--min-free", "1048576TiB")
    with tyr.connect(s.endpoint, timeout=30) as c:
        c.create_keyspace("full")
        with pytest.raises(tyr.NoSpaceError) as e:
            c.put("full", "k", b"data")
        assert e.value.code == _lib.NO_SPACE and "no space" in e.value.message
        assert not c.exists("full", "k")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unavailable_and_outcome_unknown() -> None:
    port = _free_port()  # nothing listens there
    with tyr.connect(f"127.0.0.1:{port}", timeout=30) as c:
        assert c.ready() is False
        with pytest.raises(tyr.UnavailableError) as e:
            c.stat("ks1", "k")
        assert not isinstance(e.value, tyr.OutcomeUnknownError)
        assert e.value.code == _lib.UNAVAILABLE and e.value.retryable
        # A commit whose answer is lost, and no node to ask: unknown outcome.
        began = time.monotonic()
        with pytest.raises(tyr.OutcomeUnknownError) as u:
            c.create("ks1", "k")
        assert time.monotonic() - began < 25
        assert isinstance(u.value, tyr.UnavailableError)
        assert u.value.outcome_unknown and not u.value.refused and not u.value.retryable


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """A TCP listener that accepts connections and never answers."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    conns = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                conns.append(srv.accept()[0])
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield "127.0.0.1:%d" % srv.getsockname()[1]
    stop.set()
    t.join()
    for cn in conns:
        cn.close()
    srv.close()


def test_timeout(silent_listener: str) -> None:
    with tyr.connect(silent_listener, timeout=0.5, data_path=False) as c:
        began = time.monotonic()
        with pytest.raises(tyr.TimeoutError) as e:
            c.keyspaces()
        took = time.monotonic() - began
    assert 0.4 < took < 10
    assert isinstance(e.value, TimeoutError)  # the builtin too
    assert e.value.code == _lib.TIMEOUT
