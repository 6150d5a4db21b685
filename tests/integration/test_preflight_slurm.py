"""`podium preflight` of a Slurm engine on the local 4-node cluster (deployments/slurm/local-cluster.sh): the
scheduler's verdict on the plan's request (`sbatch --test-only`, without `--nodes`: nothing submitted, as the
controller's log shows), each refused option named by its plan field; and with `--nodes`, the engine's commands
looked for on the nodes that run them (Dynamo 1.6.1's mocker deployment over two nodes, its etcd on the node
`options.services_node` names), every missing one in one report."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from tests.integration.engines_support import engine_python, system_command
from tests.integration.test_slurm_quickstart import _jobs, _slurm_plan

pytestmark = [pytest.mark.integration, pytest.mark.slurm]
# What slurmctld logs (SlurmctldDebug=info) when a batch job is submitted, and when any job is given nodes;
# `sbatch --test-only` logs neither.
SUBMITTED = re.compile(r"_slurm_rpc_submit_batch_job")
ALLOCATED = re.compile(r"sched: Allocate JobId|sched: _slurm_rpc_allocate_resources JobId")


def _submitted(conf: Path, what: re.Pattern[str] = SUBMITTED) -> int:
    """How many batch jobs (or with ALLOCATED: allocations of any job) the cluster's controller has logged."""
    log = conf.parent / "log" / "slurmctld.log"
    return len(what.findall(log.read_text())) if log.exists() else 0


def _plan(path: Path, store: Path, conf: Path, engine: dict) -> Path:
    """The smoke plan (one Offline run) with `engine`, its system two nodes."""
    _slurm_plan(path, store, conf, engine)
    data = yaml.safe_load(path.read_text())
    data["systems"][0]["nodes"] = 2
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _preflight(plan: Path, tmp_path: Path, *more: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["preflight", str(plan), *more, "--workspace", str(tmp_path / "ws")])
    return result.exit_code, " ".join(result.output.split())


def _mocker(slurm_conf: Path, python: Path, etcd: str, **slurm: object) -> dict:
    """A two-node Dynamo mocker deployment (etcd discovery) whose etcd runs on node 1, launched from here."""
    return {"name": "dynamo", "launcher": "slurm",
            "slurm": {"slurm_conf": str(slurm_conf), "allocation": "new", "python": sys.executable, "grace_s": 3,
                      **slurm},
            "options": {"python": str(python), "version": "1.6.1", "worker": "mocker", "gpus_per_node": 0,
                        "discovery": "etcd", "etcd": etcd, "nodes": 2, "services_node": 1,
                        "prefill": {"workers": 1, "nodes": [0]}, "decode": {"workers": 1, "nodes": [1]}}}


def test_slurm_names_each_option_it_refuses_and_nothing_is_submitted(slurm_conf: Path, smoke_store: Path,
                                                                      tmp_path: Path) -> None:
    python = engine_python(".venv-dynamo", "venv-dynamo")
    etcd = system_command("etcd", "etcd-server")
    engine = _mocker(slurm_conf, python, etcd)
    before = _submitted(slurm_conf), _submitted(slurm_conf, ALLOCATED)
    code, out = _preflight(_plan(tmp_path / "plan.yaml", smoke_store, slurm_conf, engine), tmp_path)
    assert code == 0, out
    assert "checked Slurm would grant each Slurm engine's allocation (sbatch --test-only, nothing submitted)" in out

    engine["slurm"] |= {"mem": "999999G", "partition": "gpu-h200"}   # no node has it; no such partition
    code, out = _preflight(_plan(tmp_path / "bad.yaml", smoke_store, slurm_conf, engine), tmp_path)
    assert code == 2, out
    assert "2 problems:" in out
    assert ("benchmarks.0.engine.slurm.partition: Slurm refuses --partition=gpu-h200: allocation failure: Invalid "
            "partition name specified (sbatch --test-only; nothing was submitted) fix: set engine.slurm.partition to "
            "one of `sinfo -s`") in out
    assert ("benchmarks.0.engine.slurm.mem: Slurm refuses --mem=999999G: allocation failure: Requested node "
            "configuration is not available") in out
    assert "fix: set engine.slurm.mem to what a node has (`sinfo -o '%P %m'`" in out

    engine["slurm"] = {**engine["slurm"], "partition": None, "mem": None, "nodes": 9}
    code, out = _preflight(_plan(tmp_path / "nodes.yaml", smoke_store, slurm_conf, engine), tmp_path)
    assert code == 2, out
    assert "benchmarks.0.engine.slurm.nodes: Slurm refuses --nodes=9: allocation failure: Node count specification " \
           "invalid" in out
    assert (_submitted(slurm_conf), _submitted(slurm_conf, ALLOCATED)) == before   # asked, never submitted
    assert _jobs(slurm_conf) == []
    assert not (tmp_path / "ws").exists()


def test_the_engines_commands_are_looked_for_on_the_nodes_that_run_them(slurm_conf: Path, smoke_store: Path,
                                                                         tmp_path: Path) -> None:
    """The mocker's frontend and prefill worker on node 0, its decode worker and etcd on node 1: each found there by
    a step; then an interpreter without Dynamo and an etcd that is not there, both named in one report, the etcd on
    node 1 (services_node) and the option that names each."""
    python = engine_python(".venv-dynamo", "venv-dynamo")
    etcd = system_command("etcd", "etcd-server")
    engine = _mocker(slurm_conf, python, etcd)
    plan = _plan(tmp_path / "plan.yaml", smoke_store, slurm_conf, engine)
    code, out = _preflight(plan, tmp_path, "--nodes")
    assert code == 0, out
    assert (f"checked cpu-smoke/gpt-oss-120b: {python} -m dynamo.mocker, {python} -m dynamo.frontend found on node1 "
            "(node 0)") in out
    assert f"checked cpu-smoke/gpt-oss-120b: {etcd}, {python} -m dynamo.mocker found on node2 (node 1)" in out
    assert out.endswith("preflight: OK")

    data = yaml.safe_load(plan.read_text())
    options = data["benchmarks"][0]["engine"]["options"]
    options |= {"python": sys.executable, "etcd": str(tmp_path / "bin" / "etcd")}   # no Dynamo there; no etcd
    (tmp_path / "gone.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    code, out = _preflight(tmp_path / "gone.yaml", tmp_path, "--nodes")
    assert code == 2, out
    assert re.search(rf"engine\.options\.etcd={tmp_path}/bin/etcd: not found on node2, node 1 of Slurm job \d+, "
                     r"where the engine starts it fix: install etcd on node2", out), out
    assert re.search(rf"{sys.executable} -m dynamo\.frontend \(engine\.options\.python\): not found on node1, node 0 "
                     r"of Slurm job \d+, where it runs frontend fix: install dynamo on every node of the allocation "
                     r"\(or in engine\.slurm\.container_image\) and set engine\.options\.python to its path there",
                     out), out
    assert re.search(rf"{sys.executable} -m dynamo\.mocker \(engine\.options\.python\): not found on node2, node 1 "
                     r"of Slurm job \d+, where it runs decode-0", out), out
    assert "problems:" in out and _jobs(slurm_conf) == []   # the allocation taken for the checks was given back
