"""The S3 API on a 3-node cluster: a gateway (``tyr s3``) on each node, buckets at replication 1 and 2, so
objects, their sidecars, manifests and data blobs sit on different nodes, and requests for one object go
through different gateways."""

from __future__ import annotations

import hashlib
import random
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List

import botocore.exceptions
import pytest

import tyr

from conftest import CALL_TIMEOUT, Cluster, _die_with_parent, binary, fresh_name
from test_s3 import ACCESS, SECRET, _free_port, client_for, code_of, md5_etag


def _wait_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"tyr s3 exited {proc.returncode}:\n{log.read_text(errors='replace')}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"tyr s3 not listening on {port}:\n{log.read_text(errors='replace')}")


@pytest.fixture(scope="module")
def s3_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A 3-node cluster of this module's own: the session's may have a node killed by an earlier test."""
    c = Cluster(tmp_path_factory.mktemp("s3cluster"), 3).up()
    try:
        yield c
    finally:
        c.down()


@pytest.fixture(params=[1, 2], ids=["replication1", "replication2"])
def gateways(request: pytest.FixtureRequest, s3_cluster: Cluster, tmp_path: Path) -> Iterator[List[Any]]:
    """A ``tyr s3`` gateway against each node of the cluster, making buckets at the parameter's replication;
    a boto3 client for each."""
    procs: List[subprocess.Popen[bytes]] = []
    clients = []
    try:
        for k in range(1, s3_cluster.nodes + 1):
            port, log = _free_port(), tmp_path / f"gw{k}.log"
            with open(log, "wb") as out:
                p = subprocess.Popen(
                    [binary(), "s3", "--endpoint", s3_cluster.endpoint(k), "--listen", f"127.0.0.1:{port}",
                     "--s3-access-key", ACCESS, "--s3-secret-key", SECRET, "--s3-max-put", "32MiB",
                     "--s3-replication", str(request.param)],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
            procs.append(p)
            _wait_port(port, p, log)
            clients.append(client_for(f"http://127.0.0.1:{port}"))
        yield clients
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _bucket_on_all(gateways: List[Any], name: str, exists: bool) -> None:
    """Waits until every gateway finds the bucket (or, with exists false, none does): buckets are keyspaces,
    whose catalog the nodes gossip, so a bucket made or dropped through one node reaches the others within
    the gossip delay (milliseconds here), as S3 itself makes bucket changes eventually visible."""
    deadline = time.monotonic() + 10
    for g in gateways:
        while True:
            try:
                g.head_bucket(Bucket=name)
                found = True
            except botocore.exceptions.ClientError as e:
                assert code_of(e)[1] == 404, e
                found = False
            if found == exists:
                break
            assert time.monotonic() < deadline, f"bucket {name} exists={found} after 10 s"
            time.sleep(0.01)


def _logical(cluster: Cluster, bucket: str) -> List[int]:
    """The bytes of the bucket's data each node holds."""
    out = []
    for k in range(1, cluster.nodes + 1):
        with tyr.connect(cluster.endpoint(k), timeout=CALL_TIMEOUT) as c:
            out.append(c.keyspace(bucket).logical_bytes)
    return out


def test_objects_across_nodes(s3_cluster: Cluster, gateways: List[Any]) -> None:
    cluster = s3_cluster
    rng = random.Random(7)
    gw = lambda: rng.choice(gateways)  # noqa: E731
    name = fresh_name("s3c")
    gateways[0].create_bucket(Bucket=name)
    _bucket_on_all(gateways, name, True)
    with tyr.connect(cluster.endpoint(1), timeout=CALL_TIMEOUT) as native:
        replication = native.keyspace(name).replication

    # Inline objects of 256 KiB, each put through a random gateway.
    model: Dict[str, bytes] = {}
    for i in range(40):
        key = f"dir{i % 4}/obj{i:03d}"
        model[key] = rng.randbytes(256 << 10)
        assert gw().put_object(Bucket=name, Key=key, Body=model[key])["ETag"] == md5_etag(model[key])
    # A manifest object: larger than one inline object.
    big = rng.randbytes(20 << 20)
    gw().put_object(Bucket=name, Key="big", Body=big)
    model["big"] = big
    # A multipart upload whose calls go through three different gateways.
    parts = [rng.randbytes(5 << 20), rng.randbytes(5 << 20), rng.randbytes(1 << 20)]
    up = gateways[0].create_multipart_upload(Bucket=name, Key="multi")["UploadId"]
    done = []
    for n, data in enumerate(parts, 1):
        r = gateways[n % len(gateways)].upload_part(Bucket=name, Key="multi", UploadId=up, PartNumber=n, Body=data)
        done.append({"PartNumber": n, "ETag": r["ETag"]})
    listed = gateways[1].list_parts(Bucket=name, Key="multi", UploadId=up)["Parts"]
    assert [p["PartNumber"] for p in listed] == [1, 2, 3]
    r = gateways[2].complete_multipart_upload(Bucket=name, Key="multi", UploadId=up,
                                              MultipartUpload={"Parts": done})
    digest = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest()
    assert r["ETag"] == f'"{digest}-3"'
    model["multi"] = b"".join(parts)

    # The data is spread: at replication 1 or 2 no node holds it all, and the nodes together hold
    # replication copies of it (and the sidecars and manifests, a little more).
    total = sum(len(v) for v in model.values())
    gained = _logical(cluster, name)
    assert replication in (1, 2) and cluster.nodes == 3
    assert sum(gained) >= replication * total, (gained, total)
    assert sum(1 for g in gained if g > 0) >= 2, gained
    assert max(gained) < total + (1 << 20), (gained, total)

    # Every object reads back whole and by ranges through every gateway.
    for key, data in model.items():
        for g in gateways:
            assert g.get_object(Bucket=name, Key=key)["Body"].read() == data, key
        lo = rng.randrange(len(data))
        hi = min(len(data) - 1, lo + rng.randrange(1, 3 << 20))
        got = gw().get_object(Bucket=name, Key=key, Range=f"bytes={lo}-{hi}")["Body"].read()
        assert got == data[lo : hi + 1], (key, lo, hi)

    # Listings agree with the model through every gateway, paged small and grouped by the delimiter.
    multi_etag = r["ETag"]
    for g in gateways:
        objs = [o for page in g.get_paginator("list_objects_v2").paginate(
            Bucket=name, PaginationConfig={"PageSize": 7}) for o in page.get("Contents", [])]
        assert [o["Key"] for o in objs] == sorted(model), objs
        for o in objs:  # the ETags come from sidecars on every node
            assert o["ETag"] == (multi_etag if o["Key"] == "multi" else md5_etag(model[o["Key"]])), o
            assert o["Size"] == len(model[o["Key"]]), o
        top = g.list_objects_v2(Bucket=name, Delimiter="/")
        assert [p["Prefix"] for p in top["CommonPrefixes"]] == [f"dir{i}/" for i in range(4)]
        assert [o["Key"] for o in top["Contents"]] == ["big", "multi"]

    # Replaced through one gateway, deleted through another: every gateway sees the change.
    model["dir0/obj000"] = b"replaced"
    gateways[2].put_object(Bucket=name, Key="dir0/obj000", Body=b"replaced")
    gateways[1].delete_objects(Bucket=name, Delete={"Objects": [{"Key": "big"}, {"Key": "dir1/obj001"}]})
    del model["big"], model["dir1/obj001"]
    for g in gateways:
        assert g.get_object(Bucket=name, Key="dir0/obj000")["Body"].read() == b"replaced"
        for gone in ("big", "dir1/obj001"):
            with pytest.raises(botocore.exceptions.ClientError) as e:
                g.head_object(Bucket=name, Key=gone)
            assert code_of(e.value)[1] == 404

    # Emptied and dropped.
    keys = list(model)
    gateways[0].delete_objects(Bucket=name, Delete={"Objects": [{"Key": k} for k in keys]})
    assert gateways[1].list_objects_v2(Bucket=name).get("KeyCount") == 0
    gateways[2].delete_bucket(Bucket=name)
    _bucket_on_all(gateways, name, False)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        gateways[0].put_object(Bucket=name, Key="k", Body=b"v")
    assert code_of(e.value) == ("NoSuchBucket", 404)
