"""`podium fetch`: a plan's inputs onto the cluster's storage, each from its source at its pin, verified, before any
GPU is allocated (the plan's `fetch` sections: submission/plan/fetch.py).

A Hugging Face repository lands whole in its destination folder, at the commit the plan or the round pins, through
`huggingface_hub` (`hf_hub_download` of each file, endpoint and token as given: HF_ENDPOINT and HF_TOKEN at the
CLI). Every file is verified against the hub's own listing at that commit: an LFS file's sha256, a small file's git
blob id. The folder then holds `.podium-manifest.json` (size and sha256 of every file, the format staging reads, so
staging it later reads no byte twice) and `.podium-fetch.json` (repository, type, commit, the manifest's digest).

A URL lands in its destination file through `<file>.part`, resumed with a Range request after an interruption, and is
placed only when its sha256 is the plan's; `<file>.podium-fetch.json` beside it records URL, size and sha256.

Each call verifies what is there (every byte hashed) and fetches only what is missing or differs: a second call
fetches nothing, a corrupt or deleted file is fetched again, and a call killed midway keeps every file that was
complete and verified. Nothing already fetched is deleted by an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from submission.base.errors import PlanError, StorageError
from submission.base.files import replace_atomic, sha256_file, write_atomic
from submission.plan.fetch import FetchItem
from tasks.staging.sources import MANIFEST, Manifest
from tasks.staging.transfer import ChecksumMismatch

FETCHED = ".podium-fetch.json"            # in a fetched folder (beside a fetched file: <file>.podium-fetch.json)
HF_CACHE = ".cache"                       # huggingface_hub's download metadata inside a local_dir
BLOCK = 1 << 20
Say = Callable[[str], None]
TOKEN_FIX = ("export HF_TOKEN=<a read token of a Hugging Face account that may read {repo}; for a gated repository, "
             "accept its terms at https://huggingface.co/{path} first>")


@dataclass(frozen=True)
class Hub:
    """How to reach Hugging Face: the endpoint (None: https://huggingface.co) and the token (None: none is sent; a
    login stored by `hf auth login` is not used, so what is sent is what HF_TOKEN says)."""

    endpoint: str | None = None
    token: str | None = None


@dataclass(frozen=True)
class Fetched:
    dest: str
    source: str              # huggingface:<repo> or the URL
    revision: str | None     # the commit of a repository
    files: int
    bytes: int
    fetched: int             # files downloaded by this call
    kept: int                # files already there and verified


def placed(dest: str, root: Path | None) -> Path:
    """Where `dest` lands: as written, or under `root` (an absolute destination keeps its whole path there)."""
    path = Path(dest)
    if root is None:
        return path
    return Path(root) / (path.relative_to(path.anchor) if path.is_absolute() else path)


def fetch_all(items: Iterable[FetchItem], *, root: Path | None = None, hub: Hub = Hub(),
              say: Say = print) -> list[Fetched]:
    """Fetch (or verify) every item, in the plan's order."""
    out = []
    for item in items:
        dest = placed(item.dest, root)
        out.append(fetch_repo(item, dest, hub, say) if item.source.repo else fetch_url(item, dest, say))
    return out


# ----- Hugging Face repositories ------------------------------------------------------------------------------


def fetch_repo(item: FetchItem, dest: Path, hub: Hub, say: Say) -> Fetched:
    src, commit = item.source, str(item.revision)
    label = f"{src.repo}@{commit[:12]}"
    known = recorded(dest, item)
    good = {rel for rel, meta in (known or {}).items() if intact(dest / rel, meta)}
    if known is not None and good == set(known):
        say(f"{label}: {len(known)} file(s) in {dest} verified, nothing to fetch")
        return _fetched(item, dest, known, fetched=0)
    if known is not None:
        say(f"{label}: {len(set(known) - good)} file(s) in {dest} missing or changed: fetching them again")
    listing = _listing(item, hub)
    files: Manifest = {}
    fetched = 0
    for n, (rel, entry) in enumerate(sorted(listing.items()), 1):
        path = dest / rel
        if rel in good and known[rel]["size"] == entry.size:
            files[rel] = known[rel]
            continue
        sha = _matching(path, entry) if path.is_file() and path.stat().st_size == entry.size else None
        if sha is None:
            say(f"{label}: fetching {rel} ({entry.size:,} bytes; file {n} of {len(listing)})")
            path.unlink(missing_ok=True)
            _download(item, rel, dest, hub)
            sha = _matching(path, entry)
            if sha is None:
                path.unlink(missing_ok=True)
                raise ChecksumMismatch(f"{item.field}: {rel} from {src.repo} at {commit} does not match the hub's "
                                       "checksum for it; the download was deleted", where=str(dest),
                                       fix="run podium fetch again; if it repeats, the hub or a proxy on the way "
                                           "serves other bytes (check HF_ENDPOINT)")
            fetched += 1
        files[rel] = {"size": entry.size, "sha256": sha}
    _record(dest, item, files)
    kept = len(files) - fetched
    say(f"{label}: {len(files)} file(s) in {dest}: {fetched} fetched, {kept} already there and verified")
    return _fetched(item, dest, files, fetched=fetched)


def recorded(dest: Path, item: FetchItem) -> Manifest | None:
    """The manifest a previous fetch of this very source and commit left in `dest`, or None."""
    from tasks.staging.stage import manifest_digest

    record, files = _json(dest / FETCHED), _json(dest / MANIFEST)
    want = _identity(item)
    if record is None or files is None or {k: record.get(k) for k in want} != want:
        return None
    return files if record.get("manifest_sha256") == manifest_digest(files) else None


def intact(path: Path, meta: dict[str, Any]) -> bool:
    """Whether the file is there with the recorded size and sha256 (every byte read)."""
    return path.is_file() and path.stat().st_size == meta.get("size") and sha256_file(path) == meta.get("sha256")


def _identity(item: FetchItem) -> dict[str, Any]:
    src = item.source
    return {"hub": src.hub, "repo": src.repo, "repo_type": src.repo_type, "revision": item.revision}


def _record(dest: Path, item: FetchItem, files: Manifest) -> None:
    """The manifest (staging's format), then the record that vouches for it."""
    from tasks.staging.stage import manifest_digest

    write_atomic(dest / MANIFEST, json.dumps(files, indent=1, sort_keys=True))
    write_atomic(dest / FETCHED, json.dumps({**_identity(item), "manifest_sha256": manifest_digest(files)},
                                            indent=1, sort_keys=True))


def _fetched(item: FetchItem, dest: Path, files: Manifest, fetched: int) -> Fetched:
    return Fetched(str(dest), item.source.describe(), item.revision, len(files),
                   sum(int(m["size"]) for m in files.values()), fetched, len(files) - fetched)


def _matching(path: Path, entry: Any) -> str | None:
    """The file's sha256 when it is the hub's file (LFS: its sha256; else its git blob id), else None."""
    if entry.lfs is not None:
        sha = sha256_file(path)
        return sha if sha == entry.lfs.sha256 else None
    data = path.read_bytes()   # a file outside LFS is small (the hub stores anything large in LFS)
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()   # git's object id of the file
    return hashlib.sha256(data).hexdigest() if blob == entry.blob_id else None


def _listing(item: FetchItem, hub: Hub) -> dict[str, Any]:
    """Every file of the repository at the commit (path -> the hub's RepoFile: size, blob id, LFS sha256)."""
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile

    api = HfApi(endpoint=hub.endpoint, token=hub.token or False)
    src = item.source
    with _hub_errors(item, hub):
        api.repo_info(src.repo, repo_type=src.repo_type, revision=item.revision)   # a wrong commit fails here
        tree = api.list_repo_tree(src.repo, repo_type=src.repo_type, revision=item.revision, recursive=True)
        return {f.path: f for f in tree if isinstance(f, RepoFile)}


def _download(item: FetchItem, rel: str, dest: Path, hub: Hub) -> None:
    from huggingface_hub import hf_hub_download

    src = item.source
    with _hub_errors(item, hub):
        hf_hub_download(src.repo, rel, repo_type=src.repo_type, revision=item.revision, local_dir=dest,
                        endpoint=hub.endpoint, token=hub.token or False)


@contextlib.contextmanager
def _hub_errors(item: FetchItem, hub: Hub) -> Iterator[None]:
    """Translate huggingface_hub's errors into Podium's, each naming the item and the fix."""
    import httpx2
    from huggingface_hub import errors as hf

    src = item.source
    endpoint = hub.endpoint or "https://huggingface.co"
    try:
        yield
    except hf.RevisionNotFoundError:
        raise PlanError(f"{item.field}: {src.repo} has no revision {item.revision} on {endpoint}",
                        fix="write the full commit from the repository's history as revision (a repository the "
                            "round pins takes the rules' commit: remove revision)") from None
    except (hf.HfHubHTTPError, httpx2.TransportError, hf.LocalEntryNotFoundError) as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if isinstance(exc, hf.GatedRepoError) or status in (401, 403):
            token = "HF_TOKEN is not set" if not hub.token else "the token in HF_TOKEN was refused"
            path = f"datasets/{src.repo}" if src.repo_type == "dataset" else src.repo
            raise PlanError(f"{item.field}: {endpoint} refused access to {src.repo} ({status}): {token} (the hub "
                            "answers so for a repository that does not exist too)",
                            fix=TOKEN_FIX.format(repo=src.repo, path=path)) from None
        if isinstance(exc, hf.RepositoryNotFoundError):
            raise PlanError(f"{item.field}: no {src.repo_type} repository {src.repo} on {endpoint}",
                            fix="fix repo (owner/name) and repo_type (model or dataset)") from None
        raise StorageError(f"{item.field}: cannot reach the hub at {endpoint} for {src.repo}: "
                           f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                           fix="check the network (or HF_ENDPOINT, for a mirror), then run podium fetch again: "
                               "what is already fetched and verified is kept") from None


# ----- plain URLs ---------------------------------------------------------------------------------------------


def fetch_url(item: FetchItem, dest: Path, say: Say, timeout_s: float = 60.0) -> Fetched:
    src = item.source
    want = str(src.sha256)
    record = dest.with_name(dest.name + FETCHED)
    if dest.is_file() and sha256_file(dest) == want:
        _record_url(record, item, dest)
        say(f"{dest.name}: verified (sha256 {want[:12]}), nothing to fetch")
        return Fetched(str(dest), str(src.url), None, 1, dest.stat().st_size, 0, 1)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    _download_url(item, part, say, timeout_s)
    got = sha256_file(part)
    if got != want:
        part.unlink(missing_ok=True)
        raise ChecksumMismatch(f"{item.field}: {src.url} has sha256 {got}, the plan says {want}; the download was "
                               "deleted", where=str(dest),
                               fix="check url and sha256 in the plan against the publisher's checksums")
    replace_atomic(part, dest)
    _record_url(record, item, dest)
    say(f"{dest.name}: fetched and verified (sha256 {want[:12]})")
    return Fetched(str(dest), str(src.url), None, 1, dest.stat().st_size, 1, 0)


def _record_url(record: Path, item: FetchItem, dest: Path) -> None:
    write_atomic(record, json.dumps({"url": item.source.url, "sha256": item.source.sha256,
                                     "size": dest.stat().st_size}, indent=1, sort_keys=True))


def _download_url(item: FetchItem, part: Path, say: Say, timeout_s: float) -> None:
    """Into `part`, continuing what an interrupted call left there when the server honours the Range."""
    import httpx

    url = str(item.source.url)
    have = part.stat().st_size if part.is_file() else 0
    headers = {"Range": f"bytes={have}-"} if have else {}
    try:
        with httpx.stream("GET", url, headers=headers, timeout=timeout_s, follow_redirects=True) as response:
            if response.status_code == 416 and have:   # the part is already whole: the checksum decides
                return
            if response.status_code in (401, 403, 404):
                raise PlanError(f"{item.field}: {url} answered {response.status_code}",
                                fix="fix the url in the plan (the publisher's download link)")
            response.raise_for_status()
            resumed = response.status_code == 206
            total = int(response.headers.get("Content-Length", 0)) + (have if resumed else 0)
            say(f"{part.name.removesuffix('.part')}: fetching {total:,} bytes from {url}"
                + (f", resuming after {have:,}" if resumed else ""))
            with part.open("ab" if resumed else "wb") as out:
                for block in response.iter_bytes(BLOCK):
                    out.write(block)
    except httpx.HTTPStatusError as exc:
        raise StorageError(f"{item.field}: {url} answered {exc.response.status_code}",
                           fix="run podium fetch again later; what is downloaded is kept") from None
    except httpx.TransportError as exc:
        raise StorageError(f"{item.field}: cannot reach {url}: {exc}",
                           fix="check the network, then run podium fetch again: it resumes where it stopped") \
            from None


def _json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
