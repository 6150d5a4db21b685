"""The dress rehearsal's CI-sized variants, for real, and the two rehearsals curated into one tree.

- `podium rehearse` of the shipped gpt-oss-120b plan (deployments/plans/gpt-oss-120b-trtllm-k8s.yaml) with its Offline
  scenario alone (`--only`), at full counts: 6396 performance samples over the round's 600 s of loadgen's clock, the
  4395-sample accuracy run (about 32 M answer tokens, a 260 MB accuracy log) scored by the real evaluators
  (LiveCodeBench programs in their sandbox included), TEST07 (990 samples) and TEST09 (6396), truncation, the tree, the
  tarball and the upload to the embedded S3 server. Offline has no latency bound, so the client and the engine run on
  a x50 clock: only the CPU sets the pace.
- `podium rehearse` of the shipped DeepSeek-R1 SGLang plan on 512 AMD MI355X
  (deployments/plans/deepseek-r1-sglang-512.yaml) at its 1-node step (`--nodes 1`: one TP8 replica on 8 GPUs),
  Offline alone, on synthetic data sets at 0.05 of their rows (`--scale`): answers of the reference's length (about
  3,900 tokens), the accuracy run scored through the round's evaluator with the fetched PRM800K grader, TEST06 with
  the official run_verification.py beside Podium's verdict.
- `podium assemble` of the two rehearsals' run folders: one tree of two of the round fleet's five systems (a GB200
  one and an MI355X one) that stays a rehearsal's (the marker,
  `podium package` refusing it), in which the round's checker finds exactly the errors it finds in the two trees
  apart (what `--only` and `--scale` leave short), and nothing the curation added.
The whole plans and the whole round's five systems are the manual's rehearsals (docs/benchmarks.md, "Dress
rehearsal"; docs/fleet.md, "The round as one fleet")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from submission.checks.official import check_all
from submission.results.logs import load_run
from submission.results.runs import AuditRecord, RunRecord
from submission.tree import source
from submission.tree.rehearsal_marker import MARKER
from tests.integration.conftest import REPO

pytestmark = pytest.mark.integration

PLANS = REPO / "deployments" / "plans"
GPT_OFFLINE = "rehearsal-gb200x4-k8s/gpt-oss-120b/Offline"
DS_OFFLINE = "rehearsal-mi355x-sglang-k8s-n1/deepseek-r1/Offline"
SCALE = 0.05


@dataclass(frozen=True)
class Rehearsal:
    folder: Path        # the run folder (<workspace>/runs/<flow run id>)
    output: str         # the command's stdout and stderr
    returncode: int

    @property
    def tree(self) -> Path:
        return self.folder / "submission"

    def records(self) -> dict[str, RunRecord]:
        return {r["mode"]: RunRecord.model_validate(r) for r in json.loads((self.folder / "results.json").read_text())}

    def audits(self) -> dict[str, AuditRecord]:
        return {a["test"]: AuditRecord.model_validate(a)
                for a in json.loads((self.folder / "compliance.json").read_text())}


def _rehearse(base: Path, plan: str, *options: str) -> Rehearsal:
    """`podium rehearse PLAN OPTIONS` in its own workspace, on its own temporary Prefect server."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    ws = base / "ws"
    began = time.monotonic()
    done = subprocess.run([str(Path(sys.executable).parent / "podium"), "rehearse", str(PLANS / plan), "--workspace",
                           str(ws), "--clock", "x50", *options], capture_output=True, text=True, timeout=900,
                          env=env, check=False, cwd=base)
    print(f"podium rehearse {plan} {' '.join(options)}: {time.monotonic() - began:.0f} s")
    rehearsal = Rehearsal((ws / "runs" / "latest").resolve(), done.stdout + done.stderr, done.returncode)
    assert (rehearsal.folder / "rehearsal.md").is_file(), rehearsal.output[-4000:]
    return rehearsal


@pytest.fixture(scope="module")
def gpt(tmp_path_factory: pytest.TempPathFactory) -> Rehearsal:
    return _rehearse(tmp_path_factory.mktemp("gpt"), "gpt-oss-120b-trtllm-k8s.yaml", "--only", GPT_OFFLINE)


@pytest.fixture(scope="module")
def deepseek(tmp_path_factory: pytest.TempPathFactory, inference_src: Path, prm800k_src: Path) -> Rehearsal:
    return _rehearse(tmp_path_factory.mktemp("deepseek"), "deepseek-r1-sglang-512.yaml", "--nodes", "1", "--only",
                     DS_OFFLINE, "--scale", str(SCALE), "--math-grader", str(prm800k_src), "--inference-src",
                     str(inference_src))


def test_one_scenario_at_full_size(gpt: Rehearsal, inference_src: Path) -> None:
    runs, folder, tree = gpt.records(), gpt.folder, gpt.tree
    perf = load_run(Path(runs["performance"].run_dir))
    assert perf.validity == "VALID" and perf.generated_samples_per_query == 6396, gpt.output[-4000:]
    assert perf.settings.min_duration_ms == 600_000
    accuracy = runs["accuracy"]
    assert accuracy.accuracy_pass and accuracy.accuracy > 86.0   # the synthetic answers score 87.586
    audits = gpt.audits()
    assert set(audits) == {"TEST07", "TEST09"} and all(a.passed for a in audits.values())
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
    assert gpt.returncode != 0 and "DRESS REHEARSAL" in gpt.output   # a checker error fails the run, as in any run
    # the round's checker on the same tree (`podium check --inference-src`): the same one error, in its own words
    checked = check_all(tree, "v6.1", inference_src=inference_src)
    detail = tree / "closed" / "Podium" / "results" / GPT_OFFLINE / "performance" / "run_1" / "mlperf_log_detail.txt"
    assert checked.official.errors == [
        f"{detail} does not have all required scenarios, missing ['(one of) Interactive or Server']",
        f"Some performance checks Checks failed for: {detail}", f"NoResults {detail}",
        "SUMMARY: submission has errors"], checked.official.output_tail
    assert [f.rule for f in checked.report.errors] == ["required-scenarios"] and checked.differences == []


def test_the_deepseek_plan_rehearses_its_one_node_step_at_a_small_scale(deepseek: Rehearsal) -> None:
    runs, folder = deepseek.records(), deepseek.folder
    perf = load_run(Path(runs["performance"].run_dir))
    assert perf.validity == "VALID" and perf.generated_samples_per_query >= 4388, deepseek.output[-4000:]  # mlperf.conf
    accuracy = runs["accuracy"]
    assert accuracy.accuracy_metric == "exact_match" and accuracy.accuracy_pass, accuracy
    [audit] = deepseek.audits().values()
    assert audit.test == "TEST06" and audit.passed and audit.official == "PASS" and not audit.disagreement, audit
    assert (deepseek.tree / MARKER).is_file() and (folder / "submission.tar.gz").is_file()
    said = (folder / "rehearsal.md").read_text()
    assert f"at {SCALE:g} of their rows (--scale)" in said and "x50" in said
    report = (folder / "report.md").read_text()
    assert f"at {SCALE:g} of their rows" in report
    # the checker names what the scale and --only leave short, and nothing else
    assert "1 scenario folder(s) checked against v6.1: 2 error(s)" in report, report
    assert "missing scenarios: (one of) Interactive or Server" in report
    assert "accuracy run covered 220 samples, not 4388" in report
    assert deepseek.returncode != 0 and "DRESS REHEARSAL" in deepseek.output   # the errors fail it, as in any run


def _errors(tree: Path, inference_src: Path) -> tuple[list[str], list[str]]:
    """The round's checker's errors on `tree`, its paths made relative, and Podium's checker's rules."""
    checked = check_all(tree, "v6.1", inference_src=inference_src)
    official = sorted(e.replace(f"{tree}/", "") for e in checked.official.errors if not e.startswith("SUMMARY"))
    return official, sorted(f.rule for f in checked.report.errors)


def test_the_two_rehearsals_curate_into_one_rehearsal_tree(gpt: Rehearsal, deepseek: Rehearsal, inference_src: Path,
                                                           tmp_path: Path) -> None:
    out = tmp_path / "round"
    done = CliRunner().invoke(app, ["assemble", "--from", str(gpt.folder), "--from", str(deepseek.folder), "--out",
                                    str(out), "--inference-src", str(inference_src), "--workspace",
                                    str(tmp_path / "ws")])
    assert done.exit_code == 1, done.output   # the checkers' errors: what --only and --scale left short
    assert "a dress rehearsal's tree: never packaged" in done.output and "next: podium package" not in done.output
    root = out / "submission"
    results = root / "closed" / "Podium" / "results"
    assert sorted(p.relative_to(results).as_posix() for p in results.glob("*/*/*")) == [GPT_OFFLINE, DS_OFFLINE]
    assert sorted(p.name for p in (root / "closed" / "Podium" / "systems").iterdir()) == [
        "rehearsal-gb200x4-k8s.json", "rehearsal-mi355x-sglang-k8s-n1.json"]
    record = json.loads((out / "curation.json").read_text())
    assert record["profile"] == "rehearsal" and {c["run_id"] for c in record["chosen"]} == {
        gpt.folder.name, deepseek.folder.name}
    assert (root / MARKER).is_file()
    refused = CliRunner().invoke(app, ["package", str(root), "--out", str(tmp_path / "pkg")])
    assert refused.exit_code == 2 and "dress rehearsal's tree" in refused.output, refused.output
    # both checkers find in the one tree exactly what they find in the two apart
    apart = [_errors(r.tree, inference_src) for r in (gpt, deepseek)]
    official, podium = _errors(root, inference_src)
    assert official == sorted(apart[0][0] + apart[1][0]), official
    systems = [scenario.split("/")[0] for scenario in (GPT_OFFLINE, DS_OFFLINE)]
    assert [sum(system in e for e in official) for system in systems] == [3, 5], official
    # (the missing Server of each system, and the accuracy run's 220 samples of 4388)
    assert podium == sorted(apart[0][1] + apart[1][1]), podium
