"""`podium fetch` of source archives (tasks/staging/fetch_http.py): GitHub's archive of a commit (what `git archive`
makes) served by a local HTTP server, unpacked and verified with its links, the archive kept; a second call fetches
nothing, a changed file is unpacked again from the kept archive; an archive of another commit or with another sha256
is refused; a crafted archive (CVE-2025-4517's chain, links leading out, hard links, devices, over-long names, a bomb
past the cap) is refused through `podium fetch` naming the member and why, with nothing written outside the folder
or left behind (tasks/staging/unpack.py); preflight takes the unpacked mlcommons/inference as `inference_src`."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import Result
from typer.testing import CliRunner

from flows.cli import app
from submission.plan import model as plans
from submission.plan.fetch import FetchItem, FetchSource, resolve
from submission.rules import load_rules
from tasks.ops import prerequisites
from tasks.staging import unpack
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
    """A small repository shaped like mlcommons/inference, with links of the four shapes it has at the v6.1 pin, and
    `git archive`'s tar.gz of its commit, as GitHub serves it (one top folder <repo>-<commit>/)."""
    work = tmp_path_factory.mktemp("inference")
    for name, text in {CHECKER: "print('checker')\n", "compliance/README.md": "audits\n", "README.md": "MLPerf\n",
                       "loadgen/mlperf.conf": "*.*.min_duration = 600000\n",
                       "language/deepseek-r1/submodules/LiveCodeBench/README.md": "lcb\n"}.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    for name, target in LINKS.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).symlink_to(target)

    def git(*args: str) -> bytes:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=work, check=True,
                              capture_output=True).stdout

    git("init", "--quiet")
    git("add", "-A")
    git("commit", "--quiet", "-m", "the pinned layout")
    commit = git("rev-parse", "HEAD").decode().strip()
    return commit, git("archive", "--format=tar.gz", f"--prefix=inference-{commit}/", commit)


LINKS = {"mlperf.conf": "loadgen/mlperf.conf", "docs/index_gh.md": "../README.md",   # as mlcommons/inference has
         "language/gpt-oss-120b/submodules/LiveCodeBench": "../../deepseek-r1/submodules/LiveCodeBench"}


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
    assert (dest / CHECKER).read_text() == "print('checker')\n"
    assert {name: os.readlink(dest / name) for name in LINKS} == LINKS   # the links kept, and read through
    assert (dest / "mlperf.conf").read_text() == "*.*.min_duration = 600000\n"
    assert (dest / "language/gpt-oss-120b/submodules/LiveCodeBench/README.md").read_text() == "lcb\n"
    assert dest.with_name("inference.tar.gz").read_bytes() == archive   # kept: what pip installs from
    record = json.loads((dest / FETCHED).read_text())
    assert (record["commit"], record["archive_sha256"]) == (commit, hashlib.sha256(archive).hexdigest())
    assert (first.files, first.fetched, first.kept) == (6, 6, 0)   # five files and the archive
    assert not list(tmp_path.glob("src/.*"))                        # no work folder left behind

    [second] = fetch_all([item], github=hub.github_url, say=lines.append)
    assert (second.fetched, second.kept) == (0, 6) and hub.downloads[key] == 1

    (dest / CHECKER).write_text("print('changed')\n")
    [third] = fetch_all([item], github=hub.github_url, say=lines.append)
    assert (dest / CHECKER).read_text() == "print('checker')\n" and hub.downloads[key] == 1   # from the kept archive
    assert (third.fetched, third.kept) == (5, 1)


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
    assert fetch_all([right], say=lambda line: None)[0].files == 6


Entry = tuple[tarfile.TarInfo, bytes]


def _entry(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", data: bytes = b"") -> Entry:
    entry = tarfile.TarInfo(name)
    entry.type, entry.linkname, entry.size = kind, link, len(data)
    if kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        entry.devmajor, entry.devminor = 1, 3
    return entry, data


def _archive(*entries: Entry) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for entry, data in entries:
            tar.addfile(entry, io.BytesIO(data) if data else None)
    return out.getvalue()


def _podium_fetch(hub: FakeHub, tmp_path: Path, archive: bytes, **source: object) -> tuple[Result, Path]:
    """`podium fetch` of a plan whose one fetch is `archive`, to <tmp_path>/root/mnt/mlperf/src/tool; the result, and
    the destination."""
    hub.files["tool.tar.gz"] = archive
    data = yaml.safe_load((PLANS / "gpt-oss-120b-trtllm-k8s.yaml").read_text())
    for benchmark in data["benchmarks"]:
        benchmark.pop("fetch", None)
    data["fetch"] = {"/mnt/mlperf/src/tool": {"archive": f"{hub.url}/files/tool.tar.gz",
                                              "sha256": hashlib.sha256(archive).hexdigest(), **source}}
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(app, ["fetch", str(plan), "--dest", str(tmp_path / "root")])
    return result, tmp_path / "root/mnt/mlperf/src/tool"


def _left(tmp_path: Path) -> list[str]:
    """Everything under tmp_path but the plan and the folders the download made."""
    return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")
                  if p.name != "plan.yaml" and (p.is_symlink() or not p.is_dir()))


def test_cve_2025_4517s_chain_is_refused_before_a_byte_is_written(hub: FakeHub, tmp_path: Path) -> None:
    """CVE-2025-4517: folders of 247-byte names nested as deep as a path may be, a link at each level to the next
    (`a -> ddd...`, `ddd.../b -> ddd...`), so that `a/b/c/...` is short but resolves to a path near PATH_MAX; a link
    under it back up to the top, whose resolved path passes PATH_MAX, so that `os.path.realpath` stops resolving there
    and the `data` filter takes `escape -> a/b/.../lll/..` for a link inside the folder; then a file through `escape`.
    Python 3.11.7's filter lets every member through and the file lands beside the destination."""
    work = tmp_path / "root/mnt/mlperf/src/.tool.unpacking"   # where the members are unpacked first
    name = "d" * 247
    levels = (unpack.PATH_MAX - 1 - len(os.fsencode(str(work)))) // (len(name) + 1)
    steps = [chr(ord("a") + i) for i in range(levels)]
    chain, path = [], ""
    for step in steps:
        chain += [_entry(f"{path}{name}", tarfile.DIRTYPE), _entry(f"{path}{step}", tarfile.SYMTYPE, name)]
        path += f"{name}/"
    deep = "/".join([*steps, "l" * 254])
    archive = _archive(*chain, _entry(deep, tarfile.SYMTYPE, "../" * levels),
                       _entry("escape", tarfile.SYMTYPE, f"{deep}/.."),
                       _entry("escape/outside.txt", data=b"written outside the destination\n"))

    result, dest = _podium_fetch(hub, tmp_path, archive)
    assert not (dest.parent / "outside.txt").exists()   # beside the destination: where the old unpacking wrote it
    assert _left(tmp_path) == []                        # nor anywhere else; no .tool.unpacking, the archive deleted
    assert result.exit_code == 2, result.output
    assert f"fetch./mnt/mlperf/src/tool: tool.tar.gz refused, nothing unpacked and the archive deleted: " \
           f"{'/'.join(steps)}/llllllll" in result.output
    assert "lies under the link a; nothing is written through a link" in result.output
    assert "fix: fetch the publisher's own archive" in result.output


@pytest.mark.parametrize(("entries", "said"), [
    ([_entry("tool-1/hard", tarfile.LNKTYPE, "tool-1/ok.txt")], "tool-1/hard: a hard link to tool-1/ok.txt; only "
                                                                "folders, files and links inside the folder"),
    ([_entry("tool-1/null", tarfile.CHRTYPE)], "tool-1/null: a character device;"),
    ([_entry("tool-1/disk", tarfile.BLKTYPE)], "tool-1/disk: a block device;"),
    ([_entry("tool-1/pipe", tarfile.FIFOTYPE)], "tool-1/pipe: a fifo;"),
    ([_entry("tool-1/holes", tarfile.GNUTYPE_SPARSE)], "tool-1/holes: a sparse file;"),
    ([_entry(f"tool-1/{'n' * 256}", data=b"x")], "(263 bytes): a name of 256 bytes (a file system takes 255)"),
    ([_entry("tool-1/" + "/".join(["p" * 200] * 21), data=b"x")], "a path of "),
    ([_entry("tool-1/passwd", tarfile.SYMTYPE, "/etc/passwd")], "tool-1/passwd: a link to '/etc/passwd'; a link is "
                                                                "kept only when relative and inside the folder"),
    ([_entry("tool-1/up", tarfile.SYMTYPE, "../../up")], "tool-1/up: a link to '../../up', which leaves the folder"),
    ([_entry("tool-1/sub", tarfile.DIRTYPE), _entry("tool-1/here", tarfile.SYMTYPE, "sub"),
      _entry("tool-1/there", tarfile.SYMTYPE, "here/..")], "tool-1/there: a link to 'here/..', through the link here"),
    ([_entry("tool-1/out", tarfile.SYMTYPE, "."), _entry("tool-1/out/x", data=b"x")],
     "tool-1/out/x: lies under the link out"),
    ([_entry("tool-1/../../escape", data=b"x")], "tool-1/../../escape: a name with .., which could leave the folder"),
    ([_entry("/tmp/escape", data=b"x")], "/tmp/escape: an absolute name"),
    ([_entry("tool-1/twice", data=b"1"), _entry("tool-1/twice", data=b"2")], "tool-1/twice: named twice"),
], ids=["hard-link", "char-device", "block-device", "fifo", "sparse", "long-name", "long-path", "absolute-link",
        "link-out", "link-through-link", "under-link", "dot-dot", "absolute", "twice"])
def test_a_crafted_archive_is_refused_whole_naming_the_member_and_leaving_nothing(
        hub: FakeHub, tmp_path: Path, entries: list[Entry], said: str) -> None:
    archive = _archive(_entry("tool-1", tarfile.DIRTYPE), _entry("tool-1/ok.txt", data=b"ok"), *entries)
    result, _ = _podium_fetch(hub, tmp_path, archive)
    assert result.exit_code == 2, result.output
    assert "tool.tar.gz refused, nothing unpacked and the archive deleted: " in result.output
    assert said in result.output.replace("\n", " ")
    assert _left(tmp_path) == []   # not ok.txt either: the whole archive is refused; nothing outside, nothing left


def test_an_archive_past_the_cap_is_refused_at_the_header_that_passes_it(hub: FakeHub, tmp_path: Path) -> None:
    good, dest = _podium_fetch(hub, tmp_path, _archive(_entry("tool-1/ok.txt", data=b"ok")), max_unpacked_gib=0.001)
    assert good.exit_code == 0, good.output
    folder = [name for name in _left(tmp_path) if not name.endswith("tool.tar.gz")]   # what a refusal leaves alone

    bomb = _archive(_entry("tool-1/ok.txt", data=b"ok"), _entry("tool-1/zeros", data=bytes(2 << 20)))
    assert len(bomb) < 8192                                     # 2 MiB of zeros inflate from a few kB
    result, _ = _podium_fetch(hub, tmp_path, bomb, max_unpacked_gib=0.001)
    assert result.exit_code == 2, result.output
    text = result.output.replace("\n", " ")
    assert "deleted: tool-1/zeros: the archive unpacks to more than 1,073,741 bytes" in text
    assert "raise fetch./mnt/mlperf/src/tool.max_unpacked_gib (now 0.001)" in text
    assert _left(tmp_path) == folder and (dest / "ok.txt").read_text() == "ok"   # the folder as it was

    # The default cap, 4 GiB, against a member declaring 5 GiB: refused at its header, before its data is read (the
    # archive holds 1 kB of it), not as a truncated archive after 4 GiB were written.
    header = tarfile.TarInfo("tool-1/huge")
    header.size = 5 << 30
    declared = gzip.compress(header.tobuf(tarfile.PAX_FORMAT) + bytes(1024))
    result, _ = _podium_fetch(hub, tmp_path, declared)
    assert result.exit_code == 2, result.output
    text = result.output.replace("\n", " ")
    assert "deleted: tool-1/huge: the archive unpacks to more than 4,294,967,296 bytes" in text
    assert _left(tmp_path) == folder


def test_a_header_past_a_mib_or_entries_past_the_bound_are_refused(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """tarfile reads a pax header whole: one that says it is 2 MiB is refused before it is read (a pax header holds a
    name and a few numbers); an archive of more entries than MAX_MEMBERS is refused as it is listed."""
    big, _ = _entry("tool-1/big")
    big.pax_headers = {"comment": "x" * (2 << 20)}
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(_archive(_entry("tool-1/ok.txt", data=b"ok"), (big, b"")))
    (tmp_path / "out").mkdir()
    with pytest.raises(unpack.Refused, match=r"after tool-1/ok\.txt: a header of more than 1,048,576 bytes"):
        unpack.unpack(archive, tmp_path / "out", 1 << 30)
    monkeypatch.setattr(unpack, "MAX_MEMBERS", 3)
    archive.write_bytes(_archive(*(_entry(f"tool-1/f{i}", data=b"x") for i in range(5))))
    with pytest.raises(unpack.Refused, match=r"tool-1/f3: the archive holds more than 3 entries"):
        unpack.unpack(archive, tmp_path / "out", 1 << 30)
    assert list((tmp_path / "out").iterdir()) == []


def test_the_cap_is_a_field_of_the_sources_that_are_unpacked() -> None:
    assert FetchSource(github="mlcommons/inference").max_unpacked_gib == 4.0
    with pytest.raises(ValueError, match="max_unpacked_gib: a url source is not unpacked; remove it"):
        FetchSource(url="https://example.org/a.parquet", sha256="0" * 64, max_unpacked_gib=8)
    with pytest.raises(ValueError, match="greater than 0"):
        FetchSource(github="mlcommons/inference", max_unpacked_gib=0)


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
