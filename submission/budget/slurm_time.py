"""How long a benchmark keeps its Slurm allocation, and how long the job Podium runs in must last, from what the
plan runs: so that `engine.slurm.time_limit` and `sbatch --time` are derived, not guessed (docs/slurm.md, "Time
limits").

The engine's allocation holds the engine while it starts and while every run of the benchmark measures:

    allocation = runs x run length x RUN_FACTOR + launches x (engine.ready_timeout_s + engine.warmup_timeout_s) + STOP_S

where launches is one per variant of the engine's options (one, unless some scenarios run with options of their own:
sglang's speculative decoding), the runs are every run and audit the benchmark makes (submission/budget/cost.py
`run_needs`) and a run's length is the one model of submission/budget/run_length.py: for loadgen its Offline query (1.1
x min duration x target_qps samples, padded to whole passes over the performance set where the model issues equally) or
its Server queries on their schedule, an accuracy run's set once at its scenario's rate, an audit at the rate it runs;
for the endpoints client the samples it issues (1.1 x target_qps x min duration rounded up to whole passes over its data
set: 48289 Qwen3-VL samples at 40 q/s are 1207 s) and, in a `--mode both` run, the accuracy set after them. The job
Podium itself runs in (`sbatch deployments/slurm/podium.sbatch`, `allocation: inherit`) also stages the model and data
sets before the engine starts and assembles, checks and publishes after the last engine stops:

    job = sum over its benchmarks of (STAGING_S + allocation) + FLOW_TAIL_S

A relaunch after an engine failure is not counted: the factor is the margin for one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from submission.budget import cost
from submission.plan.model import BenchmarkSpec, Plan

# A run lasts longer than its predicted length: the engine drains in-flight requests after the last issue, and the
# client scores and writes its logs. 1.5 also leaves room for one engine relaunch in a benchmark of 6 runs.
RUN_FACTOR = 1.5
STAGING_S = 1800    # the model (135 GB for the NVFP4 Qwen3-VL) and data sets copied and sha256-checked from shared
                    # storage at a few hundred MB/s; a re-run finds them staged and takes seconds
FLOW_TAIL_S = 900   # after the last engine stops: truncating accuracy logs, assembling, checking, uploading the run
STOP_S = 60         # the engine's SIGTERM grace and Slurm's step clean-up at the end


def seconds(value: str) -> int | None:
    """A Slurm time (`--time` forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S) in seconds; None for UNLIMITED."""
    if value in ("UNLIMITED", "INFINITE"):
        return None
    days, _, rest = value.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:   # D-H, D-H:M, D-H:M:S
        h, m, s = [*parts, 0, 0][:3]
        return ((int(days) * 24 + h) * 60 + m) * 60 + s
    if len(parts) == 1:
        return parts[0] * 60
    if len(parts) == 2:
        return parts[0] * 60 + parts[1]
    return (parts[0] * 60 + parts[1]) * 60 + parts[2]


def slurm_time(secs: float) -> str:
    """Seconds as a Slurm time, rounded up to whole minutes: HH:MM:00, or D-HH:MM:00 from a day on."""
    minutes = math.ceil(secs / 60)
    days, minutes = divmod(minutes, 24 * 60)
    hhmm = f"{minutes // 60:02d}:{minutes % 60:02d}:00"
    return f"{days}-{hhmm}" if days else hhmm


@dataclass(frozen=True)
class TimeNeed:
    """What one benchmark needs of Slurm's clock, each part in seconds."""

    key: str
    runs: int
    measuring_s: float     # sum of the runs' lengths x RUN_FACTOR
    start_s: float         # (ready_timeout_s + warmup_timeout_s) x the engine's launches (`starts`)
    allocation_s: float    # what engine.slurm.time_limit must cover
    job_s: float           # this benchmark's share of the job Podium runs in (staging included)
    per_run: tuple[cost.RunNeed, ...] = ()
    starts: int = 1        # engine launches: one per variant of its options (BenchmarkSpec.engine_variants)

    def lines(self) -> list[str]:
        """Each run's prediction, then `limit_line`."""
        return [*(r.line() for r in self.per_run), self.limit_line()]

    def limit_line(self) -> str:
        return (f"  Slurm time: {self.runs} run(s) x their length x {RUN_FACTOR} = {slurm_time(self.measuring_s)}, "
                f"+ engine start (ready_timeout_s + warmup_timeout_s)"
                f"{f' x {self.starts} launches' if self.starts > 1 else ''} {slurm_time(self.start_s)} "
                f"+ stop {STOP_S} s: "
                f"the engine's allocation needs time_limit >= {slurm_time(self.allocation_s)}; with staging "
                f"({slurm_time(STAGING_S)}) this benchmark takes {slurm_time(self.job_s)} of the job Podium runs in")


def need(plan: Plan, bench: BenchmarkSpec) -> TimeNeed:
    """The time one benchmark's engine allocation and its share of the flow's job need (module docstring)."""
    per_run = cost.run_needs(plan, bench)   # every run and audit, each its own length
    lengths = [r.length.seconds for r in per_run]
    measuring = sum(lengths) * RUN_FACTOR
    starts = len(bench.engine_variants())
    start = (bench.engine.ready_timeout_s + bench.engine.warmup_timeout_s) * starts
    allocation = measuring + start + STOP_S
    return TimeNeed(bench.key, len(lengths), measuring, start, allocation, STAGING_S + allocation, tuple(per_run),
                    starts)


def job_need(plan: Plan) -> float:
    """What the job Podium runs in must last for the whole plan: every benchmark that runs here, then the tail."""
    return sum(need(plan, b).job_s for b in plan.local().benchmarks) + FLOW_TAIL_S


def time_problems(plan: Plan) -> list[str]:
    """Each benchmark whose own allocation (`engine.slurm.allocation: new`) is shorter than what it runs, naming
    the field and the computed need. `auto` and `inherit` are checked by preflight, which knows whether Podium runs
    inside a job (tasks/ops/slurm_checks.py)."""
    problems = []
    for i, b in enumerate(plan.benchmarks):
        settings = b.engine.slurm_settings()
        if b.engine.launcher != "slurm" or settings is None or settings.allocation != "new":
            continue
        problem = allocation_problem(f"benchmarks.{i}.engine.slurm.time_limit", settings.time_limit, need(plan, b))
        if problem:
            problems.append(problem)
    return problems


def allocation_problem(field: str, time_limit: str, needed: TimeNeed) -> str | None:
    """`field` (a Slurm time) against what the benchmark needs; None when it covers it."""
    have = seconds(time_limit)
    if have is None or have >= needed.allocation_s:
        return None
    return (f"{field}: {time_limit} is shorter than what {needed.key} runs, {slurm_time(needed.allocation_s)} "
            f"({needed.runs} run(s) x their length x {RUN_FACTOR} + engine start {slurm_time(needed.start_s)}); "
            f"set time_limit: \"{slurm_time(needed.allocation_s)}\" or more")
