"""The DeepSeek-R1 dress rehearsal's CI-sized variant, for real: `podium rehearse` of the shipped SGLang plan
(deployments/plans/deepseek-r1-sglang.yaml) with its Offline scenario alone, on synthetic data sets at 0.05 of their
rows (`--scale`): the simulated engine in SGLang's place, answers of the reference's length (about 3,900 tokens), the
accuracy run scored through the round's evaluator with the fetched PRM800K grader and the LiveCodeBench sandbox,
TEST06 with the official run_verification.py beside Podium's verdict, the tree, the tarball, the upload. The data sets
are smaller than the rules ask, so both checkers name exactly that (and the scenarios left out); the whole plan at
full size is the manual's rehearsal (docs/benchmarks.md, "Dress rehearsal")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from submission.results.logs import load_run
from submission.results.runs import AuditRecord, RunRecord
from submission.tree.rehearsal_marker import MARKER
from tests.integration.conftest import REPO

pytestmark = pytest.mark.integration

PLAN = REPO / "deployments" / "plans" / "deepseek-r1-sglang.yaml"
OFFLINE = "rehearsal-b200x8-slurm/deepseek-r1/Offline"
SCALE = 0.05


def test_the_deepseek_plan_rehearses_end_to_end_at_a_small_scale(tmp_path: Path, inference_src: Path,
                                                                  prm800k_src: Path) -> None:
    ws = tmp_path / "ws"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}   # its own temporary server
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    began = time.monotonic()
    done = subprocess.run([str(Path(sys.executable).parent / "podium"), "rehearse", str(PLAN), "--workspace", str(ws),
                           "--clock", "x50", "--only", OFFLINE, "--scale", str(SCALE), "--math-grader",
                           str(prm800k_src), "--inference-src", str(inference_src)],
                          capture_output=True, text=True, timeout=900, env=env, check=False, cwd=tmp_path)
    print(f"podium rehearse --scale {SCALE} --only {OFFLINE}: {time.monotonic() - began:.0f} s")
    out = done.stdout + done.stderr
    folder = (ws / "runs" / "latest").resolve()
    assert (folder / "rehearsal.md").is_file(), out[-4000:]
    runs = {r["mode"]: RunRecord.model_validate(r) for r in json.loads((folder / "results.json").read_text())}
    perf = load_run(Path(runs["performance"].run_dir))
    assert perf.validity == "VALID" and perf.generated_samples_per_query >= 4388, out[-4000:]   # mlperf.conf: 4388
    accuracy = runs["accuracy"]
    assert accuracy.accuracy_metric == "exact_match" and accuracy.accuracy_pass, accuracy
    [audit] = [AuditRecord.model_validate(a) for a in json.loads((folder / "compliance.json").read_text())]
    assert audit.test == "TEST06" and audit.passed and audit.official == "PASS" and not audit.disagreement, audit
    tree = folder / "submission"
    assert (tree / MARKER).is_file() and (folder / "submission.tar.gz").is_file()
    said = (folder / "rehearsal.md").read_text()
    assert f"at {SCALE:g} of their rows (--scale)" in said and "x50" in said
    report = (folder / "report.md").read_text()
    assert f"at {SCALE:g} of their rows" in report
    # the checker names what the scale and --only leave short, and nothing else
    assert "1 scenario folder(s) checked against v6.1: 2 error(s)" in report, report
    assert "missing scenarios: (one of) Interactive or Server" in report
    assert "accuracy run covered 220 samples, not 4388" in report
    assert done.returncode != 0 and "DRESS REHEARSAL" in out   # the checkers' errors fail the run, as in any run
