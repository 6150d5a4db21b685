"""Files as Podium writes and reads them: whole or not at all (atomic, durable), hashed in blocks, tailed for errors.

Every file Podium writes for others to read (records, logs it summarises, configs, manifests, packages) goes through
`write_atomic`, or `replace_atomic` when something else fills the temporary file: a reader sees the old file or the
new one, never half of one, and after a crash the new one is on disk (the data is fsynced before the rename, and
the folder after it).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from pathlib import Path

BLOCK = 1 << 20
TAIL_BYTES = 64 * 1024


def temporary(path: Path, tag: str = "tmp") -> Path:
    """A temporary name beside `path` (same folder, so the rename is atomic), unique to this process."""
    return path.with_name(f".{path.name}.{os.getpid()}.{tag}")


def _fsync(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_atomic(tmp: Path, path: Path) -> Path:
    """Put the finished file `tmp` in place of `path`: its data on disk first, then the rename, then the folder."""
    _fsync(tmp)
    os.replace(tmp, path)
    with contextlib.suppress(OSError):   # some filesystems cannot fsync a folder
        _fsync(path.parent, directory=True)
    return path


def write_atomic(path: Path, data: str | bytes) -> Path:
    """Write `data` (text in UTF-8, or bytes) to `path` atomically and durably; creates the folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary(path)
    try:
        if isinstance(data, str):
            tmp.write_text(data, encoding="utf-8")
        else:
            tmp.write_bytes(data)
        return replace_atomic(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def sha256_file(path: Path) -> str:
    """The sha256 of a file, read in blocks: the one checksum Podium records for models, data sets and uploads."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def tail(path: Path, lines: int = 20, missing: str = "") -> str:
    """The last `lines` lines of a (log) file, from its last 64 KiB; `missing` when it cannot be read."""
    try:
        with Path(path).open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - TAIL_BYTES))
            return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])
    except OSError:
        return missing


def copy_run_folder(src: Path, dest: Path) -> Path:
    """Copy a run's folder into `dest` (merged with what is there) without its symbolic links: a link in a run folder
    is an input placed for the client, not something the run wrote (the endpoints client's data set, linked where the
    client reads it: 68 MB a run in a Qwen3-VL rehearsal, gigabytes with real product photos)."""
    def links(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if os.path.islink(os.path.join(folder, n))]

    shutil.copytree(src, dest, dirs_exist_ok=True, ignore=links)
    return Path(dest)
