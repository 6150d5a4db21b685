"""`podium fetch` over plain HTTP: one file at a URL (`url`), or a tar archive unpacked into a folder (`archive`, and
`github`: GitHub's archive of a commit), each verified (tasks/staging/fetch.py runs them).

A file lands through `<file>.part`, resumed with a Range request after an interruption, and is placed only when its
sha256 is the plan's; `<file>.podium-fetch.json` beside it records URL, size and sha256.

An archive is kept beside its folder as `<folder>.tar.gz` (what `pip install` takes for the endpoints client, whose
install check reads the commit back from it) and unpacked into the folder through `.<folder>.unpacking/` by
tasks/staging/unpack.py's rules: one top-level folder (GitHub's `<repo>-<commit>/`) is stripped; folders, files and
links that resolve inside the folder are kept; anything else (hard links, devices, absolute names, `..`, a link
leading out, a name under a link, an over-long name, more than the source's `max_unpacked_gib`) refuses the whole
archive, which is deleted, and nothing is left of the unpacking. A `github` archive must name its commit: `git archive`,
which GitHub runs, writes it into the archive's pax header (`comment`); its sha256 is checked when the plan gives one,
and recorded either way. The folder holds `.podium-manifest.json` (size and sha256 of every file, staging's format)
and `.podium-fetch.json` (source, commit, the archive's sha256, the manifest's digest). A later call hashes the
archive and the files and does nothing when all match; a changed file is unpacked again from the archive, and a
changed archive fetched again.
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from submission.base.errors import PlanError, StorageError
from submission.base.files import replace_atomic, sha256_file, write_atomic
from submission.plan.fetch import COMMIT, FetchItem
from tasks.staging.sources import MANIFEST, Manifest, manifest_digest
from tasks.staging.transfer import ChecksumMismatch
from tasks.staging.unpack import Refused, open_tar, unpack

FETCHED = ".podium-fetch.json"            # in a fetched folder (beside a fetched file: <file>.podium-fetch.json)
ARCHIVE = ".tar.gz"                       # <folder>.tar.gz: the archive a folder was unpacked from
GITHUB = "https://github.com"
BLOCK = 1 << 20
GIB = 1 << 30
Say = Callable[[str], None]
Bytes = Callable[[str, int, int], None]   # (label, bytes done, bytes in all or 0: not known) of one download


def fetch_url(item: FetchItem, dest: Path, say: Say, meter: Bytes, timeout_s: float = 60.0) -> tuple[int, int]:
    """The file at `item.source.url` in `dest`; (files fetched, bytes)."""
    src = item.source
    want = str(src.sha256)
    record = dest.with_name(dest.name + FETCHED)
    if dest.is_file() and sha256_file(dest) == want:
        _write_json(record, {"url": src.url, "sha256": want, "size": dest.stat().st_size})
        say(f"{dest.name}: verified (sha256 {want[:12]}), nothing to fetch")
        return 0, dest.stat().st_size
    _download_verified(item, str(src.url), dest, want, say, meter, timeout_s)
    _write_json(record, {"url": src.url, "sha256": want, "size": dest.stat().st_size})
    say(f"{dest.name}: fetched and verified (sha256 {want[:12]})")
    return 1, dest.stat().st_size


def fetch_archive(item: FetchItem, dest: Path, say: Say, meter: Bytes, github: str = GITHUB,
                  timeout_s: float = 60.0) -> tuple[int, int, int]:
    """The archive `item` names, unpacked into the folder `dest`; (files fetched or unpacked by this call, files
    unpacked, their bytes)."""
    src = item.source
    url = src.archive or f"{github.rstrip('/')}/{src.github}/archive/{item.revision}.tar.gz"
    archive = dest.with_name(dest.name + ARCHIVE)
    want = _identity(item)
    record = read_json(dest / FETCHED) or {}
    matches = {k: record.get(k) for k in want} == want
    files = read_json(dest / MANIFEST) if matches else None
    have = sha256_file(archive) if archive.is_file() else None
    good = have is not None and have == (src.sha256 or (record.get("archive_sha256") if matches else None))
    if good and files is not None and _intact(dest, files):
        say(f"{dest.name}: {len(files)} file(s) and {archive.name} verified, nothing to fetch")
        return 0, len(files), _size(files)
    fetched = 0
    if not good:
        _download_verified(item, url, archive, src.sha256, say, meter, timeout_s)
        fetched, have = 1, sha256_file(archive)
    try:
        commit = tar_commit(archive)
    except (OSError, tarfile.TarError) as e:
        archive.unlink(missing_ok=True)
        raise ChecksumMismatch(f"{item.field}: {url} is not a tar archive ({e}); the download was deleted",
                               where=str(archive), fix="check the source in the plan: it names the archive itself, "
                                                       "not a page about it") from None
    if src.github and commit != item.revision:
        archive.unlink(missing_ok=True)
        raise ChecksumMismatch(f"{item.field}: {url} is the archive of commit {commit or 'none'}, not "
                               f"{item.revision}; the download was deleted", where=str(archive),
                               fix="check the revision (or GitHub's address, PODIUM_GITHUB_URL, for a mirror)")
    say(f"{dest.name}: unpacking {archive.name}")
    files = _unpack(item, archive, dest, {**want, "url": url, "archive_sha256": have, "commit": commit})
    say(f"{dest.name}: {len(files)} file(s) unpacked from {archive.name} (sha256 {str(have)[:12]}"
        + (f", commit {commit[:12]}" if commit else "") + ")")
    return fetched + len(files), len(files), _size(files)


def _identity(item: FetchItem) -> dict[str, Any]:
    """What an archive's record must say for it to be this item's: its source, commit and the plan's sha256."""
    src = item.source
    return {"archive": src.archive, "github": src.github, "revision": item.revision, "sha256": src.sha256}


def tar_commit(archive: Path) -> str | None:
    """The commit a `git archive` tar (or tar.gz) was made from: its pax global header's `comment`; None when the
    archive names none. OSError or tarfile.TarError when it is not a readable archive."""
    with open_tar(archive) as tar:
        commit = tar.pax_headers.get("comment", "")
    return commit if COMMIT.fullmatch(commit) else None


# ----- downloads and unpacking --------------------------------------------------------------------------------


def _download_verified(item: FetchItem, url: str, dest: Path, sha256: str | None, say: Say, meter: Bytes,
                       timeout_s: float) -> None:
    """`url` into `dest` through `<dest>.part`, placed only when its sha256 is `sha256` (when given)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    _download(item, url, part, say, meter, timeout_s)
    got = sha256_file(part)
    if sha256 is not None and got != sha256:
        part.unlink(missing_ok=True)
        raise ChecksumMismatch(f"{item.field}: {url} has sha256 {got}, the plan says {sha256}; the download was "
                               "deleted", where=str(dest),
                               fix="check the url and sha256 in the plan against the publisher's checksums")
    replace_atomic(part, dest)


def _download(item: FetchItem, url: str, part: Path, say: Say, meter: Bytes, timeout_s: float,
              headers: Mapping[str, str] | None = None) -> None:
    """Into `part`, continuing what an interrupted call left there when the server honours the Range. `headers`
    (credentials, tasks/staging/fetch_r2.py) go to `url` alone: a redirect is then not followed."""
    import httpx

    have = part.stat().st_size if part.is_file() else 0
    sent = {**(headers or {}), **({"Range": f"bytes={have}-"} if have else {})}
    name = part.name.removesuffix(".part")
    try:
        with httpx.stream("GET", url, headers=sent, timeout=timeout_s, follow_redirects=not headers) as response:
            if response.status_code == 416 and have:   # the part is already whole: the checksum decides
                return
            if response.status_code in (401, 403, 404):
                raise PlanError(f"{item.field}: {url} answered {response.status_code}",
                                fix="fix the source in the plan (the publisher's download link, the repository or "
                                    "its revision)")
            response.raise_for_status()
            resumed = response.status_code == 206
            done = have if resumed else 0
            total = int(response.headers.get("Content-Length", 0)) + done
            say(f"{name}: fetching {total:,} bytes from {url}" + (f", resuming after {have:,}" if resumed else ""))
            with part.open("ab" if resumed else "wb") as out:
                for block in response.iter_bytes(BLOCK):
                    out.write(block)
                    done += len(block)
                    meter(name, done, total if total >= done else 0)   # 0: the size is not known (chunked)
            meter(name, done, done)
    except httpx.HTTPStatusError as exc:
        raise StorageError(f"{item.field}: {url} answered {exc.response.status_code}",
                           fix="run podium fetch again later; what is downloaded is kept") from None
    except httpx.TransportError as exc:
        raise StorageError(f"{item.field}: cannot reach {url}: {exc}",
                           fix="check the network, then run podium fetch again: it resumes where it stopped") \
            from None


def _unpack(item: FetchItem, archive: Path, dest: Path, record: dict[str, Any]) -> Manifest:
    """Unpack into a fresh folder beside `dest`, write its manifest and record, then put it in `dest`'s place; the
    manifest. Whatever fails, the fresh folder goes."""
    work = dest.with_name(f".{dest.name}.unpacking")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        _unpack_into(item, archive, work)
        files = {}
        for folder, _, names in os.walk(work):   # links are not followed, nor listed: the manifest holds files
            for name in names:
                path = Path(folder) / name
                if path.is_file() and not path.is_symlink():
                    files[path.relative_to(work).as_posix()] = {"size": path.stat().st_size,
                                                                "sha256": sha256_file(path)}
        write_atomic(work / MANIFEST, json.dumps(files, indent=1, sort_keys=True))
        _write_json(work / FETCHED, {**record, "manifest_sha256": manifest_digest(files)})
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    if dest.exists():
        stale = dest.with_name(f".{dest.name}.stale-{time.time_ns()}")
        dest.rename(stale)
        shutil.rmtree(stale, ignore_errors=True)
    os.replace(work, dest)
    return files


def _unpack_into(item: FetchItem, archive: Path, work: Path) -> None:
    """The archive unpacked into `work` (tasks/staging/unpack.py), or deleted with the error that says why."""
    cap = item.source.max_unpacked_gib
    try:
        unpack(archive, work, int(cap * GIB))
    except Refused as e:
        archive.unlink(missing_ok=True)
        fix = (f"when the archive is what you expect, raise {item.field}.max_unpacked_gib (now {cap:g}) and run "
               "podium fetch again" if e.too_big else
               "fetch the publisher's own archive (a GitHub commit's archive holds folders, files and links that stay "
               "inside it); Podium unpacks no archive with such a member")
        raise PlanError(f"{item.field}: {archive.name} refused, nothing unpacked and the archive deleted: {e}",
                        where=str(archive), fix=fix) from None
    except (tarfile.TarError, OSError) as e:
        archive.unlink(missing_ok=True)
        raise ChecksumMismatch(f"{item.field}: {archive.name} cannot be unpacked ({e}); it was deleted",
                               where=str(archive), fix="run podium fetch again to fetch it afresh") from None


def _intact(folder: Path, files: Manifest) -> bool:
    return all((folder / rel).is_file() and (folder / rel).stat().st_size == meta.get("size")
               and sha256_file(folder / rel) == meta.get("sha256") for rel, meta in files.items())


def _size(files: Manifest) -> int:
    return sum(int(meta["size"]) for meta in files.values())


def _write_json(path: Path, data: dict) -> None:
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True))


def read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
