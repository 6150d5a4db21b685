"""Object storage through boto3 (the S3 API: SeaweedFS locally, AWS or any S3 service elsewhere).

Naming: a `key_prefix` argument is relative to `cfg.prefix`; a `key` (returned by `put_manifest`, `list_keys`,
taken by `presign`) is the full object key in the bucket. Every botocore/boto3 failure leaves this module as a
`StorageError` that names the action, the bucket/key, the endpoint and the fix; secrets never appear in it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

import boto3
import boto3.exceptions
import botocore.exceptions
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

from submission.base.errors import StorageError
from submission.base.files import replace_atomic, sha256_file
from submission.plan.model import LINK_EXPIRY_S, MAX_LINK_EXPIRY_S

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
MIB = 1024 * 1024
TRANSFER = TransferConfig(multipart_threshold=8 * MIB, multipart_chunksize=8 * MIB, max_concurrency=4)
MAX_PRESIGN_S = MAX_LINK_EXPIRY_S  # SigV4 presigned URLs live at most 7 days
MAX_TAGS = 10  # S3 allows 10 tags per object
COPY_MIN_BYTES = 1 * MIB   # a repeated file this large is copied inside the store, not sent again
CONNECTION_ERRORS = (botocore.exceptions.EndpointConnectionError, botocore.exceptions.ConnectTimeoutError,
                     botocore.exceptions.ReadTimeoutError, botocore.exceptions.ConnectionClosedError)
AUTH_CODES = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403", "Forbidden"}
MISSING_CODES = {"NoSuchKey", "404", "NotFound"}


@dataclass(frozen=True)
class StorageConfig:
    endpoint_url: str | None  # None: AWS for `region`
    bucket: str
    prefix: str = ""
    region: str = "us-east-1"
    access_key: str | None = None  # None: boto3's default chain (env, profile, instance role)
    secret_key: str | None = None

    def __repr__(self) -> str:
        return (f"StorageConfig(endpoint_url={self.endpoint_url!r}, bucket={self.bucket!r}, prefix={self.prefix!r}, "
                f"region={self.region!r}, access_key={self.access_key!r}, secret_key='***')")


@functools.lru_cache(maxsize=32)
def client(cfg: StorageConfig, *, max_attempts: int = 5) -> Any:
    """A boto3 S3 client: path-style, SigV4, bounded timeouts, standard retries."""
    config = Config(signature_version="s3v4", s3={"addressing_style": "path"}, connect_timeout=5, read_timeout=60,
                    retries={"mode": "standard", "max_attempts": max_attempts})
    return boto3.session.Session().client("s3", endpoint_url=cfg.endpoint_url, region_name=cfg.region,
                                          aws_access_key_id=cfg.access_key, aws_secret_access_key=cfg.secret_key,
                                          config=config)


def object_key(cfg: StorageConfig, *parts: str) -> str:
    """`cfg.prefix/part/...` without empty segments or doubled slashes."""
    return "/".join(p.strip("/") for p in (cfg.prefix, *parts) if p.strip("/"))


def check_reachable(cfg: StorageConfig) -> bool:
    """Raise StorageError unless the endpoint answers and accepts the credentials; True when the bucket exists."""
    try:
        client(cfg, max_attempts=2).head_bucket(Bucket=cfg.bucket)
    except botocore.exceptions.ClientError as exc:
        if error_code(exc) in MISSING_CODES | {"NoSuchBucket"}:
            return False
        raise storage_error(cfg, "reaching the bucket", None, exc) from exc
    except (botocore.exceptions.BotoCoreError, boto3.exceptions.Boto3Error) as exc:
        raise storage_error(cfg, "reaching the bucket", None, exc) from exc
    return True


def ensure_bucket(cfg: StorageConfig) -> None:
    with boundary(cfg, "creating the bucket"):
        if check_reachable(cfg):
            return
        args: dict[str, Any] = {"Bucket": cfg.bucket}
        if cfg.endpoint_url is None and cfg.region != "us-east-1":  # AWS wants the region spelled out elsewhere
            args["CreateBucketConfiguration"] = {"LocationConstraint": cfg.region}
        with contextlib.suppress(client(cfg).exceptions.BucketAlreadyOwnedByYou):
            client(cfg).create_bucket(**args)


def put_tree(cfg: StorageConfig, local_root: Path, key_prefix: str, *, tags: dict[str, str] | None = None) -> dict:
    """Upload every file under `local_root` with tags and its sha256 in metadata; return the manifest. A file whose
    bytes were already uploaded from this tree (a run folder holds each audit's accuracy log three times: the run's,
    its TESTxx layout's and the truncation's backup; 1.65 GB of a full-size rehearsal's folder, 0.66 GB distinct)
    is copied inside the store from the first object instead of sent again."""
    if not Path(local_root).is_dir():
        raise StorageError(f"{local_root} is not a directory; nothing to upload", fix="pass the folder to upload")
    tagging = _tagging(tags or {})
    objects: dict[str, dict[str, Any]] = {}
    sent: dict[str, str] = {}   # sha256 -> the key holding those bytes
    for path in sorted(p for p in Path(local_root).rglob("*") if p.is_file()):
        rel = path.relative_to(local_root).as_posix()
        key = object_key(cfg, key_prefix, rel)
        digest = sha256_file(path)
        extra = {"Metadata": {"sha256": digest}, **({"Tagging": tagging} if tagging else {})}
        if digest in sent and path.stat().st_size >= COPY_MIN_BYTES:
            with boundary(cfg, f"copying {sent[digest]} (the same bytes as {path})", key):
                client(cfg).copy({"Bucket": cfg.bucket, "Key": sent[digest]}, cfg.bucket, key,
                                 ExtraArgs={**extra, "MetadataDirective": "REPLACE",
                                            **({"TaggingDirective": "REPLACE"} if tagging else {})}, Config=TRANSFER)
        else:
            with boundary(cfg, f"uploading {path}", key):
                client(cfg).upload_file(str(path), cfg.bucket, key, ExtraArgs=extra, Config=TRANSFER)
            sent.setdefault(digest, key)
        objects[rel] = {"sha256": digest, "size": path.stat().st_size}
    log.info("uploaded %d objects to s3://%s/%s (%d copied inside the store)", len(objects), cfg.bucket,
             object_key(cfg, key_prefix), len(objects) - len(sent))
    return {"objects": objects, "bucket": cfg.bucket, "key_prefix": object_key(cfg, key_prefix),
            "tags": dict(tags or {}), "created_at": datetime.now(UTC).isoformat()}


def put_manifest(cfg: StorageConfig, key_prefix: str, manifest: dict) -> str:
    """Write `manifest.json` under the prefix; call it after the objects it lists (the record before the marker)."""
    key = object_key(cfg, key_prefix, MANIFEST)
    body = json.dumps(manifest, indent=2, sort_keys=True).encode()
    with boundary(cfg, "writing the manifest", key):
        client(cfg).put_object(Bucket=cfg.bucket, Key=key, Body=body, ContentType="application/json",
                               Metadata={"sha256": hashlib.sha256(body).hexdigest()})
    return key


def verify_manifest(cfg: StorageConfig, key_prefix: str) -> list[str]:
    """Problems found (empty when good): each object must exist with its recorded size and sha256 metadata."""
    key = object_key(cfg, key_prefix, MANIFEST)
    s3 = client(cfg)
    with boundary(cfg, "reading the manifest", key):
        try:
            manifest = json.loads(s3.get_object(Bucket=cfg.bucket, Key=key)["Body"].read())
        except s3.exceptions.NoSuchKey:
            return [f"{key}: manifest missing"]
    problems = []
    for rel, want in sorted(manifest.get("objects", {}).items()):
        obj_key = object_key(cfg, key_prefix, rel)
        with boundary(cfg, "checking an object", obj_key):
            try:
                head = s3.head_object(Bucket=cfg.bucket, Key=obj_key)
            except botocore.exceptions.ClientError as exc:
                if error_code(exc) not in MISSING_CODES:
                    raise
                problems.append(f"{obj_key}: missing")
                continue
        if head["ContentLength"] != want["size"]:
            problems.append(f"{obj_key}: size {head['ContentLength']}, manifest says {want['size']}")
        if head.get("Metadata", {}).get("sha256") != want["sha256"]:
            problems.append(f"{obj_key}: sha256 metadata {head.get('Metadata', {}).get('sha256')!r}, "
                            f"manifest says {want['sha256']!r}")
    return problems


def presign(cfg: StorageConfig, key: str, expires_s: int = LINK_EXPIRY_S) -> str:
    """A presigned GET URL for the full object `key`, valid `expires_s` (SigV4 caps it at 7 days). The URL carries
    the access key id (X-Amz-Credential) and a signature: anyone holding it can read the object until it expires,
    so it belongs in no artifact or report (`tasks.storage.links` mints them on demand for `podium link`)."""
    if not 0 < expires_s <= MAX_PRESIGN_S:
        raise StorageError(f"presigned URL lifetime {expires_s} s is outside 1..{MAX_PRESIGN_S}",
                           fix="pass expires_s of at most 7 days", where=f"s3://{cfg.bucket}/{key}")
    with boundary(cfg, "presigning", key):
        return client(cfg).generate_presigned_url("get_object", Params={"Bucket": cfg.bucket, "Key": key},
                                                  ExpiresIn=expires_s)


def list_keys(cfg: StorageConfig, key_prefix: str) -> list[str]:
    """Full keys of every object under the prefix (all pages)."""
    prefix = object_key(cfg, key_prefix)
    keys: list[str] = []
    with boundary(cfg, "listing", prefix + "/"):
        for page in client(cfg).get_paginator("list_objects_v2").paginate(
                Bucket=cfg.bucket, Prefix=f"{prefix}/" if prefix else ""):
            keys.extend(item["Key"] for item in page.get("Contents", []))
    return keys


def get_tree(cfg: StorageConfig, key_prefix: str, local_root: Path,
             include: Callable[[str], bool] | None = None) -> list[Path]:
    """Download every object under the prefix (or those whose relative path `include` accepts) into `local_root`
    (same relative paths); return the files."""
    prefix = object_key(cfg, key_prefix)
    written = []
    for key in list_keys(cfg, key_prefix):
        rel = PurePosixPath(key[len(prefix):].lstrip("/"))
        if include is not None and not include(rel.as_posix()):
            continue
        if rel.is_absolute() or ".." in rel.parts:
            raise StorageError(f"object key {key!r} would escape {local_root}", where=f"s3://{cfg.bucket}/{key}")
        target = Path(local_root, *rel.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.part")
        with boundary(cfg, f"downloading to {target}", key):
            client(cfg).download_file(cfg.bucket, key, str(tmp), Config=TRANSFER)
        replace_atomic(tmp, target)
        written.append(target)
    return written


def _tagging(tags: dict[str, str]) -> str:
    """The x-amz-tagging value: a URL-encoded query string (spaces as %20, not '+')."""
    if len(tags) > MAX_TAGS:
        raise StorageError(f"{len(tags)} tags given; S3 allows {MAX_TAGS} per object", fix="pass fewer tags")
    return urllib.parse.urlencode(tags, quote_via=urllib.parse.quote, safe="")


@contextlib.contextmanager
def boundary(cfg: StorageConfig, action: str, key: str | None = None) -> Iterator[None]:
    """Translate botocore/boto3 failures into StorageError."""
    try:
        yield
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError, boto3.exceptions.Boto3Error) as exc:
        raise storage_error(cfg, action, key, exc) from exc


def error_code(exc: botocore.exceptions.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def storage_error(cfg: StorageConfig, action: str, key: str | None, exc: Exception) -> StorageError:
    endpoint = cfg.endpoint_url or f"AWS S3 ({cfg.region})"
    where = f"s3://{cfg.bucket}/{key}" if key else f"s3://{cfg.bucket}"
    code = error_code(exc) if isinstance(exc, botocore.exceptions.ClientError) else type(exc).__name__
    cause = exc.__cause__ if isinstance(exc, boto3.exceptions.S3UploadFailedError) else None
    if isinstance(exc, CONNECTION_ERRORS) or isinstance(cause, CONNECTION_ERRORS):
        fix = f"start the S3 server (`podium dev up`) or correct endpoint_url; nothing answered at {endpoint}"
    elif code in AUTH_CODES or "AccessDenied" in str(exc) or "SignatureDoesNotMatch" in str(exc):
        fix = f"check the access key and secret key configured for {endpoint} (the secret is not shown)"
    elif code == "NoSuchBucket" or "NoSuchBucket" in str(exc):
        fix = f"create bucket {cfg.bucket!r} (tasks.storage.objects.ensure_bucket) or correct the bucket name"
    elif code == "InvalidBucketName":
        fix = "bucket names are 3-63 characters: lowercase letters, digits, dots and hyphens"
    elif code in MISSING_CODES:
        fix = "the object is missing; upload it again or correct the key"
    elif isinstance(exc, botocore.exceptions.NoCredentialsError):
        fix = "set access_key/secret_key in the storage settings or AWS credentials in the environment"
    else:
        fix = f"check that {endpoint} is an S3 endpoint and retry"
    message = f"{action} failed at {endpoint}: {code}: {exc}"
    if cfg.secret_key:
        message = message.replace(cfg.secret_key, "***")
    return StorageError(message, fix=fix, where=where)
