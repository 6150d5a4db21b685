"""How long one client run is, in samples and in seconds: the one model of a run's length, for both measuring clients,
that the cost model (cost.py), the Slurm time limit (slurm_time.py), the endpoints search's probes
(tasks/endpoints/probe.py) and loadgen's (tasks/harness/probe.py), the rehearsal's real-round cost and every dry run
use; each client's own arithmetic is in submission/plan/client_length.py, where the plan's refusal of a target too low
reads it.

The endpoints client (mlcommons/endpoints at the round's pin, src/inference_endpoint/config/runtime_settings.py):
- a performance phase issues `n_samples_to_issue` where its config sets it (Podium sets it from a run's
  min_query_count line: the search's probes), else max(1, ceil(target_qps x min_duration_s x 1.1)) rounded up to
  whole passes over its data set (`total_samples_to_issue`, padding_factor 1.1, align_to_dataset_size), a
  min_duration of 0 issuing the data set once; an Offline config with no target_qps counts as 10 q/s
  (`_from_config_default`, a stopgap by its own comment);
- a `--mode both` run then issues the accuracy set once, at the same load pattern;
- the seconds of a phase are what the client's report states as its duration: `duration_ns` of
  report/performance/result_summary.json, the tracked block's `duration_ns` (async_utils/services/metrics_aggregator/
  metrics_table.py `TrackedBlock`: from START_PERFORMANCE_TRACKING, published just before the phase's first issue,
  load_generator/session.py `_run_phase`, to the last completion of a sample the phase issued), so the issue span
  plus the drain of the answers still out;
- an online (poisson) phase's issue span is its schedule, which the client draws from `random.Random(
  scheduler_random_seed)`: sample i leaves max(1, int(expovariate(target_qps / 1e9))) ns after sample i - 1, the
  first that long after the start (load_generator/delay.py `poisson_delay_fn`, strategy.py `TimedIssueStrategy`,
  which schedules each issue at start + the sum of the delays so far); the accuracy phase of a `--mode both` run
  continues the same generator (commands/benchmark/execute.py `_build_phases`). Podium sums the same draws: the
  span is exact, where samples / target_qps is off by about 1 / sqrt(samples) (10 % for 100 samples);
- its drain allowance is the p99 latency bound the run is judged by (the scenario's `latency_ms` in the rules, a smoke
  plan's relaxed `latency_ms` in its place): the answers still out when the last sample leaves come back within
  about the bound in a run at its target (the search's answer: the highest rate whose p99 stays under the bound).
  A run well under its bound ends up to that much sooner: the prediction errs long, as the Slurm limit wants;
- an Offline (max_throughput) phase issues every sample at once and lasts its samples / the engine's rate: the rate
  given (an expected rate, the search's answer), else the target_qps. The client's Offline `qps` is its completed
  samples / `duration_ns`, so the rate already counts the drain.

Loadgen (its arithmetic in submission/plan/client_length.py `Loadgen`), from the settings in effect: the run's user.conf
lines, its audit.config's over them, else the round's (mlperf.conf through the rules, loadgen's own default
min_query_count):
- an Offline performance run is one query of max(min_query_count, int(1.1 x min_duration x target_qps)) samples,
  padded to whole passes over the performance sample set where the model issues equally (mlperf.conf
  `sample_concatenate_permutation`); it lasts its samples / the engine's rate (expected_qps, else the target);
- a Server run issues its queries on its schedule at target_qps: max(min_query_count, the queries up to min_duration),
  padded the same way, so it lasts queries / target_qps (gpt-oss-120b at 9 q/s: 6396 queries, 711 s, not 600);
- an accuracy run issues its accuracy set once at its scenario's rate (Offline: the engine's; Server: the target);
- an audit (TEST06, TEST07, TEST09) runs with its audit.config over the scenario's user.conf at the rate it runs
  (a Server audit's target derated by compliance.server_qps_factor): `performance_issue_unique` issues the
  performance sample set once, `min_duration 0` drops the floor, `sample_concatenate_permutation 0` the padding.
The answers still out after the last issue are not counted (the Slurm limit's RUN_FACTOR holds them).
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

from submission.plan.client_length import LOADGEN_DEFAULT_QPS, OFFLINE_DEFAULT_QPS, Loadgen, client_samples
from submission.results.runs import RunSpec
from submission.rules import Rules


@dataclass(frozen=True)
class RunLength:
    """One run's length: the performance phase's samples, the accuracy phase's (0: none) and the seconds of both."""

    samples: int
    accuracy_samples: int
    seconds: float
    passes: int | None = None     # the performance phase's whole passes over its data set (None: not whole passes:
                                  # an explicit sample count, a loadgen run without equal issue)
    issue_s: float | None = None  # an online endpoints phase's issue span, before the drain (None: `seconds` is it)

    @property
    def issue_seconds(self) -> float:
        """How long the performance phase keeps issuing: what a queue over capacity grows for (the search's overload
        judgement), without the drain and the accuracy phase that `seconds` counts."""
        return self.seconds if self.issue_s is None else self.issue_s


def conf(spec: RunSpec, name: str) -> str | None:
    """A user.conf value of the spec by its last part (`min_duration`, `target_qps`, ...), any model/scenario."""
    return next((v for k, v in spec.user_conf if k.rsplit(".", 1)[-1] == name), None)


def at_rate(spec: RunSpec, qps: float) -> RunSpec:
    """`spec` with `qps` as its target_qps line (added where it has none)."""
    key = f"{spec.loadgen_model}.{spec.loadgen_scenario}.target_qps"
    lines = [(k, v) for k, v in spec.user_conf if k.rsplit(".", 1)[-1] != "target_qps"]
    return spec.model_copy(update={"user_conf": (*lines, (key, f"{qps:.10g}"))})


@functools.lru_cache(maxsize=64)
def schedule_s(seed: int, qps: float, samples: int, then: int = 0) -> tuple[float, float]:
    """The seconds the endpoints client's poisson schedule at `qps` takes to issue `samples`, and `then` more after
    them (a `--mode both` run's accuracy phase): the sums of the delays it draws from `random.Random(seed)` (module
    doc)."""
    rng, rate = random.Random(seed), qps / 1e9
    first = sum(max(1, int(rng.expovariate(rate))) for _ in range(samples))
    return first / 1e9, sum(max(1, int(rng.expovariate(rate))) for _ in range(then)) / 1e9


def drain_s(spec: RunSpec, rules: Rules) -> float:
    """An online phase's drain allowance: the p99 latency bound its run is judged by (module doc); 0 for a scenario
    with none (Offline, whose rate counts its drain)."""
    bound = rules.benchmark(spec.benchmark).scenario(spec.scenario).latency_ms
    smoke = conf(spec, "target_latency") if spec.profile == "smoke" else None   # Plan._smoke_latency
    return 0.0 if bound is None else float(smoke if smoke is not None else bound) / 1000


def endpoints_length(spec: RunSpec, rows: int, accuracy_rows: int, min_duration_ms: int, rate: float | None = None,
                     *, seed: int, drain: float) -> RunLength:
    """The length of an endpoints client run of `spec` on a data set of `rows`: an online run's schedule from the
    scheduler `seed`, each phase then `drain` seconds (module doc)."""
    offline = spec.loadgen_scenario == "Offline"
    target = conf(spec, "target_qps")
    qps = float(target) if target is not None else (OFFLINE_DEFAULT_QPS if offline else None)
    explicit = conf(spec, "min_query_count")
    samples = int(explicit) if explicit is not None else client_samples(qps, min_duration_ms, rows, offline)
    with_accuracy = spec.with_accuracy or spec.mode == "accuracy"
    accuracy = accuracy_rows if with_accuracy else 0
    passes = None if explicit is not None or rows <= 0 else samples // rows
    if offline:
        pace = rate or qps
        return RunLength(samples, accuracy, (samples + accuracy) / pace if pace else 0.0, passes)
    if not qps:
        return RunLength(samples, accuracy, 0.0, passes)
    performance, then = schedule_s(seed, qps, samples, accuracy)
    return RunLength(samples, accuracy, performance + drain + (then + drain if accuracy else 0.0), passes,
                     issue_s=performance)


def audit_values(spec: RunSpec) -> dict[str, str]:
    """The values of the run's audit.config that apply to it (`*.*.key` and `*.<scenario>.key`), by key."""
    values = {}
    for line in spec.audit_config:
        key, eq, value = line.split("#", 1)[0].partition("=")
        parts = key.strip().split(".")
        if eq and len(parts) == 3 and parts[0] == "*" and parts[1] in ("*", spec.loadgen_scenario):
            values[parts[2]] = value.strip()
    return values


def loadgen_settings(spec: RunSpec, rules: Rules, floor_s: float) -> Loadgen:
    """What decides the length of a loadgen run of `spec` (module doc); `floor_s`: its min duration where no line sets
    one."""
    bench = rules.benchmark(spec.benchmark)
    values = {k.rsplit(".", 1)[-1]: v for k, v in spec.user_conf} | audit_values(spec)
    duration = values.get("min_duration")
    queries = values.get("min_query_count")
    if queries is None and spec.loadgen_scenario == "Offline":
        queries = bench.offline_min_query_count   # mlperf.conf's, where it sets one
    equal = values.get("sample_concatenate_permutation")
    return Loadgen(min_duration_ms=int(duration) if duration is not None else round(floor_s * 1000),
                   min_query_count=int(queries) if queries is not None else rules.loadgen_min_query_count,
                   set_size=int(values.get("performance_sample_count_override") or bench.performance_sample_count),
                   equal_issue=bench.sample_concatenate_permutation if equal is None else equal == "1",
                   issue_unique=values.get("performance_issue_unique") == "1")


def loadgen_length(spec: RunSpec, rules: Rules, floor_s: float, rate: float | None = None) -> RunLength:
    """The length of a loadgen run of `spec`: its samples (Offline) or queries (Server) at its rate (module doc)."""
    target = conf(spec, "target_qps")
    qps = float(target) if target is not None else LOADGEN_DEFAULT_QPS
    offline = spec.loadgen_scenario == "Offline"
    pace = (rate or qps) if offline else qps
    if spec.mode == "accuracy":   # the whole accuracy set, or the smoke profile's override of its size
        scenario = rules.benchmark(spec.benchmark).scenario(spec.scenario)
        samples = int(conf(spec, "accuracy_sample_count_override") or scenario.accuracy_sample_count)
        return RunLength(0, samples, samples / pace)
    settings = loadgen_settings(spec, rules, floor_s)
    samples = settings.offline_samples(qps) if offline else settings.server_queries(qps)
    padded = settings.equal_issue and not settings.issue_unique and settings.set_size > 0
    return RunLength(samples, 0, samples / pace, samples // settings.set_size if padded else None)


def run_length(spec: RunSpec, rules: Rules, rate: float | None = None, floor_s: float | None = None,
               rows: int | None = None) -> RunLength:
    """The length of one run of `spec` by the client that measures it. `rate`: the engine's expected rate (an
    Offline run's pace); `floor_s`: a loadgen run's floor where its user.conf sets none (default: the round's
    min_duration); `rows`: the data set's row count where it is not the rules' (a smoke set)."""
    bench = rules.benchmark(spec.benchmark)
    scenario = bench.scenario(spec.scenario)
    floor = rules.min_duration_ms / 1000 if floor_s is None else floor_s
    if spec.harness == "endpoints" and spec.audit is None:   # an audit is a loadgen run (tasks/compliance)
        size = rows if rows is not None else (bench.scenarios[spec.scenario].dataset or bench.dataset).size
        duration = conf(spec, "min_duration")
        minimum = int(duration) if duration is not None else rules.min_duration_ms
        return endpoints_length(spec, size, size if rows is not None else scenario.accuracy_sample_count, minimum,
                                rate, seed=rules.seeds.schedule_rng_seed, drain=drain_s(spec, rules))
    return loadgen_length(spec, rules, floor, rate)
