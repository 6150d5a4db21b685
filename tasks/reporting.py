"""What a run tells its users: the results table, a markdown summary and links, as Prefect artifacts and as
`results.json` and `report.md` in the run folder.
"""

from __future__ import annotations

import json
from pathlib import Path

from submission.checker import CheckReport
from submission.runs import RunRecord

COLUMNS = ("system", "benchmark", "scenario", "metric", "unit", "valid", "ttft_p99_ms", "tpot_p99_ms", "accuracy")


def table(records: list[RunRecord]) -> list[dict]:
    """One row per scenario: the performance run's numbers and the accuracy run's score."""
    rows: dict[tuple[str, str, str], dict] = {}
    for r in records:
        row = rows.setdefault((r.system, r.benchmark, r.scenario), dict.fromkeys(COLUMNS) | {
            "system": r.system, "benchmark": r.benchmark, "scenario": r.scenario})
        if r.mode == "performance":
            row |= {"metric": r.metric, "unit": r.unit, "valid": r.valid, "ttft_p99_ms": r.ttft_p99_ms,
                    "tpot_p99_ms": r.tpot_p99_ms}
        elif r.accuracy is not None:
            row["accuracy"] = f"{r.accuracy_metric} {r.accuracy:.3f}" + ("" if r.accuracy_pass else " (FAIL)")
    return list(rows.values())


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return str(value)


def markdown(plan_name: str, profile: str, rows: list[dict], check: CheckReport | None, links: dict[str, str],
             failures: list[str]) -> str:
    lines = [f"# Podium run of `{plan_name}`", ""]
    if profile == "smoke":
        lines += ["> **SMOKE RUN**: a CPU run of a tiny model with shortened durations. Its tree is not, and does not",
                  "> claim to be, a valid MLPerf submission.", ""]
    lines += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_cell(row[c]) for c in COLUMNS) + " |" for row in rows]
    if failures:
        lines += ["", "## Failed steps", ""] + [f"- {f}" for f in failures]
    if check is not None:
        lines += ["", "## Checker", "", check.summary(), ""]
        lines += [f"- `{f.severity}` **{f.rule}** `{f.path}`: {f.message}" for f in check.findings]
    if links:
        lines += ["", "## Where everything went", ""] + [f"- {name}: {url}" for name, url in links.items()]
    return "\n".join(lines) + "\n"


def write_run_files(run_folder: Path, records: list[RunRecord], report_md: str) -> None:
    (run_folder / "results.json").write_text(json.dumps([r.model_dump(mode="json") for r in records], indent=2))
    (run_folder / "report.md").write_text(report_md)


def publish_artifacts(rows: list[dict], report_md: str, links: dict[str, str]) -> None:
    """Create the Prefect artifacts of the run (inside a flow run)."""
    from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact

    create_table_artifact(key="results", table=[{k: _cell(v) for k, v in row.items()} for row in rows],
                          description="One row per system, benchmark and scenario")
    create_markdown_artifact(key="summary", markdown=report_md, description="Podium run summary")
    for name, url in links.items():
        create_link_artifact(key=name.lower().replace(" ", "-").replace("_", "-"), link=url, link_text=name)
