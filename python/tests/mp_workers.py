"""Functions run in child processes by test_concurrency (importable by spawn and forkserver children)."""

from __future__ import annotations

import hashlib
import os
from typing import Dict, Tuple

import tyr


def work(args: Tuple[str, str, int, int]) -> Dict[str, object]:
    """Connect from a fresh process and do real work: puts, reads, atomics, a transaction."""
    endpoint, ks, worker, n = args
    loaded_before = tyr._lib.loaded()
    digest = hashlib.sha256()
    with tyr.connect(endpoint, timeout=60) as c:
        for i in range(n):
            data = f"worker {worker} blob {i} ".encode() * (i + 1)
            c.put(ks, f"w{worker}/{i}", data)
            assert c.get(ks, f"w{worker}/{i}") == data
            digest.update(data)
            c.atomic(ks, "counter", 0, 8, "add", 1)
            c.append(ks, "log", f"<{worker}:{i}>".encode())

        def bump(tx: tyr.Transaction) -> int:
            v = int.from_bytes(tx.read("txcounter"), "little") + 1
            tx.write("txcounter", v.to_bytes(8, "little"))
            return v

        last = c.run(ks, bump, max_retries=1000)
    return {"pid": os.getpid(), "loaded_before": loaded_before, "digest": digest.hexdigest(), "last": last}


def expected_digest(worker: int, n: int) -> str:
    """The digest work() computes for worker."""
    digest = hashlib.sha256()
    for i in range(n):
        digest.update(f"worker {worker} blob {i} ".encode() * (i + 1))
    return digest.hexdigest()


def use_inherited(args: Tuple[str, str]) -> str:
    """In a child forked after the parent loaded libtyr: any call must raise tyr.Error."""
    endpoint, ks = args
    try:
        tyr.connect(endpoint, timeout=5).get(ks, "k")
    except tyr.Error as e:
        return f"{type(e).__name__}: {e}"
    return "no error"
