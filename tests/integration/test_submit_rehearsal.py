"""Submission day on a rehearsal tree of each seed benchmark: `podium submit --test-upload --dry-run` with the
round's official checker passes both as it is (the round's preprocess_submission.py, which stops on the first and
drops the results of the second, runs only when asked), and each tree's src/podium/ holds Podium's source at the
run's commit. The trees come from the rehearsal plans of the shipped seed plans and the assemble task itself, fed
with real loadgen runs of gpt-oss-120b (tests/checker_corpus.py's: Offline and Server, their accuracy runs, TEST07
and TEST09) and with endpoints client reports of Qwen3-VL in their documented schema."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from submission.plan import model as plans
from submission.results.runs import AuditRecord, RunRecord
from submission.tree import source
from submission.tree.paths import Tree
from submission.tree.rehearsal_marker import MARKER
from tests import checker_corpus as corpus
from tests.integration.conftest import REPO

pytestmark = pytest.mark.integration

SCENARIOS = ("Offline", "Server")   # what a closed gpt-oss-120b result needs (Server, or Interactive, and Offline)


def rehearsal_of(plan_file: str, benchmark: str, base: Path) -> plans.Plan:
    """The plan `podium rehearse` makes of a shipped plan (tasks.rehearsal.plan), over a small synthetic set."""
    from tasks.rehearsal import data
    from tasks.rehearsal.plan import rehearsal_plan

    built = data.build(benchmark, base / benchmark, scale=0.002)
    original = yaml.safe_load((REPO / "deployments" / "plans" / plan_file).read_text())
    return plans.parse(rehearsal_plan(original, {benchmark: built}))


def gpt_records(plan: plans.Plan, base: Path) -> tuple[list[RunRecord], list[AuditRecord]]:
    """Real loadgen runs of gpt-oss-120b (tests/checker_corpus.py): each scenario's performance run, its accuracy run
    (scored) and its TEST07 and TEST09 runs, laid out as their run_verification.py leaves them."""
    kinds = {"perf": {}, "acc": {"mode": "accuracy", "tokens": corpus.ACC_TOKENS}, "TEST07": {"audit": "TEST07"},
             "TEST09": {"audit": "TEST09"}}
    with ThreadPoolExecutor(max_workers=2) as pool:
        started = {f"{kind}-{sc}": pool.submit(corpus.run, base / f"{kind}-{sc}", sc, **options)
                   for sc in SCENARIOS for kind, options in kinds.items()}
        runs = {name: future.result() for name, future in started.items()}
    where = {"system": plan.benchmarks[0].system, "benchmark": corpus.GPT}
    records, audits = [], []
    for sc in SCENARIOS:
        acc = runs[f"acc-{sc}"]
        exact, tokens = corpus.score(acc / "mlperf_log_accuracy.json")
        (acc / "accuracy.txt").write_text(f"{{'exact_match': {exact:.3f}, 'tokens_per_sample': {tokens:.1f}}}\n")
        records += [RunRecord(key=f"perf-{sc}", scenario=sc, mode="performance", run_dir=str(runs[f"perf-{sc}"]),
                              valid=True, validity="VALID", **where),
                    RunRecord(key=f"acc-{sc}", scenario=sc, mode="accuracy", run_dir=str(acc), valid=None,
                              validity=None, accuracy_metric="exact_match", accuracy=exact, accuracy_pass=True,
                              **where)]
        for test in ("TEST07", "TEST09"):
            run, folder = runs[f"{test}-{sc}"], base / "audits" / f"{test}-{sc}"
            corpus.copy(corpus.PERF, run, folder / "performance" / "run_1")
            corpus.copy(("mlperf_log_accuracy.json",), run, folder / "accuracy")
            for name, text in corpus.verify_files(test, run).items():
                corpus.write(folder / name, text)
            audits.append(AuditRecord(key=f"{test}-{sc}", scenario=sc, test=test, run_dir=str(run),
                                      folder=str(folder), passed=True, checks=(), **where))
    return records, audits


def qwen_records(plan: plans.Plan, base: Path) -> list[RunRecord]:
    """One endpoints client report per Qwen3-VL scenario of the plan (`--mode both`: a performance and an accuracy
    row), its files as tests/checker_corpus.py writes them."""
    from submission.results.runs import CLIENT_REPORT

    written = Tree(base / "written", "closed", corpus.ORG)
    records = []
    for sc in plan.benchmarks[0].scenarios:
        corpus.qwen_scenario(written, sc)
        at = (corpus.SYSTEM, corpus.QWEN, sc)
        for name, src in (("config.yaml", written.endpoints_config(*at)),
                          ("performance/result_summary.json", written.endpoints_result_summary(*at)),
                          ("accuracy/accuracy_results.json", written.endpoints_accuracy_results(*at))):
            (base / sc / CLIENT_REPORT / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, base / sc / CLIENT_REPORT / name)
        records += [RunRecord(key=f"{sc}-{mode}", system=plan.benchmarks[0].system, benchmark=corpus.QWEN,
                              scenario=sc, mode=mode, run_dir=str(base / sc), harness="endpoints",
                              valid=True if mode == "performance" else None,
                              validity="VALID" if mode == "performance" else None)
                    for mode in ("performance", "accuracy")]
    return records


def check_source(tarball: Path, commit: str, unpacked: Path) -> source.Code:
    """The tarball's src/podium/ holds Podium's source at the run's `commit`: the archive `git archive` of it gives
    (any uncommitted changes as a diff that applies to it), or outside a git checkout the packages' files."""
    with tarfile.open(tarball) as tar:
        tar.extractall(unpacked, filter="data")
    folder = unpacked / "closed" / "Podium" / "src" / "podium"
    [code] = source.read(folder)
    archive = (folder / code.archive.name).read_bytes()
    assert hashlib.sha256(archive).hexdigest() == code.archive.sha256
    assert f"sha256 `{code.archive.sha256}`" in (folder / "README.md").read_text()
    if commit == "unknown":
        assert code.origin == "installed"
        return code
    assert code.origin == "git" and code.commit.startswith(commit.removesuffix(source.DIRTY))
    tar = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", f"--prefix=podium-{code.commit[:12]}/",
                          code.commit], capture_output=True, check=True).stdout
    assert gzip.decompress(archive) == tar
    if code.diff is not None:
        with tarfile.open(folder / code.archive.name) as tar_file:
            tar_file.extractall(unpacked / "source", filter="data")
        subprocess.run(["git", "apply", "--check", str(folder / code.diff.name)], check=True,
                       cwd=unpacked / "source" / f"podium-{code.commit[:12]}")
    return code


def test_submit_takes_a_rehearsal_tree_of_each_seed_benchmark(tmp_path: Path, inference_src: Path,
                                                              prefect_server: None) -> None:
    from tasks.ops.prerequisites import describe_systems
    from tasks.tree import assemble_tree
    from tasks.workspace import git_commit

    commit = git_commit()
    gpt = rehearsal_of("gpt-oss-120b-trtllm-k8s.yaml", corpus.GPT, tmp_path / "data")
    qwen = rehearsal_of("qwen3-vl-dynamo-75-25.yaml", corpus.QWEN, tmp_path / "data")
    trees = {"gpt-oss-120b": (gpt, *gpt_records(gpt, tmp_path / "gpt-runs")),
             "qwen3-vl": (qwen, qwen_records(qwen, tmp_path / "qwen-runs"), [])}
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    for name, (plan, records, audits) in trees.items():
        system = plan.benchmarks[0].system
        systems = describe_systems(plan, {system: corpus.system_description()})
        tree = Path(assemble_tree.fn(plan, records, systems, str(tmp_path / name), commit, audits))
        assert (tree / MARKER).is_file()   # a rehearsal's tree: it goes only as a test
        out = tmp_path / f"{name}.submit"
        done = subprocess.run([str(Path(sys.executable).parent / "podium"), "submit", str(tree), "--test-upload",
                               "--dry-run", "--inference-src", str(inference_src), "--out", str(out),
                               "--workspace", str(tmp_path / "ws")], capture_output=True, text=True, timeout=600,
                              env=env, check=False, cwd=tmp_path)
        said = done.stdout + done.stderr
        assert done.returncode == 0, f"{name}: {said[-4000:]}"
        lines = done.stdout.splitlines()
        assert "official        SUMMARY: submission looks OK" in lines, name
        assert f"dry run: nothing uploaded; the TEST upload would send {out / 'submission.tar.gz'}; ran Podium's " \
               "checker, the official checker (submission looks OK); not run: preprocess_submission.py, optional " \
               "in the submission guide, not asked for (--preprocess runs it)" in lines, said[-3000:]
        code = check_source(out / "submission.tar.gz", commit, tmp_path / f"{name}.unpacked")
        print(f"{name}: src/podium/{code.archive.name} ({code.origin}, {code.archive.size:,} bytes)"
              f"{f', {len(code.uncommitted)} uncommitted file(s)' if code.uncommitted else ''}")
