"""Parts of the checker the corpus does not reach: the TEST06/TEST01/TEST04 folders of other benchmarks, the
endpoints readers, the layout paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from submission.checks.compliance import check_test
from submission.checks.endpoints import duration_ms, lookup, score_of
from submission.checks.findings import Context
from submission.rules import load_rules
from submission.tree.paths import COMPLIANCE_FILES, Tree, layout_of

RULES = load_rules("v6.1")
LLAMA = RULES.benchmark("llama3.1-8b")
TEST06_LINES = ("First token check pass: Skipped", "EOS check pass: True", "Sample length check pass: True")


def _test06(folder: Path, lines: tuple[str, ...]) -> Path:
    (folder / "accuracy").mkdir(parents=True)
    (folder / "accuracy" / "mlperf_log_accuracy.json").write_text("[]")
    (folder / "verify_accuracy.txt").write_text("\n".join(("Checking...", *lines)) + "\n")
    return folder


def _findings(tmp_path: Path, test: str, folder: Path) -> list[tuple[str, str]]:
    ctx = Context(tmp_path, RULES, "submission")
    check_test(ctx, test, folder, LLAMA, LLAMA.scenario("Offline"))
    return [(f.rule, f.message) for f in ctx.findings]


def test_test06_three_lines(tmp_path: Path) -> None:
    assert _findings(tmp_path, "TEST06", _test06(tmp_path / "ok" / "TEST06", TEST06_LINES)) == []
    found = _findings(tmp_path, "TEST06", _test06(tmp_path / "eos" / "TEST06", (TEST06_LINES[0], "EOS check pass: "
                                                                                  "False", TEST06_LINES[2])))
    assert found == [("compliance-pass", "TEST06 did not pass: no line 'EOS check pass: True'")]


def test_test06_file_set(tmp_path: Path) -> None:
    folder = _test06(tmp_path / "TEST06", TEST06_LINES)
    (folder / "accuracy" / "mlperf_log_accuracy.json").unlink()
    (folder / "run.log").write_text("x")
    rules = {rule for rule, _ in _findings(tmp_path, "TEST06", folder)}
    assert rules == {"compliance-files", "unexpected-file"}


def test_test04_needs_its_pass_line_and_run(tmp_path: Path) -> None:
    folder = tmp_path / "TEST04"
    folder.mkdir()
    (folder / "verify_performance.txt").write_text("TEST FAIL\n")
    found = _findings(tmp_path, "TEST04", folder)
    assert [rule for rule, _ in found] == ["compliance-files", "compliance-pass"]
    assert "performance/run_1/mlperf_log_detail.txt" in found[0][1]


def test_compliance_file_sets_follow_the_reference() -> None:
    assert COMPLIANCE_FILES["TEST01"].required == (
        "verify_accuracy.txt", "verify_performance.txt", "accuracy/mlperf_log_accuracy.json",
        "performance/run_1/mlperf_log_summary.txt", "performance/run_1/mlperf_log_detail.txt")
    assert COMPLIANCE_FILES["TEST08"].required == ("verify_accuracy.txt",)
    assert all(spec.perf_run == any(f.startswith("performance/") for f in spec.required)
               for spec in COMPLIANCE_FILES.values())


@pytest.mark.parametrize(("value", "ms"), [(600000, 600000), ("600000ms", 600000), ("600s", 600000),
                                           ("10m", 600000), ("1.5s", 1500), ("soon", None), (True, None)])
def test_endpoints_durations(value: object, ms: int | None) -> None:
    assert duration_ms(value) == ms


def test_endpoints_lookups() -> None:
    summary = {"latency": {"early_stopping_percentiles": {"99": 5, "50.0": 1}}, "tps": 3}
    assert lookup(summary, "latency", "early_stopping_percentiles", "99.0") == 5
    assert lookup(summary, "latency", "percentiles", "99.0") is None and lookup(summary, "tps", "x") is None
    assert score_of({"f1_hierarchical": 0.8}) == 0.8 and score_of(0.7) == 0.7 and score_of("0.7") is None


def test_tree_paths_and_layouts(tmp_path: Path) -> None:
    tree = Tree(tmp_path, "closed", "Org")
    base = tmp_path / "closed" / "Org" / "results" / "sys" / "qwen3-vl-235b-a22b" / "Interactive"
    assert tree.endpoints_config("sys", "qwen3-vl-235b-a22b", "Interactive") == base / "config.yaml"
    assert tree.endpoints_result_summary("sys", "qwen3-vl-235b-a22b", "Interactive") == \
        base / "performance" / "result_summary.json"
    assert tree.endpoints_accuracy_results("sys", "qwen3-vl-235b-a22b", "Interactive") == \
        base / "accuracy" / "accuracy_results.json"
    assert tree.endpoints_audit("sys", "qwen3-vl-235b-a22b", "Interactive", "TEST04") == \
        base / "audit" / "audit_output_caching_test.json"
    with pytest.raises(ValueError, match="no endpoints audit record"):
        tree.endpoints_audit("sys", "qwen3-vl-235b-a22b", "Interactive", "TEST09")
    with pytest.raises(ValueError, match="safe folder name"):
        tree.scenario("sys/../x", "gpt-oss-120b", "Offline")
    assert layout_of(base) == "loadgen"
    (base / "performance").mkdir(parents=True)
    (base / "performance" / "result_summary.json").write_text("{}")
    assert layout_of(base) == "endpoints"
    (base / "performance" / "run_1").mkdir()
    (base / "performance" / "run_1" / "mlperf_log_detail.txt").write_text("")
    assert layout_of(base) == "loadgen"
    (base / "config.yaml").write_text("type: online\n")
    assert layout_of(base) == "endpoints"
