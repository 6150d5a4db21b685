"""Podium drives the real MLCommons endpoints client (`.venv-endpoints`, `make venv-endpoints`): the config it writes
for every scenario and mode of a Qwen3-VL plan passes the client's own `validate-yaml`; an Offline run and a Server
run (with accuracy) against the simulated engine are parsed into the client's own numbers; the predicted seconds of a
run (submission/budget/run_length.py) are what the client's report states, within 5 %, on the accelerated clock; a run
whose samples all fail (an engine answering HTTP 500, which the client still exits 0 on) is an error carrying the
engine's reason; a client past its timeout is ended with its process group, and what a failed client leaves in its
group is killed. About 60 s."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
import yaml

from submission.base.errors import CommandError, RunFailed
from submission.budget import run_length
from submission.plan import model as plans
from submission.results.runs import RunSpec, plan_runs
from submission.rules import load_rules
from tasks.endpoints import config, runner
from tasks.engines import Endpoint
from tests.integration.engines_support import REPO, shopify_store, simulated_engine
from tests.local_http import LocalServer

pytestmark = pytest.mark.integration
BENCH, ROWS, MAX_TOKENS = "qwen3-vl-235b-a22b", 4, 4
PLAN = REPO / "deployments" / "plans" / "qwen3-vl-dynamo-50-50.yaml"


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tokenizer folder (the tiny smoke Llama's) and a Shopify parquet file as staging leaves them."""
    return shopify_store(tmp_path_factory.mktemp("endpoints-runner"), ROWS)


def plan_specs() -> list[RunSpec]:
    """Every run of the shipped Qwen3-VL plan: Offline, Server and Interactive (on the 8k set), each with accuracy."""
    plan = plans.load(PLAN)
    bench = plan.benchmarks[0]
    return plan_runs(plan, bench, load_rules(plan.round), model_sha256="m", engine="e",
                     dataset_sha256={p: "d" for _, kind, p in bench.sources() if kind == "datasets"})


def test_every_scenario_and_mode_gives_a_config_the_client_accepts(client: Path, staged: dict[str, Path],
                                                                   tmp_path: Path) -> None:
    rules = load_rules("v6.1")
    endpoint = Endpoint("http://127.0.0.1:8000", "Qwen/Qwen3-VL-235B-A22B-Instruct", False, False)
    configs = {}
    for spec in plan_specs():
        configs[spec.scenario, spec.mode] = config.client_config(spec, endpoint, tmp_path / spec.key(),
                                                                 staged["tokenizer"])
    assert set(configs) == {(s, "performance") for s in ("Offline", "Server", "Interactive")}   # one run each
    for (scenario, _), c in configs.items():
        runtime, load = c["settings"]["runtime"], c["settings"]["load_pattern"]
        assert (runtime["scheduler_random_seed"], runtime["dataloader_random_seed"]) == \
            (rules.seeds.schedule_rng_seed, rules.seeds.sample_index_rng_seed) != (42, 42)
        assert runtime["min_duration_ms"] == rules.min_duration_ms == 600000
        assert c["submission_ref"] == {"model": BENCH, "ruleset": "mlperf-inference-v6.1"}
        assert c["model_params"] | {"name": "-"} == {
            "name": "-", "tokenizer_name": str(staged["tokenizer"]), "streaming": "on", "max_new_tokens": 150,
            "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.0, "presence_penalty": 0.0,
            "frequency_penalty": 0.0}
        assert load == {"Offline": {"type": "max_throughput", "target_qps": 150.0},
                        "Server": {"type": "poisson", "target_qps": 200.0},
                        "Interactive": {"type": "poisson", "target_qps": 40.0}}[scenario]
        assert c["type"] == ("offline" if scenario == "Offline" else "online")
        name = "shopify_product_catalogue_8k::q3vl" if scenario == "Interactive" else "shopify_product_catalogue::q3vl"
        assert [(d["name"], d["type"]) for d in c["datasets"]] == \
            [(name, "performance"), (name, "accuracy")]   # `--mode both`: the accuracy set after the performance
        assert c["report_dir"].startswith(str(tmp_path))
    broken = dict(configs["Offline", "performance"], settings={"load_pattern": {"type": "poisson", "target_qps": 1}})
    paths = []
    for i, c in enumerate([*configs.values(), broken]):
        (tmp_path / str(i)).mkdir()
        paths.append(config.write_config(c, tmp_path / str(i)))
    checks = [subprocess.Popen([str(client), "validate-yaml", "-c", str(p)], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True) for p in paths]
    outputs = [(check.wait(timeout=60), check.stdout.read()) for check in checks]
    for path, (code, output) in zip(paths[:-1], outputs[:-1], strict=True):
        assert code == 0 and "Config valid" in output, f"{path}: {output[-2000:]}"
    assert outputs[-1][0] != 0 and "Offline benchmarks must use 'max_throughput'" in outputs[-1][1]


def short_spec(scenario: str, data: Path, *, qps: float, duration_ms: int, accuracy: bool = False) -> RunSpec:
    return RunSpec(plan="endpoints", profile="smoke", round="v6.1", system="cpu", benchmark=BENCH, scenario=scenario,
                   mode="performance", with_accuracy=accuracy, harness="endpoints", loadgen_model=BENCH,
                   loadgen_scenario="Offline" if scenario == "Offline" else "Server",
                   user_conf=((f"{BENCH}.{scenario}.target_qps", f"{qps:g}"),
                              (f"{BENCH}.{scenario}.min_duration", str(duration_ms))),
                   dataset=str(data), dataset_sha256="-", model_sha256="-", engine="simulated",
                   max_tokens=MAX_TOKENS, temperature=0.0, max_concurrency=64)


def summary_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "report" / "performance" / "result_summary.json").read_text())


def test_an_offline_run_and_a_server_run_with_accuracy_through_the_client(client: Path, staged: dict[str, Path],
                                                                          tmp_path: Path) -> None:
    offline = short_spec("Offline", staged["data"], qps=20, duration_ms=500)
    server = short_spec("Server", staged["data"], qps=150, duration_ms=5000, accuracy=True)   # one run, both phases
    with simulated_engine() as (_, endpoint):
        results = {spec.scenario: runner.run(spec, endpoint, tmp_path / spec.scenario, tokenizer=staged["tokenizer"],
                                             data_dir=staged["data_dir"], timeout_s=90, client=client)
                   for spec in (offline, server)}
    for scenario, result in results.items():
        summary = summary_of(tmp_path / scenario)
        assert result.qps == summary["qps"] > 0 and result.failed == 0
        assert result.issued == result.completed == summary["n_samples_issued"]
        assert result.wall_s > result.duration_s   # the invocation: start-up, the run, its accuracy phase if any
        for metric in ("ttft", "tpot", "latency"):
            p99 = summary[metric]["early_stopping_percentiles"]["99.0"]
            assert getattr(result, f"{metric}_p99_ms") == (None if p99 is None else p99 / 1e6)
        log = (tmp_path / scenario / runner.LOG).read_text()   # the tokenizer read from its folder, not the hub
        assert f"Tokenizer available for model: {staged['tokenizer']}" in log and "Could not verify" not in log
        written = yaml.safe_load((tmp_path / scenario / "report" / "config.yaml").read_text())["settings"]["runtime"]
        seeds = load_rules("v6.1").seeds   # what the client pinned from its own v6.1 ruleset, equal to Podium's
        assert (written["scheduler_random_seed"], written["dataloader_random_seed"]) == \
            (seeds.schedule_rng_seed, seeds.sample_index_rng_seed)
    rules = load_rules("v6.1")
    for spec in (offline, server):   # the one model of a run's length: the client's own count, exactly
        assert run_length.run_length(spec, rules, rows=ROWS).samples == results[spec.scenario].issued
    assert results["Offline"].issued == 12              # 20 q/s x 0.5 s x 1.1, rounded up to whole data sets of 4
    assert results["Offline"].latency_p99_ms is None    # too few samples for an early-stopping p99 estimate
    # 150 q/s x 5 s x 1.1 in whole data sets: enough for an early-stopping p99 (662 samples at least)
    assert results["Server"].issued >= 825 and results["Server"].issued % ROWS == 0
    assert results["Server"].latency_p99_ms > 0
    scores = json.loads((tmp_path / "Server" / "report" / "accuracy" / "accuracy_results.json").read_text())
    assert results["Server"].accuracy == scores["accuracy_scores"][0]["score"] == 0.0   # the simulated engine's text
    assert results["Offline"].accuracy is None


# An engine whose answers take 1.4 s on its clock: a run at its target, its p99 just under Interactive's 1.5 s bound
SLOW = {"prefill_workers": 1, "prefill_ms": 1, "decode_workers": 1, "decode_slots": 64, "tpot_ms": 1400,
        "tpot_load": 0.0, "output_tokens": 2}
SPEED = 10.0   # the dress rehearsal's clock (PODIUM_CLOCK=x10)


def test_the_predicted_seconds_are_the_duration_the_clients_report_states(client: Path, staged: dict[str, Path],
                                                                        tmp_path: Path) -> None:
    """An Interactive run of 132 samples at 8 q/s (15 s min duration on the client's clock), the client and the engine
    at x10: about 2 s of wall time. The report's `duration_ns` spans the client's schedule and the drain of the
    answers still out; the prediction (its schedule, then the 1.5 s bound) is within 5 % of it, where samples / target
    rate (16.5 s) fell 12 % short of the 18.7 s reported."""
    spec = short_spec("Interactive", staged["data"], qps=8, duration_ms=15_000)
    with simulated_engine(SLOW, speed=SPEED) as (_, endpoint):
        result = runner.run(spec, endpoint, tmp_path, tokenizer=staged["tokenizer"], data_dir=staged["data_dir"],
                            timeout_s=120, client=client, speed=SPEED)
    length = run_length.run_length(spec, load_rules("v6.1"), rows=ROWS)
    reported = summary_of(tmp_path)["duration_ns"] / 1e9
    assert length.samples == result.issued == 132
    assert abs(length.seconds - reported) <= 0.05 * reported, (length.seconds, reported)


def test_the_schedule_podium_sums_is_the_clients_own(client: Path) -> None:
    """The client's own poisson delays from the round's scheduler seed (its `poisson_delay_fn`, in its interpreter):
    the performance phase's, then the accuracy phase's from the same generator."""
    seed = load_rules("v6.1").seeds.schedule_rng_seed
    cases = ((8.0, 132, 4), (200.0, 144867, 48289))   # this file's run; a Qwen3-VL Server run at the plans' 200 q/s
    script = ("import json, random, sys\n"
              "from inference_endpoint.load_generator.delay import poisson_delay_fn\n"
              "for qps, samples, then in json.loads(sys.argv[2]):\n"
              "    delay = poisson_delay_fn(qps, random.Random(int(sys.argv[1])))\n"
              "    print(sum(delay() for _ in range(samples)), sum(delay() for _ in range(then)))\n")
    out = subprocess.run([str(client.parent / "python"), "-c", script, str(seed), json.dumps(cases)],
                         capture_output=True, text=True, check=True, timeout=60).stdout.splitlines()
    for (qps, samples, then), line in zip(cases, out, strict=True):
        performance, accuracy = (int(ns) / 1e9 for ns in line.split())
        assert run_length.schedule_s(seed, qps, samples, then) == (performance, accuracy)


class Refusing(BaseHTTPRequestHandler):
    """An engine that lists its model and answers every request with HTTP 500."""

    protocol_version = "HTTP/1.1"
    REASON = "the engine is out of KV cache blocks"

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send(200, {"object": "list", "data": [{"id": "simulated", "object": "model"}]})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._send(500, {"error": {"message": self.REASON, "code": 500}})

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def refusing_engine() -> Iterator[Endpoint]:
    with LocalServer(Refusing) as server:
        yield Endpoint(server.url, "simulated", False, False)


def test_failed_samples_fail_the_run_with_the_engines_reason(client: Path, staged: dict[str, Path],
                                                             refusing_engine: Endpoint, tmp_path: Path) -> None:
    spec = short_spec("Offline", staged["data"], qps=8, duration_ms=500)
    with pytest.raises(RunFailed) as caught:
        runner.run(spec, refusing_engine, tmp_path, tokenizer=staged["tokenizer"], data_dir=staged["data_dir"],
                   timeout_s=90, client=client)
    assert summary_of(tmp_path)["n_samples_failed"] == 8     # the client itself exits 0 on this run
    assert "8 of 8 samples failed" in str(caught.value) and "8 x HTTP 500" in str(caught.value)
    assert Refusing.REASON in str(caught.value)


def group_gone(group: int, within_s: float = 5) -> bool:
    """Whether nothing of process group `group` is left within `within_s`, once init has reaped what was orphaned."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def fake_client(staged: dict[str, Path], tmp_path: Path, script: str, timeout_s: float) -> tuple[CommandError, int]:
    """Run a shell script as the client (it writes its process group to `group`): the error the run raised, and
    that group."""
    client = tmp_path / "fake-client"
    client.write_text("#!/bin/sh\necho $$ > group\n" + script)
    client.chmod(0o755)
    spec = short_spec("Offline", staged["data"], qps=8, duration_ms=500)
    endpoint = Endpoint("http://127.0.0.1:9", "simulated", False, False)
    with pytest.raises(CommandError) as caught:
        runner.run(spec, endpoint, tmp_path / "run", tokenizer=staged["tokenizer"], data_dir=staged["data_dir"],
                   timeout_s=timeout_s, client=client)
    return caught.value, int((tmp_path / "run" / "group").read_text())


def test_what_a_failed_client_leaves_in_its_group_is_killed(staged: dict[str, Path], tmp_path: Path) -> None:
    """A client whose services missed their start-up limit exited 1 and left its tokenizer process and
    multiprocessing's resource tracker running (the rehearsal found them, 300 MB, after its run)."""
    error, group = fake_client(staged, tmp_path, "sleep 60 &\nexit 1\n", timeout_s=30)
    assert error.returncode == 1
    assert group_gone(group), "the client's leftover is still running"


def test_a_client_past_its_timeout_is_ended_with_its_process_group(staged: dict[str, Path], tmp_path: Path) -> None:
    error, group = fake_client(staged, tmp_path, "sleep 60 &\nsleep 60\n", timeout_s=1)   # a child, then it hangs
    assert error.returncode == runner.TIMED_OUT and "ran past 1 s" in str(error)
    assert group_gone(group), "the client's group is still there"
