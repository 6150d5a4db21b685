"""Download links to a run's objects: minted on demand by `podium link`, never kept.

A presigned GET URL lets anyone who holds it read one object until it expires, and it carries the access key id that
signed it (`X-Amz-Credential`) and the signature. So a run keeps none: its report and Prefect artifacts name each
object by its `s3://` URL and print the `podium link` command (`command`), which signs a fresh URL from the caller's
own credentials, valid the plan's `storage.link_expiry_s` (default 1 hour) unless `--expires` says otherwise.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import botocore.exceptions

from submission.base.errors import StorageError
from submission.plan.model import LINK_EXPIRY_S, StorageSpec
from tasks.storage import objects as storage
from tasks.storage import s3server


@dataclass(frozen=True)
class Link:
    """A presigned URL to one object, and when it stops working."""

    object: str           # s3://bucket/key
    url: str
    expires_at: datetime


def parse(url: str) -> tuple[str, str]:
    """(bucket, key) of `s3://<bucket>/<key>`; a folder or a bare bucket is refused (a link opens one object)."""
    bucket, _, key = url.removeprefix("s3://").partition("/")
    if not url.startswith("s3://") or not bucket or not key or key.endswith("/"):
        raise StorageError(f"{url!r} is not the s3:// URL of one object",
                           fix="pass s3://<bucket>/<key>, e.g. s3://podium/runs/smoke/<run id>/submission.tar.gz "
                               "(the run's report lists its objects)")
    return bucket, key


def storage_config(bucket: str, *, endpoint_url: str | None, region: str, embedded: bool,
                   s3_dir: Path) -> storage.StorageConfig:
    """Where to sign: the embedded server of the workspace (it must be running, or its links would not answer) or an
    S3 endpoint with the caller's own credentials from boto3's chain (environment, profile, instance role)."""
    if not embedded:
        return storage.StorageConfig(endpoint_url, bucket, "", region)
    if endpoint_url:
        raise StorageError("--embedded picks the workspace's own S3 server; it takes no --endpoint-url",
                           fix="drop one of --embedded and --endpoint-url")
    server = s3server.running(s3_dir)
    if server is None:
        raise StorageError(f"the embedded S3 server of {s3_dir} is not running, so its links would not answer",
                           fix="start it with `podium dev up --s3-only` (same --workspace), or pass --workspace")
    return server.storage(bucket, "", region)


def mint(cfg: storage.StorageConfig, key: str, expires_s: int = LINK_EXPIRY_S) -> Link:
    """A presigned GET URL to `key`, valid `expires_s`. The object is looked up first: a link to nothing, or one the
    caller's credentials may not read, would fail only when someone opens it."""
    where = f"s3://{cfg.bucket}/{key}"
    with storage.boundary(cfg, "looking up the object", key):
        try:
            storage.client(cfg).head_object(Bucket=cfg.bucket, Key=key)
        except botocore.exceptions.ClientError as exc:
            if storage.error_code(exc) not in storage.MISSING_CODES:
                raise
            raise StorageError(f"no object {where}", where=where,
                               fix="copy its s3:// URL from the run's report (`## Where everything went`)") from None
    start = datetime.now(UTC).replace(microsecond=0)   # SigV4 counts from its X-Amz-Date, which is this second
    return Link(where, storage.presign(cfg, key, expires_s), start + timedelta(seconds=expires_s))


def command(spec: StorageSpec, url: str, workspace: Path) -> str:
    """The `podium link` command line that mints a link to `url` in the plan's storage, as a report prints it."""
    argv = ["podium", "link"]
    if spec.embedded:
        argv += ["--embedded", "--workspace", str(workspace)]
    elif spec.endpoint_url:
        argv += ["--endpoint-url", spec.endpoint_url]
    if spec.region != "us-east-1":
        argv += ["--region", spec.region]
    return shlex.join([*argv, "--expires", str(spec.link_expiry_s), url])


def lifetime(seconds: int) -> str:
    """`3600` -> `1 h`, `604800` -> `7 d`, `90` -> `90 s`: the largest whole unit."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"
