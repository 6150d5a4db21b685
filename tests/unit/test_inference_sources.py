"""`podium fetch-inference` (tasks/ops/inference_sources.py) against a local bare git repository shaped like
mlcommons/inference: the real git, a file:// remote that serves blobs on demand as GitHub does. It fetches only what
Podium uses at the pinned commit, reuses a verified copy without the network, resumes an interrupted fetch, and
refuses a commit the remote lacks, a copy at another commit or with changed files, and a missing git. With --archive
it unpacks the repository's own `git archive` of a commit (its manifest and record written), reuses it, and refuses
an archive of another commit and a tampered file, as preflight's `inference_src` check does."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from submission.base.errors import PodiumError
from submission.base.files import sha256_file
from submission.rules import SourcePin, load_rules
from tasks.ops import inference_sources
from tasks.ops.inference_sources import fetch
from tasks.staging.fetch_http import FETCHED
from tasks.staging.sources import MANIFEST

FILES = {   # what the repository holds: the paths Podium uses, and some it must not fetch
    "tools/submission/submission_checker/main.py": "print('checker')\n",
    "tools/submission/log_parser.py": "",
    "tools/submission/preprocess_submission.py": "",
    "tools/submission/directory_structure_samples/big/mlperf_log_trace.json": "{}\n",
    "compliance/TEST07/run_verification.py": "",
    "loadgen/mlperf.conf": "*.*.qsl_rng_seed = 1\n",
    "loadgen/loadgen.cc": "",
    "language/gpt-oss-120b/eval_mlperf_accuracy.py": "",
    "language/llama2-70b/evaluate-accuracy.py": "",
}
NOT_FETCHED = ("tools/submission/directory_structure_samples", "loadgen/loadgen.cc", "language/llama2-70b")


def _git(cwd: Path, *args: str) -> str:
    argv = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=master", *args]
    return subprocess.run(argv, cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> types.SimpleNamespace:
    """A bare repository with three commits: `pinned` (the layout), `later`, and `other` without the checker."""
    src = tmp_path_factory.mktemp("src")
    _git(src, "init", "--quiet")
    for name, text in FILES.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    _git(src, "add", "-A")
    _git(src, "commit", "--quiet", "-m", "the pinned layout")
    pinned = _git(src, "rev-parse", "HEAD")
    (src / "loadgen" / "mlperf.conf").write_text("*.*.qsl_rng_seed = 2\n")
    _git(src, "commit", "--quiet", "-am", "later")
    later = _git(src, "rev-parse", "HEAD")
    _git(src, "rm", "--quiet", "-r", "tools")
    _git(src, "commit", "--quiet", "-m", "no checker")
    other = _git(src, "rev-parse", "HEAD")
    bare = src.parent / "inference.git"
    _git(src.parent, "clone", "--quiet", "--bare", str(src), str(bare))
    _git(bare, "config", "uploadpack.allowFilter", "true")   # serve `--filter=blob:none` as GitHub does
    return types.SimpleNamespace(url=bare.as_uri(), path=bare, pinned=pinned, later=later, other=other)


def _pin(upstream: types.SimpleNamespace, commit: str | None = None) -> SourcePin:
    return SourcePin(repository=upstream.url, commit=commit or upstream.pinned)


def test_fetches_only_what_podium_uses_at_the_commit_then_reuses_it(tmp_path: Path, upstream) -> None:
    first = fetch(_pin(upstream), tmp_path)
    assert first.path == tmp_path.resolve() / upstream.pinned and not first.reused
    assert (first.path / "tools/submission/submission_checker/main.py").read_text() == "print('checker')\n"
    assert (first.path / "loadgen/mlperf.conf").read_text() == "*.*.qsl_rng_seed = 1\n"   # the pinned, not the later
    assert (first.path / "tools/submission/preprocess_submission.py").is_file()   # what `podium submit` runs
    assert [name for name in NOT_FETCHED if (first.path / name).exists()] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [upstream.pinned]   # no .partial left
    # the second call reuses it and never asks the remote (this one does not exist)
    again = fetch(SourcePin(repository=(tmp_path / "gone.git").as_uri(), commit=upstream.pinned), tmp_path)
    assert again.reused and again.path == first.path


def test_a_commit_the_remote_lacks_is_refused_with_the_url_and_the_fix(tmp_path: Path, upstream) -> None:
    with pytest.raises(PodiumError) as error:
        fetch(_pin(upstream, "0" * 40), tmp_path)
    text = str(error.value)
    assert f"could not fetch commit {'0' * 40} from {upstream.url}" in text and "--repository" in text
    assert not (tmp_path / ("0" * 40)).exists()


def test_an_interrupted_fetch_resumes(tmp_path: Path, upstream) -> None:
    with pytest.raises(PodiumError, match="could not fetch"):   # the network is down: the work folder stays
        fetch(_pin(upstream), tmp_path, repository=(tmp_path / "unreachable.git").as_uri())
    assert (tmp_path / f"{upstream.pinned}.partial" / ".git").is_dir()
    done = fetch(_pin(upstream), tmp_path)
    assert not done.reused and (done.path / "compliance/TEST07/run_verification.py").is_file()


def test_a_copy_at_another_commit_or_changed_is_refused(tmp_path: Path, upstream) -> None:
    folder = fetch(_pin(upstream), tmp_path).path
    (folder / "loadgen" / "mlperf.conf").write_text("edited\n")
    with pytest.raises(PodiumError, match=r"1 tracked file\(s\) differ .* loadgen/mlperf.conf") as error:
        fetch(_pin(upstream), tmp_path)
    assert f"remove {folder}" in str(error.value)
    _git(folder, "checkout", "--quiet", "--force", "HEAD")
    _git(folder, "fetch", "--quiet", "--depth", "1", "origin", upstream.later)
    _git(folder, "checkout", "--quiet", "--detach", upstream.later)
    with pytest.raises(PodiumError, match=f"is at commit {upstream.later[:12]}, not the pinned {upstream.pinned[:12]}"):
        fetch(_pin(upstream), tmp_path)


def test_a_repository_that_is_not_mlcommons_inference(tmp_path: Path, upstream) -> None:
    with pytest.raises(PodiumError, match=r"has no tools/submission/submission_checker/main\.py"):
        fetch(_pin(upstream, upstream.other), tmp_path)
    assert not (tmp_path / upstream.other).exists()


def test_no_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inference_sources.shutil, "which", lambda name: None)
    with pytest.raises(PodiumError, match="git is not installed") as error:
        fetch(load_rules("v6.1").inference_sources, tmp_path)
    assert "https://github.com/mlcommons/inference" in str(error.value) and "install git" in str(error.value)


def test_cli_prints_the_folder_alone_on_stdout(tmp_path: Path, upstream, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    ws = tmp_path / "ws"
    # the v6.1 pin, which this repository lacks: a clear error, no traceback
    refused = runner.invoke(app, ["fetch-inference", "--repository", upstream.url, "-w", str(ws)])
    assert refused.exit_code == 1 and "Traceback" not in refused.output
    assert f"could not fetch commit {load_rules('v6.1').inference_sources.commit}" in refused.output
    monkeypatch.setattr("submission.rules.load_rules", lambda round: types.SimpleNamespace(
        inference_sources=_pin(upstream)))
    monkeypatch.chdir(tmp_path)   # a mirror given as a relative path
    mirror = os.path.relpath(upstream.path, tmp_path)
    done = runner.invoke(app, ["fetch-inference", "--repository", mirror, "-w", str(ws)])
    assert done.exit_code == 0, done.output
    assert done.stdout == f"{ws.resolve() / 'inference' / upstream.pinned}\n"
    assert "--inference-src" in done.stderr


# ----- `podium fetch-inference --archive`: a `git archive` of the commit, unpacked as `podium fetch` unpacks one -----


def _archive(upstream: types.SimpleNamespace, commit: str, path: Path, fmt: str = "tar.gz") -> Path:
    """`git archive` of `commit`, as GitHub's archive and CI's copy of the official tools are made (the commit in the
    pax header)."""
    _git(upstream.path, "archive", f"--format={fmt}", "-o", str(path), commit)
    return path


def test_an_archive_is_unpacked_with_its_manifest_and_record_then_reused(tmp_path: Path, upstream) -> None:
    archive = _archive(upstream, upstream.pinned, tmp_path / "inference.tar.gz")
    root = tmp_path / "ws" / "inference"
    first = inference_sources.unpack_archive(_pin(upstream), archive, root)
    assert first.path == root.resolve() / upstream.pinned and first.commit == upstream.pinned and not first.reused
    assert (first.path / "tools/submission/submission_checker/main.py").read_text() == "print('checker')\n"
    assert (first.path / "loadgen/mlperf.conf").read_text() == "*.*.qsl_rng_seed = 1\n"   # the pinned, not the later
    manifest = json.loads((first.path / MANIFEST).read_text())
    assert set(manifest) == set(FILES) and manifest["loadgen/mlperf.conf"]["size"] == len("*.*.qsl_rng_seed = 1\n")
    record = json.loads((first.path / FETCHED).read_text())
    assert record["commit"] == upstream.pinned and record["archive"] == str(archive.resolve())
    assert record["archive_sha256"] == sha256_file(archive)
    assert sha256_file(root / f"{upstream.pinned}.tar.gz") == sha256_file(archive)   # kept beside, as `podium fetch`
    assert sorted(p.name for p in root.iterdir()) == [upstream.pinned, f"{upstream.pinned}.tar.gz"]   # nothing left
    stamp = (first.path / FETCHED).stat().st_mtime_ns
    again = inference_sources.unpack_archive(_pin(upstream), archive, root)
    assert again.reused and again.path == first.path and (first.path / FETCHED).stat().st_mtime_ns == stamp
    # the plain command (git) takes the unpacked folder as it is, without git or the network
    plain = fetch(SourcePin(repository=(tmp_path / "gone.git").as_uri(), commit=upstream.pinned), root)
    assert plain.reused and plain.path == first.path
    # another archive of the same commit (plain tar) replaces the copy
    other = inference_sources.unpack_archive(_pin(upstream), _archive(upstream, upstream.pinned, tmp_path / "i.tar",
                                                                      "tar"), root)
    assert not other.reused and json.loads((other.path / FETCHED).read_text())["archive_sha256"] == \
        sha256_file(tmp_path / "i.tar")


def test_an_archive_of_another_commit_or_none_is_refused(tmp_path: Path, upstream) -> None:
    root = tmp_path / "inference"
    later = _archive(upstream, upstream.later, tmp_path / "later.tar.gz")
    with pytest.raises(PodiumError) as error:
        inference_sources.unpack_archive(_pin(upstream), later, root)
    assert f"--archive {later} is the archive of commit {upstream.later}, not the pinned {upstream.pinned}" \
        in error.value.message and "git archive" in error.value.fix
    plain = tmp_path / "plain.tar.gz"   # a tarball that names no commit: not a `git archive`
    with tarfile.open(plain, "w:gz") as tar:
        tar.add(tmp_path / "later.tar.gz", arcname="x")
    with pytest.raises(PodiumError, match="names no commit"):
        inference_sources.unpack_archive(_pin(upstream), plain, root)
    (tmp_path / "junk.tar.gz").write_text("not an archive\n")
    with pytest.raises(PodiumError, match="is not a tar archive"):
        inference_sources.unpack_archive(_pin(upstream), tmp_path / "junk.tar.gz", root)
    with pytest.raises(PodiumError, match="no such file") as gone:
        inference_sources.unpack_archive(_pin(upstream), tmp_path / "gone.tar.gz", root)
    assert "INFERENCE_ARCHIVE" in gone.value.fix
    no_checker = _archive(upstream, upstream.other, tmp_path / "other.tar.gz")
    with pytest.raises(PodiumError, match=r"has no tools/submission/submission_checker/main\.py"):
        inference_sources.unpack_archive(_pin(upstream, upstream.other), no_checker, root)
    assert not root.exists() or [p.name for p in root.iterdir() if not p.name.endswith(".tar.gz")] == []


def test_a_tampered_file_is_refused_by_the_fetch_and_by_preflight(tmp_path: Path, upstream,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from tasks.ops import prerequisites

    archive = _archive(upstream, upstream.pinned, tmp_path / "inference.tar.gz")
    folder = inference_sources.unpack_archive(_pin(upstream), archive, tmp_path / "inference").path
    monkeypatch.setattr(prerequisites, "load_rules", lambda round: types.SimpleNamespace(
        inference_sources=_pin(upstream)))
    plan = _plan_with(folder)
    assert prerequisites.inference_src_problems(plan) == []
    conf = folder / "loadgen" / "mlperf.conf"
    conf.write_text(conf.read_text().replace("1", "7"))   # the same size: only the hash tells
    with pytest.raises(PodiumError, match="files of its manifest are missing or changed since it was unpacked "
                                          r"\(1, e\.g\. loadgen/mlperf\.conf\)") as error:
        inference_sources.unpack_archive(_pin(upstream), archive, tmp_path / "inference")
    assert f"remove {folder}" in error.value.fix
    [problem] = prerequisites.inference_src_problems(plan)
    assert problem.where == "inference_src" and "loadgen/mlperf.conf" in problem.message
    assert "--archive" in problem.fix
    conf.unlink()
    [problem] = prerequisites.inference_src_problems(plan)
    assert "files of its manifest are missing or changed" in problem.message
    monkeypatch.setattr(prerequisites, "load_rules", lambda round: types.SimpleNamespace(
        inference_sources=_pin(upstream, upstream.later)))
    (folder / "loadgen" / "mlperf.conf").write_text("*.*.qsl_rng_seed = 1\n")
    [problem] = prerequisites.inference_src_problems(plan)
    assert f"it is the archive of commit {upstream.pinned[:12]}, not the pinned {upstream.later[:12]}" \
        in problem.message


def _plan_with(inference_src: Path):
    """A shipped plan with `inference_src` set (its own fetch section dropped: it names the source elsewhere)."""
    import yaml

    from submission.plan import model as plans

    data = yaml.safe_load((Path(__file__).parents[2] / "deployments" / "plans" /
                           "gpt-oss-120b-trtllm-k8s.yaml").read_text())
    data.pop("fetch", None)
    return plans.parse({**data, "inference_src": str(inference_src)})


def test_cli_unpacks_an_archive_and_prints_the_folder_alone(tmp_path: Path, upstream,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    ws = tmp_path / "ws"
    archive = _archive(upstream, upstream.pinned, tmp_path / "inference.tar.gz")
    refused = runner.invoke(app, ["fetch-inference", "--archive", str(archive), "-w", str(ws)])   # the v6.1 pin
    assert refused.exit_code == 1 and "Traceback" not in refused.output
    assert f"is the archive of commit {upstream.pinned}, not the pinned " \
           f"{load_rules('v6.1').inference_sources.commit}" in refused.output
    monkeypatch.setattr("submission.rules.load_rules", lambda round: types.SimpleNamespace(
        inference_sources=_pin(upstream)))
    both = runner.invoke(app, ["fetch-inference", "--archive", str(archive), "--repository", upstream.url])
    assert both.exit_code == 2 and "--archive and --repository" in both.output
    for said in ("unpacked from", "already there, checked"):
        done = runner.invoke(app, ["fetch-inference", "--archive", str(archive), "-w", str(ws)])
        assert done.exit_code == 0, done.output
        assert done.stdout == f"{ws.resolve() / 'inference' / upstream.pinned}\n" and said in done.stderr


def test_the_official_tools_the_suite_runs_are_accepted_as_the_round_pins_them(inference_src: Path) -> None:
    """What `make test` unpacked (or PODIUM_INFERENCE_SRC names) is mlcommons/inference at the v6.1 pin as preflight
    accepts it: the official checks the suite runs are the round's."""
    from tasks.ops import prerequisites

    assert prerequisites.inference_src_problems(_plan_with(inference_src)) == []
