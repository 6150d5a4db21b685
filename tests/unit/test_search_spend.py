"""What a search spent, counted from its runs' reports (tasks.tuning.spend), and the report reader behind it."""

from __future__ import annotations

import json
from pathlib import Path

from tasks.endpoints.results import SUMMARY, issued
from tasks.tuning.bisection import Probe, SearchSettings
from tasks.tuning.spend import describe, spend

SETTINGS = SearchSettings(max_probes=3, max_confirmations=2)


def run(stage: str, qps: float, samples: int | None, seconds: float | None, planned: int | None = None,
        cached: bool = False) -> Probe:
    return Probe(qps=qps, stage=stage, valid=True, duration_s=99.0, samples=samples, measured_s=seconds,
                 planned_samples=planned if planned is not None else samples, cached=cached)


def test_runs_made_now_are_counted_per_stage_from_their_reports_and_recalled_ones_cost_nothing() -> None:
    trace = [run("offline", 0, 336, 2.5), run("probe", 100, 662, 6.6), run("probe", 110, 728, 6.7),
             run("probe", 105, 700, 6.5, cached=True), run("confirm", 100, 662, 6.6, cached=True),
             run("confirm", 104, 688, 6.9)]
    spent = spend(trace, SETTINGS)
    assert spent["offline"] == {"runs": 1, "samples": 336, "seconds": 2.5, "planned_samples": 336}
    assert spent["probe"] == {"runs": 2, "samples": 1390, "seconds": 13.3, "planned_samples": 1390}
    assert spent["confirm"] == {"runs": 1, "samples": 688, "seconds": 6.9, "planned_samples": 688}
    assert spent["total"] == {"runs": 4, "samples": 2414, "seconds": 22.7, "planned_samples": 2414}
    assert spent["limit"] == {"offline": 1, "probe": 3, "confirm": 2} and spent["within"]
    assert describe(spent) == ("spent (from the client's reports): offline 1/1 (336 samples, 2.5 s), probes 2/3 "
                               "(1390 samples, 13.3 s), confirmations 1/2 (688 samples, 6.9 s); 2414 samples, "
                               "22.7 s in all")


def test_a_stage_over_its_runs_a_run_over_its_plan_and_a_run_without_a_count_are_over_budget() -> None:
    trace = [run("probe", q, 662, 6.0) for q in (100, 110, 120, 130)]
    trace += [run("confirm", 100, 700, 7.0, planned=662), run("confirm", 99, None, None, planned=662)]
    spent = spend(trace, SETTINGS)
    assert spent["problems"] == ["4 probe run(s), over the 3 the settings allow",
                                 "confirm at 100 q/s issued 700 samples, over the 662 planned",
                                 "confirm at 99 q/s: its report says no sample count"]
    assert not spent["within"] and "OVER BUDGET: 4 probe run(s)" in describe(spent)
    assert spent["confirm"]["seconds"] == 106.0     # no measured seconds: the wall seconds the search timed


def test_a_loadgen_run_has_no_planned_count_to_hold_it_to_and_nothing_recalled_costs_nothing() -> None:
    loadgen = run("probe", 50, 640, 5.0).model_copy(update={"planned_samples": None})
    spent = spend([loadgen, run("confirm", 50, 6400, 60.0, cached=True)], SETTINGS)
    assert spent["within"] and spent["confirm"]["runs"] == 0
    assert describe(spend([run("probe", 50, 640, 5.0, cached=True)], SETTINGS)).startswith(
        "spent (from the client's reports): nothing (every run recalled)")


def test_the_report_reader_gives_what_a_run_cost_whatever_its_verdict(tmp_path: Path) -> None:
    assert issued(tmp_path) is None
    (tmp_path / SUMMARY).parent.mkdir(parents=True)
    (tmp_path / SUMMARY).write_text(json.dumps({"n_samples_issued": 700, "n_samples_failed": 12,
                                                "duration_ns": 6_500_000_000, "state": "complete"}))
    assert issued(tmp_path) == (700, 6.5)
    (tmp_path / SUMMARY).write_text("[1, 2]")
    assert issued(tmp_path) is None
