"""A tar archive unpacked into an empty folder by Podium's own rules (`podium fetch`'s source archives,
tasks/staging/fetch_http.py), so that nothing lands outside the folder on any Python the project runs on: Python's
`data` extraction filter alone lets CVE-2025-4517's chain through on the releases before its fix, 3.11.7 among them
(long folder names and links whose resolved path passes PATH_MAX, where `os.path.realpath` stops resolving), and
Python 3.11.0-3.11.3 has no filter at all.

Every member is listed and checked before a byte is written, and the first one refused refuses the whole archive,
named with the reason (an archive unpacked with members missing would fail later, far from the cause):
- kept: folders, regular files (the owner's execute bit kept; no set-id bits, no owner) and links that are relative
  and resolve inside the folder through no other link (`mlperf.conf -> loadgen/mlperf.conf`, as mlcommons/inference
  holds);
- refused: hard links, devices, fifos, sparse files (whose holes would be written out past the cap) and any other
  type; absolute names and `..`; a name under a link (nothing is written through a link); a name of more than
  NAME_MAX bytes, a path or link target of PATH_MAX or more; a name given twice; more than MAX_MEMBERS entries;
- the archive's tar stream (files and headers, decompressed) is read to at most `max_bytes`: a bomb is refused at the
  header that would pass the cap, before its data is inflated, and no header is read whole past MAX_HEADER bytes.

The writes cannot follow a link either: each folder on the way is opened relative to its parent with O_NOFOLLOW, and
each file is created with O_EXCL|O_NOFOLLOW in it.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import lzma
import os
import shutil
import sys
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

NAME_MAX = 255           # bytes of one name (Linux <linux/limits.h>)
PATH_MAX = 4096          # bytes of a path with its terminating NUL (Linux <linux/limits.h>)
MAX_MEMBERS = 100_000    # entries; mlcommons/inference at the v6.1 pin holds 1,381 files
MAX_HEADER = 1 << 20     # the most read of the tar stream at once: tarfile reads a pax or long-name header whole
BLOCK = MAX_HEADER       # a file's data is read in pieces of this size
FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
KINDS = {tarfile.LNKTYPE: "a hard link", tarfile.CHRTYPE: "a character device", tarfile.BLKTYPE: "a block device",
         tarfile.FIFOTYPE: "a fifo"}
COMPRESSED = ((b"\x1f\x8b", gzip.open), (b"BZh", bz2.open), (b"\xfd7zXZ\x00", lzma.open))   # what tarfile reads
Named = list[tuple[tuple[str, ...], tarfile.TarInfo]]


class Refused(tarfile.TarError):
    """The archive is refused at `member` (its name as the archive writes it; empty: at its start); `too_big`: by the
    size cap. A TarError, so that a reader of archives refuses it as one it cannot read."""

    def __init__(self, member: str, why: str, too_big: bool = False) -> None:
        self.member, self.why, self.too_big = member, why, too_big
        super().__init__(f"{shown(member)}: {why}" if member else why)


def unpack(archive: Path, folder: Path, max_bytes: int) -> None:
    """Every member of `archive` into the empty `folder`, less the one top-level folder they all lie in, when they do
    (GitHub's `<repo>-<commit>/`); Refused before anything is written. tarfile.TarError or OSError: the archive
    cannot be read, or a member written."""
    with open_tar(archive, max_bytes) as tar:
        members = _checked(_named(_listed(tar, max_bytes)), len(os.fsencode(str(folder))))
        root = os.open(folder, FOLDER)
        try:
            for parts, member in members:
                _place(tar, member, parts, root)
        finally:
            os.close(root)


@contextlib.contextmanager
def open_tar(archive: Path, max_bytes: int = sys.maxsize) -> Iterator[tarfile.TarFile]:
    """The archive (tar, or tar compressed with gzip, bzip2 or xz) open for reading, its tar stream capped at
    `max_bytes` (Refused past it); a stream that cannot be decompressed is a tarfile.ReadError."""
    with open(archive, "rb") as raw:
        head = raw.read(6)
        raw.seek(0)
        opener = next((how for magic, how in COMPRESSED if head.startswith(magic)), None)
        try:
            with opener(raw) if opener else contextlib.nullcontext(raw) as stream, \
                    tarfile.open(fileobj=_Capped(stream, max_bytes), mode="r:") as tar:
                yield tar
        except (EOFError, zlib.error, lzma.LZMAError) as e:
            raise tarfile.ReadError(str(e)) from None


def shown(name: str) -> str:
    """A name as an error shows it: a very long one with its middle elided."""
    return name if len(name) <= 100 else f"{name[:60]}...{name[-30:]} ({len(os.fsencode(name)):,} bytes)"


class _Capped:
    """The tar stream, which refuses to be read or sought past `limit` bytes, or read more than MAX_HEADER at once
    (tarfile reads a pax or long-name header whole)."""

    def __init__(self, stream: BinaryIO, limit: int) -> None:
        self.stream, self.limit = stream, limit

    def tell(self) -> int:
        return self.stream.tell()

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_SET and offset > self.limit:
            raise self._past()
        return self.stream.seek(offset, whence)

    def read(self, size: int = -1) -> bytes:
        if not 0 <= size <= MAX_HEADER:
            raise Refused("", f"a header of more than {MAX_HEADER:,} bytes (tar's pax or long-name header holds a "
                              "name and a few numbers)")
        data = self.stream.read(size)
        if self.stream.tell() > self.limit:
            raise self._past()
        return data

    def _past(self) -> Refused:
        return Refused("", f"the archive unpacks to more than {self.limit:,} bytes", too_big=True)


def _listed(tar: tarfile.TarFile, max_bytes: int) -> list[tarfile.TarInfo]:
    """The members, read header by header; Refused at the first past MAX_MEMBERS or past `max_bytes`."""
    members: list[tarfile.TarInfo] = []
    try:
        for member in tar:
            members.append(member)
            if len(members) > MAX_MEMBERS:
                raise Refused(member.name, f"the archive holds more than {MAX_MEMBERS:,} entries")
    except Refused as e:   # from the stream: at the data of the last member listed, or at the header after it
        last = members[-1] if members and not e.member else None
        if last is None:
            raise
        where = last.name if last.offset_data + last.size > max_bytes else f"after {last.name}"
        raise Refused(where, e.why, e.too_big) from None
    return members


def _named(members: list[tarfile.TarInfo]) -> Named:
    """Each member with its name's parts (`.` and empty parts dropped), less the one top folder they all lie in."""
    named = []
    for member in members:
        if member.name.startswith("/") or "\0" in member.name:
            raise Refused(member.name, "an absolute name (or one with a NUL); a member's name is relative")
        parts = tuple(p for p in member.name.split("/") if p not in ("", "."))
        if ".." in parts:
            raise Refused(member.name, "a name with .., which could leave the folder")
        if parts:
            named.append((parts, member))
    tops = {parts[0] for parts, _ in named}
    if len(tops) != 1 or all(len(parts) == 1 for parts, _ in named):
        return named
    return [(parts[1:], member) for parts, member in named if len(parts) > 1]


def _checked(named: Named, root_bytes: int) -> Named:
    """The members, each checked against the rules in the module's doc (`root_bytes`: the folder's path's length)."""
    links = {parts for parts, member in named if member.issym()}
    seen: set[tuple[str, ...]] = set()
    for parts, member in named:
        kind = _unkept(member)
        if kind is not None:
            raise Refused(member.name, f"{kind}; only folders, files and links inside the folder are unpacked")
        if parts in seen:
            raise Refused(member.name, "named twice in the archive")
        seen.add(parts)
        under = next((parts[:i] for i in range(1, len(parts)) if parts[:i] in links), None)
        if under is not None:
            raise Refused(member.name, f"lies under the link {'/'.join(under)}; nothing is written through a link")
        longest = max(len(os.fsencode(p)) for p in parts)
        if longest > NAME_MAX:
            raise Refused(member.name, f"a name of {longest:,} bytes (a file system takes {NAME_MAX})")
        _short(member.name, "a path", root_bytes + 1 + len(os.fsencode("/".join(parts))))
        if member.issym():
            _inside(member, parts, links, root_bytes)
    return named


def _unkept(member: tarfile.TarInfo) -> str | None:
    """What the member is when it is not a folder, a regular file or a link; None when it is one."""
    if member.issparse():
        return "a sparse file"
    if member.isdir() or member.isreg() or member.issym():
        return None
    kind = KINDS.get(member.type, f"an entry of tar type {member.type!r}")
    return f"{kind} to {shown(member.linkname)}" if member.islnk() else kind


def _inside(member: tarfile.TarInfo, parts: tuple[str, ...], links: set, root_bytes: int) -> None:
    """A link's target walked from the link's folder: relative, never above the folder, through no other link."""
    target = member.linkname
    said = f"a link to {shown(target)!r}"
    if not target or target.startswith("/") or "\0" in target:
        raise Refused(member.name, f"{said}; a link is kept only when relative and inside the folder")
    _short(member.name, "a link target", len(os.fsencode(target)) + 1)
    at = list(parts[:-1])
    steps = [p for p in target.split("/") if p not in ("", ".")]
    for i, step in enumerate(steps):
        if step != "..":
            at.append(step)
            if i < len(steps) - 1 and tuple(at) in links:
                raise Refused(member.name, f"{said}, through the link {'/'.join(at)}; a link is kept only when it "
                                           "resolves inside the folder through no other link")
        elif at:
            at.pop()
        else:
            raise Refused(member.name, f"{said}, which leaves the folder")
    _short(member.name, "a link resolving to a path", root_bytes + 1 + len(os.fsencode("/".join(at))))


def _short(name: str, what: str, size: int) -> None:
    if size >= PATH_MAX:
        raise Refused(name, f"{what} of {size - 1:,} bytes (a path takes at most {PATH_MAX - 1:,})")


def _place(tar: tarfile.TarFile, member: tarfile.TarInfo, parts: tuple[str, ...], root: int) -> None:
    """One checked member under the folder open as `root`."""
    if member.isdir():
        os.close(_folder(root, parts))
        return
    parent = _folder(root, parts[:-1])
    try:
        if member.issym():
            os.symlink(member.linkname, parts[-1], dir_fd=parent)
            return
        fd = os.open(parts[-1], FILE, 0o755 if member.mode & 0o100 else 0o644, dir_fd=parent)
        with os.fdopen(fd, "wb") as out:
            source = tar.extractfile(member)
            if source is not None:
                shutil.copyfileobj(source, out, BLOCK)
    finally:
        os.close(parent)


def _folder(root: int, parts: tuple[str, ...]) -> int:
    """The folder `parts` under `root` open, made where missing, each name opened in its parent without following a
    link."""
    fd = os.dup(root)
    try:
        for part in parts:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fd)
            inner = os.open(part, FOLDER, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd
