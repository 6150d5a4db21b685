"""Copy one file with its sha256 computed on the way, resumable: from a local path, or from S3 in parallel ranges.

A copy writes `<dest>.part` and, beside it, `<dest>.part.json` (the journal): the source's identity (size+mtime of
a file, the ETag of an object), the expected size and sha256, and what is already on disk. The sha256 runs over
the bytes in order as they arrive, so a finished copy is verified with no second read. A mismatch deletes the
partial file and raises `ChecksumMismatch` naming the file.

Local copies are sequential: the journal's `done` is the written prefix. S3 copies keep up to `workers` ranged
GETs of one `chunk` (8 MiB) in flight, each written with `pwrite` at its offset by the thread that fetched it;
the journal's `chunks` lists every chunk on disk (after an fdatasync), in any order. The hash cursor takes the
chunks in order, holding at most `2 * workers` of them in memory.

After an interruption (a kill, a cut connection) the next copy with a matching journal reads what is on disk
again locally, once, to rebuild the hash state (hashlib cannot save it), and fetches only the rest. A changed
source (other identity) starts over.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import botocore.exceptions

from submission.errors import StorageError

MIB = 1024 * 1024
CHUNK = 8 * MIB
WORKERS = 8                      # boto3's default connection pool holds 10
JOURNAL_EVERY = 32 * MIB         # journal the hashed prefix at most this often (and at the end)
Progress = Callable[[int], None]  # called with the number of newly verified bytes


class ChecksumMismatch(StorageError):
    """The bytes read do not hash to the manifest's sha256: the source is corrupt or changed. Never retried."""


@dataclass(frozen=True)
class Journal:
    source: str       # what is copied: a path or s3://bucket/key
    identity: str     # size+mtime of a file, or the object's ETag: a change restarts the copy
    size: int
    sha256: str
    chunk: int
    done: int = 0                   # local copies: bytes of the prefix on disk
    chunks: tuple[int, ...] = ()    # S3 copies: indices of the chunks on disk

    def matches(self, other: Journal) -> bool:
        return (self.source, self.identity, self.size, self.sha256, self.chunk) == (
            other.source, other.identity, other.size, other.sha256, other.chunk)


@dataclass(frozen=True)
class Copied:
    bytes_fetched: int   # read from the source by this call
    bytes_resumed: int   # already there from an earlier, interrupted call
    sha256: str = ""     # of the whole file, as copied


def journal_path(part: Path) -> Path:
    return part.with_name(part.name + ".json")


def _read_journal(part: Path) -> Journal | None:
    try:
        data = json.loads(journal_path(part).read_text())
        return Journal(**{**data, "chunks": tuple(data.get("chunks", ()))})
    except (OSError, ValueError, TypeError):
        return None


def _write_journal(part: Path, journal: Journal) -> None:
    path = journal_path(part)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(asdict(journal)))
    os.replace(tmp, path)


def discard(part: Path) -> None:
    for path in (part, journal_path(part)):
        path.unlink(missing_ok=True)


def _resume_point(part: Path, want: Journal, digest: Any) -> int:
    """Bytes already written and hashed by an earlier call (their hash is fed into `digest`); 0 to start over."""
    found = _read_journal(part)
    if found is None or not found.matches(want) or not part.is_file() or found.done > want.size:
        discard(part)
        return 0
    with part.open("rb") as f:
        remaining = found.done
        while remaining:
            block = f.read(min(CHUNK, remaining))
            if not block:   # the partial file is shorter than its journal says
                discard(part)
                digest.__init__()
                return 0
            digest.update(block)
            remaining -= len(block)
    return found.done


def _finish(part: Path, journal: Journal, digest: Any, label: str) -> None:
    if journal.sha256 and digest.hexdigest() != journal.sha256:
        discard(part)
        raise ChecksumMismatch(
            f"{label}: sha256 {digest.hexdigest()} does not match the manifest's {journal.sha256}; "
            f"the partial copy was deleted", where=journal.source,
            fix="the source object is corrupt or was replaced: restore it (or re-upload it with its manifest) "
                "and stage again")
    journal_path(part).unlink(missing_ok=True)


def copy_file(src: Path, part: Path, *, size: int, sha256: str | None, label: str,
              progress: Progress | None = None) -> Copied:
    """Copy a local (or shared-filesystem) file into `part`, hashing as it goes; resume a journaled copy. With
    `sha256` None nothing is verified: the copy's own hash is returned (for a source without a manifest)."""
    stat = src.stat()
    if stat.st_size != size:
        raise ChecksumMismatch(f"{label}: {src} has {stat.st_size} bytes, the manifest says {size}", where=str(src),
                               fix="the source changed since its manifest was written; restore it or rewrite the "
                                   "manifest")
    want = Journal(str(src), f"{stat.st_size}:{stat.st_mtime_ns}", size, sha256 or "", CHUNK)
    digest = hashlib.sha256()
    part.parent.mkdir(parents=True, exist_ok=True)
    resumed = done = journaled = _resume_point(part, want, digest)
    if progress and resumed:
        progress(resumed)
    with src.open("rb") as fin, open(part, "r+b" if done else "wb") as fout:
        fin.seek(done)
        fout.seek(done)
        fout.truncate()
        while block := fin.read(CHUNK):
            fout.write(block)
            digest.update(block)
            done += len(block)
            if progress:
                progress(len(block))
            if done - journaled >= JOURNAL_EVERY:
                fout.flush()
                os.fdatasync(fout.fileno())   # the journal never vouches for bytes still in memory
                _write_journal(part, Journal(**{**asdict(want), "done": done}))
                journaled = done
    _finish(part, want, digest, label)
    return Copied(bytes_fetched=done - resumed, bytes_resumed=resumed, sha256=digest.hexdigest())


def copy_object(s3: Any, bucket: str, key: str, part: Path, *, size: int, sha256: str, etag: str, label: str,
                progress: Progress | None = None, workers: int | None = None, chunk: int | None = None) -> Copied:
    """Download s3://bucket/key into `part` with up to `workers` ranged GETs in flight; resume a journaled copy."""
    chunk, workers = chunk or CHUNK, workers or WORKERS
    want = Journal(f"s3://{bucket}/{key}", etag, size, sha256, chunk)
    part.parent.mkdir(parents=True, exist_ok=True)
    found = _read_journal(part)
    on_disk: set[int] = set(found.chunks) if found and found.matches(want) and part.is_file() else set()
    if not on_disk:
        discard(part)
    count = -(-size // chunk)
    digest, lock = hashlib.sha256(), threading.Lock()
    written = set(on_disk)           # chunks on disk, for the journal (fetches complete in any order)
    unjournaled = [0]                # bytes written since the journal was last updated
    resumed = fetched = 0
    fd = os.open(part, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, size)
        to_fetch = iter(i for i in range(count) if i not in on_disk)
        pending: dict[int, Future[bytes]] = {}

        def fetch(i: int) -> bytes:
            block = _get_range(s3, bucket, key, etag, i * chunk, min((i + 1) * chunk, size), fd)
            with lock:
                written.add(i)
                unjournaled[0] += len(block)
                due = unjournaled[0] >= JOURNAL_EVERY
                if due:
                    unjournaled[0] = 0
            if due:
                _journal_chunks(part, want, fd, written, lock)
            return block

        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="stage-get") as pool:
            try:
                for i in range(count):
                    for j in to_fetch:   # keep the window full; the iterator resumes where it stopped
                        pending[j] = pool.submit(fetch, j)
                        if len(pending) >= 2 * workers:
                            break
                    if i in on_disk:
                        block = os.pread(fd, min(chunk, size - i * chunk), i * chunk)
                        resumed += len(block)
                    else:
                        block = pending.pop(i).result()
                        fetched += len(block)
                    digest.update(block)
                    if progress:
                        progress(len(block))
            except BaseException:
                for future in pending.values():
                    future.cancel()
                pool.shutdown(wait=True)
                _journal_chunks(part, want, fd, written, lock)   # what finished stays for the next try
                raise
    finally:
        os.close(fd)
    _finish(part, want, digest, label)
    return Copied(bytes_fetched=fetched, bytes_resumed=resumed, sha256=digest.hexdigest())


_JOURNAL_LOCK = threading.Lock()


def _journal_chunks(part: Path, want: Journal, fd: int, written: set[int], lock: threading.Lock) -> None:
    """Record the chunks on disk, after they reached it (fdatasync), so a crash never trusts unwritten bytes."""
    with _JOURNAL_LOCK:
        with lock:
            chunks = tuple(sorted(written))
        os.fdatasync(fd)
        _write_journal(part, Journal(**{**asdict(want), "chunks": chunks}))


def _get_range(s3: Any, bucket: str, key: str, etag: str, start: int, end: int, fd: int) -> bytes:
    """GET bytes [start, end) of an object (only while its ETag is unchanged) and write them at `start`."""
    try:
        response = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}", IfMatch=etag)
        block = response["Body"].read()
    except botocore.exceptions.ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code in ("PreconditionFailed", "412"):
            raise ChecksumMismatch(f"s3://{bucket}/{key} changed while it was being staged (ETag is no longer "
                                   f"{etag})", where=f"s3://{bucket}/{key}", fix="stage again") from exc
        raise StorageError(f"reading bytes {start}-{end - 1} of s3://{bucket}/{key} failed: {code}: {exc}",
                           where=f"s3://{bucket}/{key}", fix="check the endpoint and credentials; stage again "
                                                               "to resume") from exc
    except (OSError, botocore.exceptions.BotoCoreError) as exc:
        raise StorageError(f"reading bytes {start}-{end - 1} of s3://{bucket}/{key} failed: {exc}",
                           where=f"s3://{bucket}/{key}", fix="stage again to resume where it stopped") from exc
    if len(block) != end - start:
        raise StorageError(f"s3://{bucket}/{key}: asked for {end - start} bytes at {start}, got {len(block)}",
                           where=f"s3://{bucket}/{key}", fix="the object changed or the connection was cut; stage "
                                                              "again to resume")
    view = memoryview(block)
    while view:
        view = view[os.pwrite(fd, view, start + len(block) - len(view)):]
    return block

