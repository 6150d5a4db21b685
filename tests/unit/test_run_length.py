"""One model of a client run's length (submission/budget/run_length.py, the endpoints client's arithmetic in
submission/plan/client_length.py): the samples the endpoints client issues (whole passes over its data set), the
smallest Offline target whose run lasts its min duration, the plan refusing a shorter one at load, and the length
the cost model and the search's budget count: an online run's schedule, then its p99 bound for the answers still out
(tests/integration/test_endpoints_runner.py holds it to the client's report and its schedule to the client's own)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from submission.base.errors import PlanError
from submission.budget import cost, run_length
from submission.plan import model as plans
from submission.plan.client_length import client_samples, smallest_offline_target
from submission.results.runs import plan_runs
from submission.rules import load_rules

PLANS = Path(__file__).parents[2] / "deployments" / "plans"
RULES = load_rules("v6.1")
SEED = RULES.seeds.schedule_rng_seed


def plan_specs(name: str) -> dict:
    plan = plans.load(PLANS / name)
    bench = plan.benchmarks[0]
    return {s.scenario: s for s in plan_runs(plan, bench, RULES, model_sha256="m", engine="e", dataset_sha256={
        p: "d" for _, kind, p in bench.sources() if kind == "datasets"})}


def test_the_client_issues_whole_passes_over_its_data_set() -> None:
    assert client_samples(60, 600_000, 48289) == 48289          # 39600 padded up to one pass
    assert client_samples(200, 600_000, 48289) == 3 * 48289     # 132000: three passes
    assert client_samples(40, 600_000, 8000) == 32000           # Interactive's 8k set: 26400, four passes
    assert client_samples(None, 600_000, 48289) == 48289        # Offline without a target counts 10 q/s
    assert client_samples(20, 500, 4) == 12 and client_samples(150, 5000, 4) == 828   # the smoke-size runs
    assert client_samples(3, 0, 48289) == 48289                  # min duration 0: the data set once


def test_the_smallest_offline_target_that_lasts_the_min_duration() -> None:
    """At the seed's 230 q/s on 16 GPUs, Offline 60 issues one pass, 210 s; 147 is the first target of three passes
    (630 s); 146 issues two (420 s)."""
    assert smallest_offline_target(230, 600_000, 48289) == 147
    assert client_samples(147, 600_000, 48289) / 230 >= 600 > client_samples(146, 600_000, 48289) / 230
    assert smallest_offline_target(10, 600_000, 48289) == 1      # one pass already outlasts it


def test_a_target_whose_run_would_end_too_soon_is_refused_at_plan_load() -> None:
    data = yaml.safe_load((PLANS / "qwen3-vl-dynamo-75-25.yaml").read_text())
    data["benchmarks"][0]["scenarios"]["Offline"] |= {"target_qps": 60, "expected_qps": 230}
    with pytest.raises(PlanError) as caught:
        plans.parse(data)
    assert caught.value.exit_code == 2
    assert ("benchmarks.0.scenarios.Offline.target_qps: at 60 the endpoints client sends 48289 samples (1 pass(es) "
            "over the 48289-row data set), 210 s at the expected 230 q/s, under the 600 s min duration; set "
            "target_qps: 147 or more") in str(caught.value)
    data["benchmarks"][0]["scenarios"]["Offline"]["target_qps"] = 147
    plans.parse(data)


def test_the_cost_model_counts_the_round_up_and_the_accuracy_phase() -> None:
    """A Server run at 40 q/s issues a whole pass (48289 samples): 1224 s, not the 660 s its duration says; with
    accuracy the client issues the accuracy set after it."""
    specs = plan_specs("qwen3-vl-dynamo-50-50.yaml")
    server = specs["Server"].model_copy(update={"with_accuracy": False})
    assert cost.spec_seconds(server, 40) == pytest.approx(run_length.schedule_s(SEED, 40.0, 48289)[0] + 12)
    both = run_length.run_length(specs["Offline"], RULES, rate=230)
    assert (both.samples, both.accuracy_samples, both.passes) == (144867, 48289, 3)
    assert both.seconds == pytest.approx(193156 / 230)
    smoke = run_length.run_length(run_length.at_rate(specs["Interactive"], 150), RULES, rows=4)
    assert (smoke.samples, smoke.accuracy_samples) == (client_samples(150, 600_000, 4), 4)


def test_an_online_run_lasts_its_schedule_then_its_latency_bound() -> None:
    """What the client reports as a run's duration (`duration_ns`): an online phase's poisson schedule, drawn from the
    round's scheduler seed as the client draws it, then the answers still out, allowed the p99 bound the run is
    judged by (the round's 12 s for Server, a smoke plan's relaxed one in its place); each phase of a `--mode both`
    run so. An Offline phase is its samples at the engine's rate, which counts its drain."""
    server = plan_specs("qwen3-vl-dynamo-50-50.yaml")["Server"]
    performance, accuracy = run_length.schedule_s(SEED, 200.0, 144867, 48289)
    assert abs(performance - 144867 / 200) < 0.01 * 144867 / 200   # 726.4 s: within 1/sqrt(samples) of samples / qps
    alone = run_length.run_length(server.model_copy(update={"with_accuracy": False}), RULES)
    assert alone.seconds == pytest.approx(performance + 12)
    assert run_length.run_length(server, RULES).seconds == pytest.approx(performance + 12 + accuracy + 12)
    # what a queue over capacity grows for is the issue span alone: the search's overload judgement extrapolates a
    # probe's backlog over it, never over the drain and the accuracy phase
    assert run_length.run_length(server, RULES).issue_seconds == pytest.approx(performance)
    line = ("qwen3-vl-235b-a22b.Server.target_latency", "60000")   # a smoke plan's latency_ms: 60000
    relaxed = server.model_copy(update={"profile": "smoke", "with_accuracy": False,
                                        "user_conf": (*server.user_conf, line)})
    assert run_length.run_length(relaxed, RULES).seconds == pytest.approx(performance + 60)
    assert run_length.drain_s(relaxed.model_copy(update={"profile": "submission"}), RULES) == 12   # smoke only
    offline = plan_specs("qwen3-vl-dynamo-50-50.yaml")["Offline"]
    assert run_length.drain_s(offline, RULES) == 0 and run_length.run_length(
        offline, RULES, rate=230).seconds == pytest.approx(193156 / 230)


def test_the_real_rounds_cost_of_a_qwen3_vl_plan_is_its_three_client_runs() -> None:
    """A dress rehearsal reports what the round takes on the plan's 16 GPUs: each scenario's one `--mode both` run."""
    real = cost.real_round(plans.load(PLANS / "qwen3-vl-dynamo-75-25.yaml"))
    runs = {k.split("/", 2)[-1]: v for k, v in real["runs"].items()}
    server = run_length.schedule_s(SEED, 200.0, 144867, 48289)
    interactive = run_length.schedule_s(SEED, 15.0, 16000, 8000)
    assert runs == pytest.approx({"Offline/performance": 193156 / 230, "Server/performance": sum(server) + 2 * 12,
                                  "Interactive/performance": sum(interactive) + 2 * 1.5})
    assert real["gpu_hours"] == pytest.approx(sum(runs.values()) * 16 / 3600, abs=1e-3)
