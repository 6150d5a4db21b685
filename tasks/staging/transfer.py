"""Copy one file with its sha256 computed on the way, resumable: from a local path, or from S3 in parallel ranges.

A copy writes `<dest>.part` and, beside it, `<dest>.part.json` (the journal): the source's identity (size+mtime of
a file, the ETag of an object), the expected size and sha256, and what is already written. The sha256 runs over
the bytes in order as they arrive, so a finished copy is verified with no second read. A mismatch deletes the
partial file and raises `ChecksumMismatch` naming the file. A finished copy is fsynced once, so a staged copy
that a later run trusts by its manifest survives a crash of the node.

Local copies are sequential, one writer thread writing a block while the next is hashed; the journal's `done` is
the written prefix. S3 copies keep up to `workers` ranged GETs of one `chunk` (8 MiB) in flight, each written with
`pwrite` at its offset by the thread that fetched it; the journal's `chunks` lists every chunk written, in any
order. The hash cursor takes the chunks in order, holding at most `2 * workers` of them in memory.

After an interruption (a kill, a cut connection) the next copy with a matching journal reads what was written
again, locally and once, to rebuild the hash state (hashlib cannot save it), and fetches only the rest; a changed
source (other identity) starts over. Journaled bytes are not fsynced (that would cost the disk's write bandwidth
on every journal entry): a process kill keeps them in the page cache, and after a machine crash a resumed copy
that fails its checksum is started once more from nothing before anything is called corrupt.
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

from submission.base.errors import StorageError
from submission.base.files import write_atomic

MIB = 1024 * 1024
CHUNK = 8 * MIB
PIECE = MIB                      # read size within a ranged GET
WORKERS = 8                      # boto3's default connection pool holds 10
JOURNAL_EVERY = 32 * MIB         # journal what is written at most this often (and when interrupted)
Progress = Callable[[int], None]  # called with the number of newly verified bytes


class ChecksumMismatch(StorageError):
    """The bytes read do not hash to the manifest's sha256: the source is corrupt or changed. Never retried."""

    final = True


@dataclass(frozen=True)
class Journal:
    source: str       # what is copied: a path or s3://bucket/key
    identity: str     # size+mtime of a file, or the object's ETag: a change restarts the copy
    size: int
    sha256: str       # expected; "" when the source has no manifest yet
    chunk: int
    done: int = 0                   # local copies: bytes of the prefix written
    chunks: tuple[int, ...] = ()    # S3 copies: indices of the chunks written

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
    write_atomic(journal_path(part), json.dumps(asdict(journal)))


def discard(part: Path) -> None:
    for path in (part, journal_path(part)):
        path.unlink(missing_ok=True)


def _verified(part: Path, want: Journal, digest: Any, label: str, resumed: int) -> bool:
    """True when the copy hashes right (journal removed); False when a resumed copy does not (redo it from
    nothing); raise ChecksumMismatch when a fresh one does not."""
    if not want.sha256 or digest.hexdigest() == want.sha256:
        journal_path(part).unlink(missing_ok=True)
        return True
    discard(part)
    if resumed:
        return False
    raise ChecksumMismatch(
        f"{label}: sha256 {digest.hexdigest()} does not match the manifest's {want.sha256}; the partial copy was "
        f"deleted", where=want.source,
        fix="the source is corrupt or was replaced: restore it (or re-upload it with its manifest) and stage again")


# ----- local and shared filesystems ----------------------------------------------------------------------------


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
    part.parent.mkdir(parents=True, exist_ok=True)
    while True:
        digest = hashlib.sha256()
        resumed = _resume_prefix(part, want, digest)
        if progress and resumed:
            progress(resumed)
        _copy_from(src, part, want, digest, resumed, progress)
        if _verified(part, want, digest, label, resumed):
            return Copied(bytes_fetched=size - resumed, bytes_resumed=resumed, sha256=digest.hexdigest())


def _resume_prefix(part: Path, want: Journal, digest: Any) -> int:
    """Bytes already written by an earlier call (their hash is fed into `digest`); 0 to start over."""
    found = _read_journal(part)
    if found is None or not found.matches(want) or not part.is_file() or part.stat().st_size < found.done:
        discard(part)
        return 0
    with part.open("rb") as f:
        remaining = found.done
        while remaining:
            block = f.read(min(CHUNK, remaining))
            digest.update(block)
            remaining -= len(block)
    return found.done


def _copy_from(src: Path, part: Path, want: Journal, digest: Any, done: int, progress: Progress | None) -> None:
    fd = os.open(part, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, done)
        os.lseek(fd, done, os.SEEK_SET)
        journaled = done
        # one writer thread writes (and journals) a block while the next one is hashed; both release the GIL
        with src.open("rb") as fin, ThreadPoolExecutor(max_workers=1, thread_name_prefix="stage-write") as writer:
            fin.seek(done)
            pending: Future[None] | None = None
            while block := fin.read(CHUNK):
                if pending is not None:
                    pending.result()
                done += len(block)
                entry = done if done - journaled >= JOURNAL_EVERY else None
                pending = writer.submit(_write_block, fd, block, part, want, entry)
                journaled = entry or journaled
                digest.update(block)
                if progress:
                    progress(len(block))
            if pending is not None:
                pending.result()
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_block(fd: int, block: bytes, part: Path, want: Journal, journal_done: int | None) -> None:
    view = memoryview(block)
    while view:
        view = view[os.write(fd, view):]
    if journal_done is not None:
        _write_journal(part, Journal(**{**asdict(want), "done": journal_done}))


# ----- S3 ------------------------------------------------------------------------------------------------------


def copy_object(s3: Any, bucket: str, key: str, part: Path, *, size: int, sha256: str, etag: str, label: str,
                progress: Progress | None = None, workers: int | None = None, chunk: int | None = None) -> Copied:
    """Download s3://bucket/key into `part` with up to `workers` ranged GETs in flight; resume a journaled copy."""
    want = Journal(f"s3://{bucket}/{key}", etag, size, sha256, chunk or CHUNK)
    part.parent.mkdir(parents=True, exist_ok=True)
    while True:
        found = _read_journal(part)
        written = set(found.chunks) if found and found.matches(want) and part.is_file() else set()
        if not written:
            discard(part)
        digest = hashlib.sha256()
        resumed = _download(s3, bucket, key, part, want, written, digest, progress, workers or WORKERS)
        if _verified(part, want, digest, label, resumed):
            return Copied(bytes_fetched=size - resumed, bytes_resumed=resumed, sha256=digest.hexdigest())


def _download(s3: Any, bucket: str, key: str, part: Path, want: Journal, on_disk: set[int], digest: Any,
              progress: Progress | None, workers: int) -> int:
    """Fill `part` and hash it in order; return the bytes that were already on disk."""
    size, chunk = want.size, want.chunk
    count = -(-size // chunk)
    lock = threading.Lock()
    written = set(on_disk)          # for the journal: fetches complete in any order
    unjournaled = [0]
    resumed = 0
    fd = os.open(part, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, size)

        def fetch(i: int) -> list[bytes]:
            pieces = _get_range(s3, bucket, key, want.identity, i * chunk, min((i + 1) * chunk, size), fd)
            with lock:
                written.add(i)
                unjournaled[0] += min(chunk, size - i * chunk)
                due = unjournaled[0] >= JOURNAL_EVERY
                if due:
                    unjournaled[0] = 0
            if due:
                _journal_chunks(part, want, written, lock)
            return pieces

        to_fetch = iter(i for i in range(count) if i not in on_disk)
        pending: dict[int, Future[list[bytes]]] = {}
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="stage-get") as pool:
            try:
                for i in range(count):
                    for j in to_fetch:   # keep the window full; the iterator resumes where it stopped
                        pending[j] = pool.submit(fetch, j)
                        if len(pending) >= 2 * workers:
                            break
                    if i in on_disk:
                        pieces = [os.pread(fd, min(chunk, size - i * chunk), i * chunk)]
                        resumed += len(pieces[0])
                    else:
                        pieces = pending.pop(i).result()
                    for piece in pieces:
                        digest.update(piece)
                    if progress:
                        progress(sum(len(p) for p in pieces))
            except BaseException:
                for future in pending.values():
                    future.cancel()
                pool.shutdown(wait=True)
                _journal_chunks(part, want, written, lock)   # what finished stays for the next try
                raise
        os.fsync(fd)
    finally:
        os.close(fd)
    return resumed


_JOURNAL_LOCK = threading.Lock()


def _journal_chunks(part: Path, want: Journal, written: set[int], lock: threading.Lock) -> None:
    with _JOURNAL_LOCK:
        with lock:
            chunks = tuple(sorted(written))
        _write_journal(part, Journal(**{**asdict(want), "chunks": chunks}))


def _get_range(s3: Any, bucket: str, key: str, etag: str, start: int, end: int, fd: int) -> list[bytes]:
    """GET bytes [start, end) of an object, written at `start` piece by piece (1 MiB) as they arrive; the object
    must still have `etag`. Returns the bytes as one block. (The answer's ETag is compared rather than sending
    If-Match: SeaweedFS served If-Match GETs about 40 % slower in bench/staging.py.)"""
    where = f"s3://{bucket}/{key}"
    pieces: list[bytes] = []
    offset = start
    try:
        response = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}")
        if response.get("ETag") not in (None, etag):
            raise ChecksumMismatch(f"{where} changed while it was being staged (ETag {response.get('ETag')}, was "
                                   f"{etag})", where=where, fix="stage again")
        for piece in response["Body"].iter_chunks(PIECE):
            view = memoryview(piece)
            while view:
                view = view[os.pwrite(fd, view, offset + len(piece) - len(view)):]
            offset += len(piece)
            pieces.append(piece)
    except botocore.exceptions.ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        raise StorageError(f"reading bytes {start}-{end - 1} of {where} failed: {code}: {exc}", where=where,
                           fix="check the endpoint and credentials; stage again to resume") from exc
    except (OSError, botocore.exceptions.BotoCoreError) as exc:
        raise StorageError(f"reading bytes {start}-{end - 1} of {where} failed: {exc}", where=where,
                           fix="stage again to resume where it stopped") from exc
    if offset != end:
        raise StorageError(f"{where}: asked for {end - start} bytes at {start}, got {offset - start}", where=where,
                           fix="the object changed or the connection was cut; stage again to resume")
    return [b"".join(pieces)]   # joined here, in parallel: the hashing thread then makes one call per chunk
