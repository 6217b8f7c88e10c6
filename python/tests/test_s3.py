"""The S3 API (tyr server --s3-listen) through boto3, against a real server."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import random
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, Iterator, List, Optional, Tuple

import boto3
import botocore.exceptions
import pytest
from botocore.config import Config

import tyr

from conftest import CALL_TIMEOUT, Server, fresh_name

ACCESS, SECRET = "test-access", "test-secret-key"
#: The largest inline object (s3gw.ObjectBytesMax); larger ones are
#: manifests of data blobs.
OBJECT_BYTES_MAX = 15 << 20
#: The server's --s3-max-put: the largest PUT and the largest part.
MAX_PUT = 40 << 20
#: The prefix of the gateway's own blobs (uploads, parts, data, manifests).
INTERNAL = "\U0010ffff\U0010ffff"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tuple[Server, str]]:
    """A server with the S3 API on a free port: (server, S3 endpoint URL)."""
    port, metrics = _free_port(), _free_port()
    s = Server(tmp_path_factory.mktemp("tyr-s3"), "--min-free", "0", "--s3-listen", f"127.0.0.1:{port}",
               "--metrics-listen", f"127.0.0.1:{metrics}",
               "--s3-access-key", ACCESS, "--s3-secret-key", SECRET, "--s3-max-put", f"{MAX_PUT}").start()
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):  # the gateway starts once the server is ready
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                threading.Event().wait(0.05)
        s.metrics_url = f"http://127.0.0.1:{metrics}/metrics"  # type: ignore[attr-defined]
        yield s, url
    finally:
        s.stop()


def client_for(url: str, access: str = ACCESS, secret: str = SECRET) -> Any:
    return boto3.client("s3", endpoint_url=url, aws_access_key_id=access, aws_secret_access_key=secret,
                        region_name="us-east-1",
                        config=Config(signature_version="s3v4", s3={"addressing_style": "path"},
                                      retries={"max_attempts": 1}))


@pytest.fixture(scope="module")
def s3(s3_server: Tuple[Server, str]) -> Any:
    return client_for(s3_server[1])


@pytest.fixture(scope="module")
def native(s3_server: Tuple[Server, str]) -> Iterator[tyr.Client]:
    with tyr.connect(s3_server[0].endpoint, timeout=CALL_TIMEOUT) as c:
        yield c


@pytest.fixture
def bucket(s3: Any) -> Iterator[str]:
    name = fresh_name("s3")
    s3.create_bucket(Bucket=name)
    yield name
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name) for o in page.get("Contents", [])]
    for i in range(0, len(keys), 1000):
        s3.delete_objects(Bucket=name, Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]]})
    s3.delete_bucket(Bucket=name)


def code_of(e: botocore.exceptions.ClientError) -> Tuple[str, int]:
    return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]


def md5_etag(data: bytes) -> str:
    return '"' + hashlib.md5(data).hexdigest() + '"'


def test_buckets(s3: Any, native: tyr.Client) -> None:
    name = fresh_name("s3b")
    s3.create_bucket(Bucket=name)
    assert name in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert native.keyspace(name).name == name  # a bucket is a keyspace
    s3.head_bucket(Bucket=name)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.create_bucket(Bucket=name)
    assert code_of(e.value)[0] == "BucketAlreadyOwnedByYou"
    s3.put_object(Bucket=name, Key="k", Body=b"v")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.delete_bucket(Bucket=name)
    assert code_of(e.value) == ("BucketNotEmpty", 409)
    s3.delete_object(Bucket=name, Key="k")
    s3.delete_bucket(Bucket=name)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.head_bucket(Bucket=name)
    assert code_of(e.value)[1] == 404
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket=name, Key="k", Body=b"v")
    assert code_of(e.value) == ("NoSuchBucket", 404)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.create_bucket(Bucket="Not_A_Valid_Name")
    assert code_of(e.value)[0] == "InvalidBucketName"


def test_put_get_head(s3: Any, native: tyr.Client, bucket: str) -> None:
    data = random.Random(1).randbytes(300_000)
    r = s3.put_object(Bucket=bucket, Key="dir/obj.bin", Body=data, ContentType="application/x-test",
                      Metadata={"owner": "alice", "run": "7"}, CacheControl="no-cache")
    assert r["ETag"] == md5_etag(data)
    g = s3.get_object(Bucket=bucket, Key="dir/obj.bin")
    assert g["Body"].read() == data
    assert g["ETag"] == md5_etag(data) and g["ContentType"] == "application/x-test"
    assert g["Metadata"] == {"owner": "alice", "run": "7"} and g["CacheControl"] == "no-cache"
    h = s3.head_object(Bucket=bucket, Key="dir/obj.bin")
    assert h["ContentLength"] == len(data) and h["ETag"] == md5_etag(data)
    # The native API reads the same bytes under the same key.
    assert native.get(bucket, "dir/obj.bin") == data
    # An empty object.
    s3.put_object(Bucket=bucket, Key="empty", Body=b"")
    assert s3.get_object(Bucket=bucket, Key="empty")["Body"].read() == b""
    # Replaced: data and attributes together.
    s3.put_object(Bucket=bucket, Key="dir/obj.bin", Body=b"short")
    g = s3.get_object(Bucket=bucket, Key="dir/obj.bin")
    assert g["Body"].read() == b"short" and g["ETag"] == md5_etag(b"short")
    assert g.get("Metadata") == {} and g["ContentType"] != "application/x-test"
    for missing in ("missing", 'keyspace "x"'):
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.get_object(Bucket=bucket, Key=missing)
        assert code_of(e.value) == ("NoSuchKey", 404)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket=fresh_name("s3-none"), Key="missing")
    assert code_of(e.value) == ("NoSuchBucket", 404)


def test_written_natively(s3: Any, native: tyr.Client, bucket: str) -> None:
    native.put(bucket, "native", b"from the native API")
    g = s3.get_object(Bucket=bucket, Key="native")
    assert g["Body"].read() == b"from the native API"
    assert g["ETag"].startswith('"tyr-')  # no MD5 was computed: the blob's version
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert keys == ["native"]


def test_ranges_and_conditions(s3: Any, bucket: str) -> None:
    data = bytes(range(256)) * 40
    etag = s3.put_object(Bucket=bucket, Key="r", Body=data)["ETag"]
    cases = {"bytes=0-9": data[:10], "bytes=100-": data[100:], "bytes=-5": data[-5:], "bytes=10000-20000": data[10000:]}
    for rng, want in cases.items():
        g = s3.get_object(Bucket=bucket, Key="r", Range=rng)
        assert g["Body"].read() == want, rng
        assert g["ContentRange"].startswith("bytes "), rng
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket=bucket, Key="r", Range=f"bytes={len(data)}-")
    assert code_of(e.value) == ("InvalidRange", 416)
    assert s3.get_object(Bucket=bucket, Key="r", IfMatch=etag)["Body"].read() == data
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket=bucket, Key="r", IfMatch='"0123"')
    assert code_of(e.value)[1] == 412
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket=bucket, Key="r", IfNoneMatch=etag)
    assert code_of(e.value)[1] == 304


def test_delete_and_copy(s3: Any, bucket: str) -> None:
    for i in range(5):
        s3.put_object(Bucket=bucket, Key=f"d/{i}", Body=f"value {i}".encode(), Metadata={"i": str(i)})
    s3.delete_object(Bucket=bucket, Key="d/0")
    s3.delete_object(Bucket=bucket, Key="d/0")  # idempotent
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "d/1"}, {"Key": "d/2"}, {"Key": "never"}]})
    assert sorted(d["Key"] for d in r["Deleted"]) == ["d/1", "d/2", "never"] and not r.get("Errors")
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["d/3", "d/4"]
    s3.copy_object(Bucket=bucket, Key="c/3", CopySource={"Bucket": bucket, "Key": "d/3"})
    g = s3.get_object(Bucket=bucket, Key="c/3")
    assert g["Body"].read() == b"value 3" and g["Metadata"] == {"i": "3"}
    s3.copy_object(Bucket=bucket, Key="c/4", CopySource={"Bucket": bucket, "Key": "d/4"},
                   MetadataDirective="REPLACE", Metadata={"new": "yes"}, ContentType="text/plain")
    g = s3.get_object(Bucket=bucket, Key="c/4")
    assert g["Body"].read() == b"value 4" and g["Metadata"] == {"new": "yes"} and g["ContentType"] == "text/plain"


def test_signatures(s3_server: Tuple[Server, str], s3: Any, native: tyr.Client, bucket: str) -> None:
    url = s3_server[1]
    s3.put_object(Bucket=bucket, Key="k", Body=b"kept")
    for access, secret in ((ACCESS, "wrong-secret"), ("unknown-access", SECRET)):
        bad = client_for(url, access, secret)
        with pytest.raises(botocore.exceptions.ClientError) as e:
            bad.put_object(Bucket=bucket, Key="k", Body=b"changed")
        assert code_of(e.value)[1] == 403
        with pytest.raises(botocore.exceptions.ClientError) as e:
            bad.delete_bucket(Bucket=bucket)
        assert code_of(e.value)[1] == 403
    # Unsigned.
    with pytest.raises(urllib.error.HTTPError) as he:
        urllib.request.urlopen(urllib.request.Request(f"{url}/{bucket}/k", data=b"changed", method="PUT"))
    assert he.value.code == 403
    assert native.get(bucket, "k") == b"kept"  # nothing changed
    # Presigned URLs work, and expire.
    signed = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"}, ExpiresIn=60)
    assert urllib.request.urlopen(signed).read() == b"kept"
    tampered = signed.replace("/k?", "/other?")
    with pytest.raises(urllib.error.HTTPError) as he:
        urllib.request.urlopen(tampered)
    assert he.value.code == 403


def internal_blobs(native: tyr.Client, bucket: str) -> List[str]:
    return [b.key[len(INTERNAL):] for b in native.list(bucket, prefix=INTERNAL)]


def read_range(s3: Any, bucket: str, key: str, lo: int, hi: int) -> bytes:
    g = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={lo}-{hi}")
    assert g["ContentRange"].startswith(f"bytes {lo}-")
    return bytes(g["Body"].read())


def s3_metrics(server: Server, bucket: str) -> Dict[str, float]:
    """The gateway's metrics of bucket: {'requests op code': n, 'bytes direction': n}."""
    out: Dict[str, float] = {}
    with urllib.request.urlopen(server.metrics_url) as r:  # type: ignore[attr-defined]
        for line in r.read().decode().splitlines():
            if line.startswith("#") or f'bucket="{bucket}"' not in line:
                continue
            name, value = line.rsplit(" ", 1)
            labels = dict(kv.split("=", 1) for kv in name[name.index("{") + 1 : -1].split(","))
            labels = {k: v.strip('"') for k, v in labels.items()}
            if name.startswith("tyr_s3_requests_total"):
                out[f"requests {labels['op']} {labels['code']}"] = float(value)
            elif name.startswith("tyr_s3_bytes_total"):
                out[f"bytes {labels['direction']}"] = float(value)
    return out


def test_metrics(s3_server: Tuple[Server, str], s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="m", Body=b"x" * 1000)
    s3.put_object(Bucket=bucket, Key="m", Body=b"y" * 3000)
    assert s3.get_object(Bucket=bucket, Key="m", Range="bytes=0-99")["Body"].read() == b"y" * 100
    with pytest.raises(botocore.exceptions.ClientError):
        s3.get_object(Bucket=bucket, Key="missing")
    s3.list_objects_v2(Bucket=bucket)
    m = s3_metrics(s3_server[0], bucket)
    assert m == {"requests PutObject OK": 2, "requests GetObject OK": 1, "requests GetObject NoSuchKey": 1,
                 "requests ListObjectsV2 OK": 1, "requests CreateBucket OK": 1, "bytes in": 4000, "bytes out": 100}, m


def test_sizes(s3: Any, native: tyr.Client, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="big", Body=b"old")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket=bucket, Key="big", Body=b"x" * (MAX_PUT + 1))
    assert code_of(e.value) == ("EntityTooLarge", 400)
    assert native.get(bucket, "big") == b"old"
    assert internal_blobs(native, bucket) == []
    rng = random.Random(2)
    # The largest inline object: the blob holds its bytes.
    data = rng.randbytes(OBJECT_BYTES_MAX)
    assert s3.put_object(Bucket=bucket, Key="big", Body=data)["ETag"] == md5_etag(data)
    assert read_range(s3, bucket, "big", 5000000, 5000099) == data[5000000:5000100]
    assert native.get(bucket, "big") == data
    # One byte more is a manifest object: data blob, manifest, an empty blob at the key.
    for size in (OBJECT_BYTES_MAX + 1, MAX_PUT):
        data = rng.randbytes(size)
        assert s3.put_object(Bucket=bucket, Key="big", Body=data, ContentType="x/y")["ETag"] == md5_etag(data)
        h = s3.head_object(Bucket=bucket, Key="big")
        assert (h["ContentLength"], h["ETag"], h["ContentType"]) == (size, md5_etag(data), "x/y")
        assert s3.get_object(Bucket=bucket, Key="big")["Body"].read() == data
        for lo, hi in ((0, 0), (OBJECT_BYTES_MAX - 10, OBJECT_BYTES_MAX + 10), (size - 7, size - 1), (123, 4 << 20)):
            assert read_range(s3, bucket, "big", lo, hi) == data[lo : hi + 1]
        [listed] = s3.list_objects_v2(Bucket=bucket, Prefix="big")["Contents"]
        assert (listed["Size"], listed["ETag"]) == (size, md5_etag(data))
        assert native.get(bucket, "big") == b""
        # One manifest, data blobs (those of the replaced object wait
        # DataGrace), no upload left in progress.
        kinds = sorted(k[0] for k in internal_blobs(native, bucket))
        assert kinds.count("c") == 1 and set(kinds) == {"c", "d"}, kinds


def test_multipart(s3: Any, native: tyr.Client, bucket: str) -> None:
    # 100 MiB in 13 parts of 8 MiB (the last 4 MiB), uploaded out of order
    # from 4 threads, with a part uploaded twice; read back by ranges.
    part_size, size = 8 << 20, 100 << 20
    data = random.Random(3).randbytes(size)
    s3.put_object(Bucket=bucket, Key="mp", Body=b"before")
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp", ContentType="application/x-test", Metadata={"a": "b"})
    uid = up["UploadId"]
    [listed] = s3.list_multipart_uploads(Bucket=bucket)["Uploads"]
    assert (listed["Key"], listed["UploadId"]) == ("mp", uid)
    chunks = [data[i : i + part_size] for i in range(0, size, part_size)]
    s3.upload_part(Bucket=bucket, Key="mp", UploadId=uid, PartNumber=2, Body=b"replaced later")

    def put(n: int) -> Dict[str, Any]:
        r = s3.upload_part(Bucket=bucket, Key="mp", UploadId=uid, PartNumber=n, Body=chunks[n - 1])
        assert r["ETag"] == md5_etag(chunks[n - 1])
        return {"PartNumber": n, "ETag": r["ETag"]}

    with ThreadPoolExecutor(4) as ex:
        parts = sorted(ex.map(put, random.Random(4).sample(range(1, len(chunks) + 1), len(chunks))),
                       key=lambda p: p["PartNumber"])
    lp = s3.list_parts(Bucket=bucket, Key="mp", UploadId=uid, MaxParts=5)
    assert [p["PartNumber"] for p in lp["Parts"]] == [1, 2, 3, 4, 5] and lp["IsTruncated"]
    assert [p["Size"] for p in lp["Parts"]] == [part_size] * 5
    lp = s3.list_parts(Bucket=bucket, Key="mp", UploadId=uid, PartNumberMarker=lp["NextPartNumberMarker"])
    assert [p["PartNumber"] for p in lp["Parts"]] == list(range(6, 14)) and not lp["IsTruncated"]
    # Completions that must fail, changing nothing.
    bad = [dict(parts[0], ETag='"00000000000000000000000000000000"')] + parts[1:]
    for wrong, code in ((bad, "InvalidPart"), (parts[1:2] + parts[:1], "InvalidPartOrder"),
                        (parts + [{"PartNumber": 14, "ETag": parts[0]["ETag"]}], "InvalidPart")):
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=uid, MultipartUpload={"Parts": wrong})
        assert code_of(e.value)[0] == code
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.upload_part(Bucket=bucket, Key="mp", UploadId=uid, PartNumber=14, Body=b"x" * (MAX_PUT + 1))
    assert code_of(e.value)[0] == "EntityTooLarge"
    assert s3.get_object(Bucket=bucket, Key="mp")["Body"].read() == b"before"
    done = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=uid, MultipartUpload={"Parts": parts})
    want = '"' + hashlib.md5(b"".join(hashlib.md5(c).digest() for c in chunks)).hexdigest() + f'-{len(chunks)}"'
    assert done["ETag"] == want
    # A retried completion gets the same answer.
    again = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=uid, MultipartUpload={"Parts": parts})
    assert again["ETag"] == want
    h = s3.head_object(Bucket=bucket, Key="mp")
    assert (h["ContentLength"], h["ETag"], h["ContentType"], h["Metadata"]) == (size, want, "application/x-test", {"a": "b"})
    rng = random.Random(5)
    bounds = [(0, 99), (part_size - 50, part_size + 49), (3 * part_size, 5 * part_size + 1), (size - 100, size - 1)]
    bounds += [(lo, min(size - 1, lo + rng.randrange(1, 20 << 20))) for lo in (rng.randrange(size) for _ in range(6))]
    for lo, hi in bounds:
        assert read_range(s3, bucket, "mp", lo, hi) == data[lo : hi + 1], (lo, hi)
    assert hashlib.md5(s3.get_object(Bucket=bucket, Key="mp")["Body"].read()).digest() == hashlib.md5(data).digest()
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    # What is left: the manifest and the 13 data blobs it lists.
    left = internal_blobs(native, bucket)
    assert sorted(k[0] for k in left) == ["c"] + ["d"] * len(chunks), left
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.upload_part(Bucket=bucket, Key="mp", UploadId=uid, PartNumber=1, Body=b"late")
    assert code_of(e.value)[0] == "NoSuchUpload"


def test_multipart_abort_and_small_parts(s3: Any, native: tyr.Client, bucket: str) -> None:
    uid = s3.create_multipart_upload(Bucket=bucket, Key="ab")["UploadId"]
    parts = []
    for n, body in ((1, b"a" * 1000), (2, b"b" * 1000)):
        r = s3.upload_part(Bucket=bucket, Key="ab", UploadId=uid, PartNumber=n, Body=body)
        parts.append({"PartNumber": n, "ETag": r["ETag"]})
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key="ab", UploadId=uid, MultipartUpload={"Parts": parts})
    assert code_of(e.value)[0] == "EntityTooSmall"
    # One part of any size is a whole object.
    other = s3.create_multipart_upload(Bucket=bucket, Key="one")["UploadId"]
    r = s3.upload_part(Bucket=bucket, Key="one", UploadId=other, PartNumber=1, Body=b"tiny")
    s3.complete_multipart_upload(Bucket=bucket, Key="one", UploadId=other,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": r["ETag"]}]})
    assert s3.get_object(Bucket=bucket, Key="one")["Body"].read() == b"tiny"
    assert [u["Key"] for u in s3.list_multipart_uploads(Bucket=bucket)["Uploads"]] == ["ab"]
    s3.abort_multipart_upload(Bucket=bucket, Key="ab", UploadId=uid)
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.abort_multipart_upload(Bucket=bucket, Key="ab", UploadId=uid)
    assert code_of(e.value)[0] == "NoSuchUpload"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.head_object(Bucket=bucket, Key="ab")
    assert code_of(e.value)[1] == 404
    assert all(k.endswith(other) or other in k for k in internal_blobs(native, bucket))
    s3.delete_object(Bucket=bucket, Key="one")


def test_copies(s3: Any, bucket: str) -> None:
    data = random.Random(6).randbytes(OBJECT_BYTES_MAX + 5000)
    s3.put_object(Bucket=bucket, Key="src", Body=data, Metadata={"k": "v"})
    s3.copy_object(Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "src"})
    h = s3.head_object(Bucket=bucket, Key="dst")
    assert (h["ContentLength"], h["Metadata"]) == (len(data), {"k": "v"})
    assert s3.get_object(Bucket=bucket, Key="dst")["Body"].read() == data
    uid = s3.create_multipart_upload(Bucket=bucket, Key="pc")["UploadId"]
    half = 5 << 20  # parts but the last have at least 5 MiB
    r1 = s3.upload_part_copy(Bucket=bucket, Key="pc", UploadId=uid, PartNumber=1,
                             CopySource={"Bucket": bucket, "Key": "src"}, CopySourceRange=f"bytes=0-{half - 1}")
    r2 = s3.upload_part_copy(Bucket=bucket, Key="pc", UploadId=uid, PartNumber=2,
                             CopySource={"Bucket": bucket, "Key": "src"}, CopySourceRange=f"bytes={half}-{len(data) - 1}")
    s3.complete_multipart_upload(Bucket=bucket, Key="pc", UploadId=uid, MultipartUpload={"Parts": [
        {"PartNumber": 1, "ETag": r1["CopyPartResult"]["ETag"]}, {"PartNumber": 2, "ETag": r2["CopyPartResult"]["ETag"]}]})
    assert s3.get_object(Bucket=bucket, Key="pc")["Body"].read() == data


def test_replacement_is_atomic(s3_server: Tuple[Server, str], bucket: str) -> None:
    # Readers of an object replaced over and over see one whole version:
    # the ETag matches the bytes, and the bytes are one writer's.
    url = s3_server[1]
    # Inline and manifest objects, in turn.
    versions = [bytes([i]) * size for i, size in enumerate((6 << 20, 20 << 20, 1 << 20, 17 << 20), 1)]
    writer, reader = client_for(url), client_for(url)
    writer.put_object(Bucket=bucket, Key="swap", Body=versions[0])
    stop = threading.Event()
    problems: List[str] = []

    def write() -> None:
        i = 0
        while not stop.is_set():
            writer.put_object(Bucket=bucket, Key="swap", Body=versions[i % len(versions)])
            i += 1

    t = threading.Thread(target=write)
    t.start()
    try:
        for _ in range(25):
            g = reader.get_object(Bucket=bucket, Key="swap")
            body = g["Body"].read()
            if body not in versions or g["ETag"] != md5_etag(body):
                problems.append(f"read {len(body)} bytes starting {body[:1]!r}, ETag {g['ETag']}")
    finally:
        stop.set()
        t.join()
    assert not problems, problems[:3]


def model_list(keys: List[str], prefix: str, delim: str, start: str) -> List[Tuple[str, bool]]:
    """What S3 lists: (key or common prefix, is_prefix) in order, after start."""
    out: List[Tuple[str, bool]] = []
    seen = set()
    for k in sorted(keys):
        if not k.startswith(prefix) or k <= start:
            continue
        rest = k[len(prefix):]
        if delim and delim in rest:
            cp = prefix + rest[: rest.index(delim) + len(delim)]
            if cp not in seen and cp > start:
                seen.add(cp)
                out.append((cp, True))
            continue
        out.append((k, False))
    return out


def test_listing_10000_keys(s3_server: Tuple[Server, str], s3: Any, native: tyr.Client) -> None:
    # A keyspace without fsync per commit, made natively, used as a bucket.
    name = fresh_name("s3l")
    native.create_keyspace(name, sync=False)
    rng = random.Random(5)
    keys = sorted({f"{rng.choice(['a', 'b', 'logs', 'z'])}/{rng.choice(['x', 'y', ''])}/{rng.randrange(10**6):06d}"
                   .replace("//", "/") for _ in range(10_000)} | {f"top{i}" for i in range(50)})
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: s3.put_object(Bucket=name, Key=k, Body=k.encode()), keys))
    try:
        for prefix, delim, page in (("", "/", 7), ("logs/", "/", 333), ("a/x/", "", 1000), ("", "", 1000), ("b/", "", 999)):
            want = model_list(keys, prefix, delim, "")
            got: List[Tuple[str, bool]] = []
            token: Optional[str] = None
            while True:
                kw: Dict[str, Any] = {"Bucket": name, "Prefix": prefix, "Delimiter": delim, "MaxKeys": page}
                if token:
                    kw["ContinuationToken"] = token
                r = s3.list_objects_v2(**kw)
                entries = [(o["Key"], False) for o in r.get("Contents", [])] + \
                          [(p["Prefix"], True) for p in r.get("CommonPrefixes", [])]
                assert r["KeyCount"] == len(entries) <= page
                got.extend(sorted(entries))
                if not r["IsTruncated"]:
                    break
                token = r["NextContinuationToken"]
            assert got == want, (prefix, delim, page)
            for o in s3.list_objects_v2(Bucket=name, Prefix=prefix, MaxKeys=5).get("Contents", []):
                assert o["ETag"] == md5_etag(o["Key"].encode()) and o["Size"] == len(o["Key"])
        # V1 with markers, and V2 with start-after.
        start = keys[4321]
        r = s3.list_objects_v2(Bucket=name, StartAfter=start, MaxKeys=10)
        assert [o["Key"] for o in r["Contents"]] == [k for k in keys if k > start][:10]
        got_v1: List[str] = []
        marker = ""
        while True:
            r = s3.list_objects(Bucket=name, Prefix="z/", Marker=marker, MaxKeys=250)
            got_v1 += [o["Key"] for o in r.get("Contents", [])]
            if not r["IsTruncated"]:
                break
            marker = r["NextMarker"]
        assert got_v1 == [k for k in keys if k.startswith("z/")]
    finally:
        native.drop_keyspace(name)


# The command-line clients and s3fs, as their users run them.


def tools_env(url: str) -> Dict[str, str]:
    """The environment the aws CLI and rclone find the gateway in: no config files, no other AWS settings."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "RCLONE_"))}
    return dict(base, AWS_ACCESS_KEY_ID=ACCESS, AWS_SECRET_ACCESS_KEY=SECRET, AWS_DEFAULT_REGION="us-east-1",
                AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null", AWS_ENDPOINT_URL=url,
                RCLONE_CONFIG="/dev/null", RCLONE_CONFIG_TYR_TYPE="s3", RCLONE_CONFIG_TYR_PROVIDER="Other",
                RCLONE_CONFIG_TYR_ACCESS_KEY_ID=ACCESS, RCLONE_CONFIG_TYR_SECRET_ACCESS_KEY=SECRET,
                RCLONE_CONFIG_TYR_ENDPOINT=url, RCLONE_CONFIG_TYR_REGION="us-east-1",
                # Multipart from 8 MiB, as the aws CLI does.
                RCLONE_CONFIG_TYR_UPLOAD_CUTOFF="8M", RCLONE_CONFIG_TYR_CHUNK_SIZE="5M")


def run_tool(env: Dict[str, str], *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(list(args), env=env, capture_output=True, text=True, timeout=300)
    if ok:
        assert r.returncode == 0, f"{' '.join(args)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def make_tree(root: pathlib.Path, seed: int) -> Dict[str, bytes]:
    """A tree of small files in nested directories and one of 20 MiB (multipart for both tools)."""
    rng = random.Random(seed)
    files = {f"d{i % 3}/sub{i % 2}/f{i}.bin": rng.randbytes(rng.randrange(0, 5000)) for i in range(24)}
    files["top.txt"] = b"top\n"
    files["big/blob.bin"] = rng.randbytes(20 << 20)
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def remote_tree(s3: Any, bucket: str, prefix: str) -> Dict[str, bytes]:
    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for o in page.get("Contents", []):
            out[o["Key"][len(prefix):]] = s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
    return out


def test_aws_cli(s3_server: Tuple[Server, str], s3: Any, bucket: str, tmp_path: pathlib.Path) -> None:
    env, aws = tools_env(s3_server[1]), str(pathlib.Path(sys.executable).parent / "aws")
    src = tmp_path / "src"
    files = make_tree(src, 7)
    run_tool(env, aws, "s3", "sync", str(src), f"s3://{bucket}/tree/")
    assert remote_tree(s3, bucket, "tree/") == files
    big = s3.head_object(Bucket=bucket, Key="tree/big/blob.bin")
    assert big["ContentLength"] == 20 << 20 and big["ETag"].endswith('-3"')  # three 8 MiB parts
    ls = run_tool(env, aws, "s3", "ls", f"s3://{bucket}/tree/").stdout
    assert {line.split()[-1] for line in ls.splitlines()} == {"d0/", "d1/", "d2/", "big/", "top.txt"}, ls
    # Change, add and delete locally; sync --delete makes the bucket match.
    (src / "top.txt").write_bytes(b"changed\n")
    (src / "new.txt").write_bytes(b"new\n")
    (src / "d0/sub0/f0.bin").unlink()
    files.update({"top.txt": b"changed\n", "new.txt": b"new\n"})
    del files["d0/sub0/f0.bin"]
    run_tool(env, aws, "s3", "sync", "--delete", str(src), f"s3://{bucket}/tree/")
    assert remote_tree(s3, bucket, "tree/") == files
    dst = tmp_path / "dst"
    run_tool(env, aws, "s3", "cp", "--recursive", f"s3://{bucket}/tree/", str(dst))
    assert {str(p.relative_to(dst)): p.read_bytes() for p in dst.rglob("*") if p.is_file()} == files
    run_tool(env, aws, "s3", "cp", str(src / "big/blob.bin"), f"s3://{bucket}/copy.bin")
    run_tool(env, aws, "s3api", "put-object", "--bucket", bucket, "--key", "api.txt", "--body", str(src / "top.txt"),
             "--content-type", "text/plain")
    head = json.loads(run_tool(env, aws, "s3api", "head-object", "--bucket", bucket, "--key", "api.txt").stdout)
    assert (head["ContentLength"], head["ContentType"]) == (8, "text/plain")
    run_tool(env, aws, "s3api", "get-object", "--bucket", bucket, "--key", "copy.bin", str(tmp_path / "got.bin"))
    assert (tmp_path / "got.bin").read_bytes() == files["big/blob.bin"]
    missing = run_tool(env, aws, "s3api", "head-object", "--bucket", bucket, "--key", "nope", ok=False)
    assert missing.returncode != 0 and "404" in missing.stderr
    run_tool(env, aws, "s3", "rm", "--recursive", f"s3://{bucket}/tree/")
    assert remote_tree(s3, bucket, "tree/") == {}


def test_rclone(s3_server: Tuple[Server, str], s3: Any, bucket: str, tmp_path: pathlib.Path) -> None:
    env = tools_env(s3_server[1])
    src = tmp_path / "src"
    files = make_tree(src, 8)
    run_tool(env, "rclone", "copy", str(src), f"tyr:{bucket}/r")
    assert remote_tree(s3, bucket, "r/") == files
    run_tool(env, "rclone", "check", str(src), f"tyr:{bucket}/r")
    # A changed object, of the same size, is a difference check reports.
    s3.put_object(Bucket=bucket, Key="r/top.txt", Body=b"pot\n")
    assert run_tool(env, "rclone", "check", str(src), f"tyr:{bucket}/r", ok=False).returncode != 0
    (src / "extra.txt").write_bytes(b"extra")
    s3.put_object(Bucket=bucket, Key="r/stale.txt", Body=b"stale")
    run_tool(env, "rclone", "sync", str(src), f"tyr:{bucket}/r")
    files["extra.txt"] = b"extra"
    assert remote_tree(s3, bucket, "r/") == files
    run_tool(env, "rclone", "check", str(src), f"tyr:{bucket}/r")


def test_s3fs_pandas(s3_server: Tuple[Server, str], bucket: str) -> None:
    import pandas as pd

    opts = {"key": ACCESS, "secret": SECRET, "client_kwargs": {"endpoint_url": s3_server[1], "region_name": "us-east-1"}}
    df = pd.DataFrame({"n": range(20000), "s": [f"row {i}" for i in range(20000)], "x": [i / 7 for i in range(20000)]})
    df.to_parquet(f"s3://{bucket}/t/df.parquet", storage_options=opts)
    pd.testing.assert_frame_equal(pd.read_parquet(f"s3://{bucket}/t/df.parquet", storage_options=opts), df)
    pd.testing.assert_frame_equal(pd.read_parquet(f"s3://{bucket}/t/df.parquet", columns=["s"], storage_options=opts),
                                  df[["s"]])
    df.to_csv(f"s3://{bucket}/t/df.csv", index=False, storage_options=opts)
    pd.testing.assert_frame_equal(pd.read_csv(f"s3://{bucket}/t/df.csv", storage_options=opts), df)
    import s3fs

    fs = s3fs.S3FileSystem(**opts)
    assert sorted(fs.ls(f"{bucket}/t")) == [f"{bucket}/t/df.csv", f"{bucket}/t/df.parquet"]
