"""Kubernetes objects for a deployment, built as the kubernetes client's own models (pure: no API calls).

One Deployment and one Service per process (the Service is how Podium probes it and how its peers reach it), one
ConfigMap with every config file a process reads (mounted at the path its argv names), one Secret with every value of
the processes' environment (each container names its variables and takes their values from it, `secretKeyRef`: no
value is written into a pod spec; `shown` gives the objects as logs and dry runs show them, the Secret's values as
`<set>`), and for Dynamo a `DynamoGraphDeployment` (nvidia.com/v1alpha1, the Dynamo operator's CRD: engines.md §3.3)
in place of the Deployments and Services.

GPUs by the system's platform (submission/plan/platforms.py): a container asks its platform's device-plugin resource
(`nvidia.com/gpu`, AMD's `amd.com/gpu`), and each replica is its own pod, so the device plugin, not Podium, picks which
GPUs of a node it holds and shows them to it numbered from 0: the pinning variables a process spec carries
(`Platform.visibility_env`) are dropped from a pod. AMD's device plugin gives each container /dev/kfd and the
/dev/dri/card<N> and renderD<N> of its GPUs itself (ROCm/k8s-device-plugin v1.31.0.9, internal/pkg/plugin/plugin.go
`Allocate`), so a pod mounts no device files and runs unprivileged: the ROCm images run as root, who may open them
(an image that runs as another user needs the nodes' `video` and `render` group ids in its securityContext).
Besides the deployment, `describe_pod`: the short-lived pod that tells preflight what the engine's node is. Objects
are validated by round-tripping through the client's models: `sanitize_for_serialization`, then `from_dict`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes.client import ApiClient

from submission.base.errors import LaunchError
from submission.plan.engine_options import KubernetesSettings
from submission.plan.platforms import NVIDIA, Platform
from submission.plan.secret_env import SHOWN
from tasks.engines import ProcessSpec

LABEL = "podium.mlcommons.org"
DGD = ("nvidia.com", "v1alpha1", "dynamographdeployments", "DynamoGraphDeployment")
POD_IP_ENV = ("VLLM_NIXL_SIDE_CHANNEL_HOST", "DYN_TCP_RPC_HOST", "DYN_TCP_RESPONSE_STREAM_HOST",
              "DYN_EVENT_PLANE_HOST")   # addresses a worker advertises: its pod's IP (downward API) in a graph
COMPONENTS = {"frontend": ("Frontend", "frontend", None), "prefill": ("PrefillWorker", "worker", "prefill"),
              "decode": ("DecodeWorker", "worker", "decode")}
# The labels the Dynamo operator puts on each pod of a graph: the DynamoGraphDeployment's name, and the service of
# spec.services (a key of COMPONENTS' names) the pod runs. Operator constants KubeLabelDynamoGraphDeploymentName and
# KubeLabelDynamoComponent, deploy/operator/internal/consts/consts.go:46-47 of ai-dynamo/dynamo at commit
# d195d280e13e5532510a1004ad8d8d06f2f8266a; the pinned ai-dynamo 1.6.1 wheel's planner lists a graph's pods and tells
# their services apart by the same two (dynamo/planner/connectors/clients/kubernetes_api.py:53-54).
GRAPH_NAME_LABEL = "nvidia.com/dynamo-graph-deployment-name"
GRAPH_SERVICE_LABEL = "nvidia.com/dynamo-component"
# The label of the flow-run pods of Podium's Kubernetes work pool (deployments/work-pools/kubernetes.json, the Job
# template's pod labels): the head of an engine's replicas. With engine.replicas.head own-node, each replica's pod keeps
# off any node that runs such a pod (a required pod anti-affinity, in any namespace).
HEAD_LABELS = {"app.kubernetes.io/name": "podium"}
HOSTNAME = "kubernetes.io/hostname"   # the well-known node label: one topology domain per node


def dns_name(*parts: str) -> str:
    """A DNS-1035 label (lowercase, digits, '-', at most 63, starting with a letter)."""
    name = re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")
    if not name or not name[0].isalpha():
        name = f"p-{name}"
    return name[:63].rstrip("-")


OWNER = ("plan", "system", "benchmark")   # what a deployment is for: labels `podium.mlcommons.org/<key>`


def labels(prefix: str, process: str | None = None) -> dict[str, str]:
    """What selects a deployment's objects (and a process's pods): the same for every launch of the prefix."""
    out = {"app.kubernetes.io/managed-by": "podium", f"{LABEL}/deployment": prefix}
    return out | ({f"{LABEL}/process": dns_name(process)} if process else {})


def label_value(text: str) -> str:
    """`text` as a label value: at most 63 of [A-Za-z0-9._-], starting and ending with a letter or digit."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:63].strip("._-")


def owner_labels(owner: dict[str, str] | None) -> dict[str, str]:
    """The plan, system and benchmark a deployment serves, as labels on each of its objects: how a later launch tells
    what an earlier flow left for the same benchmark (replaced) from another's (left alone)."""
    return {f"{LABEL}/{k}": label_value(owner[k]) for k in OWNER if (owner or {}).get(k)}


def selector(values: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in values.items())


def file_keys(specs: list[ProcessSpec]) -> dict[str, str]:
    """A ConfigMap key for every config file path."""
    paths = sorted({p for s in specs for p in s.files})
    return {p: re.sub(r"[^-._a-zA-Z0-9]", "-", f"f{i}-{Path(p).name}") for i, p in enumerate(paths)}


def config_map(prefix: str, namespace: str, specs: list[ProcessSpec],
               owner: dict[str, str] | None = None) -> k8s.V1ConfigMap | None:
    keys = file_keys(specs)
    if not keys:
        return None
    data = {keys[p]: text for s in specs for p, text in s.files.items()}
    return k8s.V1ConfigMap(api_version="v1", kind="ConfigMap", data=data,
                           metadata=k8s.V1ObjectMeta(name=dns_name(prefix, "files"), namespace=namespace,
                                                     labels=labels(prefix) | owner_labels(owner)))


def env_secret_name(prefix: str) -> str:
    return dns_name(prefix, "env")


def env_key(process: str, name: str) -> str:
    """The Secret's key for variable `name` of process `process` (processes may give one name different values)."""
    return f"{dns_name(process)}.{name}"


def _secret_env(spec: ProcessSpec, pod_ip: bool, platform: Platform) -> dict[str, str]:
    """The variables of a process whose values its pod takes from the Secret: all but those the pod gets elsewhere
    (its IP, from the downward API) or not at all (which GPUs it holds and how they are numbered: the device plugin's,
    `Platform.visibility_env`)."""
    dropped = platform.visibility_env()
    return {k: v for k, v in spec.env.items() if k not in dropped and not (pod_ip and k in POD_IP_ENV)}


def env_secret(prefix: str, namespace: str, specs: list[ProcessSpec], pod_ip: bool,
               owner: dict[str, str] | None = None, platform: Platform = NVIDIA) -> k8s.V1Secret | None:
    data = {env_key(s.name, k): v for s in specs for k, v in _secret_env(s, pod_ip, platform).items()}
    if not data:
        return None
    return k8s.V1Secret(api_version="v1", kind="Secret", type="Opaque", string_data=data,
                        metadata=k8s.V1ObjectMeta(name=env_secret_name(prefix), namespace=namespace,
                                                  labels=labels(prefix) | owner_labels(owner)))


def _env(prefix: str, spec: ProcessSpec, pod_ip: bool, platform: Platform) -> list[k8s.V1EnvVar]:
    out = []
    secret = _secret_env(spec, pod_ip, platform)
    for name in sorted(spec.env):
        if name in secret:
            out.append(k8s.V1EnvVar(name=name, value_from=k8s.V1EnvVarSource(secret_key_ref=k8s.V1SecretKeySelector(
                name=env_secret_name(prefix), key=env_key(spec.name, name)))))
        elif pod_ip and name in POD_IP_ENV:
            out.append(k8s.V1EnvVar(name=name, value_from=k8s.V1EnvVarSource(
                field_ref=k8s.V1ObjectFieldSelector(field_path="status.podIP"))))
    return out


def _ports(spec: ProcessSpec) -> list[tuple[str, int]]:
    named = [("http", spec.port)] if spec.port else []
    return named + [(dns_name(n)[:15].rstrip("-"), p) for n, p in sorted(spec.side_ports.items())]


def _model_volume(settings: KubernetesSettings) -> list[k8s.V1Volume]:
    if settings.model_claim:
        return [k8s.V1Volume(name="model", persistent_volume_claim=k8s.V1PersistentVolumeClaimVolumeSource(
            claim_name=settings.model_claim, read_only=True))]
    if settings.model_host_path:
        return [k8s.V1Volume(name="model", host_path=k8s.V1HostPathVolumeSource(
            path=settings.model_host_path, type="Directory"))]
    return []


def _volumes(prefix: str, settings: KubernetesSettings, specs: list[ProcessSpec]) -> list[k8s.V1Volume]:
    volumes = _model_volume(settings)
    if settings.shm_gib:
        volumes.append(k8s.V1Volume(name="shm", empty_dir=k8s.V1EmptyDirVolumeSource(
            medium="Memory", size_limit=f"{settings.shm_gib}Gi")))
    if file_keys(specs):
        volumes.append(k8s.V1Volume(name="files", config_map=k8s.V1ConfigMapVolumeSource(
            name=dns_name(prefix, "files"))))
    return volumes


def gpu_limits(platform: Platform, gpus: int) -> k8s.V1ResourceRequirements | None:
    """A container's GPUs as its platform's device plugin takes them (none: no resources)."""
    return k8s.V1ResourceRequirements(limits={platform.resource: str(gpus)}) if gpus else None


def container(prefix: str, spec: ProcessSpec, settings: KubernetesSettings, keys: dict[str, str],
              pod_ip: bool = False, platform: Platform = NVIDIA) -> k8s.V1Container:
    if spec.mpi_ranks > 1 or spec.nodes > 1:
        raise LaunchError(f"{spec.name} spans {spec.nodes} nodes with {spec.mpi_ranks} MPI ranks; the kubernetes "
                          f"launcher runs one pod per process",
                          fix="fit each server on one node (gpus_per_node), or launch it under Slurm")
    mounts = []
    if settings.model_claim or settings.model_host_path:
        mounts.append(k8s.V1VolumeMount(name="model", mount_path=settings.volume_mount, read_only=True))
    if settings.shm_gib:
        mounts.append(k8s.V1VolumeMount(name="shm", mount_path="/dev/shm"))
    mounts += [k8s.V1VolumeMount(name="files", mount_path=path, sub_path=keys[path], read_only=True)
               for path in sorted(spec.files)]
    get = next((p for p in spec.probes if p.body is None), None)
    readiness = k8s.V1Probe(http_get=k8s.V1HTTPGetAction(path=get.path, port=spec.port), period_seconds=10,
                            failure_threshold=6) if get and spec.port else None
    return k8s.V1Container(
        name="engine", image=settings.image, command=list(spec.argv),
        env=_env(prefix, spec, pod_ip, platform) or None,
        ports=[k8s.V1ContainerPort(name=n, container_port=p) for n, p in _ports(spec)] or None,
        resources=gpu_limits(platform, spec.gpus),
        readiness_probe=readiness, volume_mounts=mounts or None)


def away_from_head() -> k8s.V1Affinity:
    """Never on a node that runs a Podium flow pod (the head of the replicas)."""
    term = k8s.V1PodAffinityTerm(label_selector=k8s.V1LabelSelector(match_labels=dict(HEAD_LABELS)),
                                 topology_key=HOSTNAME, namespace_selector=k8s.V1LabelSelector())
    return k8s.V1Affinity(pod_anti_affinity=k8s.V1PodAntiAffinity(
        required_during_scheduling_ignored_during_execution=[term]))


def _pod_spec(prefix: str, spec: ProcessSpec, settings: KubernetesSettings, specs: list[ProcessSpec],
              head_apart: bool = False, platform: Platform = NVIDIA) -> k8s.V1PodSpec:
    return k8s.V1PodSpec(
        containers=[container(prefix, spec, settings, file_keys(specs), platform=platform)],
        volumes=_volumes(prefix, settings, specs) or None,
        node_selector=settings.node_selector or None, service_account_name=settings.service_account,
        image_pull_secrets=[k8s.V1LocalObjectReference(name=n) for n in settings.image_pull_secrets] or None,
        affinity=away_from_head() if head_apart and spec.replica is not None else None, restart_policy="Always")


def deployment(prefix: str, spec: ProcessSpec, settings: KubernetesSettings, specs: list[ProcessSpec],
               owner: dict[str, str] | None = None, head_apart: bool = False,
               platform: Platform = NVIDIA) -> k8s.V1Deployment:
    meta = labels(prefix, spec.name)
    return k8s.V1Deployment(
        api_version="apps/v1", kind="Deployment",
        metadata=k8s.V1ObjectMeta(name=dns_name(prefix, spec.name), namespace=settings.namespace,
                                  labels=meta | owner_labels(owner),
                                  annotations={f"{LABEL}/role": spec.role,
                                               f"{LABEL}/node-index": str(spec.node_index)}),
        spec=k8s.V1DeploymentSpec(
            replicas=1, selector=k8s.V1LabelSelector(match_labels=meta),
            template=k8s.V1PodTemplateSpec(metadata=k8s.V1ObjectMeta(labels=meta),
                                           spec=_pod_spec(prefix, spec, settings, specs, head_apart, platform))))


def service(prefix: str, spec: ProcessSpec, settings: KubernetesSettings,
            owner: dict[str, str] | None = None) -> k8s.V1Service:
    meta = labels(prefix, spec.name)
    return k8s.V1Service(
        api_version="v1", kind="Service",
        metadata=k8s.V1ObjectMeta(name=dns_name(prefix, spec.name), namespace=settings.namespace,
                                  labels=meta | owner_labels(owner)),
        spec=k8s.V1ServiceSpec(selector=meta, ports=[k8s.V1ServicePort(name=n, port=p, target_port=p)
                                                     for n, p in _ports(spec)]))


def dynamo_graph(prefix: str, specs: list[ProcessSpec], settings: KubernetesSettings,
                 owner: dict[str, str] | None = None) -> dict[str, Any]:
    """A DynamoGraphDeployment: one service per role, `replicas` = its workers; the operator places the pods and
    does discovery. Worker addresses come from the pod's IP; GPUs from the device plugin."""
    api = ApiClient()
    keys = file_keys(specs)
    services: dict[str, Any] = {}
    for role, (name, kind, sub) in COMPONENTS.items():
        members = [s for s in specs if s.role == role]
        if not members:
            continue
        first = members[0]
        main = api.sanitize_for_serialization(container(prefix, first, settings, keys, pod_ip=True))
        main.pop("name", None)   # the operator names the main container
        pod = {"mainContainer": main}
        volumes = _volumes(prefix, settings, specs)
        if volumes:
            pod["volumes"] = api.sanitize_for_serialization(volumes)
        entry: dict[str, Any] = {"componentType": kind, "replicas": len(members), "extraPodSpec": pod}
        if sub:
            entry["subComponentType"] = sub
        if first.gpus:
            entry["resources"] = {"limits": {"gpu": str(first.gpus)}}
        services[name] = entry
    unknown = sorted({s.role for s in specs} - set(COMPONENTS))
    if unknown:
        raise LaunchError(f"a DynamoGraphDeployment has no place for {', '.join(unknown)} processes",
                          fix="use discovery: kubernetes (the operator's), which needs no etcd or NATS")
    group, version, _, kind = DGD
    return {"apiVersion": f"{group}/{version}", "kind": kind,
            "metadata": {"name": prefix, "namespace": settings.namespace,
                         "labels": labels(prefix) | owner_labels(owner)},
            "spec": {"services": services}}


DESCRIBE = "describe"   # the container (and process label) of the pod that describes the engine's node


def describe_pod(prefix: str, settings: KubernetesSettings, gpus: int, argv: list[str],
                 platform: Platform = NVIDIA) -> dict[str, Any]:
    """A pod shaped like the engine's (its image, node selector, account, pull secrets, model volume, and the GPUs of
    its largest process, so it lands where the engine's pods can and sees what they see) that runs `argv` once and
    ends. It takes no API token: it asks the cluster nothing."""
    mounts = [k8s.V1VolumeMount(name="model", mount_path=settings.volume_mount, read_only=True)] \
        if _model_volume(settings) else None
    pod = k8s.V1Pod(
        api_version="v1", kind="Pod",
        metadata=k8s.V1ObjectMeta(name=dns_name(prefix, DESCRIBE), namespace=settings.namespace,
                                  labels=labels(prefix, DESCRIBE)),
        spec=k8s.V1PodSpec(
            containers=[k8s.V1Container(name=DESCRIBE, image=settings.image, command=argv, volume_mounts=mounts,
                                        resources=gpu_limits(platform, gpus))],
            volumes=_model_volume(settings) or None, node_selector=settings.node_selector or None,
            service_account_name=settings.service_account, automount_service_account_token=False,
            image_pull_secrets=[k8s.V1LocalObjectReference(name=n) for n in settings.image_pull_secrets] or None,
            restart_policy="Never"))
    return ApiClient().sanitize_for_serialization(pod)


def manifests(prefix: str, specs: list[ProcessSpec], settings: KubernetesSettings, graph: bool,
              owner: dict[str, str] | None = None, head_apart: bool = False,
              platform: Platform = NVIDIA) -> list[dict]:
    """Every object of the deployment as plain dicts, in the order they are applied; `owner` (plan, system,
    benchmark) labels each. An engine's replicas are processes like any other, a Deployment and a Service each (one
    pod per replica, holding the GPUs of its `platform`'s resource); with `head_apart` their pods keep off the head's
    node (`away_from_head`)."""
    api = ApiClient()
    objects: list[Any] = [config_map(prefix, settings.namespace, specs, owner),
                          env_secret(prefix, settings.namespace, specs, graph, owner, platform)]
    if graph:
        if platform is not NVIDIA:   # the operator asks nvidia.com/gpu for a graph's `gpu` limit
            raise LaunchError(f"a DynamoGraphDeployment's GPUs are NVIDIA's, not {platform.vendor}'s",
                              fix="serve it with vllm or sglang, or on an NVIDIA system")
        objects.append(dynamo_graph(prefix, specs, settings, owner))
    else:
        for spec in specs:
            objects += [deployment(prefix, spec, settings, specs, owner, head_apart, platform),
                        service(prefix, spec, settings, owner)]
    return [api.sanitize_for_serialization(o) for o in objects if o is not None]


def shown(objects: list[dict]) -> list[dict]:
    """The objects as logs, dry runs and the launch's manifests.json show them: each value of a Secret as `<set>`."""
    return [{**o, "stringData": dict.fromkeys(o.get("stringData") or {}, SHOWN)} if o["kind"] == "Secret" else o
            for o in objects]


MODELS = {"ConfigMap": k8s.V1ConfigMap, "Deployment": k8s.V1Deployment, "Service": k8s.V1Service, "Pod": k8s.V1Pod,
          "Secret": k8s.V1Secret}


def validate(objects: list[dict]) -> None:
    """Round-trip every object through the client's models; a graph's containers through V1Container."""
    api = ApiClient()
    for obj in objects:
        kind = obj["kind"]
        if kind in MODELS:
            again = api.sanitize_for_serialization(MODELS[kind].from_dict(obj))
            if again != obj:
                raise LaunchError(f"{kind} {obj['metadata']['name']} does not survive the client's model",
                                  fix="report this: the manifest builder and the kubernetes client disagree")
        elif kind == DGD[3]:
            for name, svc in obj["spec"]["services"].items():
                main = svc["extraPodSpec"]["mainContainer"]
                k8s.V1Container.from_dict({"name": name.lower(), **main})
                for volume in svc["extraPodSpec"].get("volumes", []):
                    k8s.V1Volume.from_dict(volume)
        else:
            raise LaunchError(f"unexpected kind {kind}")
