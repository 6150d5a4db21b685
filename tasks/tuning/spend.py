"""What a search spent, counted from its runs' reports, against what its settings allow.

Each run the search made now (a recalled one costs nothing) is counted by its stage (the Offline run that starts the
bracket, the short probes, the full-length confirmations): runs, the samples its client's report says it issued
(`Probe.samples`: the endpoints client's `n_samples_issued`), the seconds its report says it lasted on the client's
clock (`Probe.measured_s`, else the wall seconds the search timed) and the samples the one model of a run's length
planned for it (`Probe.planned_samples`). The limit is the settings': one Offline run, `max_probes` probes,
`max_confirmations` full-length runs, and no run issuing more than its planned samples (the endpoints client issues
exactly its count; loadgen's count follows its schedule, so it has no planned count to hold it to).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tasks.tuning.bisection import Probe, SearchSettings

STAGES = ("offline", "probe", "confirm")


def limits(settings: SearchSettings) -> dict[str, int]:
    """The most runs of each stage one search makes."""
    return {"offline": 1, "probe": settings.max_probes, "confirm": settings.max_confirmations}


def spend(trace: Iterable[Probe], settings: SearchSettings) -> dict[str, Any]:
    """Per stage and in all: runs made now, samples issued and seconds measured (from the reports), samples planned;
    the limits, and the problems (a stage over its runs, a run over its planned samples, a run with no report of
    its samples), `within` when there are none."""
    made = [p for p in trace if not p.cached]
    stages: dict[str, dict[str, Any]] = {}
    for stage in (*STAGES, "total"):
        runs = [p for p in made if stage in ("total", p.stage)]
        stages[stage] = {"runs": len(runs), "samples": sum(p.samples or 0 for p in runs),
                         "seconds": round(sum(p.measured_s if p.measured_s is not None else p.duration_s
                                              for p in runs), 3),
                         "planned_samples": sum(p.planned_samples or 0 for p in runs)}
    most = limits(settings)
    problems = [f"{stages[s]['runs']} {s} run(s), over the {most[s]} the settings allow" for s in STAGES
                if stages[s]["runs"] > most[s]]
    problems += [f"{p.stage} at {p.qps:g} q/s issued {p.samples} samples, over the {p.planned_samples} planned"
                 for p in made if p.samples is not None and p.planned_samples is not None
                 and p.samples > p.planned_samples]
    problems += [f"{p.stage} at {p.qps:g} q/s: its report says no sample count" for p in made
                 if p.samples is None and p.planned_samples is not None]
    return stages | {"limit": most, "problems": problems, "within": not problems}


def describe(spent: dict[str, Any]) -> str:
    """One line: `spent (from the client's reports): offline 1/1 run (2000 samples, 14.1 s), probes 5/8 (3310
    samples, 33.2 s), confirmations 1/4 (662 samples, 6.6 s); 5972 samples, 53.9 s in all`, and the problems."""
    names = {"offline": "offline", "probe": "probes", "confirm": "confirmations"}
    parts = [f"{names[s]} {spent[s]['runs']}/{spent['limit'][s]} ({spent[s]['samples']} samples, "
             f"{spent[s]['seconds']:g} s)" for s in STAGES if spent[s]["runs"]]
    total = spent["total"]
    line = (f"spent (from the client's reports): {', '.join(parts) or 'nothing (every run recalled)'}; "
            f"{total['samples']} samples, {total['seconds']:g} s in all")
    return line + (f"; OVER BUDGET: {'; '.join(spent['problems'])}" if spent["problems"] else "")
