"""Transactions: the context manager, repeatable reads, run() and transactional under contention."""

from __future__ import annotations

import threading
from typing import List

import pytest

import tyr
from tyr import ops


def u64(b: bytes) -> int:
    return int.from_bytes(b, "little")


def test_context_manager_commits(client: tyr.Client, ks: str) -> None:
    client.put(ks, "a", b"AAAA")
    with client.transaction(ks) as tx:
        assert isinstance(tx, tyr.Transaction) and tx.keyspace == ks
        tx.write("a", b"bb", offset=1)
        tx.append("b", b"new blob")
        tx.create("c")
        # The transaction sees its own buffered ops.
        assert tx.read("a") == b"AbbA"
        assert tx.read("b") == b"new blob"
        assert tx.size("c") == 0
        # Nothing is visible outside before the commit.
        assert client.get(ks, "a") == b"AAAA"
        assert not client.exists(ks, "b")
    assert tx.done
    assert client.get(ks, "a") == b"AbbA"
    assert client.get(ks, "b") == b"new blob"
    assert client.exists(ks, "c")


def test_context_manager_rolls_back_on_exception(client: tyr.Client, ks: str) -> None:
    client.put(ks, "a", b"before")
    with pytest.raises(RuntimeError, match="boom"):
        with client.transaction(ks) as tx:
            tx.write("a", b"AFTER!")
            tx.delete("a")
            tx.create("x")
            raise RuntimeError("boom")
    assert tx.done
    assert client.get(ks, "a") == b"before"
    assert not client.exists(ks, "x")
    with pytest.raises(tyr.InvalidArgumentError):
        tx.read("a")  # done


def test_explicit_commit_and_rollback(client: tyr.Client, ks: str) -> None:
    client.put(ks, "n", bytes(8))
    tx = client.transaction(ks)
    tx.truncate("n", 4)
    tx.atomic("n", 0, 4, "add", 5)
    tx.cas("n", 0, (5).to_bytes(4, "little"), (6).to_bytes(4, "little"))
    tx.do(ops.append("n", b"!"), ops.write("m", 0, b"mm", create=True))
    results = tx.commit()
    assert len(results) == 5
    assert results[1].value == 5
    assert results[3].offset == 4
    assert client.get(ks, "n") == (6).to_bytes(4, "little") + b"!"
    assert client.get(ks, "m") == b"mm"
    with pytest.raises(tyr.InvalidArgumentError):
        tx.commit()  # once only
    tx.rollback()  # a no-op once done

    tx2 = client.transaction(ks)
    tx2.delete("m")
    tx2.rollback()
    assert client.exists(ks, "m")
    with pytest.raises(tyr.InvalidArgumentError):
        tx2.write("m", b"x")


def test_repeatable_reads(client: tyr.Client, ks: str) -> None:
    client.put(ks, "r", b"first version")
    with pytest.raises(tyr.ConflictError):
        with client.transaction(ks) as tx:
            assert tx.read("r") == b"first version"
            client.put(ks, "r", b"SECOND VERSION, longer")  # outside the transaction
            # The transaction keeps reading the version it pinned.
            assert tx.read("r") == b"first version"
            assert tx.read("r", 6, 3) == b"ver"
            assert tx.size("r") == len(b"first version")
            tx.write("other", b"x")
        # The commit finds r changed: a conflict, and nothing written.
    assert not client.exists(ks, "other")
    assert client.get(ks, "r") == b"SECOND VERSION, longer"


def test_read_only_transaction_commits(client: tyr.Client, ks: str) -> None:
    client.put(ks, "r", b"data")
    with client.transaction(ks) as tx:
        assert tx.read("r", 1) == b"ata"
    assert tx.done


def test_absent_blob_in_transaction(client: tyr.Client, ks: str) -> None:
    with pytest.raises(tyr.ConflictError):
        with client.transaction(ks) as tx:
            with pytest.raises(tyr.NotFoundError):
                tx.read("ghost")
            client.put(ks, "ghost", b"appeared")  # the absence read is checked at commit
            tx.write("w", b"x")
    assert not client.exists(ks, "w")


def test_large_transaction_read(client: tyr.Client, ks: str) -> None:
    size = 6 * (1 << 20) + 5  # more than one request's worth
    data = bytes(i % 253 for i in range(size))
    client.put(ks, "big", data)
    with client.transaction(ks) as tx:
        assert tx.read("big") == data
        assert tx.read("big", 5 << 20, 10) == data[5 << 20 : (5 << 20) + 10]


def test_run_returns_and_commits(client: tyr.Client, ks: str) -> None:
    client.put(ks, "ctr", (41).to_bytes(8, "little"))

    def bump(tx: tyr.Transaction) -> int:
        n = u64(tx.read("ctr")) + 1
        tx.write("ctr", n.to_bytes(8, "little"))
        return n

    assert client.run(ks, bump) == 42
    assert u64(client.get(ks, "ctr")) == 42


def test_run_reraises_the_body_exception_and_rolls_back(client: tyr.Client, ks: str) -> None:
    client.put(ks, "k", b"unchanged")
    calls = []

    class Custom(Exception):
        pass

    def body(tx: tyr.Transaction) -> None:
        calls.append(1)
        tx.write("k", b"CHANGED!!")
        raise Custom("from the body")

    with pytest.raises(Custom, match="from the body"):
        client.run(ks, body)
    assert calls == [1]  # not run again
    assert client.get(ks, "k") == b"unchanged"

    # A tyr error of the body (not a conflict) is raised as it is.
    def missing(tx: tyr.Transaction) -> bytes:
        return tx.read("missing")

    with pytest.raises(tyr.NotFoundError):
        client.run(ks, missing)

    # The body cannot commit its own transaction.
    def commits(tx: tyr.Transaction) -> None:
        tx.commit()

    with pytest.raises(tyr.InvalidArgumentError):
        client.run(ks, commits)


def test_run_retries_a_conflict_raised_by_the_body(client: tyr.Client, ks: str) -> None:
    attempts: List[int] = []

    def body(tx: tyr.Transaction) -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise tyr.ConflictError("try again", code=tyr._lib.CONFLICT)
        tx.write("done", b"yes")
        return "ok"

    assert client.run(ks, body) == "ok"
    assert len(attempts) == 3
    assert client.get(ks, "done") == b"yes"

    # Always conflicting: gives up after max_retries more attempts.
    always: List[int] = []

    def never(tx: tyr.Transaction) -> None:
        always.append(1)
        raise tyr.ConflictError("never", code=tyr._lib.CONFLICT)

    with pytest.raises(tyr.ConflictError):
        client.run(ks, never, max_retries=2)
    assert len(always) == 3


def test_run_retries_a_real_conflict(client: tyr.Client, ks: str) -> None:
    client.put(ks, "x", b"0")
    attempts: List[int] = []

    def body(tx: tyr.Transaction) -> bytes:
        attempts.append(1)
        v = tx.read("x")
        if len(attempts) == 1:
            client.put(ks, "x", b"1")  # another writer between the read and the commit
        tx.write("y", v)
        return v

    assert client.run(ks, body) == b"1"  # the second attempt read the new value
    assert len(attempts) == 2
    assert client.get(ks, "y") == b"1"


def test_run_counter_under_contention(client: tyr.Client, ks: str) -> None:
    client.put(ks, "counter", bytes(8))
    threads, per_thread = 8, 25
    attempts = [0] * threads
    errors: List[BaseException] = []

    def worker(i: int) -> None:
        def body(tx: tyr.Transaction) -> None:
            attempts[i] += 1
            n = u64(tx.read("counter"))
            tx.write("counter", (n + 1).to_bytes(8, "little"))

        try:
            for _ in range(per_thread):
                client.run(ks, body, max_retries=1000)
        except BaseException as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    # Every increment counted exactly once, however many times it ran.
    assert u64(client.get(ks, "counter")) == threads * per_thread
    assert sum(attempts) > threads * per_thread, "no conflict at all: the test did not contend"


def test_transactional_decorator(client: tyr.Client, ks: str) -> None:
    client.put(ks, "alice", (100).to_bytes(8, "little"))
    client.put(ks, "bob", (0).to_bytes(8, "little"))

    @client.transactional(ks)
    def transfer(tx: tyr.Transaction, src: str, dst: str, amount: int) -> int:
        """Move amount from src to dst."""
        a, b = u64(tx.read(src)), u64(tx.read(dst))
        if a < amount:
            raise ValueError("insufficient funds")
        tx.write(src, (a - amount).to_bytes(8, "little"))
        tx.write(dst, (b + amount).to_bytes(8, "little"))
        return a - amount

    assert transfer.__name__ == "transfer" and transfer.__doc__ == "Move amount from src to dst."
    errors: List[BaseException] = []

    def worker() -> None:
        try:
            for _ in range(5):
                transfer("alice", "bob", 3)
        except BaseException as e:
            errors.append(e)

    ts = [threading.Thread(target=worker) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    assert u64(client.get(ks, "alice")) == 100 - 60
    assert u64(client.get(ks, "bob")) == 60
    with pytest.raises(ValueError, match="insufficient"):
        transfer("alice", "bob", 1000)
    assert u64(client.get(ks, "alice")) == 40
