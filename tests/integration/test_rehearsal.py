"""The dress rehearsal's CI-sized variant, for real: `podium rehearse` of the shipped gpt-oss-120b plan with its
Offline scenario alone (`--only`), at full counts: 6396 performance samples over the round's 600 s of loadgen's
clock, the 4395-sample accuracy run (about 32 M answer tokens, a 260 MB accuracy log) scored by the real evaluators
(LiveCodeBench programs in their sandbox included), TEST07 (990 samples) and TEST09 (6396), truncation, the tree, the
tarball and the upload to the embedded S3 server. Offline has no latency bound, so the client and the engine run
on a x50 clock: only the CPU sets the pace. The whole plan (Server too) and the official checker are the manual
rehearsal's (docs/benchmarks.md, "Dress rehearsal"); here Podium's checker finds exactly the missing Server."""

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
from submission.tree import source
from submission.tree.rehearsal_marker import MARKER
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
