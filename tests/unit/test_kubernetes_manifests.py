"""Kubernetes objects built as the kubernetes client's models and round-tripped through them; the Dynamo topology as
a DynamoGraphDeployment. No cluster: these are the manifests `podium launch` would apply."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes.client import ApiClient

from submission.base.errors import LaunchError
from submission.plan.engine_options import KubernetesSettings
from tasks.engines import backend
from tasks.launchers import kubernetes_manifests as manifests
from tasks.launchers.kubernetes import KubernetesLauncher
from tasks.launchers.kubernetes_manifests import container, dns_name, validate

SETTINGS = KubernetesSettings(image="nvcr.io/nvidia/tensorrt-llm/release:1.2.0", namespace="mlperf",
                              model_claim="mlperf-models", volume_mount="/mnt/mlperf", shm_gib=64,
                              image_pull_secrets=("ngc",), node_selector={"nvidia.com/gpu.product": "B200"})
GPT_OSS = {"version": "1.2.0", "gpus_per_node": 4, "tensor_parallel_size": 4, "expert_parallel_size": 4,
           "llm_api_options": {"enable_attention_dp": True}}
PLANTED = "hf_plantedK8s0123456789"
QWEN = {"version": "1.6.1", "nodes": 4, "gpus_per_node": 4, "discovery": "kubernetes", "served_model_name": "qwen3-vl",
        "prefill": {"workers": 6, "tensor_parallel_size": 2}, "decode": {"workers": 4}}


def _specs(engine: str, options: dict, launcher: KubernetesLauncher, model: str) -> list:
    nodes, ports = backend(engine).demand(options)
    placement = launcher.placement(ports, nodes=nodes)
    return backend(engine).processes(options, Path(model), placement, Path("/ws/builds/x"))


def test_trtllm_server_as_deployment_service_configmap_and_secret(tmp_path: Path) -> None:
    launcher = KubernetesLauncher(tmp_path, SETTINGS, engine="trtllm")
    specs = _specs("trtllm", {**GPT_OSS, "env": {"HF_TOKEN": PLANTED}}, launcher, "/mnt/mlperf/models/gpt-oss-120b")
    objects = launcher.objects(specs)   # validated: every object survives the client's models
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("ConfigMap", "podium-trtllm-files"), ("Secret", "podium-trtllm-env"),
        ("Deployment", "podium-trtllm-trtllm-server"), ("Service", "podium-trtllm-trtllm-server")]
    secret = objects[1]
    deployment = k8s.V1Deployment.from_dict(objects[2])
    pod = deployment.spec.template.spec
    [c] = pod.containers
    assert c.command == list(specs[0].argv) and c.image == SETTINGS.image
    assert c.command[c.command.index("--host") + 1] == "0.0.0.0"
    assert c.resources.limits == {"nvidia.com/gpu": "4"}
    assert "CUDA_VISIBLE_DEVICES" not in {e.name for e in c.env}   # the device plugin numbers a pod's GPUs from 0
    # every variable is named in the pod spec and takes its value from the Secret; no value is in the pod spec
    assert {e.name for e in c.env} == set(specs[0].env) - {"CUDA_VISIBLE_DEVICES"} and "HF_TOKEN" in specs[0].env
    assert all(e.value is None and e.value_from.secret_key_ref.name == "podium-trtllm-env" for e in c.env)
    refs = {e.name: e.value_from.secret_key_ref.key for e in c.env}
    assert secret["type"] == "Opaque" and secret["stringData"][refs["HF_TOKEN"]] == PLANTED
    assert {name: secret["stringData"][key] for name, key in refs.items()} == \
        {k: v for k, v in specs[0].env.items() if k != "CUDA_VISIBLE_DEVICES"}
    assert PLANTED not in json.dumps([o for o in objects if o["kind"] != "Secret"])
    # labelled as the ConfigMap: the label-based clean-up of a later launch removes it with the rest
    assert secret["metadata"]["labels"] == objects[0]["metadata"]["labels"] == manifests.labels("podium-trtllm")
    shown = manifests.shown(objects)   # what logs, dry runs and manifests.json show
    assert PLANTED not in json.dumps(shown) and shown[1]["stringData"] == dict.fromkeys(refs.values(), "<set>")
    assert shown[2] == objects[2] and objects[1]["stringData"][refs["HF_TOKEN"]] == PLANTED   # a copy: unchanged
    assert c.readiness_probe.http_get.path == "/health" and c.readiness_probe.http_get.port == 8000
    mounts = {m.mount_path: m for m in c.volume_mounts}
    assert mounts["/mnt/mlperf"].read_only and mounts["/dev/shm"].name == "shm"
    yaml_mount = mounts["/ws/builds/x/llm_api_options.yaml"]
    assert objects[0]["data"][yaml_mount.sub_path] == "enable_attention_dp: true\nenable_iter_perf_stats: true\n"
    volumes = {v.name: v for v in pod.volumes}
    assert volumes["model"].persistent_volume_claim.claim_name == "mlperf-models"
    assert volumes["shm"].empty_dir.size_limit == "64Gi"
    assert pod.node_selector == {"nvidia.com/gpu.product": "B200"} and pod.image_pull_secrets[0].name == "ngc"
    service = k8s.V1Service.from_dict(objects[3])
    assert service.spec.selector == deployment.spec.selector.match_labels
    assert [(p.name, p.port) for p in service.spec.ports] == [("http", 8000)]
    assert specs[0].host == "podium-trtllm-trtllm-server.mlperf.svc.cluster.local"


def test_dynamo_topology_as_a_dynamo_graph_deployment(tmp_path: Path) -> None:
    settings = SETTINGS.model_copy(update={"image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1"})
    launcher = KubernetesLauncher(tmp_path, settings, engine="dynamo")
    assert launcher.graph
    specs = _specs("dynamo", QWEN, launcher, "/mnt/mlperf/models/qwen3-vl")
    [graph] = [o for o in launcher.objects(specs) if o["kind"] == "DynamoGraphDeployment"]
    assert graph["apiVersion"] == "nvidia.com/v1alpha1" and graph["metadata"]["name"] == "podium-dynamo"
    services = graph["spec"]["services"]
    assert {k: (v["componentType"], v.get("subComponentType"), v["replicas"], v.get("resources"))
            for k, v in services.items()} == {
        "Frontend": ("frontend", None, 1, None),
        "PrefillWorker": ("worker", "prefill", 6, {"limits": {"gpu": "2"}}),
        "DecodeWorker": ("worker", "decode", 4, {"limits": {"gpu": "1"}})}
    main = services["PrefillWorker"]["extraPodSpec"]["mainContainer"]
    assert main["command"][:3] == ["python3", "-m", "dynamo.vllm"]
    assert main["command"][main["command"].index("--discovery-backend") + 1] == "kubernetes"
    env = {e["name"]: e for e in main["env"]}
    assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert "CUDA_VISIBLE_DEVICES" not in env and "ETCD_ENDPOINTS" not in env
    [secret] = [o for o in launcher.objects(specs) if o["kind"] == "Secret"]
    taken = {k: e["valueFrom"]["secretKeyRef"] for k, e in env.items() if "secretKeyRef" in e["valueFrom"]}
    assert taken and all("value" not in e for e in env.values())   # values from the Secret or the pod's IP only
    assert {ref["name"] for ref in taken.values()} == {secret["metadata"]["name"]}
    assert all(ref["key"] in secret["stringData"] for ref in taken.values())
    assert {v["name"] for v in services["PrefillWorker"]["extraPodSpec"]["volumes"]} == {"model", "shm"}
    endpoint = backend("dynamo").endpoint(QWEN, Path("/m"), specs)
    assert launcher.endpoint(endpoint, _Graph(specs)).base_url == \
        "http://podium-dynamo-frontend.mlperf.svc.cluster.local:8000"


class _Graph:
    def __init__(self, specs: list) -> None:
        self.processes, self.graph = specs, True


def test_a_process_spanning_nodes_has_no_pod(tmp_path: Path) -> None:
    launcher = KubernetesLauncher(tmp_path, SETTINGS, engine="trtllm")
    options = {**GPT_OSS, "nodes": 2, "tensor_parallel_size": 8}
    with pytest.raises(LaunchError, match="spans 2 nodes with 8 MPI ranks; the kubernetes launcher runs one pod"):
        launcher.objects(_specs("trtllm", options, launcher, "/m/x"))


def test_validation_catches_what_the_client_would_drop() -> None:
    api = ApiClient()
    good = api.sanitize_for_serialization(k8s.V1ConfigMap(api_version="v1", kind="ConfigMap", data={"a": "b"},
                                                          metadata=k8s.V1ObjectMeta(name="x")))
    validate([good])
    with pytest.raises(LaunchError, match="unexpected kind Job"):
        validate([{"kind": "Job", "metadata": {"name": "x"}}])
    with pytest.raises(ValueError):   # a string where the model wants a list: the client's model refuses it
        container.__globals__["k8s"].V1Container.from_dict({"name": "x", "command": "trtllm-serve"})


def test_names_are_dns_labels() -> None:
    assert dns_name("podium", "Qwen3_VL", "prefill-0") == "podium-qwen3-vl-prefill-0"
    assert dns_name("0abc") == "p-0abc" and len(dns_name("x" * 80)) == 63


def test_the_pod_that_describes_the_engines_node() -> None:
    """Shaped like the engine's pod (image, node selector, account, pull secrets, model volume, GPUs), run once, no
    API token; a CPU engine's asks for no GPU. It survives the client's model."""
    from tasks.launchers.kubernetes_manifests import describe_pod

    settings = KubernetesSettings(image="nvcr.io/nvidia/tensorrt-llm/release:1.2.0", namespace="mlperf",
                                  model_claim="mlperf-models", volume_mount="/mnt/mlperf", service_account="engine",
                                  image_pull_secrets=("ngc",), node_selector={"pool": "b200"})
    pod = describe_pod("podium-trtllm", settings, 4, ["python3", "-c", "print(1)", "/mnt/mlperf"])
    validate([pod])
    spec = pod["spec"]
    [c] = spec["containers"]
    assert pod["metadata"]["name"] == "podium-trtllm-describe" and spec["restartPolicy"] == "Never"
    assert c["resources"] == {"limits": {"nvidia.com/gpu": "4"}} and c["image"] == settings.image
    assert spec["nodeSelector"] == {"pool": "b200"} and spec["serviceAccountName"] == "engine"
    assert spec["automountServiceAccountToken"] is False and spec["imagePullSecrets"] == [{"name": "ngc"}]
    assert spec["volumes"][0]["persistentVolumeClaim"]["claimName"] == "mlperf-models"
    cpu = describe_pod("podium-vllm", settings.model_copy(update={"model_claim": None}), 0, ["true"])
    assert "resources" not in cpu["spec"]["containers"][0] and "volumes" not in cpu["spec"]


def test_every_object_carries_what_it_serves(tmp_path: Path) -> None:
    """The plan, system and benchmark label every object (what a rerun replaces by); the selectors stay the prefix's
    and the process's, so pods are found alike whoever launched them."""
    from tasks.launchers.kubernetes_manifests import label_value, owner_labels

    owner = {"plan": "gpt-oss-120b trtllm (k8s)", "system": "gb200x4-k8s", "benchmark": "gpt-oss-120b"}
    for engine, options in (("trtllm", GPT_OSS), ("dynamo", QWEN)):
        launcher = KubernetesLauncher(tmp_path, SETTINGS, engine=engine, owner=owner)
        objects = launcher.objects(_specs(engine, options, launcher, "/mnt/mlperf/models/m"))
        for obj in objects:
            assert obj["metadata"]["labels"]["podium.mlcommons.org/plan"] == "gpt-oss-120b-trtllm-k8s"
            assert obj["metadata"]["labels"]["podium.mlcommons.org/benchmark"] == "gpt-oss-120b"
            if obj["kind"] == "Deployment":
                assert "podium.mlcommons.org/plan" not in obj["spec"]["selector"]["matchLabels"]
    assert label_value(" gpt oss/120b! ") == "gpt-oss-120b" and label_value("a" * 99) == "a" * 63
    assert owner_labels(None) == {} and owner_labels({"plan": "p"}) == {"podium.mlcommons.org/plan": "p"}
