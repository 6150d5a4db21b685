"""An endpoints (loadgen-less, v6.1) scenario folder: config.yaml, performance/result_summary.json,
accuracy/accuracy_results.json, audit/, measurements.json, README.md.

Official (`parsers/endpoints_parser.py`, `checks/*` on endpoints logs, reference §1.4, §2.4): the model may use the
endpoints path (`endpoints_model_check`), the seeds (sample index and schedule; the QSL seed does not apply), min
duration, scenario/folder consistency, the p99 latency limit of the folder (Qwen3-VL: e2e 12 s Server, 1.5 s
Interactive) or the TTFT/TPOT limits of an LLM, the accuracy score against the folder's target, dataset coverage,
the audit records (`{"test": <name>, "passed": true}`), TEST09's mean output length. Podium's own: the exact file
set, failed samples are errors, every audit record the benchmark's tests map to must be present.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from submission.base.errors import PlanError
from submission.checks.findings import Context, ScenarioResult
from submission.checks.loadgen import measurements
from submission.checks.run import check_seeds
from submission.rules import BenchmarkRules, ScenarioRules
from submission.tree.paths import (
    ACCURACY_RESULTS,
    AUDIT_DIR,
    ENDPOINTS_AUDIT_NAMES,
    ENDPOINTS_CONFIG,
    ENDPOINTS_SCENARIO_ROOT,
    MEASUREMENTS,
    README,
    RESULT_SUMMARY,
)

# config.yaml `type` -> loadgen scenario; online is Server (constants.py ENDPOINTS_YAML_FIELD_MAP: the official checker
# reads `effective_scenario` from `type` alone, so a `type: submission` config is no scenario there)
CONFIG_SCENARIOS = {"offline": "Offline", "online": "Server", "server": "Server"}
SCORE_KEYS = ("F1_HIERARCHICAL", "f1_hierarchical", "hierarchical", "f1", "score", "accuracy")  # accuracy_check.py
P99 = "99.0"
_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000}


def lookup(data: Any, *path: str) -> Any:
    """data[path[0]][path[1]]...; a percentile key matches however it is written ("99.0", "99", "99.00")."""
    for part in path:
        if not isinstance(data, dict):
            return None
        if part not in data:
            part = next((key for key in data if _same_number(key, part)), part)
        data = data.get(part)
    return data


def _same_number(a: object, b: str) -> bool:
    try:
        return float(str(a)) == float(b)
    except ValueError:
        return False


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def duration_ms(value: Any) -> int | None:
    """min_duration_ms as endpoints writes it: 600000, or with a suffix: "600000ms", "600s", "10m"."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    for suffix in sorted(_UNITS_MS, key=len, reverse=True):
        if text.endswith(suffix) and text[: -len(suffix)].strip().replace(".", "", 1).isdigit():
            return round(float(text[: -len(suffix)]) * _UNITS_MS[suffix])
    return None


def check_scenario(ctx: Context, division: str, folder: Path, b: BenchmarkRules, sc: ScenarioRules,
                   result: ScenarioResult) -> None:
    ctx.unexpected(folder, files=set(ENDPOINTS_SCENARIO_ROOT), dirs={"performance", "accuracy", AUDIT_DIR})
    if not b.endpoints_allowed:
        ctx.add("endpoints-model", folder, f"{b.name} may not be submitted through the endpoints harness in "
                f"{ctx.rules.round}", "run it with loadgen (performance/run_1 and accuracy/ loadgen logs)")
    ctx.missing("scenario-files", folder, (README,), non_empty=True,
                fix="Podium's assemble step writes it; it says how to reproduce the run")
    result.weight_data_types = measurements(ctx, folder / MEASUREMENTS)
    result.unit = sc.unit
    config(ctx, folder / ENDPOINTS_CONFIG, sc, result)
    ctx.unexpected(folder / "performance", files={RESULT_SUMMARY})
    summary = ctx.read_json("endpoints-files", folder / "performance" / RESULT_SUMMARY)
    if isinstance(summary, dict):
        performance(ctx, division, folder / "performance" / RESULT_SUMMARY, summary, b, sc, result)
    ctx.unexpected(folder / "accuracy", files={ACCURACY_RESULTS})
    scores = ctx.read_json("endpoints-files", folder / "accuracy" / ACCURACY_RESULTS)
    if scores is not None:
        accuracy(ctx, division, folder / "accuracy" / ACCURACY_RESULTS, scores, sc, result)
    if division != "open":
        audits(ctx, folder / AUDIT_DIR, b)


def config(ctx: Context, path: Path, sc: ScenarioRules, result: ScenarioResult) -> None:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        ctx.add("endpoints-files", path, "missing", "copy the endpoints run's config.yaml into the scenario folder")
        return
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        ctx.add("endpoints-config", path, f"not readable YAML: {error}", "copy the run's config.yaml unchanged")
        return
    if not isinstance(data, dict):
        ctx.add("endpoints-config", path, "not a YAML mapping", "copy the run's config.yaml unchanged")
        return
    kind = str(data.get("type", "")).lower()
    scenario = CONFIG_SCENARIOS.get(kind)
    result.log_scenario = scenario
    if scenario is None:   # the official checker takes `type` as the scenario; `benchmark_mode` is not read
        ctx.add("endpoints-config", path, f"type {data.get('type')!r} is not offline or online (the checker reads "
                "the scenario from `type`)", "run the client with a `type: offline` or `type: online` config "
                "(submission_ref still pins the round's seeds)")
    elif scenario != sc.loadgen_scenario:
        ctx.add("scenario-mismatch", path, f"an endpoints {kind} run in the {sc.name} folder",
                f"put an endpoints {'offline' if sc.loadgen_scenario == 'Offline' else 'online'} run here")
    runtime = lookup(data, "settings", "runtime") or {}
    minimum = duration_ms(lookup(runtime, "min_duration_ms"))
    if minimum is None or minimum < ctx.rules.min_duration_ms:
        ctx.add("min-duration", path, f"settings.runtime.min_duration_ms is {lookup(runtime, 'min_duration_ms')!r}, "
                f"under {ctx.rules.min_duration_ms} ms", f"set min_duration_ms: {ctx.rules.min_duration_ms}")
    seeds = {"sample_index_rng_seed": lookup(runtime, "dataloader_random_seed"),
             "schedule_rng_seed": lookup(runtime, "scheduler_random_seed")}
    check_seeds(ctx, path, seeds, ("sample_index_rng_seed", "schedule_rng_seed"),
                "use a `type: submission` config with the round's ruleset (the examples' seed 42 is not valid)")


def performance(ctx: Context, division: str, path: Path, summary: dict[str, Any], b: BenchmarkRules,
                sc: ScenarioRules, result: ScenarioResult) -> None:
    failed = _number(lookup(summary, "n_samples_failed"))
    if failed:
        ctx.add("endpoints-errors", path, f"{failed:g} sample(s) failed", "find why in the run's logs and re-run")
    if sc.latency_ns is not None:
        p99 = _number(lookup(summary, "latency", "early_stopping_percentiles", P99))
        if p99 is None or p99 > sc.latency_ns:
            ctx.add("latency-limit", path, f"p99 latency (early stopping) {p99} ns exceeds {sc.latency_ns} ns",
                    "lower target_qps")
    for what, limit in (("ttft", sc.ttft_ns), ("tpot", sc.tpot_ns)):
        measured = _number(lookup(summary, what, "early_stopping_percentiles", P99))
        if limit is not None and (measured is None or measured >= limit):
            ctx.add(f"{what}-limit", path, f"{what.upper()} p99 {measured} ns is not under {limit} ns",
                    "lower target_qps")
    qps = _number(lookup(summary, "qps"))
    issued, took = _number(lookup(summary, "n_samples_issued")), _number(lookup(summary, "duration_ns"))
    if qps is None and issued and took:
        qps = issued / (took / 1e9)  # how the checker infers it
    value = _number(lookup(summary, "tps")) if sc.unit == "Tokens/s" else qps
    result.result = value
    if value is None or value <= 0:
        ctx.add("performance-metric", path, f"no positive {'tps' if sc.unit == 'Tokens/s' else 'qps'} in the "
                "result summary", "copy the run's result_summary.json unchanged")
    if "TEST09" in b.compliance_tests and division != "open":
        try:
            bounds = ctx.rules.audit("TEST09").values(b.name)
        except PlanError as error:
            ctx.add("compliance-pass", path, f"TEST09: {error.message}", error.fix or "")
            return
        low, high = bounds["test09_min_output_tokens"], bounds["test09_max_output_tokens"]
        mean = _number(lookup(summary, "output_sequence_lengths", "avg"))
        if mean is None or not low <= mean <= high:
            ctx.add("compliance-pass", path, f"TEST09: mean output length {mean} is outside [{low}, {high}]",
                    "check the generation settings (max tokens, stop conditions)")


def score_of(value: Any) -> float | None:
    if isinstance(value, dict):
        value = next((value[key] for key in SCORE_KEYS if key in value), None)
    return _number(value)


def accuracy(ctx: Context, division: str, path: Path, data: Any, sc: ScenarioRules, result: ScenarioResult) -> None:
    entries = data.get("accuracy_scores") if isinstance(data, dict) else None
    entries = [e for e in entries or [] if isinstance(e, dict) and e.get("dataset_type") in (None, "accuracy")]
    targets = [t for t in sc.accuracy if t.required]
    scores = [s for s in (score_of(e.get("score")) for e in entries) if s is not None]
    if not scores:
        ctx.add("accuracy-metric", path, "no accuracy score in accuracy_scores", "copy the run's accuracy results")
    elif targets:
        target = targets[0]
        result.accuracy = {target.metric: f"{scores[0]:g}"}
        if scores[0] < (target.target or 0):
            ctx.add("accuracy-target", path, f"{target.metric} {scores[0]} is under the target {target.target}",
                    "fix the model or engine configuration", severity="warning" if division == "open" else "error")
    counts = [e.get("total_samples", lookup(e, "response_counts", "issued")) for e in entries]
    total = sum(int(c) for c in counts if isinstance(c, int | float) and not isinstance(c, bool))
    if total != sc.accuracy_sample_count:
        ctx.add("accuracy-coverage", path, f"accuracy covered {total} samples, not {sc.accuracy_sample_count}",
                "score the whole accuracy data set of the scenario")


def audits(ctx: Context, folder: Path, b: BenchmarkRules) -> None:
    names = {f"audit_{name}.json": (test, name) for test, name in ENDPOINTS_AUDIT_NAMES.items()}
    ctx.unexpected(folder, files=set(names), why=" in audit/ (only audit_<test name>.json records)")
    for test in b.compliance_tests:
        if test in ENDPOINTS_AUDIT_NAMES and not (folder / f"audit_{ENDPOINTS_AUDIT_NAMES[test]}.json").is_file():
            ctx.add("compliance-missing", folder, f"{test} (audit_{ENDPOINTS_AUDIT_NAMES[test]}.json) is required "
                    f"for {b.name}", f"run the endpoints {test} audit for this scenario")
    for file_name, (test, name) in sorted(names.items()):
        path = folder / file_name
        if not path.is_file():
            continue
        record = ctx.read_json_object("compliance-pass", path)
        if record is None:
            continue
        if record.get("test") != name:
            ctx.add("compliance-pass", path, f"the record is for test {record.get('test')!r}, not {name!r}",
                    f"write the {test} record here")
        elif record.get("passed") is not True:
            ctx.add("compliance-pass", path, f"{test} ({name}) did not pass", "fix the cause and re-run the audit")

