"""`podium fetch`: a plan's inputs onto the cluster's storage, each from its source at its pin, verified, before any
GPU is allocated (the plan's `fetch` sections: submission/plan/fetch.py). Plain URLs and archives are
tasks/staging/fetch_http.py's, data sets on MLCommons' storage tasks/staging/fetch_r2.py's.

A Hugging Face repository lands whole in its destination folder, at the commit the plan or the round pins, through
`huggingface_hub` (`hf_hub_download` of each file, endpoint and token as given: HF_ENDPOINT, and HF_TOKEN or a Prefect
Secret block, at the CLI). Every file is verified against the hub's own listing at that commit: an LFS file's sha256,
a small file's git blob id. The folder then holds `.podium-manifest.json` (size and sha256 of every file, the format
staging reads, so staging it later reads no byte twice) and `.podium-fetch.json` (repository, type, commit, the
manifest's digest).

A LiveCodeBench release lands as one JSON-lines file (tasks/accuracy/lcb_convert.py): its files from the hub, at
the round's commit, in `<file>.source/` as above (only the release's files), converted into the destination;
`<file>.podium-fetch.json` records the release, commit, the source manifest's digest, the converter's format and the
output's size and sha256.

Each call verifies what is there (every byte hashed) and fetches only what is missing or differs: a second call
fetches nothing, a corrupt or deleted file is fetched again, and a call killed midway keeps every file that was
complete and verified. Nothing already fetched is deleted by an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from submission.base.errors import PlanError, StorageError
from submission.base.files import sha256_file, write_atomic
from submission.plan.fetch import FetchItem, FetchSource
from tasks.staging.fetch_http import FETCHED, GITHUB, fetch_archive, fetch_url, read_json
from tasks.staging.fetch_r2 import ANONYMOUS, Access, fetch_listing
from tasks.staging.progress import QUIET, Meter, Progress
from tasks.staging.sources import MANIFEST, Manifest, manifest_digest
from tasks.staging.transfer import ChecksumMismatch

SOURCE = ".source"                        # <file>.source/: the release files a converted file is made from
SECRET = "hf-token"                       # the Prefect Secret block read for the hub's token when HF_TOKEN is unset
Say = Callable[[str], None]
TOKEN_FIX = ("export HF_TOKEN=<a read token of a Hugging Face account that may read {repo}> (or store it in the "
             "Prefect Secret block {secret}); for a gated repository, accept its terms at "
             "https://huggingface.co/{path} first")


@dataclass(frozen=True)
class Hub:
    """How to reach Hugging Face: the endpoint (None: https://huggingface.co) and the token (None: none is sent; a
    login stored by `hf auth login` is not used, so what is sent is what the caller resolved), `token_from` saying
    where the token came from, for the errors. The token is never printed (not in repr either)."""

    endpoint: str | None = None
    token: str | None = field(default=None, repr=False)
    token_from: str = "HF_TOKEN"
    secret: str = SECRET


@dataclass(frozen=True)
class Fetched:
    dest: str
    source: str              # huggingface:<repo>, github:<owner/name>, livecodebench:<release> or the URL
    revision: str | None     # the commit of a repository
    files: int
    bytes: int
    fetched: int             # files downloaded (or converted) by this call
    kept: int                # files already there and verified


def placed(dest: str, root: Path | None) -> Path:
    """Where `dest` lands: as written, or under `root` (an absolute destination keeps its whole path there)."""
    path = Path(dest)
    if root is None:
        return path
    return Path(root) / (path.relative_to(path.anchor) if path.is_absolute() else path)


def fetch_all(items: Iterable[FetchItem], *, root: Path | None = None, hub: Hub = Hub(), github: str = GITHUB,
              access: Access = ANONYMOUS, say: Say = print, progress: Progress = QUIET) -> list[Fetched]:
    """Fetch (or verify) every item, in the plan's order (`access`: MLCommons' storage, tasks/staging/fetch_r2.py)."""
    items = list(items)
    out = []
    for i, item in enumerate(items):
        dest, meter = placed(item.dest, root), Meter(progress, i, len(items))
        kind = item.source.kind
        if kind == "repo":
            out.append(fetch_repo(item, dest, hub, say, meter))
        elif kind == "livecodebench":
            out.append(fetch_livecodebench(item, dest, hub, say, meter))
        elif kind == "mlcommons_uri":
            fetched, files = fetch_listing(item, dest, access, say, meter)
            out.append(_fetched(item, dest, files, fetched))
        elif kind == "url":
            fetched, size = fetch_url(item, dest, say, meter.bytes)
            out.append(Fetched(str(dest), item.source.describe(), None, 1, size, fetched, 1 - fetched))
        else:
            fetched, files, size = fetch_archive(item, dest, say, meter.bytes, github)
            out.append(Fetched(str(dest), item.source.describe(), item.revision, files + 1, size, fetched,
                               files + 1 - fetched))   # the archive is a file too
        meter.item(1, 1)
    return out


def hub_from(env: Mapping[str, str], secret: str | None) -> Hub:
    """The hub as the environment `env` names it (HF_ENDPOINT, HF_TOKEN), the token read from the Prefect Secret
    block `secret` when HF_TOKEN is unset (None: not asked)."""
    token, token_from = hub_token(env.get("HF_TOKEN") or None, secret)
    return Hub(env.get("HF_ENDPOINT") or None, token, token_from, secret or SECRET)


def hub_token(env_token: str | None, secret: str | None) -> tuple[str | None, str]:
    """The hub's token and where it came from: HF_TOKEN's value when set, else the Prefect Secret block `secret`'s
    (None: not asked, e.g. no Prefect server is configured), else none (and HF_TOKEN, unset, named)."""
    if env_token:
        return env_token, "HF_TOKEN"
    if secret is None:
        return None, "HF_TOKEN"
    from tasks.steps import secret_text  # Prefect, imported only when a block is read

    value = secret_text(secret, instead="export HF_TOKEN instead")
    return (value, f"the Prefect Secret block {secret}") if value else (None, "HF_TOKEN")


# ----- Hugging Face repositories ------------------------------------------------------------------------------


def fetch_repo(item: FetchItem, dest: Path, hub: Hub, say: Say, meter: Meter, only: tuple[str, ...] = ()) -> Fetched:
    """The repository of `item` (of its files, the ones named in `only` when given) in the folder `dest`."""
    src, commit = item.source, str(item.revision)
    label = f"{src.repo}@{commit[:12]}"
    known = recorded(dest, item, only)
    good = {rel for rel, meta in (known or {}).items() if intact(dest / rel, meta)}
    if known is not None and good == set(known):
        say(f"{label}: {len(known)} file(s) in {dest} verified, nothing to fetch")
        return _fetched(item, dest, known, fetched=0)
    if known is not None:
        say(f"{label}: {len(set(known) - good)} file(s) in {dest} missing or changed: fetching them again")
    listing = _listing(item, hub)
    if only:
        missing = [name for name in only if name not in listing]
        if missing:
            raise PlanError(f"{item.field}: {src.repo} at {commit} has no {', '.join(missing)}",
                            fix="check the revision: the round's rules pin the commit that holds these files")
        listing = {name: listing[name] for name in only}
    total = sum(entry.size for entry in listing.values())
    files: Manifest = {}
    fetched = done = 0
    for n, (rel, entry) in enumerate(sorted(listing.items()), 1):
        path = dest / rel
        if rel in good and known[rel]["size"] == entry.size:
            files[rel] = known[rel]
        else:
            sha = _matching(path, entry) if path.is_file() and path.stat().st_size == entry.size else None
            if sha is None:
                say(f"{label}: fetching {rel} ({entry.size:,} bytes; file {n} of {len(listing)})")
                path.unlink(missing_ok=True)
                _download(item, rel, dest, hub)
                sha = _matching(path, entry)
                if sha is None:
                    path.unlink(missing_ok=True)
                    raise ChecksumMismatch(f"{item.field}: {rel} from {src.repo} at {commit} does not match the "
                                           "hub's checksum for it; the download was deleted", where=str(dest),
                                           fix="run podium fetch again; if it repeats, the hub or a proxy on the way "
                                               "serves other bytes (check HF_ENDPOINT)")
                fetched += 1
            files[rel] = {"size": entry.size, "sha256": sha}
        done += entry.size
        meter.item(done, total)
    _record(dest, item, files, only)
    kept = len(files) - fetched
    say(f"{label}: {len(files)} file(s) in {dest}: {fetched} fetched, {kept} already there and verified")
    return _fetched(item, dest, files, fetched=fetched)


def recorded(dest: Path, item: FetchItem, only: tuple[str, ...] = ()) -> Manifest | None:
    """The manifest a previous fetch of this very source, commit (and file selection) left in `dest`, or None."""
    record, files = read_json(dest / FETCHED), read_json(dest / MANIFEST)
    want = _identity(item, only)
    if record is None or files is None or {k: record.get(k) for k in want} != want:
        return None
    return files if record.get("manifest_sha256") == manifest_digest(files) else None


def intact(path: Path, meta: dict[str, Any]) -> bool:
    """Whether the file is there with the recorded size and sha256 (every byte read)."""
    return path.is_file() and path.stat().st_size == meta.get("size") and sha256_file(path) == meta.get("sha256")


def _identity(item: FetchItem, only: tuple[str, ...] = ()) -> dict[str, Any]:
    src = item.source
    return {"hub": src.hub, "repo": src.repo, "repo_type": src.repo_type, "revision": item.revision,
            **({"files": list(only)} if only else {})}


def _record(dest: Path, item: FetchItem, files: Manifest, only: tuple[str, ...] = ()) -> None:
    """The manifest (staging's format), then the record that vouches for it."""
    write_atomic(dest / MANIFEST, json.dumps(files, indent=1, sort_keys=True))
    write_atomic(dest / FETCHED, json.dumps({**_identity(item, only), "manifest_sha256": manifest_digest(files)},
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
            token = f"{hub.token_from} is not set" if not hub.token else f"the token in {hub.token_from} was refused"
            path = f"datasets/{src.repo}" if src.repo_type == "dataset" else src.repo
            raise PlanError(f"{item.field}: {endpoint} refused access to {src.repo} ({status}): {token} (the hub "
                            "answers so for a repository that does not exist too)",
                            fix=TOKEN_FIX.format(repo=src.repo, path=path, secret=hub.secret)) from None
        if isinstance(exc, hf.RepositoryNotFoundError):
            raise PlanError(f"{item.field}: no {src.repo_type} repository {src.repo} on {endpoint}",
                            fix="fix repo (owner/name) and repo_type (model or dataset)") from None
        raise StorageError(f"{item.field}: cannot reach the hub at {endpoint} for {src.repo}: "
                           f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                           fix="check the network (or HF_ENDPOINT, for a mirror), then run podium fetch again: "
                               "what is already fetched and verified is kept") from None


# ----- LiveCodeBench releases ---------------------------------------------------------------------------------


def fetch_livecodebench(item: FetchItem, dest: Path, hub: Hub, say: Say, meter: Meter) -> Fetched:
    """The release's files into `<dest>.source/`, converted into `dest` unless a verified conversion of these very
    files is there."""
    from tasks.accuracy.lcb_convert import FORMAT, convert

    source = dest.with_name(dest.name + SOURCE)
    raw = FetchItem(item.field, str(source), FetchSource(repo=item.repo, repo_type="dataset", revision=item.revision),
                    item.revision, item.repo)
    got = fetch_repo(raw, source, hub, say, meter.within(0.0, 0.8), only=item.files)
    files = recorded(source, raw, item.files) or {}
    want = {"livecodebench": item.source.livecodebench, "repo": item.repo, "revision": item.revision,
            "format": FORMAT, "source_manifest_sha256": manifest_digest(files)}
    record_path = dest.with_name(dest.name + FETCHED)
    record = read_json(record_path) or {}
    if {k: record.get(k) for k in want} == want and intact(dest, record):
        say(f"{dest.name}: {record.get('problems')} problem(s) converted from {item.repo}@{str(item.revision)[:12]} "
            f"verified (sha256 {record['sha256'][:12]}), nothing to convert")
        return Fetched(str(dest), item.source.describe(), item.revision, got.files + 1, got.bytes + record["size"],
                       got.fetched, got.kept + 1)   # the converted file counts as one
    say(f"{dest.name}: converting {item.source.livecodebench} ({len(item.files)} file(s), {got.bytes:,} bytes)")
    done = convert([source / name for name in item.files], dest,
                   lambda d, t: meter.within(0.8, 1.0).bytes(f"converting {item.source.livecodebench}", d, t))
    write_atomic(record_path, json.dumps({**want, "sha256": done.sha256, "size": done.bytes, "problems": done.problems,
                                          "questions": done.questions, "tests": done.tests}, indent=1, sort_keys=True))
    say(f"{dest.name}: {done.problems} problem(s), {done.tests} test(s), sha256 {done.sha256[:12]}")
    return Fetched(str(dest), item.source.describe(), item.revision, got.files + 1, got.bytes + done.bytes,
                   got.fetched + 1, got.kept)
