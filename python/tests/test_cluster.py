"""The Python client on a 3-node cluster: routing, transactions whose blobs
sit on different nodes, and a commit whose answer was lost.

The client is libtyr, the Go client: these tests check that its logic works
the same through the bindings. The tests share the session's cluster and
run in this file's order; the last one kills node1.
"""

from __future__ import annotations

import threading
import time
from typing import Dict, List, Optional, Sequence

import pytest

import tyr
from tyr import ops

from conftest import CALL_TIMEOUT, Cluster, fresh_name

#: A node vouches for a commit's outcome only once it has held its read
#: lease since before the commit could begin: the server's client clock
#: skew bound (30 s) and node clock skew bound (1 s), and a margin.
VOUCH_AFTER = 30 + 1 + 2
#: How long a lost answer may take to resolve: the killed node must first
#: be declared dead (at most 25 s here), then the commit's chain asked.
RESOLVE_MAX = 25 + 30

READS_LOCAL = 'tyr_reads_total{path="local"}'
READS_FORWARDED = 'tyr_reads_total{path="forwarded_out"}'
DATA_PATH_READS = "tyr_data_path_reads_total"
SERIES = (READS_LOCAL, READS_FORWARDED, DATA_PATH_READS)


def counters(cluster: Cluster) -> List[Dict[str, float]]:
    """Each node's read counters."""
    out = []
    for k in range(1, cluster.nodes + 1):
        m = cluster.metrics(k)
        out.append({s: m.get(s, 0.0) for s in SERIES})
    return out


def deltas(before: Sequence[Dict[str, float]], after: Sequence[Dict[str, float]], series: str) -> List[float]:
    """Each node's increase of series."""
    return [a[series] - b[series] for b, a in zip(before, after)]


def keyspace(cluster: Cluster, replication: int, *, sync: bool = False) -> str:
    """A fresh keyspace of the given replication on the cluster, known to every node."""
    name = fresh_name("py-cluster")
    with tyr.connect(cluster.endpoints[0], timeout=CALL_TIMEOUT) as c:
        c.create_keyspace(name, replication=replication, sync=sync)
    cluster.wait_keyspace(name)
    return name


def test_routing(cluster: Cluster) -> None:
    # 2 replicas on 3 nodes: node1 serves some blobs and not others.
    ks = keyspace(cluster, 2)
    blobs = 30
    content = [f"blob {i} of the routing test".encode() for i in range(blobs)]
    with tyr.connect(cluster.endpoints[0], timeout=CALL_TIMEOUT) as c:
        for i, data in enumerate(content):
            c.put(ks, f"r/{i}", data)

    def read_all(c: tyr.Client) -> None:
        for i, data in enumerate(content):
            assert c.get(ks, f"r/{i}") == data

    before = counters(cluster)
    with tyr.connect(cluster.endpoints[0], timeout=CALL_TIMEOUT, routing=False) as plain:
        read_all(plain)
    unrouted = counters(cluster)
    forwarded = deltas(before, unrouted, READS_FORWARDED)
    local = deltas(before, unrouted, READS_LOCAL)
    # Without routing, node1 forwards the reads of the blobs it does not serve.
    assert sum(local) == blobs, local
    assert 0 < forwarded[0] < blobs, forwarded
    assert sum(forwarded) == forwarded[0], forwarded

    with tyr.connect(cluster.endpoints[0], timeout=CALL_TIMEOUT) as routed:
        read_all(routed)
    after = counters(cluster)
    # With routing, each read goes straight to a node that serves it, over the data path.
    assert sum(deltas(unrouted, after, READS_FORWARDED)) == 0
    assert sum(deltas(unrouted, after, READS_LOCAL)) == blobs
    assert sum(deltas(unrouted, after, DATA_PATH_READS)) == blobs
    # Each node served the same reads either way.
    assert deltas(unrouted, after, READS_LOCAL) == local


@pytest.mark.parametrize("replication", [1, 2, 3])
def test_transfers_across_nodes(cluster: Cluster, replication: int) -> None:
    # Transfers between accounts whose blobs sit on different nodes, from
    # clients of every node at once: every transfer commits (the body runs
    # again after a conflict) and the total is conserved.
    ks = keyspace(cluster, replication)
    accounts, start, workers, transfers = 8, 1000, 6, 15
    with tyr.connect(cluster.endpoints[0], timeout=CALL_TIMEOUT) as c:
        for a in range(accounts):
            c.put(ks, f"acct/{a}", start.to_bytes(8, "little"))

    errors: List[BaseException] = []
    done = [0] * workers

    def worker(w: int) -> None:
        try:
            with tyr.connect(cluster.endpoints[w % cluster.nodes], timeout=CALL_TIMEOUT) as c:

                @c.transactional(ks, max_retries=50)
                def transfer(tx: tyr.Transaction, src: str, dst: str, amount: int) -> None:
                    a = int.from_bytes(tx.read(src), "little")
                    b = int.from_bytes(tx.read(dst), "little")
                    tx.write(src, (a - amount).to_bytes(8, "little"))
                    tx.write(dst, (b + amount).to_bytes(8, "little"))

                for i in range(transfers):
                    src = (w + i) % accounts
                    dst = (w * 3 + i + 1) % accounts
                    if src == dst:
                        dst = (dst + 1) % accounts
                    transfer(f"acct/{src}", f"acct/{dst}", 1 + (i % 5))
                    done[w] += 1
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert done == [transfers] * workers
    with tyr.connect(cluster.endpoints[1], timeout=CALL_TIMEOUT) as c:
        balances = [int.from_bytes(c.get(ks, f"acct/{a}"), "little") for a in range(accounts)]
    assert sum(balances) == accounts * start, balances


def test_lost_answer_resolved(cluster: Cluster) -> None:
    # Commits through node1 while node1 is killed with SIGKILL: the client
    # (libtyr's Go client) asks the other nodes for each commit whose
    # answer was lost. Each outcome it reports must match the stored blob,
    # and none may stay unknown.
    ks = keyspace(cluster, 3, sync=True)
    wait = cluster.started + VOUCH_AFTER - time.monotonic()
    if wait > 0:
        time.sleep(wait)
    c1 = tyr.connect(cluster.endpoints[0], timeout=RESOLVE_MAX + CALL_TIMEOUT)
    c1.commit(ks, [ops.append("warm", b"x", create=True)])  # learns the ring

    n = 24
    recs = [f"<rec {i}>".encode() for i in range(n)]
    results: List[Optional[int]] = [None] * n
    failures: List[Optional[tyr.Error]] = [None] * n

    def send(i: int) -> None:
        try:
            res = c1.commit(ks, [ops.append(f"log/{i % 4}", recs[i], create=True)])
            results[i] = res[0].offset
        except tyr.Error as e:
            failures[i] = e

    threads = [threading.Thread(target=send, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    time.sleep(0.003)
    cluster.kill9(1)
    for t in threads:
        t.join()

    tally: Dict[str, int] = {}
    with tyr.connect(cluster.endpoints[1], timeout=CALL_TIMEOUT) as c2:
        logs = {}
        for j in range(4):
            try:
                logs[j] = c2.get(ks, f"log/{j}")
            except tyr.NotFoundError:
                logs[j] = b""
        for i in range(n):
            data, e = logs[i % 4], failures[i]
            count = data.count(recs[i])
            if e is None:
                tally["committed"] = tally.get("committed", 0) + 1
                off = results[i]
                assert off is not None
                assert count == 1 and data[off : off + len(recs[i])] == recs[i], (i, off, data)
            elif isinstance(e, tyr.OutcomeUnknownError):
                pytest.fail(f"commit {i}: outcome not resolved: {e}")
            elif isinstance(e, tyr.ConflictError) or e.refused:
                tally["aborted"] = tally.get("aborted", 0) + 1
                assert count == 0, (i, e, data)
            else:
                pytest.fail(f"commit {i}: {type(e).__name__}: {e}")
    assert tally.get("committed", 0) > 0, tally

    # node1, c1's endpoint, is down: c1's next commit goes through another node.
    res = c1.commit(ks, [ops.append("after", b"<after>", create=True)])
    assert res[0].offset == 0
    with tyr.connect(cluster.endpoints[2], timeout=CALL_TIMEOUT) as c3:
        assert c3.get(ks, "after") == b"<after>"
    c1.close()
