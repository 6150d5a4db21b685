"""submission.checks.official against the round's real checker: mlcommons/inference at the v6.1 pin (the
`inference_src` fixture; `make test` unpacks it), on small closed trees of qwen3-vl-235b-a22b in the endpoints layout
(tests/checker_corpus.py's reports: no loadgen run, about a third of a second per check). What is checked: the argv
and cwd it runs with (its `--submitter` reaches it), its CSV (Podium's summary columns are its own, its results
Podium's), its log lines read (ERROR lines, NoResults, the closing counts), a crash (a system description that is not
JSON), a timeout, an interpreter that cannot start, and where the two verdicts differ. No stand-in: every case is one
the real checker produces.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from submission.checks import official
from submission.checks.checker import CheckReport, Finding, ScenarioResult, check_tree
from submission.checks.summary import COLUMNS
from submission.tree.paths import Tree
from tests.checker_corpus import ORG, QWEN, SYSTEM, qwen_scenario, system_description, write

SCENARIOS = ("Interactive", "Offline")   # what a closed qwen3-vl-235b-a22b result needs
CLEAN_SUMMARY = ["Results=2, NoResults=0, Power Results=0", "Closed Results=2, Closed Power Results=0",
                 "Open Results=0, Open Power Results=0", "Network Results=0, Network Power Results=0",
                 "Systems=1, Power Systems=0", "Closed Systems=1, Closed Power Systems=0",
                 "Open Systems=0, Open Power Systems=0", "Network Systems=0, Network Power Systems=0",
                 "SUMMARY: submission looks OK"]


def qwen_tree(root: Path, change: Callable[[Path], None] | None = None) -> Path:
    """A complete closed tree of qwen3-vl-235b-a22b (Offline and Interactive), then `change(scenario folders' parent)`
    when given; the tree's root, resolved (the checker names files under it)."""
    tree = Tree(root, "closed", ORG)
    write(tree.system_json(SYSTEM), json.dumps(system_description(), indent=2) + "\n")
    write(tree.src / "podium" / "README.md", "Podium ran this submission: `podium run plan.yaml`.\n")
    write(tree.code(QWEN) / "README.md", f"# {QWEN}\n\nThe plan: src/podium/plan.yaml.\n")
    write(tree.calibration, "# Calibration\n\nNo calibration: the weights are used as published.\n")
    for sc in SCENARIOS:
        qwen_scenario(tree, sc)
    if change:
        change(root.resolve() / "closed" / ORG / "results" / SYSTEM / QWEN)
    return root.resolve()


def failed_samples(results: Path) -> None:
    """Three of the Interactive run's samples failed: Podium's endpoints-errors; the official checker reads no
    failure count."""
    path = results / "Interactive" / "performance" / "result_summary.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"n_samples_failed": 3}))


def test_argv_cwd_and_csv(tmp_path: Path, inference_src: Path) -> None:
    tree = qwen_tree(tmp_path / "tree")
    csv_path = tmp_path / "out" / "summary.csv"
    theirs = official.run_official(tree, inference_src, "v6.1", csv_path, submitter=ORG)
    assert theirs.argv == [sys.executable, "-m", "submission_checker.main", "--input", str(tree), "--version", "v6.1",
                           "--csv", str(csv_path.resolve()), "--submitter", ORG]
    assert theirs.cwd == str(inference_src.resolve() / "tools" / "submission")
    assert theirs.ok and theirs.returncode == 0 and theirs.verdict() == "submission looks OK", theirs.output_tail
    assert theirs.summary == CLEAN_SUMMARY and theirs.errors == [] and theirs.no_results == []
    assert theirs.csv_path == str(csv_path) and official.read_csv(csv_path) == theirs.rows
    assert [list(row) for row in theirs.rows] == [list(COLUMNS)] * 2   # Podium's summary columns are the checker's
    ours = {(r["Model"], r["Scenario"]): r for r in check_tree(tree, "v6.1").csv_rows()}
    assert set(ours) == {(r["Model"], r["Scenario"]) for r in theirs.rows} == {(QWEN, sc) for sc in SCENARIOS}
    for row in theirs.rows:   # the same results, in the same units
        mine = ours[(row["Model"], row["Scenario"])]
        assert float(mine["Result"]) == pytest.approx(float(row["Result"]), rel=1e-4) and mine["Units"] == row["Units"]
        assert row["Location"] == str(tree / "closed" / ORG / "results" / SYSTEM / QWEN / row["Scenario"] /
                                      "performance" / "run_1")
    other = official.run_official(tree, inference_src, "v6.1", tmp_path / "other.csv", submitter="Other")
    assert other.ok and other.rows == [] and other.summary[0] == "Results=0, NoResults=0, Power Results=0"


def test_official_accepts_what_podium_rejects(tmp_path: Path, inference_src: Path) -> None:
    tree = qwen_tree(tmp_path / "tree", failed_samples)
    ours = check_tree(tree, "v6.1")
    theirs = official.run_official(tree, inference_src, "v6.1", tmp_path / "summary.csv")
    assert theirs.ok and len(theirs.rows) == 2 and ours.rules() == {"endpoints-errors"}
    kinds = {d.kind: d for d in official.compare(ours, theirs)}
    assert set(kinds) == {"verdict", "accepted-by-official"}
    assert kinds["verdict"].message == "official: submission looks OK; Podium: 1 error(s): endpoints-errors"
    assert kinds["accepted-by-official"].path == f"closed/{ORG}/results/{SYSTEM}/{QWEN}/Interactive"
    assert "endpoints-errors" in kinds["accepted-by-official"].message
    assert not any(d.expected for d in kinds.values())


def test_both_reject_no_difference_and_the_logs_are_read(tmp_path: Path, inference_src: Path) -> None:
    def partial(results: Path) -> None:   # the Interactive accuracy run scored 7999 of the 8000 samples
        path = results / "Interactive" / "accuracy" / "accuracy_results.json"
        data = json.loads(path.read_text())
        data["accuracy_scores"][0]["total_samples"] = 7999
        path.write_text(json.dumps(data))

    tree = qwen_tree(tmp_path / "tree", partial)
    folder = tree / "closed" / ORG / "results" / SYSTEM / QWEN / "Interactive"
    theirs = official.run_official(tree, inference_src, "v6.1", tmp_path / "summary.csv")
    assert theirs.returncode == 1 and not theirs.ok and not theirs.crashed
    assert [row["Scenario"] for row in theirs.rows] == ["Offline"]
    assert theirs.no_results == [f"{folder}/performance/run_1/mlperf_log_detail.txt"]
    assert theirs.errors == [   # in its own words (`accurcy` is its spelling)
        f"{folder}/accuracy/mlperf_log_detail.txt accurcy run does not cover all dataset, accuracy samples: 7999, "
        "dataset size: 8000",
        f"Some accuracy checks Checks failed for: {folder}/accuracy/mlperf_log_detail.txt",
        f"NoResults {folder}/performance/run_1/mlperf_log_detail.txt",
        "SUMMARY: submission has errors"]
    assert theirs.summary[0] == "Results=1, NoResults=1, Power Results=0" and theirs.summary[-1] == theirs.errors[-1]
    ours = check_tree(tree, "v6.1")
    assert ours.rules() == {"accuracy-coverage"} and official.official_rule(theirs.errors[0]) == "accuracy-coverage"
    assert official.compare(ours, theirs) == []


def test_both_reject_a_benchmark_without_its_required_scenarios(tmp_path: Path, inference_src: Path) -> None:
    """Offline alone: the official checker rejects the Offline folder, Podium names the benchmark folder
    (required-scenarios); the same verdict on the same result, so no difference."""
    tree = qwen_tree(tmp_path / "tree", lambda results: shutil.rmtree(results / "Interactive"))
    detail = tree / "closed" / ORG / "results" / SYSTEM / QWEN / "Offline" / "performance" / "run_1" / \
        "mlperf_log_detail.txt"
    theirs = official.run_official(tree, inference_src, "v6.1", tmp_path / "summary.csv")
    assert theirs.errors == [f"{detail} does not have all required scenarios, missing ['(one of) Interactive or "
                             "Server']", f"Some performance checks Checks failed for: {detail}",
                             f"NoResults {detail}", "SUMMARY: submission has errors"]
    ours = check_tree(tree, "v6.1")
    assert [(f.rule, f.path) for f in ours.errors] == [("required-scenarios",
                                                         f"closed/{ORG}/results/{SYSTEM}/{QWEN}")]
    assert official.official_rule(theirs.errors[0]) == "required-scenarios"
    assert official.compare(ours, theirs) == []


def test_empty_tree_passes_the_official_checker_only(tmp_path: Path, inference_src: Path) -> None:
    (tmp_path / "tree").mkdir()
    theirs = official.run_official(tmp_path / "tree", inference_src, "v6.1", tmp_path / "summary.csv")
    assert theirs.ok and theirs.rows == [] and theirs.summary[0] == "Results=0, NoResults=0, Power Results=0"
    differences = official.compare(check_tree(tmp_path / "tree", "v6.1"), theirs)
    assert [d.kind for d in differences] == ["verdict"] and "empty-tree" in differences[0].message


def test_crash_is_a_result(tmp_path: Path, inference_src: Path) -> None:
    """A system description that is not JSON: the real checker stops with a traceback before its verdict."""
    tree = qwen_tree(tmp_path / "tree")
    (tree / "closed" / ORG / "systems" / f"{SYSTEM}.json").write_text("{not json\n")
    theirs = official.run_official(tree, inference_src, "v6.1", tmp_path / "summary.csv")
    assert theirs.crashed and not theirs.ok and theirs.verdict() == f"crashed (exit code {theirs.returncode})"
    assert theirs.returncode != 0 and theirs.summary == []
    assert theirs.output_tail.rstrip().endswith("json.decoder.JSONDecodeError: Expecting property name enclosed in "
                                                "double quotes: line 1 column 2 (char 1)"), theirs.output_tail
    assert "crash" in {d.kind for d in official.compare(check_tree(tree, "v6.1"), theirs)}


def test_could_not_run(tmp_path: Path, inference_src: Path) -> None:
    """No checker there; a timeout (1 ms: no Python starts and imports the checker that fast, however idle the
    machine); an interpreter that cannot start. Each is OfficialCheckerUnavailable, the CLI's exit code 2."""
    tree = qwen_tree(tmp_path / "tree")
    with pytest.raises(official.OfficialCheckerUnavailable) as missing:
        official.run_official(tree, tmp_path / "nowhere", "v6.1", tmp_path / "s.csv")
    assert missing.value.exit_code == 2 and "mlcommons/inference" in str(missing.value)
    with pytest.raises(official.OfficialCheckerUnavailable, match=r"the official checker ran over 0\.001 s"):
        official.run_official(tree, inference_src, "v6.1", tmp_path / "s.csv", timeout_s=0.001)
    with pytest.raises(official.OfficialCheckerUnavailable, match=r"cannot start .*nowhere/python"):
        official.run_official(tree, inference_src, "v6.1", tmp_path / "s.csv", python=str(tmp_path / "nowhere" /
                                                                                           "python"))


def test_compare_names_folders_the_official_checker_rejects() -> None:
    result = ScenarioResult(division="closed", submitter="Org", system="sys1", benchmark_folder="gpt-oss-120b",
                            benchmark="gpt-oss-120b", scenario="Server", layout="loadgen",
                            path="closed/Org/results/sys1/gpt-oss-120b/Server")
    ours = CheckReport(round="v6.1", profile="submission", scenarios_checked=1, findings=[], results=[result])
    theirs = official.OfficialReport(argv=["x"], cwd=".", returncode=1, no_results=[
        "/t/closed/Org/results/sys1/gpt-oss-120b/Server/performance/run_1/mlperf_log_detail.txt"], rows=[
        {"Organization": "Org", "Division": "closed", "Platform": "sys2", "Model": "m", "Scenario": "Offline",
         "Location": "closed/Org/results/sys2/m/Offline/performance/run_1"}])
    kinds = {d.kind: d for d in official.compare(ours, theirs)}
    assert set(kinds) == {"verdict", "rejected-by-official", "unknown-row"}
    assert "NoResults" not in kinds["rejected-by-official"].message
    assert "Server/performance/run_1/mlperf_log_detail.txt" in kinds["rejected-by-official"].message
    bad = ours.model_copy(update={"findings": [Finding(rule="result-valid", severity="error",
                                                       path=f"{result.path}/performance/run_1", message="INVALID")]})
    assert "rejected-by-official" not in {d.kind for d in official.compare(bad, theirs)}


def test_cli_runs_both_checkers(tmp_path: Path, inference_src: Path) -> None:
    tree = qwen_tree(tmp_path / "tree", failed_samples)
    out = CliRunner().invoke(app, ["check", str(tree), "--inference-src", str(inference_src), "--json",
                                   "--csv", str(tmp_path / "ours.csv")])
    assert out.exit_code == 1, out.output
    data = json.loads(out.output)
    assert data["official"]["ok"] is True and data["ok"] is False
    assert data["official"]["summary"] == CLEAN_SUMMARY
    assert {d["kind"] for d in data["differences"]} == {"verdict", "accepted-by-official"}
    assert (tmp_path / "ours.csv").is_file() and len(official.read_csv(tmp_path / "ours.official.csv")) == 2
    text = CliRunner().invoke(app, ["check", str(tree), "--inference-src", str(inference_src)])
    assert text.exit_code == 1 and "official checker: submission looks OK, 2 result row(s)" in text.output
    assert "DIFFERS   accepted-by-official" in text.output
    missing = CliRunner().invoke(app, ["check", str(tree), "--inference-src", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "no official checker" in missing.output


def test_flow_check_step_runs_both(tmp_path: Path, inference_src: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The `check` step of tasks/tree.py (its body; Prefect's run logger swapped for a recorder)."""
    from tasks import tree as flow

    messages: list[str] = []

    class Recorder:
        def __getattr__(self, level: str):  # info, warning, error: record the formatted message
            return lambda message, *args: messages.append(message % args if args else message)

    monkeypatch.setattr(flow, "run_logger", lambda name: Recorder())
    run = tmp_path / "run"
    qwen_tree(run / "submission", failed_samples)
    report = flow.check.fn(str(run / "submission"), "v6.1", "submission", str(inference_src))
    assert not report.ok and report.rules() == {"endpoints-errors"}
    assert (run / "summary.csv").is_file() and len(official.read_csv(run / "summary.official.csv")) == 2
    flow.check.fn(str(run / "submission"), "v6.1", "submission", str(tmp_path / "nowhere"))
    assert "official checker: submission looks OK" in messages
    assert any(m.startswith("DIFFERS   accepted-by-official") for m in messages)
    assert any(m.startswith("the official checker did not run: no official checker") for m in messages)
