"""`podium preflight PLAN` and the checks on the flow's host it shares with `podium run` and the flows' preflight task
(tasks/ops/prerequisites.py): plans built from the shipped ones, complete, then with one prerequisite taken away at a
time. Each missing piece is named with its fix, exit 2, nothing started. The same plan on stand-ins for its clusters,
every piece in one report: tests/integration/test_preflight_plans.py."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from submission.base.errors import PlanError
from submission.plan import model as plans
from submission.rules import load_rules
from tasks.endpoints import install
from tasks.ops import prerequisites
from tasks.ops.prerequisites import host_checks
from tests.unit.test_endpoints_client import OTHER, PIN, fake_venv, git_install

REPO = Path(__file__).parents[2]
PLANS = REPO / "deployments" / "plans"
CLOSED_FIELDS = ("host_memory_configuration", "accelerator_host_interconnect", "accelerator_memory_configuration",
                 "accelerator_interconnect", "cooling", "host_networking", "host_networking_topology")


def _git(cwd: Path, *args: str) -> str:
    argv = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(argv, cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def ready(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Two shipped plans in one, with everything they need here: gpt-oss-120b on TensorRT-LLM (Kubernetes, its
    LiveCodeBench tests named) and Qwen3-VL on Dynamo (run locally on the mocker, etcd discovery, measured by the
    endpoints client), their sources as small files, the endpoints client installed at the pin, an etcd, and
    inference_src a checkout at the round's (here: the test repository's) commit."""
    store = tmp_path / "store"
    (store / "model").mkdir(parents=True)
    data = store / "set.parquet"
    pd.DataFrame({"input_tokens": [[1, 2, 3]], "ground_truth": ["x"], "dataset": ["gpqa"]}).to_parquet(data)
    (store / "lcb.jsonl").write_text("{}\n")
    etcd = store / "etcd"
    etcd.write_text("#!/bin/sh\n")
    etcd.chmod(0o755)
    monkeypatch.setattr(install, "DEFAULT_VENV", fake_venv(tmp_path / "venv-endpoints", git_install(PIN)))

    src = tmp_path / "inference"   # mlcommons/inference as the checks need it, its commit standing for the pin
    (src / "tools" / "submission" / "submission_checker").mkdir(parents=True)
    (src / "tools" / "submission" / "submission_checker" / "main.py").write_text("print('checker')\n")
    (src / "compliance").mkdir()
    (src / "compliance" / "README.md").write_text("audits\n")
    _git(src, "init", "--quiet")
    _git(src, "add", "-A")
    _git(src, "commit", "--quiet", "-m", "the pinned layout")
    rules = load_rules("v6.1")
    pinned = rules.model_copy(update={"inference_sources": rules.inference_sources.model_copy(
        update={"commit": _git(src, "rev-parse", "HEAD")})})
    monkeypatch.setattr(prerequisites, "load_rules", lambda round: pinned)

    gpt = yaml.safe_load((PLANS / "gpt-oss-120b-trtllm-k8s.yaml").read_text())
    vlm = yaml.safe_load((PLANS / "qwen3-vl-dynamo-50-50.yaml").read_text())
    first, second = gpt["benchmarks"][0], vlm["benchmarks"][0]
    first["model"]["source"] = second["model"]["source"] = str(store / "model")
    first.pop("fetch", None), second.pop("fetch", None)   # the sources are here already (fetching: test_fetch.py)
    first["dataset"] = {"performance": str(data), "accuracy": str(data), "compliance": {"TEST07": str(data)},
                        "lcb_tests": str(store / "lcb.jsonl")}
    second["dataset"] = {"performance": str(data), "accuracy": str(data), "scenarios": {"Interactive": str(data)}}
    second["engine"] = {"name": "dynamo", "options": {   # its serving options, on the mocker here, version pinned
        "python": sys.executable, "version": "1.6.1", "worker": "mocker", "gpus_per_node": 0, "discovery": "etcd",
        "etcd": str(etcd), **{k: second["engine"]["options"][k] for k in (
            "enable_prefix_caching", "enable_multimodal", "limit_mm_per_prompt", "max_model_len")}}}
    gpt.pop("fetch", None)   # inference_src is a checkout here, not the fetched archive
    plan = {**gpt, "systems": gpt["systems"] + vlm["systems"], "benchmarks": [first, second],
            "storage": {"bucket": "podium", "embedded": True}, "inference_src": str(src)}
    for system in plan["systems"]:
        system["description"] = {**dict.fromkeys(CLOSED_FIELDS, "as described"), **system["description"]}
    return plan


def _write(plan: dict[str, Any], folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def _no_checkpoint(plan: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan["benchmarks"][0]["model"]["source"] = str(tmp_path / "models" / "gpt-oss-120b")


def _no_lcb_tests(plan: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    del plan["benchmarks"][0]["dataset"]["lcb_tests"]


def _no_endpoints_client(plan: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(install, "DEFAULT_VENV", tmp_path / "no-venv")


def _endpoints_client_elsewhere(plan: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed on the right Python, at a commit the round does not pin: preflight reads the commit back."""
    monkeypatch.setattr(install, "DEFAULT_VENV", fake_venv(tmp_path / "venv-other", git_install(OTHER)))


def _no_etcd(plan: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan["benchmarks"][1]["engine"]["options"]["etcd"] = str(tmp_path / "bin" / "etcd")


def _inference_src_missing(plan: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan["inference_src"] = str(tmp_path / "no-inference")


def _inference_src_elsewhere(plan: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = Path(plan["inference_src"])
    (src / "loadgen.conf").write_text("later\n")
    _git(src, "add", "-A")
    _git(src, "commit", "--quiet", "-m", "a later commit")


# (planted, what the report must say of it: the place, the missing piece, the fix)
PLANTED = {
    "no-checkpoint": (_no_checkpoint, ("benchmarks.0.model.source: ", "models/gpt-oss-120b does not exist",
                                       "Staging models and data sets")),
    "no-lcb-tests": (_no_lcb_tests, ("benchmarks.0.dataset.lcb_tests: gpt-oss-120b's accuracy score needs the "
                                     "LiveCodeBench tests", "set it to the LiveCodeBench release_v6 tests")),
    "no-endpoints-client": (_no_endpoints_client, ("benchmarks.1 (measured by the endpoints client): the endpoints "
                                                   "client is not installed", "make venv-endpoints")),
    "endpoints-client-elsewhere": (_endpoints_client_elsewhere, (
        "benchmarks.1 (measured by the endpoints client): the endpoints client in ", f"is at commit {OTHER[:12]}, "
        f"but the v6.1 rules pin {PIN[:12]}", "make venv-endpoints")),
    "no-etcd": (_no_etcd, ("benchmarks.1.engine.options.etcd: ", "bin/etcd is not on this host",
                           "install etcd on this host", "or set engine.options.etcd to its path")),
    "inference-src-missing": (_inference_src_missing, ("inference_src: ", "no-inference does not exist",
                                                       "podium fetch-inference --round v6.1")),
    "inference-src-elsewhere": (_inference_src_elsewhere, ("inference_src: ", "not the pinned",
                                                           "podium fetch-inference --round v6.1")),
}


def _children() -> set[int]:
    """This process's child processes (anything a check started and left running)."""
    return {int(pid) for task in Path("/proc/self/task").iterdir()
            for pid in (task / "children").read_text().split()}


def test_the_complete_plan_passes_and_says_what_it_checked(ready: dict[str, Any], tmp_path: Path) -> None:
    found = host_checks(plans.load(_write(ready, tmp_path / "plan")), "plan.yaml")
    assert found.problems == []
    assert "the LiveCodeBench tests of each gpt-oss-120b accuracy score named" in found.checked
    assert "the endpoints client at the v6.1 commit, on Python >= 3.12" in found.checked
    assert "inference_src: mlcommons/inference at the v6.1 commit" in found.checked
    assert "the commands the local engines start (etcd, nats-server) found here" in found.checked


@pytest.mark.parametrize("name", list(PLANTED))
def test_each_missing_piece_is_named_with_its_fix(name: str, ready: dict[str, Any], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    plant, expected = PLANTED[name]
    plant(ready, tmp_path, monkeypatch)
    found = host_checks(plans.load(_write(ready, tmp_path / "plan")), "plan.yaml")
    assert len(found.problems) == 1, found.problems
    with pytest.raises(PlanError) as error:
        found.require()
    text = str(error.value)
    assert [e for e in expected if e not in text] == [], text
    assert error.value.exit_code == 2


def test_podium_run_refuses_the_same_plan_with_the_same_report(ready: dict[str, Any], tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    _no_lcb_tests(ready, tmp_path, monkeypatch)
    _no_etcd(ready, tmp_path, monkeypatch)
    workspace = tmp_path / "ws"
    result = CliRunner().invoke(app, ["run", str(_write(ready, tmp_path / "plan")), "--workspace", str(workspace)])
    assert result.exit_code == 2, result.output
    assert "2 problems:" in result.output and "dataset.lcb_tests" in result.output and "options.etcd" in result.output
    assert not workspace.exists()


def test_a_slurm_engines_nodes_are_left_to_nodes_and_nothing_is_submitted(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped Slurm plan without --nodes: this host's report; the nodes (etcd on node 0) named as not checked;
    Slurm asked only whether it would grant the allocation (`sbatch --test-only`), never for a job or a step (each
    Slurm command here records its argv, and this controller refuses: named as the problem it is)."""
    calls = tmp_path / "calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for command in ("salloc", "sbatch", "srun", "squeue", "scontrol", "kubectl"):
        (bin_dir / command).write_text(f'#!/bin/sh\necho {command} "$@" >> {calls}\n'
                                       'echo "Unable to contact slurm controller (connect failure)" >&2\nexit 1\n')
        (bin_dir / command).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    result = CliRunner().invoke(app, ["preflight", str(PLANS / "qwen3-vl-dynamo-50-50.yaml"),
                                      "--workspace", str(tmp_path / "ws")])
    assert result.exit_code == 2
    assert ("elsewhere    gb200x16-slurm/qwen3-vl-235b-a22b: etcd on node 0 of its Slurm allocation, by the node "
            "checks") in result.output
    assert ("not checked  the engines' nodes of gb200x16-slurm/qwen3-vl-235b-a22b (slurm): `podium preflight PLAN "
            "--nodes` checks them") in result.output
    assert "benchmarks.0.model.source: /lustre/mlperf/models/" in result.output
    out = " ".join(result.output.split())
    assert ("benchmarks.0.engine.slurm: Slurm refuses even a one-node job (--nodes=1): Unable to contact slurm "
            "controller (connect failure) (sbatch --test-only; nothing was submitted) fix: the Slurm controller does "
            "not answer") in out
    assert calls.read_text().splitlines() == [   # the plan's request, then one node: only asked, never submitted
        "sbatch --test-only --job-name=podium-preflight --nodes=4 --gpus-per-node=4 --mem=0 --exclusive "
        "--time=02:15:00 --wrap=true",
        "sbatch --test-only --job-name=podium-preflight --nodes=1 --wrap=true"]


def test_the_smoke_plan_passes(smoke_store: Path, tmp_path: Path) -> None:
    text = (PLANS / "smoke.yaml").read_text().replace(".podium/store", str(smoke_store))
    plan = tmp_path / "smoke.yaml"
    plan.write_text(text)
    result = CliRunner().invoke(app, ["preflight", str(plan), "--workspace", str(tmp_path / "ws")])
    assert result.exit_code == 0, result.output
    assert result.output.rstrip().endswith("preflight: OK")
    assert "checked      every source the plan names exists; object storage has credentials" in result.output
    assert "not checked" not in result.output   # a local engine: nothing left to the nodes


def test_the_endpoints_client_on_an_older_python_is_refused(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    venv = fake_venv(tmp_path / "v", git_install(PIN))
    (venv / "lib" / "python3.12").rename(venv / "lib" / "python3.11")
    monkeypatch.setattr(install, "DEFAULT_VENV", venv)
    plan = types.SimpleNamespace(round="v6.1", benchmarks=[object()], harness=lambda b: "endpoints")
    [problem] = prerequisites.endpoints_problems(plan)
    assert f"the endpoints client in {venv} runs on Python 3.11, but it needs Python >= 3.12" in str(problem)
    assert "make venv-endpoints ENDPOINTS_PYTHON=python3.12" in str(problem)
