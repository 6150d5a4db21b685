"""The MLCommons submission server, spoken to as mlcommons/mlperf-automations speaks to it
(`script/submit-mlperf-results` at 20d3d94c: customize.py, meta.yaml), in three calls (Prefect-free):

1. `POST <server>/index/url`, `Content-Type: application/json`, `{"submitter_id": .., "benchmark": "Inference",
   "filename": ..}`: 200 with `{"signed_url": .., "submission_id": .., "submitter_name": ..}`; any other answer
   refuses the id.
2. `PUT <signed_url>` with the tarball's bytes, `Content-Type: application/octet-stream` and
   `Access-Control-Allow-Headers: *`: 200, 201 or 204. Podium sends it again, to the same URL, after no answer or an
   object store's answer that asks for a retry (PUT_RETRY_STATUS), up to PUT_ATTEMPTS times: a PUT to one signed URL
   replaces the same object. The other two calls are made once (each first call opens a new submission).
3. `POST <server>/index`, `Content-Type: application/x-www-form-urlencoded`, `submitter_id`, `benchmark`,
   `submission_id`: the server starts its checker, which mails its verdict to the submitter.

Where Podium differs: `filename` is the tarball's name (the automation sends the path of a temporary copy named
submission.tar.gz, to keep it short); an answer other than 2xx to the third call is an error (the automation logs it
and reports success). The submitter id goes only into the two request bodies; every text the server sends back is
shown with it blanked out, and the signed URL (a credential for the upload) is never shown, only its host. The
server must be https (http only on this host's loopback, a local stand-in): `check_server`, before anything is sent.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, SecretStr

from submission.base.errors import PlanError, UploadError
from submission.base.hosts import private_url

DEFAULT_URL = "https://submissions-ui.mlcommons.org"  # meta.yaml default_env MLC_MLPERF_SUBMISSION_URL
BENCHMARK = "Inference"  # meta.yaml, variation wg-inference (the default): MLC_MLPERF_BENCHMARK
PUT_OK = (200, 201, 204)  # upload_file_to_signed_url
PUT_HEADERS = {"Content-Type": "application/octet-stream", "Access-Control-Allow-Headers": "*"}
TIMEOUT_S = 60.0  # connect, and each read or write of the small calls
PUT_READ_TIMEOUT_S = 600.0  # the store's answer after the last byte of a large tarball
PUT_RETRY_STATUS = (408, 429, 500, 502, 503, 504)   # the object store's "try again"; 403 (signature) is final
PUT_RETRY_DELAYS_S = (5.0, 30.0)   # before each attempt after the first
PUT_ATTEMPTS = len(PUT_RETRY_DELAYS_S) + 1
TEXT_CHARS = 300  # of a server's answer, shown in an error or the record
HIDDEN = "<submitter id>"


class Ticket(BaseModel):
    model_config = ConfigDict(coerce_numbers_to_str=True)   # a numeric submission_id reads as its text

    signed_url: SecretStr
    submission_id: str
    submitter_name: str


class Receipt(BaseModel):
    server: str
    submission_id: str
    submitter_name: str
    upload_status: int
    check_status: int
    check_answer: str


def check_server(server: str) -> None:
    """PlanError unless the submitter id may go to `server`: an https URL, or http to this host's loopback
    (127.0.0.1, ::1, localhost: a local test server)."""
    if not private_url(server):
        raise PlanError(f"--server {server!r} is not an https URL: the submitter id goes to a submission server over "
                        "https only (plain http only to this host: 127.0.0.1, ::1 or localhost)",
                        fix=f"e.g. --server {DEFAULT_URL}")


def shown(text: str, submitter_id: SecretStr) -> str:
    """A server's text as Podium shows it: the id blanked out, cut to TEXT_CHARS."""
    secret = submitter_id.get_secret_value()
    text = text.replace(secret, HIDDEN) if secret else text
    return text.strip()[:TEXT_CHARS]


def _send(what: str, where: str, call: Callable[[], httpx.Response], submitter_id: SecretStr) -> httpx.Response:
    try:
        return call()
    except httpx.HTTPError as error:   # refused, timed out, TLS, DNS: no answer
        raise UploadError(f"{what}: no answer from {where} ({type(error).__name__}: "
                          f"{shown(str(error), submitter_id) or 'no detail'})",
                          fix="check the server URL (--server) and this host's network or proxy (HTTPS_PROXY)"
                          ) from None   # its text is in the message; a traceback need not show the request again


def ask_for_url(server: str, submitter_id: SecretStr, filename: str) -> Ticket:
    """Call 1: a signed URL for the upload, and the submission's id and submitter name."""
    body = json.dumps({"submitter_id": submitter_id.get_secret_value(), "benchmark": BENCHMARK, "filename": filename})
    with httpx.Client(timeout=TIMEOUT_S) as client:
        answer = _send("asking for an upload URL", server, lambda: client.post(
            f"{server}/index/url", content=body.encode(), headers={"Content-Type": "application/json"}), submitter_id)
    if answer.status_code != 200:
        raise UploadError(f"the submission server at {server} refused the submitter id: HTTP {answer.status_code} "
                          f"{shown(answer.text, submitter_id)!r}",
                          fix="check the id MLCommons gave your organisation (where it comes from: docs/submission.md)")
    try:
        return Ticket.model_validate(answer.json())
    except ValueError:
        raise UploadError(f"the submission server at {server} answered without signed_url, submission_id and "
                          f"submitter_name: {shown(answer.text, submitter_id)!r}",
                          fix="check that --server names the MLCommons submission server") from None


def put(ticket: Ticket, tarball: Path, submitter_id: SecretStr, say: Callable[[str], object] = print) -> int:
    """Call 2: the tarball's bytes to the signed URL, streamed; sent again after no answer or a transient one."""
    url = ticket.signed_url.get_secret_value()
    host = urlsplit(url).netloc or "the signed URL"
    timeout = httpx.Timeout(TIMEOUT_S, read=PUT_READ_TIMEOUT_S)
    for attempt in range(1, PUT_ATTEMPTS + 1):
        try:
            with httpx.Client(timeout=timeout) as client, Path(tarball).open("rb") as stream:
                answer = _send("uploading the tarball", host,
                               lambda: client.put(url, content=stream, headers=PUT_HEADERS), submitter_id)
        except UploadError as error:
            if attempt == PUT_ATTEMPTS:
                raise
            why = error.message
        else:
            if answer.status_code not in PUT_RETRY_STATUS or attempt == PUT_ATTEMPTS:
                break
            why = f"HTTP {answer.status_code} from {host}"
        delay = PUT_RETRY_DELAYS_S[attempt - 1]
        say(f"upload attempt {attempt} of {PUT_ATTEMPTS} failed ({why}); sending it again in {delay:g} s")
        time.sleep(delay)
    if answer.status_code not in PUT_OK:
        raise UploadError(f"the upload to {host} failed: HTTP {answer.status_code} "
                          f"{shown(answer.text, submitter_id)!r} (submission {ticket.submission_id})",
                          fix="run `podium submit` again: it asks for a new upload URL (a signed URL expires)")
    return answer.status_code


def start_check(server: str, submitter_id: SecretStr, submission_id: str) -> httpx.Response:
    """Call 3: the server's checker started on the uploaded tarball."""
    form = urlencode({"submitter_id": submitter_id.get_secret_value(), "benchmark": BENCHMARK,
                      "submission_id": submission_id})
    with httpx.Client(timeout=TIMEOUT_S) as client:
        answer = _send("starting the server's checker", server, lambda: client.post(
            f"{server}/index", content=form.encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded"}), submitter_id)
    if not answer.is_success:
        raise UploadError(f"the tarball is uploaded (submission {submission_id}) but the server at {server} did not "
                          f"start its checker: HTTP {answer.status_code} {shown(answer.text, submitter_id)!r}",
                          fix="run `podium submit` again (a new upload), or ask MLCommons support to check that "
                              "submission")
    return answer


def upload(server: str, tarball: Path, submitter_id: SecretStr, *, submitter: str | None = None,
           say: Callable[[str], object] = print) -> Receipt:
    """The three calls. `submitter`: the organisation the id must belong to (the automation's
    MLC_MLPERF_SUBMITTER), checked before any byte is sent. UploadError names the step that failed; the tarball is
    left as it is. A server that is not https is refused first (`check_server`)."""
    check_server(server)
    try:
        return _calls(server.rstrip("/"), Path(tarball), submitter_id, submitter, say)
    except UploadError as error:
        raise UploadError(error.message, fix=f"{error.fix}; the tarball stays at {tarball}") from None


def _calls(server: str, tarball: Path, submitter_id: SecretStr, submitter: str | None,
           say: Callable[[str], object]) -> Receipt:
    ticket = ask_for_url(server, submitter_id, tarball.name)
    say(f"the server gave submission {ticket.submission_id} for submitter {ticket.submitter_name!r}")
    if submitter is not None and ticket.submitter_name != submitter:
        raise UploadError(f"the submitter id belongs to {ticket.submitter_name!r}, not {submitter!r}; nothing was "
                          "uploaded", fix="use the id of the organisation named in the tree, or pass --submitter "
                                          "with the name the server gave")
    status = put(ticket, tarball, submitter_id, say)
    say(f"uploaded {tarball.name} ({tarball.stat().st_size:,} bytes): HTTP {status}")
    answer = start_check(server, submitter_id, ticket.submission_id)
    say(f"the server's checker started: HTTP {answer.status_code} {shown(answer.text, submitter_id)!r}")
    return Receipt(server=server, submission_id=ticket.submission_id, submitter_name=ticket.submitter_name,
                   upload_status=status, check_status=answer.status_code,
                   check_answer=shown(answer.text, submitter_id))
