"""Threads sharing one client, processes with clients of their own, and the fork guard."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from typing import Dict, List

import pytest

import tyr

import mp_workers


def test_sixteen_threads_share_a_client(client: tyr.Client, ks: str) -> None:
    threads, rounds = 16, 20
    client.put(ks, "counter", bytes(8))
    client.create(ks, "shared-log")
    errors: List[BaseException] = []
    offsets: Dict[str, int] = {}
    lock = threading.Lock()
    barrier = threading.Barrier(threads)

    def worker(t: int) -> None:
        try:
            barrier.wait()
            for i in range(rounds):
                key = f"t{t}/{i}"
                data = (f"{key}:" * (i + 1)).encode()
                client.put(ks, key, data)
                assert client.get(ks, key) == data
                buf = bytearray(len(data))
                assert client.readinto(ks, key, buf) == len(data) and buf == data
                client.atomic(ks, "counter", 0, 8, "add", 1)
                rec = f"<{t}:{i}>"
                off = client.append(ks, "shared-log", rec.encode())
                with lock:
                    offsets[rec] = off
                assert client.stat(ks, key).size == len(data)
        except BaseException as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    began = time.monotonic()
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    assert errors == [], errors[:3]
    assert int.from_bytes(client.get(ks, "counter"), "little") == threads * rounds
    log = client.get(ks, "shared-log")
    assert len(offsets) == threads * rounds
    for rec, off in offsets.items():
        # Each append landed once, where its call said.
        assert log[off : off + len(rec)] == rec.encode()
        assert log.count(rec.encode()) == 1
    assert len(log) == sum(len(r) for r in offsets)
    assert len(list(client.list(ks, prefix="t"))) == threads * rounds
    # Calls release the GIL: 16 threads over the network take far less than
    # 16 times one thread's time would with the GIL held (a loose bound).
    assert time.monotonic() - began < 120


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_processes(endpoint: str, client: tyr.Client, ks: str, method: str) -> None:
    procs, n = 3, 8
    client.put(ks, "counter", bytes(8))
    client.put(ks, "txcounter", bytes(8))
    client.create(ks, "log")
    ctx = multiprocessing.get_context(method)
    # One task per process: a pool hands tasks to whichever worker is
    # ready, so on a busy machine one process could take them all.
    with ctx.Pool(procs, maxtasksperchild=1) as pool:
        results = pool.map(mp_workers.work, [(endpoint, ks, w, n) for w in range(procs)], chunksize=1)
    assert len({r["pid"] for r in results}) == procs
    assert os.getpid() not in {r["pid"] for r in results}
    # Each child loaded the library itself, at its first connect.
    assert all(r["loaded_before"] is False for r in results)
    for w, r in enumerate(results):
        assert r["digest"] == mp_workers.expected_digest(w, n)
        for i in range(n):
            assert client.get(ks, f"w{w}/{i}") == f"worker {w} blob {i} ".encode() * (i + 1)
    assert int.from_bytes(client.get(ks, "counter"), "little") == procs * n
    assert int.from_bytes(client.get(ks, "txcounter"), "little") == procs
    assert sorted(r["last"] for r in results) == list(range(1, procs + 1))
    log = client.get(ks, "log")
    for w in range(procs):
        for i in range(n):
            assert log.count(f"<{w}:{i}>".encode()) == 1


def _wait_child(pid: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while True:
        wpid, status = os.waitpid(pid, os.WNOHANG)
        if wpid:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the forked child hung for {timeout}s instead of raising tyr.Error")
        time.sleep(0.02)


def test_fork_after_load_raises_in_child(endpoint: str, client: tyr.Client, ks: str) -> None:
    client.put(ks, "k", b"parent's")
    assert tyr._lib.loaded()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave at once, whatever happens
        code = 1
        try:
            os.close(r)
            out = []
            for name, call in [
                ("get", lambda: client.get(ks, "k")),
                ("connect", lambda: tyr.connect(endpoint, timeout=5)),
                ("transaction", lambda: client.transaction(ks)),
            ]:
                try:
                    call()
                    out.append(f"{name}: no error")
                except tyr.Error as e:
                    out.append(f"{name}: {type(e).__name__}: {e}")
            client.close()  # must not call into the library, nor hang
            out.append("closed")
            os.write(w, "\n".join(out).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    status = _wait_child(pid, 30)
    with os.fdopen(r, "rb") as f:
        lines = f.read().decode().splitlines()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, lines
    assert lines[-1] == "closed"
    for line in lines[:-1]:
        name, rest = line.split(": ", 1)
        assert rest.startswith("Error: "), line
        assert "fork" in rest and "spawn" in rest and "forkserver" in rest
    assert len(lines) == 4
    # The parent is unaffected.
    assert client.get(ks, "k") == b"parent's"


def test_fork_start_method_child_gets_error(endpoint: str, client: tyr.Client, ks: str) -> None:
    client.put(ks, "k", b"v")  # loaded in this process
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        res = pool.apply_async(mp_workers.use_inherited, ((endpoint, ks),))
        out = res.get(timeout=30)
    assert out.startswith("Error: ") and "spawn" in out


def test_fork_before_load_is_fine(endpoint: str, ks: str) -> None:
    # A fresh interpreter forks before it loads the library: the child may use it.
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        f"""
        import os, sys, tyr
        assert not tyr._lib.loaded()
        pid = os.fork()
        if pid == 0:
            try:
                with tyr.connect({endpoint!r}, timeout=30) as c:
                    c.put({ks!r}, "from-child", b"child")
                os._exit(0)
            except BaseException as e:
                print(repr(e), file=sys.stderr)
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    with tyr.connect(endpoint, timeout=30) as c:
        assert c.get(ks, "from-child") == b"child"
