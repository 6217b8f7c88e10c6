"""tyr:// through fsspec: fsspec's own abstract tests and tyr's cases."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid

import fsspec
import pytest
from fsspec.tests.abstract import (
    AbstractCopyTests,
    AbstractFixtures,
    AbstractGetTests,
    AbstractOpenTests,
    AbstractPipeTests,
    AbstractPutTests,
)

MiB = 1 << 20


class TyrFixtures(AbstractFixtures):
    """fsspec's abstract tests against the test server, each in a directory of its own."""

    @pytest.fixture
    def fs(self, tyr_fs):
        return tyr_fs

    @pytest.fixture
    def fs_path(self, tyr_dir):
        return tyr_dir

    @pytest.fixture
    def fs_join(self):
        return lambda *parts: "/".join(parts)

    @pytest.fixture
    def supports_empty_directories(self):
        # Directories below a keyspace exist while keys start with them.
        return False


class TestTyrCopy(AbstractCopyTests, TyrFixtures):
    pass


class TestTyrGet(AbstractGetTests, TyrFixtures):
    pass


class TestTyrPut(AbstractPutTests, TyrFixtures):
    pass


class TestTyrOpen(AbstractOpenTests, TyrFixtures):
    pass


class TestTyrPipe(AbstractPipeTests, TyrFixtures):
    pass


# -- tyr's own cases ---------------------------------------------------------


def test_open_write_read_url(storage_options, tyr_dir):
    url = f"tyr://{tyr_dir}/a/b.txt"
    with fsspec.open(url, "wb", **storage_options) as f:
        f.write(b"hello, ")
        f.write(b"tyr")
    with fsspec.open(url, "rb", **storage_options) as f:
        assert f.read() == b"hello, tyr"
    with fsspec.open(url, "rt", **storage_options) as f:
        assert f.read() == "hello, tyr"
    # Writing again replaces the blob, shorter or not.
    with fsspec.open(url, "wb", **storage_options) as f:
        f.write(b"hi")
    with fsspec.open(url, "rb", **storage_options) as f:
        assert f.read() == b"hi"


def test_ls_info_rm(tyr_fs, tyr_dir):
    fs = tyr_fs
    fs.pipe({f"{tyr_dir}/x/one": b"1", f"{tyr_dir}/x/two": b"22", f"{tyr_dir}/x/sub/three": b"333",
             f"{tyr_dir}/x/sub/deeper/four": b"4444", f"{tyr_dir}/y": b""})
    assert fs.ls(tyr_dir, detail=False) == [f"{tyr_dir}/x", f"{tyr_dir}/y"]
    listing = {e["name"]: e for e in fs.ls(f"tyr://{tyr_dir}/x/")}
    assert sorted(listing) == [f"{tyr_dir}/x/one", f"{tyr_dir}/x/sub", f"{tyr_dir}/x/two"]
    assert listing[f"{tyr_dir}/x/sub"]["type"] == "directory"
    assert listing[f"{tyr_dir}/x/two"]["type"] == "file"
    assert listing[f"{tyr_dir}/x/two"]["size"] == 2

    info = fs.info(f"{tyr_dir}/x/sub/three")
    assert info["type"] == "file" and info["size"] == 3 and info["version"] >= 1
    assert info["name"] == f"{tyr_dir}/x/sub/three"
    assert fs.info(f"{tyr_dir}/x/sub")["type"] == "directory"
    assert fs.info(tyr_dir.split("/")[0])["type"] == "directory"
    assert fs.isdir(f"{tyr_dir}/x") and not fs.isfile(f"{tyr_dir}/x")
    assert fs.isfile(f"{tyr_dir}/y") and fs.size(f"{tyr_dir}/y") == 0
    assert fs.ls(f"{tyr_dir}/y", detail=False) == [f"{tyr_dir}/y"]
    with pytest.raises(FileNotFoundError):
        fs.info(f"{tyr_dir}/nothing")
    with pytest.raises(FileNotFoundError):
        fs.ls(f"{tyr_dir}/nothing")
    with pytest.raises(FileNotFoundError):
        fs.cat_file(f"{tyr_dir}/nothing")
    assert not fs.exists(f"{tyr_dir}/x/su")  # a prefix of a directory's name is nothing

    assert fs.find(tyr_dir) == sorted([f"{tyr_dir}/x/one", f"{tyr_dir}/x/two", f"{tyr_dir}/x/sub/three",
                                       f"{tyr_dir}/x/sub/deeper/four", f"{tyr_dir}/y"])
    assert fs.find(tyr_dir, maxdepth=2) == [f"{tyr_dir}/x/one", f"{tyr_dir}/x/two", f"{tyr_dir}/y"]
    assert f"{tyr_dir}/x/sub/deeper" in fs.find(tyr_dir, withdirs=True)
    assert fs.glob(f"{tyr_dir}/x/*") == [f"{tyr_dir}/x/one", f"{tyr_dir}/x/sub", f"{tyr_dir}/x/two"]
    assert fs.glob(f"tyr://{tyr_dir}/**/t*") == [f"{tyr_dir}/x/sub/three", f"{tyr_dir}/x/two"]
    assert fs.du(tyr_dir) == 1 + 2 + 3 + 4
    assert fs.modified(f"{tyr_dir}/x/one") >= fs.created(f"{tyr_dir}/x/one")
    assert fs.checksum(f"{tyr_dir}/x/one") == fs.checksum(f"{tyr_dir}/x/one")
    before = fs.checksum(f"{tyr_dir}/x/one")
    fs.pipe_file(f"{tyr_dir}/x/one", b"1")
    assert fs.checksum(f"{tyr_dir}/x/one") != before

    with pytest.raises(IsADirectoryError):
        fs.rm(f"{tyr_dir}/x/sub")
    fs.rm(f"{tyr_dir}/x/one")
    assert not fs.exists(f"{tyr_dir}/x/one")
    with pytest.raises(FileNotFoundError):
        fs.rm(f"{tyr_dir}/x/one")
    with pytest.raises(OSError):
        fs.rmdir(f"{tyr_dir}/x/sub")
    fs.rm(f"{tyr_dir}/x/sub", recursive=True)
    assert not fs.exists(f"{tyr_dir}/x/sub")
    assert fs.ls(f"{tyr_dir}/x", detail=False) == [f"{tyr_dir}/x/two"]
    fs.rm(tyr_dir, recursive=True)
    assert not fs.exists(tyr_dir)
    assert fs.find(tyr_dir) == []


def test_keyspaces_as_directories(tyr_fs):
    fs = tyr_fs
    ks = f"fsspec-ks-{uuid.uuid4().hex[:8]}"
    fs.mkdir(ks, chunk_size=64 << 10, sync=False)
    try:
        assert ks in fs.ls("", detail=False)
        assert fs.isdir(ks) and fs.ls(ks) == []
        with pytest.raises(FileExistsError):
            fs.mkdir(ks)
        with pytest.raises(FileExistsError):
            fs.makedirs(ks)
        fs.makedirs(ks, exist_ok=True)
        fs.makedirs(f"{ks}/a/b")  # virtual: nothing to do
        assert fs.info(ks)["chunk_size"] == 64 << 10
        fs.pipe_file(f"{ks}/a/b/c", b"x")
        with pytest.raises(OSError):
            fs.rmdir(ks)
        fs.rm(f"{ks}/a/b/c")
        fs.rmdir(ks)
        assert not fs.exists(ks)
        with pytest.raises(FileNotFoundError):
            fs.pipe_file(f"{ks}/k", b"x")  # no keyspace, no blob
        fs.put_file(__file__, f"{ks}/copy.py")  # put makes the keyspace
        assert fs.cat_file(f"{ks}/copy.py") == open(__file__, "rb").read()
        fs.rm(ks, recursive=True)  # drops the keyspace
        assert not fs.exists(ks)
    finally:
        try:
            fs.rm(ks, recursive=True)
        except FileNotFoundError:
            pass


def test_cat_file_ranges(tyr_fs, tyr_dir):
    fs = tyr_fs
    path = f"{tyr_dir}/ranges"
    data = bytes(range(256)) * 40
    fs.pipe_file(path, data)
    for start, end in [(None, None), (0, 10), (5, None), (None, 7), (100, 5000), (-10, None),
                       (-100, -50), (10, -10), (len(data) - 3, len(data) + 100), (len(data) + 5, None),
                       (20, 20), (30, 10), (0, 0)]:
        assert fs.cat_file(path, start=start, end=end) == data[start:end], (start, end)
    assert fs.cat_ranges([path, path], [0, 300], [4, 310]) == [data[0:4], data[300:310]]
    assert fs.read_block(path, 1000, 24) == data[1000:1024]
    assert fs.head(path, 5) == data[:5] and fs.tail(path, 5) == data[-5:]
    with fs.open(path, "rb", block_size=1000) as f:
        f.seek(2500)
        assert f.read(10) == data[2500:2510]
        f.seek(-20, 2)
        assert f.read() == data[-20:]
        assert f.read() == b""


def test_large_file(storage_options, tyr_fs, tyr_dir):
    size = 9 * MiB + 12345  # blocks of 4 MiB, chunks of 1 MiB: neither aligned
    data = os.urandom(size)
    url = f"tyr://{tyr_dir}/big.bin"
    with fsspec.open(url, "wb", **storage_options) as f:
        for i in range(0, size, 1000_003):
            f.write(data[i:i + 1000_003])
    assert tyr_fs.size(url) == size
    with fsspec.open(url, "rb", **storage_options) as f:
        assert f.read() == data
    with fsspec.open(url, "rb", **storage_options) as f:
        f.seek(5 * MiB - 3)
        assert f.read(MiB) == data[5 * MiB - 3:6 * MiB - 3]
    assert tyr_fs.cat_file(url, start=4 * MiB - 1, end=8 * MiB + 1) == data[4 * MiB - 1:8 * MiB + 1]

    # A copy streams in parts; the copy of a small file replaces a large one.
    tyr_fs.cp_file(url, f"{tyr_dir}/big-copy.bin")
    assert tyr_fs.cat_file(f"{tyr_dir}/big-copy.bin") == data
    tyr_fs.pipe_file(f"{tyr_dir}/small", b"small")
    tyr_fs.cp_file(f"{tyr_dir}/small", f"{tyr_dir}/big-copy.bin")
    assert tyr_fs.cat_file(f"{tyr_dir}/big-copy.bin") == b"small"

    # Rewriting a large blob with a small file leaves nothing of the old one.
    with fsspec.open(url, "wb", **storage_options) as f:
        f.write(b"tiny")
    assert tyr_fs.cat_file(url) == b"tiny"


def test_append_and_exclusive(tyr_fs, tyr_dir):
    fs = tyr_fs
    path = f"{tyr_dir}/log"
    with fs.open(path, "ab") as f:
        f.write(b"one\n")
    with fs.open(path, "ab") as f:
        f.write(b"two\n")
    assert fs.cat_file(path) == b"one\ntwo\n"
    with pytest.raises(FileExistsError):
        fs.open(path, "xb")
    with fs.open(f"{tyr_dir}/new", "xb") as f:
        f.write(b"new")
    assert fs.cat_file(f"{tyr_dir}/new") == b"new"
    fs.touch(f"{tyr_dir}/empty")
    assert fs.cat_file(f"{tyr_dir}/empty") == b""
    fs.touch(path, truncate=False)
    assert fs.cat_file(path) == b"one\ntwo\n"
    fs.touch(path)
    assert fs.cat_file(path) == b""


def test_large_listing(tyr_fs, tyr_dir, storage_options):
    # Pages of 7 keys: the listing groups keys across pages and skips past
    # the rest of a sub-directory a page ends in.
    from tyr.fsspec import TyrFileSystem

    fs = TyrFileSystem(skip_instance_cache=True, list_page_size=7, **storage_options)
    ks, base = tyr_dir.split("/", 1)
    expected_files = []
    with fs.client.transaction(ks) as tx:
        for d in range(5):
            for i in range(30):
                tx.write(f"{base}/d{d}/f{i:03}", b"x")
        for i in range(20):
            tx.write(f"{base}/f{i:03}", b"y")
            expected_files.append(f"{tyr_dir}/f{i:03}")
        tx.write(f"{base}/e/", b"")  # a directory marker: not an entry
        tx.write(f"{base}/z", b"z")
    expected = sorted(expected_files + [f"{tyr_dir}/d{d}" for d in range(5)] + [f"{tyr_dir}/z", f"{tyr_dir}/e"])
    listing = fs.ls(tyr_dir)
    assert [e["name"] for e in listing] == expected
    assert {e["name"]: e["type"] for e in listing}[f"{tyr_dir}/d3"] == "directory"
    assert len(fs.find(tyr_dir)) == 5 * 30 + 20 + 1
    assert fs.ls(f"{tyr_dir}/e") == []  # the marker makes the directory exist
    fs.rm(tyr_dir, recursive=True)
    assert fs.find(tyr_dir) == []


def test_walk_and_get_put_roundtrip(tyr_fs, tyr_dir, tmp_path):
    fs = tyr_fs
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    (src / "top.txt").write_bytes(b"top")
    (src / "a" / "mid.txt").write_bytes(b"mid")
    (src / "a" / "b" / "low.txt").write_bytes(b"low" * 1000)
    fs.put(str(src), f"{tyr_dir}/tree", recursive=True)
    walked = {root: (sorted(dirs), sorted(files)) for root, dirs, files in fs.walk(f"{tyr_dir}/tree")}
    assert walked == {
        f"{tyr_dir}/tree": (["a"], ["top.txt"]),
        f"{tyr_dir}/tree/a": (["b"], ["mid.txt"]),
        f"{tyr_dir}/tree/a/b": ([], ["low.txt"]),
    }
    dst = tmp_path / "dst"
    fs.get(f"{tyr_dir}/tree", str(dst), recursive=True)
    assert (dst / "a" / "b" / "low.txt").read_bytes() == b"low" * 1000
    fs.mv(f"{tyr_dir}/tree/a", f"{tyr_dir}/moved", recursive=True)
    assert fs.find(f"{tyr_dir}/moved") == [f"{tyr_dir}/moved/b/low.txt", f"{tyr_dir}/moved/mid.txt"]
    assert not fs.exists(f"{tyr_dir}/tree/a")


def test_mapper(tyr_fs, tyr_dir):
    m = tyr_fs.get_mapper(f"tyr://{tyr_dir}/kv")
    m["a"] = b"1"
    m["b/c"] = b"2"
    assert dict(m) == {"a": b"1", "b/c": b"2"}
    del m["a"]
    assert list(m) == ["b/c"]


def test_pickle(tyr_fs, tyr_dir):
    import pickle

    tyr_fs.pipe_file(f"{tyr_dir}/p", b"pickled")
    fs2 = pickle.loads(pickle.dumps(tyr_fs))
    assert fs2.endpoint == tyr_fs.endpoint
    assert fs2.cat_file(f"{tyr_dir}/p") == b"pickled"
    with tyr_fs.open(f"{tyr_dir}/p", "rb") as f:
        f.read(2)
        f2 = pickle.loads(pickle.dumps(f))
        assert f2.read() == b"ckled"


def test_strip_protocol():
    from tyr.fsspec import TyrFileSystem

    assert TyrFileSystem._strip_protocol("tyr://ks/a/b/") == "ks/a/b"
    assert TyrFileSystem._strip_protocol("ks/a") == "ks/a"
    assert TyrFileSystem._strip_protocol("tyr://ks") == "ks"
    assert TyrFileSystem._strip_protocol("tyr://") == ""
    assert TyrFileSystem._strip_protocol(["tyr://ks/x", "ks/y/"]) == ["ks/x", "ks/y"]
    assert TyrFileSystem().unstrip_protocol("ks/a") == "tyr://ks/a"


def test_entry_point_registration(fsspec_endpoint, fsspec_keyspace):
    # A fresh interpreter: fsspec finds tyr through the entry point alone.
    code = textwrap.dedent(
        f"""
        import sys
        import fsspec
        assert "tyr.fsspec" not in sys.modules
        fs = fsspec.filesystem("tyr")
        assert type(fs).__module__ == "tyr.fsspec", type(fs)
        assert fs.endpoint == {fsspec_endpoint!r}
        fs.pipe_file("{fsspec_keyspace}/entry-point", b"ok")
        with fsspec.open("tyr://{fsspec_keyspace}/entry-point", "rb") as f:
            assert f.read() == b"ok"
        fs.rm("{fsspec_keyspace}/entry-point")
        print("registered")
        """
    )
    env = dict(os.environ, TYR_ENDPOINT=fsspec_endpoint)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "registered"
