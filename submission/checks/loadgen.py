"""A loadgen scenario folder: its files, measurements.json, then the performance run (`run`), the accuracy run
(`accuracy`) and the TESTxx folders (`compliance`).

Official (reference §2.4): `MeasurementsCheck` (measurements.json present with its keys non-empty, user.conf and
README.md present and non-empty) and the exact performance file list (REQUIRED_PERF_FILES, OPTIONAL_PERF_FILES).
"""

from __future__ import annotations

from pathlib import Path

from submission.checks import compliance
from submission.checks.accuracy import accuracy
from submission.checks.findings import Context, ScenarioResult
from submission.checks.run import check_run
from submission.results.logs import LoadgenRun
from submission.rules import BenchmarkRules, ScenarioRules
from submission.tree.paths import (
    LOADGEN_SCENARIO_OPTIONAL,
    LOADGEN_SCENARIO_ROOT,
    MEASUREMENTS,
    README,
    USER_CONF,
)

POWER_DIRS = ("power", "ranging")  # performance/power, performance/ranging (power submissions)


def check_scenario(ctx: Context, division: str, folder: Path, b: BenchmarkRules, sc: ScenarioRules,
                   result: ScenarioResult) -> None:
    ctx.unexpected(folder, files=set(LOADGEN_SCENARIO_ROOT + LOADGEN_SCENARIO_OPTIONAL),
                   dirs={"performance", "accuracy", *b.compliance_tests})
    ctx.missing("scenario-files", folder, (USER_CONF, README), non_empty=True,
                fix="Podium's assemble step writes both; the README says how to reproduce the run")
    result.weight_data_types = measurements(ctx, folder / MEASUREMENTS)
    run = performance(ctx, folder / "performance", b, sc)
    if run is not None:
        result.log_scenario = run.scenario
        result.result = run.result(sc.result_field)
    result.unit = sc.unit
    result.accuracy = accuracy(ctx, division, folder / "accuracy", sc)
    compliance.check(ctx, division, folder, b, sc)


def measurements(ctx: Context, path: Path) -> str:
    """Check measurements.json; return its weight_data_types (a CSV column)."""
    data = ctx.read_json_object("measurements", path)
    if data is None:
        return ""
    empty = [k for k in ctx.rules.measurement_fields if not data.get(k)]
    if empty:
        ctx.add("measurements", path, f"missing or empty keys: {', '.join(empty)}",
                "fill them from the plan's model entry (weight_data_types, input_data_types, ...)")
    return str(data.get("weight_data_types", ""))


def performance(ctx: Context, perf_dir: Path, b: BenchmarkRules, sc: ScenarioRules) -> LoadgenRun | None:
    if not perf_dir.is_dir():
        ctx.add("performance-files", perf_dir, "no performance folder", "run the performance run and assemble again")
        return None
    ctx.unexpected(perf_dir, files=set(), dirs={"run_1", *POWER_DIRS})
    for name in POWER_DIRS:
        if (perf_dir / name).is_dir():
            ctx.add("power-unchecked", perf_dir / name, "power measurements are not checked by Podium",
                    "run the official checker (podium check --inference-src DIR) for its power checks",
                    severity="warning")
    run_dir = perf_dir / "run_1"
    if not run_dir.is_dir():
        ctx.add("performance-files", run_dir, "no performance/run_1 folder", "assemble the tree again")
        return None
    rules = ctx.rules.required_files
    ctx.unexpected(run_dir, files=set(rules.performance + rules.optional_performance))
    if ctx.missing("performance-files", run_dir, rules.performance):
        return None
    return check_run(ctx, run_dir, b, sc)
