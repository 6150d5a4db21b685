"""What a run's measuring cost in GPU-hours, beside what the dry run predicted: the `## GPU time` section of
report.md.

One row per measured run (an endpoints run's performance and accuracy rows are one run: one key, one folder): its
measured time (`RunRecord.wall_s`: the wall seconds of the loadgen run or of the whole endpoints client
invocation, both phases of a `--mode both` run) x the GPUs of its
benchmark's engine, and its predicted seconds and GPU-hours; then the total. The GPUs and the prediction come from
submission/budget/cost.py (`benchmark_gpus`, `predicted_runs`), where `podium launch PLAN --dry-run` takes its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from submission.base import markdown as md
from submission.budget import cost
from submission.plan.model import Plan
from submission.results.runs import RunRecord

COLUMNS = ("run", "seconds", "gpus", "gpu_hours", "predicted_s", "predicted_gpu_hours")


def predicted(plan: Plan) -> dict[str, tuple[float, int]]:
    """Each run the plan makes, by its label (system/benchmark/scenario/mode, an audit's test in place of its mode):
    its predicted seconds and the GPUs of its benchmark's engine."""
    return {s.label: (length.seconds, cost.benchmark_gpus(b))
            for b in plan.benchmarks for s, length in cost.predicted_runs(plan, b)}


def rows(records: Sequence[RunRecord], expected: dict[str, tuple[float, int]]) -> list[dict]:
    """One row per measured run (first row of each key), then `total`. A run the plan does not predict (none
    should) has no GPU count, and so no GPU-hours; a run with no measured time counts none."""
    out, seen = [], set()
    for r in records:
        if r.key in seen:
            continue
        seen.add(r.key)
        seconds, gpus = expected.get(r.label, (None, None))
        out.append({"run": r.label, "seconds": r.wall_s, "gpus": gpus,
                    "gpu_hours": None if gpus is None or r.wall_s is None else cost.gpu_hours(r.wall_s, gpus),
                    "predicted_s": None if seconds is None else round(seconds, 1),
                    "predicted_gpu_hours": None if seconds is None else cost.gpu_hours(seconds, gpus)})

    def total(name: str) -> float:
        return round(sum(row[name] or 0 for row in out), 3)

    out.append({"run": "total", "seconds": total("seconds"), "gpus": None, "gpu_hours": total("gpu_hours"),
                "predicted_s": total("predicted_s"), "predicted_gpu_hours": total("predicted_gpu_hours")})
    return out


def markdown(table: list[dict]) -> list[str]:
    """The `## GPU time` section: the table and, with no GPUs anywhere (a CPU engine), a line saying so."""
    lines = ["", "## GPU time", "", "Each measured run's time x its engine's GPUs, beside the dry run's prediction "
             "(`podium launch PLAN --dry-run`).", "", *md.table(COLUMNS, table)]
    if not any(row["gpus"] for row in table):
        lines += ["", "No run held a GPU (a CPU engine): 0 GPU-hours."]
    return lines
