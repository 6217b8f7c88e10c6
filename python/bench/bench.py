"""The Python client against the Go client, in one run against one server.

Each workload runs first as ``tyr bench`` (the Go client: one goroutine and
connection per client) and then from Python with the same shape: 4 KiB
writes to blobs of each client's own, 1 KiB power-law reads of preloaded
blobs, at 1 and 16 clients, where a Python client is a thread sharing one
``tyr.Client`` or a process (spawned) with its own; and a stream put and
get of one large value. It prints one Markdown table with the Python/Go
ratio of every line and the per-call overhead (Python p50 minus Go p50 at
one client).

Usage: python bench.py --endpoint HOST:PORT --tyr bin/tyr [--duration 10]
       [--stream-size 1GiB]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import subprocess
import sys
import threading
import time
import uuid

import tyr

KIB = 1024
WRITE_SIZE = 4 * KIB
READ_SIZE = 1 * KIB
KEYS_PER_CLIENT = 1000
READ_KEYS = 10000
READ_SKEW = 1.0  # exponent of the read keys' power law, as tyr bench's default


def go_bench(args: argparse.Namespace, workload: str, *flags: str) -> list[dict]:
    """Runs ``tyr bench WORKLOAD --json`` and returns its result lines."""
    cmd = [args.tyr, "bench", workload, "--endpoint", args.endpoint, "--json", *flags]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def percentile(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else 0.0


def zipf_keys(n: int, s: float, rng: random.Random, count: int) -> list[int]:
    """count key indexes in [0, n) drawn with probability ~ 1/(i+1)^s."""
    weights = [1.0 / (i + 1) ** s for i in range(n)]
    return rng.choices(range(n), weights=weights, k=count)


def run_clients(worker, clients: int, duration: float) -> tuple[int, list[float]]:
    """Runs worker(i, stop_at, lat) in clients threads; ops and latencies."""
    lats: list[list[float]] = [[] for _ in range(clients)]
    stop_at = time.monotonic() + duration
    threads = [threading.Thread(target=worker, args=(i, stop_at, lats[i])) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(len(x) for x in lats), [v for x in lats for v in x]


def write_worker(c: tyr.Client, ks: str, prefix: str, seed: int):
    def work(i: int, stop_at: float, lat: list[float]) -> None:
        rng = random.Random(seed + i)
        value = rng.randbytes(WRITE_SIZE)
        while (t := time.monotonic()) < stop_at:
            c.write(ks, f"{prefix}{i}-{rng.randrange(KEYS_PER_CLIENT)}", value)
            lat.append(time.monotonic() - t)
    return work


def read_worker(c: tyr.Client, ks: str, seed: int):
    def work(i: int, stop_at: float, lat: list[float]) -> None:
        rng = random.Random(seed + i)
        keys = zipf_keys(READ_KEYS, READ_SKEW, rng, 4096)
        buf = bytearray(READ_SIZE)
        k = 0
        while (t := time.monotonic()) < stop_at:
            c.readinto(ks, f"r{keys[k % len(keys)]}", buf)
            lat.append(time.monotonic() - t)
            k += 1
    return work


def process_main(endpoint: str, workload: str, ks: str, i: int, duration: float, seed: int, q) -> None:
    """One benchmark process: its own client, one worker."""
    with tyr.connect(endpoint) as c:
        if workload == "write":
            work = write_worker(c, ks, "p", seed)
        else:
            work = read_worker(c, ks, seed)
        lat: list[float] = []
        work(i, time.monotonic() + duration, lat)
        q.put((len(lat), percentile(lat, 0.5), percentile(lat, 0.99)))


def run_processes(args, workload: str, ks: str, clients: int) -> tuple[float, float, float]:
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=process_main, args=(args.endpoint, workload, ks, i, args.duration, 7, q))
             for i in range(clients)]
    for p in procs:
        p.start()
    res = [q.get() for _ in procs]
    for p in procs:
        p.join()
    ops = sum(r[0] for r in res)
    return ops / args.duration, max(r[1] for r in res), max(r[2] for r in res)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--endpoint", default=os.environ.get("TYR_ENDPOINT", "127.0.0.1:7420"))
    ap.add_argument("--tyr", default="bin/tyr")
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--stream-size", default="1GiB")
    args = ap.parse_args()
    stream_bytes = parse_size(args.stream_size)
    dur = f"{args.duration:g}s"
    rows: list[tuple[str, dict, float, float, float]] = []  # name, go, py ops/s, p50, p99

    c = tyr.connect(args.endpoint)
    ks = "pybench-" + uuid.uuid4().hex[:8]
    c.create_keyspace(ks)
    try:
        # Writes.
        for k in range(16):
            for j in range(KEYS_PER_CLIENT):
                c.create(ks, f"w{k}-{j}")
        go = {r["clients"]: r for r in go_bench(args, "write", "--clients", "1,16", "--duration", dur,
                                                 "--value-size", "4KiB", "--keys-per-client", str(KEYS_PER_CLIENT))}
        for n in (1, 16):
            ops, lat = run_clients(write_worker(c, ks, "w", 1), n, args.duration)
            rows.append((f"4 KiB writes, {n} thread(s)", go[n], ops / args.duration,
                         percentile(lat, 0.5), percentile(lat, 0.99)))
        for k in range(16):
            for j in range(KEYS_PER_CLIENT):
                c.create(ks, f"p{k}-{j}")
        rows.append(("4 KiB writes, 16 processes", go[16], *run_processes(args, "write", ks, 16)))

        # Reads.
        value = random.Random(3).randbytes(READ_SIZE)
        for j in range(READ_KEYS):
            c.put(ks, f"r{j}", value)
        go = {r["clients"]: r for r in go_bench(args, "read", "--clients", "1,16", "--duration", dur,
                                                 "--value-size", "1KiB", "--read-keys", str(READ_KEYS))}
        for n in (1, 16):
            ops, lat = run_clients(read_worker(c, ks, 5), n, args.duration)
            rows.append((f"1 KiB reads, {n} thread(s)", go[n], ops / args.duration,
                         percentile(lat, 0.5), percentile(lat, 0.99)))
        rows.append(("1 KiB reads, 16 processes", go[16], *run_processes(args, "read", ks, 16)))

        # Stream.
        go = {r["workload"]: r for r in go_bench(args, "stream", "--stream-size", args.stream_size)}
        part = bytes(random.Random(9).randbytes(4 << 20))
        t = time.monotonic()
        with c.open(ks, "stream", "wb") as f:
            left = stream_bytes
            while left > 0:
                left -= f.write(part[: min(left, len(part))])
        put_s = time.monotonic() - t
        buf = bytearray(4 << 20)
        t = time.monotonic()
        got = 0
        with c.open(ks, "stream", "rb") as f:
            while (k := f.readinto(buf)) > 0:
                got += k
        get_s = time.monotonic() - t
        if got != stream_bytes:
            sys.exit(f"stream get read {got} bytes of {stream_bytes}")
        for name, secs in (("put", put_s), ("get", get_s)):
            g = go.get(f"stream-{name}") or go.get(f"stream {name}") or {}
            rows.append((f"stream {name} of {args.stream_size} (MB/s)", g, stream_bytes / 1e6 / secs, 0.0, 0.0))
    finally:
        c.drop_keyspace(ks)
        c.close()

    print("| workload | Go client | Python | Python/Go | Go p50 µs | Python p50 µs | Python p99 µs |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, g, py, p50, p99 in rows:
        stream = name.startswith("stream")
        gv = g.get("mb_per_s" if stream else "ops_per_s", 0.0)
        ratio = py / gv if gv else float("nan")
        print(f"| {name} | {gv:,.1f} | {py:,.1f} | {ratio:.2f}× | {g.get('p50_us', 0):,.0f} | "
              f"{p50 * 1e6:,.0f} | {p99 * 1e6:,.0f} |")
    for name, g, _, p50, _ in rows:
        if name.endswith(", 1 thread(s)"):
            print(f"\nper-call overhead, {name[:-13]}: {p50 * 1e6 - g['p50_us']:,.0f} µs "
                  f"(Python p50 minus Go p50 at one client)")


def parse_size(s: str) -> int:
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "B": 1}
    for u, m in units.items():
        if s.endswith(u):
            return int(float(s[: -len(u)]) * m)
    return int(s)


if __name__ == "__main__":
    main()
