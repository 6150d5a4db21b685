"""A local stand-in for the Hugging Face Hub on 127.0.0.1: the part of its HTTP API that `huggingface_hub` uses to
fetch a repository at a commit (read from huggingface_hub 2.4's hf_api.py and file_download.py), plus plain files
for URL fetches.

- `GET /api/{models|datasets}/{repo}/revision/{rev}`: the repository's info, `sha` the commit (404 with
  X-Error-Code RepoNotFound or RevisionNotFound otherwise);
- `GET /api/{models|datasets}/{repo}/tree/{rev}?recursive=...`: every file with its size, git blob id and, for an LFS
  file, its sha256 (`lfs.oid`), one page;
- `HEAD|GET /[datasets/]{repo}/resolve/{rev}/{path}`: the file with X-Repo-Commit, ETag (X-Linked-Etag and
  X-Linked-Size for an LFS file) and Content-Length; a GET honours a Range;
- `GET /files/{name}`: a plain file, with Range; GitHub's archives of commits under `/files/github/`
  (`github_url` stands for https://github.com: `{github_url}/{owner}/{name}/archive/{commit}.tar.gz`).

`token`: when set, every request without `Authorization: Bearer <token>` gets 401. `downloads` counts the GETs of
each file's bytes (`resolve` and `files`); `sent` records each such GET as (file, its Range header or None, the bytes
sent); `corrupt` names files served with one byte flipped. `commit_archive`
builds a tar.gz as `git archive` does (GitHub's archives are its output): one top folder, the commit in the pax
global header's comment.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from collections import Counter
from http.server import BaseHTTPRequestHandler
from urllib.parse import unquote, urlsplit

from tests.local_http import LocalServer

LFS_SUFFIXES = (".safetensors", ".parquet", ".bin")


def git_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class FakeHub(LocalServer):
    def __init__(self) -> None:
        self.repos: dict[tuple[str, str], dict[str, dict[str, bytes]]] = {}   # (type, repo) -> commit -> files
        self.files: dict[str, bytes] = {}
        self.token: str | None = None
        self.corrupt: set[str] = set()
        self.downloads: Counter[str] = Counter()
        self.sent: list[tuple[str, str | None, int]] = []
        super().__init__(Handler)

    @property
    def github_url(self) -> str:
        return f"{self.url}/files/github"

    def add(self, repo: str, commit: str, files: dict[str, bytes], repo_type: str = "model") -> None:
        self.repos.setdefault((repo_type, repo), {})[commit] = files

    def github(self, repo: str, commit: str, archive: bytes) -> str:
        """Serve `archive` as GitHub's archive of `repo` (owner/name) at `commit`; the key `downloads` counts."""
        key = f"github/{repo}/archive/{commit}.tar.gz"
        self.files[key] = archive
        return key


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, body: bool) -> None:
        hub = self.server.fake   # type: ignore[attr-defined]
        if hub.token and self.headers.get("Authorization") != f"Bearer {hub.token}":
            return self._reply(401, b"", {"X-Error-Message": "Invalid credentials in Authorization header"})
        path = unquote(urlsplit(self.path).path)
        api = re.fullmatch(r"/api/(models|datasets)/([^/]+/[^/]+)/(revision|tree)/([^/]+)", path)
        resolve = re.fullmatch(r"/(datasets/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if api:
            kind, repo, what, rev = api.groups()
            return self._api(kind.removesuffix("s"), repo, what, rev)
        if resolve:
            kind, repo, rev, name = resolve.groups()
            files = self._commit("dataset" if kind else "model", repo, rev)
            if files is None:
                return None
            if name not in files:
                return self._reply(404, b"", {"X-Error-Code": "EntryNotFound"})
            data = files[name]
            lfs = name.endswith(LFS_SUFFIXES)
            headers = {"X-Repo-Commit": rev, "ETag": f'"{git_blob(data)}"'}
            if lfs:
                headers |= {"X-Linked-Etag": f'"{hashlib.sha256(data).hexdigest()}"',
                            "X-Linked-Size": str(len(data))}
            return self._bytes(f"{repo}/{name}", data, headers, body)
        if path.startswith("/files/") and path[len("/files/"):] in hub.files:
            name = path[len("/files/"):]
            return self._bytes(name, hub.files[name], {"ETag": f'"{git_blob(hub.files[name])}"'}, body)
        return self._reply(404, b"")

    def _commit(self, repo_type: str, repo: str, rev: str) -> dict[str, bytes] | None:
        hub = self.server.fake   # type: ignore[attr-defined]
        commits = hub.repos.get((repo_type, repo))
        if commits is None:
            self._reply(404, b"", {"X-Error-Code": "RepoNotFound"})
            return None
        if rev not in commits:
            self._reply(404, b"", {"X-Error-Code": "RevisionNotFound"})
            return None
        return commits[rev]

    def _api(self, repo_type: str, repo: str, what: str, rev: str) -> None:
        files = self._commit(repo_type, repo, rev)
        if files is None:
            return
        if what == "revision":
            info = {"id": repo, "sha": rev, "siblings": [{"rfilename": name} for name in sorted(files)]}
            return self._reply(200, json.dumps(info).encode(), {"Content-Type": "application/json"})
        entries = []
        for name in sorted({str(p) for n in files for p in _parents(n)}):
            entries.append({"type": "directory", "oid": "0" * 40, "size": 0, "path": name})
        for name, data in sorted(files.items()):
            entry = {"type": "file", "oid": git_blob(data), "size": len(data), "path": name}
            if name.endswith(LFS_SUFFIXES):
                entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
            entries.append(entry)
        self._reply(200, json.dumps(entries).encode(), {"Content-Type": "application/json"})

    def _bytes(self, key: str, data: bytes, headers: dict[str, str], body: bool) -> None:
        hub = self.server.fake   # type: ignore[attr-defined]
        if key in hub.corrupt:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        start = 0
        ranged = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
        if body:
            hub.downloads[key] += 1
        if ranged and body:
            start = int(ranged.group(1))
            if start >= len(data):
                hub.sent.append((key, self.headers["Range"], 0))
                return self._reply(416, b"", {"Content-Range": f"bytes */{len(data)}"})
            headers = headers | {"Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"}
            hub.sent.append((key, self.headers["Range"], len(data) - start))
            return self._reply(206, data[start:], headers)
        if body:
            hub.sent.append((key, self.headers.get("Range"), len(data)))
        self._reply(200, data if body else b"", headers, length=len(data))

    def _reply(self, status: int, data: bytes, headers: dict[str, str] | None = None,
               length: int | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data) if length is None else length))
        self.end_headers()
        if data and self.command != "HEAD":
            self.wfile.write(data)


def _parents(name: str) -> list[str]:
    parts = name.split("/")[:-1]
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def commit_archive(commit: str, files: dict[str, bytes], top: str = "repo") -> bytes:
    """A tar.gz shaped like `git archive --prefix=<top>-<commit>/ <commit>`'s output."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz", format=tarfile.PAX_FORMAT, pax_headers={"comment": commit}) as tar:
        folder = tarfile.TarInfo(f"{top}-{commit}")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        for name, data in sorted(files.items()):
            entry = tarfile.TarInfo(f"{top}-{commit}/{name}")
            entry.size = len(data)
            tar.addfile(entry, io.BytesIO(data))
    return out.getvalue()
