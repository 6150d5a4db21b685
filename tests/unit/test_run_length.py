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
from submission.plan.client_length import client_samples, offline_runs, smallest_offline_target
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


# --- loadgen --------------------------------------------------------------------------------------------------------

GPT_OSS = "gpt-oss-120b-trtllm-k8s.yaml"


def gpt_oss_arithmetic(equal_issue: bool = True) -> dict[str, float]:
    """Loadgen's own arithmetic for the shipped gpt-oss plan, from the rules' values (mlcommons-loadgen 6.0.17,
    test_settings_internal.cc and loadgen.cc `GenerateQueries`): Offline one query of 1.1 x min_duration x target
    samples, Server queries on their schedule past min_duration (at least loadgen's default min_query_count), both
    padded to whole passes over the 6396-sample set where mlperf.conf sets sample_concatenate_permutation; each
    accuracy run its 4395 samples once at its scenario's rate; TEST07 and TEST09 their sets once (audit.config
    performance_issue_unique, min_duration 0, no padding), Server's at 97 % of the target."""
    plan, gpt = plans.load(PLANS / GPT_OSS), RULES.benchmark("gpt-oss-120b")
    offline, server = (plan.benchmarks[0].scenarios[s].target_qps for s in ("Offline", "Server"))   # 40, 9
    floor, psc = RULES.min_duration_ms / 1000, gpt.performance_sample_count                       # 600 s, 6396

    def padded(n: int) -> int:
        return -(-n // psc) * psc if equal_issue else n

    derated = float(f"{server * plan.compliance.server_qps_factor:g}")                               # 8.73
    test07, test09 = (RULES.audit(t).values("gpt-oss-120b")["min_query_count"] for t in ("TEST07", "TEST09"))
    accuracy = gpt.scenario("Offline").accuracy_sample_count                                        # 4395
    return {"Offline/performance": padded(max(gpt.offline_min_samples_per_query, int(1.1 * floor * offline)))
            / offline,                                                                   # 26400 -> 31980: 799.5 s
            "Offline/accuracy": accuracy / offline, "Offline/TEST07": test07 / offline,
            "Offline/TEST09": test09 / offline,
            "Server/performance": padded(max(RULES.loadgen_min_query_count, int(floor * server) + 1)) / server,
            "Server/accuracy": accuracy / server,                                        # 5401 -> 6396: 710.7 s
            "Server/TEST07": test07 / derated, "Server/TEST09": test09 / derated}


def test_the_gpt_oss_rounds_cost_is_loadgens_own_arithmetic() -> None:
    """3139 s, 3.49 GPU-hours on the plan's 4 GPUs. Without equal issue the same arithmetic gives the 2,889 s that
    counts Offline's 26400 samples and Server's 600 s; mlperf.conf's `gpt-oss-120b.*.sample_concatenate_permutation = 1`
    pads them to 31980 samples and 6396 queries (what the real loadgen does: the next test)."""
    expected = gpt_oss_arithmetic()
    real = cost.real_round(plans.load(PLANS / GPT_OSS))
    assert {k.split("/", 2)[-1]: v for k, v in real["runs"].items()} == pytest.approx(expected)
    assert sum(expected.values()) == pytest.approx(3139.1, abs=0.1)
    assert (real["gpus"], real["gpu_hours"]) == (4, round(sum(expected.values()) * 4 / 3600, 3)) == (4, 3.488)
    # the model without the padding: within 5 % of loadgen's arithmetic without it (2,889 s)
    unpadded = RULES.model_copy(update={"benchmarks": {**RULES.benchmarks, "gpt-oss-120b": RULES.benchmark(
        "gpt-oss-120b").model_copy(update={"sample_concatenate_permutation": False})}})
    plan = plans.load(PLANS / GPT_OSS)
    lengths = {f"{s.scenario}/{s.audit or s.mode}": run_length.run_length(s, unpadded, floor_s=600).seconds
               for s, _ in cost.predicted_runs(plan, plan.benchmarks[0])}
    assert lengths == pytest.approx(gpt_oss_arithmetic(equal_issue=False))
    assert sum(lengths.values()) == pytest.approx(2889, rel=0.05)


def _generated(run_dir: Path) -> int:
    from submission.results.logs import load_run

    run = load_run(run_dir)
    return run.generated_query_count * (run.generated_samples_per_query or 1)


def test_the_loadgen_counts_are_what_the_real_loadgen_generates(tmp_path: Path) -> None:
    """The real loadgen (a fake SUT, tests/loadgen_fake.py) on a 32-sample set with gpt-oss-120b's mlperf.conf block:
    Offline 1.1 x 1 s x 800 = 880 samples padded to 896, Server past 1 s at 100 q/s (101) padded to 128 queries, a
    Server accuracy run its 24 samples once, and TEST07's audit.config (performance_issue_unique, no padding) the set
    once in either scenario: the model's count each time."""
    pytest.importorskip("mlperf_loadgen")
    from tests.loadgen_fake import run_fake

    specs = plan_specs(GPT_OSS)
    small = ("gpt-oss-120b.*.performance_sample_count_override", "32")
    cases = {"offline": (specs["Offline"], [("gpt-oss-120b.Offline.target_qps", "800"),
                                            ("gpt-oss-120b.Offline.min_duration", "1000"), small], "performance"),
             "server": (specs["Server"], [("gpt-oss-120b.Server.target_qps", "100"),
                                          ("gpt-oss-120b.Server.min_duration", "1000"), small], "performance"),
             "accuracy": (specs["Server"], [("gpt-oss-120b.Server.target_qps", "100"), small,
                                            ("gpt-oss-120b.*.accuracy_sample_count_override", "24")], "accuracy")}
    test07 = tuple(RULES.audit("TEST07").config_lines("gpt-oss-120b"))
    for name in ("offline", "server"):
        spec, lines, _ = cases[name]
        cases[f"{name}-TEST07"] = (spec.model_copy(update={"audit": "TEST07", "audit_config": test07}), lines,
                                   "performance")
    predicted = {}
    for name, (spec, lines, mode) in cases.items():
        run = spec.model_copy(update={"user_conf": tuple(lines), "mode": mode})
        length = run_length.run_length(run, RULES)
        predicted[name] = length.samples or length.accuracy_samples
        run_fake(tmp_path / name, scenario=spec.loadgen_scenario, mode=mode, total_count=32,
                 user_conf_lines=[f"{k} = {v}" for k, v in lines], audit_config_lines=list(run.audit_config) or None)
        assert _generated(tmp_path / name) == predicted[name], name
    assert predicted == {"offline": 896, "server": 128, "accuracy": 24, "offline-TEST07": 32, "server-TEST07": 32}


def test_a_loadgen_offline_target_whose_run_would_end_too_soon_is_refused_at_plan_load() -> None:
    """gpt-oss-120b Offline at 10 q/s: 1.1 x 600 s x 10 = 6600 samples, padded to two passes (12792): 320 s on an
    engine doing the expected 40 q/s, which loadgen calls INVALID (min duration not met); 30 is the smallest target
    that lasts (19800 -> 25584 samples, 640 s), 29 still pads to three passes only (19188: 480 s)."""
    data = yaml.safe_load((PLANS / GPT_OSS).read_text())
    data["benchmarks"][0]["scenarios"]["Offline"] |= {"target_qps": 10, "expected_qps": 40}
    with pytest.raises(PlanError) as caught:
        plans.parse(data)
    assert caught.value.exit_code == 2
    assert ("benchmarks.0.scenarios.Offline.target_qps: at 10 loadgen sends 12792 samples (1.1 x 600 s x 10 q/s = "
            "6600, padded to 2 whole passes over the 6396-sample set), 320 s at the expected 40 q/s, under the 600 s "
            "min duration; set target_qps: 30 or more") in str(caught.value)
    for target, lasts in ((29, False), (30, True)):
        data["benchmarks"][0]["scenarios"]["Offline"]["target_qps"] = target
        samples = -(-int(1.1 * 600 * target) // 6396) * 6396
        assert (samples / 40 >= 600) is lasts
        if lasts:
            plans.parse(data)
        else:
            with pytest.raises(PlanError, match="set target_qps: 30 or more"):
                plans.parse(data)


def test_without_an_expected_rate_the_plan_loads_and_the_arithmetic_is_a_warning() -> None:
    """The shipped gpt-oss plan gives no expected_qps: it loads, and its dry run states the count and the fastest
    engine its Offline run still lasts 600 s on (31980 samples / 600 s = 53.3 q/s)."""
    plan = plans.load(PLANS / GPT_OSS)
    [run] = offline_runs(plan)
    assert (run.client, run.samples, run.expected_qps, run.problem()) == ("loadgen", 31980, None, None)
    assert run.note() == ("benchmarks.0.scenarios.Offline: at target_qps 40 loadgen sends 31980 samples (1.1 x 600 s "
                          "x 40 q/s = 26400, padded to 5 whole passes over the 6396-sample set): the run lasts its "
                          "600 s min duration only on an engine doing at most 53.3 q/s, else it ends too soon; set "
                          "benchmarks.0.scenarios.Offline.expected_qps (a measurement) to have the plan refuse a "
                          "target too low")
    assert f"  note: {run.note()}" in cost.prediction_lines(plan, plan.benchmarks[0],
                                                           cost.run_needs(plan, plan.benchmarks[0]))


def test_the_manual_shows_the_gpt_oss_rounds_figures_as_the_dry_run_prints_them() -> None:
    """docs/runs.md's table: each run's samples, seconds and GPU-hours are the dry run's (`RunNeed.line`)."""
    plan = plans.load(PLANS / GPT_OSS)
    needs = cost.run_needs(plan, plan.benchmarks[0])
    rows = {cells[0]: cells for line in (PLANS.parents[1] / "docs" / "runs.md").read_text().splitlines()
            if line.startswith("| Offline/") or line.startswith("| Server/")
            for cells in [[c.strip() for c in line.strip("|").split("|")]]}
    assert set(rows) == {n.label for n in needs}
    for n in needs:
        _, issues, _, seconds, gpu_hours = rows[n.label]
        assert (seconds, gpu_hours) == (f"{n.length.seconds:,.0f}", f"{n.gpu_hours:g}"), n.label
        assert issues.endswith(str(n.length.samples or n.length.accuracy_samples)) or \
            f" {n.length.samples or n.length.accuracy_samples}-sample" in issues, n.label
    total = sum(n.length.seconds for n in needs)
    assert f"{total:,.0f} s in all, {cost.gpu_hours(total, 4):g} GPU-hours" in " ".join(
        (PLANS.parents[1] / "docs" / "runs.md").read_text().split())
