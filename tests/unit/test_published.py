"""The published v6.1 results as data and the comparison per accelerator, pinned on rows of
mlcommons/inference_results_v6.1 summary.csv @ 7bf15fd (submission/rules/published-v6.1.csv)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from submission.base.errors import PlanError
from submission.checks import gates
from submission.plan.model import GatesSpec
from submission.results import published as pub

COMMIT = "7bf15fd8089655a71fb75c81a744d7ba5a632424"


@pytest.fixture(scope="module")
def data() -> pub.Published:
    return pub.load("v6.1")


def test_the_file_names_its_source_and_holds_the_rows_of_the_benchmarks_the_rules_know(data: pub.Published) -> None:
    assert data.commit == COMMIT and "mlcommons/inference_results_v6.1 summary.csv" in data.source
    counts: dict[str, int] = {}
    for r in data.results:
        counts[r.benchmark] = counts.get(r.benchmark, 0) + 1
    assert counts == {"gpt-oss-120b": 112, "qwen3-vl-235b-a22b": 47, "deepseek-r1": 76, "llama2-70b-99.9": 88,
                      "llama3.1-8b": 77}
    assert counts["gpt-oss-120b"] + counts["qwen3-vl-235b-a22b"] == 159   # the count the summary.csv gives
    assert {r.division for r in data.results} == {"closed", "open"}
    assert all(r.location.startswith(f"./{r.division}/{r.submitter}/results/") for r in data.results)


def test_crusoe_s_gb200_against_the_best_published_gb200(data: pub.Published) -> None:
    """50,912.9 tokens/s on 4 GB200 is 12,728 per GPU: 83.2 % of RedHat_Supermicro's NVL4 board (15,301.4)."""
    c = pub.compare(data, "gpt-oss-120b", "Offline", 50912.9, "Tokens/s", "NVIDIA GB200", 4, system="crusoe")
    assert c.per_accelerator == pytest.approx(12728.225)
    assert c.best.submitter == "RedHat_Supermicro" and c.best.per_accelerator == pytest.approx(15301.4)
    assert c.fraction == pytest.approx(0.8318, abs=1e-4)
    assert c.same_count.submitter == "RedHat_Supermicro" and c.same_count_fraction == pytest.approx(0.8318, abs=1e-4)
    assert c.rank == 2 and len(c.results) == 5 and c.matched == ["NVIDIA GB200"] and c.target_bound is None
    assert c.line() == "gpt-oss-120b Offline: 83 % of the best published GB200 per GPU"
    assert c.line(0.9) == "gpt-oss-120b Offline: 83 % of the best published GB200 per GPU FAIL: under 90 %"


@pytest.mark.parametrize(("name", "key"), [
    ("NVIDIA B300-SXM-270GB", "b300"), ("Nvidia B300-SXM-270GB", "b300"), ("NVIDIA B300", "b300"),
    ("AMD Instinct MI355X 288GB HBM3e", "mi355x"), ("NVIDIA RTX PRO 6000 Blackwell Server Edition",
                                                   "rtx pro 6000 blackwell"),
    ("NVIDIA RTX PRO 6000 Blackwell", "rtx pro 6000 blackwell"), ("Intel(R) Arc(TM) Pro B70", "arc pro b70"),
    ("N/A", ""), ("GB200", "gb200")])
def test_accelerator_names_match_by_a_key(name: str, key: str) -> None:
    assert pub.accelerator_key(name) == key


def test_spellings_of_one_accelerator_all_match_and_are_shown(data: pub.Published) -> None:
    b300 = pub.compare(data, "gpt-oss-120b", "Offline", 100000, "Tokens/s", "B300", 8)
    assert b300.matched == ["NVIDIA B300-SXM-270GB", "Nvidia B300-SXM-270GB"]   # Dell writes "Nvidia"
    rtx = pub.compare(data, "llama2-70b-99.9", "Offline", 20000, "Tokens/s", "NVIDIA RTX PRO 6000 Blackwell", 8)
    assert rtx.matched == ["NVIDIA RTX PRO 6000 Blackwell", "NVIDIA RTX PRO 6000 Blackwell Server Edition"]


def test_mixed_accelerator_systems_are_left_out(data: pub.Published) -> None:
    c = pub.compare(data, "gpt-oss-120b", "Offline", 100000, "Tokens/s", "NVIDIA H200-SXM-141GB", 8)
    assert pub.mixed("NVIDIA H200-SXM-141GB + AMD Instinct MI350X 288GB HBM3e")
    assert c.results == [] and c.mixed_left_out == 2 and c.fraction is None   # Cisco's H200+MI350X, MangoBoost's
    assert c.line() == "gpt-oss-120b Offline: no published closed result for accelerator 'NVIDIA H200-SXM-141GB'"


def test_a_preview_best_is_said(data: pub.Published) -> None:
    c = pub.compare(data, "deepseek-r1", "Offline", 700000, "Tokens/s", "NVIDIA Vera Rubin", 72)
    assert c.best.availability == "preview" and "(a preview result)" in c.line()


def test_target_bound_scenarios_are_flagged_and_not_gated(data: pub.Published) -> None:
    """Qwen3-VL Interactive: 3.994 q/s on 4 GB200 (Crusoe) and on 8 B300 (NVIDIA, Oracle)."""
    c = pub.compare(data, "qwen3-vl-235b-a22b", "Interactive", 3.99, "Queries/s", "NVIDIA GB200", 4, system="s")
    assert c.target_bound == pytest.approx(3.99406, abs=1e-5) and "bound by a target" in c.line(0.9)
    offline = pub.compare(data, "qwen3-vl-235b-a22b", "Offline", 30, "Samples/s", "NVIDIA GB200", 4, system="s")
    assert offline.target_bound is None
    found = gates.published([c, offline], 0.9)
    assert [(g.passed, g.bound) for g in found] == [(None, "reported"), (False, ">= 0.9")]
    for b in ("gpt-oss-120b", "deepseek-r1", "llama2-70b-99.9", "llama3.1-8b"):   # no other scenario is bound
        assert all(pub.target_bound(data.select(b, s)) is None for s in ("Offline", "Server", "Interactive"))


def test_the_cpu_has_no_published_result(data: pub.Published) -> None:
    c = pub.compare(data, "gpt-oss-120b", "Offline", 50, "Tokens/s", "N/A", 0, system="cpu-smoke")
    assert c.fraction is None and gates.published([c], 0.8) == []
    assert pub.verdict([c], 0.8, "v6.1") == "no published closed v6.1 result for accelerator 'N/A'"


def test_the_gate_field_is_optional() -> None:
    assert GatesSpec().published_min_fraction is None
    assert GatesSpec(published_min_fraction=0.8).published_min_fraction == 0.8
    with pytest.raises(ValueError):
        GatesSpec(published_min_fraction=0)


def _summary(rows: list[dict[str, str]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, ["Organization", "Availability", "Division", "SystemType", "SystemName", "Platform",
                                  "Model", "MlperfModel", "Scenario", "Result", "number_of_nodes",
                                  "accelerator_model_name", "accelerators_per_node", "total_accelerators",
                                  "Location", "Units"])
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


ROW = {"Organization": "Crusoe", "Availability": "available", "Division": "closed", "SystemType": "datacenter",
       "SystemName": "NVIDIA GB200 NVL72 (4x GB200-186GB_aarch64, TensorRT)",
       "Platform": "GB200-NVL72_GB200-186GB_aarch64x4_TRT", "Model": "gpt-oss-120b", "MlperfModel": "gpt-oss-120b",
       "Scenario": "Offline", "Result": "50912.9", "number_of_nodes": "1", "accelerator_model_name": "NVIDIA GB200",
       "accelerators_per_node": "4", "total_accelerators": "4", "Units": "Tokens/s",
       "Location": "./closed/Crusoe/results/GB200-NVL72_GB200-186GB_aarch64x4_TRT/gpt-oss-120b/Offline/performance/"
                   "run_1"}


def test_rebuild_keeps_the_rules_benchmarks_and_names_the_commit() -> None:
    rows = [ROW, {**ROW, "Model": "whisper", "MlperfModel": "whisper"},                  # not in the rules
            {**ROW, "Model": "llama3_1-8b", "MlperfModel": "llama3.1-8b", "Result": "1.5"},  # the submitter's spelling
            {**ROW, "Model": "qwen3-vl-235b-a22b", "MlperfModel": "VLM"}]
    text, counts = pub.rebuild(_summary(rows), "v6.1", "abc123")
    assert counts == {"gpt-oss-120b": 1, "llama3.1-8b": 1, "qwen3-vl-235b-a22b": 1}
    again = pub.parse(text, "v6.1", "here")
    assert again.commit == "abc123" and [r.benchmark for r in again.results] == ["gpt-oss-120b", "llama3.1-8b",
                                                                                  "qwen3-vl-235b-a22b"]
    assert again.results[0] == next(r for r in pub.load("v6.1").results if r.location == ROW["Location"])
    with pytest.raises(PlanError, match="lacks the column"):
        pub.rebuild("Organization,Model\nx,y\n", "v6.1", "abc")


def test_podium_published_lists_and_rebuilds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    shown = runner.invoke(app, ["published", "gpt-oss-120b", "--scenario", "Offline", "--accelerator", "Nvidia GB200"])
    assert shown.exit_code == 0, shown.output
    lines = [line for line in shown.output.splitlines() if line.startswith("| Offline")]
    assert len(lines) == 5 and "15,301.40" in lines[0] and "12,728.23" in lines[1] and "not an MLPerf metric" in \
        shown.output
    bound = runner.invoke(app, ["published", "qwen3-vl-235b-a22b", "--scenario", "Interactive"])
    assert "bound by a target" in bound.output
    assert runner.invoke(app, ["published", "no-such-benchmark"]).exit_code == 2
    monkeypatch.setattr(pub, "_DATA", tmp_path)
    summary = tmp_path / "summary.csv"
    summary.write_text(_summary([ROW]))
    assert runner.invoke(app, ["published", "--rebuild", str(summary)]).exit_code == 2   # no --commit
    done = runner.invoke(app, ["published", "--rebuild", str(summary), "--commit", "abc123"])
    assert done.exit_code == 0 and "1 rows (gpt-oss-120b 1)" in done.output, done.output
    assert "# commit: abc123" in (tmp_path / "published-v6.1.csv").read_text()


def test_each_system_of_the_round_fleet_sits_beside_its_own_published_row(data: pub.Published) -> None:
    from submission.plan import model as plans

    fleet = Path(__file__).parents[2] / "deployments" / "plans" / "round-v6.1-fleet.yaml"
    rows = pub.against_plan(data, plans.load(fleet))
    mine = {(r.system, r.scenario): [p for p in r.published if p.submitter == "Crusoe"] for r in rows}
    assert len(rows) == 12 and all(len(found) == 1 for found in mine.values()), mine
    assert mine[("mi355x-vllm-k8s", "Offline")][0].value == 5_749_440.0
    assert mine[("gb200x16-slurm", "Interactive")][0].system.endswith("(16x GB200-186GB_aarch64, Dynamo)")
    assert mine[("gb200x4-slurm", "Interactive")][0].system.endswith("(4x GB200-186GB_aarch64, Dynamo)")
    assert all(p.accelerators == r.accelerators for r in rows for p in r.published)
    said = CliRunner().invoke(app, ["published", "--plan", str(fleet)])
    table = [line for line in said.output.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert said.exit_code == 0 and len(table) == 12 and all("Crusoe" in line for line in table), said.output
