"""An engine served as replicas (`engine.replicas`): the plan's checks and counts, each replica's placement (name, node,
GPUs, ports), the Kubernetes objects and Slurm steps made of them, the supervisor that starts a node's replicas, and
the dry run of the seed-shaped 512-replica plans. Nothing here needs a GPU or a cluster."""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s
from typer.testing import CliRunner

from flows.cli import app
from submission.base.errors import LaunchError, PlanError
from submission.budget import cost
from submission.plan import model as plans
from submission.plan.engine_options import KubernetesSettings, SimulatedOptions, VllmOptions
from submission.plan.platforms import NVIDIA
from submission.plan.replicas import Layout, ReplicasSpec, layout, resolve
from submission.plan.slurm_options import SlurmSettings
from tasks.engines import Placement, backend
from tasks.engines.replicas import Replicated, replicated
from tasks.launchers import slurm_cli, slurm_replicas
from tasks.launchers.kubernetes import KubernetesLauncher
from tasks.launchers.kubernetes_manifests import HEAD_LABELS, HOSTNAME
from tasks.launchers.replicas import Readiness, Straggler
from tasks.launchers.slurm import Allocation, SlurmLauncher

REPO = Path(__file__).parents[2]
PLANS = REPO / "deployments" / "plans"
SMOKE = PLANS / "smoke.yaml"
K8S_512, SLURM_512 = PLANS / "gpt-oss-120b-vllm-512.yaml", PLANS / "gpt-oss-120b-vllm-512-slurm.yaml"
runner = CliRunner()


def _plan(engine: dict, nodes: int = 2, description: dict | None = None) -> plans.Plan:
    data = yaml.safe_load(SMOKE.read_text())
    data["systems"][0] |= {"nodes": nodes, "description": description or {}}
    data["benchmarks"][0]["engine"] = engine
    return plans.parse(data, "plan.yaml")


def _error(engine: dict, nodes: int = 2, description: dict | None = None) -> str:
    with pytest.raises(PlanError) as e:
        _plan(engine, nodes, description)
    return str(e.value)


VLLM = {"name": "vllm", "options": {"version": "0.32.0", "gpus_per_node": 8, "tensor_parallel_size": 1}}


# --- the plan ---------------------------------------------------------------------------------------------------
def test_the_layout_resolves_against_the_system_and_counts_readiness_in_replicas() -> None:
    plan = _plan({**VLLM, "replicas": {"per_node": 8, "min_ready": 0.97, "max_lost": 3}}, nodes=4,
                 description={"accelerators_per_node": "8"})
    lay = plan.benchmarks[0].engine.replica_layout()
    assert lay == Layout(per_node=8, nodes=4, gpus=1, min_ready=32, performance_min_ready=32, max_lost=3,
                         head="own-node")   # N: the system's 4 nodes; 0.97 x 32 = 31.04, rounded up
    assert [lay.name(i) for i in (0, 31)] == ["replica-0", "replica-31"]
    assert (lay.node(9), lay.gpu_ids(9), lay.ready_needed(True), lay.ready_needed(False)) == (1, (1,), 32, 32)
    assert lay.per_replica(64.0) == 2.0 and lay.describe() == \
        "32 replicas on 4 nodes (8 a node, 1 GPU(s) each, 32 in all)"
    assert resolve(0.97, 512) == 497 and resolve(496, 512) == 496 and resolve(1.0, 512) == 512
    wide = layout(ReplicasSpec(per_node=2, nodes=3, min_ready=5), VllmOptions(tensor_parallel_size=4))
    assert (wide.count, wide.gpus, wide.gpu_ids(1), wide.gpu_ids(2), wide.min_ready) == \
        (6, 4, (4, 5, 6, 7), (0, 1, 2, 3), 5)
    assert plans.parse(yaml.safe_load(SMOKE.read_text())).benchmarks[0].engine.replica_layout() is None


def test_replicas_that_do_not_fit_the_nodes_are_refused_naming_the_field() -> None:
    nine = _error({**VLLM, "replicas": {"per_node": 9}}, description={"accelerators_per_node": "8"})
    assert "benchmarks.0.engine.replicas.per_node: 9 replicas x 1 GPU(s) = 9 GPUs but a node of system " \
           "'cpu-smoke' has (its description's accelerators_per_node) 8" in nine
    tp2 = _error({**VLLM, "options": {**VLLM["options"], "tensor_parallel_size": 2}, "replicas": {"per_node": 8}})
    assert "replicas.per_node: 8 replicas x 2 GPU(s) = 16 GPUs but options.gpus_per_node gives a node 8" in tp2
    many = _error({**VLLM, "replicas": {"per_node": 1, "nodes": 3}}, nodes=2)
    assert "replicas.nodes: 3 nodes but system 'cpu-smoke' has 2; set that system's nodes: 3" in many


@pytest.mark.parametrize(("replicas", "said"), [
    ({"per_node": 2, "min_ready": 5}, "replicas.min_ready: 5 is over the 4 replicas (2 x 2 nodes)"),
    ({"per_node": 2, "performance_min_ready": 9}, "replicas.performance_min_ready: 9 is over the 4 replicas"),
    ({"per_node": 2, "max_lost": 4}, "replicas.max_lost: 4 would let every one of the 4 replicas die; give at most 3"),
    ({"per_node": 2, "min_ready": 1.5}, "replicas.min_ready: 1.5 is neither a count of replicas"),
    ({"per_node": 2, "min_ready": 0}, "replicas.min_ready: 0 is neither a count of replicas"),
    ({"per_node": 2, "head": "elsewhere"}, "replicas.head: Input should be 'own-node' or 'beside'"),
])
def test_readiness_counts_and_losses_beyond_the_replicas_are_refused(replicas: dict, said: str) -> None:
    assert said in _error({"name": "simulated", "replicas": replicas})


@pytest.mark.parametrize(("engine", "said"), [
    ({"name": "dynamo", "options": {"worker": "mocker", "gpus_per_node": 0, "discovery": "file"}},
     "the dynamo engine serves through its own frontend, which routes over its workers; give it more workers "
     "instead (decode.workers)"),
    ({"name": "smoke"}, "use the simulated engine for replicas on a CPU"),
    ({"name": "trtllm", "options": {"gpus_per_node": 4, "nodes": 2, "disaggregated": {
        "context": {"servers": 1}, "generation": {"servers": 1}}}}, "a disaggregated trtllm deployment"),
    ({"name": "trtllm", "options": {"gpus_per_node": 4, "nodes": 2, "tensor_parallel_size": 8}},
     "one replica of 8 GPUs (tensor x pipeline parallel) spans nodes of 4"),
])
def test_an_engine_whose_one_instance_is_not_one_process_on_one_node_is_refused(engine: dict, said: str) -> None:
    assert said in _error({**engine, "replicas": {"per_node": 1}})


def test_one_url_cannot_reach_every_replica() -> None:
    engine = {**VLLM, "launcher": "kubernetes", "replicas": {"per_node": 2},
              "kubernetes": {"image": "x", "endpoint_url": "http://ingress:80"}}
    assert "kubernetes.endpoint_url: one URL cannot reach each replica; remove it" in _error(engine)


def test_gpu_hours_count_every_replicas_gpus() -> None:
    plan = _plan({**VLLM, "replicas": {"per_node": 3}}, nodes=2)
    assert cost.benchmark_gpus(plan.benchmarks[0]) == 6   # 2 x 3 replicas of 1 GPU, not the options' 8 per node
    assert cost.real_round(plan)["gpus"] == 6


# --- placement ------------------------------------------------------------------------------------------------
def _slurm_like(nodes: int, ports: int) -> Placement:
    from tasks.engines import Node

    per_node = tuple(Node(f"NODE{i}_IPV4", tuple(8000 + p for p in range(ports))) for i in range(nodes))
    return Placement(per_node[0].host, per_node[0].ports, nodes=per_node)


def test_each_replica_has_its_name_node_gpu_block_and_ports() -> None:
    lay = Layout(per_node=4, nodes=2, gpus=2, min_ready=8, performance_min_ready=8, max_lost=0, head="beside")
    options = {"version": "0.32.0", "gpus_per_node": 8, "tensor_parallel_size": 2, "env": {"HF_TOKEN": "x"}}
    be = replicated(backend("vllm"), lay)
    assert be.demand(options) == (2, 4) and replicated(be, lay) is be
    specs = be.processes(options, Path("/m/gpt-oss-120b"), _slurm_like(2, 4))
    assert [s.name for s in specs] == [f"replica-{i}" for i in range(8)]
    assert [(s.replica, s.node_index, s.gpu_ids, s.port) for s in specs] == [
        (i, i // 4, (2 * (i % 4), 2 * (i % 4) + 1), 8000 + i % 4) for i in range(8)]
    for s in specs:
        assert s.env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, s.gpu_ids)) and s.gpus == 2
        assert s.env["HF_TOKEN"] == "x" and s.host == f"NODE{s.node_index}_IPV4"
        assert s.argv[s.argv.index("--port") + 1] == str(s.port)
        assert s.argv[s.argv.index("--host") + 1] == s.host
        assert s.argv[s.argv.index("--tensor-parallel-size") + 1] == "2"   # one replica's parallelism
    endpoint = be.endpoint(options, Path("/m/gpt-oss-120b"), specs)
    assert endpoint.base_url == "http://NODE0_IPV4:8000" and endpoint.request_fields == {"return_token_ids": True}
    assert [(r.name, r.base_url, r.node, r.gpu_ids) for r in endpoint.replicas][5] == \
        ("replica-5", "http://NODE1_IPV4:8001", "node1", (2, 3))


def test_trtllm_and_simulated_replicate_one_server_each() -> None:
    lay = Layout(per_node=2, nodes=1, gpus=4, min_ready=2, performance_min_ready=2, max_lost=0, head="beside")
    options = {"version": "1.2.0", "gpus_per_node": 8, "tensor_parallel_size": 4}
    specs = Replicated(backend("trtllm"), lay).processes(options, Path("/m/x"), _slurm_like(1, 2), Path("/b"))
    assert [(s.name, s.gpu_ids, s.env["CUDA_VISIBLE_DEVICES"], s.port) for s in specs] == [
        ("replica-0", (0, 1, 2, 3), "0,1,2,3", 8000), ("replica-1", (4, 5, 6, 7), "4,5,6,7", 8001)]
    cpu = Layout(per_node=3, nodes=1, gpus=0, min_ready=3, performance_min_ready=3, max_lost=0, head="beside")
    sims = Replicated(backend("simulated"), cpu).processes(SimulatedOptions(), Path("-"), _slurm_like(1, 3))
    assert [(s.port, s.gpu_ids, "CUDA_VISIBLE_DEVICES" in s.env) for s in sims] == [(8000 + i, (), False)
                                                                                   for i in range(3)]


# --- Kubernetes: one pod per replica --------------------------------------------------------------------------
@pytest.mark.parametrize("head", ["own-node", "beside"])
def test_each_replica_is_a_pod_of_its_own_away_from_the_head_when_asked(tmp_path: Path, head: str) -> None:
    lay = Layout(per_node=2, nodes=2, gpus=1, min_ready=4, performance_min_ready=4, max_lost=0, head=head)
    settings = KubernetesSettings(image="vllm/vllm-openai:v0.32.0", namespace="mlperf", model_claim="models")
    where = KubernetesLauncher(tmp_path, settings, engine="vllm", replicas=lay)
    be = replicated(backend("vllm"), lay)
    options = {"version": "0.32.0", "gpus_per_node": 8}
    nodes, ports = be.demand(options)
    specs = be.processes(options, Path("/models/m"), where.placement(ports, nodes=nodes))
    objects = where.objects(specs)
    assert [(o["kind"], o["metadata"]["name"]) for o in objects][1:] == [
        (kind, f"podium-vllm-replica-{i}") for i in range(4) for kind in ("Deployment", "Service")]
    for i, spec in enumerate(specs):
        assert spec.host == f"podium-vllm-replica-{i}.mlperf.svc.cluster.local" and spec.port == 8000
        pod = k8s.V1Deployment.from_dict(objects[1 + 2 * i]).spec.template.spec
        [c] = pod.containers
        assert c.resources.limits == {"nvidia.com/gpu": "1"}   # the device plugin gives the pod its GPU
        assert "CUDA_VISIBLE_DEVICES" not in {e.name for e in c.env}
        if head == "beside":
            assert pod.affinity is None
        else:
            [term] = pod.affinity.pod_anti_affinity.required_during_scheduling_ignored_during_execution
            assert (term.label_selector.match_labels, term.topology_key) == (HEAD_LABELS, HOSTNAME)
    # the label the anti-affinity names is the one the work pool puts on every flow-run pod
    pool = json.loads((REPO / "deployments" / "work-pools" / "kubernetes.json").read_text())
    labels = pool["job_configuration"]["job_manifest"]["spec"]["template"]["metadata"]["labels"]
    assert HEAD_LABELS.items() <= labels.items()


# --- Slurm: one step per node -----------------------------------------------------------------------------------
def test_a_nodes_replicas_become_one_supervisor_step_holding_their_gpus() -> None:
    lay = Layout(per_node=2, nodes=2, gpus=2, min_ready=4, performance_min_ready=4, max_lost=0, head="beside")
    options = {"version": "0.32.0", "gpus_per_node": 4, "tensor_parallel_size": 2,
               "env": {"HF_TOKEN": "hf_planted0123"}, "kv_transfer": {}}
    specs = replicated(backend("vllm"), lay).processes(options, Path("/m"), _slurm_like(2, 4))
    steps = slurm_replicas.node_steps(specs, "python3", NVIDIA)
    assert [(s.name, s.node_index, s.gpus, s.role) for s in steps] == [("replicas-node0", 0, 4, "replicas"),
                                                                       ("replicas-node1", 1, 4, "replicas")]
    step = steps[1]
    assert step.argv[:3] == ("python3", "-c", slurm_replicas.SUPERVISOR)
    children = json.loads(step.argv[3])
    assert [c["name"] for c in children] == ["replica-2", "replica-3"]
    assert [c["gpus"] for c in children] == [[0, 1], [2, 3]]   # positions among the step's GPUs
    assert [c["argv"] for c in children] == [list(s.argv) for s in specs[2:]]
    # values every replica shares go by name (the plan's env among them); only Podium's per-replica ports ride along
    assert "HF_TOKEN" in step.env and "hf_planted0123" not in step.argv[3]
    assert [c["env"] for c in children] == [{"VLLM_NIXL_SIDE_CHANNEL_PORT": p} for p in ("8001", "8003")]
    argv = slurm_cli.review(SlurmSettings(gpus_per_node=4), steps)["srun"]["replicas-node1"]
    assert "--exact" in argv and "--gpus=4" in argv and "--nodelist=node1" in argv
    assert "HF_TOKEN" in next(a for a in argv if a.startswith("--export=ALL,")).split(",")


def test_the_supervisor_gives_each_replica_its_block_of_the_steps_gpus_and_says_when_one_ends(tmp_path: Path) -> None:
    child = ("import os, sys, time; print('gpus', os.environ['CUDA_VISIBLE_DEVICES'], os.environ['OWN'], flush=True);"
             " sys.exit(3) if sys.argv[1] == 'exit' else time.sleep(600)")
    children = [{"name": f"replica-{i}", "argv": [sys.executable, "-c", child, how], "cwd": None,
                 "env": {"OWN": str(i)}, "gpus": gpus, "pin": NVIDIA.pin(gpus)}
                for i, (how, gpus) in enumerate([("exit", [0, 1]), ("serve", [2, 3])])]
    gpus = json.dumps({"visible": "CUDA_VISIBLE_DEVICES", "pin": "CUDA_VISIBLE_DEVICES"})
    log, exits = tmp_path / "replicas-node0.log", slurm_replicas.Exits()
    with log.open("wb") as out:
        supervisor = subprocess.Popen([sys.executable, "-c", slurm_replicas.SUPERVISOR, json.dumps(children), gpus],
                                      env={**os.environ, "CUDA_VISIBLE_DEVICES": "4,5,6,7"}, stdout=out,
                                      stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while ("replica-0" not in exits.scan([log]) or "[replica-1] gpus" not in log.read_text()) \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        assert exits.scan([log]) == {"replica-0": "exited with code 3"}   # the other one keeps running
        assert supervisor.poll() is None
        supervisor.send_signal(signal.SIGTERM)   # as scancel --signal=TERM: every replica gets it
        assert supervisor.wait(timeout=60) == 1
    finally:
        if supervisor.poll() is None:
            os.killpg(supervisor.pid, signal.SIGKILL)
            supervisor.wait()
    text = log.read_text()
    assert "[replica-0] gpus 4,5 0" in text and "[replica-1] gpus 6,7 1" in text
    assert exits.scan([log]) == {"replica-0": "exited with code 3", "replica-1": "killed by signal 15"}
    assert slurm_replicas.replica_tail(log, "replica-1", 5).splitlines() == [
        next(line for line in text.splitlines() if line.startswith("podium-supervisor: replica-1 started")),
        "[replica-1] gpus 6,7 1", "podium-supervisor: replica-1 exited with code -15"]


def test_with_head_own_node_the_node_podium_runs_on_serves_no_replica(tmp_path: Path) -> None:
    lay = Layout(per_node=8, nodes=2, gpus=1, min_ready=16, performance_min_ready=16, max_lost=0, head="own-node")
    alloc = Allocation("7", ("gpu01", "gpu02", "gpu03"), ("10.0.0.1", "10.0.0.2", "10.0.0.3"), False, "t", tmp_path)
    inside = {"SLURM_JOB_ID": "7", "SLURMD_NODENAME": "gpu01"}
    apart = SlurmLauncher(tmp_path, {}, environ=inside, replicas=lay)._head_apart(alloc)
    assert (apart.nodes, apart.hosts, apart.head) == (("gpu02", "gpu03"), ("10.0.0.2", "10.0.0.3"), "gpu01")
    beside = SlurmLauncher(tmp_path, {}, environ=inside, replicas=Layout(**{**lay.__dict__, "head": "beside"}))
    assert beside._head_apart(alloc) == alloc
    outside = SlurmLauncher(tmp_path, {"allocation": "new"}, environ={}, replicas=lay)   # a login host's Podium
    assert outside._head_apart(alloc) == alloc


# --- readiness --------------------------------------------------------------------------------------------------
def test_too_few_ready_replicas_name_every_missing_one() -> None:
    readiness = Readiness(ready=(("replica-0", "gpu01"), ("replica-3", "gpu02")), missing=(
        Straggler("replica-1", "gpu01", "step 7.2 on gpu01", "exited with code 1", "CUDA error: out of memory"),
        Straggler("replica-2", "gpu02", "step 7.3 on gpu02", "not ready after 600 s (GET /health on a:1)")))
    readiness.require(2, "an accuracy run")   # enough
    with pytest.raises(LaunchError) as e:
        readiness.require(4, "a performance run")
    text = str(e.value)
    assert "2 of 4 replicas ready, a performance run needs 4; not ready:" in text
    assert "replica-1 on gpu01 (step 7.2 on gpu01): exited with code 1; last lines of its log:\n" \
           "CUDA error: out of memory" in text
    assert "replica-2 on gpu02 (step 7.3 on gpu02): not ready after 600 s" in text
    assert readiness.names == ("replica-0", "replica-3")


# --- the dry run of the seed-shaped plans ---------------------------------------------------------------------
def _dry_run(plan: Path, tmp_path: Path, *more: str) -> str:
    result = runner.invoke(app, ["launch", str(plan), "--dry-run", *more, "--workspace", str(tmp_path / "ws")])
    assert result.exit_code == 0, result.output
    return result.output


def test_the_512_replica_plan_dry_runs_every_replica_its_manifests_and_its_cost(tmp_path: Path) -> None:
    plan = plans.load(K8S_512)
    bench = plan.benchmarks[0]
    text = _dry_run(K8S_512, tmp_path)
    assert "512 replicas on 64 nodes (8 a node, 1 GPU(s) each, 512 in all)" in text
    rows = re.findall(r"^    (\d+) +podium-vllm-<replica>\.mlperf\.svc\.cluster\.local +replica-(\d+) \.\. "
                      r"replica-(\d+) +0 1 2 3 4 5 6 7 +8000 each$", text, re.MULTILINE)
    assert rows == [(str(n), str(8 * n), str(8 * n + 7)) for n in range(64)]
    assert text.count("argv: vllm serve") == 1   # one replica's process in full, not 512
    assert "kubernetes objects: Secret podium-vllm-env, 512 Deployments (podium-vllm-replica-0 .. " \
           "podium-vllm-replica-511), 512 Services" in text
    assert "head (LoadGen and the dispatch, no model): own-node: in the flow pod; every replica pod keeps off" in text
    assert "ready before accuracy runs and audits: 496 of 512; before performance runs: 512" in text
    assert "Offline per replica (the plan's rates are the whole system's): target_qps 10.625" in text
    seconds = {}
    for s, length in cost.predicted_runs(plan, bench):
        seconds[s.scenario] = seconds.get(s.scenario, 0) + length.seconds
    for scenario, s in seconds.items():   # GPU-hours of the whole system: 512 GPUs
        assert f"predicted {scenario}: 4 run(s), {s:.0f} s, {cost.gpu_hours(s, 512):g} GPU-hours" in text
    assert "GPU-hours on 512 GPUs" in text
    [review] = json.loads(_dry_run(K8S_512, tmp_path, "--json"))
    listed = review["replicas"]["list"]
    assert len(listed) == 512 == len(review["processes"]) and review["replicas"]["min_ready"] == 496
    assert listed[509] == {"name": "replica-509", "node": 63, "host": "podium-vllm-replica-509.mlperf.svc.cluster."
                           "local", "port": 8000, "gpu_ids": [5]}
    kinds = [o["kind"] for o in review["kubernetes"]]
    assert kinds.count("Deployment") == kinds.count("Service") == 512
    assert review["predicted"]["gpus"] == 512


def test_the_slurm_variant_dry_runs_one_step_per_node(tmp_path: Path) -> None:
    text = _dry_run(SLURM_512, tmp_path)
    assert "512 replicas on 64 nodes" in text
    assert "Slurm: 64 step(s), one per node, each a supervisor" in text
    assert [int(n) for n in re.findall(r"^    step replicas-node(\d+) on node\1: 8 GPU\(s\)$", text, re.MULTILINE)] \
        == list(range(64))
    assert "sbatch --nodes=65 " in text   # inside the job the head keeps a node of its own
    [review] = json.loads(_dry_run(SLURM_512, tmp_path, "--json"))
    srun = review["slurm"]["srun"]
    assert sorted(srun) == sorted(f"replicas-node{n}" for n in range(64))
    children = json.loads(srun["replicas-node3"][-2])   # then the GPU variables
    assert [c["name"] for c in children] == [f"replica-{i}" for i in range(24, 32)]
    assert [c["gpus"] for c in children] == [[i] for i in range(8)]
    assert all(c["argv"][c["argv"].index("--host") + 1] == "NODE3_IPV4" for c in children)
    assert len({c["argv"][c["argv"].index("--port") + 1] for c in children}) == 8


def test_a_plan_without_replicas_reviews_as_before(tmp_path: Path) -> None:
    data = yaml.safe_load(K8S_512.read_text())
    one = copy.deepcopy(data)
    del one["benchmarks"][0]["engine"]["replicas"]
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump(one))
    text = _dry_run(path, tmp_path)
    assert "replicas on" not in text and "[node 0] vllm-server (server)" in text
    assert "GPU-hours on 8 GPUs" in text
