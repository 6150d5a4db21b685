"""`podium fetch` of a data set on MLCommons' storage (a `mlcommons_uri` source), read as MLCommons' R2 downloader
(mlcommons/r2-downloader, `mlc-r2-downloader.sh`) reads it; tasks/staging/fetch.py runs it.

The downloader's format, which anything else fails with an error naming the file:
- `<name>.uri`, the URL the plan names, holds one line: the data set's base URL (http(s), no query);
- `<name>.md5`, beside it (the same folder on the same host), lists every file in md5sum's format, one a line:
  `<32 lowercase hex digits>  <path>` (or ` *<path>`, md5sum's binary mark), the path relative to the base URL (a
  leading `./` dropped). The file is `<base URL>/<path>` and lands at `<destination>/<path>`; a path that is absolute,
  has a `..`, `.` or empty part, a backslash or a control character, or names Podium's own records, is refused before
  anything is fetched.

Each file lands through `<file>.part` (fetch_http's download: a Range request resumes what an interrupted call left)
and is placed only when its MD5 is the listing's; a mismatch deletes the download and names the file. `<name>.md5`
is kept in the folder, as the downloader keeps it (`md5sum -c <name>.md5` works there), and the folder holds
`.podium-manifest.json` (size and sha256 of every file: staging's format) and `.podium-fetch.json` (the .uri, the
base URL, each file's MD5, the manifest's digest). A later call hashes what is there and asks nothing of the network
when all of it matches; a file already there with its listed MD5 is kept; a file the listing does not name is left.

Cloudflare Access guards the storage. The credentials are a `cf-access-token` (CF_ACCESS_TOKEN: what `cloudflared
access token --app=<the .uri>` prints) or a service token (CF_ACCESS_CLIENT_ID and CF_ACCESS_CLIENT_SECRET, the
downloader's names for it), from the environment, else from the Prefect Secret blocks cf-access-token, or
cf-access-client-id and cf-access-client-secret. They go only to the .uri's host and the base URL's host, over https
(or to a loopback address), never along a redirect (the downloader follows none), and are never printed, logged or
recorded. PODIUM_MLCOMMONS_STORAGE_URL names a mirror: its URL takes the place of the .uri's scheme and host.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from urllib.parse import quote, urlsplit

from submission.base.errors import PlanError, StorageError
from submission.base.files import BLOCK, replace_atomic, write_atomic
from submission.base.hosts import loopback
from submission.plan.fetch import FetchItem
from tasks.staging.fetch_http import FETCHED, _download, _intact, read_json
from tasks.staging.progress import Meter
from tasks.staging.sources import MANIFEST, Manifest, manifest_digest
from tasks.staging.transfer import ChecksumMismatch

KIND = "mlcommons_uri"
MIRROR = "PODIUM_MLCOMMONS_STORAGE_URL"
TOKEN, CLIENT_ID, CLIENT_SECRET = "CF_ACCESS_TOKEN", "CF_ACCESS_CLIENT_ID", "CF_ACCESS_CLIENT_SECRET"
HEADERS = {TOKEN: "cf-access-token", CLIENT_ID: "CF-Access-Client-Id", CLIENT_SECRET: "CF-Access-Client-Secret"}
URI_BYTES, LISTING_BYTES = 64 << 10, 64 << 20   # the most a .uri (one URL) and a .md5 (~100 bytes a file) may weigh
LINE = re.compile(r"([0-9a-f]{32}) [ *](.+)")  # md5sum's line: the digest, a space, a space or `*`, the path
LOGIN = ("cloudflareaccess.com", "/cdn-cgi/access/login")   # where Cloudflare Access sends whom it does not let in
Say = Callable[[str], None]
ACCESS_FIX = ("export CF_ACCESS_TOKEN=$(cloudflared access token --app={uri}) after `cloudflared access login {uri}` "
              "(a token expires: print a fresh one), or a Cloudflare Access service token's CF_ACCESS_CLIENT_ID and "
              "CF_ACCESS_CLIENT_SECRET; or store them in the Prefect Secret blocks cf-access-token, or "
              "cf-access-client-id and cf-access-client-secret")


def block(name: str) -> str:
    """The Prefect Secret block read for a credential the environment does not set: CF_ACCESS_TOKEN ->
    cf-access-token."""
    return name.lower().replace("_", "-")


@dataclass(frozen=True)
class Access:
    """How to reach MLCommons' storage: a mirror (its URL in place of the .uri's scheme and host; None: the .uri's
    own) and the Cloudflare Access credentials (CF_ACCESS_* name -> value; none: nothing is sent), `source` saying
    where they came from, for the errors. The values are never printed (not in the repr either)."""

    mirror: str | None = None
    values: Mapping[str, str] = field(default_factory=dict, repr=False)
    source: str = ""

    def headers(self, item: FetchItem, url: str) -> dict[str, str]:
        """The headers that carry the credentials to `url`: over https, or to a loopback address."""
        if not self.values:
            return {}
        parts = urlsplit(url)
        if parts.scheme != "https" and not loopback(parts.hostname or ""):
            raise PlanError(f"{item.field}: {url} is plain http, and the Cloudflare Access credentials go over https "
                            "only", fix="name the https URL (in the plan's mlcommons_uri, or "
                                        "PODIUM_MLCOMMONS_STORAGE_URL for a mirror); a .uri naming an http base URL "
                                        "is MLCommons' to fix")
        return {HEADERS[name]: value for name, value in self.values.items()}


ANONYMOUS = Access()   # no mirror, no credentials


def access_from(env: Mapping[str, str], items: Iterable[FetchItem], server: Callable[[], bool]) -> Access:
    """The access `env` gives (PODIUM_MLCOMMONS_STORAGE_URL, CF_ACCESS_*), its credentials resolved only when an item
    is a `mlcommons_uri` source: from `env`, else, when it sets none and `server()` says a Prefect server is
    configured, from the Prefect Secret blocks. One form: a token, or a service token's id and secret both."""
    mirror = env.get(MIRROR) or None
    if not any(item.source.kind == KIND for item in items):
        return Access(mirror)
    values = {name: env[name] for name in HEADERS if env.get(name)}
    where = {name: name for name in values}
    if not values and server():
        from tasks.steps import secret_text  # Prefect, imported only when a block is read

        for name in HEADERS:
            value = secret_text(block(name), instead=f"export {name} instead")
            if value:
                values[name], where[name] = value, f"the Prefect Secret block {block(name)}"
    if TOKEN in values and len(values) > 1:
        raise PlanError(f"both a Cloudflare Access token ({where[TOKEN]}) and a service token "
                        f"({' and '.join(where[n] for n in (CLIENT_ID, CLIENT_SECRET) if n in values)}) are set",
                        fix=f"keep one: unset {TOKEN}, or {CLIENT_ID} and {CLIENT_SECRET}")
    if len(values) == 1 and TOKEN not in values:
        [have] = values
        missing = CLIENT_SECRET if have == CLIENT_ID else CLIENT_ID
        raise PlanError(f"{where[have]} is set without {missing}: a Cloudflare Access service token is both",
                        fix=f"export {missing} too (or store it in the Prefect Secret block {block(missing)})")
    return Access(mirror, values, " and ".join(where.values()))


def fetch_listing(item: FetchItem, dest: Path, access: Access, say: Say, meter: Meter,
                  timeout_s: float = 60.0) -> tuple[int, Manifest]:
    """Every file the listing of `item`'s .uri names, in the folder `dest`; (files fetched by this call, the listing
    among them, and the folder's manifest)."""
    uri = str(item.source.mlcommons_uri)
    name = PurePosixPath(urlsplit(uri).path).name.removesuffix(".uri")
    record, files = read_json(dest / FETCHED) or {}, read_json(dest / MANIFEST)
    known = files if files is not None and record.get(KIND) == uri \
        and record.get("manifest_sha256") == manifest_digest(files) else {}
    good = {rel for rel, meta in known.items() if _intact(dest, {rel: meta})}   # every byte read
    if known and good == set(known):
        say(f"{dest.name}: {len(known)} file(s) from {name}.uri verified, nothing to fetch")
        return 0, known
    if dest.exists() and not dest.is_dir():
        raise PlanError(f"{item.field}: {dest} is a file; a mlcommons_uri source lands in a folder",
                        fix="name the folder the data set's files go to (the plan's data set paths lie in it)")
    at = f"{access.mirror.rstrip('/')}{urlsplit(uri).path}" if access.mirror else uri
    base = parse_uri(item, at, _text(item, at, access, URI_BYTES, timeout_s))
    md5_url = f"{at.rsplit('/', 1)[0]}/{name}.md5"
    text = _text(item, md5_url, access, LISTING_BYTES, timeout_s)
    listing = parse_listing(item, md5_url, text, reserved=(f"{name}.md5", MANIFEST, FETCHED))
    say(f"{dest.name}: {len(listing)} file(s) listed by {md5_url}, base {base}")
    before = record.get("md5", {}) if known else {}
    out: Manifest = {}
    fetched = 0
    for n, (rel, md5) in enumerate(listing.items()):
        part = meter.within(n / len(listing), (n + 1) / len(listing))
        if rel in good and before.get(rel) == md5:
            out[rel] = known[rel]
        else:
            got = _digests(dest / rel) if (dest / rel).is_file() else None
            if got is None or got[0] != md5:
                got = _fetch_file(item, f"{base}/{quote(rel)}", dest / rel, rel, md5, access, say, part, timeout_s)
                fetched += 1
            out[rel] = {"size": (dest / rel).stat().st_size, "sha256": got[1]}
        part.item(1, 1)
    write_atomic(dest / f"{name}.md5", text)   # the listing, kept as the downloader keeps it
    out[f"{name}.md5"] = {"size": len(text.encode()), "sha256": hashlib.sha256(text.encode()).hexdigest()}
    write_atomic(dest / MANIFEST, json.dumps(out, indent=1, sort_keys=True))
    write_atomic(dest / FETCHED, json.dumps({KIND: uri, "base_url": base, "md5": listing,
                                             "manifest_sha256": manifest_digest(out)}, indent=1, sort_keys=True))
    say(f"{dest.name}: {len(listing)} file(s) from {name}.uri, each MD5 checked: {fetched} fetched, "
        f"{len(listing) - fetched} already there")
    return fetched + 1, out   # the listing is fetched too


def parse_uri(item: FetchItem, url: str, text: str) -> str:
    """The base URL a `.uri` holds (the downloader's format: one line, the URL), without a trailing slash."""
    line = text.rstrip("\r\n")
    parts = urlsplit(line)
    if any(c.isspace() for c in line) or parts.scheme not in ("http", "https") \
            or not parts.hostname or parts.query or parts.fragment:
        raise PlanError(f"{item.field}: {url} is not the R2 downloader's .uri (one line, the data set's http(s) base "
                        f"URL); it holds {text[:200]!r}",
                        fix="check mlcommons_uri in the plan: it names the <name>.uri the R2 downloader takes (the "
                            "round's README gives it)")
    return line.rstrip("/")


def parse_listing(item: FetchItem, url: str, text: str, reserved: tuple[str, ...]) -> dict[str, str]:
    """A `.md5` listing (md5sum's format, the downloader's) as path -> MD5, sorted; a line that is not md5sum's or a
    path that could land outside the folder or on Podium's records is refused, naming the line."""
    fix = "the listing is MLCommons': check mlcommons_uri in the plan (or the mirror, PODIUM_MLCOMMONS_STORAGE_URL)"
    listing: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        found = LINE.fullmatch(line.rstrip("\r"))
        if found is None:
            raise PlanError(f"{item.field}: {url} line {number} is not md5sum's `<md5>  <path>`: {line[:200]!r}; "
                            "nothing was fetched", fix=fix)
        md5, rel = found[1], found[2].removeprefix("./")
        problem = _unsafe(rel, reserved) or ("listed twice" if rel in listing else None)
        if problem:
            raise PlanError(f"{item.field}: {url} line {number} lists {rel!r}: {problem}; nothing was fetched",
                            fix=fix)
        listing[rel] = md5
    if not listing:
        raise PlanError(f"{item.field}: {url} lists no file", fix=fix)
    return dict(sorted(listing.items()))


def _unsafe(rel: str, reserved: tuple[str, ...]) -> str | None:
    if rel.startswith("/"):
        return "an absolute path"
    if "\\" in rel or any(ord(c) < 32 or ord(c) == 127 for c in rel):
        return "a backslash or a control character"
    if any(part in ("", ".", "..") for part in rel.split("/")):
        return "a `..`, `.` or empty part"
    if rel in reserved:
        return "the name of the listing or of Podium's own records"
    return None


def _fetch_file(item: FetchItem, url: str, path: Path, rel: str, md5: str, access: Access, say: Say, meter: Meter,
                timeout_s: float) -> tuple[str, str]:
    """`url` into `path` through `<path>.part` (resumed), placed only when its MD5 is `md5`; (MD5, sha256)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    try:
        _download(item, url, part, say, meter.bytes, timeout_s, headers=access.headers(item, url))
    except PlanError as e:   # 401, 403 or 404
        raise PlanError(e.message, fix="a 401 or 403: " + ACCESS_FIX.format(uri=item.source.mlcommons_uri)
                        + "; a 404: the listing names a file the storage does not hold (a mirror: copy it there)") \
            from None
    got = _digests(part)
    if got[0] != md5:
        part.unlink(missing_ok=True)
        raise ChecksumMismatch(f"{item.field}: {rel} from {url} has MD5 {got[0]}, its listing says {md5}; the download "
                               "was deleted and nothing placed", where=str(path),
                               fix="run podium fetch again; if it repeats, the storage (or a mirror, "
                                   "PODIUM_MLCOMMONS_STORAGE_URL) serves other bytes than its listing names")
    replace_atomic(part, path)
    return got


def _text(item: FetchItem, url: str, access: Access, limit: int, timeout_s: float) -> str:
    """A small text file of the storage (a .uri or a .md5), its access refusals named with the fix."""
    import httpx

    data = bytearray()
    try:
        with httpx.stream("GET", url, headers=access.headers(item, url), timeout=timeout_s) as response:
            status, location = response.status_code, response.headers.get("location", "")
            if status in (401, 403) or (response.is_redirect and any(mark in location for mark in LOGIN)):
                why = (f"the credentials in {access.source} were refused" if access.values else
                       f"no credentials are set ({TOKEN}, or {CLIENT_ID} and {CLIENT_SECRET})")
                how = "a redirect to Cloudflare Access' login" if response.is_redirect else str(status)
                raise PlanError(f"{item.field}: {url} refused access ({how}): {why}",
                                fix=ACCESS_FIX.format(uri=item.source.mlcommons_uri))
            if response.is_redirect or status == 404:
                raise PlanError(f"{item.field}: {url} answered {status}"
                                + (f", a redirect to {location} (the R2 downloader follows none)" if location else ""),
                                fix="check mlcommons_uri in the plan: the URL of the <name>.uri the R2 downloader "
                                    "takes, its <name>.md5 beside it")
            if status != 200:
                raise StorageError(f"{item.field}: {url} answered {status}", fix="run podium fetch again later")
            for chunk in response.iter_bytes():
                data += chunk
                if len(data) > limit:
                    raise PlanError(f"{item.field}: {url} is over {limit:,} bytes, not the R2 downloader's format",
                                    fix="check mlcommons_uri in the plan: the URL of a <name>.uri")
    except httpx.TransportError as exc:
        raise StorageError(f"{item.field}: cannot reach {url}: {exc}",
                           fix="check the network (or PODIUM_MLCOMMONS_STORAGE_URL, for a mirror), then run podium "
                               "fetch again: what is fetched and verified is kept") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise PlanError(f"{item.field}: {url} is not UTF-8 text, not the R2 downloader's format",
                        fix="check mlcommons_uri in the plan: the URL of a <name>.uri") from None


def _digests(path: Path) -> tuple[str, str]:
    """A file's MD5 (what the listing names) and sha256 (what Podium records), in one read."""
    md5, sha = hashlib.md5(usedforsecurity=False), hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(BLOCK), b""):
            md5.update(chunk)
            sha.update(chunk)
    return md5.hexdigest(), sha.hexdigest()
