"""What each measuring client issues, by its own arithmetic: the samples of a run, and the smallest Offline
target_qps whose run lasts its min duration on an engine of a known rate. The plan refuses a shorter one at load
(`Plan`'s `_runs_last_their_min_duration`, through `offline_runs`); submission/budget/run_length.py turns counts into
a run's length.

The endpoints client (mlcommons/endpoints at the round's pin, src/inference_endpoint/config/runtime_settings.py)
issues max(1, ceil(target_qps x min_duration x 1.1)) samples rounded up to whole passes over its data set.

Loadgen (mlcommons-loadgen 6.0.17, the round's: loadgen/test_settings_internal.cc and loadgen.cc `GenerateQueries`):
- an Offline performance run is one query of max(min_query_count, int(1.1 x min_duration x target_qps)) samples
  (`kSlack`), or the whole performance sample set with `performance_issue_unique` (TEST07, TEST09);
- a Server run generates queries on its schedule until the last one is at or after min_duration and there are
  min_query_count of them (`performance_issue_unique`: the set once, with no duration), and issues them all;
- with `sample_concatenate_permutation` (equal issue: mlperf.conf sets it for every LLM, the audits turn it off) both
  are padded up to whole passes over the performance sample set: at 40 q/s gpt-oss-120b's Offline run issues not
  26400 samples but 31980, five passes over its 6396;
- an accuracy run issues its accuracy set once, at its scenario's rate.
A Server count here is the schedule's expectation (query i at i / target_qps): loadgen's draws move the time the
600 s mark is passed by about sqrt(queries) / target_qps.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from submission.rules import load_rules

PADDING = 1.1                 # runtime_settings.py total_samples_to_issue(padding_factor=1.1)
OFFLINE_DEFAULT_QPS = 10.0    # runtime_settings.py _from_config_default: an Offline config with no target_qps
LOADGEN_SLACK = 1.1           # test_settings_internal.cc kSlack: the Offline query's samples over min_duration
LOADGEN_DEFAULT_QPS = 1.0     # mlperf.conf *.Offline.target_qps = 1.0, *.Server.target_qps = 1.0


def client_samples(target_qps: float | None, min_duration_ms: int, rows: int, offline: bool = True) -> int:
    """What the endpoints client issues in a performance phase without an explicit count (module doc)."""
    qps = target_qps if target_qps is not None else (OFFLINE_DEFAULT_QPS if offline else 0.0)
    if min_duration_ms == 0:
        return max(1, rows)
    samples = max(1, math.ceil(qps * (min_duration_ms / 1000) * PADDING))
    return whole_passes(samples, rows)


def whole_passes(count: int, rows: int) -> int:
    """`count` rounded up to whole passes over a set of `rows` (unchanged without rows)."""
    return count if rows <= 0 or count % rows == 0 else count + rows - count % rows


@dataclass(frozen=True)
class Loadgen:
    """The settings of one loadgen run that decide its length (user.conf over mlperf.conf, audit.config over both)."""

    min_duration_ms: int
    min_query_count: int
    set_size: int                  # the performance sample count: the QSL's loaded set
    equal_issue: bool = False      # sample_concatenate_permutation
    issue_unique: bool = False     # performance_issue_unique

    def offline_samples(self, target_qps: float) -> int:
        """The samples of an Offline performance run's one query (module doc)."""
        if self.issue_unique:
            return self.set_size
        samples = max(self.min_query_count, int(LOADGEN_SLACK * (self.min_duration_ms / 1000) * target_qps))
        return whole_passes(samples, self.set_size) if self.equal_issue else samples

    def server_queries(self, target_qps: float) -> int:
        """The queries of a Server performance run, the schedule at its expectation (module doc)."""
        if self.issue_unique:
            return self.set_size
        # up to the first query scheduled at or after min_duration (query i at i / target_qps)
        past = math.ceil(self.min_duration_ms / 1000 * target_qps) + 1 if self.min_duration_ms else 1
        queries = max(self.min_query_count, past)
        return whole_passes(queries, self.set_size) if self.equal_issue else queries

    def offline_counted(self, target_qps: float) -> str:
        """How `offline_samples` comes about, in words (the plan's refusal and note state it)."""
        if self.issue_unique:
            return f"the {self.set_size}-sample set once"
        slack = int(LOADGEN_SLACK * (self.min_duration_ms / 1000) * target_qps)
        count = f"1.1 x {self.min_duration_ms / 1000:g} s x {target_qps:g} q/s = {slack}"
        if self.min_query_count > slack:
            count = f"min_query_count {self.min_query_count}, above {count}"
        samples = self.offline_samples(target_qps)
        if samples != max(slack, self.min_query_count):
            count += f", padded to {samples // self.set_size} whole passes over the {self.set_size}-sample set"
        return count


def smallest_target(samples_at: Callable[[int], int], rate: float, min_duration_ms: int) -> int | None:
    """The smallest whole Offline target_qps whose run lasts `min_duration_ms` on an engine doing `rate` samples/s:
    the first that issues at least rate x min_duration samples (`samples_at`: the client's count at a target, never
    falling as it rises); None when no target does (a count that does not follow the target)."""
    needed = math.ceil(rate * min_duration_ms / 1000)
    high = math.ceil(needed / (PADDING * min_duration_ms / 1000)) + 1 if min_duration_ms else 1   # 1.1: both slacks
    if samples_at(high) < needed:
        return None
    low = 1
    while low < high:
        mid = (low + high) // 2
        low, high = (mid + 1, high) if samples_at(mid) < needed else (low, mid)
    return low


def smallest_offline_target(rate: float, min_duration_ms: int, rows: int) -> int:
    """The endpoints client's smallest Offline target_qps whose run lasts its min duration at `rate`."""
    return smallest_target(lambda t: client_samples(t, min_duration_ms, rows), rate, min_duration_ms) or 1


@dataclass(frozen=True)
class OfflineRun:
    """A submission plan's Offline performance run as its client counts it, and what the plan's rates make of it."""

    where: str                  # benchmarks.<i>.scenarios.<name>
    client: str                 # loadgen | the endpoints client
    target_qps: float
    samples: int
    counted: str                # how the count comes about
    min_duration_ms: int
    expected_qps: float | None
    smallest: int | None        # the smallest target that lasts at expected_qps (None: none does, or no rate)

    @property
    def seconds_at_expected(self) -> float | None:
        return None if self.expected_qps is None else self.samples / self.expected_qps

    def problem(self) -> str | None:
        """Why the run would be INVALID by itself at the expected rate (it ends under its min duration), or None."""
        seconds = self.seconds_at_expected
        if seconds is None or seconds * 1000 >= self.min_duration_ms:
            return None
        fix = (f"set target_qps: {self.smallest} or more (the smallest whose run lasts it)" if self.smallest else
               "no target_qps makes it last: lower min_duration_ms or min_query_count")
        return (f"{self.where}.target_qps: at {self.target_qps:g} {self.client} sends {self.samples} samples "
                f"({self.counted}), {seconds:.0f} s at the expected {self.expected_qps:g} q/s, under the "
                f"{self.min_duration_ms / 1000:g} s min duration; {fix}")

    def note(self) -> str | None:
        """Without an expected rate, the arithmetic and the fastest engine the run still lasts on."""
        if self.expected_qps is not None or not self.min_duration_ms:
            return None
        fastest = self.samples / (self.min_duration_ms / 1000)
        return (f"{self.where}: at target_qps {self.target_qps:g} {self.client} sends {self.samples} samples "
                f"({self.counted}): the run lasts its {self.min_duration_ms / 1000:g} s min duration only on an "
                f"engine doing at most {fastest:.1f} q/s, else it ends too soon; set {self.where}.expected_qps (a "
                f"measurement) to have the plan refuse a target too low")


def offline_runs(plan: Any) -> list[OfflineRun]:
    """Each Offline performance run of a submission plan (a `Plan`), counted by its client: the round's data set
    and performance sample count, and the user.conf values Podium writes (submission/results/runs.py `user_conf`).
    A smoke plan's own data sets and counts are not the rules', so it has none."""
    if plan.profile != "submission":
        return []
    rules = load_rules(plan.round)
    out = []
    for i, b in enumerate(plan.benchmarks):
        bench = rules.benchmark(b.benchmark)
        for name, sc in b.scenarios.items():
            if bench.scenario(name).loadgen_scenario != "Offline":
                continue
            minimum = next(m for m in (sc.min_duration_ms, b.loadgen.min_duration_ms, rules.min_duration_ms)
                           if m is not None)
            where = f"benchmarks.{i}.scenarios.{name}"
            if plan.harness(b) == "endpoints":
                rows = (bench.scenarios[name].dataset or bench.dataset).size
                target = sc.target_qps or OFFLINE_DEFAULT_QPS
                samples = client_samples(sc.target_qps, minimum, rows)
                counted = f"{samples // rows} pass(es) over the {rows}-row data set"
                smallest = smallest_target(lambda t, r=rows, m=minimum: client_samples(t, m, r),
                                           sc.expected_qps, minimum) if sc.expected_qps else None
                out.append(OfflineRun(where, "the endpoints client", target, samples, counted, minimum,
                                      sc.expected_qps, smallest))
                continue
            queries = next(q for q in (sc.min_query_count, b.loadgen.min_query_count,
                                       bench.offline_min_samples_per_query) if q is not None)
            lg = Loadgen(minimum, queries, b.loadgen.performance_sample_count or bench.performance_sample_count,
                         bench.sample_concatenate_permutation)
            target = sc.target_qps or LOADGEN_DEFAULT_QPS
            smallest = smallest_target(lg.offline_samples, sc.expected_qps, minimum) if sc.expected_qps else None
            out.append(OfflineRun(where, "loadgen", target, lg.offline_samples(target), lg.offline_counted(target),
                                  minimum, sc.expected_qps, smallest))
    return out
