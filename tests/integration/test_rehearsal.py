"""The dress rehearsal's CI-sized variant, for real: `podium rehearse` of the shipped gpt-oss-120b plan with its
Offline scenario alone (`--only`), at full counts: 6396 performance samples over the round's 600 s of loadgen's
clock, the 4395-sample accuracy run (about 32 M answer tokens, a 260 MB accuracy log) scored by the real evaluators
(LiveCodeBench programs in their sandbox included), TEST07 (990 samples) and TEST09 (6396), truncation, the tree, the
tarball and the upload to the embedded S3 server. Offline has no latency bound, so the client and the engine run
on a x50 clock: only the CPU sets the pace. The whole plan (Server too) and the official checker are the manual
rehearsal's (docs/benchmarks.md, "Dress rehearsal"); here Podium's checker finds exactly the missing Server.

Then submission day on a rehearsal tree of each seed benchmark: `podium submit --test-upload --dry-run` with the
round's official checker passes both as it is (the round's preprocess_submission.py, which stops on the first and
drops the results of the second, runs only when asked), and each tree's src/podium/ holds Podium's source at the
run's commit. The trees come from the rehearsal plans of the shipped seed plans and the assemble task itself, fed
with real loadgen runs of gpt-oss-120b (tests/checker_corpus.py's: Offline and Server, their accuracy runs, TEST07
and TEST09) and with endpoints client reports of Qwen3-VL in their documented schema."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from submission.plan import model as plans
from submission.results.logs import load_run
from submission.results.runs import AuditRecord, RunRecord
from submission.tree import source
from submission.tree.paths import Tree
from submission.tree.rehearsal_marker import MARKER
from tests import checker_corpus as corpus
from tests.integration.conftest import REPO

pytestmark = pytest.mark.integration

PLAN = REPO / "deployments" / "plans" / "gpt-oss-120b-trtllm-k8s.yaml"
OFFLINE = "rehearsal-gb200x4-k8s/gpt-oss-120b/Offline"


def test_one_scenario_at_full_size(tmp_path: Path, inference_src: Path) -> None:
    ws = tmp_path / "ws"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}   # its own temporary server
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    began = time.monotonic()
    done = subprocess.run([str(Path(sys.executable).parent / "podium"), "rehearse", str(PLAN), "--workspace", str(ws),
                           "--clock", "x50", "--only", OFFLINE], capture_output=True, text=True, timeout=900,
                          env=env, check=False, cwd=tmp_path)
    print(f"podium rehearse --only {OFFLINE} --clock x50: {time.monotonic() - began:.0f} s")
    out = done.stdout + done.stderr
    folder = (ws / "runs" / "latest").resolve()
    assert (folder / "rehearsal.md").is_file(), out[-4000:]
    runs = {r["mode"]: RunRecord.model_validate(r) for r in json.loads((folder / "results.json").read_text())}
    perf = load_run(Path(runs["performance"].run_dir))
    assert perf.validity == "VALID" and perf.generated_samples_per_query == 6396, out[-4000:]
    assert perf.settings.min_duration_ms == 600_000
    accuracy = runs["accuracy"]
    assert accuracy.accuracy_pass and accuracy.accuracy > 86.0   # the synthetic answers score 87.586
    audits = {a["test"]: AuditRecord.model_validate(a) for a in json.loads((folder / "compliance.json").read_text())}
    assert set(audits) == {"TEST07", "TEST09"} and all(a.passed for a in audits.values())
    tree = folder / "submission"
    assert (tree / MARKER).is_file()
    full = list((folder / "logs").rglob("mlperf_log_accuracy.json"))
    truncated = list(tree.rglob("mlperf_log_accuracy.json"))
    assert max(p.stat().st_size for p in full) > 200e6 and max(p.stat().st_size for p in truncated) < 100e3
    assert (folder / "submission.tar.gz").is_file()
    [code] = source.read(tree / "closed" / "Podium" / "src" / "podium")   # Podium's source, whole
    assert code.archive.size > 100e3 and (tree / "closed" / "Podium" / "src" / "podium" / code.archive.name).is_file()
    report = (folder / "report.md").read_text()   # the one error: the Server the run left out (--only)
    assert "1 error(s)" in report and "missing scenarios: (one of) Interactive or Server" in report, report
    assert "x50" in (folder / "rehearsal.md").read_text()
    assert done.returncode != 0 and "DRESS REHEARSAL" in out   # a checker error fails the run, as in any run
    # the round's checker on the same tree (`podium check --inference-src`): the same one error, in its own words
    from submission.checks.official import check_all

    checked = check_all(tree.resolve(), "v6.1", inference_src=inference_src)
    detail = tree.resolve() / "closed" / "Podium" / "results" / OFFLINE / "performance" / "run_1" / \
        "mlperf_log_detail.txt"
    assert checked.official.errors == [
        f"{detail} does not have all required scenarios, missing ['(one of) Interactive or Server']",
        f"Some performance checks Checks failed for: {detail}", f"NoResults {detail}",
        "SUMMARY: submission has errors"], checked.official.output_tail
    assert [f.rule for f in checked.report.errors] == ["required-scenarios"] and checked.differences == []


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
