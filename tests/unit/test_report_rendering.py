"""What a run shows in the Prefect UI renders as written: every table-artifact cell (each one a Markdown document
of its own there), the pipe tables of the summary, its links; and the one line the run's final state carries."""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

from markdown_it import MarkdownIt

from submission.checks import gates
from submission.checks.checker import CheckReport, Finding
from submission.results.runs import AuditCheck, AuditRecord, Planned, RunRecord
from tasks.reporting import artifacts as reporting

MD = MarkdownIt("commonmark").enable("table")
BASE = {"system": "cpu-smoke", "benchmark": "gpt-oss-120b", "scenario": "Offline"}
LINK = reporting.LinkCommand("podium link --embedded --workspace /ws --expires 3600 "
                              "s3://podium/runs/smoke/r1/submission.tar.gz", "1 h")


def _records() -> tuple[list[RunRecord], list[AuditRecord]]:
    records = [RunRecord(**BASE, key="p", mode="performance", run_dir="/r", valid=True, validity="VALID",
                         metric=1735.56, unit="Tokens/s"),
               RunRecord(**BASE, key="a", mode="accuracy", run_dir="/a", valid=None, validity=None,
                         accuracy_metric="exact_match", accuracy=100.0, accuracy_pass=True)]
    audits = [AuditRecord(**BASE, key="t7", test="TEST07", run_dir="/t", folder="/f", passed=True,
                          checks=(AuditCheck(name="accuracy", passed=True, measured=100.0, bound=">= 60.698"),)),
              AuditRecord(**BASE, key="t9", test="TEST09", run_dir="/t", folder="/f", passed=False,
                          checks=(AuditCheck(name="samples logged", passed=False, measured=0, bound="> 0"),)),
              AuditRecord(**BASE, key="t1", test="TEST01", run_dir="/t", folder="/f", passed=True, checks=())]
    return records, audits


def _text(document: str) -> str:
    """What a reader sees of a Markdown document: its HTML, tags removed, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", MD.render(document))).strip()


def test_every_table_artifact_cell_renders_as_written() -> None:
    records, audits = _records()
    tables = reporting.artifact_tables(reporting.table(records, audits), audits)
    for rows in tables.values():
        for row in rows:
            for value in row.values():
                rendered = MD.render(value)
                assert not re.search(r"<(blockquote|ul|ol|h\d|pre|hr)", rendered), (value, rendered)
    compliance = {row["test"]: row for row in tables["compliance"]}
    assert _text(compliance["TEST07"]["bound"]) == "≥ 60.698"        # the bound is not lost to a blockquote
    assert _text(compliance["TEST09"]["bound"]) == "> 0"
    assert _text(compliance["TEST01"]["measured"]) == "—"            # an empty cell is not a bullet
    assert _text(tables["results"][0]["ttft_p99_ms"]) == "—"


def test_summary_tables_and_links_render_as_written() -> None:
    records, audits = _records()
    rows = reporting.table(records, audits)
    gate = gates.Gate(gate="regression", subject="cpu-smoke/gpt-oss-120b/Offline", value=-1.5, bound=">= -5 %",
                      passed=True, detail="a | b")
    text = reporting.markdown("smoke", "smoke", rows, None, {"manifest": "manifest.json"}, [], audits,
                              folder="/ws/runs/r1", tree="/ws/runs/r1/submission", s3="s3://podium/runs/smoke/r1/",
                              link=LINK) + gates.markdown([gate])
    cells = [html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", MD.render(text))]
    assert "≥ 60.698" in cells and "≥ -5 %" in cells and "a | b" in cells and "—" in cells
    codes = [html.unescape(c) for c in re.findall(r"<code>(.*?)</code>", MD.render(text))]
    assert LINK.command in codes and "manifest.json" in codes   # the command copies as written; no URL to click
    assert "<a href" not in MD.render(text) and "valid 1 h" in text
    assert "`/ws/runs/r1`" in text and "`s3://podium/runs/smoke/r1/`" in text and "/ws/runs/r1/submission" in text


def test_plots_travel_inline_and_the_report_names_them(tmp_path: Path) -> None:
    """The `plots` artifact shows each PNG as a data: image (no URL into object storage); one over the size cap is
    named instead; the report lists the objects under the run's prefix."""
    small, large = tmp_path / "latency-a.png", tmp_path / "latency-b.png"
    small.write_bytes(b"\x89PNG\r\n\x1a\n" + b"x" * 64)
    large.write_bytes(b"\x89PNG" + b"y" * (reporting.INLINE_PLOT_BYTES + 1))
    rendered = MD.render(reporting.inline_plots([small, large]))
    sources = re.findall(r'<img src="([^"]+)"', rendered)
    assert sources == ["data:image/png;base64," + base64.b64encode(small.read_bytes()).decode()]
    assert "<code>plots/latency-b.png</code>" in rendered and "http" not in rendered
    assert "- `plots/latency-a.png`" in reporting.plots_markdown(["plots/latency-a.png"])
    assert reporting.plots_markdown([]) == ""


def test_the_outcome_line_counts_against_the_plan() -> None:
    records, audits = _records()
    check = CheckReport(round="v6.1", profile="smoke", scenarios_checked=1,
                        findings=[Finding(rule="min-duration", severity="deviation", path="p", message="m")])
    where = {"tree": "/ws/runs/r1/submission", "s3": "s3://podium/runs/smoke/r1/"}
    line = reporting.outcome("smoke", Planned(performance=2, accuracy=1, audits=3), records, audits, check, **where)
    assert line == ("smoke: 1/2 runs VALID, 1/1 accuracy PASS, 2/3 audits PASS, checker 0 errors, 1 deviations; "
                    "tree /ws/runs/r1/submission; s3://podium/runs/smoke/r1/")
    failed = reporting.outcome("smoke", Planned(performance=2), records[:1], [], None, failures=1, data_checks=2,
                               **where)
    assert failed.startswith("smoke: 1/2 runs VALID, 1 step(s) failed, 2 data check(s) failed; tree ")


def test_the_outcome_line_carries_the_published_verdict() -> None:
    records, _ = _records()
    verdict = "gpt-oss-120b Offline: 83 % of the best published GB200 per GPU FAIL: under 90 %"
    line = reporting.outcome("bringup", Planned(performance=2), records[:1], [], None, gates=1, published=verdict,
                             tree="/t")
    assert line == f"bringup: 1/2 runs VALID, 1 gate(s) failed, {verdict}; tree /t"


def test_an_unjudged_score_and_the_clients_cross_check_read_as_the_outcome_says() -> None:
    """A smoke stand-in model's score is reported, not judged: the table must not say FAIL where the outcome line says
    "not judged"; an endpoints row shows the reference evaluator's score beside the client's, its warning listed."""
    smoke = RunRecord(**BASE, key="a", mode="accuracy", run_dir="/a", valid=None, validity=None,
                      accuracy_metric="F1_HIERARCHICAL", accuracy=0.0, accuracy_pass=None)
    [row] = reporting.table([smoke])
    assert row["accuracy"] == "F1_HIERARCHICAL 0.000 (not judged)"
    assert "not judged" in reporting.outcome("smoke-vlm", Planned(accuracy=1), [smoke], [], None)
    checked = smoke.model_copy(update={"accuracy": 0.79, "accuracy_pass": True, "accuracy_reference": 0.7,
                                       "warnings": ("the scores differ",)})
    [row] = reporting.table([checked])
    assert row["accuracy"] == "F1_HIERARCHICAL 0.790; reference evaluator 0.700"
    text = reporting.markdown("p", "submission", [row], None, {}, [], warnings=checked.warnings)
    assert "## Warnings\n\n- the scores differ" in text
