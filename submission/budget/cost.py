"""What a run costs: its length at a rate, and the GPU-hours of that length on the plan's hardware. One model for
every report that says what measuring cost or will cost (the peak-QPS search, the prefill:decode sweep, the scaling
check, a dress rehearsal of the real round), so their numbers agree.

A Server-type run lasts the longest of its floor (min_duration: the round's 600 s in a submission) and its query
count at its rate (min_query_count / target_qps): loadgen issues until both are met. An Offline run's expected rate
is its target_qps the same way. GPU-hours are seconds x the deployment's GPUs / 3600; the GPUs come from the engine
options' topology (`gpus`). `real_round`: what a whole plan's round takes on its own hardware, at its target rates.
"""

from __future__ import annotations

from typing import Any

from submission.budget import run_length
from submission.plan.model import BenchmarkSpec, Plan
from submission.results.runs import RunSpec, plan_runs
from submission.rules import load_rules

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
    """The GPUs a benchmark's engine holds (`gpus` of its engine options; 0: a CPU engine): what the dry run's
    predicted GPU-hours and the run summary's measured ones both count."""
    return gpus(bench.engine.config())


def floor_seconds(plan: Plan) -> float:
    """A loadgen run's floor where its user.conf sets none: the round's min duration in a submission, none else."""
    return load_rules(plan.round).min_duration_ms / 1000 if plan.profile == "submission" else 0.0


def predicted_runs(plan: Plan, bench: BenchmarkSpec) -> list[tuple[RunSpec, run_length.RunLength]]:
    """Each run the plan makes of `bench` and its predicted length (submission.budget.run_length, an Offline run at
    its scenario's expected_qps): what `podium launch --dry-run` states and the run summary sets beside the
    measured time."""
    rules = load_rules(plan.round)
    sources = {path for _, kind, path in bench.sources() if kind == "datasets"}
    specs = plan_runs(plan, bench, rules, model_sha256="-", engine=bench.engine.name,
                      dataset_sha256=dict.fromkeys(sources, "-"))
    return [(s, run_length.run_length(s, rules, rate=bench.scenarios[s.scenario].expected_qps,
                                      floor_s=floor_seconds(plan))) for s in specs]


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
    """What the round of `plan` takes on its own hardware at its target rates (a dress rehearsal reports it): each
    performance run its `run_seconds` (the round's min duration, its performance samples at the target rate; an
    endpoints benchmark's one run per scenario by submission.budget.run_length, whole passes and its accuracy phase); an
    accuracy run the accuracy set at the Offline rate (longer answers not modelled: a lower bound); each audit its
    audit.config min_query_count at the scenario's rate (Server audits at compliance.server_qps_factor). GPU-hours on
    the benchmark's GPUs (`gpus` of its engine options, else its system's nodes x accelerators_per_node)."""
    rules = load_rules(plan.round)
    minimum = rules.min_duration_ms / 1000
    runs: dict[str, float] = {}
    gpu_seconds, most = 0.0, 0
    for b in plan.benchmarks:
        system = plan.system(b.system)
        count = gpus(b.engine.config()) or system.nodes * int(system.description.get("accelerators_per_node") or 1)
        most = max(most, count)
        bench = rules.benchmark(b.benchmark)
        offline = (b.scenarios.get("Offline") or next(iter(b.scenarios.values()))).target_qps or 1.0
        if plan.harness(b) == "endpoints":   # one client run per scenario, whole passes (run_length)
            here = _client_runs(plan, b)
            runs |= here
            gpu_seconds += sum(here.values()) * count
            continue
        for name, sc in b.scenarios.items():
            qps = sc.target_qps or offline
            samples = bench.performance_sample_count
            here = {f"{b.key}/{name}/performance": run_seconds(minimum, samples, qps),
                    f"{b.key}/{name}/accuracy": run_seconds(0.0, bench.scenario(name).accuracy_sample_count, offline)}
            audit_qps = qps if name == "Offline" else qps * plan.compliance.server_qps_factor
            for test in bench.compliance_tests if plan.audits_enabled else ():
                queries = rules.audit(test).values(b.benchmark).get("min_query_count", samples)
                here[f"{b.key}/{name}/{test}"] = run_seconds(0.0, queries, audit_qps)
            runs |= here
            gpu_seconds += sum(here.values()) * count
    seconds = sum(runs.values())
    return {"runs": runs, "hours": seconds / 3600, "gpus": most, "gpu_hours": round(gpu_seconds / 3600, 3)}


def _client_runs(plan: Plan, b: Any) -> dict[str, float]:
    """The endpoints client's runs of benchmark `b` and their seconds (each scenario's one run: its performance
    phase, and its accuracy phase where the plan measures accuracy), Offline at its expected_qps."""
    rules = load_rules(plan.round)
    sources = {path for _, kind, path in b.sources() if kind == "datasets"}
    specs = plan_runs(plan, b, rules, model_sha256="-", engine="-", dataset_sha256=dict.fromkeys(sources, "-"))
    return {f"{b.key}/{s.scenario}/{s.mode}": run_length.run_length(
        s, rules, rate=b.scenarios[s.scenario].expected_qps).seconds for s in specs}
