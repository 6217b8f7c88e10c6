"""Fixtures of the tests of the tyr package: real tyr servers on loopback.

- ``tyr_bin``: the tyr binary: ``$TYR_BIN``, else the repository's
  ``bin/tyr`` (``make build``), else one built here with ``go build``.
- ``server`` (session): a ``tyr server`` on a fresh data directory and a free
  127.0.0.1 port, ready (``Client.ready()``) before the tests use it.
  ``endpoint`` is its address, ``client`` a client of it.
- ``ks``: a fresh keyspace of its own for one test (4 KiB chunks, so small
  blobs span several), dropped after it.
- ``start_server``: a factory of more servers, stopped when the test ends.
- ``cluster`` (session): a 3-node cluster of ``tyr cluster up``; it is started
  in the background as soon as the tests are collected, if one of them uses it.

Every process is started here and stopped by its PID.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

import pytest

import tyr

REPO = Path(__file__).resolve().parents[2]

#: Per-call deadline of the tests' clients: generous, for a loaded machine.
CALL_TIMEOUT = 60.0


def _find_binary() -> str:
    env = os.environ.get("TYR_BIN")
    if env:
        return env
    built = REPO / "bin" / "tyr"
    if built.exists():
        return str(built)
    go = shutil.which(os.environ.get("GO", "go"))
    if go is None:
        raise RuntimeError("no tyr binary: set TYR_BIN, run `make build`, or put go on PATH")
    out = Path(tempfile.mkdtemp(prefix="tyr-bin-")) / "tyr"
    subprocess.run([go, "build", "-o", str(out), "./cmd/tyr"], cwd=REPO, check=True)
    return str(out)


_binary: Optional[str] = None
_binary_lock = threading.Lock()


def binary() -> str:
    """The path of the tyr binary, found (or built) once."""
    global _binary
    with _binary_lock:
        if _binary is None:
            _binary = _find_binary()
        return _binary


def wait_ready(endpoint: str, timeout: float, alive: Callable[[], bool] = lambda: True) -> None:
    """Wait until the server at endpoint serves reads, as ``Client.ready()`` says."""
    deadline = time.monotonic() + timeout
    with tyr.connect(endpoint, timeout=2.0, routing=False) as c:
        while True:
            if c.ready():
                return
            if not alive():
                raise RuntimeError(f"server at {endpoint} exited before it was ready")
            if time.monotonic() > deadline:
                raise RuntimeError(f"server at {endpoint} not ready after {timeout}s")
            time.sleep(0.05)


def _die_with_parent() -> None:
    """In a child before exec: SIGKILL it when the test process dies, even by a crash (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Server:
    """One ``tyr server`` process on loopback, started by :meth:`start`."""

    def __init__(self, root: Path, *extra: str) -> None:
        self.root = root
        self.data = root / "data"
        self.extra = list(extra)
        self.endpoint = ""
        self.proc: Optional[subprocess.Popen[bytes]] = None

    @property
    def log(self) -> str:
        """The server's log so far."""
        try:
            return (self.root / "server.log").read_text(errors="replace")
        except OSError:
            return ""

    @property
    def pid(self) -> int:
        """The server's PID."""
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> "Server":
        """Start the server on a free 127.0.0.1 port (the kernel's pick, read back from its ready file)."""
        ready = self.root / "ready"
        if ready.exists():
            ready.unlink()
        with open(self.root / "server.log", "ab") as log:
            self.proc = subprocess.Popen(
                [
                    binary(), "server",
                    "--data", str(self.data),
                    "--listen", "127.0.0.1:0",
                    "--gossip-listen", "127.0.0.1:0",
                    "--ready-file", str(ready),
                    "--log-level", "warn",
                    *self.extra,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
        deadline = time.monotonic() + 60
        while not (ready.exists() and ready.read_text().strip()):
            if self.proc.poll() is not None:
                raise RuntimeError(f"tyr server exited with {self.proc.returncode}:\n{self.log}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"tyr server wrote no ready file in 60 s:\n{self.log}")
            time.sleep(0.02)
        self.endpoint = ready.read_text().strip()
        wait_ready(self.endpoint, 60, lambda: self.proc is not None and self.proc.poll() is None)
        return self

    def kill(self) -> None:
        """Stop the server with SIGKILL (by its PID) and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        """Stop the server with SIGTERM, SIGKILL after 20 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill()


@pytest.fixture(scope="session")
def tyr_bin() -> str:
    """The path of the tyr binary."""
    return binary()


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A tyr server for the session (no free-space floor, so a full disk does not fail the tests)."""
    s = Server(tmp_path_factory.mktemp("tyr-server"), "--min-free", "0").start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def start_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Server]]:
    """A factory of servers started with extra flags, stopped when the test ends."""
    started: List[Server] = []

    def start(*extra: str) -> Server:
        s = Server(tmp_path_factory.mktemp("tyr-extra-server"), *extra)
        started.append(s)
        return s.start()

    yield start
    for s in started:
        s.kill()


@pytest.fixture(scope="session")
def endpoint(server: Server) -> str:
    """host:port of the session's server."""
    return server.endpoint


@pytest.fixture(scope="session")
def client(endpoint: str) -> Iterator[tyr.Client]:
    """A client of the session's server."""
    c = tyr.connect(endpoint, timeout=CALL_TIMEOUT)
    yield c
    c.close()


def fresh_name(prefix: str = "t") -> str:
    """A keyspace name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def ks(client: tyr.Client) -> Iterator[str]:
    """A fresh keyspace (4 KiB chunks, no fsync per commit) for one test, dropped after it."""
    name = fresh_name()
    client.create_keyspace(name, chunk_size=4096, sync=False)
    yield name
    try:
        client.drop_keyspace(name)
    except tyr.Error:
        pass


# The cluster.


class Cluster:
    """A local cluster of ``tyr cluster up``, in its own directory."""

    def __init__(self, root: Path, nodes: int) -> None:
        self.root = root
        self.nodes = nodes
        self.endpoints: List[str] = []
        #: When every node was up (time.monotonic()).
        self.started = 0.0

    def node_dir(self, k: int) -> Path:
        """nodek's directory (k from 1)."""
        return self.root / f"node{k}"

    def node_json(self, k: int) -> Dict[str, str]:
        """nodek's node.json (its addresses)."""
        return json.loads((self.node_dir(k) / "node.json").read_text())

    def endpoint(self, k: int) -> str:
        """nodek's client API address, from its node.json."""
        return self.node_json(k)["listen"]

    def metrics(self, k: int) -> Dict[str, float]:
        """nodek's Prometheus metrics (its /metrics, from node.json's metrics address): series -> value."""
        with urllib.request.urlopen(f"http://{self.node_json(k)['metrics']}/metrics", timeout=10) as r:
            text = r.read().decode()
        out: Dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                series, _, value = line.rpartition(" ")
                out[series] = float(value)
        return out

    def pid(self, k: int) -> Optional[int]:
        """nodek's PID from its pid file, or None."""
        try:
            return int((self.node_dir(k) / "pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def pids(self) -> List[int]:
        """The PIDs of the nodes' pid files."""
        return [p for p in (self.pid(k) for k in range(1, self.nodes + 1)) if p is not None]

    def kill9(self, k: int) -> None:
        """SIGKILL nodek by the PID in its pid file."""
        pid = self.pid(k)
        assert pid is not None, f"node{k} has no pid file"
        os.kill(pid, signal.SIGKILL)

    def logs(self) -> str:
        """Every node's log, for failure messages."""
        out = []
        for k in range(1, self.nodes + 1):
            try:
                out.append(f"--- node{k} ---\n" + (self.node_dir(k) / "log").read_text(errors="replace")[-20000:])
            except OSError:
                pass
        return "\n".join(out)

    def up(self) -> "Cluster":
        """``tyr cluster up`` on free ports; tried again on other ports if one was taken meanwhile."""
        for attempt in range(3):
            if self.root.exists():
                shutil.rmtree(self.root, ignore_errors=True)
            self.root.mkdir(parents=True)
            r = subprocess.run(
                [binary(), "cluster", "up", "--nodes", str(self.nodes), "--dir", str(self.root), "--base-port", "0",
                 "--metrics"],
                capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
            )
            if r.returncode == 0:
                break
            self.down()
            if "address already in use" not in r.stderr or attempt == 2:
                raise RuntimeError(f"tyr cluster up: exit {r.returncode}\n{r.stderr}\n{self.logs()}")
        self.endpoints = r.stdout.split()
        assert len(self.endpoints) == self.nodes, r.stdout
        for k in range(1, self.nodes + 1):
            assert self.endpoint(k) == self.endpoints[k - 1]
            wait_ready(self.endpoint(k), 60)
        self.started = time.monotonic()
        return self

    def down(self) -> None:
        """``tyr cluster down``, then SIGKILL by PID for any node still running."""
        pids = self.pids()
        try:
            subprocess.run(
                [binary(), "cluster", "down", "--dir", str(self.root), "--timeout", "5s"],
                capture_output=True, timeout=60, stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            pass
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait_keyspace(self, name: str, timeout: float = 40.0) -> None:
        """Wait until every live node's catalog holds keyspace name, with every member alive and one ring."""
        deadline = time.monotonic() + timeout
        last = ""
        while True:
            ok = True
            rings = set()
            for ep in self.endpoints:
                try:
                    with tyr.connect(ep, timeout=5.0, routing=False) as c:
                        s = c.cluster_status()
                except tyr.Error as e:
                    ok, last = False, f"{ep}: {e}"
                    break
                names = [k["Name"] for k in s.get("Keyspaces") or []]
                states = [m["State"] for m in s.get("Members") or []]
                rings.add(s.get("RingID"))
                if name not in names or states.count("alive") != self.nodes:
                    ok, last = False, f"{ep}: keyspaces {names}, members {states}"
                    break
            if ok and len(rings) == 1:
                return
            if ok:
                last = f"rings differ: {rings}"
            if time.monotonic() > deadline:
                raise RuntimeError(f"keyspace {name} not on every node within {timeout}s: {last}")
            time.sleep(0.1)


class _Background:
    """A cluster being started in a thread while other tests run."""

    def __init__(self, root: Path) -> None:
        self.cluster = Cluster(root, 3)
        self.error: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._run, name="cluster-up", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.cluster.up()
        except BaseException as e:  # reported by the fixture
            self.error = e

    def get(self) -> Cluster:
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.cluster


_background: Optional[_Background] = None


def _cluster_root() -> Path:
    return Path(tempfile.mkdtemp(prefix="tyr-pycluster-"))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the cluster in the background if a collected test uses it."""
    global _background
    if any("cluster" in getattr(item, "fixturenames", ()) for item in session.items):
        _background = _Background(_cluster_root())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Take down a cluster started in the background that no test took."""
    if _background is not None:
        _background.thread.join()
        _background.cluster.down()


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """A 3-node local cluster for the session (``tyr cluster up --nodes 3 --base-port 0``)."""
    global _background
    bg = _background or _Background(_cluster_root())
    _background = bg
    c = bg.get()
    try:
        yield c
    finally:
        c.down()
        shutil.rmtree(c.root, ignore_errors=True)


# Fixtures of the fsspec, pandas, pyarrow and dask tests. With
# $TYR_TEST_ENDPOINT set, they use that server instead of the session server.
#: The keyspace the tests work in: chunks of 1 MiB, so larger files span
#: several; no fsync per commit, to be quick on a loaded machine.
FSSPEC_KEYSPACE = "fsspec-tests"


@pytest.fixture(scope="session")
def fsspec_endpoint(request: pytest.FixtureRequest) -> str:
    """host:port of the server the tests use."""
    return os.environ.get("TYR_TEST_ENDPOINT") or request.getfixturevalue("endpoint")


@pytest.fixture(scope="session")
def storage_options(fsspec_endpoint: str) -> dict[str, object]:
    """The storage_options that reach the test server."""
    return {"endpoint": fsspec_endpoint, "timeout": CALL_TIMEOUT}


@pytest.fixture(scope="session")
def fsspec_keyspace(fsspec_endpoint: str) -> Iterator[str]:
    """The tests' keyspace, created for the session and dropped after it."""
    with tyr.connect(fsspec_endpoint, timeout=CALL_TIMEOUT) as client:
        try:
            client.drop_keyspace(FSSPEC_KEYSPACE)
        except tyr.NotFoundError:
            pass
        client.create_keyspace(FSSPEC_KEYSPACE, chunk_size=1 << 20, sync=False)
        yield FSSPEC_KEYSPACE
        try:
            client.drop_keyspace(FSSPEC_KEYSPACE)
        except tyr.Error:
            pass


@pytest.fixture
def tyr_fs(storage_options: dict[str, object], fsspec_keyspace: str):  # type: ignore[no-untyped-def]
    """A TyrFileSystem of the test server (a fresh instance, not cached)."""
    from tyr.fsspec import TyrFileSystem

    fs = TyrFileSystem(skip_instance_cache=True, **storage_options)
    yield fs
    fs.close()


@pytest.fixture
def tyr_dir(tyr_fs, fsspec_keyspace: str) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """A directory of the test keyspace of its own for one test, removed after it."""
    path = f"{fsspec_keyspace}/{uuid.uuid4().hex[:12]}"
    yield path
    try:
        tyr_fs.rm(path, recursive=True)
    except FileNotFoundError:
        pass
