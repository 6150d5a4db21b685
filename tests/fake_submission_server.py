"""A local stand-in for the MLCommons submission server on 127.0.0.1: the three calls mlcommons/mlperf-automations
`script/submit-mlperf-results` (customize.py) makes, answered as that script expects.

- `POST /index/url` (JSON `submitter_id`, `benchmark`, `filename`): 200 with `signed_url` (a PUT URL on this
  server), `submission_id` and `submitter_name` for a known id; 403 for another, its text echoing the id (so a test
  sees that the client blanks it out);
- `PUT /upload/<submission id>?signature=...`: the bytes kept, 200; `put_status` set to an error makes it answer that
  with an XML body as object stores do, and `put_failures` lists statuses for the next PUTs before that (0: the
  connection dropped without an answer); a chunked body (no Content-Length) is refused with 411, as a signed URL is;
- `POST /index` (form `submitter_id`, `benchmark`, `submission_id`): 200 for an uploaded submission of that id.

Every request is kept in `requests` (method, path, headers, body).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

from tests.local_http import LocalServer


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class FakeSubmissionServer(LocalServer):
    def __init__(self, ids: dict[str, str]) -> None:
        self.ids = ids   # submitter id -> submitter name
        self.requests: list[Seen] = []
        self.uploads: dict[str, bytes] = {}
        self.checked: list[str] = []   # submission ids whose check was started
        self.put_status = 200
        self.put_failures: list[int] = []
        super().__init__(Handler)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _reply(self, status: int, body: str, content_type: str = "text/plain") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _seen(self) -> Seen:
        length = self.headers.get("Content-Length")
        body = self.rfile.read(int(length)) if length is not None else b""
        seen = Seen(self.command, self.path, dict(self.headers.items()), body)
        self.server.fake.requests.append(seen)   # type: ignore[attr-defined]
        return seen

    def do_POST(self) -> None:
        fake, seen = self.server.fake, self._seen()   # type: ignore[attr-defined]
        if seen.path == "/index/url":
            asked = json.loads(seen.body)
            name = fake.ids.get(asked.get("submitter_id"))
            if name is None:
                return self._reply(403, f"Unknown submitter id {asked.get('submitter_id')}")
            sid = f"sub-{len(fake.uploads) + 1}"
            fake.uploads[sid] = b""
            return self._reply(200, json.dumps({"signed_url": f"{fake.url}/upload/{sid}?signature=s3cr3t",
                                                "submission_id": sid, "submitter_name": name}), "application/json")
        if seen.path == "/index":
            form = {k: v[0] for k, v in parse_qs(seen.body.decode()).items()}
            sid = form.get("submission_id", "")
            if form.get("submitter_id") not in fake.ids or not fake.uploads.get(sid):
                return self._reply(400, "no such submission")
            fake.checked.append(sid)
            return self._reply(200, f"Submission {sid} received; the checker's report will be mailed")
        self._reply(404, "not found")

    def do_PUT(self) -> None:
        fake = self.server.fake   # type: ignore[attr-defined]
        if self.headers.get("Content-Length") is None:
            self.close_connection = True
            return self._reply(411, "Content-Length required")
        seen = self._seen()
        sid = urlsplit(seen.path).path.removeprefix("/upload/")
        if fake.put_failures:
            status = fake.put_failures.pop(0)
            if status == 0:
                self.close_connection = True
                return
            return self._reply(status, "<Error><Code>SlowDown</Code></Error>", "application/xml")
        if fake.put_status != 200:
            return self._reply(fake.put_status, "<Error><Code>SignatureDoesNotMatch</Code></Error>",
                               "application/xml")
        if sid not in fake.uploads:
            return self._reply(404, "no such upload URL")
        fake.uploads[sid] = seen.body
        self._reply(200, "")
