"""submission.checks.official up to the process boundary: the real mlcommons/inference checkout cannot be fetched
here, so each test writes a small stand-in `submission_checker` package into tmp_path that behaves like the official CLI
(its arguments, its cwd, `ERROR:main:` log lines, `NoResults <path>`, the CSV columns, exit 0/1, and, like the real
one, no look at result_validity). What is checked: the exact argv and cwd, the CSV and log parsing, timeouts and
crashes, and where the two verdicts differ.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from submission.checks import official
from submission.checks.checker import CheckReport, Finding, ScenarioResult, check_tree
from submission.checks.summary import COLUMNS

FAKE_MAIN = '''
import argparse, csv, json, logging, os, sys, time
from pathlib import Path

logging.basicConfig(level=logging.INFO)
log = logging.getLogger("main")
HEAD = {columns!r}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--version", default="v5.1", choices=["v5.0", "v5.1", "v6.0", "v6.1"])
    parser.add_argument("--csv", default="summary.csv")
    parser.add_argument("--submitter")
    args = parser.parse_args()
    record = os.environ.get("FAKE_CHECKER_RECORD")
    if record:
        Path(record).write_text(json.dumps({{"argv": sys.argv[1:], "cwd": os.getcwd(), "package": __package__}}))
    time.sleep(float(os.environ.get("FAKE_CHECKER_SLEEP", "0")))
    if os.environ.get("FAKE_CHECKER_CRASH"):
        raise AttributeError("'NoneType' object has no attribute 'get'")
    results, rows = {{}}, []
    for folder in sorted(Path(args.input).glob("*/*/results/*/*/*")):
        division, org, _, system, model, scenario = folder.relative_to(args.input).parts
        perf = folder / "performance" / "run_1" / "mlperf_log_detail.txt"
        acc = folder / "accuracy" / "accuracy.txt"
        results[str(perf)] = None
        if acc.is_file() and "hash=" not in acc.read_text():
            log.error("%s: not hash value for accuracy.txt", acc)
        elif perf.is_file() and acc.is_file():
            results[str(perf)] = 1.0  # like the real checker, never a look at result_validity
            rows.append({{"Organization": org, "Division": division, "Platform": system, "Model": model,
                          "Scenario": scenario, "Result": "1.0", "Location": str(perf.parent)}})
    with open(args.csv, "w") as out:
        out.write(",".join(HEAD) + "\\n")
        for row in rows:
            out.write(",".join(f'"{{row.get(k, "")}}"' for k in HEAD) + "\\n")
    for path, value in sorted(results.items()):
        if value is None:
            log.error("NoResults %s", path)
    if any(v is None for v in results.values()):
        log.error("SUMMARY: submission has errors")
        return 1
    log.info("SUMMARY: submission looks OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


@pytest.fixture()
def inference_src(tmp_path: Path) -> Path:
    """A stand-in checkout: <src>/tools/submission/submission_checker/{__init__,main}.py."""
    src = tmp_path / "inference"
    package = src / "tools" / "submission" / "submission_checker"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "main.py").write_text(FAKE_MAIN.format(columns=list(COLUMNS)))
    return src


def scenario(root: Path, name: str = "Offline", *, hashed: bool = True) -> Path:
    folder = root / "closed" / "Org" / "results" / "sys1" / "gpt-oss-120b" / name
    (folder / "performance" / "run_1").mkdir(parents=True)
    (folder / "performance" / "run_1" / "mlperf_log_detail.txt").write_text("not a real log\n")
    (folder / "accuracy").mkdir()
    (folder / "accuracy" / "accuracy.txt").write_text("{'exact_match': 90.0}\n" + ("hash=ab12\n" if hashed else ""))
    return folder


def test_argv_cwd_and_csv(tmp_path: Path, inference_src: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = tmp_path / "tree"
    scenario(tree)
    record = tmp_path / "record.json"
    monkeypatch.setenv("FAKE_CHECKER_RECORD", str(record))
    theirs = official.run_official(tree, inference_src, "v6.1", tmp_path / "out" / "summary.csv", submitter="Org")
    seen = json.loads(record.read_text())
    assert theirs.argv == [sys.executable, "-m", "submission_checker.main", "--input", str(tree.resolve()),
                           "--version", "v6.1", "--csv", str((tmp_path / "out" / "summary.csv").resolve()),
                           "--submitter", "Org"]
    assert seen["argv"] == theirs.argv[3:] and seen["package"] == "submission_checker"
    assert seen["cwd"] == str(inference_src.resolve() / "tools" / "submission") == theirs.cwd
    assert theirs.ok and theirs.returncode == 0 and theirs.verdict() == "submission looks OK"
    assert theirs.summary == ["SUMMARY: submission looks OK"]   # its closing lines, kept (`podium submit` shows them)
    assert [(r["Model"], r["Scenario"], r["Result"]) for r in theirs.rows] == [("gpt-oss-120b", "Offline", "1.0")]
    assert list(theirs.rows[0]) == list(COLUMNS)


def test_official_accepts_what_podium_rejects(tmp_path: Path, inference_src: Path) -> None:
    tree = tmp_path / "tree"
    folder = scenario(tree)
    ours = check_tree(tree, "v6.1")
    theirs = official.run_official(tree, inference_src, "v6.1", tmp_path / "summary.csv")
    kinds = {d.kind: d for d in official.compare(ours, theirs)}
    assert set(kinds) == {"verdict", "accepted-by-official"}
    assert "official: submission looks OK; Podium:" in kinds["verdict"].message
    assert kinds["accepted-by-official"].path == str(folder.relative_to(tree))
    assert "performance-files" in kinds["accepted-by-official"].message


def test_both_reject_no_difference_and_the_logs_are_read(tmp_path: Path, inference_src: Path) -> None:
    tree = tmp_path / "tree"
    folder = scenario(tree, hashed=False)
    theirs = official.run_official(tree, inference_src, "v6.1", tmp_path / "summary.csv")
    assert theirs.returncode == 1 and not theirs.ok and theirs.rows == []
    assert theirs.no_results == [str(folder.resolve() / "performance" / "run_1" / "mlperf_log_detail.txt")]
    assert any("not hash value for accuracy.txt" in e for e in theirs.errors)
    assert "SUMMARY: submission has errors" in theirs.errors
    assert official.compare(check_tree(tree, "v6.1"), theirs) == []


def test_empty_tree_passes_the_official_checker_only(tmp_path: Path, inference_src: Path) -> None:
    (tmp_path / "tree").mkdir()
    theirs = official.run_official(tmp_path / "tree", inference_src, "v6.1", tmp_path / "summary.csv")
    differences = official.compare(check_tree(tmp_path / "tree", "v6.1"), theirs)
    assert theirs.ok and [d.kind for d in differences] == ["verdict"] and "empty-tree" in differences[0].message


def test_crash_is_a_result(tmp_path: Path, inference_src: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scenario(tmp_path / "tree")
    monkeypatch.setenv("FAKE_CHECKER_CRASH", "1")
    theirs = official.run_official(tmp_path / "tree", inference_src, "v6.1", tmp_path / "summary.csv")
    assert theirs.crashed and not theirs.ok and theirs.verdict().startswith("crashed")
    assert "AttributeError" in theirs.output_tail
    assert "crash" in {d.kind for d in official.compare(check_tree(tmp_path / "tree", "v6.1"), theirs)}


def test_could_not_run(tmp_path: Path, inference_src: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(official.OfficialCheckerUnavailable) as missing:
        official.run_official(tmp_path, tmp_path / "nowhere", "v6.1", tmp_path / "s.csv")
    assert missing.value.exit_code == 2 and "mlcommons/inference" in str(missing.value)
    monkeypatch.setenv("FAKE_CHECKER_SLEEP", "30")
    with pytest.raises(official.OfficialCheckerUnavailable, match="ran over 1 s"):
        official.run_official(tmp_path, inference_src, "v6.1", tmp_path / "s.csv", timeout_s=1)


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
    tree = tmp_path / "tree"
    scenario(tree)
    out = CliRunner().invoke(app, ["check", str(tree), "--inference-src", str(inference_src), "--json",
                                   "--csv", str(tmp_path / "ours.csv")])
    assert out.exit_code == 1, out.output
    data = json.loads(out.output)
    assert data["official"]["ok"] is True and data["ok"] is False
    assert {d["kind"] for d in data["differences"]} == {"verdict", "accepted-by-official"}
    assert (tmp_path / "ours.csv").is_file() and (tmp_path / "ours.official.csv").is_file()
    text = CliRunner().invoke(app, ["check", str(tree), "--inference-src", str(inference_src)])
    assert text.exit_code == 1 and "official checker: submission looks OK, 1 result row(s)" in text.output
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
    scenario(run / "submission")
    report = flow.check.fn(str(run / "submission"), "v6.1", "submission", str(inference_src))
    assert not report.ok and (run / "summary.csv").is_file() and (run / "summary.official.csv").is_file()
    flow.check.fn(str(run / "submission"), "v6.1", "submission", str(tmp_path / "nowhere"))
    assert "official checker: submission looks OK" in messages
    assert any(m.startswith("DIFFERS   accepted-by-official") for m in messages)
    assert any(m.startswith("the official checker did not run: no official checker") for m in messages)
