"""The one log line per loadgen run names only what the run measured."""

from submission.results.runs import RunRecord
from tasks.measuring import summary

BASE = {"key": "k", "system": "cpu-smoke", "benchmark": "gpt-oss-120b", "run_dir": "/r"}


def test_performance_and_accuracy_runs() -> None:
    server = RunRecord(**BASE, scenario="Server", mode="performance", valid=True, validity="VALID", metric=386.874,
                       unit="Tokens/s", ttft_p99_ms=23.383, tpot_p99_ms=6.563)
    assert summary(server) == "VALID, 386.874 Tokens/s, TTFT p99 23.383 ms, TPOT p99 6.563 ms"
    offline = RunRecord(**BASE, scenario="Offline", mode="performance", valid=False, validity="INVALID",
                        metric=1594.1, unit="Tokens/s")
    assert summary(offline) == "INVALID, 1594.1 Tokens/s"
    accuracy = RunRecord(**BASE, scenario="Offline", mode="accuracy", valid=None, validity=None,
                         accuracy_metric="exact_match", accuracy=100.0)
    assert summary(accuracy) == "exact_match 100"
    assert summary(RunRecord(**BASE, scenario="Offline", mode="accuracy", valid=None, validity=None)) == "no result"


def test_an_offline_run_shorter_than_its_minimum_names_the_target_qps_to_set(tmp_path) -> None:
    from submission.results.logs import load_run
    from submission.results.runs import RunSpec
    from tasks.harness.measure import offline_resize
    from tests.loadgen_fake import run_fake

    run = load_run(run_fake(tmp_path / "short", scenario="Offline", latency_s=0.0))   # 16 samples at once: < 500 ms
    assert run.min_duration_met is False and run.samples_per_second
    spec = RunSpec(plan="p", profile="smoke", round="v6.1", system="cpu-smoke", benchmark="gpt-oss-120b",
                   scenario="Offline", mode="performance", loadgen_model="gpt-oss-120b", loadgen_scenario="Offline",
                   user_conf=(), dataset="d", dataset_sha256="-", model_sha256="-", engine="smoke", max_tokens=16,
                   temperature=0.0, max_concurrency=8)
    fix = offline_resize(spec, run)
    assert fix is not None and "benchmarks[gpt-oss-120b].scenarios.Offline.target_qps to at least " in fix
    assert int(fix.split("at least ")[1].split()[0]) >= 1.5 * run.samples_per_second
    assert "`podium run PLAN --only cpu-smoke/gpt-oss-120b/Offline` measures just this scenario again" in fix
    assert offline_resize(spec.model_copy(update={"scenario": "Server", "loadgen_scenario": "Server"}), run) is None
    long = load_run(run_fake(tmp_path / "long", scenario="Offline", latency_s=0.6))
    assert long.min_duration_met and offline_resize(spec, long) is None
