"""The peak-QPS search, the prefill:decode sweep and the scaling check for real: Prefect flows, the real loadgen
through Podium's harness, and the simulated server (a real HTTP server on 127.0.0.1) whose right answer is known
exactly: `max_valid_qps` replays loadgen's own schedule through the same queueing model with loadgen's own rules.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from submission.base.errors import RunFailed
from submission.rules import load_rules
from tasks.engines.simulated import config
from tasks.engines.simulated.queueing import Protocol, loadgen_schedule, max_valid_qps
from tasks.reporting.figures import DPI
from tasks.tuning.bisection import round_qps

pytestmark = pytest.mark.integration
RULES = load_rules("v6.1")
SEED = RULES.seeds.schedule_rng_seed
SERVER = RULES.benchmark("gpt-oss-120b").scenario("Server")
SAMPLES = 32
TOKENS = 16
# decode-bound: 2 decode workers x 32 slots at 30 ms per token (60 ms in a full batch), 16 tokens: capacity 71 q/s.
# TPOT may reach the 80 ms limit with 300 ms of waiting per answer: CPU stalls of the shared test machine fit in it.
SEARCH_ENGINE = {"prefill_workers": 1, "prefill_ms": 3, "decode_workers": 2, "decode_slots": 32, "tpot_ms": 30,
                 "tpot_load": 1.0, "output_tokens": TOKENS, "chunk_tokens": 5}


def sim_plan(tmp: Path, engine: dict, *, server_queries: int, name: str = "sim") -> Path:
    """A plan for the simulated engine over a 32-prompt data set in the gpt-oss-120b schema."""
    data = tmp / "perf.parquet"
    if not data.exists():
        rng = np.random.default_rng(0)
        prompts = [rng.integers(3, 900, size=int(rng.integers(5, 40))).tolist() for _ in range(SAMPLES)]
        pq.write_table(pa.table({"input_tokens": pa.array(prompts, type=pa.list_(pa.int32()))}), data)
        (tmp / "model").mkdir(exist_ok=True)
        (tmp / "model" / "README").write_text("the simulated engine serves no weights\n")
    plan = {"name": name, "round": "v6.1", "division": "open", "profile": "smoke", "submitter": "Podium",
            "systems": [{"name": "cpu-sim"}],
            "benchmarks": [{"benchmark": "gpt-oss-120b", "system": "cpu-sim",
                            "engine": {"name": "simulated", "options": engine},
                            "model": {"name": "sim", "source": str(tmp / "model")},
                            "dataset": {"performance": str(data), "accuracy": str(data)},
                            "generation": {"max_tokens": TOKENS, "temperature": 0}, "accuracy": False,
                            "loadgen": {"min_duration_ms": 1000, "performance_sample_count": SAMPLES},
                            "scenarios": {"Offline": {"target_qps": 100, "max_concurrency": 512},
                                          "Server": {"target_qps": 50, "min_query_count": server_queries,
                                                     "max_concurrency": 512}}}],
            "storage": {"bucket": "podium", "embedded": True}}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def known(engine: dict, queries: int) -> float:
    """The highest target_qps loadgen calls VALID for a Server run of `queries` queries against `engine`."""
    protocol = Protocol(SERVER.ttft_ms, SERVER.tpot_ms, 1000, queries, SAMPLES, SEED, max_tokens=TOKENS)
    return max_valid_qps(config(engine), protocol)


CHILD = """
import json, sys, threading, queue, time
import mlperf_loadgen as lg, numpy as np
out, qps = sys.argv[1], float(sys.argv[2])
open("user.conf", "w").write(f"gpt-oss-120b.Server.target_qps = {qps}\\ngpt-oss-120b.Server.min_duration = 100\\n"
                             "gpt-oss-120b.Server.min_query_count = 500\\n"
                             "gpt-oss-120b.*.performance_sample_count_override = 32\\n")
s = lg.TestSettings(); s.FromConfig("user.conf", "gpt-oss-120b", "Server")
s.scenario, s.mode = lg.TestScenario.Server, lg.TestMode.PerformanceOnly
times, todo = [], queue.Queue()
def answer():
    while (ids := todo.get()) is not None:
        for i in ids:
            d = np.array([1, 2, 3], dtype=np.int32)
            lg.FirstTokenComplete([lg.QuerySampleResponse(i, d.ctypes.data, 4, 1)])
            lg.QuerySamplesComplete([lg.QuerySampleResponse(i, d.ctypes.data, 12, 3)])
worker = threading.Thread(target=answer); worker.start()
def issue(samples):
    times.append(time.monotonic_ns()); todo.put([x.id for x in samples])
sut = lg.ConstructSUT(issue, lambda: None); qsl = lg.ConstructQSL(32, 32, lambda x: None, lambda x: None)
log = lg.LogSettings(); log.log_output.outdir = "."; log.log_output.copy_summary_to_stdout = False
lg.StartTestWithLogSettings(sut, qsl, s, log); todo.put(None); worker.join()
json.dump([(t - times[0]) / 1e9 for t in times], open(out, "w"))
"""


def test_loadgen_s_schedule_is_rebuilt_from_the_seed(tmp_path: Path) -> None:
    """Loadgen's Server issue times (a SUT that answers at once) are the schedule `loadgen_schedule` computes: half
    of them within a millisecond, none more than 5 ms early; a busy machine delays some (loadgen's issue thread
    waits for a core), never the schedule itself. Another seed's schedule is tens of milliseconds away."""
    subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "t.json"), "400"], cwd=tmp_path, check=True,
                   timeout=60, capture_output=True)
    issued = np.array(json.loads((tmp_path / "t.json").read_text()))
    assert len(issued) == 512                                    # 500 padded to whole 32-sample permutations

    def late(seed: int) -> np.ndarray:
        off = issued - loadgen_schedule(seed, 400.0, len(issued))
        return off - np.median(off)   # the first issue is the clock's zero, and it may itself be late

    ours, other = late(SEED), late(SEED + 1)
    assert np.median(np.abs(ours)) < 0.001 and ours.min() > -0.005
    assert np.median(np.abs(other)) > 0.01


def test_search_finds_the_known_peak_and_a_rerun_probes_nothing(prefect_server: None, tmp_path: Path) -> None:
    from flows.search import search_peak_qps

    plan = sim_plan(tmp_path, SEARCH_ENGINE, server_queries=1024)
    settings = {"precision": 0.06, "probe_queries": 640, "probe_duration_ms": 1000}
    state = search_peak_qps(str(plan), scenario="Server", workspace=str(tmp_path / "ws"), settings=settings,
                            return_state=True)
    out = state.result()
    assert state.message == out["summary"].splitlines()[0] and " q/s confirmed by a full-length run" in state.message
    peak = known(SEARCH_ENGINE, 1024)
    trace = out["trace"]
    assert out["confirmed"], out["summary"]
    # within the set precision under the true peak (plus 3 % for the live harness's own latency)
    assert peak * (1 - 0.06 - 0.03) <= out["qps"] <= peak * 1.01, (peak, out["summary"], trace)
    assert trace[0]["stage"] == "offline" and trace[-1]["stage"] == "confirm" and trace[-1]["valid"]
    assert trace[1]["target_qps"] == round_qps(out["offline_qps"])   # the bracket starts at the Offline throughput
    assert out["server_offline_ratio"] > 0                     # Server tokens/s over the Offline run's
    assert Path(out["plot"]).is_file() and out["runs"] == len(trace) and out["engine_launches"] == 1

    again = search_peak_qps(str(plan), scenario="Server", workspace=str(tmp_path / "ws"), settings=settings)
    assert again["runs"] == 0 and again["engine_launches"] == 0        # every verdict from the probe cache
    assert again["qps"] == out["qps"] and all(r["cached"] for r in again["trace"])
    assert [r["target_qps"] for r in again["trace"]] == [r["target_qps"] for r in trace]


def test_sweep_picks_the_known_best_split(prefect_server: None, tmp_path: Path) -> None:
    """Three 'GPUs': 2 prefill + 1 decode worker, or 1 + 2. Decode is the bottleneck, so 1:2 wins, and each
    split's peak is its known one."""
    from flows.search import sweep_prefill_decode

    per_worker = {"prefill_ms": 4, "decode_slots": 40, "tpot_ms": 30, "tpot_load": 1.0, "output_tokens": TOKENS,
                  "chunk_tokens": 5}
    plan = sim_plan(tmp_path, per_worker, server_queries=480, name="sweep")   # confirmations are probe-length here
    settings = {"precision": 0.2, "probe_queries": 480, "probe_duration_ms": 1000}
    state = sweep_prefill_decode(str(plan), scenario="Server", workspace=str(tmp_path / "ws"), gpus=3,
                                 settings=settings, return_state=True)
    out = state.result()
    assert state.message.startswith("prefill:decode sweep of cpu-sim/gpt-oss-120b Server on 3 GPUs: best 33:67 (1P")
    # at most 2 x (24 probes + 2 full-length runs + the Offline run)
    assert _progress(state) == (100, f"{sum(r['runs'] for r in out['rows'])} of at most 54 runs done: finished")
    rows = {r["ratio"]: r for r in out["rows"]}
    assert set(rows) == {"67:33", "33:67"}
    for ratio, row in rows.items():
        peak = known(row["options"], 480)
        assert row["confirmed"] and peak * (1 - 0.2 - 0.03) <= row["qps"] <= peak * 1.01, (ratio, peak, row)
    assert out["best"]["ratio"] == "33:67" and out["best"]["decode"] == 2
    fragment = yaml.safe_load(Path(out["fragment"]).read_text())
    winner = fragment["benchmarks"][0]
    assert winner["engine"]["options"]["decode_workers"] == 2 and winner["engine"]["options"]["prefill_workers"] == 1
    assert winner["scenarios"]["Server"]["target_qps"] == out["best"]["qps"]
    assert Path(out["plot"]).is_file()
    # each split's row carries the telemetry of the run that stands for it; the page puts both splits side by side
    for row in rows.values():
        assert 0 < row["kv_cache_peak"] <= 1 and (Path(row["telemetry_run"]) / "telemetry.jsonl").is_file(), row
    page = Path(out["telemetry_plot"]).read_bytes()
    assert int.from_bytes(page[16:20], "big") == round(2 * 4.2 * DPI)   # the PNG's width: one column per split


def _progress(state: object) -> tuple[float, str]:
    """The progress artifact of the flow run that ended in `state`: (percent, description)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterType

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id]),   # type: ignore[attr-defined]
            type=ArtifactFilterType(any_=["progress"])))
    assert len(found) == 1, found
    return found[0].data, found[0].description


def test_podium_scale_gates_efficiency(prefect_server: None, tmp_path: Path) -> None:
    """Offline at 1 and 2 nodes of a deployment that loses 30 % per added node: efficiency ~0.7, under 0.95."""
    from typer.testing import CliRunner

    from flows.cli import app

    plan = sim_plan(tmp_path, {**SEARCH_ENGINE, "node_efficiency": 0.7}, server_queries=640, name="scale")
    result = CliRunner().invoke(app, ["scale", str(plan), "--nodes", "1,2", "--gpus-per-node", "4",
                                      "--workspace", str(tmp_path / "ws"), "--json"])
    assert result.exit_code == RunFailed.exit_code, result.output      # the gate failed: exit non-zero
    text = result.output
    data = json.loads(text[text.index('{\n  "rows"'): text.rindex("\n}") + 2])
    rows = {r["nodes"]: r for r in data["rows"]}
    assert 0.55 <= rows[2]["efficiency"] <= 0.85
    assert rows[2]["per_gpu"] == pytest.approx(rows[2]["metric"] / 8)
    assert data["passed"] is False and data["gates"][0]["passed"] is False and data["floor"] == 0.95
