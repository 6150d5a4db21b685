"""Staging from S3 (a real SeaweedFS on 127.0.0.1): ranged parallel download, skip, a real kill mid-transfer and
the resume after it, and the refusal of a corrupted object by name."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from submission.base.errors import StorageError
from tasks.staging.stage import S3Access, stage
from tasks.staging.transfer import ChecksumMismatch
from tasks.storage import objects as storage
from tasks.storage.s3server import S3Server

pytestmark = pytest.mark.integration

MIB = 1 << 20
BUCKET = "podium"


class SlowRelay:
    """A TCP relay on 127.0.0.1 that passes the server's answers on at `rate` bytes/s per connection: slow
    enough that a download can be killed half-way, for real."""

    def __init__(self, upstream_port: int, rate: int) -> None:
        self.upstream, self.rate = upstream_port, rate
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            self.open += [client, server]
            threading.Thread(target=self._pump, args=(client, server, None), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, self.rate), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, rate: int | None) -> None:
        try:
            while data := src.recv(64 * 1024):
                dst.sendall(data)
                if rate:
                    time.sleep(len(data) / rate)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.listener.close()
        for s in self.open:
            s.close()


@pytest.fixture(scope="module")
def cfg(s3_server: S3Server) -> storage.StorageConfig:
    config = storage.StorageConfig(s3_server.endpoint_url, BUCKET, "", "us-east-1", s3_server.credentials.access_key,
                                   s3_server.credentials.secret_key)
    storage.ensure_bucket(config)
    return config


@pytest.fixture(scope="module")
def access(s3_server: S3Server) -> S3Access:
    return S3Access(embedded_dir=str(s3_server.data_dir))


def upload(cfg: storage.StorageConfig, folder: Path, prefix: str) -> None:
    storage.put_manifest(cfg, prefix, storage.put_tree(cfg, folder, prefix))


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_model(root: Path, big_mib: int) -> Path:
    (root / "tok").mkdir(parents=True)
    (root / "config.json").write_text('{"layers": 2}')
    (root / "tok" / "tokenizer.json").write_text("{}")
    (root / "weights.bin").write_bytes(os.urandom(big_mib * MIB))
    return root


def test_stage_a_prefix_then_skip(cfg: storage.StorageConfig, access: S3Access, tmp_path: Path) -> None:
    model = make_model(tmp_path / "src" / "model-a", 20)
    upload(cfg, model, "models/model-a")
    out = stage("s3://podium/models/model-a", tmp_path / "stage", access=access)
    staged = Path(out.path)
    assert staged.name.startswith("model-a-") and out.files == 3 and out.fetched == out.bytes
    for rel in ("config.json", "tok/tokenizer.json", "weights.bin"):
        assert sha(staged / rel) == sha(model / rel)
    local = stage(model, tmp_path / "stage")   # the same bytes from a filesystem: the same content address
    assert local.reused and local.path == out.path
    again = stage("s3://podium/models/model-a", tmp_path / "stage", access=access)
    assert again.reused and again.fetched == 0
    one = stage("s3://podium/models/model-a/config.json", tmp_path / "files", access=access)
    assert Path(one.path).read_text() == '{"layers": 2}'


def test_resume_after_a_kill_mid_transfer(cfg: storage.StorageConfig, s3_server: S3Server, tmp_path: Path) -> None:
    model = make_model(tmp_path / "src" / "model-b", 48)
    upload(cfg, model, "models/model-b")
    relay = SlowRelay(int(s3_server.endpoint_url.rsplit(":", 1)[1]), rate=2 * MIB)
    stage_root = tmp_path / "stage"
    # 2 ranges of 2 MiB in flight through the relay, journaled every 4 MiB: 48 MiB take about 12 s
    code = ("import sys; from pathlib import Path; from tasks.staging import transfer; "
            "from tasks.staging.stage import S3Access, "
            "stage; transfer.CHUNK, transfer.WORKERS, transfer.JOURNAL_EVERY = 2 << 20, 2, 4 << 20; "
            "stage('s3://podium/models/model-b', Path(sys.argv[1]), access=S3Access(endpoint_url=sys.argv[2]))")
    env = {**os.environ, "AWS_ACCESS_KEY_ID": s3_server.credentials.access_key,
           "AWS_SECRET_ACCESS_KEY": s3_server.credentials.secret_key}
    child = subprocess.Popen([sys.executable, "-c", code, str(stage_root), f"http://127.0.0.1:{relay.port}"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    journal = None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and child.poll() is None:
            found = list(stage_root.glob(".model-b-*.partial/weights.bin.part.json"))
            if found and len(json.loads(found[0].read_text())["chunks"]) >= 8:   # 16 MiB on disk
                journal = found[0]
                break
            time.sleep(0.2)
        assert journal is not None, f"the download never got half-way: {child.stdout.read() if child.stdout else ''}"
        child.send_signal(signal.SIGKILL)   # an interruption for real: no cleanup runs
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        relay.close()
    on_disk = len(json.loads(journal.read_text())["chunks"]) * 2 * MIB
    assert 16 * MIB <= on_disk < 48 * MIB and not list(stage_root.glob("model-b-*"))
    from tasks.staging import transfer

    transfer.CHUNK, saved = 2 * MIB, transfer.CHUNK   # the journal's chunk size, or the copy starts over
    try:
        out = stage("s3://podium/models/model-b", stage_root, access=S3Access(embedded_dir=str(s3_server.data_dir)))
    finally:
        transfer.CHUNK = saved
    assert out.resumed >= on_disk and out.fetched == out.bytes - out.resumed
    assert sha(Path(out.path) / "weights.bin") == sha(model / "weights.bin")
    assert not journal.parent.exists()


def test_a_corrupted_object_is_refused_by_name(cfg: storage.StorageConfig, access: S3Access,
                                               tmp_path: Path) -> None:
    model = make_model(tmp_path / "src" / "model-c", 4)
    upload(cfg, model, "models/model-c")
    data = bytearray((model / "weights.bin").read_bytes())
    data[3 * MIB + 7] ^= 0x01   # one bit, same size: only the checksum can tell
    storage.client(cfg).put_object(Bucket=BUCKET, Key="models/model-c/weights.bin", Body=bytes(data))
    with pytest.raises(ChecksumMismatch) as caught:
        stage("s3://podium/models/model-c", tmp_path / "stage", access=access)
    message = str(caught.value)
    assert "model-c/weights.bin" in message and "s3://podium/models/model-c/weights.bin" in message
    assert not list((tmp_path / "stage").glob("model-c-*"))
    assert not list((tmp_path / "stage").rglob("weights.bin.part*"))


def test_an_object_without_checksum_is_refused(cfg: storage.StorageConfig, access: S3Access, tmp_path: Path) -> None:
    storage.client(cfg).put_object(Bucket=BUCKET, Key="loose/data.parquet", Body=b"PAR1 no checksum")
    with pytest.raises(StorageError) as caught:
        stage("s3://podium/loose/data.parquet", tmp_path / "stage", access=access)
    assert "no sha256 is recorded for 'data.parquet'" in str(caught.value) and "manifest.json" in str(caught.value)
    with pytest.raises(StorageError) as empty:
        stage("s3://podium/nothing-here", tmp_path / "stage", access=access)
    assert "nothing found at s3://podium/nothing-here" in str(empty.value)
