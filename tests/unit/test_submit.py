"""`podium submit` up to its Prefect flow: the final tarball's layout, what one tree changed into another, what is
refused before anything starts, where the submitter id comes from, and the three calls to the submission server
(tests/fake_submission_server.py on 127.0.0.1) with each way they fail. The flow itself, on the demo's tree: the
smoke flow's test (tests/integration/test_smoke_flow.py)."""

from __future__ import annotations

import hashlib
import json
import secrets
import socket
import tarfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from pydantic import SecretStr

from submission.base.errors import PlanError, UploadError
from submission.checks.official import OfficialCheckerUnavailable
from submission.tree.changes import compare
from submission.tree.package import final_tarball
from submission.tree.paths import SMOKE_MARKER
from submission.tree.rehearsal_marker import MARKER
from tasks.submit import identity, server
from tasks.submit.settings import SubmitSettings
from tests.fake_submission_server import FakeSubmissionServer
from tests.unit.test_package import make_tree

ID = "planted-id-7f3c"   # the id the fake server knows
ORG = "Org"


@pytest.fixture()
def fake() -> Iterator[FakeSubmissionServer]:
    with FakeSubmissionServer({ID: ORG}) as running:
        yield running


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_final_tarball_holds_the_division_folders_at_its_top_and_nothing_else(tmp_path: Path) -> None:
    files = make_tree(tmp_path / "tree")
    (tmp_path / "tree" / "open" / "Org" / "systems").mkdir(parents=True)
    (tmp_path / "tree" / SMOKE_MARKER).write_text("smoke\n")   # at the top: not in the tarball
    (tmp_path / "tree" / "notes").mkdir()
    (tmp_path / "tree" / "notes" / "todo.txt").write_text("x\n")
    made = final_tarball(tmp_path / "tree", tmp_path / "a" / "submission.tar.gz")
    with tarfile.open(made.path) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert {n for n, m in members.items() if m.isfile()} == set(files)
        assert {n.split("/")[0] for n in members} == {"closed", "open"} and "open/Org/systems" in members
        assert all(tar.extractfile(n).read() == data for n, data in files.items())   # type: ignore[union-attr]
    assert (made.files, made.divisions, made.sha256) == (len(files), ["closed", "open"], sha256(made.path))
    assert made.path.with_name("submission.tar.gz.sha256").read_text() == f"{made.sha256}  submission.tar.gz\n"
    again = final_tarball(tmp_path / "tree", tmp_path / "b" / "submission.tar.gz")
    assert again.sha256 == made.sha256   # reproducible: the content alone decides the bytes
    with pytest.raises(PlanError, match="holds none of closed/, open/, network/"):
        final_tarball(tmp_path / "tree" / "notes", tmp_path / "c.tar.gz")


def test_changes_are_counted_per_scenario_folder(tmp_path: Path) -> None:
    before, after = tmp_path / "before", tmp_path / "after"
    make_tree(before)
    make_tree(after)
    scenario = "closed/Org/results/sys1/gpt-oss-120b/Offline"
    (after / scenario / "user.conf").write_text("changed\n")
    (after / "closed/Org/src/README.md").unlink()
    (after / scenario.replace("closed", "open")).mkdir(parents=True)
    (after / scenario.replace("closed", "open") / "user.conf").write_text("moved\n")
    changes = compare(before, after)
    assert (changes.added, changes.removed, changes.changed, changes.unchanged) == (
        [f"open/{scenario[7:]}/user.conf"], ["closed/Org/src/README.md"], [f"{scenario}/user.conf"], 2)
    assert changes.lines() == ["1 file(s) added, 1 removed, 1 changed, 2 unchanged",
                               f"added open/{scenario[7:]} (1 file)", "removed closed/Org/src/README.md (1 file)",
                               f"changed {scenario} (1 file)"]
    assert compare(before, before).lines() == ["0 file(s) added, 0 removed, 0 changed, 4 unchanged"]


def test_what_is_refused_before_anything_starts(tmp_path: Path) -> None:
    make_tree(tmp_path / "tree")
    src = tmp_path / "inference"
    (src / "tools/submission/submission_checker").mkdir(parents=True)
    (src / "tools/submission/submission_checker/main.py").write_text("")
    settings = SubmitSettings.make(tmp_path / "tree")
    assert settings.out == tmp_path / "tree.submit"
    with pytest.raises(PlanError, match="--inference-src DIR"):   # a real upload: the official checker must run
        settings.require()
    SubmitSettings.make(tmp_path / "tree", inference_src=src).require()   # preprocess_submission.py only if asked
    with pytest.raises(OfficialCheckerUnavailable, match=r"no preprocess_submission\.py"):
        SubmitSettings.make(tmp_path / "tree", inference_src=src, preprocess=True).require()
    with pytest.raises(PlanError, match=r"--preprocess runs the round's preprocess_submission\.py from a checkout"):
        SubmitSettings.make(tmp_path / "tree", test_upload=True, preprocess=True).require()
    test = SubmitSettings.make(tmp_path / "tree", test_upload=True)
    test.require()
    assert test.steps_skipped() == {"preprocess": "skipped: no --inference-src (--test-upload)",
                                    "official": "skipped: no --inference-src (--test-upload)"}
    for marker in (SMOKE_MARKER, MARKER):
        (tmp_path / "tree" / marker).write_text("not a submission\n")
        with pytest.raises(PlanError, match=f"{marker} is at its top") as refused:
            SubmitSettings.make(tmp_path / "tree", inference_src=src, preprocess=False).require()
        assert "--test-upload" in str(refused.value)
        (tmp_path / "tree" / marker).unlink()
    with pytest.raises(PlanError, match="not an http"):
        SubmitSettings.make(tmp_path / "tree", test_upload=True, server="submissions-ui.mlcommons.org").require()


def test_preprocess_runs_only_when_asked_and_the_closing_line_says_what_ran(tmp_path: Path) -> None:
    """The round's preprocess_submission.py is optional (the submission guide; MLCommons' automation runs it only
    when asked): a submit leaves it out unless --preprocess, and its closing line names each check that ran, with
    the official verdict, and each that did not, with why."""
    from tasks.submit.record import Official, Record

    make_tree(tmp_path / "tree")
    src = tmp_path / "inference"
    settings = SubmitSettings.make(tmp_path / "tree", inference_src=src, dry_run=True)
    assert settings.preprocess is False and settings.steps_skipped() == {
        "preprocess": "skipped: optional in the submission guide, not asked for (--preprocess runs it)"}
    assert SubmitSettings.make(tmp_path / "tree", inference_src=src, preprocess=True).steps_skipped() == {}
    tarball = final_tarball(tmp_path / "tree", tmp_path / "tree.submit" / "submission.tar.gz")
    record = Record(tree=str(settings.tree), out=str(settings.out), server=settings.server, round="v6.1",
                    test_upload=True, dry_run=True, skipped=settings.steps_skipped(), podium_check="no errors",
                    official=Official(verdict="submission looks OK", summary=[], errors=0, csv="x.csv"),
                    tarball=tarball)
    assert record.outcome() == (f"dry run: nothing uploaded; the TEST upload would send {tarball.path}; ran Podium's "
                                "checker, the official checker (submission looks OK); not run: "
                                "preprocess_submission.py, optional in the submission guide, not asked for "
                                "(--preprocess runs it)")
    assert record.lines()[-1] == record.outcome()
    untested = record.model_copy(update={"official": None, "skipped": SubmitSettings.make(
        tmp_path / "tree", test_upload=True).steps_skipped()})
    assert untested.outcome().endswith("; ran Podium's checker; not run: preprocess_submission.py and the official "
                                       "checker, no --inference-src (--test-upload)")
    failed = record.model_copy(update={"error": "the official checker: submission has errors"})
    assert failed.outcome() == (f"submit failed: the official checker: submission has errors; the tarball stays at "
                                f"{tarball.path}")


def test_the_cli_refuses_preprocess_without_the_official_sources(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from flows.cli import app

    make_tree(tmp_path / "tree")
    refused = CliRunner().invoke(app, ["submit", str(tmp_path / "tree"), "--test-upload", "--preprocess",
                                       "--workspace", str(tmp_path / "ws")])
    assert refused.exit_code == 2 and "--preprocess runs the round's preprocess_submission.py" in refused.output
    assert "fix: pass --inference-src DIR" in refused.output and not (tmp_path / "tree.submit").exists()


@pytest.mark.integration   # the session's Prefect server (tests/conftest.py)
def test_the_id_comes_from_the_environment_else_the_secret_block(prefect_server: None) -> None:
    """A real Prefect Secret block on the session's Prefect server, read the way `podium submit` reads it (no loader
    given): the environment variable wins over it, the block is read when the variable is empty, and a block that is
    not there is named with the variable in one error."""
    from prefect.blocks.system import Secret

    block, other = (f"submitter-id-{secrets.token_hex(4)}" for _ in range(2))
    Secret(value="from-the-block").save(block)
    found = identity.find("MLPERF_SUBMITTER_ID", block, {"MLPERF_SUBMITTER_ID": " from-env\n"})
    assert (found.value.get_secret_value(), found.source) == ("from-env", "environment variable MLPERF_SUBMITTER_ID")
    assert "from-env" not in repr(found)   # a SecretStr: its repr hides it
    found = identity.find("MLPERF_SUBMITTER_ID", block, {"MLPERF_SUBMITTER_ID": " "})
    assert (found.value.get_secret_value(), found.source) == ("from-the-block", f"Prefect Secret block '{block}'")
    assert "from-the-block" not in repr(found)
    with pytest.raises(PlanError, match=f"MY_ID is not set and there is no Prefect Secret block '{other}'"):
        identity.find("MY_ID", other, {"MY_ID": ""})


@pytest.fixture()
def tarball(tmp_path: Path) -> Path:
    make_tree(tmp_path / "tree")
    return final_tarball(tmp_path / "tree", tmp_path / "out" / "submission.tar.gz").path


def test_the_upload_makes_the_three_calls_of_the_official_automation(fake: FakeSubmissionServer,
                                                                      tarball: Path) -> None:
    said: list[str] = []
    receipt = server.upload(fake.url + "/", tarball, SecretStr(ID), submitter=ORG, say=said.append)
    ask, put, check = fake.requests
    assert (ask.method, ask.path, ask.headers["Content-Type"]) == ("POST", "/index/url", "application/json")
    assert ask.body == json.dumps({"submitter_id": ID, "benchmark": "Inference", "filename": "submission.tar.gz"}
                                  ).encode()   # byte for byte what requests' json= sends
    assert (put.method, put.path) == ("PUT", "/upload/sub-1?signature=s3cr3t")
    assert (put.headers["Content-Type"], put.headers["Access-Control-Allow-Headers"]) == ("application/octet-stream",
                                                                                          "*")
    assert int(put.headers["Content-Length"]) == tarball.stat().st_size
    assert hashlib.sha256(fake.uploads["sub-1"]).hexdigest() == sha256(tarball)
    assert (check.method, check.path, check.headers["Content-Type"]) == ("POST", "/index",
                                                                         "application/x-www-form-urlencoded")
    assert check.body == urlencode({"submitter_id": ID, "benchmark": "Inference", "submission_id": "sub-1"}).encode()
    assert fake.checked == ["sub-1"]
    assert (receipt.submission_id, receipt.submitter_name, receipt.upload_status, receipt.check_status) == (
        "sub-1", ORG, 200, 200)
    assert "the checker's report will be mailed" in receipt.check_answer
    assert not any(ID in line or "s3cr3t" in line for line in said)   # neither the id nor the signed URL is shown


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("failure", ["refused id", "another organisation", "failed PUT", "unreachable server"])
def test_each_failure_says_which_call_failed_and_leaves_the_tarball(fake: FakeSubmissionServer, tarball: Path,
                                                                    failure: str) -> None:
    before = sha256(tarball)
    url, secret, submitter = fake.url, SecretStr(ID), None
    if failure == "refused id":
        secret = SecretStr("not-an-id-9d1")   # the fake server echoes it in its refusal
    elif failure == "another organisation":
        submitter = "OtherOrg"
    elif failure == "failed PUT":
        fake.put_status = 403
    else:
        url = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(UploadError) as failed:
        server.upload(url, tarball, secret, submitter=submitter, say=lambda line: None)
    text = str(failed.value)
    expected = {"refused id": "refused the submitter id: HTTP 403 'Unknown submitter id <submitter id>'",
                "another organisation": "the submitter id belongs to 'Org', not 'OtherOrg'; nothing was uploaded",
                "failed PUT": "the upload to 127.0.0.1:",
                "unreachable server": "asking for an upload URL: no answer from http://127.0.0.1:"}[failure]
    assert expected in text and f"; the tarball stays at {tarball}" in text, text
    assert secret.get_secret_value() not in text and "s3cr3t" not in text
    assert sha256(tarball) == before
    calls = [(r.method, r.path.split("?")[0]) for r in fake.requests]
    assert calls == {"refused id": [("POST", "/index/url")], "another organisation": [("POST", "/index/url")],
                     "failed PUT": [("POST", "/index/url"), ("PUT", "/upload/sub-1")],
                     "unreachable server": []}[failure]
    assert fake.checked == []
    if failure == "failed PUT":
        assert "HTTP 403 '<Error><Code>SignatureDoesNotMatch</Code></Error>' (submission sub-1)" in text


def test_a_put_that_meets_a_transient_failure_is_sent_again_to_the_same_url(fake: FakeSubmissionServer, tarball: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A dropped connection and a 503 from the object store: the same signed URL is PUT again (one submission on the
    server, its bytes whole); a third failure in a row is the error, its tarball in place."""
    monkeypatch.setattr(server, "PUT_RETRY_DELAYS_S", (0.0, 0.0))
    fake.put_failures = [0, 503]
    said: list[str] = []
    receipt = server.upload(fake.url, tarball, SecretStr(ID), say=said.append)
    calls = [(r.method, r.path.split("?")[0]) for r in fake.requests]
    assert calls == [("POST", "/index/url"), ("PUT", "/upload/sub-1"), ("PUT", "/upload/sub-1"),
                     ("PUT", "/upload/sub-1"), ("POST", "/index")]
    assert receipt.upload_status == 200 and fake.checked == ["sub-1"]
    assert hashlib.sha256(fake.uploads["sub-1"]).hexdigest() == sha256(tarball)
    assert [line.split(" (")[0] for line in said if "attempt" in line] == ["upload attempt 1 of 3 failed",
                                                                          "upload attempt 2 of 3 failed"]
    assert not any("s3cr3t" in line for line in said)

    fake.requests.clear()
    fake.put_failures = [503, 503, 503]
    with pytest.raises(UploadError, match=r"the upload to 127\.0\.0\.1:[0-9]+ failed: HTTP 503"):
        server.upload(fake.url, tarball, SecretStr(ID), say=lambda line: None)
    assert [r.method for r in fake.requests] == ["POST", "PUT", "PUT", "PUT"] and fake.checked == ["sub-1"]


@pytest.mark.parametrize("url", ["http://submissions-ui.mlcommons.org", "http://10.0.0.5:8080", "ftp://127.0.0.1/x",
                                 "submissions-ui.mlcommons.org", "http://127.0.0.1.example", "https://"])
def test_the_submitter_id_goes_over_https_only(url: str, tarball: Path) -> None:
    """Plain http (or no URL) is refused before anything is sent, by `podium submit`'s settings and by the upload
    itself (a PlanError, not a failed call)."""
    with pytest.raises(PlanError, match="is not an https URL: the submitter id goes to a submission server over "
                                        r"https only \(plain http only to this host") as refused:
        server.upload(url, tarball, SecretStr(ID))
    assert refused.value.fix == f"e.g. --server {server.DEFAULT_URL}"
    with pytest.raises(PlanError, match="is not an https URL"):
        SubmitSettings.make(tarball.parent.parent / "tree", test_upload=True, server=url).require()


def test_a_local_stand_in_may_be_http(fake: FakeSubmissionServer) -> None:
    """https anywhere, plain http to this host's loopback only: a name that merely starts like one is another host."""
    allowed = (server.DEFAULT_URL, fake.url, f"http://localhost:{fake.port}", "http://[::1]:8000")
    lookalikes = ("http://localhost.example.com", "http://127.0.0.1.nip.io:8000", "http://[::2]:8000",
                  "ftp://127.0.0.1/")
    refused = []
    for url in allowed + lookalikes:
        try:
            server.check_server(url)
        except PlanError:
            refused.append(url)
    assert refused == list(lookalikes)
