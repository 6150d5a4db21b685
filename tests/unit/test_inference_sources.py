"""`podium fetch-inference` (tasks/ops/inference_sources.py) against a local bare git repository shaped like
mlcommons/inference: the real git, a file:// remote that serves blobs on demand as GitHub does. It fetches only what
Podium uses at the pinned commit, reuses a verified copy without the network, resumes an interrupted fetch, and
refuses a commit the remote lacks, a copy at another commit or with changed files, and a missing git."""

from __future__ import annotations

import os
import subprocess
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from submission.base.errors import PodiumError
from submission.rules import SourcePin, load_rules
from tasks.ops import inference_sources
from tasks.ops.inference_sources import fetch

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
