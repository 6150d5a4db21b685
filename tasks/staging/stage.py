"""Staging: models and datasets from S3 or a shared filesystem to this node's local disk, verified, placed atomically.

A source (tasks.staging.sources) is a local path (a file or a folder, e.g. on NFS), `s3://bucket/key` (one object) or
`s3://bucket/prefix` (every object under it), with a manifest of each file's size and sha256.

The staged copy is content-addressed, `<stage root>/<name>-<sha12>/`, and carries the manifest; a copy whose
manifest and file sizes match is reused without reading the source. Otherwise files go into a `.partial` folder
(each through a journaled `.part` file, see tasks.staging.transfer), every byte hashed on the way and checked against
the manifest, and the folder is renamed into place only when all of them verified. An interrupted staging resumes
there; a corrupt file is refused by name. A local folder without a manifest is copied and hashed in the same
single pass, and its manifest remembered for the next time. Up to FILES_IN_FLIGHT files copy at once, largest
first, so the hash (the cost of verification) runs on several cores. One node stages one copy at a time (lock
files).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from prefect import task

from submission.base.errors import StorageError
from submission.base.files import replace_atomic, sha256_file, write_atomic
from tasks.staging.sources import (
    DONE,
    MANIFEST,
    LocalSource,
    Manifest,
    S3Access,
    S3Source,
    manifest_digest,
    open_source,
)
from tasks.staging.sources import source_bytes as source_bytes  # re-exported: the bring-up's disk check uses it
from tasks.staging.transfer import Copied
from tasks.steps import retry_transient

ProgressFn = Callable[[int, int], None]    # (bytes verified so far, total bytes)
FILES_IN_FLIGHT = max(1, min(4, os.cpu_count() or 1))   # files copied at once, each hashed on its own core
Source = LocalSource | S3Source


@dataclass(frozen=True)
class Staged:
    path: str          # the staged file or folder
    sha256: str        # of the manifest: one hash for the whole model or dataset
    files: int
    bytes: int
    reused: bool
    node: str = ""     # the host that holds this copy
    fetched: int = 0   # bytes read from the source by this staging
    resumed: int = 0   # bytes kept from an interrupted staging


def node_name() -> str:
    return socket.gethostname()


def staged_bytes(name: str, stage_root: Path) -> set[int]:
    """Total sizes of the copies of `name` already staged under `stage_root` (by their manifests)."""
    found = set()
    for manifest in Path(stage_root).glob(f"{name.split('.')[0]}-*/{MANIFEST}"):
        files = _read_json(manifest)
        found.add(sum(int(m.get("size", 0)) for m in files.values() if isinstance(m, dict)))
    return found


def stage(source: str | Path, stage_root: Path, *, access: S3Access | None = None,
          progress: ProgressFn | None = None) -> Staged:
    """Stage a file or folder (local path or s3:// URL) under `stage_root`; reuse a verified copy."""
    stage_root = Path(stage_root)
    stage_root.mkdir(parents=True, exist_ok=True)
    src = open_source(source, access, stage_root)
    files = src.manifest()
    if files is None:   # a local source seen for the first time (or changed): copy and hash in one pass
        assert isinstance(src, LocalSource)
        return _stage_unhashed(src, stage_root, progress)
    sha = manifest_digest(files)
    dest = _dest(stage_root, src, sha)
    total = sum(int(f["size"]) for f in files.values())
    with _lock(stage_root / f".{dest.name}.lock"):
        if _matches(dest, files):
            if progress:
                progress(total, total)
            return _staged(src, dest, sha, files, reused=True)
        partial = stage_root / f".{dest.name}.partial"
        fetched, resumed, _ = _fill(src, files, partial, total, progress)
        _place(partial, dest, files)
    return _staged(src, dest, sha, files, reused=False, fetched=fetched, resumed=resumed)


def verify_in_place(source: str | Path, stage_root: Path, progress: ProgressFn | None = None) -> Staged:
    """A local folder or file that is used where it is (the model on a volume the engine mounts): checked without a
    copy. With a manifest (the folder's `.podium-manifest.json`, which `podium fetch` writes after hashing every
    byte, or the one remembered for it under `stage_root`), every file it names is there at its size; without one,
    every byte is hashed once in place and the manifest remembered, so the next run reads nothing. Returns the folder
    itself and the manifest's digest (the runs' model key), as `stage` would."""
    stage_root = Path(stage_root)
    stage_root.mkdir(parents=True, exist_ok=True)
    src = open_source(source, None, stage_root)
    if not isinstance(src, LocalSource):
        raise StorageError(f"{source} is not a local path, so it cannot be used in place",
                           fix="give the model's path as the flow sees it on the volume the engine mounts")
    files = src.manifest()
    if files is None:
        stats = src.stats()
        total, done = sum(st[0] for st in stats.values()), 0
        files = {}
        for rel in sorted(stats):
            files[rel] = {"size": stats[rel][0], "sha256": sha256_file(src.base / rel)}
            done += stats[rel][0]
            if progress:
                progress(done, total)
        src.remember(files, stats)
    differ = [rel for rel, meta in sorted(files.items())
              if not (src.base / rel).is_file() or (src.base / rel).stat().st_size != int(meta["size"])]
    if differ:
        raise StorageError(f"{src.name}: {len(differ)} file(s) missing or not the size its manifest records: "
                           + ", ".join(differ[:5]) + ("..." if len(differ) > 5 else ""),
                           fix="fetch it again (`podium fetch PLAN` verifies every byte and fetches what differs)")
    total = sum(int(f["size"]) for f in files.values())
    if progress:
        progress(total, total)
    return Staged(str(src.path), manifest_digest(files), len(files), total, reused=True, node=node_name())


def _stage_unhashed(src: LocalSource, stage_root: Path, progress: ProgressFn | None) -> Staged:
    stats = src.stats()
    sizes: Manifest = {rel: {"size": st[0], "stat": st} for rel, st in stats.items()}
    total = sum(st[0] for st in stats.values())
    partial = stage_root / f".{src.memo.stem if src.memo else src.name}.partial"
    with _lock(partial.with_name(partial.name + ".lock")):
        fetched, resumed, shas = _fill(src, sizes, partial, total, progress)
        files = {rel: {"size": stats[rel][0], "sha256": shas[rel]} for rel in sorted(stats)}
        sha = manifest_digest(files)
        dest = _dest(stage_root, src, sha)
        with _lock(stage_root / f".{dest.name}.lock"):
            reused = _matches(dest, files)
            if reused:   # another staging placed the same bytes meanwhile
                shutil.rmtree(partial, ignore_errors=True)
            else:
                _place(partial, dest, files)
    src.remember(files, stats)
    return _staged(src, dest, sha, files, reused=reused, fetched=fetched, resumed=resumed)


def _dest(stage_root: Path, src: Source, sha: str) -> Path:
    return stage_root / f"{src.name.split('.')[0]}-{sha[:12]}"


def _staged(src: Source, dest: Path, sha: str, files: Manifest, **kw: Any) -> Staged:
    target = dest / src.name if src.is_file else dest
    return Staged(str(target), sha, len(files), sum(int(f["size"]) for f in files.values()), node=node_name(), **kw)


def _fill(src: Source, files: Manifest, partial: Path, total: int,
          progress: ProgressFn | None) -> tuple[int, int, dict[str, str]]:
    """Copy every file not yet verified into `partial`; return (bytes fetched, bytes kept, sha256 per file).
    A file counts as done when the done-record holds its expected sha256 (or, with no manifest, the source
    file's stat is unchanged since it was copied)."""
    partial.mkdir(parents=True, exist_ok=True)
    done = _read_json(partial / DONE)
    kept = {rel for rel, rec in done.items() if rel in files and isinstance(rec, dict)
            and rec.get("sha256") == files[rel].get("sha256", rec.get("sha256"))
            and rec.get("stat") == files[rel].get("stat")
            and (partial / rel).is_file() and (partial / rel).stat().st_size == files[rel]["size"]}
    have = sum(int(files[rel]["size"]) for rel in kept)
    need = total - have - sum(_part_size(partial / f"{rel}.part") for rel in files if rel not in kept)
    if shutil.disk_usage(partial).free < need:
        raise StorageError(f"not enough free disk under {partial.parent} for {src.name} ({need} more bytes)",
                           fix="free disk space or point the workspace's stage folder at a larger disk")
    seen = [have]
    lock = threading.Lock()

    def advance(n: int) -> None:
        with lock:
            seen[0] += n
            if progress:
                progress(seen[0], total)

    if progress:
        progress(have, total)
    todo = sorted((meta["size"], rel) for rel, meta in files.items() if rel not in kept)[::-1]   # largest first
    for _, rel in todo:
        if ".." in PurePosixPath(rel).parts or PurePosixPath(rel).is_absolute():
            raise StorageError(f"manifest entry {rel!r} would escape {partial}", where=src.name)

    def one(rel: str) -> Copied:
        final = partial / rel
        part = final.with_name(final.name + ".part")
        try:
            copied = src.copy(rel, part, files[rel], advance, share=parallel)
            replace_atomic(part, final)
            with lock:
                done[rel] = {"sha256": copied.sha256, "stat": files[rel].get("stat")}
                _write_json(partial / DONE, done)
        except OSError as exc:
            raise StorageError(f"staging {src.name}/{rel} failed: {exc}", fix="check free disk and permissions; "
                               "stage again to resume") from exc
        return copied

    # files in parallel: each hashes on its own core (hashlib and the writes release the GIL)
    parallel = max(1, min(FILES_IN_FLIGHT, len(todo)))
    pool = ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="stage")
    try:
        copies = [f.result() for f in [pool.submit(one, rel) for _, rel in todo]]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)   # a failed file stops the queue; started files finish
    fetched = sum(c.bytes_fetched for c in copies)
    resumed = have + sum(c.bytes_resumed for c in copies)
    return fetched, resumed, {rel: rec["sha256"] for rel, rec in done.items() if rel in files}


def _place(partial: Path, dest: Path, files: Manifest) -> None:
    """Write the manifest, then rename the verified folder into place (a stale copy is moved aside first)."""
    (partial / MANIFEST).write_text(json.dumps(files, indent=1, sort_keys=True))
    (partial / DONE).unlink(missing_ok=True)
    if dest.exists():
        stale = dest.with_name(f".{dest.name}.stale-{time.time_ns()}")
        dest.rename(stale)
        shutil.rmtree(stale, ignore_errors=True)
    partial.rename(dest)


def _matches(dest: Path, files: Manifest) -> bool:
    recorded = _read_json(dest / MANIFEST)
    return recorded == files and all((dest / rel).is_file() and (dest / rel).stat().st_size == meta["size"]
                                     for rel, meta in files.items())


def _part_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_json(path: Path, data: dict) -> None:
    write_atomic(path, json.dumps(data, sort_keys=True))


# ----- the Prefect task ----------------------------------------------------------------------------------------


class ProgressArtifact:
    """A Prefect progress artifact for one staging, updated at most once a second (and at 100 %)."""

    def __init__(self, description: str, every_s: float = 1.0) -> None:
        self.description, self.every_s = description, every_s
        self.artifact_id: Any = None
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        from prefect.artifacts import create_progress_artifact, update_progress_artifact

        percent = 100.0 if total == 0 else round(100.0 * done / total, 1)
        now = time.monotonic()
        if self.artifact_id is None:
            self.artifact_id = create_progress_artifact(progress=percent, description=self.description)
            self.last = now
        elif percent >= 100.0 or now - self.last >= self.every_s:
            update_progress_artifact(artifact_id=self.artifact_id, progress=percent)
            self.last = now


@task(name="stage", task_run_name="stage[{source}]", retries=2, retry_delay_seconds=5,
      retry_condition_fn=retry_transient)
def stage_task(source: str, stage_root: str, access: dict | None = None, in_place: bool = False) -> dict:
    """Stage onto this node; `access` holds S3Access fields (no secrets) for s3:// sources. `in_place`: the source
    is used where it is, verified against its manifest, nothing copied (`verify_in_place`)."""
    if in_place:
        progress = ProgressArtifact(f"verifying {source} in place on {node_name()}")
        return asdict(verify_in_place(source, Path(stage_root), progress))
    progress = ProgressArtifact(f"staging {source} to {stage_root} on {node_name()}")
    return asdict(stage(source, Path(stage_root), access=S3Access(**access) if access else None, progress=progress))
