"""A local stand-in for MLCommons' storage behind Cloudflare Access, on 127.0.0.1: what MLCommons' R2 downloader reads
(mlcommons/r2-downloader's mlc-r2-downloader.sh) and what `podium fetch` of a `mlcommons_uri` reads.

- `publish(name, files)` serves `/metadata/<name>.uri` (one line: the base URL, `<url>/<name>` or another server's)
  and `/metadata/<name>.md5` (md5sum's lines, `<md5>  <path>`), and each file at `<base>/<path>`;
- `GET` of any path honours `Range: bytes=N-` (206, or 416 past the end);
- Cloudflare Access: every request must carry `cf-access-token: <token>` or `CF-Access-Client-Id`/
  `CF-Access-Client-Secret: <client>`; one without either is answered `refusal` (403, or 302: a redirect to the
  Access login page, as Cloudflare answers a request it does not let in);
- `requests` records each request (path, headers in lower case), `served` the body bytes sent per path, `corrupt`
  names files served with one byte flipped, `redirect` maps a path to a URL answered with 302;
- `stall`: (path, bytes) sends the first `bytes` of that file, then holds the connection until `release` is set (a
  download a test kills midway, with no timing).
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler
from urllib.parse import unquote, urlsplit

from tests.local_http import LocalServer

LOGIN = "https://mlcommons.cloudflareaccess.com/cdn-cgi/access/login/inference.mlcommons-storage.org"


def md5_listing(files: dict[str, bytes]) -> str:
    """md5sum's output for `files` (what the downloader's `<name>.md5` holds)."""
    return "".join(f"{hashlib.md5(data).hexdigest()}  {path}\n" for path, data in sorted(files.items()))


class FakeR2(LocalServer):
    def __init__(self, token: str | None = None, client: tuple[str, str] | None = None) -> None:
        self.token, self.client = token, client
        self.files: dict[str, bytes] = {}
        self.refusal = 403
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.served: Counter[str] = Counter()
        self.corrupt: set[str] = set()
        self.redirect: dict[str, str] = {}
        self.stall: tuple[str, int] | None = None
        self.release = threading.Event()
        super().__init__(Handler)

    def publish(self, name: str, files: dict[str, bytes], base: str | None = None, listing: str | None = None) -> str:
        """Serve a data set: its .uri (naming `base`, default this server's `/<name>`), its .md5 (`listing`, default
        md5sum's of `files`) and, under this server's `/<name>/`, its files; the .uri's URL."""
        self.files[f"metadata/{name}.uri"] = f"{base or f'{self.url}/{name}'}\n".encode()
        self.files[f"metadata/{name}.md5"] = (listing if listing is not None else md5_listing(files)).encode()
        for path, data in files.items():
            self.files[f"{name}/{path}"] = data
        return f"{self.url}/metadata/{name}.uri"

    def paths(self) -> list[str]:
        return [path for path, _ in self.requests]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        r2: FakeR2 = self.server.fake   # type: ignore[attr-defined]
        path = unquote(urlsplit(self.path).path).lstrip("/")
        headers = {k.lower(): v for k, v in self.headers.items()}
        r2.requests.append((path, headers))
        let_in = ((r2.token is None and r2.client is None)
                  or (r2.token is not None and headers.get("cf-access-token") == r2.token)
                  or (r2.client is not None and (headers.get("cf-access-client-id"),
                                                 headers.get("cf-access-client-secret")) == r2.client))
        if not let_in:
            return self._reply(302, b"", {"Location": LOGIN}) if r2.refusal == 302 else self._reply(r2.refusal, b"")
        if path in r2.redirect:
            return self._reply(302, b"", {"Location": r2.redirect[path]})
        if path not in r2.files:
            return self._reply(404, b"")
        data = r2.files[path]
        if path in r2.corrupt:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        start = 0
        ranged = re.fullmatch(r"bytes=(\d+)-", headers.get("range", ""))
        if ranged:
            start = int(ranged.group(1))
            if start >= len(data):
                return self._reply(416, b"", {"Content-Range": f"bytes */{len(data)}"})
            extra = {"Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"}
            return self._send(path, 206, data[start:], extra)
        return self._send(path, 200, data, {})

    def _send(self, path: str, status: int, body: bytes, headers: dict[str, str]) -> None:
        r2: FakeR2 = self.server.fake   # type: ignore[attr-defined]
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        cut = r2.stall[1] if r2.stall and r2.stall[0] == path and status == 200 else None
        try:
            self.wfile.write(body[:cut])
            self.wfile.flush()
            r2.served[path] += len(body[:cut])
            if cut is not None:
                r2.release.wait(timeout=120)   # the test kills the client, then releases; never a stuck server
                self.close_connection = True
        except OSError:   # the client went away
            self.close_connection = True

    def _reply(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
