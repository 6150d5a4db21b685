"""What a Kubernetes operator deploys, checked without a cluster: the flow-run Job the podium-kubernetes pool
renders (with Prefect's own templating, as its worker does) and its GPU request per kind of plan, and the flow
image's definition against the pool and the repository."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from packaging.specifiers import SpecifierSet
from prefect.utilities.templating import apply_values
from prefect.workers.base import BaseJobConfiguration

from submission.plan import model as plans
from tasks.ops import registration

REPO = Path(__file__).parents[2]
DOCKERFILE = REPO / "deployments" / "kubernetes" / "Dockerfile"
K8S_PLAN = REPO / "deployments" / "plans" / "gpt-oss-120b-trtllm-k8s.yaml"
GPU = "nvidia.com/gpu"


def render(values: dict[str, Any], template: dict | None = None) -> dict:
    """The job configuration a worker builds for a deployment with these job variables: the variables' defaults
    updated with `values`, then Prefect's placeholder substitution (what BaseJobConfiguration.from_template_and_values
    does before resolving blocks and Prefect variables, which this template uses none of)."""
    template = template or registration.template("kubernetes")
    variables = BaseJobConfiguration._get_base_config_defaults(template["variables"]["properties"])
    variables.update(values)
    return apply_values(template["job_configuration"], variables)


def pod(config: dict) -> k8s.V1PodSpec:
    """The rendered Job's pod spec as the kubernetes client's model. The worker (prefect-kubernetes) turns the
    container's `env` mapping into a list of name/value pairs and fills its args before it applies the Job; so does
    this function, with placeholder args."""
    manifest = json.loads(json.dumps(config["job_manifest"]))
    [container] = manifest["spec"]["template"]["spec"]["containers"]
    container["env"] = [{"name": k, "value": v} for k, v in container.get("env", {}).items()]
    container.setdefault("args", shlex.split(BaseJobConfiguration._base_flow_run_command()))
    for kind in ("requests", "limits"):   # the API server reads a JSON number as a quantity; the model wants text
        container["resources"][kind] = {k: str(v) for k, v in container["resources"][kind].items()}
    return k8s.V1Job.from_dict(manifest).spec.template.spec


def job_variables(plan: plans.Plan) -> dict[str, Any]:
    """The pool variables the quickstart (docs/quickstart-kubernetes.md) sets for a plan: the node's GPUs
    (`gpus_per_node`) only when an engine runs `local`, inside the flow pod; nothing about GPUs when the launcher gives
    the engine its pods."""
    local = [b.engine.config() for b in plan.benchmarks if b.engine.launcher == "local"]
    return {"gpus": max(getattr(o, "gpus_per_node", 0) for o in local)} if local else {}


@pytest.mark.parametrize("launcher", ["kubernetes", "local"])
def test_the_flow_pod_asks_for_gpus_only_when_it_runs_the_engine(launcher: str) -> None:
    data = yaml.safe_load(K8S_PLAN.read_text())
    engine = data["benchmarks"][0]["engine"]
    if launcher == "local":   # the same trtllm server, started inside the flow's own pod
        engine["launcher"] = "local"
        del engine["kubernetes"]
    plan = plans.parse(data)
    config = render({"image": "registry.example/podium-flow:1", **job_variables(plan)})
    [container] = pod(config).containers
    expected = 0 if launcher == "kubernetes" else 4   # the plan's one node of 4 B200s
    assert container.resources.requests[GPU] == container.resources.limits[GPU] == str(expected)
    assert job_variables(plan) == ({} if launcher == "kubernetes" else {"gpus": 4})
    gpus = registration.template("kubernetes")["variables"]["properties"]["gpus"]
    assert gpus["default"] == 0 and "launcher: kubernetes" in gpus["description"] and "`local`" in gpus["description"]


def test_the_flow_pods_workspace_is_a_persistent_volume_claim() -> None:
    """The workspace the submission flow writes (its default `workspace`, under the pod's working directory) is the
    pool's claim, so the run cache and the tree outlive the pod; the claim shipped beside the pool is the default."""
    import inspect

    from flows.submission import submission

    spec = pod(render({"image": "x"}))
    [container] = spec.containers
    workspace = Path(container.working_dir) / inspect.signature(submission.fn).parameters["workspace"].default
    [mount] = [m for m in container.volume_mounts if m.mount_path == str(workspace)]
    [volume] = [v for v in spec.volumes if v.name == mount.name]
    claim = yaml.safe_load((REPO / "deployments" / "kubernetes" / "workspace-claim.yaml").read_text())
    assert volume.persistent_volume_claim.claim_name == claim["metadata"]["name"] == "podium-workspace"
    assert not volume.persistent_volume_claim.read_only and not mount.read_only
    assert claim["metadata"]["namespace"] == registration_namespace()
    stage = next(m for m in container.volume_mounts if m.name == "stage")   # the node's NVMe, inside the workspace
    assert Path(stage.mount_path).parent == workspace
    other = pod(render({"image": "x", "workspace_claim": "mlperf-runs"}))
    assert [v.persistent_volume_claim.claim_name for v in other.volumes if v.name == mount.name] == ["mlperf-runs"]


def registration_namespace() -> str:
    """The namespace of the shipped Kubernetes deployments (their `namespace` job variable)."""
    [ns] = {d["work_pool"]["job_variables"]["namespace"] for d in registration.deployments()
            if d["name"].endswith("-k8s")}
    return ns


def test_the_data_volume_is_mounted_only_when_given() -> None:
    bare = pod(render({"image": "x"}))
    assert [v.name for v in bare.volumes] == ["workspace", "stage", "dshm"]
    assert [m.name for m in bare.containers[0].volume_mounts] == ["workspace", "stage", "dshm"]
    claim = {"name": "mlperf", "persistentVolumeClaim": {"claimName": "mlperf-models", "readOnly": True}}
    mount = {"name": "mlperf", "mountPath": "/mnt/mlperf", "readOnly": True}
    spec = pod(render({"image": "x", "data_volume": claim, "data_volume_mount": mount}))
    assert spec.volumes[-1].persistent_volume_claim.claim_name == "mlperf-models"
    assert spec.containers[0].volume_mounts[-1].mount_path == "/mnt/mlperf"
    # the k8s plan's sources and the engine pods' model path sit under that mount
    bench = plans.load(K8S_PLAN).benchmarks[0]
    assert all(p.startswith("/mnt/mlperf/") for p in (bench.model.source, bench.dataset.performance,
                                                      bench.dataset.accuracy, bench.engine.kubernetes.model_path))


def dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) of each instruction, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", "\n".join(line for line in DOCKERFILE.read_text().splitlines()
                                          if not line.lstrip().startswith("#")))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip()) for line in text.splitlines()
            if line.strip()]


def test_the_flow_image_matches_the_pool_and_the_repository() -> None:
    steps = dockerfile()
    first = dict(steps)
    template = registration.template("kubernetes")
    [container] = template["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]["containers"]
    env = template["variables"]["properties"]["env"]["default"]
    # one tag for x86_64 and aarch64 (GB200's Grace) nodes: a base published for both, Python >= 3.12 (the endpoints
    # client's floor), which the project's requires-python admits
    assert re.fullmatch(r"python:3\.(1[2-9])-slim-bookworm", first["FROM"])
    python = first["FROM"].split(":")[1].split("-")[0]
    assert SpecifierSet(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]).contains(
        python)
    assert first["ARG"] == "TARGETARCH"
    assert "docker buildx build --platform linux/amd64,linux/arm64 -f deployments/kubernetes/Dockerfile" in \
        re.sub(r"\\\n#\s*", "", DOCKERFILE.read_text())
    # loadgen has no aarch64 wheel: arm64 builds it from source, with a compiler installed before the project
    [compiler] = [i for i, (op, args) in enumerate(steps) if op == "RUN" and "g++" in args]
    assert '"$TARGETARCH" = "arm64"' in steps[compiler][1]
    assert compiler < next(i for i, (op, args) in enumerate(steps) if op == "RUN" and "pip install" in args)
    assert first["WORKDIR"] == container["workingDir"] == env["PODIUM_REPO"] == "/opt/podium"
    assert "PODIUM_REPO=/opt/podium" in first["ENV"]
    # the worker puts `prefect flow-run execute` in the container's args: no ENTRYPOINT may stand in front of it
    assert "ENTRYPOINT" not in first and container["args"] == "{{ command }}" and "command" not in container
    assert json.loads(first["CMD"]) == shlex.split(BaseJobConfiguration._base_flow_run_command())
    [install] = [args for op, args in steps if op == "RUN" and "pip install" in args]
    argv = shlex.split(install.split("&&")[0])
    constraints = argv[argv.index("-c") + 1]
    assert (REPO / constraints).is_file() and constraints in (REPO / "Makefile").read_text()  # what `make install` uses
    [target] = [a for a in argv[argv.index("install") + 1:] if a.startswith(".")]
    extras = set(re.fullmatch(r"\.\[(.*)\]", target)[1].split(","))
    optional = plans_extras()
    assert extras <= set(optional) and "smoke" not in extras and "k8s" in extras   # no torch; the launcher's client
    assert not {"torch", "transformers"} & {re.split(r"[<>=\[]", r)[0] for e in extras for r in optional[e]}


def plans_extras() -> dict[str, list[str]]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def test_the_flow_pod_imports_no_model_runtime(tmp_path: Path) -> None:
    """What the flow pod imports to drive an engine in its own pod (the submission flow, the kubernetes launcher,
    the harness, the gpt-oss evaluator, the trtllm backend) loads without torch or transformers, which its image
    does not have."""
    import subprocess
    import sys

    script = tmp_path / "imports.py"
    script.write_text(
        "import importlib.abc, sys\n"
        "BLOCKED = {'torch', 'transformers', 'safetensors', 'PIL'}\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] in BLOCKED:\n"
        "            raise ImportError(f'{name} is not in the flow image')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import flows.submission, flows.bringup, tasks.launchers.kubernetes, tasks.harness.sut\n"
        "from tasks.accuracy import evaluator\n"
        "from tasks.engines import backend\n"
        "evaluator('gpt-oss-120b'); backend('trtllm')\n")
    done = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
