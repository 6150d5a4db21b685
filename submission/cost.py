"""What a run costs: its length at a rate, and the GPU-hours of that length on the plan's hardware. One model for
every report that says what measuring cost or will cost (the peak-QPS search, the prefill:decode sweep, the scaling
check, a dress rehearsal of the real round), so their numbers agree.

A Server-type run lasts the longest of its floor (min_duration: the round's 600 s in a submission) and its query
count at its rate (min_query_count / target_qps): loadgen issues until both are met. An Offline run's expected rate
is its target_qps the same way. GPU-hours are seconds x the deployment's GPUs / 3600; the GPUs come from the engine
options' topology (`gpus`).
"""

from __future__ import annotations

from typing import Any

from submission.runs import RunSpec

ROUND_MIN_DURATION_S = 600.0   # mlperf.conf *.*.min_duration = 600000 (ms): a run's floor where user.conf sets none


def run_seconds(min_duration_s: float, min_query_count: int, qps: float | None) -> float:
    """How long a run of that floor and query count lasts at `qps` (its floor when the rate is unknown)."""
    return max(min_duration_s, min_query_count / qps) if qps else min_duration_s


def conf_value(spec: RunSpec, name: str) -> str | None:
    """A user.conf setting of the spec by its last part (`min_duration`, `target_qps`, ...), any model/scenario."""
    found = {key.rsplit(".", 1)[-1]: value for key, value in spec.user_conf}
    return found.get(name)


def spec_seconds(spec: RunSpec, qps: float | None = None, floor_s: float = ROUND_MIN_DURATION_S) -> float:
    """How long `spec` measures at `qps` (default: its own target_qps), from its user.conf length."""
    duration = conf_value(spec, "min_duration")
    queries = conf_value(spec, "min_query_count")
    rate = qps if qps is not None else (float(conf_value(spec, "target_qps") or 0) or None)
    return run_seconds(int(duration) / 1000 if duration is not None else floor_s, int(queries or 0), rate)


def gpus(options: Any) -> int:
    """The GPUs a deployment holds: nodes x gpus_per_node where the options have that topology, else the GPUs of
    its weight-holding workers (`EngineOptions.workers`), else 0 (a CPU engine)."""
    nodes, per_node = getattr(options, "nodes", None), getattr(options, "gpus_per_node", None)
    if isinstance(nodes, int) and isinstance(per_node, int):
        return nodes * per_node
    workers = options.workers() if hasattr(options, "workers") else ()
    return sum(w.count * w.tp * w.pp for w in workers if w.on_gpu)


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
