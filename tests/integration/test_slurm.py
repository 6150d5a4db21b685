"""The Slurm launcher on a real Slurm cluster of 4 nodes on this machine (deployments/slurm/local-cluster.sh: munged,
slurmctld and one slurmd per node name, all on 127.0.0.1): the smoke engine as a two-node topology with a real
loadgen run against one node, GPU steps that get their own (device-file) GPUs, the allocation Podium runs inside,
and the failures a submitter meets (a step that exits while starting, a missing command, an allocation Slurm
refuses, a run killed before it stopped its allocation)."""

from __future__ import annotations

import dataclasses
import http.server
import json
import logging
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from submission.base.errors import LaunchError
from submission.base.files import sha256_file
from submission.results.logs import load_run
from tasks.engines import HttpProbe, Placement, ProcessSpec, backend
from tasks.harness import runner
from tasks.launchers import launcher, slurm_stage
from tasks.launchers.slurm import SlurmLauncher
from tasks.serving import telemetry
from tasks.staging.stage import stage
from tests.integration.conftest import write_plan
from tests.integration.engines_support import offline_spec
from tests.local_http import LocalServer
from tests.secret_search import CommandLines, files_under, leaks

pytestmark = [pytest.mark.integration, pytest.mark.slurm]
LOG = logging.getLogger("test.slurm")
REPO = Path(__file__).parents[2]
SBATCH = REPO / "deployments" / "slurm" / "podium.sbatch"

# Serves HTTP on 127.0.0.1:<port>; first prints what Slurm gave the step.
WEB = """
import http.server, os, sys
print("node", os.environ.get("SLURMD_NODENAME"), "gpus", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), http.server.SimpleHTTPRequestHandler).serve_forever()
"""


def _slurm(conf: Path, *argv: str) -> str:
    env = {**os.environ, "SLURM_CONF": str(conf)}
    return subprocess.run(list(argv), env=env, capture_output=True, text=True, check=True, timeout=60).stdout


def _jobs(conf: Path) -> list[str]:
    return _slurm(conf, "squeue", "--noheader", "--format=%i").split()


def _until(condition: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def _settings(conf: Path, **more: object) -> dict[str, object]:
    return {"slurm_conf": str(conf), "allocation": "new", "python": sys.executable, "grace_s": 5,
            "step_timeout_s": 30, **more}


def _web(name: str, port: int, node: int = 0, gpus: int = 0, host: str = "127.0.0.1") -> ProcessSpec:
    return ProcessSpec(role="server", name=name, argv=(sys.executable, "-c", WEB, str(port)), host=host, port=port,
                       node_index=node, gpus=gpus, probes=(HttpProbe("/"),))


def _first_line(log: Path, timeout_s: float = 15) -> str:
    """The first whole line of a step's log: srun forwards a step's output on its own time, possibly in pieces, so
    the line may still be on its way when the step already answers its probe."""
    deadline = time.monotonic() + timeout_s
    while "\n" not in (text := log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return text.split("\n", 1)[0]


def _process_on_port(port: int) -> int:
    """The pid of the smoke server on `port` (a Python process; srun's own command line holds the same words)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if Path(args[0]).name.startswith("python") and "serve" in args and "--port" in args \
                and args[args.index("--port") + 1] == str(port):
            return int(cmdline.parent.name)
    raise AssertionError(f"no process serves port {port}")


def _web_pid(port: int) -> int:
    """The pid of the WEB server on `port` (a Python process; srun's command line ends with the same words)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if Path(args[0]).name.startswith("python") and args[1:2] == ["-c"] and args[2:3] == [WEB] \
                and args[3:4] == [str(port)]:
            return int(cmdline.parent.name)
    raise AssertionError(f"no WEB server on port {port}")


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)


def _stepd_of(pid: int) -> str:
    """The command line of the slurmstepd this process runs under."""
    while pid > 1:
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        name = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        if name.startswith("slurmstepd"):
            return name.strip("\0")
    raise AssertionError("not under a slurmstepd")


def _rss(pid: int) -> str:
    return next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("VmRSS"))


def _listening(pid: int) -> list[str]:
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    return [line.split()[3] for line in out.splitlines() if f"pid={pid}," in line]


def test_smoke_engine_on_two_nodes_with_loadgen(slurm_conf: Path, smoke_store: Path, tmp_path: Path) -> None:
    model = smoke_store / "models" / "tiny-llama"
    smoke = backend("smoke")
    where = launcher("slurm", state_dir=tmp_path / "state", settings=_settings(slurm_conf, nodes=3))
    placement = where.placement(1, nodes=3)
    # Two smoke servers of one deployment, on the first and the third node of the allocation.
    specs = []
    for index in (0, 2):
        node = placement.node(index)
        spec = smoke.processes({}, model, Placement(node.host, node.ports))[0]
        specs.append(dataclasses.replace(spec, name=f"smoke-{index}", node_index=index))
    assert specs[0].port != specs[1].port   # the nodes share one address here, so ports differ across nodes
    deployment = where.start(specs, tmp_path / "logs", LOG)
    try:
        alloc = deployment.allocation
        assert alloc.nodes == ("node1", "node2", "node3") and alloc.owned
        where.wait_ready(deployment, timeout_s=300)
        for step in deployment.steps:   # each process runs under the slurmd of its node, in its recorded step
            pid = _process_on_port(step.spec.port)
            env = _environ(pid)
            assert env["SLURMD_NODENAME"] == alloc.nodes[step.spec.node_index] == step.nodes[0]
            assert f"{env['SLURM_JOB_ID']}.{env['SLURM_STEP_ID']}" == step.step_id
            assert env["HF_HUB_OFFLINE"] == "1"   # the backend's env reached the step (--export)
            assert _stepd_of(pid) == f"slurmstepd: [{step.step_id}]"
            assert _listening(pid) == [f"127.0.0.1:{step.spec.port}"]
            LOG.info("%s: %s", step.label, _rss(pid))
        steps = _slurm(slurm_conf, "squeue", "--noheader", "--steps", "--format=%i %N").split("\n")
        assert {f"{s.step_id} {s.nodes[0]}" for s in deployment.steps} <= set(steps)
        endpoint = smoke.endpoint({}, model, [specs[1]])   # the server on node3
        data = smoke_store / "datasets" / "smoke" / "perf_eval_ref.parquet"
        stats = runner.run(offline_spec(data, "performance", samples=8, max_tokens=8, engine="smoke under slurm",
                                            qps=400),   # ~440 samples: over 1 s even on a fast machine
                           endpoint, tmp_path / "perf", timeout_s=300)
        assert stats["failed"] == 0 and stats["completed"] >= 8, stats
        run = load_run(tmp_path / "perf")
        assert run.valid and run.num_errors == 0, run
    finally:
        where.stop(deployment)
    assert all(s.srun.poll() is not None for s in deployment.steps)
    assert _jobs(slurm_conf) == []                              # steps and allocation cancelled
    for spec in specs:
        with pytest.raises(AssertionError, match="no process serves"):
            _process_on_port(spec.port)
    assert not list((tmp_path / "state").glob("slurm-*.json"))   # nothing left on record
    log = (tmp_path / "logs" / "smoke-2.log").read_text()
    assert f"STEP {deployment.steps[1].step_id} ON node3 CANCELLED" in log


def test_gpu_steps_get_their_own_gpus_inside_the_job_podium_runs_in(slurm_conf: Path, tmp_path: Path) -> None:
    """Podium inside a job (as under sbatch): steps go into that job, which Podium never cancels. Each GPU step gets
    GPUs of its own; a step that asks for more than are left is not created and says why."""
    out = subprocess.run(["salloc", "--no-shell", "--nodes=1", "--gpus-per-node=4", "--exclusive", "--job-name=outer"],
                         env={**os.environ, "SLURM_CONF": str(slurm_conf)}, capture_output=True, text=True,
                         check=True, timeout=60)
    job = out.stderr.split("Granted job allocation ")[1].split()[0]
    try:
        where = SlurmLauncher(tmp_path / "state", _settings(slurm_conf, allocation="auto", step_timeout_s=4),
                              environ={**os.environ, "SLURM_JOB_ID": job})
        ports = where.placement(3).ports
        deployment = where.start([_web("a", ports[0], gpus=2), _web("b", ports[1], gpus=2)], tmp_path / "logs", LOG)
        try:
            assert deployment.allocation.job_id == job and not deployment.allocation.owned
            where.wait_ready(deployment, timeout_s=30)
            node = deployment.allocation.nodes[0]
            seen = [_first_line(tmp_path / "logs" / f"{n}.log") for n in "ab"]
            assert seen == [f"node {node} gpus 0,1", f"node {node} gpus 2,3"]   # distinct, in the specs' order
            with pytest.raises(LaunchError) as e:
                where.start([_web("c", ports[2], gpus=1)], tmp_path / "logs", LOG)
            assert f"c (step ? on {node}) exited with code 1 while starting" in str(e.value)
            assert "taken by other steps" in str(e.value)
        finally:
            where.stop(deployment)
        listed = _slurm(slurm_conf, "squeue", "--noheader", "--steps", f"--jobs={job}", "--format=%i")
        assert listed.split() == []               # every step cancelled
        assert _jobs(slurm_conf) == [job]          # the job Podium ran in is still there
    finally:
        _slurm(slurm_conf, "scancel", job)


def _launch_error(where: SlurmLauncher, specs: list[ProcessSpec], logs: Path) -> LaunchError:
    with pytest.raises(LaunchError) as e:
        deployment = where.start(specs, logs, LOG)
        try:
            where.wait_ready(deployment, timeout_s=120)
        finally:
            where.stop(deployment)
    return e.value


def test_a_step_that_exits_while_starting_fails_at_once(slurm_conf: Path, tmp_path: Path) -> None:
    where = SlurmLauncher(tmp_path / "state", _settings(slurm_conf))
    port = where.placement(1, nodes=2).node(1).ports[0]
    assert where.allocation is not None
    second = where.allocation.nodes[1]
    broken = ProcessSpec(role="server", name="broken", node_index=1, port=port, probes=(HttpProbe("/health"),),
                         argv=(sys.executable, "-c", "import time; time.sleep(2); print('weights not found: /m/x'); "
                                                     "raise SystemExit(3)"))
    started = time.monotonic()
    text = str(_launch_error(where, [broken], tmp_path / "logs"))
    assert time.monotonic() - started < 20
    assert "broken (step " in text and f"on {second}) exited with code 3" in text and "weights not found: /m/x" in text
    assert _jobs(slurm_conf) == []


def test_a_missing_command_names_the_fix(slurm_conf: Path, tmp_path: Path) -> None:
    where = SlurmLauncher(tmp_path / "state", _settings(slurm_conf))
    port = where.placement(1).ports[0]
    spec = ProcessSpec(role="server", name="nothere", argv=("/opt/none/bin/trtllm-serve", "model"), port=port,
                       probes=(HttpProbe("/health"),))
    error = _launch_error(where, [spec], tmp_path / "logs")
    assert "nothere (step " in error.message and "exited with code" in error.message
    assert error.fix is not None and "install the engine on every node" in error.fix, error
    assert _jobs(slurm_conf) == []


@pytest.mark.parametrize(("settings", "meaning", "fix"), [
    ({"nodes": 5}, "more nodes than the partition has", "lower engine.slurm.nodes"),
    ({"gpus_per_node": 8}, "no node has what was asked", "gpus_per_node"),
    ({"partition": "gpu-h200"}, "the partition does not exist", "fix engine.slurm.partition"),
])
def test_an_allocation_slurm_refuses(slurm_conf: Path, tmp_path: Path, settings: dict, meaning: str,
                                     fix: str) -> None:
    where = SlurmLauncher(tmp_path / "state", _settings(slurm_conf, **settings))
    with pytest.raises(LaunchError) as e:
        where.placement(1)
    assert "Slurm refused the allocation" in e.value.message and meaning in e.value.message
    assert e.value.fix is not None and fix in e.value.fix
    assert _jobs(slurm_conf) == [] and not list((tmp_path / "state").glob("slurm-*.json"))


def test_no_python_on_the_nodes_to_find_ports(slurm_conf: Path, tmp_path: Path) -> None:
    where = SlurmLauncher(tmp_path / "state", _settings(slurm_conf, python="/opt/none/bin/python3"))
    with pytest.raises(LaunchError) as e:
        where.placement(2, nodes=2)
    assert "cannot find the address and free ports of node" in e.value.message
    assert e.value.fix is not None and "engine.slurm.python must be a Python on the nodes" in e.value.fix
    _until(lambda: _jobs(slurm_conf) == [])   # the allocation taken for the placement is given back


def test_another_launcher_object_stops_a_deployment(slurm_conf: Path, tmp_path: Path) -> None:
    """A flow stops the engine with its own launcher object, not the one its launch task started it with."""
    started = SlurmLauncher(tmp_path / "state", _settings(slurm_conf))
    deployment = started.start([_web("web", started.placement(1).ports[0])], tmp_path / "logs", LOG)
    started.wait_ready(deployment, timeout_s=30)
    SlurmLauncher(tmp_path / "state", _settings(slurm_conf)).stop(deployment)
    assert deployment.steps[0].srun.poll() is not None
    assert _jobs(slurm_conf) == [] and not list((tmp_path / "state").glob("slurm-*.json"))


def test_the_environment_goes_by_name_and_no_value_shows_in_ps_or_the_log(slurm_conf: Path, tmp_path: Path,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    """A planted HF_TOKEN (and a value holding a comma) in a step's env: srun's command line names the variables
    (`--export=ALL,NAME,...`), `ps` shows no value while the step runs, the launch log says `HF_TOKEN=<set>`, and the
    process on its node starts with both values."""
    planted = "hf_plantedSlurmStep" + secrets.token_hex(8)
    where = SlurmLauncher(tmp_path / "state", _settings(slurm_conf))
    port = where.placement(1).ports[0]
    spec = dataclasses.replace(_web("web", port), env={"HF_TOKEN": planted, "HOSTS": "a,b"})
    serves = f" {port}"   # how the WEB server's command line ends; srun's too, which starts with srun
    with caplog.at_level(logging.INFO), \
            CommandLines(watch=lambda args: args.endswith(serves) and not args.startswith("srun")) as ps:
        deployment = where.start([spec], tmp_path / "logs", LOG)
        try:
            where.wait_ready(deployment, timeout_s=60)
            pid = _web_pid(port)
            env = _environ(pid)   # the process on its node, under its slurmstepd
            assert _stepd_of(pid) == f"slurmstepd: [{deployment.steps[0].step_id}]"
            _until(lambda: pid in ps.environ)   # `ps` listed it at least once while it served
        finally:
            where.stop(deployment)
    assert (env["HF_TOKEN"], env["HOSTS"]) == (planted, "a,b") and ps.environ[pid]["HF_TOKEN"] == planted
    assert "--export=ALL,HF_TOKEN,HOSTS" in deployment.steps[0].srun.args
    assert any(line.split(maxsplit=1)[1].startswith("srun --jobid=") for line in ps.seen)   # srun was listed
    assert '"HF_TOKEN": "<set>"' in caplog.text
    outputs = [*ps.blobs(), *files_under(tmp_path / "logs", tmp_path / "state"), ("log", caplog.text.encode())]
    assert leaks(outputs, planted) == []


def test_a_later_launch_cancels_what_a_killed_run_left(slurm_conf: Path, tmp_path: Path) -> None:
    first = SlurmLauncher(tmp_path / "state", _settings(slurm_conf))
    port = first.placement(1).ports[0]
    orphan = first.start([_web("orphan", port)], tmp_path / "logs", LOG)
    first.wait_ready(orphan, timeout_s=30)   # the run that took it "dies" here without stopping it
    left = orphan.allocation.job_id
    second = SlurmLauncher(tmp_path / "state", _settings(slurm_conf))
    again = second.start([], tmp_path / "logs2", LOG)
    try:
        orphan.steps[0].srun.wait(timeout=30)   # its srun ends with the cancelled job
        _until(lambda: left not in _jobs(slurm_conf))
        assert _jobs(slurm_conf) == [again.allocation.job_id]
    finally:
        second.stop(again)
    assert _jobs(slurm_conf) == []


def test_podium_inside_sbatch_runs_its_engine_in_that_job(slurm_conf: Path, smoke_store: Path, tmp_path: Path) -> None:
    """The production path: `sbatch deployments/slurm/podium.sbatch launch PLAN` runs Podium in the batch step; the
    plan's engine (the light simulated server) becomes a step of the same job, answers, and is cancelled."""
    plan = write_plan(tmp_path / "plan.yaml", smoke_store)
    data = yaml.safe_load(plan.read_text())
    data["benchmarks"][0]["engine"] = {"name": "simulated", "launcher": "slurm", "ready_timeout_s": 60,
                                       "slurm": {"allocation": "inherit", "python": sys.executable, "grace_s": 3}}
    plan.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "job.out"
    env = {**os.environ, "SLURM_CONF": str(slurm_conf), "PODIUM_HOME": str(REPO),
           "PODIUM_WORKSPACE": str(tmp_path / "ws")}
    done = subprocess.run(["sbatch", "--wait", "--nodes=1", f"--output={out}", str(SBATCH), "launch", str(plan),
                           "--hold", "1"], env=env, capture_output=True, text=True, timeout=300, check=False)
    text = out.read_text() if out.exists() else ""
    assert done.returncode == 0, f"{done.stdout}{done.stderr}{text}"
    job = done.stdout.split("Submitted batch job ")[1].split()[0]
    assert f"podium in Slurm job {job} on node" in text
    assert f'"srun", "--jobid={job}", ' in text                    # the engine is a step of this very job
    serving = next(line for line in text.splitlines() if line.startswith("serving 'simulated' at http://127.0.0.1:"))
    assert serving and f"STEP {job}.1 ON " in text and "CANCELLED" in text   # step 0 found the free port
    _until(lambda: _jobs(slurm_conf) == [])


# A fake nvidia-smi for every node: one row per GPU Slurm gave the step, its values naming the node (nodeN, GPU i:
# utilisation 10 N + i %, N GiB used, 100 N W)
FAKE_SMI = """#!/bin/sh
n=${SLURMD_NODENAME#node}
for i in $(echo "${CUDA_VISIBLE_DEVICES:-0}" | tr , ' '); do
    echo "$i, $((10 * n + i)), $((1024 * n)), $((100 * n))"
done
"""
# one dcgm-exporter page per node, at /<node>/metrics: the node's number as its GPU 0's utilisation
DCGM_PAGE = 'DCGM_FI_DEV_GPU_UTIL{{gpu="0",Hostname="localhost"}} {n}\nDCGM_FI_DEV_FB_USED{{gpu="0"}} 1\n'


def test_gpu_telemetry_from_every_engine_node_tagged_by_node(slurm_conf: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A two-node deployment (a prefill process holding a GPU of the first node, a decode process one of the third):
    the launcher starts a GPU sampler step on each engine node and stops it with the engine; a run's telemetry has
    samples from both nodes, each row tagged with its node, and the mean GPU use per role. A DCGM URL template
    expands to the allocation's nodes, and its rows carry the node of their URL."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text(FAKE_SMI)
    (fake / "nvidia-smi").chmod(0o755)
    monkeypatch.setattr(telemetry, "INTERVAL_S", 0.5)
    where = SlurmLauncher(tmp_path / "state", _settings(slurm_conf, nodes=3),
                          environ={**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"})
    placement = where.placement(1, nodes=3)
    simulated = backend("simulated")
    specs = []
    for role, index in (("prefill", 0), ("decode", 2)):
        node = placement.node(index)
        [spec] = simulated.processes({}, Path("/m"), Placement(node.host, node.ports))
        specs.append(dataclasses.replace(spec, role=role, name=role, node_index=index, gpus=1))
    deployment = where.start(specs, tmp_path / "logs", LOG)
    pages = LocalServer(DcgmPages).start()
    try:
        where.wait_ready(deployment, timeout_s=120)
        endpoint = simulated.endpoint({}, Path("/m"), specs[:1])
        seen = where.watched(deployment)
        assert seen.nodes == ("node1", "node2", "node3")
        assert [n for n, _ in seen.gpu_logs] == ["node1", "node3"] and len(deployment.samplers) == 2
        with telemetry.sampling(tmp_path / "run", dataclasses.replace(endpoint, watched=seen), "simulated"):
            time.sleep(3)
        template = f"{pages.url}/{{node}}/metrics"
        dcgm = dataclasses.replace(seen, dcgm=telemetry.expand_dcgm((template,), seen.nodes))
        with telemetry.sampling(tmp_path / "dcgm", dataclasses.replace(endpoint, watched=dcgm), "simulated"):
            time.sleep(1.5)
    finally:
        pages.stop()
        where.stop(deployment)
    assert all(s.srun.poll() is not None for s in deployment.samplers) and _jobs(slurm_conf) == []
    lines = telemetry.load(tmp_path / "run" / telemetry.FILE)
    rows = [g for x in lines if x["kind"] == "sample" for g in x.get("gpus", [])]
    assert {g["node"] for g in rows} == {"node1", "node3"}, lines
    assert all(g["util_pct"] == 10 * int(g["node"][-1]) + g["index"] and g["memory_mib"] == 1024 * int(g["node"][-1])
               for g in rows), rows
    assert lines[0]["gpu_roles"] == {"node1": {"0": "prefill"}, "node3": {"0": "decode"}}
    summary = telemetry.summary(lines)
    assert (summary["gpu_util_pct.prefill"], summary["gpu_util_pct.decode"]) == (10, 30), summary
    lines = telemetry.load(tmp_path / "dcgm" / telemetry.FILE)
    assert lines[0]["dcgm"] == [template.replace("{node}", n) for n in ("node1", "node2", "node3")]
    assert lines[0]["gpu_samplers"] == {}   # one source of GPU facts: the exporters
    rows = [g for x in lines if x["kind"] == "sample" for g in x.get("gpus", [])]
    assert {(g["node"], g["util_pct"]) for g in rows} == {("node1", 1), ("node2", 2), ("node3", 3)}, lines


class DcgmPages(http.server.BaseHTTPRequestHandler):
    """/<node>/metrics: that node's exporter page."""

    def do_GET(self) -> None:
        node = self.path.split("/")[1]
        body = DCGM_PAGE.format(n=int(node.removeprefix("node"))).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_local_stage_copies_the_model_onto_each_node_verified_and_keeps_a_complete_copy(slurm_conf: Path,
                                                                                        tmp_path: Path) -> None:
    """`engine.slurm.local_stage`: a step per node that reads the model copies the staged folder onto that node's
    disk (here one filesystem: a folder per node by `{node}`), verified against the manifest; the engine's argv names
    the node's copy. A second launch copies nothing, a file changed on one node is copied again there, and a
    folder that cannot be written or a shared copy that no longer matches its manifest fail naming node and field."""
    source = tmp_path / "source" / "tiny"
    (source / "sub").mkdir(parents=True)
    (source / "config.json").write_text('{"model_type": "llama"}')
    (source / "model.safetensors").write_bytes(os.urandom(3 << 20))
    (source / "sub" / "tokenizer.json").write_text("{}")
    model = Path(stage(source, tmp_path / "stage").path)
    manifest = json.loads((model / ".podium-manifest.json").read_text())
    total = sum(m["size"] for m in manifest.values())
    where = SlurmLauncher(tmp_path / "state", _settings(slurm_conf, nodes=2,
                                                        local_stage=str(tmp_path / "nvme" / "{node}")))
    reader = (sys.executable, "-c", "pass", "--model", str(model), "--tokenizer", f"{model}/sub/tokenizer.json")
    specs = [ProcessSpec(role="server", name="a", argv=reader), ProcessSpec(role="server", name="b", argv=reader,
                                                                            node_index=1),
             ProcessSpec(role="router", name="router", argv=(sys.executable, "-c", "pass"))]
    try:
        local = where.model_on_nodes(specs, model, LOG)
        nodes = where.allocation.nodes
        copies = [tmp_path / "nvme" / n / model.name for n in nodes]
        assert local[0].argv[4] == str(copies[0]) and local[1].argv[4] == str(copies[1])
        assert local[1].argv[6] == f"{copies[1]}/sub/tokenizer.json" and local[2] == specs[2]
        for copy in copies:
            for rel, meta in manifest.items():
                assert sha256_file(copy / rel) == meta["sha256"] and (copy / rel).stat().st_size == meta["size"]

        def copy_all(folder: Path = model) -> dict[str, dict]:
            return slurm_stage.copy_to_nodes(where.settings, where.env, where.allocation.job_id, nodes, folder,
                                             "copy", LOG)

        again = copy_all()
        assert {n: (r["copied"], r["kept"]) for n, r in again.items()} == {n: (0, total) for n in nodes}
        weights = copies[1] / "model.safetensors"
        weights.write_bytes(os.urandom(weights.stat().st_size))   # same size, other bytes (and another mtime)
        fixed = copy_all()
        assert (fixed[nodes[0]]["copied"], fixed[nodes[1]]["copied"]) == (0, weights.stat().st_size)
        assert sha256_file(weights) == manifest["model.safetensors"]["sha256"]

        (tmp_path / "nvme" / nodes[0] / model.name).rename(tmp_path / "gone")   # node 0 copies afresh...
        shared = model / "sub" / "tokenizer.json"
        shared.write_text("{} ")   # ...from a shared copy that no longer matches its manifest
        with pytest.raises(LaunchError, match=rf"local_stage: the model's copy on {nodes[0]} failed: sub/tokenizer"
                                              r".json: sha256 \w+ after the copy") as err:
            copy_all()
        assert "stage the model again" in str(err.value)
        blocked = tmp_path / "blocked"
        blocked.write_text("a file, not a folder")
        where.settings = where.settings.model_copy(update={"local_stage": f"{blocked}/{{node}}"})
        with pytest.raises(LaunchError, match=rf"on {nodes[0]} failed: cannot write in {blocked}/{nodes[0]}") as err:
            where.model_on_nodes(specs, model, LOG)
        assert "point engine.slurm.local_stage at a folder the job may write" in str(err.value)
    finally:
        where.release()
    assert _jobs(slurm_conf) == []
