"""`podium fetch` of source archives (tasks/staging/fetch_http.py): GitHub's archive of a commit (what `git archive`
makes) served by a local HTTP server, unpacked and verified, the archive kept; a second call fetches nothing, a changed
file is unpacked again from the kept archive; an archive of another commit or with another sha256 is refused; members
that would leave the folder are left out; preflight takes the unpacked mlcommons/inference as `inference_src`."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from submission.plan import model as plans
from submission.plan.fetch import FetchItem, FetchSource, resolve
from submission.rules import load_rules
from tasks.ops import prerequisites
from tasks.staging.fetch import FETCHED, fetch_all
from tasks.staging.transfer import ChecksumMismatch
from tests.fake_hub import FakeHub, commit_archive

PLANS = Path(__file__).parents[2] / "deployments" / "plans"
RULES = load_rules("v6.1")
CHECKER = "tools/submission/submission_checker/main.py"


@pytest.fixture()
def hub() -> Iterator[FakeHub]:
    fake = FakeHub().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, bytes]:
    """A small repository shaped like mlcommons/inference, and `git archive`'s tar.gz of its commit, as GitHub
    serves it (one top folder <repo>-<commit>/)."""
    work = tmp_path_factory.mktemp("inference")
    (work / "tools/submission/submission_checker").mkdir(parents=True)
    (work / CHECKER).write_text("print('checker')\n")
    (work / "compliance").mkdir()
    (work / "compliance/README.md").write_text("audits\n")
    (work / "language").mkdir()
    (work / "language/link").symlink_to("../compliance")   # a link inside the tree, as the reference has

    def git(*args: str) -> bytes:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=work, check=True,
                              capture_output=True).stdout

    git("init", "--quiet")
    git("add", "-A")
    git("commit", "--quiet", "-m", "the pinned layout")
    commit = git("rev-parse", "HEAD").decode().strip()
    return commit, git("archive", "--format=tar.gz", f"--prefix=inference-{commit}/", commit)


def _item(dest: Path, **source: str) -> FetchItem:
    return resolve(f"fetch.{dest}", str(dest), FetchSource(**source), RULES)


def test_a_commits_archive_is_unpacked_verified_kept_and_a_second_call_fetches_nothing(
        hub: FakeHub, repository: tuple[str, bytes], tmp_path: Path) -> None:
    commit, archive = repository
    key = hub.github("someone/inference", commit, archive)
    dest = tmp_path / "src" / "inference"
    item = _item(dest, github="someone/inference", revision=commit)
    lines: list[str] = []
    [first] = fetch_all([item], github=hub.github_url, say=lines.append)
    assert (dest / CHECKER).read_text() == "print('checker')\n" and (dest / "language/link").is_symlink()
    assert dest.with_name("inference.tar.gz").read_bytes() == archive   # kept: what pip installs from
    record = json.loads((dest / FETCHED).read_text())
    assert (record["commit"], record["archive_sha256"]) == (commit, hashlib.sha256(archive).hexdigest())
    assert (first.files, first.fetched, first.kept) == (3, 3, 0)   # two files and the archive
    assert not list(tmp_path.glob("src/.*"))                        # no work folder left behind

    [second] = fetch_all([item], github=hub.github_url, say=lines.append)
    assert (second.fetched, second.kept) == (0, 3) and hub.downloads[key] == 1

    (dest / CHECKER).write_text("print('changed')\n")
    [third] = fetch_all([item], github=hub.github_url, say=lines.append)
    assert (dest / CHECKER).read_text() == "print('checker')\n" and hub.downloads[key] == 1   # from the kept archive
    assert (third.fetched, third.kept) == (2, 1)


def test_an_archive_of_another_commit_or_with_another_sha256_is_refused_and_deleted(
        hub: FakeHub, repository: tuple[str, bytes], tmp_path: Path) -> None:
    commit, archive = repository
    other = "1" * 40
    hub.github("someone/inference", other, archive)   # the URL of one commit serving another's archive
    dest = tmp_path / "inference"
    with pytest.raises(ChecksumMismatch) as e:
        fetch_all([_item(dest, github="someone/inference", revision=other)], github=hub.github_url,
                  say=lambda line: None)
    assert f"is the archive of commit {commit}, not {other}" in str(e.value) and "fetch./" in str(e.value)
    assert not dest.exists() and not dest.with_name("inference.tar.gz").exists()

    hub.files["tool.tar.gz"] = archive
    item = _item(dest, archive=f"{hub.url}/files/tool.tar.gz", sha256="0" * 64)
    with pytest.raises(ChecksumMismatch, match="the plan says 0000"):
        fetch_all([item], say=lambda line: None)
    right = _item(dest, archive=f"{hub.url}/files/tool.tar.gz", sha256=hashlib.sha256(archive).hexdigest())
    assert fetch_all([right], say=lambda line: None)[0].files == 3


def test_members_that_would_leave_the_folder_are_left_out_and_named(hub: FakeHub, tmp_path: Path) -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, link in (("top/ok.txt", None), ("top/passwd", "/etc/passwd"), ("top/../../escape", None)):
            entry = tarfile.TarInfo(name)
            if link:
                entry.type, entry.linkname = tarfile.SYMTYPE, link
            else:
                entry.size = 2
            tar.addfile(entry, io.BytesIO(b"ok") if not link else None)
    hub.files["odd.tar.gz"] = out.getvalue()
    dest = tmp_path / "odd" / "tool"
    lines: list[str] = []
    item = _item(dest, archive=f"{hub.url}/files/odd.tar.gz", sha256=hashlib.sha256(out.getvalue()).hexdigest())
    fetch_all([item], say=lines.append)
    assert sorted(p.name for p in dest.iterdir()) == [".podium-fetch.json", ".podium-manifest.json", "ok.txt"]
    assert not (tmp_path / "escape").exists()
    assert "left out, as unsafe to unpack: passwd, ../../escape" in lines[-1]


def test_preflight_takes_the_fetched_inference_sources_at_the_pin(
        hub: FakeHub, repository: tuple[str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    commit, archive = repository
    hub.github("mlcommons/inference", commit, archive)
    dest = tmp_path / "inference"
    fetch_all([_item(dest, github="mlcommons/inference", revision=commit)], github=hub.github_url,
              say=lambda line: None)
    data = yaml.safe_load((PLANS / "gpt-oss-120b-trtllm-k8s.yaml").read_text())
    data.pop("fetch")
    plan = plans.parse({**data, "inference_src": str(dest)})

    def pinned(commit: str) -> None:
        rules = RULES.model_copy(update={"inference_sources": RULES.inference_sources.model_copy(
            update={"commit": commit})})
        monkeypatch.setattr(prerequisites, "load_rules", lambda round: rules)

    pinned(commit)
    assert prerequisites.inference_src_problems(plan) == []
    pinned("2" * 40)
    [other] = prerequisites.inference_src_problems(plan)
    assert f"it is the archive of commit {commit[:12]}, not the pinned 222222222222" in other.message
    pinned(commit)
    (dest / CHECKER).unlink()
    [gone] = prerequisites.inference_src_problems(plan)
    assert "files of its manifest are missing or changed" in gone.message and "podium fetch PLAN" in gone.fix


def test_the_archive_a_fetch_keeps_names_its_commit_as_the_endpoints_install_check_reads_it(tmp_path: Path) -> None:
    from tasks.endpoints.install import archive_commit

    path = tmp_path / "endpoints.tar.gz"
    path.write_bytes(commit_archive("a" * 40, {"pyproject.toml": b"[project]\n"}))
    assert archive_commit(path) == "a" * 40
