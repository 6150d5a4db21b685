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

Before that pod, and before anything is created, `access_problems` asks the API server (SelfSubjectAccessReview,
which every authenticated account may make) whether the plan's account may make each call the launcher and
preflight make in the engine's namespace (tasks/launchers/kubernetes.py `ACCESS`), and reads the PersistentVolumeClaim
the engine mounts its model from (`engine.kubernetes.model_claim`): each verb refused and a missing claim is a problem
naming its fix. `image_problems` lists the nodes that match `engine.kubernetes.node_selector` (a cluster-scoped
read: rbac.yaml's ClusterRole `podium-nodes`) and checks that the image's registry holds a platform for each of
their architectures (`status.nodeInfo.architecture`; tasks/ops/image_checks.py), and that some node offers the GPUs of
the engine's largest pod as its system's GPU platform names them (`status.allocatable`: `nvidia.com/gpu`, AMD's
`amd.com/gpu`), which only that platform's device plugin advertises.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from urllib3.exceptions import HTTPError

from submission.base.errors import LaunchError, PlanError, PodiumError
from submission.plan.model import BenchmarkSpec, Plan
from submission.tree import host_facts
from tasks.engines import backend
from tasks.launchers.kubernetes import ACCESS, GRAPH_ACCESS
from tasks.launchers.kubernetes_manifests import describe_pod
from tasks.ops.image_checks import mismatch, runtime_problems

PYTHON = "python3"   # in every engine image Podium launches (TensorRT-LLM's, vLLM's, Dynamo's)
RBAC_FIX = "kubectl apply -f deployments/kubernetes/rbac.yaml (its Role grants each, in its namespace: change every " \
           "`namespace:` there to the engine's)"
CLAIM = ("get", "", "persistentvolumeclaims")
NODES = ("list", "", "nodes")   # cluster-scoped: rbac.yaml's ClusterRole, for the image's platforms against the nodes'
NODES_FIX = "kubectl apply -f deployments/kubernetes/rbac.yaml (its ClusterRole podium-nodes grants listing nodes)"
# How each platform's device plugin, the only thing that advertises its resource on a node, is installed: NVIDIA's
# k8s-device-plugin (NVIDIA/k8s-device-plugin README, or the GPU Operator), AMD's (ROCm/k8s-device-plugin README: its
# DaemonSet k8s-ds-amdgpu-dp.yaml, or the AMD GPU Operator).
DEVICE_PLUGIN_FIX = {
    "nvidia": "install NVIDIA's device plugin on the GPU nodes (NVIDIA/k8s-device-plugin's DaemonSet, or the NVIDIA "
              "GPU Operator)",
    "amd": "install AMD's device plugin on the GPU nodes: kubectl create -f https://raw.githubusercontent.com/ROCm/"
           "k8s-device-plugin/master/k8s-ds-amdgpu-dp.yaml (or the AMD GPU Operator)"}


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
    pod = describe_pod(where.prefix, where.settings, gpus, [PYTHON, "-c", host_facts.script(), storage_path(bench)],
                       where.platform)
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


def unreachable(bench: BenchmarkSpec, error: Exception, where: str | None) -> PlanError:
    """The API server did not answer at all (refused, unresolvable, timed out): no verdict on rights or nodes."""
    reason = getattr(error, "reason", None) or error
    return PlanError(f"{bench.system}: the Kubernetes API server does not answer: {type(error).__name__}: "
                     f"{str(reason)[:200]}",
                     fix="check the kubeconfig's server and the network to it (`kubectl cluster-info`), or set "
                         "engine.kubernetes.kubeconfig/context to the cluster's", where=where)


def access_problems(bench: BenchmarkSpec, state_dir: Path, where: str | None = None) -> list[PodiumError]:
    """What keeps `bench`'s Kubernetes engine from starting, asked of the API server before anything is created:
    each call of `ACCESS` (`GRAPH_ACCESS` too for a Dynamo graph) the account may not make in the engine's namespace,
    and its model's PersistentVolumeClaim missing. Creates nothing."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from tasks.launchers.kubernetes import api_error
    from tasks.serving.launch import make_launcher

    try:
        launcher: Any = make_launcher(bench.engine, state_dir)   # a KubernetesLauncher
        api = launcher.api
        ns, claim = launcher.settings.namespace, launcher.settings.model_claim
        refused = []
        for verb, group, resource in ACCESS + (GRAPH_ACCESS if launcher.graph else ()):
            name, _, sub = resource.partition("/")
            review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(namespace=ns, verb=verb, group=group, resource=name,
                                                                subresource=sub or None)))
            try:
                answer = client.AuthorizationV1Api(api).create_self_subject_access_review(review)
            except ApiException as e:
                raise api_error(e, f"asking whether it may {verb} {resource}") from None
            if not answer.status.allowed:
                refused.append((verb, group, resource))
    except PodiumError as e:
        return [PlanError(f"{bench.system}: {e.message}", fix=e.fix, where=where)]
    except (HTTPError, OSError) as e:
        return [unreachable(bench, e, where)]
    problems: list[PodiumError] = []
    if refused:
        problems.append(PlanError(
            f"{bench.system}: the Kubernetes account may not "
            + ", ".join(f"{v} {r}" + (f" ({g})" if g else "") for v, g, r in refused)
            + f" in namespace {ns}, calls the engine's launch or preflight makes", fix=RBAC_FIX, where=where))
    if claim and CLAIM not in refused:
        try:
            client.CoreV1Api(api).read_namespaced_persistent_volume_claim(claim, ns)
        except ApiException as e:
            problems.append(PlanError(f"{bench.system}: the model's PersistentVolumeClaim {claim} is not in "
                                      f"namespace {ns}",
                                      fix=f"create a PersistentVolumeClaim {claim} in namespace {ns} (`kubectl -n "
                                          f"{ns} apply -f` its YAML) and stage the model on it, or set "
                                          "engine.kubernetes.model_claim to the claim that holds it",
                                      where=f"{where}.kubernetes.model_claim" if where else None)
                            if e.status == 404 else api_error(e, f"reading PersistentVolumeClaim {claim}"))
    return problems


def matching_nodes(bench: BenchmarkSpec, state_dir: Path) -> list[Any]:
    """Every node (V1Node) that matches the engine's `engine.kubernetes.node_selector` (every node when it names
    none): where its pods may run."""
    from kubernetes import client

    from tasks.serving.launch import make_launcher

    launcher: Any = make_launcher(bench.engine, state_dir)   # a KubernetesLauncher
    selector = ",".join(f"{k}={v}" for k, v in sorted(launcher.settings.node_selector.items()))
    return list(client.CoreV1Api(launcher.api).list_node(label_selector=selector or None).items)


def node_architectures(bench: BenchmarkSpec, state_dir: Path) -> dict[str, str]:
    """node -> its architecture (`status.nodeInfo.architecture`: amd64, arm64) of every matching node."""
    return {n.metadata.name: n.status.node_info.architecture for n in matching_nodes(bench, state_dir)}


def resource_problems(bench: BenchmarkSpec, nodes: list[Any], gpus: int, where: str | None) -> list[PodiumError]:
    """The engine's largest pod asks `gpus` of its platform's resource: none when some matching node offers that
    many (`status.allocatable`), else why not (no node advertises the resource at all: its device plugin is not there;
    or none has that many)."""
    if not gpus:
        return []
    platform = bench.engine.platform()
    offered = {n.metadata.name: int((n.status.allocatable or {}).get(platform.resource, "0")) for n in nodes}
    named = ", ".join(sorted(offered))
    if not any(offered.values()):
        return [PlanError(f"{bench.system}: no node its pods may run on ({named}) offers {platform.resource}, the "
                          f"resource {platform.vendor}'s device plugin advertises (the system's accelerator is "
                          f"{platform.vendor}'s)", fix=DEVICE_PLUGIN_FIX[platform.name], where=where)]
    if max(offered.values()) < gpus:
        return [PlanError(f"{bench.system}: the engine's largest pod asks {gpus} {platform.resource} but its nodes "
                          f"offer at most {max(offered.values())} ({named})",
                          fix="lower the engine's GPUs per process, or select nodes with that many "
                              "(engine.kubernetes.node_selector)", where=where)]
    return []


def image_problems(bench: BenchmarkSpec, state_dir: Path, environ: Mapping[str, str],
                   where: str | None = None) -> list[PodiumError]:
    """`engine.kubernetes.image` against the nodes its pods may run on: each of their architectures the image's
    registry holds no platform for, an image built for another GPU platform than the system's
    (tasks/ops/image_checks.py); their GPUs as the system's platform names them (`resource_problems`); no node
    matching the selector; nodes not listable."""
    from kubernetes.client.exceptions import ApiException

    from tasks.launchers.kubernetes import api_error

    k8s = bench.engine.kubernetes
    assert k8s is not None
    try:
        listed = matching_nodes(bench, state_dir)
        nodes = {n.metadata.name: n.status.node_info.architecture for n in listed}
    except ApiException as e:
        if e.status == 403:
            return [PlanError(f"{bench.system}: the Kubernetes account may not list nodes, so the image's platforms "
                              "cannot be checked against the nodes' architecture", fix=NODES_FIX, where=where)]
        error = api_error(e, "listing the nodes")
        return [PlanError(f"{bench.system}: {error.message}", fix=error.fix, where=where)]
    except PodiumError as e:
        return [PlanError(f"{bench.system}: {e.message}", fix=e.fix, where=where)]
    except (HTTPError, OSError) as e:
        return [unreachable(bench, e, where)]
    if not nodes:
        return [PlanError(f"{bench.system}: " + (f"no node matches engine.kubernetes.node_selector "
                                                 f"{k8s.node_selector}" if k8s.node_selector
                                                 else "the cluster lists no node"),
                          fix="label the engine's nodes with it, or fix it (`kubectl get nodes --show-labels`)",
                          where=f"{where}.kubernetes.node_selector" if where else None)]
    image_at = f"{where}.kubernetes.image" if where else "engine.kubernetes.image"
    return (resource_problems(bench, listed, engine_gpus(bench, state_dir), where)
            + mismatch(k8s.image, nodes, environ, image_at)
            + runtime_problems(k8s.image, bench.engine.platform(), environ, image_at))


def plan_access_problems(plan: Plan, state_dir: Path | None = None,
                         environ: Mapping[str, str] | None = None) -> list[PodiumError]:
    """`access_problems` and `image_problems` of each Kubernetes engine of the plan (once for benchmarks with the
    same engine and `engine.kubernetes`)."""
    problems: list[PodiumError] = []
    seen: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="podium-preflight-") as tmp:
        for i, bench in enumerate(plan.benchmarks):
            k8s = bench.engine.kubernetes
            key = bench.engine.name + (k8s.model_dump_json() if k8s else "")
            if bench.engine.launcher == "kubernetes" and key not in seen:
                seen.add(key)
                where = f"benchmarks.{i}.engine"
                access = access_problems(bench, state_dir or Path(tmp), where)
                problems += access
                if all(p.fix == RBAC_FIX or (p.where or "").endswith("model_claim") for p in access):  # it answered
                    problems += image_problems(bench, state_dir or Path(tmp), os.environ if environ is None
                                               else environ, where)
    return problems
