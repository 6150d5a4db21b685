"""The acceptance gates of a run's report (`submission.checks.gates` does the arithmetic): this module gathers what they
compare against: the accelerators of each system, the accuracy targets of the round, the results of the previous
run of the same plan in object storage, the last scaling check of each benchmark in the workspace, and the round's
published results of the same accelerator (`submission.results.published`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prefect import task

from submission.base import markdown as md
from submission.base.errors import PlanError, StorageError
from submission.checks import gates
from submission.plan.model import Plan
from submission.results import published as pub
from submission.rules import load_rules
from submission.tree.rehearsal_marker import is_rehearsal
from tasks.steps import run_logger
from tasks.storage import objects as storage


def previous_results(cfg: storage.StorageConfig, plan_name: str, run_id: str) -> tuple[str, list[dict]] | None:
    """(run id, results.json rows) of the newest finished run of `plan_name` other than `run_id`; a run counts as
    finished when its manifest (written last) is there."""
    s3 = storage.client(cfg)
    newest: tuple[Any, str] | None = None
    top = storage.object_key(cfg, plan_name)
    for key in storage.list_keys(cfg, plan_name):
        parts = key[len(top):].strip("/").split("/")   # <run id>/manifest.json; a fleet member's is deeper
        if parts[1:] != [storage.MANIFEST] or parts[0] == run_id:
            continue
        try:
            stamp = s3.head_object(Bucket=cfg.bucket, Key=key)["LastModified"]
        except Exception as e:  # botocore errors: this run is skipped, the comparison goes on
            run_logger("gates").warning("cannot read %s: %s", key, e)
            continue
        if newest is None or stamp > newest[0]:
            newest = (stamp, parts[-2])
    if newest is None:
        return None
    key = storage.object_key(cfg, plan_name, newest[1], "results.json")
    try:
        rows = json.loads(s3.get_object(Bucket=cfg.bucket, Key=key)["Body"].read())
    except Exception as e:
        raise StorageError(f"reading {key} failed: {e}", where=f"s3://{cfg.bucket}/{key}",
                           fix="check the previous run's upload; the comparison is skipped until it is readable") from e
    return newest[1], rows


def performance_rows(records: list[dict]) -> list[dict]:
    return [{"system": r["system"], "benchmark": r["benchmark"], "scenario": r["scenario"], "metric": r.get("metric"),
             "unit": r.get("unit")} for r in records if r.get("mode") == "performance" and r.get("audit") is None]


def accelerators(systems: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Accelerators of each system: accelerators_per_node x number_of_nodes (0 when not a number)."""
    out = {}
    for name, desc in systems.items():
        try:
            out[name] = int(desc.get("accelerators_per_node") or 0) * int(desc.get("number_of_nodes") or 1)
        except (TypeError, ValueError):
            out[name] = 0
    return out


def published_comparisons(round: str, rows: list[dict], systems: dict[str, dict[str, Any]]) -> list[pub.Comparison]:
    """Each performance row against the round's published results of its system's accelerator (its description's
    `accelerator_model_name`, accelerators_per_node x number_of_nodes); none when the round has no published file."""
    try:
        published = pub.load(round)
    except PlanError as e:
        run_logger("gates").warning("no comparison with published results: %s", e)
        return []
    counts = accelerators(systems)
    return [pub.compare(published, r["benchmark"], r["scenario"], r["metric"], r.get("unit") or "",
                        str(systems.get(r["system"], {}).get("accelerator_model_name") or ""),
                        counts.get(r["system"], 0), system=r["system"])
            for r in rows if r.get("metric") is not None]


def published_markdown(comparisons: list[pub.Comparison], round: str) -> str:
    """`## Against the published <round> results`: the table per scenario, labelled as what it is."""
    if not comparisons:
        return ""
    source = pub.load(round)
    lines = [f"## Against the published {round} results, per accelerator", "",
             f"A comparison per accelerator of this run, which no one has reviewed, with the {comparisons[0].division} "
             f"results of {source.source} @ {source.commit[:12]}; not an MLPerf metric. Accelerator names are matched "
             "by a key without vendor, memory size or form factor; systems of mixed accelerators are left out.", ""]
    matched = [c for c in comparisons if c.fraction is not None]
    if matched:
        lines += md.table(("system", "benchmark", "scenario", "per accelerator", "best published per accelerator",
                           "fraction", "best at the same count", "rank", "matched names", "notes"),
                          [_published_cells(c) for c in matched])
    verdict = pub.verdict([c for c in comparisons if c.fraction is None], round=round)
    if verdict:
        lines += ["", verdict[0].upper() + verdict[1:] + "."]
    return "\n".join(lines) + "\n"


def _published_cells(c: pub.Comparison) -> tuple[object, ...]:
    best = c.best
    same = (f"{c.same_count_fraction:.1%} of {c.same_count.value:,.1f} {c.unit}: {c.same_count.label}"
            if c.same_count else f"none with {c.accelerators}")
    notes = [f"bound by a target ({c.target_bound:.4g} {c.unit})" if c.target_bound else "",
             f"best is a {best.availability} result" if best and best.availability != "available" else "",
             f"{c.mixed_left_out} mixed-accelerator result(s) left out" if c.mixed_left_out else ""]
    return (c.system, c.benchmark, c.scenario, f"{c.per_accelerator:,.2f} {c.unit}",
            f"{best.per_accelerator:,.2f}: {best.label} `{best.location}`" if best else None,
            f"{c.fraction:.1%}", same, f"{c.rank} of {len(c.results) + 1}", ", ".join(c.matched),
            "; ".join(n for n in notes if n))


def scaling_results(workspace: Path, plan: Plan) -> list[gates.Gate]:
    """The gates of the last `podium scale` of each benchmark of the plan, if one ran in this workspace."""
    found = []
    for b in plan.benchmarks:
        for path in sorted((workspace / "search").glob(f"scaling-{b.key.replace('/', '-')}-*.json")):
            found += [gates.Gate.model_validate(g) for g in json.loads(path.read_text()).get("gates", [])]
    return found


def evaluate(plan: Plan, records: list[dict], systems: dict[str, dict[str, Any]],
             previous: tuple[str, list[dict]] | None, workspace: Path) -> dict[str, Any]:
    """Every gate of the run and the report section: the gates, then the per-GPU table."""
    rules = load_rules(plan.round)
    rows = performance_rows(records)
    targets = {}
    for b in plan.benchmarks:
        for scenario in b.scenarios:
            accuracy = rules.benchmark(b.benchmark).scenario(scenario).accuracy
            targets[(b.benchmark, scenario)] = accuracy[0].target if accuracy else None

    class Rec:
        def __init__(self, d: dict) -> None:
            self.__dict__.update(d)

    found = gates.server_offline(rows, plan.gates.server_offline_min_ratio)
    found += gates.accuracy_margin([Rec(r) for r in records], targets, plan.gates.accuracy_margin_min)
    found += gates.regression(rows, performance_rows(previous[1]) if previous else None,
                              plan.gates.regression_tolerance, previous[0] if previous else "")
    found += scaling_results(workspace, plan)
    # a rehearsal's numbers are the simulated engine's at rates of its own choosing: nothing to hold against the round
    compared = [] if is_rehearsal(plan.name) else published_comparisons(plan.round, rows, systems)
    found += gates.published(compared, plan.gates.published_min_fraction)
    per_gpu = gates.per_gpu(rows, accelerators(systems))
    text = gates.markdown(found) or "## Acceptance gates\n\nNothing to gate.\n"
    text += "\n" + "\n".join(md.table(("system", "benchmark", "scenario", "metric", "accelerators", "per accelerator"),
                                     [_per_gpu_cells(r) for r in per_gpu if r.get("metric") is not None])) + "\n"
    if previous is None:
        text += "\nNo earlier run of this plan in object storage: nothing to compare with.\n"
    if compared:
        text += "\n" + published_markdown(compared, plan.round)
    return {"gates": [g.model_dump() for g in found], "per_gpu": per_gpu, "markdown": text,
            "failed": sum(g.passed is False for g in found), "previous_run": previous[0] if previous else None,
            "published": [_comparison_json(c) for c in compared],
            "published_line": pub.verdict(compared, plan.gates.published_min_fraction, plan.round)}


def _comparison_json(c: pub.Comparison) -> dict[str, Any]:
    return {"subject": c.subject, "accelerator": c.accelerator, "key": c.key, "accelerators": c.accelerators,
            "per_accelerator": c.per_accelerator, "fraction": c.fraction, "matched": c.matched,
            "best": c.best.location if c.best else None, "same_count": c.same_count.location if c.same_count else None,
            "same_count_fraction": c.same_count_fraction, "rank": c.rank, "published": len(c.results),
            "target_bound": c.target_bound, "division": c.division, "line": c.line()}


def _per_gpu_cells(r: dict[str, Any]) -> tuple[object, ...]:
    return (r["system"], r["benchmark"], r["scenario"], f"{r['metric']:,.2f} {r.get('unit') or ''}".rstrip(),
            r["gpus"], r["per_gpu"])


@task(name="acceptance-gates")
def acceptance_gates(plan: Plan, records: list[dict], systems: dict[str, dict[str, Any]],
                     cfg: storage.StorageConfig, run_id: str, workspace: str) -> dict[str, Any]:
    """The gates of this run; a failing gate is reported (and logged), it does not fail the run."""
    try:
        previous = previous_results(cfg, plan.name, run_id)
    except StorageError as e:
        run_logger("gates").warning("no comparison with the previous run: %s", e)
        previous = None
    out = evaluate(plan, records, systems, previous, Path(workspace))
    for g in out["gates"]:
        if g["passed"] is False:
            run_logger("gates").warning("gate %s failed for %s: %s (bound %s) %s", g["gate"], g["subject"],
                                        g["value"], g["bound"], g["detail"])
    return out
