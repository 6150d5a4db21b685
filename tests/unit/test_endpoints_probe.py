"""The peak search through the endpoints client: a probe is judged by the bar the v6.1 checker applies (the
early-stopping p99 against the scenario's limit, never the plain p99), and a probe runs long enough for the client to
estimate it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from submission.budget import run_length
from submission.results.runs import RunSpec
from submission.rules import load_rules
from tasks.clients import client
from tasks.endpoints import config
from tasks.endpoints.probe import P99_MIN_SAMPLES, judge, probe_length
from tasks.endpoints.results import read_result
from tasks.tuning.bisection import Probe, SearchSettings, search
from tasks.tuning.probes import ProbeCache, Prober, stage_spec, target_qps

B = "qwen3-vl-235b-a22b"
RULES = load_rules("v6.1")
SEED, BOUND_S = RULES.seeds.schedule_rng_seed, 1.5   # the client's scheduler seed; Interactive's p99 bound


def online_s(qps: float, samples: int) -> float:
    """An online run's length by the one model: its schedule, then the p99 bound (submission/budget/run_length.py)."""
    return run_length.schedule_s(SEED, float(qps), samples)[0] + BOUND_S


def interactive(qps: float = 40, duration_ms: int = 600_000) -> RunSpec:
    return RunSpec(plan="p", profile="submission", round="v6.1", system="s", benchmark=B, scenario="Interactive",
                   mode="performance", harness="endpoints", loadgen_model=B, loadgen_scenario="Server",
                   user_conf=((f"{B}.Server.target_qps", f"{qps:g}"), (f"{B}.Server.min_duration", str(duration_ms))),
                   dataset="/d.parquet", dataset_sha256="d", model_sha256="m", engine="e", max_tokens=150,
                   temperature=0.7, max_concurrency=512)


def report(tmp: Path, qps: float, plain_ms: float, early_stopping_ms: float | None, samples: int = 27_000) -> Path:
    """A report folder as the client leaves it: result_summary.json with the plain and early-stopping p99 latency
    (None: what the client writes when it had too few samples to estimate it)."""
    (tmp / "performance").mkdir(parents=True)
    estimate = None if early_stopping_ms is None else early_stopping_ms * 1e6
    summary = {"n_samples_issued": samples, "n_samples_completed": samples, "n_samples_failed": 0, "qps": qps,
               "duration_ns": int(samples / qps * 1e9), "state": "complete", "complete": True,
               "latency": {"percentiles": {"99.0": plain_ms * 1e6}, "early_stopping_percentiles": {"99.0": estimate}}}
    (tmp / "performance" / "result_summary.json").write_text(json.dumps(summary))
    return tmp


def test_a_probe_is_judged_by_the_early_stopping_p99_not_the_plain_one(tmp_path: Path) -> None:
    """The seed's Interactive submission: at target_qps 43 the plain p99 was 1481 ms, under the 1.5 s limit, but the
    checker's early-stopping p99 was 1516 ms: a failing probe. At 40 the early-stopping p99 was 1487 ms: a pass."""
    at_43 = read_result(report(tmp_path / "43", 43, plain_ms=1481, early_stopping_ms=1516), accuracy=False,
                        log=tmp_path / "client.log")
    probe = judge(interactive(43), "confirm", 43, at_43)
    assert not probe.valid and probe.verdict == "FAIL"
    assert probe.reasons == ("p99 latency (early stopping) 1516 ms exceeds 1500 ms",)
    assert probe.latency_p99_ms == 1516 and probe.margin == round(1516 / 1500, 4) > 1
    assert probe.completed_qps == probe.metric == 43
    assert (probe.samples, probe.measured_s) == (27_000, round(27_000 / 43, 3))   # its cost, from its report
    at_40 = read_result(report(tmp_path / "40", 40, plain_ms=1487, early_stopping_ms=1487), accuracy=False,
                        log=tmp_path / "client.log")
    passed = judge(interactive(40), "confirm", 40, at_40)
    assert passed.valid and passed.reasons == () and passed.margin < 1


def test_a_probe_the_client_could_not_estimate_fails(tmp_path: Path) -> None:
    few = read_result(report(tmp_path, 40, plain_ms=900, early_stopping_ms=None, samples=600), accuracy=False,
                      log=tmp_path / "client.log")
    probe = judge(interactive(40, duration_ms=15_000), "probe", 40, few)
    assert not probe.valid and probe.latency_p99_ms is None and probe.margin is None
    assert probe.reasons == ("the client could not estimate the early-stopping p99 latency (too few samples)",)


def test_a_probe_lasts_long_enough_for_an_early_stopping_p99_and_issues_no_whole_pass() -> None:
    """Without an exact count the client would round a probe up to a whole pass over the 48289-row set: 1207 s at
    40 q/s. A short probe sets the client's own padded count (n_samples_to_issue), at least 662 samples."""
    settings = SearchSettings(probe_duration_ms=5000, probe_queries=640)
    assert probe_length(40, settings) == (15046, 663)               # 662 samples need 15.05 s at 40 q/s, padded
    assert probe_length(400, settings) == (5000, 2200)               # 2000 samples in 5 s, padded as the client does
    assert probe_length(40, SearchSettings(probe_duration_ms=5000, probe_queries=1000)) == (22728, 1001)
    assert probe_length(0.5, settings, interactive()) == (1_203_637, None)   # longer than the plan's: its run
    for qps in (3, 7.77, 41.3, 150):
        spec = stage_spec(interactive(), qps, "probe", settings)
        duration = config.min_duration_ms(spec, RULES)
        samples = config.samples_to_issue(spec)["n_samples_to_issue"]
        assert samples >= P99_MIN_SAMPLES and samples >= 1.1 * target_qps(spec) * duration / 1000, qps
        length = run_length.run_length(spec, RULES)
        assert length.samples == samples and length.seconds == pytest.approx(online_s(target_qps(spec), samples))
    full = stage_spec(interactive(), 41.3, "confirm", settings)
    assert config.min_duration_ms(full, RULES) == 600_000 and target_qps(full) == 41.3
    assert config.samples_to_issue(full) == {}                       # the plan's run: whole passes
    assert run_length.run_length(full, RULES).samples == 32000     # 27258 padded up to 4 passes of the 8k set
    long = stage_spec(interactive(duration_ms=20_000), 90, "probe", SearchSettings(probe_duration_ms=20_000))
    assert config.samples_to_issue(long) == {}                       # as long as the plan's run: that run
    assert client(interactive()).part("probe_length") is probe_length


def test_a_probe_as_long_as_the_plan_s_runs_is_its_own_confirmation(tmp_path: Path) -> None:
    """Probes of the plan's length ask the client exactly what a confirmation asks: the search recalls the passing
    probe as its confirmation (one run, not two), and reports it as the confirmation."""
    ran: list[tuple[str, float]] = []

    def run(spec: RunSpec, stage: str, qps: float, engine: object, work_dir: str) -> Probe:
        ran.append((stage, qps))
        return Probe(qps=qps, stage=stage, valid=qps <= 100, latency_p99_ms=14 * qps, margin=14 * qps / 1500,
                     metric=qps)

    base = interactive(90, duration_ms=20_000)
    settings = SearchSettings(precision=0.05, probe_duration_ms=20_000)
    result = search(Prober(base, settings, ProbeCache(tmp_path, base), None, str(tmp_path), run), 90, settings)
    assert result.confirmed and 100 / 1.05 <= result.qps <= 100
    assert all(stage == "probe" for stage, _ in ran) and len(ran) == len(result.trace) - 1
    last = result.trace[-1]
    assert last.stage == "confirm" and last.cached and result.confirmation == last and last.metric == result.qps


def test_the_searchs_budget_counts_passes_over_the_staged_data_set(tmp_path: Path) -> None:
    """A full-length run's length is the client's whole passes over the data set it reads: a smoke set's 8 rows, not
    the rules' 8000 (which made a 6 s smoke run count 55 s and stop the search early)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = tmp_path / "d.parquet"
    pq.write_table(pa.table({"product_title": [f"t{i}" for i in range(8)]}), data)
    base = interactive(144, duration_ms=6000).model_copy(update={"dataset": str(data)})
    prober = Prober(base, SearchSettings(), ProbeCache(tmp_path, base), None, str(tmp_path))
    assert prober.rows == 8 and prober.full_seconds(144) == pytest.approx(online_s(144, 952))   # 950.4 -> 119 passes
    # what its queue grows for, over capacity: the issue span, 1.5 s (Interactive's p99 bound, the drain) shorter
    assert prober.full_issue_seconds(144) == pytest.approx(prober.full_seconds(144) - 1.5)
    shards = tmp_path / "fetched" / "data"   # a data set as `podium fetch` places it: a folder of parquet shards
    shards.mkdir(parents=True)
    for split, n in (("train", 5), ("test", 3)):
        pq.write_table(pa.table({"product_title": [f"{split}{i}" for i in range(n)]}), shards / f"{split}-0.parquet")
    folder = base.model_copy(update={"dataset": str(shards.parent)})
    assert Prober(folder, SearchSettings(), ProbeCache(tmp_path, folder), None, str(tmp_path)).rows == 8
    unstaged = Prober(interactive(144, duration_ms=6000), SearchSettings(), ProbeCache(tmp_path, base), None, "w")
    assert unstaged.full_seconds(144) == pytest.approx(online_s(144, 8000))   # one pass of the rules' set
    assert prober.planned_samples(base) == 952 and unstaged.planned_samples(unstaged.base) == 8000   # what it issues


def test_an_endpoints_probe_is_sampled_and_carries_its_telemetry(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The client's run (here: its report, written after a pause) is sampled as every measured run: the probe's run
    folder holds telemetry.jsonl, and the probe carries its summary."""
    import http.server
    import time

    from tasks.endpoints import probe as endpoints_probe
    from tasks.engines import Endpoint
    from tasks.serving import telemetry
    from tests.local_http import LocalServer

    page = b"vllm:num_requests_running 3\nvllm:num_requests_waiting 5\nvllm:kv_cache_usage_perc 0.875\n"

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: object) -> None:
            pass

    class Engine:
        stall_s = None
        max_lost = None

        def endpoint(self, performance: bool = True) -> Endpoint:
            return Endpoint(server.url, "m", False, False)

        def alive(self) -> bool:
            return True

    def client_run(spec: RunSpec, endpoint: Endpoint, run_dir: Path, **kwargs: object) -> object:
        time.sleep(0.3)
        return read_result(report(run_dir / "report", 40, plain_ms=900, early_stopping_ms=1000), accuracy=False,
                           log=run_dir / "client.log")

    monkeypatch.setattr(telemetry, "INTERVAL_S", 0.05)
    monkeypatch.setattr(telemetry.shutil, "which", lambda name: None)   # the engine's series only, GPUs or not
    monkeypatch.setattr(endpoints_probe.runner, "run", client_run)
    with LocalServer(Metrics) as server:
        probe = endpoints_probe.probe(interactive(40), "probe", 40, Engine(), str(tmp_path), str(tmp_path / "t.json"))
    assert probe.valid and probe.telemetry == {"kv_cache_peak": 0.875, "waiting_peak": 5.0}
    assert (Path(str(probe.run_dir)) / telemetry.FILE).is_file()
