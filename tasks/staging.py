"""Staging: models and datasets from a shared store to local disk, verified by checksum, placed atomically.

A staged copy is content-addressed (`<stage>/<name>-<sha12>/`) and carries `.podium-manifest.json` (size and
sha256 of every file); a copy whose manifest matches is reused. Each file's sha256 is computed while it is copied,
so verification needs no second pass; a mismatch, a missing source or a full disk leaves nothing half-written.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from prefect import task

from submission.errors import PlanError, StorageError
from tasks.checksums import BLOCK, sha256_file

MANIFEST = ".podium-manifest.json"


@dataclass(frozen=True)
class Staged:
    path: str          # the staged file or folder
    sha256: str        # of the manifest: one hash for the whole model or dataset
    files: int
    bytes: int
    reused: bool


def _files(source: Path) -> list[Path]:
    return [source] if source.is_file() else sorted(p for p in source.rglob("*") if p.is_file() and p.name != MANIFEST)


def manifest(source: Path) -> dict[str, dict[str, int | str]]:
    base = source.parent if source.is_file() else source
    return {str(p.relative_to(base)): {"size": p.stat().st_size, "sha256": sha256_file(p)} for p in _files(source)}


def _copy_verified(src: Path, dst: Path, expected: str) -> None:
    digest = hashlib.sha256()
    dst.parent.mkdir(parents=True, exist_ok=True)
    with src.open("rb") as fin, dst.open("wb") as fout:
        for block in iter(lambda: fin.read(BLOCK), b""):
            digest.update(block)
            fout.write(block)
    if digest.hexdigest() != expected:
        raise StorageError(f"checksum mismatch while staging {src}: expected {expected}, read {digest.hexdigest()}",
                           fix="the source changed or is corrupt; restore it and stage again")


def stage(source: Path, stage_root: Path) -> Staged:
    """Stage a file or folder under `stage_root`; reuse a verified copy."""
    if not source.exists():
        raise PlanError(f"{source} does not exist", fix="build the smoke assets (make smoke-assets) or fix the path")
    files = manifest(source)
    sha = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
    dest = stage_root / f"{source.name.split('.')[0]}-{sha[:12]}"
    target = dest / source.name if source.is_file() else dest
    size = sum(int(f["size"]) for f in files.values())
    recorded = dest / MANIFEST
    if recorded.is_file() and json.loads(recorded.read_text()) == files:
        return Staged(str(target), sha, len(files), size, reused=True)
    stage_root.mkdir(parents=True, exist_ok=True)
    if shutil.disk_usage(stage_root).free < size:
        raise StorageError(f"not enough free disk under {stage_root} for {source} ({size} bytes)",
                           fix="free disk space or point the workspace at a larger disk")
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=stage_root))
    try:
        base = source.parent if source.is_file() else source
        for rel, meta in files.items():
            _copy_verified(base / rel, tmp / rel, str(meta["sha256"]))
        (tmp / MANIFEST).write_text(json.dumps(files, indent=1, sort_keys=True))
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    except OSError as e:
        raise StorageError(f"staging {source} failed: {e}", fix="check free disk and permissions") from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return Staged(str(target), sha, len(files), size, reused=False)


@task(name="stage", task_run_name="stage[{source}]", retries=2, retry_delay_seconds=5)
def stage_task(source: str, stage_root: str) -> dict:
    return asdict(stage(Path(source), Path(stage_root)))
