"""The sources of `podium assemble` that live in object storage: an `s3://bucket/prefix/<plan>/<run id>/` run prefix
as the publish step leaves it, or a plan name (every `<prefix>/<plan>/*/` run prefix). Each is downloaded into the
workspace (only what curation reads: the tree, results.json, compliance.json), checked against its manifest, and
read as a run folder by `submission.tree.curation`. A run prefix without a manifest (its publish did not finish) is
skipped with a warning naming it; a download whose manifest has not changed is reused.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from submission.base.errors import CurationError, StorageError
from submission.base.files import sha256_file, write_atomic
from submission.plan.model import NAME
from submission.tree import curation
from tasks.storage import objects as storage
from tasks.storage import s3server

RUN_FILES = (curation.RESULTS, curation.COMPLIANCE)
Warn = Callable[[str], None]


def config(s3_dir: Path, endpoint_url: str | None, bucket: str, prefix: str) -> storage.StorageConfig:
    """Where sources are read: `endpoint_url` (the CLI passes AWS_ENDPOINT_URL) with boto3's own credentials, else the
    workspace's embedded S3 server when it is running, else AWS."""
    server = None if endpoint_url else s3server.running(s3_dir)
    if server is None:
        return storage.StorageConfig(endpoint_url, bucket, prefix)
    return server.storage(bucket, prefix)


def _wanted(rel: str) -> bool:
    return rel in RUN_FILES or rel.startswith(f"{curation.TREE}/")


def _manifest(cfg: storage.StorageConfig, key_prefix: str) -> dict | None:
    key = storage.object_key(cfg, key_prefix, storage.MANIFEST)
    s3 = storage.client(cfg)
    with storage.boundary(cfg, "reading the manifest", key):
        try:
            return json.loads(s3.get_object(Bucket=cfg.bucket, Key=key)["Body"].read())
        except s3.exceptions.NoSuchKey:
            return None


def _verify(folder: Path, manifest: dict, label: str) -> None:
    """Every downloaded file against the manifest's sha256; a file the manifest lists and the download lacks too."""
    problems = [rel for rel, want in sorted(manifest.get("objects", {}).items()) if _wanted(rel) and (
        not (folder / rel).is_file() or sha256_file(folder / rel) != want["sha256"])]
    if problems:
        raise StorageError(f"{len(problems)} downloaded file(s) do not match the manifest, e.g. {problems[0]}",
                           where=label, fix="publish the run again, or pass its local run folder")


def fetch_run(cfg: storage.StorageConfig, key_prefix: str, dest_root: Path, warn: Warn) -> curation.Source | None:
    """One run prefix (under `cfg.prefix`) as a Source, downloaded to `dest_root/<hash>/`; None when unfinished."""
    label = f"s3://{cfg.bucket}/{storage.object_key(cfg, key_prefix)}/"
    manifest = _manifest(cfg, key_prefix)
    if manifest is None:
        warn(f"{label} skipped: it has no {storage.MANIFEST} (its publish did not finish)")
        return None
    folder = Path(dest_root) / hashlib.sha256(label.encode()).hexdigest()[:16]
    local = folder / storage.MANIFEST
    if not (local.is_file() and json.loads(local.read_text()) == manifest):
        if folder.exists():
            shutil.rmtree(folder)
        storage.get_tree(cfg, key_prefix, folder, include=_wanted)
        _verify(folder, manifest, label)
        write_atomic(local, json.dumps(manifest))   # the marker last: a reuse finds a whole download
    return curation.load_source(folder, label=label, run_id=PurePosixPath(key_prefix).name,
                                time=manifest.get("created_at"))


def run_prefixes(cfg: storage.StorageConfig, plan: str) -> list[str]:
    """Every `<plan>/<run id>` under `cfg.prefix` that holds an object."""
    base = storage.object_key(cfg, plan) + "/"
    runs = {key[len(base):].split("/", 1)[0] for key in storage.list_keys(cfg, plan) if "/" in key[len(base):]}
    return [f"{plan}/{run}" for run in sorted(runs)]


def _uri(text: str) -> tuple[str, str]:
    bucket, _, key = text.removeprefix("s3://").partition("/")
    if not bucket or not key.strip("/"):
        raise CurationError(f"{text} names no run prefix", fix="pass s3://<bucket>/<prefix>/<plan>/<run id>/")
    return bucket, key.strip("/")


def remote(text: str, cfg: storage.StorageConfig, dest_root: Path, warn: Warn) -> list[curation.Source]:
    """An s3:// run prefix or a plan name, as the Sources it holds."""
    if text.startswith("s3://"):
        bucket, key = _uri(text)
        found = fetch_run(dataclasses.replace(cfg, bucket=bucket, prefix=""), key, dest_root, warn)
        return [found] if found else []
    prefixes = run_prefixes(cfg, text)
    if not prefixes:
        raise CurationError(f"no runs of plan {text!r} under s3://{cfg.bucket}/{storage.object_key(cfg, text)}/",
                            fix="check the plan name, --bucket and --prefix, or pass a run folder")
    return [s for key in prefixes if (s := fetch_run(cfg, key, dest_root, warn))]


def gather(texts: list[str], dest_root: Path, cfg: Callable[[], storage.StorageConfig],
           warn: Warn) -> list[curation.Source]:
    """Every --from as Sources: a local run folder as it is; an s3:// URI or a plan name (a name that is no local
    path) from object storage, `cfg` called only then."""
    cfg = functools.cache(cfg)
    out: list[curation.Source] = []
    for text in texts:
        if text.startswith("s3://") or (not Path(text).exists() and NAME.fullmatch(text)):
            out += remote(text, cfg(), dest_root, warn)
        else:
            out.append(curation.load_source(Path(text)))
    return out
