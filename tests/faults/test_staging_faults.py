"""Staging faults on the real smoke model: a corrupted file on the shared store, and a disk that fills up.

The corrupted file is refused by checksum through the real CLI (`podium stage`), naming the file. The full disk is a
small tmpfs this test mounts (we are root) and fills for real in the middle of the copy of the weights: staging fails
with a StorageError naming the file and the fix, nothing is placed under the model's staged name, and once space is
freed the same staging resumes and completes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from submission.base.errors import StorageError
from tasks.staging import transfer
from tasks.staging.sources import MANIFEST
from tasks.staging.stage import stage

pytestmark = [pytest.mark.integration, pytest.mark.faults]

REPO = Path(__file__).parents[2]
WEIGHTS = "model.safetensors"


def _with_manifest(store: Path, dest: Path) -> Path:
    """A copy of the smoke model on the 'shared store', with the manifest its publisher wrote beside it."""
    shutil.copytree(store / "models" / "tiny-llama", dest)
    files = {p.name: {"size": p.stat().st_size, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
             for p in sorted(dest.iterdir())}
    (dest / MANIFEST).write_text(json.dumps(files))
    return dest


def test_a_corrupted_model_file_is_refused_by_name(smoke_store: Path, tmp_path: Path) -> None:
    model = _with_manifest(smoke_store, tmp_path / "shared" / "tiny-llama")
    with (model / WEIGHTS).open("r+b") as f:   # one flipped byte in the middle of the weights
        f.seek(800_000)
        byte = f.read(1)
        f.seek(800_000)
        f.write(bytes([byte[0] ^ 0xFF]))
    result = subprocess.run([sys.executable, "-c", "from flows.cli import main; main()", "stage", str(model),
                             "--to", str(tmp_path / "stage"), "--workspace", str(tmp_path / "ws")],
                            capture_output=True, text=True, cwd=REPO, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == StorageError.exit_code, result.stderr
    assert f"tiny-llama/{WEIGHTS}: sha256" in result.stderr and "does not match the manifest" in result.stderr
    assert "fix: the source is corrupt" in result.stderr and "Traceback" not in result.stderr
    assert not list((tmp_path / "stage").glob("tiny-llama-*"))          # nothing placed under the model's name
    assert not list((tmp_path / "stage").rglob(f"{WEIGHTS}*"))          # and no bad copy kept anywhere


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs, unmounted at the end."""
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def test_a_disk_that_fills_during_staging(smoke_store: Path, small_disk: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    model = _with_manifest(smoke_store, tmp_path / "shared" / "tiny-llama")
    size = (model / WEIGHTS).stat().st_size
    monkeypatch.setattr(transfer, "CHUNK", 64 * 1024)   # many writes per file, so the disk fills mid-file
    filler = small_disk / "other-job.bin"
    filled: list[int] = []

    def fill_disk(done: int, total: int) -> None:   # another job takes the rest of the disk, mid-way through
        if not filled and done > total // 3:
            with filler.open("wb") as f:
                try:
                    while True:
                        f.write(b"\0" * 65536)
                        f.flush()
                except OSError:
                    pass
            filled.append(done)

    stage_root = small_disk / "stage"
    with pytest.raises(StorageError) as caught:
        stage(model, stage_root, progress=fill_disk)
    assert filled, "the disk was never filled: the fault did not happen"
    message = str(caught.value)
    assert f"tiny-llama/{WEIGHTS}" in message and "No space left on device" in message, message
    assert "fix: check free disk" in message
    assert not list(stage_root.glob("tiny-llama-*"))     # no half-written model where a model is expected
    partial = stage_root / ".tiny-llama.partial"
    assert not (partial / WEIGHTS).exists()              # only the journaled .part, to resume from

    filler.unlink()                                      # space again: the same staging resumes and completes
    staged = stage(model, stage_root)
    assert hashlib.sha256((Path(staged.path) / WEIGHTS).read_bytes()).digest() == \
        hashlib.sha256((model / WEIGHTS).read_bytes()).digest()
    assert staged.bytes >= size and not partial.exists()


def test_a_disk_too_small_is_refused_before_copying(smoke_store: Path, small_disk: Path, tmp_path: Path) -> None:
    model = _with_manifest(smoke_store, tmp_path / "shared" / "tiny-llama")
    (small_disk / "other-job.bin").write_bytes(b"\0" * (3 * 1024 * 1024))   # 1 MiB left for a 1.7 MB model
    with pytest.raises(StorageError) as caught:
        stage(model, small_disk / "stage")
    assert "not enough free disk" in str(caught.value) and "tiny-llama" in str(caught.value)
    assert not list((small_disk / "stage").glob("tiny-llama-*"))


def _node_copy(src: Path, dest: Path, *, disk_usage_says_free: bool) -> dict:
    """The per-node copy of engine.slurm.local_stage (tasks/launchers/slurm_stage.py), run as its Slurm step runs it;
    `disk_usage_says_free`: the free-space check is told the disk is large, so the copy itself meets the full disk."""
    from tasks.launchers.slurm_stage import NODE_COPY

    lie = ("import shutil; shutil.disk_usage = lambda p: shutil._ntuple_diskusage(1 << 40, 0, 1 << 40)\n"
           if disk_usage_says_free else "")
    run = subprocess.run([sys.executable, "-c", lie + NODE_COPY, str(src), str(dest)], capture_output=True,
                         text=True, timeout=60)
    return {"rc": run.returncode, **json.loads(run.stdout.splitlines()[-1])}


def test_a_node_disk_too_small_for_the_local_copy(smoke_store: Path, small_disk: Path, tmp_path: Path) -> None:
    """engine.slurm.local_stage on a node whose disk is too small: refused before a byte is copied, and a disk that
    fills during the copy fails the same way (`disk_full`, whose fix names the field) leaving no partial file; with
    room again the copy completes."""
    from tasks.launchers.slurm_stage import FIXES

    src = _with_manifest(smoke_store, tmp_path / "shared" / "tiny")
    (src / "filler.bin").write_bytes(os.urandom(5 << 20))   # more than the 4 MiB disk
    files = json.loads((src / MANIFEST).read_text())
    files["filler.bin"] = {"size": 5 << 20, "sha256": hashlib.sha256((src / "filler.bin").read_bytes()).hexdigest()}
    (src / MANIFEST).write_text(json.dumps(files))
    dest = small_disk / "tiny"

    early = _node_copy(src, dest, disk_usage_says_free=False)
    assert (early["rc"], early["error"]) == (3, "disk_full") and "the copy needs" in early["message"]
    assert [p.name for p in dest.iterdir()] == []
    during = _node_copy(src, dest, disk_usage_says_free=True)
    assert (during["rc"], during["error"]) == (3, "disk_full") and "No space left on device" in during["message"]
    assert not list(dest.rglob("*.part"))
    assert "engine.slurm.local_stage" in FIXES["disk_full"]

    (src / "filler.bin").unlink()
    del files["filler.bin"]
    (src / MANIFEST).write_text(json.dumps(files))
    done = _node_copy(src, dest, disk_usage_says_free=False)
    assert done["rc"] == 0 and done["copied_files"] == len(files)
    assert all(hashlib.sha256((dest / rel).read_bytes()).hexdigest() == meta["sha256"] for rel, meta in files.items())
