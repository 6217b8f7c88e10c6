"""TýrFS from Python: a tree imported with ``tyr fs import`` reads back whole
through ``fetch`` and ``fetch_many``, with each failure as its OSError."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import tyr


def test_fetch_many(client: tyr.Client, ks: str, endpoint: str, tyr_bin: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    want = {}
    for d in range(3):
        (src / f"d{d}").mkdir(parents=True)
        for i in range(120):
            data = os.urandom(i * 97)  # empty, and across 4 KiB chunks
            (src / f"d{d}" / f"f{i}").write_bytes(data)
            want[f"/data/d{d}/f{i}"] = data
    secret = src / "d0" / "secret"
    secret.write_bytes(b"s")
    secret.chmod(0o600)
    subprocess.run([tyr_bin, "--endpoint", endpoint, "fs", "import", str(src), f"{ks}/data"],
                   check=True, capture_output=True, timeout=120)

    with client.tyrfs(ks) as fs:
        paths = sorted(want)  # 360: more than one batch
        got = fs.fetch_many(paths)
        assert len(got) == len(paths)
        for p, data in zip(paths, got):
            assert data == want[p], p
        assert fs.fetch("/data/d0/secret") == b"s"
        bad = fs.fetch_many(["/data/none", "/data/d1", "/data/d1/f3/x", "relative", "/data/d2/f5"])
        assert [type(e) for e in bad[:4]] == [FileNotFoundError, IsADirectoryError, NotADirectoryError, OSError]
        assert bad[3].errno == 22  # EINVAL
        assert bad[4] == want["/data/d2/f5"]
        with pytest.raises(FileNotFoundError):
            fs.fetch("/data/none")
    with pytest.raises(tyr.InvalidArgumentError):
        fs.fetch("/data/d0/f1")

    # Another user: the file of mode 0600 is refused, the others are not.
    with client.tyrfs(ks, uid=2000, gids=[200]) as other:
        with pytest.raises(PermissionError):
            other.fetch("/data/d0/secret")
        assert other.fetch("/data/d0/f7") == want["/data/d0/f7"]
    with pytest.raises(tyr.InvalidArgumentError):
        client.tyrfs(ks, gids=range(tyr.tyrfs.GROUPS_MAX + 1))
