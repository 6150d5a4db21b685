"""Staging: models and datasets from S3 or a shared filesystem to this node's local disk, verified, placed atomically.

A source is a local path (a file or a folder, e.g. on NFS) or `s3://bucket/key` (one object) or `s3://bucket/prefix`
(every object under it). Its manifest lists each file's size and sha256: a `.podium-manifest.json` at a folder's
root (the format this module writes) or, for S3, the prefix's `manifest.json` (what `tasks.storage.put_manifest`
writes) or each object's `sha256` metadata (what `put_tree` sets). A local folder without a manifest is hashed once.

The staged copy is content-addressed, `<stage root>/<name>-<sha12>/`, and carries the manifest; a copy whose
manifest and file sizes match is reused without reading the source. Otherwise files go into
`.<name>-<sha12>.partial/` (each through a journaled `.part` file, see tasks.transfer), every byte hashed on the
way, and the folder is renamed into place only when all of them verified. An interrupted staging resumes there;
a corrupt file is refused by name. One node stages one copy at a time (a lock file per copy).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from prefect import task

from submission.errors import PlanError, StorageError
from tasks import storage
from tasks.checksums import sha256_file
from tasks.transfer import ChecksumMismatch, Copied, copy_file, copy_object

MANIFEST = ".podium-manifest.json"
DONE = ".podium-done.json"                 # in a partial folder: files already verified
S3_MANIFESTS = (storage.MANIFEST, MANIFEST)
Manifest = dict[str, dict[str, Any]]       # relative path -> {"size": int, "sha256": str}
ProgressFn = Callable[[int, int], None]    # (bytes verified so far, total bytes)


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


@dataclass(frozen=True)
class S3Access:
    """How to reach S3 sources, without secrets: keys come from the embedded server's own file or boto3's chain."""

    endpoint_url: str | None = None
    region: str = "us-east-1"
    embedded_dir: str | None = None   # the embedded SeaweedFS data folder: its endpoint and keys are used

    @classmethod
    def for_plan(cls, spec: Any, s3_dir: Path) -> S3Access:
        """From a plan's `storage` section: the embedded server on `s3_dir`, or the endpoint it names."""
        if spec.embedded:
            return cls(region=spec.region, embedded_dir=str(Path(s3_dir).resolve()))
        return cls(endpoint_url=spec.endpoint_url, region=spec.region)

    def config(self, bucket: str) -> storage.StorageConfig:
        if self.embedded_dir is None:
            return storage.StorageConfig(self.endpoint_url, bucket, "", self.region)
        from tasks import s3server

        server = s3server.running(Path(self.embedded_dir))
        if server is None:
            raise StorageError(f"no embedded S3 server is running on {self.embedded_dir}", where=bucket,
                               fix="start it with `podium dev up`, or run the plan with `podium run`")
        return storage.StorageConfig(server.endpoint_url, bucket, "", self.region, server.credentials.access_key,
                                     server.credentials.secret_key)


def node_name() -> str:
    return socket.gethostname()


def manifest_digest(files: Manifest) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


# ----- sources -------------------------------------------------------------------------------------------------


class LocalSource:
    def __init__(self, path: Path) -> None:
        if not path.exists():
            raise PlanError(f"{path} does not exist", fix="build the smoke assets (make smoke-assets) or fix the path")
        self.path, self.name = path, path.name
        self.base = path.parent if path.is_file() else path
        self.is_file = path.is_file()

    def manifest(self) -> Manifest:
        recorded = self.base / MANIFEST
        if not self.is_file and recorded.is_file():
            return json.loads(recorded.read_text())
        files = [self.path] if self.is_file else sorted(
            p for p in self.path.rglob("*") if p.is_file() and p.name not in (MANIFEST, DONE))
        return {p.relative_to(self.base).as_posix(): {"size": p.stat().st_size, "sha256": sha256_file(p)}
                for p in files}

    def copy(self, rel: str, part: Path, meta: dict, progress: Callable[[int], None]) -> Copied:
        return copy_file(self.base / rel, part, size=int(meta["size"]), sha256=str(meta["sha256"]),
                         label=f"{self.name}/{rel}", progress=progress)


class S3Source:
    def __init__(self, url: str, access: S3Access) -> None:
        bucket, _, key = url.removeprefix("s3://").partition("/")
        if not bucket:
            raise PlanError(f"{url!r} names no bucket", fix="write sources as s3://bucket/prefix")
        self.url, self.bucket, self.key = url, bucket, key.strip("/")
        self.cfg = access.config(bucket)
        self.s3 = storage.client(self.cfg)
        self.name = PurePosixPath(self.key).name or bucket
        self.etags: dict[str, str] = {}
        self.keys: dict[str, str] = {}
        self.is_file = False

    def manifest(self) -> Manifest:
        head = self._head(self.key) if self.key and not self.url.endswith("/") else None
        if head is not None:   # one object
            self.is_file = True
            rel = self.name
            self.keys, self.etags = {rel: self.key}, {rel: head["ETag"]}
            sha = head.get("Metadata", {}).get("sha256") or self._listed_sha(str(PurePosixPath(self.key).parent), rel)
            return {rel: {"size": head["ContentLength"], "sha256": self._need(sha, rel)}}
        self.is_file = False
        prefix = f"{self.key}/" if self.key else ""
        listed = {}
        with storage._boundary(self.cfg, "listing the source", prefix):
            for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                for item in page.get("Contents", []):
                    listed[item["Key"][len(prefix):]] = item
        if not listed:
            raise StorageError(f"nothing found at {self.url}", where=self.url,
                               fix="upload the model or dataset there (tasks.storage.put_tree + put_manifest) or fix "
                                   "the source in the plan")
        files = self._recorded(prefix) or {
            rel: {"size": item["Size"], "sha256": self._need((self._head(item["Key"]) or {}).get(
                "Metadata", {}).get("sha256"), rel)} for rel, item in listed.items() if rel not in S3_MANIFESTS}
        missing = [rel for rel, meta in files.items() if rel not in listed or listed[rel]["Size"] != meta["size"]]
        if missing:
            raise StorageError(f"{len(missing)} file(s) of the manifest are missing or have another size at "
                               f"{self.url}: {', '.join(sorted(missing)[:5])}", where=self.url,
                               fix="upload the missing files again, or the manifest that matches them")
        self.keys = {rel: prefix + rel for rel in files}
        self.etags = {rel: listed[rel]["ETag"] for rel in files}
        return files

    def copy(self, rel: str, part: Path, meta: dict, progress: Callable[[int], None]) -> Copied:
        return copy_object(self.s3, self.bucket, self.keys[rel], part, size=int(meta["size"]),
                           sha256=str(meta["sha256"]), etag=self.etags[rel], label=f"{self.name}/{rel}",
                           progress=progress)

    def _head(self, key: str) -> dict | None:
        import botocore.exceptions

        try:
            return self.s3.head_object(Bucket=self.bucket, Key=key)
        except botocore.exceptions.ClientError as exc:
            if storage._code(exc) in storage.MISSING_CODES:
                return None
            raise storage._error(self.cfg, "reading the source", key, exc) from exc

    def _recorded(self, prefix: str) -> Manifest | None:
        """The prefix's own manifest: Podium's upload manifest (`objects`) or a staged copy's."""
        for name in S3_MANIFESTS:
            with storage._boundary(self.cfg, "reading the source manifest", prefix + name):
                try:
                    data = json.loads(self.s3.get_object(Bucket=self.bucket, Key=prefix + name)["Body"].read())
                except self.s3.exceptions.NoSuchKey:
                    continue
            files = data.get("objects", data) if isinstance(data, dict) else None
            if not isinstance(files, dict):
                raise StorageError(f"{name} at {self.url} is not a manifest", where=f"s3://{self.bucket}/{prefix}"
                                   f"{name}", fix="rewrite it with tasks.storage.put_manifest")
            return {rel: {"size": int(m["size"]), "sha256": str(m["sha256"])} for rel, m in files.items()}
        return None

    def _listed_sha(self, parent: str, rel: str) -> str | None:
        files = self._recorded("" if parent == "." else f"{parent}/") or {}
        return files.get(rel, {}).get("sha256")

    def _need(self, sha: str | None, rel: str) -> str:
        if not sha:
            raise StorageError(f"{self.url}: no sha256 is recorded for {rel!r}", where=self.url,
                               fix="upload with Podium (tasks.storage.put_tree, then put_manifest), or add a "
                                   "manifest.json that lists size and sha256 of every file")
        return sha


def open_source(source: str | Path, access: S3Access | None = None) -> LocalSource | S3Source:
    text = str(source)
    if text.startswith("s3://"):
        return S3Source(text, access or S3Access())
    return LocalSource(Path(text))


def source_bytes(source: str | Path, access: S3Access | None = None) -> tuple[str, int]:
    """(name, total bytes) of a source from sizes alone (no hashing): what staging it needs on disk."""
    text = str(source)
    if not text.startswith("s3://"):
        path = Path(text)
        if not path.exists():
            raise PlanError(f"{path} does not exist", fix="fix the path in the plan")
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        return path.name, sum(p.stat().st_size for p in files if p.name not in (MANIFEST, DONE))
    src = S3Source(text, access or S3Access())
    return src.name, sum(int(m["size"]) for m in src.manifest().values())


def staged_bytes(name: str, stage_root: Path) -> set[int]:
    """Total sizes of the copies of `name` already staged under `stage_root` (by their manifests)."""
    found = set()
    for manifest in Path(stage_root).glob(f"{name.split('.')[0]}-*/{MANIFEST}"):
        files = _read_json(manifest)
        found.add(sum(int(m.get("size", 0)) for m in files.values() if isinstance(m, dict)))
    return found


# ----- staging -------------------------------------------------------------------------------------------------


def stage(source: str | Path, stage_root: Path, *, access: S3Access | None = None,
          progress: ProgressFn | None = None) -> Staged:
    """Stage a file or folder (local path or s3:// URL) under `stage_root`; reuse a verified copy."""
    src = open_source(source, access)
    files = src.manifest()
    sha = manifest_digest(files)
    stage_root = Path(stage_root)
    dest = stage_root / f"{src.name.split('.')[0]}-{sha[:12]}"
    target = dest / src.name if src.is_file else dest
    total = sum(int(f["size"]) for f in files.values())
    stage_root.mkdir(parents=True, exist_ok=True)
    with _lock(stage_root / f".{dest.name}.lock"):
        if _matches(dest, files):
            if progress:
                progress(total, total)
            return Staged(str(target), sha, len(files), total, reused=True, node=node_name())
        partial = stage_root / f".{dest.name}.partial"
        fetched, resumed = _fill(src, files, partial, total, progress)
        (partial / MANIFEST).write_text(json.dumps(files, indent=1, sort_keys=True))
        (partial / DONE).unlink(missing_ok=True)
        _replace(partial, dest)
    return Staged(str(target), sha, len(files), total, reused=False, node=node_name(), fetched=fetched,
                  resumed=resumed)


def _fill(src: LocalSource | S3Source, files: Manifest, partial: Path, total: int,
          progress: ProgressFn | None) -> tuple[int, int]:
    """Copy every file not yet verified into `partial`; return (bytes fetched, bytes kept from earlier)."""
    partial.mkdir(parents=True, exist_ok=True)
    done = _read_json(partial / DONE)
    kept = {rel for rel, sha in done.items() if files.get(rel, {}).get("sha256") == sha
            and (partial / rel).is_file() and (partial / rel).stat().st_size == files[rel]["size"]}
    have = sum(int(files[rel]["size"]) for rel in kept)
    need = total - have - sum(_part_size(partial / f"{rel}.part") for rel in files if rel not in kept)
    if shutil.disk_usage(partial).free < need:
        raise StorageError(f"not enough free disk under {partial.parent} for {src.name} ({need} more bytes)",
                           fix="free disk space or point the workspace's stage folder at a larger disk")
    seen = [have]

    def advance(n: int) -> None:
        seen[0] += n
        if progress:
            progress(seen[0], total)

    if progress:
        progress(have, total)
    fetched, resumed = 0, have
    for rel, meta in sorted(files.items()):
        if rel in kept:
            continue
        final = partial / rel
        if ".." in PurePosixPath(rel).parts or PurePosixPath(rel).is_absolute():
            raise StorageError(f"manifest entry {rel!r} would escape {partial}", where=src.name)
        part = final.with_name(final.name + ".part")
        try:
            copied = src.copy(rel, part, meta, advance)
        except OSError as exc:
            raise StorageError(f"staging {src.name}/{rel} failed: {exc}", fix="check free disk and permissions; "
                               "stage again to resume") from exc
        os.replace(part, final)
        done[rel] = meta["sha256"]
        _write_json(partial / DONE, done)
        fetched, resumed = fetched + copied.bytes_fetched, resumed + copied.bytes_resumed
    return fetched, resumed


def _matches(dest: Path, files: Manifest) -> bool:
    recorded = _read_json(dest / MANIFEST)
    return recorded == files and all((dest / rel).is_file() and (dest / rel).stat().st_size == meta["size"]
                                     for rel, meta in files.items())


def _replace(partial: Path, dest: Path) -> None:
    """Rename the verified folder into place; a stale copy at `dest` is moved aside first, then removed."""
    if dest.exists():
        stale = dest.with_name(f".{dest.name}.stale-{time.time_ns()}")
        dest.rename(stale)
        shutil.rmtree(stale, ignore_errors=True)
    partial.rename(dest)


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
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    os.replace(tmp, path)


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


def _retry_unless_corrupt(task: Any, task_run: Any, state: Any) -> bool:
    """Retry a cut connection (the retry resumes); never a corrupt source or a bad path."""
    try:
        state.result()
    except (ChecksumMismatch, PlanError):
        return False
    except Exception:
        return True
    return False


@task(name="stage", task_run_name="stage[{source}]", retries=2, retry_delay_seconds=5,
      retry_condition_fn=_retry_unless_corrupt)
def stage_task(source: str, stage_root: str, access: dict | None = None) -> dict:
    """Stage onto this node; `access` holds S3Access fields (no secrets) for s3:// sources."""
    progress = ProgressArtifact(f"staging {source} to {stage_root} on {node_name()}")
    return asdict(stage(source, Path(stage_root), access=S3Access(**access) if access else None, progress=progress))

