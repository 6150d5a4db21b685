"""tasks/endpoints without the client: what the config leaves out for an engine, what it refuses, the data set's
row count for a submission run, a report's results read back (a null early-stopping p99, failed samples), and a run
judged and recorded (tasks.endpoints.measure)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from submission.base.errors import PlanError, RunFailed
from submission.results.runs import RunSpec
from submission.rules import load_rules
from tasks import clock
from tasks.accuracy import AccuracyResult, MetricVerdict, Verdict
from tasks.endpoints import config, dataset, measure, runner
from tasks.endpoints.results import ClientResult, read_result
from tasks.engines import Endpoint
from tasks.measuring import summary

BENCH = "qwen3-vl-235b-a22b"


def spec(scenario: str = "Server", **update: object) -> RunSpec:
    lg = "Offline" if scenario == "Offline" else "Server"
    base = RunSpec(plan="p", profile="submission", round="v6.1", system="s", benchmark=BENCH, scenario=scenario,
                   mode="performance", loadgen_model=BENCH, loadgen_scenario=lg,
                   user_conf=((f"{BENCH}.{lg}.target_qps", "40"),), dataset="d.parquet", dataset_sha256="-",
                   model_sha256="-", engine="e", max_tokens=150, temperature=0.7, max_concurrency=8)
    return base.model_copy(update=update)


def test_the_sampling_leaves_out_what_the_engine_refuses_and_a_server_run_needs_a_rate(tmp_path: Path) -> None:
    smoke_vlm = Endpoint("http://127.0.0.1:1", "m", False, False, drop_fields=frozenset({"top_k", "presence_penalty"}))
    assert config.sampling(spec(), smoke_vlm) == {"temperature": 0.7, "top_p": 0.8, "repetition_penalty": 1.0,
                                                  "frequency_penalty": 0.0}
    assert config.sampling(spec(temperature=0.0), smoke_vlm) == {"temperature": 0.0, "repetition_penalty": 1.0,
                                                                 "frequency_penalty": 0.0}   # greedy: no top_p
    with pytest.raises(PlanError, match=r"scenarios.Interactive.target_qps"):
        config.client_config(spec("Interactive", user_conf=()), smoke_vlm, tmp_path, tmp_path)
    assert config.client_dataset(spec("Interactive")) == ("shopify_product_catalogue_8k", "train", 8000)
    assert config.client_dataset(spec("Offline")) == ("shopify_product_catalogue", "train+test", 48289)


def test_a_submission_run_needs_the_rules_row_count(tmp_path: Path) -> None:
    converted = tmp_path / "c.parquet"
    pq.write_table(pa.Table.from_pylist([{"product_title": "t"}] * 3), converted)
    with pytest.raises(PlanError, match="has 3 rows; the round's rules require 8000"):
        dataset.place(converted, tmp_path / "run", "shopify_product_catalogue_8k", "train", rows=8000)
    link = dataset.place(converted, tmp_path / "run", "shopify_product_catalogue_8k", "train")
    assert link == dataset.cache_file(tmp_path / "run", "shopify_product_catalogue_8k", "train")
    assert link.relative_to(tmp_path / "run").parts[:3] == ("dataset_cache", "shopify_product_catalogue_8k", "train")
    assert link.name == "shopify_product_catalogue_8k_train.parquet"
    assert link.resolve() == converted.resolve()


def report(tmp_path: Path, failed: int, events: list[dict] = (), completed: int = 8) -> Path:
    (tmp_path / "performance").mkdir(parents=True)
    es = {"early_stopping_percentiles": {"99.0": None, "50.0": 2e6}}
    summary = {"n_samples_issued": 8, "n_samples_completed": completed, "n_samples_failed": failed, "duration_ns": 2e9,
               "state": "complete", "complete": True, "qps": 4.0, "ttft": es,
               "tpot": {"early_stopping_percentiles": {"99.0": 3.5e6}}, "latency": es}
    (tmp_path / "performance" / "result_summary.json").write_text(json.dumps(summary))
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return tmp_path


def test_results_are_read_and_failed_samples_carry_the_reason(tmp_path: Path) -> None:
    result = read_result(report(tmp_path / "ok", 0), accuracy=False, log=tmp_path / "log")
    assert (result.qps, result.issued, result.duration_s) == (4.0, 8, 2.0)
    assert (result.ttft_p99_ms, result.tpot_p99_ms, result.latency_p99_ms) == (None, 3.5, None)
    error = {"event_type": "error.generic", "data": ["ErrorData", "error", "HTTP 503: overloaded"]}
    with pytest.raises(RunFailed, match=r"2 of 8 samples failed .*: 2 x HTTP 503: overloaded"):
        read_result(report(tmp_path / "bad", 2, [error, error, {"event_type": "sample.complete"}]), accuracy=False,
                    log=tmp_path / "log")
    with pytest.raises(RunFailed, match="scored no complete accuracy data set"):
        (tmp_path / "ok" / "accuracy").mkdir()
        (tmp_path / "ok" / "accuracy" / "accuracy_results.json").write_text(json.dumps({"accuracy_scores": []}))
        read_result(tmp_path / "ok", accuracy=True, log=tmp_path / "log")


def test_samples_the_client_stopped_waiting_for_fail_the_run(tmp_path: Path) -> None:
    """What the client reported of an Offline run whose answers outlasted its 240 s performance drain: 966 issued,
    518 completed, none failed, state complete."""
    with pytest.raises(RunFailed, match="3 of 8 samples the endpoints client issued never completed"):
        read_result(report(tmp_path, 0, completed=5), accuracy=False, log=tmp_path / "log")


def test_the_config_waits_for_every_answer_and_gives_start_up_real_seconds(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Under `--clock x10` the client's 30 s service start-up limit lasted 3 s of real time: its metrics service
    (the client and transformers imported, the tokenizer loaded in a process of its own) missed it on this machine."""
    endpoint = Endpoint("http://127.0.0.1:1", "m", False, False)
    monkeypatch.delenv(clock.ENV, raising=False)
    settings = config.client_config(spec("Offline"), endpoint, tmp_path, tmp_path)["settings"]
    assert settings["drain"] == {"performance_timeout_s": None}
    assert (settings["service_ready_timeout_s"], settings["client"]["worker_initialization_timeout"]) == (30, 60)
    monkeypatch.setenv(clock.ENV, "x10")
    settings = config.client_config(spec("Offline"), endpoint, tmp_path, tmp_path)["settings"]
    assert (settings["service_ready_timeout_s"], settings["client"]["worker_initialization_timeout"]) == (300, 600)
    settings = config.client_config(spec("Offline"), endpoint, tmp_path, tmp_path, 5.0)["settings"]   # a fall-back
    assert (settings["service_ready_timeout_s"], settings["client"]["worker_initialization_timeout"]) == (150, 300)


def result(**update: object) -> ClientResult:
    """The seed's Interactive run: 40 q/s for 630 s, p99 latency (early stopping) 1487 ms under its 1500 ms limit."""
    base = ClientResult(report_dir="r", issued=25200, completed=25200, failed=0, qps=39.85, duration_s=630.0,
                        ttft_p99_ms=None, tpot_p99_ms=None, latency_p99_ms=1487.0)
    return dataclasses.replace(base, **update)


def test_a_run_is_judged_by_its_early_stopping_p99_and_its_duration() -> None:
    rules = load_rules("v6.1")
    interactive = spec("Interactive")
    assert measure.invalid_reasons(interactive, result(), rules) == []
    [over] = measure.invalid_reasons(interactive, result(latency_p99_ms=1516.0), rules)
    assert "early stopping" in over and "1516 ms exceeds 1500 ms" in over
    [unknown] = measure.invalid_reasons(interactive, result(latency_p99_ms=None), rules)
    assert "could not estimate the early-stopping p99 latency" in unknown
    assert measure.invalid_reasons(spec("Offline"), result(latency_p99_ms=None), rules) == []   # no Offline limit
    offline, fast = spec("Offline"), result(duration_s=120.0, qps=400.0, latency_p99_ms=None)
    [short] = measure.invalid_reasons(offline, fast, rules)
    assert "under its min duration of 600 s" in short
    # 400 q/s x 600 s = 240000 samples: five passes of 48289 (241445), which 1.1 x 293 x 600 s first asks for
    fix = measure.resize(offline, fast, [short])
    assert "scenarios.Offline.target_qps to at least 293 and expected_qps: 400" in fix
    assert measure.resize(interactive, result(duration_s=120.0), [short]) is None   # only an Offline run is resized


def test_only_a_run_invalid_for_its_latency_alone_falls_back_to_a_slower_clock() -> None:
    rules, interactive = load_rules("v6.1"), spec("Interactive")
    assert measure.latency_alone(interactive, result(latency_p99_ms=1516.0), rules)
    assert not measure.latency_alone(interactive, result(), rules)   # VALID
    assert not measure.latency_alone(interactive, result(latency_p99_ms=None), rules)   # too few samples
    assert not measure.latency_alone(interactive, result(latency_p99_ms=1516.0, duration_s=120.0), rules)
    assert not measure.latency_alone(interactive, result(latency_p99_ms=1516.0, failed=3), rules)
    assert not measure.latency_alone(spec("Interactive", mode="accuracy"), result(latency_p99_ms=1516.0), rules)


def test_a_run_over_its_latency_limit_runs_again_on_the_slower_clock(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    from tasks import clock
    from tests.unit.test_clock_fallback import Engine

    clocks: list[float | None] = []

    def run(spec: RunSpec, endpoint: Endpoint, run_dir: Path, *, speed: float | None = None,
            **_: object) -> ClientResult:
        clocks.append(speed)
        run_dir.mkdir(parents=True)
        return result(latency_p99_ms=1516.0 if speed == 10.0 else 1487.0)

    monkeypatch.setattr(measure.runner, "run", run)
    monkeypatch.setenv(clock.ENV, "x10")
    rec = measure.run_once(spec("Interactive"), Engine(), tmp_path, None, None)
    assert clocks == [10.0, 5.0] and rec.valid and rec.clock == 5.0
    assert len(list((tmp_path / "runs").glob("*.clock-x10-*"))) == 1


def test_the_record_carries_the_clients_numbers_and_podiums_verdict(tmp_path: Path) -> None:
    rules = load_rules("v6.1")
    rec = measure.record(spec("Server"), tmp_path, result(latency_p99_ms=9800.0), rules, None)
    assert (rec.harness, rec.valid, rec.validity, rec.metric, rec.unit) == (
        "endpoints", True, "VALID", 39.85, "Queries/s")
    assert rec.latency_p99_ms == 9800.0 and rec.key == spec("Server").key()
    assert rec.wall_s == 630.0   # no invocation timed: the report's duration
    # the GPU time a run costs is the whole client invocation (start-up, both phases), not the report's duration
    assert measure.record(spec("Server"), tmp_path, result(wall_s=1342.5), rules, None).wall_s == 1342.5
    bad = measure.record(spec("Interactive"), tmp_path, result(latency_p99_ms=1516.0), rules, None)
    assert (bad.valid, bad.validity) == (False, "INVALID") and "1516" in bad.invalid_reasons[0]
    metric = rules.benchmark(BENCH).scenario("Offline").accuracy[0].metric
    failing = Verdict(BENCH, "Offline", "v6.1", (MetricVerdict(metric, 0.0, 0.7, None, False),))
    scored = AccuracyResult(metrics={metric: 0.0}, samples=16, verdict=failing)
    accuracy = spec("Offline", mode="accuracy")
    rec = measure.record(accuracy, tmp_path, result(accuracy=0.0), rules, scored)
    assert (rec.valid, rec.metric, rec.accuracy_metric, rec.accuracy, rec.accuracy_pass) == (
        None, None, metric, 0.0, False)
    smoke = measure.record(spec("Offline", mode="accuracy", profile="smoke"), tmp_path, result(accuracy=0.0), rules,
                           scored)
    assert smoke.accuracy_pass is None   # a stand-in model's score is reported, never gated on


def test_a_scenario_with_accuracy_is_one_client_run_in_both_modes(tmp_path: Path) -> None:
    endpoint = Endpoint("http://127.0.0.1:1", "m", False, False)
    for run, mode, sets in ((spec("Offline"), "perf", ["performance"]),
                            (spec("Offline", with_accuracy=True), "both", ["performance", "accuracy"]),
                            (spec("Offline", mode="accuracy"), "both", ["performance", "accuracy"])):
        assert runner.command(run, tmp_path / "c.yaml", "ie")[-2:] == ["--mode", mode]
        c = config.client_config(run, endpoint, tmp_path, tmp_path)
        assert [d["type"] for d in c["datasets"]] == sets


def test_the_accuracy_verdict_is_the_clients_score_and_the_evaluators_a_cross_check(tmp_path: Path) -> None:
    """The checker reads the client's score: a run the reference evaluator scores differently passes or fails on the
    client's, with both numbers and a warning in its record."""
    rules = load_rules("v6.1")
    metric = rules.benchmark(BENCH).scenario("Offline").accuracy[0].metric   # target 0.782397
    both = spec("Offline", with_accuracy=True)

    def scored(value: float) -> AccuracyResult:
        return AccuracyResult(metrics={metric: value}, samples=16)

    rec = measure.record(both, tmp_path, result(accuracy=0.79), rules, scored(0.70))
    assert (rec.valid, rec.metric, rec.accuracy, rec.accuracy_pass, rec.accuracy_reference) == (
        True, 39.85, 0.79, True, 0.70)
    assert "client scored F1_HIERARCHICAL 0.79, Podium's qwen3-vl-235b-a22b evaluator 0.7" in rec.warnings[0]
    assert not measure.problems(rec) and "reference evaluator 0.7" in summary(rec)
    low = measure.record(both, tmp_path, result(accuracy=0.70), rules, scored(0.79))
    assert low.accuracy_pass is False and measure.problems(low)
    agree = measure.record(both, tmp_path, result(accuracy=0.79), rules, scored(0.79 + 5e-7))
    assert agree.accuracy_pass and agree.warnings == ()


def test_the_scenario_folder_holds_one_client_report(tmp_path: Path) -> None:
    from submission.base.errors import RuleViolation
    from submission.results.runs import phase_rows
    from submission.tree.assemble import LAYOUTS
    from submission.tree.paths import Tree

    run_dir = tmp_path / "run"
    for rel in ("config.yaml", "performance/result_summary.json", "accuracy/accuracy_results.json"):
        (run_dir / "report" / rel).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / "report" / rel).write_text(rel)
    rec = measure.record(spec("Offline", with_accuracy=True), run_dir, result(accuracy=0.79), load_rules("v6.1"),
                         AccuracyResult(metrics={"F1_HIERARCHICAL": 0.79}, samples=1))
    perf, acc = phase_rows(rec)
    tree, where = Tree(tmp_path / "tree", "closed", "P"), ("s", BENCH, "Offline")
    LAYOUTS["endpoints"](tree, where, perf, acc)
    assert [p.read_text() for p in (tree.endpoints_config(*where), tree.endpoints_result_summary(*where),
                                    tree.endpoints_accuracy_results(*where))] == [
        "config.yaml", "performance/result_summary.json", "accuracy/accuracy_results.json"]
    with pytest.raises(RuleViolation, match="the scenario folder holds one client report"):
        LAYOUTS["endpoints"](tree, where, perf, acc.model_copy(update={"run_dir": str(tmp_path / "other")}))


def test_guided_decoding_measured_by_the_client_is_refused_at_plan_load() -> None:
    """The client's config has no response_format: an open plan asking for guided decoding would send unconstrained
    requests while its README said "guided decoding: on"."""
    import yaml

    from submission.plan import model as plans

    data = yaml.safe_load((Path(__file__).parents[2] / "deployments/plans/qwen3-vl-dynamo-50-50.yaml").read_text())
    data["division"] = "open"
    data["benchmarks"][0]["generation"]["guided_decoding"] = True
    with pytest.raises(PlanError, match=r"benchmarks.0.generation.guided_decoding: .* measured by the endpoints "
                                        r"client, which cannot send the answer schema .*set guided_decoding: false"):
        plans.parse(data)


def test_a_smoke_run_is_judged_by_its_named_latency_bound_and_only_a_smoke_plan_may_name_one() -> None:
    """The smoke stand-in on two shared cores measured p99 3.56 s over Interactive's 1.5 s beside a test suite."""
    import yaml

    from submission.checks.findings import SMOKE_DEVIATIONS
    from submission.plan import model as plans
    from submission.results.runs import plan_runs

    plan = plans.load(Path(__file__).parents[2] / "deployments/plans/smoke-vlm.yaml")
    bench = plan.benchmarks[0]
    runs = {s.scenario: s for s in plan_runs(plan, bench, load_rules("v6.1"), model_sha256="m", engine="e",
                                             dataset_sha256=dict.fromkeys(bench.dataset.scenarios.values(), "d") | {
                                                 bench.dataset.performance: "d"})}
    slow = result(latency_p99_ms=3560.0)
    assert measure.invalid_reasons(runs["Interactive"], slow, load_rules("v6.1")) == []
    assert measure.invalid_reasons(spec("Interactive"), slow, load_rules("v6.1"))   # the round's 1.5 s
    assert "latency-limit" in SMOKE_DEVIATIONS
    data = yaml.safe_load((Path(__file__).parents[2] / "deployments/plans/qwen3-vl-dynamo-50-50.yaml").read_text())
    data["benchmarks"][0]["scenarios"]["Interactive"]["latency_ms"] = 12000
    with pytest.raises(PlanError, match=r"scenarios\.Interactive\.latency_ms: only a smoke plan"):
        plans.parse(data)
