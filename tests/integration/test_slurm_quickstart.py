"""docs/quickstart-slurm.md on the local 4-node cluster (deployments/slurm/local-cluster.sh): every command the page
does not mark as not run, in its order, with bash, in a folder laid out like the repository's root: the engine's
interpreter against `uname -m`, the plan copied, the dry run, preflight on this host and on the nodes, the sbatch run
with the --time the dry run printed, and the check (the assembly of the round's tree from this run and another plan's
runs in the bucket is not run: tests/integration/test_curation.py assembles and packs runs of two plans); PLAN pinned
to the smoke plan on the simulated engine (Offline only) and the embedded S3 server. And preflight's checks on the
nodes themselves: the engine interpreter's architecture on every node (the real one, then a fake one built for
aarch64), etcd looked for on node 0 (`podium preflight PLAN --nodes`) and the system described from node 0 of the
engine's allocation by a Slurm step."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from submission.base.errors import LaunchError
from submission.plan import model as plans
from submission.tree.host_facts import detect_host
from tasks.ops.slurm_checks import node_checks
from tests.integration.conftest import write_plan
from tests.integration.engines_support import engine_python
from tests.manual import DOCS, Runner, bare, checkout, runnable, runner_env

pytestmark = [pytest.mark.integration, pytest.mark.slurm]
PAGE = DOCS / "quickstart-slurm.md"


def _slurm_plan(path: Path, store: Path, conf: Path, engine: dict, accuracy: bool = False) -> Path:
    write_plan(path, store)
    data = yaml.safe_load(path.read_text())
    data["benchmarks"][0]["engine"] = engine
    data["benchmarks"][0]["scenarios"] = {"Offline": data["benchmarks"][0]["scenarios"]["Offline"]}
    data["benchmarks"][0]["accuracy"] = accuracy
    data["compliance"] = {"run": "never"}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _jobs(conf: Path) -> list[str]:
    env = {**os.environ, "SLURM_CONF": str(conf)}
    return subprocess.run(["squeue", "--noheader", "--format=%i"], env=env, capture_output=True, text=True,
                          check=True, timeout=60).stdout.split()


def test_preflight_checks_the_engine_interpreter_on_the_nodes_and_describes_node_0(
        slurm_conf: Path, smoke_store: Path, tmp_path: Path) -> None:
    slurm = {"slurm_conf": str(slurm_conf), "allocation": "new", "python": sys.executable, "grace_s": 3}
    engine = {"name": "vllm", "launcher": "slurm", "options": {"python": sys.executable}, "slurm": slurm}
    plan = plans.load(_slurm_plan(tmp_path / "plan.yaml", smoke_store, slurm_conf, engine))
    said: list[str] = []
    facts, problems = node_checks(plan, tmp_path / "pids", str(tmp_path), said.append)
    machine = os.uname().machine
    assert f"cpu-smoke/gpt-oss-120b: {sys.executable} runs natively on node1 ({machine})" in said
    assert any(re.fullmatch(r"cpu-smoke: described from node1, node 0 of Slurm job \d+", s) for s in said), said
    here = detect_host(storage_path=tmp_path)   # the nodes are this machine: the step saw what this host sees
    assert facts["cpu-smoke"]["host_processor_model_name"] == here["host_processor_model_name"]
    assert facts["cpu-smoke"]["host_memory_capacity"] == here["host_memory_capacity"]
    assert facts["cpu-smoke"]["other_software_stack"].startswith(f"Python {sys.version.split()[0]}")
    # this interpreter has no vLLM: the server's module is not found on the node that runs it
    assert [str(p).split(", where")[0] for p in problems] == [
        f"{sys.executable} -m vllm.entrypoints.openai.api_server (engine.options.python): not found on node1, node 0 "
        f"of Slurm job {said[-1].split()[-1]}"]
    assert _jobs(slurm_conf) == []   # the allocation taken for the checks was given back

    fake = tmp_path / "python-aarch64"   # an engine venv built for Grace, seen from an x86_64 node
    fake.write_text("#!/bin/sh\necho aarch64\n")
    fake.chmod(0o755)
    engine["options"]["python"] = str(fake)
    plan = plans.load(_slurm_plan(tmp_path / "fake.yaml", smoke_store, slurm_conf, engine))
    _, problems = node_checks(plan, tmp_path / "pids", str(tmp_path), said.append)
    [wrong] = [p for p in problems if isinstance(p, LaunchError) and "is built for" in p.message]
    assert f"engine.options.python={fake} is built for aarch64, but node node1 is {machine}" in str(wrong)
    assert 'docs/quickstart-slurm.md, step 1' in str(wrong)
    assert _jobs(slurm_conf) == []


def test_preflight_looks_for_etcd_on_node_0_of_the_allocation(slurm_conf: Path, smoke_store: Path,
                                                               tmp_path: Path) -> None:
    """`podium preflight PLAN --nodes` of a Dynamo engine with `discovery: etcd`, which starts etcd on node 0 (the
    default `options.services_node`): a step there finds it (named as a path) beside the engine's own commands, then
    reports a path that is not there (exit 2, the option, the node and the fix); the allocation taken for the checks
    is given back either way."""
    python = engine_python(".venv-dynamo", "venv-dynamo")
    etcd = tmp_path / "etcd"
    etcd.write_text("#!/bin/sh\n")
    etcd.chmod(0o755)
    slurm = {"slurm_conf": str(slurm_conf), "allocation": "new", "python": sys.executable, "grace_s": 3}
    engine = {"name": "dynamo", "launcher": "slurm", "slurm": slurm, "options": {
        "python": str(python), "version": "1.6.1", "worker": "mocker", "gpus_per_node": 0, "discovery": "etcd",
        "etcd": str(etcd)}}
    plan = _slurm_plan(tmp_path / "plan.yaml", smoke_store, slurm_conf, engine)
    found = CliRunner().invoke(app, ["preflight", str(plan), "--nodes", "--workspace", str(tmp_path / "ws")])
    assert found.exit_code == 0, found.output
    assert (f"checked      cpu-smoke/gpt-oss-120b: {etcd}, {python} -m dynamo.mocker, {python} -m dynamo.frontend "
            "found on node1 (node 0)") in found.output
    assert found.output.rstrip().endswith("preflight: OK")

    engine["options"]["etcd"] = str(tmp_path / "bin" / "etcd")
    plan = _slurm_plan(tmp_path / "gone.yaml", smoke_store, slurm_conf, engine)
    gone = CliRunner().invoke(app, ["preflight", str(plan), "--nodes", "--workspace", str(tmp_path / "ws")])
    assert gone.exit_code == 2, gone.output
    assert re.search(rf"error: {plan}: engine.options.etcd={tmp_path}/bin/etcd: not found on node1, node 0 of "
                     r"Slurm job \d+, where the engine starts it", gone.output), gone.output
    assert "fix: install etcd on node1" in gone.output
    assert _jobs(slurm_conf) == []


def test_the_slurm_quickstart_on_the_local_cluster(slurm_conf: Path, smoke_store: Path, tmp_path: Path) -> None:
    root = checkout(tmp_path / "checkout")
    engine = {"name": "simulated", "launcher": "slurm", "ready_timeout_s": 60, "warmup_requests": 0,
              "slurm": {"python": sys.executable, "grace_s": 3}}   # step 3: the plan's slurm section
    plan = _slurm_plan(tmp_path / "plan.yaml", smoke_store, slurm_conf, engine, accuracy=True)
    ws = tmp_path / "ws"
    env = runner_env(SLURM_CONF=str(slurm_conf), ENGINE_PYTHON=sys.executable, PLAN=str(plan),
                     PODIUM_WORKSPACE=str(ws))
    runner = Runner(root, env, pinned=frozenset({"ENGINE_PYTHON", "PLAN", "PODIUM_WORKSPACE"}))
    commands = runnable(PAGE)
    out: dict[str, str] = {}
    job_time = ""
    for command in commands:
        if command.startswith("sbatch "):   # step 7 on this cluster: no partition, 1 node, no GPUs, the time printed
            argv = [a for a in shlex.split(command) if not a.startswith(("--partition", "--nodes", "--gpus-per-node",
                                                                         "--time"))]
            argv[1:1] = ["--wait", "--nodes=1", f"--time={job_time}", f"--output={tmp_path / 'job.out'}"]
            # exit 6: the simulated engine (Dynamo's stand-in) answers no accuracy question right, so the run's
            # accuracy step fails; its tree checks clean all the same (a smoke tree: a warning)
            out["sbatch"] = runner.run(command, instead=shlex.join(argv).replace("'$PLAN'", '"$PLAN"'), expect=6,
                                       timeout_s=300).stdout
            continue
        out[bare(command)] = runner.run(command, timeout_s=180).stdout
        if "--dry-run" in command:
            job_time = re.search(r"podium\.sbatch needs --time >= (\S+) for the whole plan",
                                 out[bare(command)]).group(1)
    assert runner.ran == commands

    machine = os.uname().machine                                            # step 1: the interpreter and the node
    assert [out[bare(c)].strip() for c in commands if c.startswith("srun ")] == [machine] * 2
    assert (root / "site" / "qwen3-vl.yaml").read_text() == \
        (root / "deployments" / "plans" / "qwen3-vl-dynamo-50-50.yaml").read_text()          # step 3: the copy
    review = out['.venv/bin/podium launch "$PLAN" --dry-run']                 # step 5: what Slurm must give
    assert "Slurm time: 2 run(s) x their length x 1.5" in review   # Offline: performance, accuracy
    host = out['.venv/bin/podium preflight "$PLAN"']                         # step 6: this host, then the nodes
    assert host.rstrip().endswith("preflight: OK") and "not checked  the engines' nodes of cpu-smoke/gpt-oss-120b" \
        " (slurm)" in host, host
    nodes = out['.venv/bin/podium preflight "$PLAN" --nodes']
    assert nodes.rstrip().endswith("preflight: OK") and re.search(r"described from node1, node 0 of Slurm job \d+",
                                                                  nodes), nodes

    text = (tmp_path / "job.out").read_text()                              # step 7: the run, inside one job
    assert "smoke: 1/1 runs VALID, 0/1 accuracy PASS, checker 0 errors" in text, text[-3000:]
    assert "s3://podium/runs/smoke/" in text
    job = out["sbatch"].split("Submitted batch job ")[1].split()[0]
    assert f"described from node1, node 0 of Slurm job {job}" in text     # preflight, inside the job
    assert f'"srun", "--jobid={job}", ' in text                          # the engine: a step of the same job
    assert re.search(r"run folder: .*/ws/runs/", text)
    checked = out['.venv/bin/podium check "$PODIUM_WORKSPACE/runs/latest/submission"']   # step 8
    assert "1 scenario folder(s) checked against v6.1: no errors" in checked, checked
    assert _jobs(slurm_conf) == []
