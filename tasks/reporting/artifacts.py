"""What a run tells its users: the results table, a markdown summary and its plots, as Prefect artifacts and as
`results.json` and `report.md` in the run folder. None of it holds a presigned URL or any other credential: objects
are named by their `s3://` URL with the `podium link` command that mints a download link on demand
(tasks/storage/links.py), and the plots travel inline.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

from submission.base import markdown as md
from submission.base.files import write_atomic
from submission.checks.checker import CheckReport
from submission.results.runs import AuditRecord, Planned, RunRecord
from tasks.reporting.gpu_time import markdown as gpu_markdown
from tasks.reporting.plots import plot_latency as plot_latency  # the PNG plots, re-exported (tasks/reporting/plots.py)
from tasks.reporting.plots import plot_run as plot_run
from tasks.reporting.plots import plot_scaling as plot_scaling
from tasks.reporting.plots import plot_search_trace as plot_search_trace
from tasks.reporting.plots import plot_sweep as plot_sweep
from tasks.reporting.replicas import markdown as replicas_markdown
from tasks.reporting.telemetry_plots import plot_sweep_telemetry as plot_sweep_telemetry
from tasks.reporting.telemetry_plots import plot_telemetry as plot_telemetry
from tasks.serving import telemetry

COLUMNS = ("system", "benchmark", "scenario", "metric", "unit", "valid", "ttft_p99_ms", "tpot_p99_ms", "gpu_util",
           "kv_cache_peak", "accuracy", "compliance")
AUDIT_COLUMNS = ("system", "benchmark", "scenario", "test", "verdict", "measured", "bound", "attempts", "official")
INLINE_PLOT_BYTES = 1024 * 1024   # a larger PNG is named, not inlined, in the `plots` artifact (Prefect's database)


@dataclass(frozen=True)
class LinkCommand:
    """How a reader gets a download link: the `podium link` command line, and how long the link it prints lives."""

    command: str
    lifetime: str   # e.g. "1 h"


def table(records: list[RunRecord], audits: Sequence[AuditRecord] = ()) -> list[dict]:
    """One row per scenario: the performance run's numbers (with its telemetry at a glance: mean GPU utilisation per
    role and peak KV-cache use), the accuracy run's score and the audits' verdicts."""
    rows: dict[tuple[str, str, str], dict] = {}
    for r in records:
        row = rows.setdefault((r.system, r.benchmark, r.scenario), dict.fromkeys(COLUMNS) | {
            "system": r.system, "benchmark": r.benchmark, "scenario": r.scenario})
        if r.mode == "performance":
            glance = telemetry.of_run(r.run_dir)
            row |= {"metric": r.metric, "unit": r.unit, "valid": r.valid, "ttft_p99_ms": r.ttft_p99_ms,
                    "tpot_p99_ms": r.tpot_p99_ms, "gpu_util": gpu_util_cell(glance),
                    "kv_cache_peak": glance.get("kv_cache_peak")}
        elif r.accuracy is not None:
            row["accuracy"] = accuracy_cell(r)
    for a in audits:
        row = rows.get((a.system, a.benchmark, a.scenario))
        if row is not None:
            verdict = f"{a.test} {'PASS' if a.passed else 'FAIL'}"
            row["compliance"] = f"{row['compliance']}, {verdict}" if row["compliance"] else verdict
    return list(rows.values())


def gpu_util_cell(glance: dict[str, float]) -> str | None:
    """The mean GPU utilisation of a run's measured phase (tasks.serving.telemetry.summary): per role where the GPUs
    have prefill and decode roles (a decode-bound split shows as idle prefill GPUs beside busy decode ones), else of
    all its GPUs; None without GPU samples."""
    roles = [role for role in ("prefill", "decode") if f"gpu_util_pct.{role}" in glance]
    if roles:
        return ", ".join(f"{role} {glance[f'gpu_util_pct.{role}']:g} %" for role in roles)
    return None if "gpu_util_pct" not in glance else f"{glance['gpu_util_pct']:g} %"


def accuracy_cell(r: RunRecord) -> str:
    """The score, its verdict (a smoke stand-in model's is not judged) and the endpoints client's cross-check."""
    verdict = {True: "", False: " (FAIL)", None: " (not judged)"}[r.accuracy_pass]
    check = "" if r.accuracy_reference is None else f"; reference evaluator {r.accuracy_reference:.3f}"
    return f"{r.accuracy_metric} {r.accuracy:.3f}{verdict}{check}"


def compliance_rows(audits: Sequence[AuditRecord]) -> list[dict]:
    """One row per audit: its verdict and the measured value against its bound (the first failed check, or the
    last measured one when it passed)."""
    rows = []
    for a in audits:
        measured = [c for c in a.checks if c.passed is not None]
        main = (a.failed_checks or [c for c in measured if c.measured is not None][-1:] or [None])[0]
        rows.append({"system": a.system, "benchmark": a.benchmark, "scenario": a.scenario, "test": a.test,
                     "verdict": "PASS" if a.passed else "FAIL",
                     "measured": None if main is None else f"{main.name} {md.cell(main.measured)}",
                     "bound": None if main is None else main.bound, "attempts": a.attempts,
                     "official": a.official + (f" ({a.disagreement})" if a.disagreement else "") if a.official
                     else None})
    return rows


def markdown(plan_name: str, profile: str, rows: list[dict], check: CheckReport | None, objects: dict[str, str],
             failures: list[str], audits: Sequence[AuditRecord] = (), *, folder: str | None = None,
             tree: str | None = None, s3: str | None = None, link: LinkCommand | None = None,
             warnings: Sequence[str] = (), gpu_time: Sequence[dict] = (), records: Sequence[RunRecord] = ()) -> str:
    """report.md: the results table, the audits, `gpu_time` (tasks.reporting.gpu_time: each run's GPU-hours beside
    the prediction), the replicas of each run of `records` served by replicas (tasks.reporting.replicas), failed
    steps, warnings, the checker's findings and where everything went."""
    lines = [f"# Podium run of `{plan_name}`", ""]
    if profile == "smoke":
        lines += ["> **SMOKE RUN**: a CPU run of a tiny model with shortened durations. Its tree is not, and does not",
                  "> claim to be, a valid MLPerf submission.", ""]
    lines += md.table(COLUMNS, rows)
    if audits:
        lines += ["", "## Compliance", "", *md.table(AUDIT_COLUMNS, compliance_rows(audits))]
    if gpu_time:
        lines += gpu_markdown(list(gpu_time))
    lines += replicas_markdown(records)
    if failures:
        lines += ["", "## Failed steps", ""] + [f"- {f}" for f in failures]
    if warnings:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in warnings]
    if check is not None:
        lines += ["", "## Checker", "", check.summary(), ""]
        lines += [f"- `{f.severity}` **{f.rule}** `{f.path}`: {f.message}" for f in check.findings]
    return "\n".join(lines) + "\n" + where_markdown(folder, tree, s3, objects, link)


def where_markdown(folder: str | None, tree: str | None, s3: str | None, objects: dict[str, str],
                   link: LinkCommand | None = None) -> str:
    """`## Where everything went`: the run folder, the tree, the object storage prefix with the objects under it
    (name -> path under the prefix), and how to get a download link (never a link itself: see the module's doc)."""
    places = (("run folder", folder), ("submission tree", tree), ("object storage", s3))
    lines = [f"- {name}: `{value}`" for name, value in places if value]
    if s3 and objects:
        lines[-1] += " holding " + ", ".join(f"{name} `{rel}`" for name, rel in objects.items())
    if link is not None:
        lines.append(f"- a download link: `{link.command}` prints a presigned URL to that object, valid "
                     f"{link.lifetime} (the plan's `storage.link_expiry_s`) and signed with your own S3 credentials; "
                     "for another object put its `s3://` URL (the prefix above and its name) in place. Anyone "
                     "holding the URL can download that object until it expires; the URL shows your access key id, "
                     "never the secret.")
    return "\n## Where everything went\n\n" + "\n".join(lines) + "\n" if lines else ""


def outcome(plan_name: str, planned: Planned, records: Sequence[RunRecord], audits: Sequence[AuditRecord],
            check: CheckReport | None, *, failures: int = 0, data_checks: int = 0, gates: int = 0,
            tree: str | None = None, s3: str | None = None, not_run: int = 0, published: str = "") -> str:
    """The run in one line, counted against what the plan planned: the final state's message, the summary's
    description, what `podium run` prints last. `not_run`: runs and audits `podium run --only` left out;
    `published`: the verdict against the round's published results (`submission.results.published.verdict`)."""
    reported = sum(r.mode == "accuracy" and r.accuracy is not None and r.accuracy_pass is None for r in records)
    counts = [(planned.performance, sum(r.mode == "performance" and r.valid is True for r in records), "runs VALID"),
              (planned.accuracy - reported, sum(r.mode == "accuracy" and r.accuracy_pass is True for r in records),
               "accuracy PASS"),
              (planned.audits, sum(a.passed for a in audits), "audits PASS")]
    parts = [f"{done}/{total} {what}" for total, done, what in counts if total]
    if reported:
        parts.append(f"{reported} accuracy score(s) reported, not judged (smoke stand-in model)")
    if check is not None:
        parts.append(f"checker {len(check.errors)} errors, {len(check.deviations)} deviations")
    parts += [f"{n} {what}" for n, what in ((failures, "step(s) failed"), (not_run, "run(s) not run (--only)"),
                                            (data_checks, "data check(s) failed"), (gates, "gate(s) failed")) if n]
    parts += [published] if published else []
    return "; ".join([f"{plan_name}: {', '.join(parts)}", *([f"tree {tree}"] if tree else []), *([s3] if s3 else [])])


def write_run_files(run_folder: Path, records: list[RunRecord], report_md: str,
                    audits: Sequence[AuditRecord] = ()) -> None:
    write_atomic(run_folder / "results.json", json.dumps([r.model_dump(mode="json") for r in records], indent=2))
    if audits:
        write_atomic(run_folder / "compliance.json", json.dumps([a.model_dump(mode="json") for a in audits], indent=2))
    write_atomic(run_folder / "report.md", report_md)


def artifact_tables(rows: list[dict], audits: Sequence[AuditRecord] = ()) -> dict[str, list[dict[str, str]]]:
    """The table artifacts by key: `results`, and `compliance` when audits ran; every cell as `submission.base.markdown`
    writes it (the UI renders each cell as Markdown)."""
    tables = {"results": rows, "compliance": compliance_rows(audits)} if audits else {"results": rows}
    return {key: [{k: md.cell(v) for k, v in row.items()} for row in table] for key, table in tables.items()}


def publish_artifacts(rows: list[dict], report_md: str, audits: Sequence[AuditRecord] = (),
                      outcome: str | None = None) -> None:
    """Create the Prefect artifacts of the run (inside a flow run); the summary goes on the top-level run too, when
    this one is a subflow (of a bring-up), with the run's outcome line as its description."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    descriptions = {"results": "One row per system, benchmark and scenario",
                    "compliance": "One row per compliance audit: verdict, measured value and bound"}
    for key, table in artifact_tables(rows, audits).items():
        create_table_artifact(key=key, table=table, description=descriptions[key])
    create_markdown_artifact(key="summary", markdown=report_md, description=outcome or "Podium run summary")
    top = top_run_id()
    if top and top != current_run_id():
        create_on(top, "markdown", report_md, key="summary", description=outcome or "Podium run summary")


def current_run_id() -> str | None:
    from prefect.runtime import flow_run

    return flow_run.id


def top_run_id() -> str | None:
    """The flow run a person started (the root of this run's subflows); None outside a flow run."""
    from prefect.runtime import flow_run

    return flow_run.root_flow_run_id if flow_run.id else None


def create_on(flow_run_id: str, kind: str, data: object, *, key: str | None, description: str) -> UUID:
    """An artifact of `kind` (markdown, progress, ...) on the flow run `flow_run_id`, whichever run makes it."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import ArtifactCreate

    with get_client(sync_client=True) as client:
        return client.create_artifact(ArtifactCreate(type=kind, key=key, description=description, data=data,
                                                     flow_run_id=UUID(flow_run_id))).id


def publish_plots(pngs: Sequence[Path]) -> None:
    """The `plots` markdown artifact: every plot inline (`inline_plots`), so the Prefect UI shows them with no URL
    into object storage (a presigned one would put a credential into Prefect); nothing when there are none."""
    from prefect.artifacts import create_markdown_artifact

    if pngs:
        create_markdown_artifact(key="plots", markdown=inline_plots(pngs), description=f"{len(pngs)} plot(s)")


def inline_plots(pngs: Sequence[Path]) -> str:
    """Markdown showing each PNG as a `data:` image (up to INLINE_PLOT_BYTES each; a larger one is named)."""
    lines = ["## Plots", ""]
    for png in pngs:
        data = Path(png).read_bytes()
        if len(data) > INLINE_PLOT_BYTES:
            lines += [f"- `plots/{png.name}`: {len(data):,} bytes, too large to show here; in the run folder and "
                      "object storage", ""]
            continue
        lines += [f"### {png.stem}", "", f"![{png.stem}](data:image/png;base64,{base64.b64encode(data).decode()})", ""]
    return "\n".join(lines)


def plots_markdown(names: Sequence[str]) -> str:
    """A `## Plots` section naming each PNG under the run's prefix (`plots/<file>`); empty when there are none."""
    if not names:
        return ""
    return ("\n## Plots\n\n" + "".join(f"- `{name}`\n" for name in names)
            + "\nShown in the run's `plots` artifact in Prefect; in the run folder and object storage as named.\n")
