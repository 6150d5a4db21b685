"""Runs on the netns Slurm cluster, inside the namespaces `local-cluster.sh run` made (docs/slurm.md):

    PODIUM_SLURM_NETNS=1 PODIUM_SLURM_DIR=DIR deployments/slurm/local-cluster.sh run \\
        python -m tests.integration.slurm_netns SPEC.json                   (from the repository root)

Each Slurm node has its own network namespace, IPv4 address and host name; `NodeAddr` is the name. Dynamo's etcd and
frontend go on the allocation's first node, a prefill mocker on the second and a decode mocker on the third, launched
by the dynamo backend and the Slurm launcher as one flow does (placement, processes, start, wait until ready); a
loadgen Offline run through the harness from the head (where Podium runs) follows, then the stop.

The run is sampled as every measured run is (tasks/serving/telemetry.py), its GPU figures from the launcher's GPU
sampler steps, which run the `nvidia-smi` of the spec's `fake_bin` on each node. Then a dcgm-exporter stand-in is
started in each node's network and UTS namespaces (entered through its slurmd, on the same port on every node, as an
exporter runs on a cluster) and the spec's DCGM URL template, filled with the allocation's node names, is scraped from
the head, where each name resolves to its node's own address.

Writes `result.json` into the work folder: the nodes and the addresses their names resolve to, every process as
launched (argv, the address settings of its env) and where it ran (node, network namespace, listening sockets), what
the frontend saw, the loadgen stats and what was left after the stop; when the launch fails, the error and the last
lines of every process's log instead.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ADDRESS_ENV = ("DYN_TCP_RPC_HOST", "DYN_TCP_RESPONSE_STREAM_HOST", "DYN_EVENT_PLANE_HOST", "DYN_SYSTEM_HOST",
               "ETCD_ENDPOINTS")
NODE_OF = {"etcd": 0, "frontend": 0, "prefill": 1, "decode": 2}   # which node of the allocation runs each role
# A dcgm-exporter stand-in, run in a node's namespaces: `python -c EXPORTER PORT` serves on every address of the node
# one GPU whose utilisation is 50 + N on the node whose host name (its own UTS namespace's) is nodeN.
EXPORTER = """
import http.server, socket, sys
n = int(socket.gethostname().removeprefix("node"))
page = f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",Hostname="{socket.gethostname()}"}} {50 + n}\\n'.encode()
class Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)
    def log_message(self, *args):
        pass
http.server.HTTPServer(("0.0.0.0", int(sys.argv[1])), Page).serve_forever()
"""


def options(spec: dict[str, Any]) -> dict[str, Any]:
    """Three nodes: etcd and the frontend on node 0, one prefill mocker pinned to node 1, one decode mocker to 2."""
    return {"python": spec["python"], "worker": "mocker", "discovery": "etcd", "etcd": spec["etcd"], "nodes": 3,
            "gpus_per_node": 0, "served_model_name": "tiny",
            "prefill": {"workers": 1, "nodes": [NODE_OF["prefill"]]},
            "decode": {"workers": 1, "nodes": [NODE_OF["decode"]]},
            "worker_args": ["--speedup-ratio", "20"]}


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)


def job_processes(job: str) -> dict[int, dict[str, str]]:
    """Every process that runs for Slurm job `job` (its tasks carry SLURM_JOB_ID), with its environment."""
    found = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            env = _environ(int(entry.name))
        except OSError:
            continue
        if env.get("SLURM_JOB_ID") == job:
            found[int(entry.name)] = env
    return found


def where_it_ran(step_id: str, procs: dict[int, dict[str, str]]) -> dict[str, Any]:
    """The node, network namespace and listening sockets of one step's processes."""
    from tests.integration.engines_support import listening

    step = step_id.split(".")[1]
    pids = [pid for pid, env in procs.items() if env.get("SLURM_STEP_ID") == step]
    nets, nodes, pgids = set(), set(), set()
    for pid in pids:
        try:
            nets.add(os.readlink(f"/proc/{pid}/ns/net"))
            pgids.add(os.getpgid(pid))
        except OSError:
            continue
        nodes.add(procs[pid].get("SLURMD_NODENAME", "?"))
    return {"pids": pids, "netns": sorted(nets), "nodes": sorted(nodes), "listening": listening(pgids)}


def _tails(logs: Path) -> dict[str, str]:
    from tasks.launchers.local import tail

    return {log.stem: tail(log) for log in sorted(logs.glob("*.log"))}


def _squeue(*args: str) -> list[str]:
    done = subprocess.run(["squeue", "--noheader", *args], capture_output=True, text=True, check=True, timeout=60)
    return done.stdout.split()


def _slurm_launcher(work: Path, fake_bin: str) -> Any:
    """The Slurm launcher on this cluster, with a new allocation and its state in `work`/pids; its steps find
    `fake_bin`'s nvidia-smi first on PATH."""
    from tasks.launchers import launcher

    return launcher("slurm", state_dir=work / "pids",
                    settings={"slurm_conf": os.environ["SLURM_CONF"], "allocation": "new", "python": sys.executable,
                              "grace_s": 5, "step_timeout_s": 30},
                    environ={**os.environ, "PATH": f"{fake_bin}:{os.environ['PATH']}"})


def _until(condition: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} in {timeout_s:.0f} s")
        time.sleep(0.2)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def start_exporters(nodes: list[str], port: int) -> dict[str, subprocess.Popen]:
    """A dcgm-exporter stand-in on each node, in the network and UTS namespaces of its slurmd (its pid file under
    PODIUM_SLURM_DIR), serving on `port` there; each answers by its node's name from here before this returns."""
    run = Path(os.environ["PODIUM_SLURM_DIR"]) / "run"
    started: dict[str, subprocess.Popen] = {}
    try:
        for node in nodes:
            slurmd = (run / f"slurmd-{node}.pid").read_text().strip()
            started[node] = subprocess.Popen(["nsenter", f"--target={slurmd}", "--net", "--uts", "--",
                                              sys.executable, "-c", EXPORTER, str(port)])
        for node in nodes:
            _until(lambda n=node: _answers(f"http://{n}:{port}/metrics"), f"the exporter of {node} did not answer")
    except BaseException:
        stop_exporters(started)
        raise
    return started


def stop_exporters(started: dict[str, subprocess.Popen]) -> None:
    for proc in started.values():
        proc.terminate()
    for proc in started.values():
        proc.wait(timeout=30)


def _gpu_nodes(sampler: Any) -> set[str]:
    """The nodes of the GPU rows `sampler` has sampled so far."""
    return {g["node"] for line in list(sampler.lines) if line["kind"] == "sample" for g in line.get("gpus", [])}


def _scrape_dcgm(result: dict[str, Any], spec: dict[str, Any], endpoint: Any, seen: Any) -> None:
    """Sample the engine with the spec's DCGM URL template filled with the allocation's nodes (as the engine session
    fills a plan's `engine.telemetry.dcgm_urls`) until every node's exporter has been read; into `result`, where each
    exporter ran."""
    from tasks.serving import telemetry

    exporters = start_exporters(list(seen.nodes), spec["dcgm_port"])
    try:
        result["exporters"] = {node: os.readlink(f"/proc/{p.pid}/ns/net") for node, p in exporters.items()}
        dcgm = telemetry.expand_dcgm((spec["dcgm_template"],), seen.nodes)
        watched = dataclasses.replace(endpoint, watched=dataclasses.replace(seen, dcgm=dcgm))
        with telemetry.sampling(Path(spec["work"]) / "dcgm", watched, "dynamo") as sampler:
            _until(lambda: _gpu_nodes(sampler) == set(seen.nodes), "no DCGM rows from every node")
    finally:
        stop_exporters(exporters)


def _allocation_facts(alloc: Any) -> dict[str, Any]:
    """The allocation's job and nodes, each node's NodeAddr as Slurm reports it and the address its name resolves to
    (from the hosts file)."""
    listed = dict(line.split() for line in subprocess.run(
        ["sinfo", "--noheader", "--Node", "--format=%N %o"], capture_output=True, text=True, check=True,
        timeout=60).stdout.splitlines())
    return {"job": alloc.job_id, "nodes": list(alloc.nodes), "node_addr": [listed[name] for name in alloc.nodes],
            "node_ip": {name: socket.gethostbyname(name) for name in alloc.nodes}}


def _as_launched(specs: list[Any]) -> dict[str, Any]:
    """Every process as the backend specified it: role, node, host, port, argv, bind and its address settings."""
    return {s.name: {"role": s.role, "node": s.node_index, "host": s.host, "port": s.port, "argv": list(s.argv),
                     "bind": s.bind, "env": {k: s.env[k] for k in ADDRESS_ENV if k in s.env}} for s in specs}


def _serve_and_measure(result: dict[str, Any], spec: dict[str, Any], be: Any, opts: dict[str, Any],
                       specs: list[Any], where: Any, deployment: Any, job: str) -> None:
    """Into `result`, as each is known: the endpoint, where each step ran, the frontend's health and the stats of a
    loadgen Offline run through the harness from here (the head), sampled into `work`/run/telemetry.jsonl (until
    every node's GPU sampler has been read); then the DCGM scrape (`_scrape_dcgm`)."""
    from tasks.harness import runner
    from tasks.serving import telemetry
    from tests.integration.engines_support import offline_spec

    work = Path(spec["work"])
    endpoint = be.endpoint(opts, Path(spec["model"]), specs)
    result["endpoint"] = endpoint.base_url
    procs = job_processes(job)
    result["ran"] = {s.spec.name: {"step": s.step_id, **where_it_ran(str(s.step_id), procs)}
                     for s in deployment.steps}
    result["frontend_health"] = httpx.get(f"{endpoint.base_url}/health", timeout=10).json()
    run = offline_spec(Path(spec["data"]), "performance", samples=spec["samples"], max_tokens=spec["max_tokens"],
                       engine=result["version"], qps=spec["qps"])
    seen = where.watched(deployment)   # as tasks.launchers.start_ready gives it to each run
    watched = dataclasses.replace(endpoint, watched=seen)
    with telemetry.sampling(work / "run", watched, run.engine, run.harness) as sampler:
        result["stats"] = runner.run(run, endpoint, work / "run", timeout_s=180)
        _until(lambda: _gpu_nodes(sampler) == set(seen.nodes), "no sampled GPU rows from every node")
    _scrape_dcgm(result, spec, endpoint, seen)


def _left(job: str, work: Path) -> dict[str, list]:
    """What is left of the job after the stop: jobs, steps, its processes, the launcher's records."""
    return {"jobs": _squeue("--format=%i"), "steps": _squeue("--steps", "--format=%i"),
            "processes": sorted(job_processes(job)),
            "records": [p.name for p in (work / "pids").glob("slurm-*.json")]}


def main(spec_file: Path) -> None:
    from submission.base.errors import PodiumError
    from tasks.engines import backend
    from tasks.launchers import placement_for

    spec = json.loads(spec_file.read_text())
    work = Path(spec["work"])
    logging.basicConfig(level=logging.INFO, filename=work / "launch.log")
    log = logging.getLogger("slurm-netns")
    opts = options(spec)
    be = backend("dynamo")
    result: dict[str, Any] = {"version": be.version(opts), "head": socket.gethostname()}
    where = _slurm_launcher(work, spec["fake_bin"])
    # What tasks.launchers.start_ready does, in its steps, so the specs are on record even when the launch fails.
    placement = placement_for(be, opts, where)
    alloc = where.allocation
    assert alloc is not None
    result.update(_allocation_facts(alloc))
    try:
        specs = be.processes(opts, Path(spec["model"]), placement, work / "build")
    except BaseException:
        where.release()
        raise
    result["processes"] = _as_launched(specs)
    deployment = None
    try:
        try:
            deployment = where.start(specs, work / "logs", log)
            where.wait_ready(deployment, timeout_s=spec["ready_timeout_s"])
        except PodiumError as e:   # a process exited while starting, or never got ready
            result["launch_error"] = f"{e.message}\nfix: {e.fix}"
            return
        _serve_and_measure(result, spec, be, opts, specs, where, deployment, alloc.job_id)
    finally:
        if deployment is not None:
            where.stop(deployment)
        else:   # start() stopped what it had started; this ends the allocation if it is still there
            where.release()
        result["logs"] = _tails(work / "logs")
        result["left"] = _left(alloc.job_id, work)
        (work / "result.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
