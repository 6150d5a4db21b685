"""A VALID loadgen result whose own fields say otherwise cannot come from loadgen: the checker's `log-consistency`
error names the contradicting fields. One real Server run (about a second); the edits are the tampering."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from submission.checks.findings import Context
from submission.checks.run import consistency
from submission.results.logs import load_run
from submission.rules import load_rules
from tests.loadgen_fake import run_fake

CONF = ["gpt-oss-120b.*.performance_sample_count_override = 16", "*.Server.target_qps = 2000",
        "*.Server.min_duration = 100", "*.Server.min_query_count = 480"]   # as tests/unit/test_checker.py


@pytest.fixture(scope="module")
def valid_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = run_fake(tmp_path_factory.mktemp("srv") / "run", scenario="Server", user_conf_lines=CONF)
    assert load_run(folder).validity == "VALID"
    return folder


def findings(folder: Path) -> list[str]:
    ctx = Context(folder.parent, load_rules("v6.1"), "submission")
    consistency(ctx, folder, load_run(folder))
    assert all(f.rule == "log-consistency" and f.fix for f in ctx.findings)
    return [f.message for f in ctx.findings]


def tampered(valid_run: Path, tmp_path: Path, file: str, pattern: str, replacement: str) -> Path:
    folder = shutil.copytree(valid_run, tmp_path / "run")
    path = folder / file
    text, count = re.subn(pattern, replacement, path.read_text())
    assert count, f"{pattern!r} not in {file}"
    path.write_text(text)
    return folder


def test_real_log_is_consistent(valid_run: Path) -> None:
    assert findings(valid_run) == []


@pytest.mark.parametrize(("key", "field"), [("result_min_duration_met", "result_min_duration_met"),
                                            ("result_min_queries_met", "result_min_queries_met"),
                                            ("early_stopping_met", "early_stopping_met")])
def test_valid_with_a_failed_constraint(valid_run: Path, tmp_path: Path, key: str, field: str) -> None:
    folder = tampered(valid_run, tmp_path, "mlperf_log_detail.txt", rf'("key": "{key}", "value": )true', r"\1false")
    [message] = findings(folder)
    assert f"{field} is false" in message and "says VALID" in message


def test_summary_contradicting_the_detail_log(valid_run: Path, tmp_path: Path) -> None:
    folder = tampered(valid_run, tmp_path, "mlperf_log_summary.txt", r"Early stopping satisfied: Yes",
                      "Early stopping satisfied: NO")
    assert any("'Early stopping satisfied' is NO" in m for m in findings(folder))
