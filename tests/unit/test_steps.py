"""A plan's N-node step (submission/plan/steps.py) on the shipped plans of replicas: the rates, the concurrency and the
readiness counts scaled and rounded, the names suffixed, the bad steps refused naming the fix; the MI355X plans' N=1
and N=8 steps loaded; the 64-replica smoke plan's dry run; the ladder's sizes and where it stops (flows/scaling.py)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from flows.scaling import climb, verdict
from submission.base.errors import PlanError
from submission.plan import model as plans
from submission.plan.steps import at_nodes, ladder_steps

PLANS = Path(__file__).parents[2] / "deployments" / "plans"
GPT_OSS = PLANS / "gpt-oss-120b-vllm-512.yaml"       # 8 replicas a node on 64 nodes
DEEPSEEK = PLANS / "deepseek-r1-sglang-512.yaml"     # 1 replica a node on 64 nodes
SLURM = PLANS / "gpt-oss-120b-vllm-512-slurm.yaml"
SCALE_SIM = PLANS / "scale-sim-64.yaml"


def _data(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def test_a_step_scales_the_rates_and_the_concurrency_with_the_nodes() -> None:
    plan = _data(GPT_OSS)
    step = at_nodes(plan, 3)["benchmarks"][0]
    offline, server = step["scenarios"]["Offline"], step["scenarios"]["Server"]
    # 3 of 64 nodes: 5440 x 3/64 = 255, 4212.43 x 3/64 = 197.4577 (to 3 places), 4000 x 3/64 = 187.5
    assert (offline["target_qps"], offline["expected_qps"], server["target_qps"]) == (255.0, 197.458, 187.5)
    # in flight: 32768 x 3/64 = 1536; client processes: 16 x 3/64 = 0.75, rounded up to 1
    assert (offline["max_concurrency"], offline["harness_workers"]) == (1536, 1)
    assert (server["max_concurrency"], server["harness_workers"]) == (1536, 1)
    # one replica's engine, the data and the model stay as they are
    assert step["engine"]["options"] == plan["benchmarks"][0]["engine"]["options"]
    assert (step["dataset"], step["model"]) == (plan["benchmarks"][0]["dataset"], plan["benchmarks"][0]["model"])
    assert plan == _data(GPT_OSS)   # pure: the plan given is not changed


def test_readiness_counts_round_up_losses_round_down_and_fractions_stay() -> None:
    replicas = at_nodes(_data(GPT_OSS), 3)["benchmarks"][0]["engine"]["replicas"]
    # min_ready 496 x 3/64 = 23.25 -> 24 of the 24 replicas; max_lost 8 x 3/64 = 0.375 -> 0; 1.0 is a fraction
    assert [replicas[k] for k in ("per_node", "nodes", "min_ready", "performance_min_ready", "max_lost")] == \
        [8, 3, 24, 1.0, 0]
    data = _data(DEEPSEEK)
    data["benchmarks"][0]["engine"]["replicas"].update(min_ready=63, max_lost=60)
    replicas = at_nodes(data, 8)["benchmarks"][0]["engine"]["replicas"]
    # 63 x 8/64 = 7.875 -> 8 (at most the 8 replicas); 60 x 8/64 = 7.5 -> 7, under the 8 replicas
    assert (replicas["min_ready"], replicas["max_lost"]) == (8, 7)
    replicas = at_nodes(data, 1)["benchmarks"][0]["engine"]["replicas"]
    assert (replicas["min_ready"], replicas["max_lost"]) == (1, 0)   # one replica: it must serve, none may be lost


def test_a_step_suffixes_the_plan_and_its_stepped_systems_and_leaves_the_others() -> None:
    data = _data(GPT_OSS)
    other = copy.deepcopy(data["benchmarks"][0])
    del other["engine"]["replicas"]
    other["system"] = "one-node"
    data["systems"].append({"name": "one-node", "nodes": 1, "description": {}})
    data["benchmarks"].append(other)
    step = at_nodes(data, 8)
    assert step["name"] == "gpt-oss-120b-vllm-512-n8"
    assert [(s["name"], s["nodes"]) for s in step["systems"]] == [("mi355x-vllm-k8s-n8", 8), ("one-node", 1)]
    assert [b["system"] for b in step["benchmarks"]] == ["mi355x-vllm-k8s-n8", "one-node"]
    assert step["benchmarks"][1] == other   # the system without replicas is not stepped
    assert at_nodes(_data(GPT_OSS), 64) == _data(GPT_OSS)   # the full step is the plan itself, its names too


def test_an_explicit_slurm_node_count_keeps_the_heads_node() -> None:
    data = _data(SLURM)
    data["benchmarks"][0]["engine"].setdefault("slurm", {})["nodes"] = 65   # 64 of replicas and the head's own
    assert at_nodes(data, 8)["benchmarks"][0]["engine"]["slurm"]["nodes"] == 9


@pytest.mark.parametrize("nodes", [0, -1, 65])
def test_a_step_off_the_plans_nodes_is_refused_naming_the_range(nodes: int) -> None:
    with pytest.raises(PlanError) as caught:
        at_nodes(_data(GPT_OSS), nodes)
    assert caught.value.message == f"--nodes {nodes}: a step is 1 to the replicas' nodes (mi355x-vllm-k8s: 64)"
    assert caught.value.fix == "give a step between 1 and the plan's nodes"


def test_the_commands_refuse_a_bad_step_before_anything_is_built(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    for argv in (["rehearse", str(GPT_OSS), "--clock", "real", "--nodes", "65"],
                 ["launch", str(DEEPSEEK), "--dry-run", "--nodes", "0"],
                 ["ladder", str(DEEPSEEK), "--steps", "1,65"]):
        result = CliRunner().invoke(app, [*argv, "--workspace", str(ws)])
        assert result.exit_code == PlanError.exit_code == 2, result.output
        assert "fix: " in result.output and not ws.exists(), result.output   # no data set built, no workspace


def test_a_plan_without_replicas_has_no_steps() -> None:
    with pytest.raises(PlanError) as caught:
        at_nodes(_data(PLANS / "smoke.yaml"), 1)
    assert "no system of the plan serves its benchmarks as engine.replicas" in caught.value.message
    assert caught.value.fix == "give its engine replicas (docs/replicas.md), or leave out --nodes"


def test_benchmarks_of_one_system_on_different_nodes_are_refused() -> None:
    data = _data(GPT_OSS)
    twin = copy.deepcopy(data["benchmarks"][0])
    twin["engine"]["replicas"]["nodes"] = 32
    data["benchmarks"].append(twin)
    with pytest.raises(PlanError, match=r"'mi355x-vllm-k8s': its benchmarks' replicas span \[32, 64\] nodes"):
        at_nodes(data, 8)


@pytest.mark.parametrize(("path", "nodes", "replicas", "min_ready", "max_lost", "offline_qps"), [
    (GPT_OSS, 1, 8, 8, 0, 85.0), (GPT_OSS, 8, 64, 62, 1, 680.0), (GPT_OSS, 64, 512, 496, 8, 5440.0),
    (DEEPSEEK, 1, 1, 1, 0, 11.875), (DEEPSEEK, 8, 8, 8, 0, 95.0), (DEEPSEEK, 64, 64, 62, 1, 760.0)])
def test_the_mi355x_plans_steps_load(path: Path, nodes: int, replicas: int, min_ready: int, max_lost: int,
                                     offline_qps: float) -> None:
    step = plans.parse(at_nodes(plans.read(path), nodes), str(path))
    bench = step.benchmarks[0]
    layout = bench.engine.replica_layout()
    assert (layout.nodes, layout.count, layout.min_ready, layout.performance_min_ready, layout.max_lost) == \
        (nodes, replicas, min_ready, replicas, max_lost)
    assert step.systems[0].nodes == nodes and bench.scenarios["Offline"].target_qps == offline_qps


def test_the_64_replica_smoke_plan_dry_runs_its_replicas_on_16_nodes(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["launch", str(SCALE_SIM), "--dry-run", "--workspace", str(tmp_path / "ws")])
    assert result.exit_code == 0, result.output
    assert "64 replicas on 16 nodes (4 a node, no GPU)" in result.output
    assert "    15    127.0.0.1" in result.output and "replica-60 .. replica-63" in result.output
    assert "ready before accuracy runs and audits: 64 of 64; before performance runs: 64" in result.output
    assert "Offline per replica (the plan's rates are the whole system's): target_qps 18.75" in result.output
    step = CliRunner().invoke(app, ["launch", str(SCALE_SIM), "--dry-run", "--nodes", "8",
                                    "--workspace", str(tmp_path / "ws")])
    assert step.exit_code == 0, step.output
    assert "cpu-sim-64-n8/gpt-oss-120b" in step.output and "32 replicas on 8 nodes (4 a node, no GPU)" in step.output


# --- the ladder's sizes and where it stops (flows/scaling.py) -----------------------------------------------------
def test_the_ladder_climbs_1_8_and_the_full_size_and_refuses_sizes_off_the_plan() -> None:
    assert ladder_steps(None, 64) == [1, 8, 64] and ladder_steps(None, 8) == [1, 8] and ladder_steps(None, 2) == [1, 2]
    assert ladder_steps([8, 2, 2], 16) == [2, 8]
    with pytest.raises(PlanError) as caught:
        ladder_steps([1, 65], 64)
    assert "each must lie in 1..64" in caught.value.message and caught.value.fix == "pass steps within them, e.g. " \
                                                                                    "--steps 1,8,64"


def test_the_ladder_stops_at_its_first_sub_linear_step() -> None:
    totals = {1: 100.0, 8: 780.0, 16: 1300.0, 64: 5200.0}   # a node: 100, 97.5, 81.25, 81.25
    asked: list[int] = []

    def measure_at(n: int) -> tuple[float, dict]:
        asked.append(n)
        return totals[n], {"replicas": 8 * n}

    rows, left = climb([1, 8, 16, 64], measure_at, 0.95)
    assert asked == [1, 8, 16] and left == [64]   # the 64-node size is never run
    assert [(r["nodes"], r["replicas"], r["per_node"], r["linear"]) for r in rows] == \
        [(1, 8, 100.0, True), (8, 64, 97.5, True), (16, 128, 81.25, False)]
    assert rows[0]["vs_previous"] is None and rows[1]["vs_previous"] == 0.975
    assert rows[2]["vs_previous"] == pytest.approx(81.25 / 97.5)
    assert verdict(rows, left, 0.95, 64) == ("SUB-LINEAR at 16 nodes: 0.833 of the rate a node at 8 node(s), under "
                                             "the floor 0.95; not run: 64 nodes")
    rows, left = climb([1, 8], measure_at, 0.95)
    assert left == [] and verdict(rows, left, 0.95, 64).startswith("LINEAR within 5%")
    with pytest.raises(PlanError, match="the Offline run at 1 node"):
        climb([1], lambda n: (None, {}), 0.95)
