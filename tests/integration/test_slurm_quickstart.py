"""docs/operations.md "Production quickstart: Slurm", followed on the local 4-node cluster (deployments/slurm/
local-cluster.sh): its `# step N` commands run as written (the engine's interpreter against `uname -m`, the dry run,
the sbatch run with the --time the dry run printed), with the simulated engine for Dynamo and the embedded S3 server.
And preflight's checks on the nodes themselves: the engine interpreter's architecture on every node (the real one,
then a fake one built for aarch64), etcd looked for on node 0 (`podium preflight PLAN --nodes`) and the system
described from node 0 of the engine's allocation by a Slurm step."""

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

pytestmark = [pytest.mark.integration, pytest.mark.slurm]
REPO = Path(__file__).parents[2]
DOC = REPO / "docs" / "operations.md"


def _steps(number: int) -> list[str]:
    """The commands of the quickstart marked `# step <number>`, as written there."""
    text = DOC.read_text()
    section = text[text.index("## Production quickstart: Slurm"):]
    section = section[:section.index("\n## ", 10)]
    found = [line.split(f"# step {number}")[0].strip() for line in section.splitlines()
             if line.rstrip().endswith(f"# step {number}")]
    assert found, f"the quickstart has no step {number}"
    return found


def _run(command: str, env: dict[str, str], timeout_s: float = 120) -> str:
    """One documented command, its $VARIABLES from `env`, no shell."""
    argv = [re.sub(r"\$(\w+)", lambda m: env[m.group(1)], a) for a in shlex.split(command)]
    done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout_s, check=False)
    assert done.returncode == 0, f"{command}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _slurm_plan(path: Path, store: Path, conf: Path, engine: dict) -> Path:
    write_plan(path, store)
    data = yaml.safe_load(path.read_text())
    data["benchmarks"][0]["engine"] = engine
    data["benchmarks"][0]["scenarios"] = {"Offline": data["benchmarks"][0]["scenarios"]["Offline"]}
    data["benchmarks"][0]["accuracy"] = False
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
    facts = node_checks(plan, tmp_path / "pids", str(tmp_path), said.append)
    machine = os.uname().machine
    assert f"cpu-smoke/gpt-oss-120b: {sys.executable} runs natively on node1 ({machine})" in said
    assert any(re.fullmatch(r"cpu-smoke: described from node1, node 0 of Slurm job \d+", s) for s in said), said
    here = detect_host(storage_path=tmp_path)   # the nodes are this machine: the step saw what this host sees
    assert facts["cpu-smoke"]["host_processor_model_name"] == here["host_processor_model_name"]
    assert facts["cpu-smoke"]["host_memory_capacity"] == here["host_memory_capacity"]
    assert facts["cpu-smoke"]["other_software_stack"].startswith(f"Python {sys.version.split()[0]}")
    assert _jobs(slurm_conf) == []   # the allocation taken for the checks was given back

    fake = tmp_path / "python-aarch64"   # an engine venv built for Grace, seen from an x86_64 node
    fake.write_text("#!/bin/sh\necho aarch64\n")
    fake.chmod(0o755)
    engine["options"]["python"] = str(fake)
    plan = plans.load(_slurm_plan(tmp_path / "fake.yaml", smoke_store, slurm_conf, engine))
    with pytest.raises(LaunchError) as e:
        node_checks(plan, tmp_path / "pids", str(tmp_path), said.append)
    assert f"engine.options.python={fake} is built for aarch64, but node node1 is {machine}" in str(e.value)
    assert 'docs/quickstart-slurm.md, step 1' in str(e.value)
    assert _jobs(slurm_conf) == []


def test_preflight_looks_for_etcd_on_node_0_of_the_allocation(slurm_conf: Path, smoke_store: Path,
                                                               tmp_path: Path) -> None:
    """`podium preflight PLAN --nodes` of a Dynamo engine with `discovery: etcd`, which starts etcd on node 0: a step
    there finds it (named as a path), then reports a path that is not there (exit 2, the option, the node and the
    fix); the allocation taken for the checks is given back either way."""
    etcd = tmp_path / "etcd"
    etcd.write_text("#!/bin/sh\n")
    etcd.chmod(0o755)
    slurm = {"slurm_conf": str(slurm_conf), "allocation": "new", "python": sys.executable, "grace_s": 3}
    engine = {"name": "dynamo", "launcher": "slurm", "slurm": slurm, "options": {
        "python": sys.executable, "version": "1.6.1", "worker": "mocker", "gpus_per_node": 0, "discovery": "etcd",
        "etcd": str(etcd)}}
    plan = _slurm_plan(tmp_path / "plan.yaml", smoke_store, slurm_conf, engine)
    found = CliRunner().invoke(app, ["preflight", str(plan), "--nodes", "--workspace", str(tmp_path / "ws")])
    assert found.exit_code == 0, found.output
    assert f"checked      cpu-smoke/gpt-oss-120b: {etcd} found on node1 (node 0)" in found.output
    assert found.output.rstrip().endswith("preflight: OK")

    engine["options"]["etcd"] = str(tmp_path / "bin" / "etcd")
    plan = _slurm_plan(tmp_path / "gone.yaml", smoke_store, slurm_conf, engine)
    gone = CliRunner().invoke(app, ["preflight", str(plan), "--nodes", "--workspace", str(tmp_path / "ws")])
    assert gone.exit_code == 2, gone.output
    assert re.search(rf"error: engine.options.etcd={tmp_path}/bin/etcd: not found on node1, node 0 of Slurm job \d+, "
                     "where the engine starts it", gone.output), gone.output
    assert "fix: install etcd on node1" in gone.output
    assert _jobs(slurm_conf) == []


def test_the_slurm_quickstart_on_the_local_cluster(slurm_conf: Path, smoke_store: Path, tmp_path: Path) -> None:
    engine = {"name": "simulated", "launcher": "slurm", "ready_timeout_s": 60, "warmup_requests": 0,
              "slurm": {"python": sys.executable, "grace_s": 3}}   # step 5: the plan's slurm section
    plan = _slurm_plan(tmp_path / "plan.yaml", smoke_store, slurm_conf, engine)
    env = {**os.environ, "SLURM_CONF": str(slurm_conf), "ENGINE_PYTHON": sys.executable, "PLAN": str(plan),
           "PODIUM_HOME": str(REPO), "PODIUM_WORKSPACE": str(tmp_path / "ws"), "PYTHONPATH": str(REPO)}

    arch = [_run(c, env).strip() for c in _steps(1)]   # step 1: the interpreter and the node agree
    assert arch == [os.uname().machine] * 2

    review = _run(_steps(6)[0], env)                    # step 6: the dry run says what Slurm must give
    checked = _run(_steps(6)[1], env)                   # and preflight checks this host, leaving the nodes
    assert checked.rstrip().endswith("preflight: OK"), checked
    assert "not checked  the engines' nodes of cpu-smoke/gpt-oss-120b (slurm)" in checked
    assert "Slurm time: 1 run(s) x their length x 1.5" in review
    job_time = re.search(r"podium\.sbatch needs --time >= (\S+) for the whole plan", review).group(1)

    out = tmp_path / "job.out"                          # step 7, on this cluster: no partition, 1 node, no GPUs
    argv = shlex.split(_steps(7)[0])
    argv = [a for a in argv if not a.startswith(("--partition", "--nodes", "--gpus-per-node", "--time"))]
    argv[1:1] = ["--wait", "--nodes=1", f"--time={job_time}", f"--output={out}"]
    done = subprocess.run([re.sub(r"\$(\w+)", lambda m: env[m.group(1)], a) for a in argv],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=240, check=False)
    text = out.read_text() if out.exists() else ""
    # The run went to the end: its one run VALID, the tree checked and published. The checker's one error is the
    # accuracy folder this cut plan (Offline only, no accuracy run, for CI time) leaves out on purpose: exit 6.
    assert done.returncode == 6, f"{done.stdout}{done.stderr}{text}"
    assert "smoke: 1/1 runs VALID, checker 1 errors" in text and "s3://podium/runs/smoke/" in text
    assert re.findall(r"`error` \*\*([\w-]+)\*\*", text) == ["accuracy-files"]
    job = done.stdout.split("Submitted batch job ")[1].split()[0]
    assert f"described from node1, node 0 of Slurm job {job}" in text     # preflight, inside the job
    assert f'"srun", "--jobid={job}", ' in text                          # the engine: a step of the same job
    assert re.search(r"run folder: .*/ws/runs/", text)                    # step 8: where the results went
    assert _jobs(slurm_conf) == []
