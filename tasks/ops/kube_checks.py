"""Preflight's description of a Kubernetes engine's node, before any engine starts.

The kubernetes launcher runs the engine in pods of its own, so the host that runs the flow (a flow-run pod with no
GPU, or a workstation with a kubeconfig) says nothing about the engine's hardware. Preflight therefore runs
submission/tree/host_facts.py's source (`python3 -c`, no Podium needed in the image) in one short-lived pod shaped
like the
engine's (tasks/launchers/kubernetes_manifests.py `describe_pod`: the engine's image, node selector, account, pull
secrets and model volume, and the GPUs of its largest process), reads the JSON line it prints from its log, and
deletes it. The scheduler puts that pod where it would put the engine's: on a node of `engine.kubernetes.
node_selector` with those GPUs free. It is the engine's node when the selector names one node
(`kubernetes.io/hostname`), and a node of the same pool otherwise; the log line and the description name the node.

What it costs: the seconds the pod runs, holding the engine's GPUs, plus the image pull on a node that lacks the
image (which the engine's pod then finds there). What it may do (deployments/kubernetes/rbac.yaml): create and
delete pods, list them, read their logs, in the plan's namespace; the pod itself gets no API token.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from submission.base.errors import LaunchError
from submission.plan.model import BenchmarkSpec, Plan
from submission.tree import host_facts
from tasks.engines import backend
from tasks.launchers.kubernetes_manifests import describe_pod

PYTHON = "python3"   # in every engine image Podium launches (TensorRT-LLM's, vLLM's, Dynamo's)


def engine_gpus(bench: BenchmarkSpec, state_dir: Path) -> int:
    """The GPUs the largest of the engine's pods asks for (0: a CPU engine)."""
    from tasks.serving.launch import model_dir_for, review_placement

    engine = bench.engine
    specs = backend(engine.name).processes(engine.config(), model_dir_for(engine, Path(bench.model.source)),
                                           review_placement(engine, state_dir), state_dir / "build")
    return max((s.gpus for s in specs), default=0)


def storage_path(bench: BenchmarkSpec) -> str:
    """Where the engine reads its model in the pod (the model volume), else the container's root."""
    k8s = bench.engine.kubernetes
    return k8s.volume_mount if k8s and (k8s.model_claim or k8s.model_host_path) else "/"


def describe_engine_node(bench: BenchmarkSpec, state_dir: Path, log: Callable[[str], object] = print) -> dict[str, str]:
    """The facts of the node a pod like `bench`'s engine's lands on (the pod run, read and deleted). Raises
    LaunchError naming what to fix."""
    from tasks.serving.launch import make_launcher

    where: Any = make_launcher(bench.engine, state_dir)   # a KubernetesLauncher
    gpus = engine_gpus(bench, state_dir)
    pod = describe_pod(where.prefix, where.settings, gpus, [PYTHON, "-c", host_facts.script(), storage_path(bench)])
    name = pod["metadata"]["name"]
    node, out = where.run_pod(pod, bench.engine.ready_timeout_s)
    try:
        facts = host_facts.parse_facts(out)
    except ValueError as e:
        raise LaunchError(f"{bench.system}: describing its engine's node {node} from pod {name}: {e}",
                          fix=f"check that {PYTHON} runs in engine.kubernetes.image ({where.settings.image})") \
            from None
    log(f"{bench.system}: described from node {node or '(not named)'}, where pod {name} (image "
        f"{where.settings.image}, {gpus} GPU(s)) ran")
    return facts


def describe_engine_nodes(plan: Plan, state_dir: Path | None = None,
                          log: Callable[[str], object] = print) -> dict[str, dict[str, str]]:
    """system -> `describe_engine_node` of its first benchmark that runs under Kubernetes."""
    facts: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="podium-preflight-") as tmp:
        for bench in plan.benchmarks:
            if bench.engine.launcher == "kubernetes" and bench.system not in facts:
                facts[bench.system] = describe_engine_node(bench, state_dir or Path(tmp), log)
    return facts
