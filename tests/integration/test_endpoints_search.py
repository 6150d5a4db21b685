"""The peak search through the MLCommons endpoints client (docs/benchmarks.md, "The peak search through the endpoints
client"): a Qwen3-VL smoke plan on the simulated engine, its Offline run (where the bracket starts) and every probe
measured by the real client and judged by the bar the v6.1 checker applies, the early-stopping p99 latency within the
1.5 s Interactive limit. Then the rate the search returned is checked apart from it, against a fresh engine on a
slower clock: a client run of the plan's full length at that rate passes the bar, one at 1.06x it fails. About 2
minutes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from submission.plan import model as plans
from submission.results.runs import plan_runs
from submission.rules import load_rules
from tasks.endpoints import runner
from tasks.endpoints.measure import invalid_reasons
from tasks.endpoints.probe import P99_MIN_SAMPLES
from tasks.tuning.bisection import round_qps
from tasks.tuning.probes import with_rate
from tests.integration.engines_support import shopify_store, simulated_engine

pytestmark = pytest.mark.integration
BENCH, ROWS = "qwen3-vl-235b-a22b", 8
# Answers of 2 tokens from a FIFO queue of 128 decode slots at 0.9 s each: 142 answers/s. Under that rate a request's
# latency stays near 0.9 s; past it the queue grows for the whole run, so the early-stopping p99 crosses 1.5 s a few %
# above capacity and climbs ~50 ms for each 1 % more load in a 6 s run. The search's rate and 1.06x it are hundreds of
# ms apart while a run repeats within a few ms (the client's schedule is seeded and the engine's timeline is causal).
ENGINE = {"prefill_workers": 1, "prefill_ms": 1, "decode_workers": 1, "decode_slots": 128, "tpot_ms": 900,
          "tpot_load": 0.0, "output_tokens": 2}
FULL_MS = 6000
# Probes as long as the plan's runs (the probe length rule asks less above 110 q/s: 662 samples), so a probe's pass
# holds for a full run and the confirmation is the last passing probe itself, recalled; 5 % steps from near the peak.
# The independent runs, engine and client alike, on a clock four times slower than the real one (libfaketime, as
# tasks.clock runs a rehearsal's faster), so a busy machine's late wake-ups count a quarter on it. A late client only
# ever adds latency: the search's own VALID at its rate, measured on the real clock, bounds the rate's p99 from above.
CHECK_CLOCK = 0.25
SETTINGS = {"precision": 0.05, "start_fraction": 1.2, "step_up": 1.1, "step_down": 0.9,
            "probe_duration_ms": FULL_MS, "probe_queries": P99_MIN_SAMPLES, "max_probes": 8, "max_confirmations": 4}


def vl_plan(tmp: Path, staged: dict[str, Path]) -> Path:
    plan = {"name": "vl-search", "round": "v6.1", "division": "open", "profile": "smoke", "submitter": "Podium",
            "systems": [{"name": "cpu-sim"}],
            "benchmarks": [{"benchmark": BENCH, "system": "cpu-sim", "engine": {"name": "simulated", "options": ENGINE},
                            "model": {"name": "sim", "source": str(staged["tokenizer"])},
                            "dataset": {"performance": str(staged["data"]), "accuracy": str(staged["data"])},
                            "generation": {"max_tokens": 8, "temperature": 0.7}, "accuracy": False,
                            "loadgen": {"min_duration_ms": FULL_MS},
                            "scenarios": {"Offline": {"target_qps": 150, "min_duration_ms": 2000,
                                                      "max_concurrency": 512},
                                          "Interactive": {"target_qps": 100, "max_concurrency": 512}}}],
            "storage": {"bucket": "podium", "embedded": True}}
    path = tmp / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def test_the_search_through_the_client_returns_a_rate_the_checker_passes_and_not_1_06x(
        prefect_server: None, client: Path, tmp_path: Path) -> None:
    from flows.search import search_peak_qps

    staged = shopify_store(tmp_path / "store", ROWS)
    plan_path = vl_plan(tmp_path, staged)
    state = search_peak_qps(str(plan_path), scenario="Interactive", workspace=str(tmp_path / "ws"),
                            settings=SETTINGS, return_state=True)
    out = state.result()
    assert out["confirmed"], out["summary"]
    trace = out["trace"]
    assert trace[0]["stage"] == "offline" and out["offline_qps"] > 0        # the Offline run, through the client
    assert trace[1]["target_qps"] == round_qps(out["offline_qps"] * SETTINGS["start_fraction"])
    assert all(r["latency_p99_ms"] is not None for r in trace[1:])          # every probe had its estimate
    assert any(not r["valid"] and "p99 latency (early stopping)" in r["reason"] for r in trace), trace
    runs = sorted((tmp_path / "ws" / "work" / "search-runs").iterdir())
    assert runs and len(runs) == out["runs"] and all((r / "report" / "performance" / "result_summary.json").is_file()
                                                     for r in runs)         # each run was the client's
    # What the search spent, counted from every client report it produced, is what its trace says, within its limits
    reports = [json.loads((r / "report" / "performance" / "result_summary.json").read_text()) for r in runs]
    spent, made = out["spend"], [r for r in trace if not r["cached"]]
    assert made, trace
    assert spent["within"] and spent["problems"] == [], spent
    assert spent["total"]["runs"] == len(reports) == len(made)
    assert spent["total"]["samples"] == sum(r["n_samples_issued"] for r in reports) == sum(r["samples"] for r in made)
    assert spent["total"]["seconds"] == pytest.approx(sum(r["duration_ns"] for r in reports) / 1e9, abs=0.01)
    assert all(r["samples"] == r["planned_samples"] for r in made), made     # each run issued what the model planned
    assert all(spent[stage]["runs"] <= most for stage, most in spent["limit"].items())
    assert spent["limit"] == {"offline": 1, "probe": SETTINGS["max_probes"], "confirm": SETTINGS["max_confirmations"]}
    rate = out["qps"]

    # Apart from the search: the plan's own Interactive run at the rate, and at 1.06x it, on a fresh engine
    plan = plans.load(plan_path)
    rules = load_rules(plan.round)
    specs = plan_runs(plan, plan.benchmarks[0], rules, model_sha256="-", engine="simulated",
                      dataset_sha256={str(staged["data"]): "-"})
    base = next(s for s in specs if s.scenario == "Interactive").model_copy(update={"dataset": str(staged["data"])})
    verdicts = {}
    with simulated_engine(ENGINE, speed=CHECK_CLOCK) as (_, endpoint):
        for qps in (rate, round(rate * 1.06, 2)):
            spec = with_rate(base, qps, min_duration_ms=None, min_query_count=None)
            result = runner.run(spec, endpoint, tmp_path / "check" / f"{qps:g}", tokenizer=staged["tokenizer"],
                                data_dir=tmp_path / "check" / "data", timeout_s=240, client=client, speed=CHECK_CLOCK)
            assert result.issued >= P99_MIN_SAMPLES and result.duration_s * 1000 >= FULL_MS
            verdicts[qps] = (result.latency_p99_ms, invalid_reasons(spec, result, rules), result.ttft_p99_ms)
    (at_rate, passed, _), (above, failed, _) = verdicts.values()
    summary = json.dumps({"search": out["summary"], "checks (p99 ms, reasons, TTFT p99 ms: the client's lag, the "
                          "engine's prefill being 1 ms)": {str(k): v for k, v in verdicts.items()}}, indent=1)
    # Each verdict as the checker gives it, no slack: the rate VALID, 1.06x INVALID for its p99 alone. Measured, the
    # search lands between 150.5 and 153.3 q/s, whose p99 is 140 to 20 ms under the limit, 1.06x's 325 to 470 ms
    # over it; on the real clock one rate's p99 moved by 3 ms across runs beside two or four `yes > /dev/null` loops
    # but by up to 63 ms inside the suite (152.5 q/s: 1451 ms alone, 1485 and 1514 ms as search probes), on
    # CHECK_CLOCK by a quarter of that. The TTFT p99 in the message (the engine's prefill is 1 ms) shows the lag.
    assert passed == [] and at_rate <= 1500, summary
    assert failed == [f"p99 latency (early stopping) {above:g} ms exceeds 1500 ms"], summary
