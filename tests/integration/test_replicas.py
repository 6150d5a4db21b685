"""An engine's replicas launched for real: simulated replicas on this host (the local launcher, nodes as labels), on
the local 4-node Slurm cluster (one supervisor step per node, each replica with its block of the step's GPUs), and as
one pod each against the fake Kubernetes API; each replica judged ready on its own, the ones that never are named
(node, pid, step or pod, why, log tail) without holding up the launch; a replica killed later is named by `down`."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import yaml

from submission.base.errors import LaunchError
from submission.plan.engine_options import KubernetesSettings
from submission.plan.replicas import Layout
from tasks.engines import HttpProbe, ProcessSpec, backend
from tasks.engines.replicas import Replicated
from tasks.launchers import launcher, start_ready, start_replicas
from tasks.launchers.local import LocalLauncher
from tasks.launchers.slurm import SlurmLauncher
from tests.integration.engines_support import engine_python, simulated_engine
from tests.integration.fake_kube import FakeApiServer, grant

pytestmark = pytest.mark.integration
LOG = logging.getLogger("test.replicas")
REPO = Path(__file__).parents[2]
RBAC = REPO / "deployments" / "kubernetes" / "rbac.yaml"
K8S_512 = REPO / "deployments" / "plans" / "gpt-oss-120b-vllm-512.yaml"


def _layout(per_node: int, nodes: int, gpus: int = 0, head: str = "beside") -> Layout:
    count = per_node * nodes
    return Layout(per_node=per_node, nodes=nodes, gpus=gpus, min_ready=count, performance_min_ready=count,
                  max_lost=0, head=head)


def _until(condition: Callable[[], object], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def _generates(base_url: str) -> bool:
    r = httpx.post(f"{base_url}/v1/completions", json={"model": "simulated", "prompt": [1, 2], "max_tokens": 2},
                   timeout=30)
    return r.status_code == 200 and r.json()["choices"][0]["text"] is not None


def _pid_on_port(port: int) -> int:
    """The simulated server serving `port` (its command line names the port)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            args = cmdline.read_bytes().decode(errors="replace").split("\0")
            if "tasks.engines.simulated.server" in args and args[args.index("--port") + 1] == str(port):
                return int(cmdline.parent.name)
    raise AssertionError(f"no simulated server on port {port}")


# --- on this host -----------------------------------------------------------------------------------------------
def test_local_replicas_start_each_on_its_own_port_and_a_dead_one_is_named(tmp_path: Path) -> None:
    where = LocalLauncher(tmp_path / "pids", grace_s=5, replicas=_layout(2, 2))
    deployment, endpoint, readiness = start_replicas(backend("simulated"), {}, Path("-"), where, tmp_path / "logs",
                                                     LOG, timeout_s=120)
    try:
        assert readiness.missing == () and readiness.names == ("replica-0", "replica-1", "replica-2", "replica-3")
        assert [(r.name, r.node) for r in endpoint.replicas] == [("replica-0", "node0"), ("replica-1", "node0"),
                                                                 ("replica-2", "node1"), ("replica-3", "node1")]
        assert endpoint.base_url == endpoint.replicas[0].base_url
        assert len({r.base_url for r in endpoint.replicas}) == 4 and all(_generates(r.base_url)
                                                                         for r in endpoint.replicas)
        assert endpoint.watched.nodes == ("node0", "node1")
        assert where.down(deployment) == {} and where.alive(deployment)
        victim = deployment.running[1]
        os.killpg(victim.popen.pid, signal.SIGKILL)
        _until(lambda: where.down(deployment))
        assert where.down(deployment) == {"replica-1": "killed by signal 9"} and not where.alive(deployment)
        assert _generates(endpoint.replicas[2].base_url)   # the others serve on
    finally:
        where.stop(deployment)
    assert all(r.popen.poll() is not None for r in deployment.running)


def test_replicas_that_never_become_ready_are_named_and_do_not_hold_up_the_launch(tmp_path: Path) -> None:
    """replica-1 loads for ever, replica-2 exits: both named with their pid, why and log, the two others ready."""
    where = LocalLauncher(tmp_path / "pids", grace_s=5, replicas=_layout(4, 1))
    be = Replicated(backend("simulated"), where.replicas)
    nodes, ports = be.demand({})
    specs = be.processes({}, Path("-"), where.placement(ports, nodes=nodes))
    slow = "import time; print('loading weights', flush=True); time.sleep(600)"
    broken = "import sys; print('CUDA error: out of memory', flush=True); sys.exit(3)"
    specs[1] = dataclasses.replace(specs[1], argv=(sys.executable, "-c", slow))
    specs[2] = dataclasses.replace(specs[2], argv=(sys.executable, "-c", broken))
    deployment = where.start(specs, tmp_path / "logs", LOG)
    try:
        readiness = where.wait_replicas(deployment, timeout_s=20)
    finally:
        where.stop(deployment)
    assert readiness.names == ("replica-0", "replica-3")
    slow_one, broken_one = readiness.missing
    assert (slow_one.name, slow_one.node) == ("replica-1", where.node_names()[0])
    assert slow_one.why == f"not ready after 20 s (GET /health on 127.0.0.1:{specs[1].port})"
    assert slow_one.where.startswith(f"pid {deployment.running[1].popen.pid}")
    assert "loading weights" in slow_one.log_tail
    assert (broken_one.name, broken_one.why) == ("replica-2", "exited with code 3")
    assert "CUDA error: out of memory" in broken_one.log_tail
    readiness.require(2, "an accuracy run")
    with pytest.raises(LaunchError, match=r"(?s)2 of 4 replicas ready, a performance run needs 4; not ready:\n"
                                          r"replica-1 on .*loading weights\nreplica-2 on .*: exited with code 3"):
        readiness.require(4, "a performance run")


class OneBroken(Replicated):
    """Simulated replicas, the last of which exits at once."""

    def processes(self, *args: object, **kwargs: object) -> list[ProcessSpec]:
        specs = super().processes(*args, **kwargs)   # type: ignore[arg-type]
        return [*specs[:-1], dataclasses.replace(specs[-1], argv=(sys.executable, "-c", "exit(5)"))]


def test_start_ready_requires_every_replica_and_stops_them_all_when_one_is_missing(tmp_path: Path) -> None:
    where = LocalLauncher(tmp_path / "pids", grace_s=5, replicas=_layout(2, 1))
    with pytest.raises(LaunchError, match=r"1 of 2 replicas ready, the launch needs 2; not ready:\n"
                                          r"replica-1 on .*: exited with code 5"):
        start_ready(OneBroken(backend("simulated"), where.replicas), {}, Path("-"), where, tmp_path / "logs", LOG,
                    timeout_s=120)
    assert not list((tmp_path / "pids").glob("*.json"))   # every replica's process ended, none on record


# --- Kubernetes: one pod per replica, against the fake API server -------------------------------------------------
def test_kubernetes_replicas_ready_through_their_services_and_the_missing_one_named(tmp_path: Path) -> None:
    with FakeApiServer() as api, simulated_engine() as (_, first), simulated_engine() as (_, second):
        token = grant(api.cluster, [d for d in yaml.safe_load_all(RBAC.read_text()) if d], namespace="podium-test")
        settings = KubernetesSettings.model_validate({
            "image": "registry.example/podium-sim:1", "namespace": "podium-test", "name": "podium-simulated",
            "shm_gib": 0, "kubeconfig": str(api.kubeconfig(tmp_path / "kubeconfig", token))})
        for name, end in (("podium-simulated-replica-0", first), ("podium-simulated-replica-1", second)):
            host, port = end.base_url.removeprefix("http://").split(":")
            api.cluster.services[name] = (host, int(port))   # replica-2's Service never gets an endpoint
        where = launcher("kubernetes", state_dir=tmp_path / "state", settings=settings, engine="simulated",
                         replicas=_layout(3, 1, head="own-node"))
        deployment, endpoint, readiness = start_replicas(backend("simulated"), {}, Path("-"), where,
                                                         tmp_path / "logs", LOG, timeout_s=8)
        try:
            assert [(r.name, r.node, r.base_url) for r in endpoint.replicas] == [
                (f"replica-{i}", "fake-node-0", f"http://podium-simulated-replica-{i}.podium-test.svc.cluster.local:"
                                                f"8000") for i in (0, 1)]
            [missing] = readiness.missing
            assert (missing.name, missing.node) == ("replica-2", "fake-node-0")
            assert missing.where == "pod podium-simulated-replica-2-7d9f8-abcde"
            assert missing.why.startswith("not ready after 8 s (GET /health on podium-simulated-replica-2.")
            affinity = api.cluster.objects[("deployments", "podium-simulated-replica-2")]["spec"]["template"][
                "spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            assert affinity[0]["labelSelector"] == {"matchLabels": {"app.kubernetes.io/name": "podium"}}
        finally:
            where.stop(deployment)
        assert not [k for k in api.cluster.objects if k[0] in ("deployments", "services")]
        api.cluster.pod_waiting = "CrashLoopBackOff"   # every pod crashes: nothing ready, the launch fails at once
        started = time.monotonic()
        with pytest.raises(LaunchError, match="no replica of 3 was ready") as e:
            start_replicas(backend("simulated"), {}, Path("-"), where, tmp_path / "logs", LOG, timeout_s=600)
        assert time.monotonic() - started < 300   # decided by the pods' state, not the timeout
        assert "replica-1 on fake-node-0 (pod podium-simulated-replica-1-7d9f8-abcde): CrashLoopBackOff" \
            in str(e.value)
        assert not [k for k in api.cluster.objects if k[0] in ("deployments", "services")]


# --- Slurm: one step per node -----------------------------------------------------------------------------------
def _settings(conf: Path, **more: object) -> dict[str, object]:
    return {"slurm_conf": str(conf), "allocation": "new", "python": sys.executable, "grace_s": 5,
            "step_timeout_s": 30, **more}


def _steps(conf: Path, job: str) -> list[str]:
    out = subprocess.run(["squeue", "--noheader", "--steps", f"--jobs={job}", "--format=%j"],
                         env={**os.environ, "SLURM_CONF": str(conf)}, capture_output=True, text=True, check=True,
                         timeout=60).stdout
    return out.split()


@pytest.mark.slurm
def test_slurm_replicas_one_step_per_node_each_on_its_node_and_a_killed_one_named(slurm_conf: Path,
                                                                                  tmp_path: Path) -> None:
    where = SlurmLauncher(tmp_path / "state", _settings(slurm_conf, nodes=2), replicas=_layout(2, 2))
    deployment, endpoint, readiness = start_replicas(backend("simulated"), {}, Path("-"), where, tmp_path / "logs",
                                                     LOG, timeout_s=240)
    try:
        nodes = deployment.allocation.nodes
        assert readiness.missing == ()
        assert [(r.name, r.node) for r in endpoint.replicas] == [("replica-0", nodes[0]), ("replica-1", nodes[0]),
                                                                 ("replica-2", nodes[1]), ("replica-3", nodes[1])]
        replica_steps = [n for n in _steps(slurm_conf, deployment.allocation.job_id) if "-replicas-node" in n]
        assert sorted(replica_steps) == [f"{where.tag}-replicas-node0", f"{where.tag}-replicas-node1"]
        for spec in deployment.processes:   # each replica's server runs on its node, in its node's step
            env = Path(f"/proc/{_pid_on_port(spec.port)}/environ").read_bytes().decode(errors="replace")
            assert f"SLURMD_NODENAME={nodes[spec.node_index]}\0" in env
            assert _generates(f"http://{spec.host}:{spec.port}")
        os.kill(_pid_on_port(deployment.processes[3].port), signal.SIGKILL)
        _until(lambda: where.down(deployment))
        assert where.down(deployment) == {"replica-3": "killed by signal 9"} and not where.alive(deployment)
        assert _generates(endpoint.replicas[2].base_url)   # its node-mate serves on, in the same step
        place, tail = where.replica_log(deployment, "replica-3", 10)
        assert place.startswith(f"step {deployment.steps[1].step_id} on {nodes[1]}")
        assert tail.splitlines()[-1] == "podium-supervisor: replica-3 exited with code -9"
    finally:
        where.stop(deployment)
    assert all(s.srun.poll() is not None for s in deployment.steps)
    with pytest.raises(AssertionError, match="no simulated server"):
        _pid_on_port(deployment.processes[0].port)


# Serves HTTP on 127.0.0.1:<port>; first prints the node and the GPUs it was given.
WEB = """
import http.server, os, sys
print("node", os.environ.get("SLURMD_NODENAME"), "gpus", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), http.server.SimpleHTTPRequestHandler).serve_forever()
"""


@pytest.mark.slurm
def test_slurm_replicas_each_get_their_block_of_the_nodes_gpus(slurm_conf: Path, tmp_path: Path) -> None:
    """2 nodes x 2 replicas of 2 GPUs: each node's step holds 4 GPUs and each replica sees its own 2; replica-3
    exits at once and is named with its step and its lines, the others are ready."""
    lay = _layout(2, 2, gpus=2)
    where = SlurmLauncher(tmp_path / "state", _settings(slurm_conf, nodes=2, gpus_per_node=4), replicas=lay)
    placement = where.placement(2, nodes=2)
    specs = [ProcessSpec(role="server", name=lay.name(i), node_index=lay.node(i), gpus=2, gpu_ids=lay.gpu_ids(i),
                         replica=i, port=placement.node(lay.node(i)).ports[lay.slot(i)], probes=(HttpProbe("/"),),
                         argv=(sys.executable, "-c", WEB if i < 3 else "print('weights not found'); exit(3)",
                               str(placement.node(lay.node(i)).ports[lay.slot(i)]))) for i in range(4)]
    deployment = where.start(specs, tmp_path / "logs", LOG)
    try:
        readiness = where.wait_replicas(deployment, timeout_s=120)
    finally:
        where.stop(deployment)
    nodes = deployment.allocation.nodes
    assert readiness.names == ("replica-0", "replica-1", "replica-2")
    [missing] = readiness.missing
    assert (missing.name, missing.node, missing.why) == ("replica-3", nodes[1], "exited with code 3")
    assert "[replica-3] weights not found" in missing.log_tail and missing.where.startswith("step ")
    logs = {n: (tmp_path / "logs" / f"replicas-node{n}.log").read_text() for n in (0, 1)}
    assert f"[replica-0] node {nodes[0]} gpus 0,1" in logs[0] and f"[replica-1] node {nodes[0]} gpus 2,3" in logs[0]
    assert f"[replica-2] node {nodes[1]} gpus 0,1" in logs[1]
    assert json.loads(deployment.steps[0].spec.argv[3])[1]["gpus"] == [2, 3]


# --- one replica's vLLM flags, read by vLLM's own parser ------------------------------------------------------------
@pytest.mark.engines
def test_one_replicas_vllm_argv_parses_with_vllms_own_serve_parser(tmp_path: Path) -> None:
    """The 512-replica plan's replicas differ in nothing but their Service (one pod each); the first and the last
    replica's `vllm serve` argv go through vLLM 0.32.0's serve parser and engine arguments (deployments/gpu/
    check_argv.py, as on a GPU host), the model folder pointed at an empty local one (the parser looks it up)."""
    from submission.plan import model as plans
    from tasks.serving import launch

    vllm = engine_python(".venv-vllm", "venv-vllm")
    [review] = launch.reviews(plans.load(K8S_512), tmp_path / "ws")
    processes = review["processes"]
    assert len(processes) == 512
    same = {json.dumps(p["argv"]) for p in processes}
    assert len(same) == 1   # every pod has its own address: one argv serves them all
    model = tmp_path / "gpt-oss-120b"
    model.mkdir()
    for p in (processes[0], processes[-1]):
        p["argv"] = [str(model) if a == review["model_dir"] else a for a in p["argv"]]
    review["processes"] = [processes[0], processes[-1]]
    (tmp_path / "review.json").write_text(json.dumps([review]))
    check = REPO / "deployments" / "gpu" / "check_argv.py"
    done = subprocess.run([str(vllm), str(check), str(tmp_path / "review.json")],
                          env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"}, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ok = [line for line in done.stdout.splitlines() if line.startswith("ok   ")]
    assert [line.split(":")[0] for line in ok] == ["ok   mi355x-vllm-k8s/gpt-oss-120b replica-0",
                                                   "ok   mi355x-vllm-k8s/gpt-oss-120b replica-511"]
    assert all("max_model_len 35840" in line for line in ok) and "every command parsed" in done.stdout
