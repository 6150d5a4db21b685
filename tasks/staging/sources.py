"""Where staging reads from: a local or shared-filesystem path, or S3; each source yields a manifest (size and
sha256 of every file) and copies one file at a time through tasks.staging.transfer.

Manifests come from the source when it has one: a `.podium-manifest.json` at a folder's root (the format staging
writes), for S3 the prefix's `manifest.json` (what `tasks.storage.objects.put_manifest` writes) or each object's
`sha256` metadata (what `put_tree` sets). A local folder without one has no manifest until it is copied once: the copy
hashes every byte on the way and the result is remembered under the stage root, keyed by the source path and each
file's size, mtime and inode, so the next staging (every run on every node) skips without reading the source. This
is rsync's quick check; a file rewritten in place with its old size and mtime restored would fool it (write a
`.podium-manifest.json` into the source to rule that out).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import botocore.exceptions

from submission.base.errors import PlanError, StorageError
from submission.base.files import write_atomic
from tasks.staging.transfer import WORKERS, Copied, copy_file, copy_object
from tasks.storage import objects as storage

MANIFEST = ".podium-manifest.json"
DONE = ".podium-done.json"                 # in a partial folder: files already verified
SOURCES = ".sources"                       # under a stage root: remembered manifests of local sources
S3_MANIFESTS = (storage.MANIFEST, MANIFEST)
Manifest = dict[str, dict[str, Any]]       # relative path -> {"size": int, "sha256": str}


def manifest_digest(files: Manifest) -> str:
    """The sha256 of a manifest: what names a staged copy and vouches for a fetched one."""
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


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
        endpoint, access_key, secret_key = _embedded(self.embedded_dir)
        return storage.StorageConfig(endpoint, bucket, "", self.region, access_key, secret_key)


def _embedded(data_dir: str) -> tuple[str, str, str]:
    """The embedded server's endpoint and keys, probed once per start of the server (its server.json changes at
    every start): a probe builds a boto3 client, which costs a few hundred milliseconds."""
    from tasks.storage import s3server

    try:
        started = (Path(data_dir) / s3server.SERVER_FILE).stat().st_mtime_ns
    except OSError:
        started = 0
    return _embedded_at(data_dir, started)


@functools.lru_cache(maxsize=16)
def _embedded_at(data_dir: str, started: int) -> tuple[str, str, str]:
    from tasks.storage import s3server

    server = s3server.running(Path(data_dir))
    if server is None:
        raise StorageError(f"no embedded S3 server is running on {data_dir}",
                           fix="start it with `podium dev up`, or run the plan with `podium run`")
    return server.endpoint_url, server.credentials.access_key, server.credentials.secret_key


class LocalSource:
    """A file or a folder on a local or shared filesystem."""

    def __init__(self, path: Path, stage_root: Path | None = None) -> None:
        if not path.exists():
            raise PlanError(f"{path} does not exist", fix="build the smoke assets (make smoke-assets) or fix the path")
        self.path, self.name = path.resolve(), path.name
        self.base = self.path.parent if self.path.is_file() else self.path
        self.is_file = self.path.is_file()
        key = hashlib.sha256(str(self.path).encode()).hexdigest()[:16]
        self.memo = Path(stage_root) / SOURCES / f"{self.name}-{key}.json" if stage_root else None

    def files(self) -> list[Path]:
        if self.is_file:
            return [self.path]
        return sorted(p for p in self.path.rglob("*") if p.is_file() and p.name not in (MANIFEST, DONE))

    def stats(self) -> dict[str, list[int]]:
        out = {}
        for p in self.files():
            st = p.stat()
            out[p.relative_to(self.base).as_posix()] = [st.st_size, st.st_mtime_ns, st.st_ino]
        return out

    def manifest(self) -> Manifest | None:
        """The source's own manifest, else the one remembered from the last copy if no file changed, else None."""
        recorded = self.base / MANIFEST
        if not self.is_file and recorded.is_file():
            return json.loads(recorded.read_text())
        if self.memo is None or not self.memo.is_file():
            return None
        try:
            memo = json.loads(self.memo.read_text())
        except (OSError, ValueError):
            return None
        return memo["files"] if memo.get("stats") == self.stats() else None

    def remember(self, files: Manifest, stats: dict[str, list[int]]) -> None:
        """Keep the manifest a copy computed, with the stats the files had before it started."""
        if self.memo is None or stats != self.stats():
            return   # a file changed during the copy: remember nothing
        write_atomic(self.memo, json.dumps({"source": str(self.path), "stats": stats, "files": files}))

    def copy(self, rel: str, part: Path, meta: dict, progress: Callable[[int], None], share: int = 1) -> Copied:
        return copy_file(self.base / rel, part, size=int(meta["size"]), sha256=meta.get("sha256"),
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
        with storage.boundary(self.cfg, "listing the source", prefix):
            for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                for item in page.get("Contents", []):
                    listed[item["Key"][len(prefix):]] = item
        if not listed:
            raise StorageError(f"nothing found at {self.url}", where=self.url,
                               fix="upload the model or dataset there (tasks.storage.objects.put_tree + "
                                   "put_manifest) or fix the source in the plan")
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

    def copy(self, rel: str, part: Path, meta: dict, progress: Callable[[int], None], share: int = 1) -> Copied:
        """`share`: files copied at once; they split the client's connections (ranged GETs in flight)."""
        return copy_object(self.s3, self.bucket, self.keys[rel], part, size=int(meta["size"]),
                           sha256=str(meta["sha256"]), etag=self.etags[rel], label=f"{self.name}/{rel}",
                           progress=progress, workers=max(2, WORKERS // share))

    def _head(self, key: str) -> dict | None:
        try:
            return self.s3.head_object(Bucket=self.bucket, Key=key)
        except botocore.exceptions.ClientError as exc:
            if storage.error_code(exc) in storage.MISSING_CODES:
                return None
            raise storage.storage_error(self.cfg, "reading the source", key, exc) from exc

    def _recorded(self, prefix: str) -> Manifest | None:
        """The prefix's own manifest: Podium's upload manifest (`objects`) or a staged copy's."""
        for name in S3_MANIFESTS:
            with storage.boundary(self.cfg, "reading the source manifest", prefix + name):
                try:
                    data = json.loads(self.s3.get_object(Bucket=self.bucket, Key=prefix + name)["Body"].read())
                except self.s3.exceptions.NoSuchKey:
                    continue
            files = data.get("objects", data) if isinstance(data, dict) else None
            if not isinstance(files, dict):
                raise StorageError(f"{name} at {self.url} is not a manifest", where=f"s3://{self.bucket}/{prefix}"
                                   f"{name}", fix="rewrite it with tasks.storage.objects.put_manifest")
            return {rel: {"size": int(m["size"]), "sha256": str(m["sha256"])} for rel, m in files.items()}
        return None

    def _listed_sha(self, parent: str, rel: str) -> str | None:
        files = self._recorded("" if parent == "." else f"{parent}/") or {}
        return files.get(rel, {}).get("sha256")

    def _need(self, sha: str | None, rel: str) -> str:
        if not sha:
            raise StorageError(f"{self.url}: no sha256 is recorded for {rel!r}", where=self.url,
                               fix="upload with Podium (tasks.storage.objects.put_tree, then put_manifest), or add a "
                                   "manifest.json that lists size and sha256 of every file")
        return sha


def open_source(source: str | Path, access: S3Access | None = None,
                stage_root: Path | None = None) -> LocalSource | S3Source:
    text = str(source)
    if text.startswith("s3://"):
        return S3Source(text, access or S3Access())
    return LocalSource(Path(text), stage_root)


def source_bytes(source: str | Path, access: S3Access | None = None) -> tuple[str, int]:
    """(name, total bytes) of a source from sizes alone (no hashing): what staging it needs on disk."""
    src = open_source(source, access)
    if isinstance(src, LocalSource):
        return src.name, sum(size for size, _, _ in src.stats().values())
    return src.name, sum(int(m["size"]) for m in src.manifest().values())
