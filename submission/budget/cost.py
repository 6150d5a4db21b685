"""What a run costs: its length at a rate, and the GPU-hours of that length on the plan's hardware. One model for
every report that says what measuring cost or will cost (the peak-QPS search, the prefill:decode sweep, the scaling
check, a dress rehearsal of the real round, every dry run), so their numbers agree.

A run's length is submission/budget/run_length.py's, for the client that measures it: loadgen's Offline query of 1.1 x
min_duration x target_qps samples padded to whole passes, its Server queries on their schedule, an accuracy run's set
once at its scenario's rate, each audit at the rate it runs; the endpoints client's whole passes and its accuracy
phase. GPU-hours are seconds x the deployment's GPUs / 3600; the GPUs come from the engine options' topology (`gpus`).
`predicted_runs`: each run and audit a plan makes of a benchmark, as the dry run states them; `real_round`: what a
whole plan's round takes on its own hardware, at its target rates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from submission.budget import run_length
from submission.plan.client_length import offline_runs
from submission.plan.model import BenchmarkSpec, Plan
from submission.results.runs import RunSpec, plan_runs
from submission.rules import Rules, load_rules

ROUND_MIN_DURATION_S = 600.0   # mlperf.conf *.*.min_duration = 600000 (ms): a run's floor where user.conf sets none


def run_seconds(min_duration_s: float, min_query_count: int, qps: float | None) -> float:
    """How long a run of that floor and query count lasts at `qps` (its floor when the rate is unknown)."""
    return max(min_duration_s, min_query_count / qps) if qps else min_duration_s


def conf_value(spec: RunSpec, name: str) -> str | None:
    """A user.conf setting of the spec by its last part (`min_duration`, `target_qps`, ...), any model/scenario."""
    return run_length.conf(spec, name)


def spec_length(spec: RunSpec, qps: float | None = None, floor_s: float = ROUND_MIN_DURATION_S,
                rows: int | None = None) -> run_length.RunLength:
    """The length of `spec` with `qps` as its rate (default: its own target_qps), by the one model of a run's
    length of the client that measures it (submission.budget.run_length: the endpoints client's whole passes over
    `rows`, the staged data set's rows where known, else the rules')."""
    at = spec if qps is None else run_length.at_rate(spec, qps)
    return run_length.run_length(at, load_rules(spec.round), floor_s=floor_s, rows=rows)


def spec_seconds(spec: RunSpec, qps: float | None = None, floor_s: float = ROUND_MIN_DURATION_S,
                 rows: int | None = None) -> float:
    """How long `spec` measures with `qps` as its rate, its drain and accuracy phase included (`spec_length`)."""
    return spec_length(spec, qps, floor_s, rows).seconds


def gpus(options: Any) -> int:
    """The GPUs a deployment holds: nodes x gpus_per_node where the options have that topology, else the GPUs of
    its weight-holding workers (`EngineOptions.workers`), else 0 (a CPU engine)."""
    nodes, per_node = getattr(options, "nodes", None), getattr(options, "gpus_per_node", None)
    if isinstance(nodes, int) and isinstance(per_node, int):
        return nodes * per_node
    workers = options.workers() if hasattr(options, "workers") else ()
    return sum(w.count * w.tp * w.pp for w in workers if w.on_gpu)


def benchmark_gpus(bench: BenchmarkSpec) -> int:
    """The GPUs a benchmark's engine holds (`gpus` of its engine options, or every replica's GPUs where it serves as
    `engine.replicas`; 0: a CPU engine): what the dry run's predicted GPU-hours and the run summary's measured ones
    both count."""
    return deployment_gpus(bench.engine.config(), bench.engine.replica_layout())


def deployment_gpus(options: Any, layout: Any = None) -> int:
    """The GPUs of a deployment of the engine `options`: every replica's where it serves as replicas (`layout`, a
    submission.plan.replicas.Layout), else `gpus(options)`."""
    return layout.count * layout.gpus if layout is not None else gpus(options)


def floor_seconds(plan: Plan) -> float:
    """A loadgen run's floor where its user.conf sets none: the round's min duration in a submission, none else."""
    return load_rules(plan.round).min_duration_ms / 1000 if plan.profile == "submission" else 0.0


def predicted_runs(plan: Plan, bench: BenchmarkSpec, floor_s: float | None = None,
                   ) -> list[tuple[RunSpec, run_length.RunLength]]:
    """Each run the plan makes of `bench`, then each audit, and its predicted length (submission.budget.run_length,
    an Offline run at its scenario's expected_qps; `floor_s`: a loadgen run's floor where its user.conf sets none,
    default `floor_seconds`): what `podium launch --dry-run` states and the run summary sets beside the measured
    time."""
    rules = load_rules(plan.round)
    sources = {path for _, kind, path in bench.sources() if kind == "datasets"}
    specs = plan_runs(plan, bench, rules, model_sha256="-", engine=bench.engine.name,
                      dataset_sha256=dict.fromkeys(sources, "-"))
    floor = floor_seconds(plan) if floor_s is None else floor_s
    return [(s, run_length.run_length(s, rules, rate=bench.scenarios[s.scenario].expected_qps, floor_s=floor))
            for s in [*specs, *audit_specs(plan, bench, specs, rules)]]


def audit_specs(plan: Plan, bench: BenchmarkSpec, specs: Sequence[RunSpec], rules: Rules) -> list[RunSpec]:
    """The audit runs of each scenario, as tasks/compliance/planning.py plans them once the scenario has run: its
    performance run with the audit's audit.config (the smoke profile's overrides merged), a Server target derated by
    compliance.server_qps_factor, and a test on its own data set given that set's size as its performance sample
    count (its audit.config min_query_count: the round sets it to the set's size, TEST07's 990)."""
    if not plan.audits_enabled:
        return []
    brules, out = rules.benchmark(bench.benchmark), []
    for perf in (s for s in specs if s.mode == "performance" and s.audit is None):
        for test in brules.compliance_tests:
            audit = rules.audit(test)
            overrides = plan.compliance.overrides.get(test)
            if overrides:
                audit = audit.model_copy(update={"per_benchmark": {**audit.per_benchmark, bench.benchmark: {
                    **audit.per_benchmark.get(bench.benchmark, {}), **overrides}}})
            lines = dict(perf.user_conf)
            rate = f"{perf.loadgen_model}.Server.target_qps"
            if perf.loadgen_scenario == "Server" and rate in lines:
                lines[rate] = f"{float(lines[rate]) * plan.compliance.server_qps_factor:g}"
            if test in brules.dataset.files:
                size = audit.values(bench.benchmark)["min_query_count"]
                lines[f"{perf.loadgen_model}.*.performance_sample_count_override"] = f"{size:g}"
            out.append(perf.model_copy(update={"audit": test, "audit_config": tuple(audit.config_lines(
                bench.benchmark)), "user_conf": tuple(lines.items()), "with_accuracy": False}))
    return out


def gpu_hours(seconds: float, gpu_count: int) -> float:
    return round(seconds * gpu_count / 3600, 3)


def engine_time(probe_s: float, probes: int, full_s: float, full_runs: int, gpu_count: int,
                full_run_s: float | None = None) -> dict[str, Any]:
    """The engine time a tuning command used, as reported in its summary: probe and full-length seconds and counts,
    their GPU-hours on `gpu_count` GPUs, and, with `full_run_s` (one full-length run of the plan at the answer),
    the same runs at the plan's own length."""
    total = probe_s + full_s
    out = {"probe_seconds": round(probe_s, 1), "probes": probes, "full_runs": full_runs,
           "full_seconds": round(full_s, 1), "seconds": round(total, 1), "gpus": gpu_count,
           "gpu_hours": gpu_hours(total, gpu_count)}
    if full_run_s:
        out["in_full_runs"] = round(total / full_run_s, 2)
    return out


def describe(t: dict[str, Any]) -> str:
    """One line: `engine time: 42 s of probes (6), 2 full-length runs (33 s); 75 s = 2.3 full runs, 1.2 GPU-hours
    on 16 GPUs`."""
    line = (f"engine time: {t['probe_seconds']:g} s of probes ({t['probes']}), {t['full_runs']} full-length run(s) "
            f"({t['full_seconds']:g} s); {t['seconds']:g} s")
    if "in_full_runs" in t:
        line += f" = {t['in_full_runs']:g} full-length runs"
    return line + (f", {t['gpu_hours']:g} GPU-hours on {t['gpus']} GPUs" if t["gpus"] else " (no GPUs: a CPU engine)")


def real_round(plan: Plan) -> dict[str, Any]:
    """What the round of `plan` takes on its own hardware at its target rates (a dress rehearsal reports it): each run
    and audit of every benchmark by `predicted_runs`, loadgen's floors at the round's min duration, and its
    GPU-hours on the benchmark's GPUs (`benchmark_gpus`, else its system's nodes x
    accelerators_per_node)."""
    floor = load_rules(plan.round).min_duration_ms / 1000
    runs: dict[str, float] = {}
    gpu_seconds, most = 0.0, 0
    for b in plan.benchmarks:
        system = plan.system(b.system)
        count = benchmark_gpus(b) or system.nodes * int(system.description.get("accelerators_per_node") or 1)
        most = max(most, count)
        here = {f"{b.key}/{s.scenario}/{s.audit or s.mode}": length.seconds
                for s, length in predicted_runs(plan, b, floor)}
        runs |= here
        gpu_seconds += sum(here.values()) * count
    seconds = sum(runs.values())
    return {"runs": runs, "hours": seconds / 3600, "gpus": most, "gpu_hours": round(gpu_seconds / 3600, 3)}


@dataclass(frozen=True)
class RunNeed:
    """One planned run's predicted length and GPU-hours (what the dry run states per run)."""

    scenario: str
    label: str              # Offline/performance, Server/TEST07, ...
    length: run_length.RunLength
    gpu_hours: float

    def line(self) -> str:
        n = self.length
        samples = " + ".join(part for part in (n.samples and f"{n.samples}",
                                               n.accuracy_samples and f"{n.accuracy_samples} accuracy") if part)
        passes = f" ({n.passes} pass(es) over its data set)" if n.passes else ""
        return f"  predicted {self.label}: {samples} samples{passes}, {n.seconds:.0f} s, {self.gpu_hours:g} GPU-hours"


def run_needs(plan: Plan, bench: BenchmarkSpec) -> list[RunNeed]:
    """Each run and audit of `bench` (`predicted_runs`) with its GPU-hours on the benchmark's GPUs."""
    count = benchmark_gpus(bench)
    return [RunNeed(s.scenario, f"{s.scenario}/{s.audit or s.mode}" + (" with accuracy" if s.with_accuracy else ""),
                    length, gpu_hours(length.seconds, count)) for s, length in predicted_runs(plan, bench)]


def scenario_totals(needs: Sequence[RunNeed], gpu_count: int) -> dict[str, dict[str, float]]:
    """Each scenario's runs and audits together: their count, seconds and GPU-hours on `gpu_count` GPUs."""
    out = {}
    for scenario in dict.fromkeys(n.scenario for n in needs):
        seconds = [n.length.seconds for n in needs if n.scenario == scenario]
        out[scenario] = {"runs": len(seconds), "seconds": round(sum(seconds), 1),
                         "gpu_hours": gpu_hours(sum(seconds), gpu_count)}
    return out


def prediction_lines(plan: Plan, bench: BenchmarkSpec, needs: Sequence[RunNeed]) -> list[str]:
    """What the dry run states of a benchmark's runs: each run, each scenario's seconds and GPU-hours, the whole, and
    the arithmetic of an Offline run whose expected rate the plan does not give (client_length `OfflineRun.note`)."""
    count = benchmark_gpus(bench)
    lines = [n.line() for n in needs]
    lines += [f"  predicted {scenario}: {t['runs']:g} run(s), {t['seconds']:.0f} s, {t['gpu_hours']:g} GPU-hours"
              for scenario, t in scenario_totals(needs, count).items()]
    total = sum(n.length.seconds for n in needs)
    on = f"on {count} GPUs" if count else "(no GPUs: a CPU engine)"
    lines.append(f"  predicted in all: {len(needs)} run(s), {total:.0f} s ({total / 3600:.2f} h), "
                 f"{gpu_hours(total, count):g} GPU-hours {on}")
    index = f"benchmarks.{plan.benchmarks.index(bench)}."
    return lines + [f"  note: {note}" for run in offline_runs(plan)
                    if run.where.startswith(index) and (note := run.note())]
