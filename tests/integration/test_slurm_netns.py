"""Dynamo on a Slurm cluster that looks like a real one: three nodes, each slurmd in a
network, mount and UTS namespace of its own with its own IPv4 on a bridge and its own host name, `NodeAddr` set to the
names (a hosts file bind-mounted over /etc/hosts resolves them), the controller and Podium on the bridge as a head
node (deployments/slurm/local-cluster.sh with PODIUM_SLURM_NETNS=1, all of it inside network, mount, UTS and PID
namespaces the script makes, so nothing binds an address of this machine and no process outlives the test).

Dynamo 1.6.1's etcd and frontend run on the first node, a prefill mocker on the second and a decode mocker on the
third (etcd discovery), launched by the dynamo backend and the Slurm launcher; a loadgen Offline run through the
harness must be VALID. Dynamo and etcd take only IP literals for the addresses they bind and advertise: a node's
name there makes etcd refuse to start, the frontend exit, the workers fail (docs/slurm.md). The driver,
tests/integration/slurm_netns.py, runs inside the cluster's namespaces and writes result.json.

The same run is sampled as every measured run is: a fake `nvidia-smi` prints each node's own values (by the host name
of the node it runs on), read by the launcher's GPU sampler step on every engine node; a DCGM URL template is filled
with the allocated nodes' names and scraped from the head, each name reaching an exporter in its own node's namespace.
One cluster run serves both tests (a module fixture).
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from submission.results.logs import load_run
from tasks.serving import telemetry
from tests.integration.engines_support import REPO, engine_python, run_driver, system_command
from tests.integration.slurm_netns import NODE_OF

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.engines]
SCRIPT = REPO / "deployments" / "slurm" / "local-cluster.sh"
SAMPLES, MAX_TOKENS = 16, 8
QPS = 400   # the mocker at speedup 20 answers ~100 requests/s here: one 440-sample query outlasts the 1 s minimum
SUBNET = ipaddress.IPv4Network("10.77.0.0/24")   # local-cluster.sh's PODIUM_SLURM_SUBNET default
# A fake nvidia-smi: two GPUs whose values name the node it runs on, by that node's own host name (nodeN: GPU i at
# 10 N + i %, N GiB used, 100 N W); nothing Slurm sets is read.
FAKE_SMI = """#!/bin/sh
n=$(uname -n)
n=${n#node}
for i in 0 1; do echo "$i, $((10 * n + i)), $((1024 * n)), $((100 * n))"; done
"""
DCGM_PORT = 9400   # dcgm-exporter's default; the same on every node, each node has its own address


def _namespaces(cluster: Path) -> dict[str, str]:
    """name -> network namespace (`net:[inode]`) of the head and of every node, as local-cluster.sh recorded them."""
    record = cluster / "run" / "netns"
    return dict(line.split() for line in record.read_text().splitlines()) if record.exists() else {}


def _host(url: str) -> str:
    return str(urlsplit(url).hostname)


def _arg(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def _failed_launch(result: dict) -> str:
    logs = "\n".join(f"--- {name}.log\n{text}" for name, text in result.get("logs", {}).items())
    return f"{result['launch_error']}\n{logs}"


def _run_on_the_cluster(python: Path, etcd: str, smoke_store: Path, cluster: Path, work: Path) -> dict:
    """Start a three-node netns cluster in `cluster`, run the driver (tests/integration/slurm_netns.py) on it with its
    work folder `work` (the fake nvidia-smi in `work`/bin), stop the cluster; what the driver wrote to result.json."""
    fake = work / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text(FAKE_SMI)
    (fake / "nvidia-smi").chmod(0o755)
    spec = {"python": str(python), "etcd": etcd, "model": str(smoke_store / "models" / "tiny-llama"),
            "data": str(smoke_store / "datasets" / "smoke" / "perf_eval_ref.parquet"), "work": str(work),
            "samples": SAMPLES, "max_tokens": MAX_TOKENS, "qps": QPS, "ready_timeout_s": 180, "fake_bin": str(fake),
            "dcgm_port": DCGM_PORT, "dcgm_template": f"http://{telemetry.NODE}:{DCGM_PORT}/metrics"}
    env = {**os.environ, "PODIUM_SLURM_NETNS": "1", "PODIUM_SLURM_DIR": str(cluster), "PODIUM_SLURM_NODES": "3",
           "PODIUM_SLURM_GPUS": "0"}
    # On the way out, SIGTERM first: the script stops the cluster on it; a minute later SIGKILL, on which unshare
    # kills the script and the kernel ends the PID namespace.
    returncode, output = run_driver([str(SCRIPT), "run"], "tests.integration.slurm_netns", spec, work,
                                    timeout_s=480, env=env, term_grace_s=60)
    # 3: the driver passed but processes were still running after `down` (the script lists them in run/left)
    assert returncode == 0, output[-3000:]
    assert (cluster / "run" / "left").read_text() == ""
    return json.loads((work / "result.json").read_text())


def _check_the_cluster(result: dict, namespaces: dict[str, str]) -> None:
    """Slurm knows the nodes by name only; each name resolves to its own address on the bridge, and each node is a
    network namespace of its own, not the head's."""
    nodes, ips = result["nodes"], result["node_ip"]
    assert result["head"] == "head" and nodes == ["node1", "node2", "node3"]
    assert result["node_addr"] == nodes
    assert len(set(ips.values())) == 3 and all(ipaddress.IPv4Address(ip) in SUBNET for ip in ips.values())
    assert len({namespaces[n] for n in ["head", *nodes]}) == 4


def _check_addresses_are_own_node_ips(result: dict) -> None:
    """Item 1: every address Dynamo and etcd bind or advertise is the IPv4 literal of the process's own node (a bind
    may be 0.0.0.0 instead), never the node's name."""
    nodes, ips, procs = result["nodes"], result["node_ip"], result["processes"]
    assert {p["role"]: p["node"] for p in procs.values()} == NODE_OF
    for name, p in procs.items():
        ip = ips[nodes[p["node"]]]
        assert p["host"] == ip, (name, p["host"])
        for key in ("DYN_TCP_RPC_HOST", "DYN_TCP_RESPONSE_STREAM_HOST", "DYN_EVENT_PLANE_HOST"):
            if name != "etcd":
                assert p["env"][key] == ip, (name, key, p["env"])
        if p["role"] in ("prefill", "decode"):
            assert p["env"]["DYN_SYSTEM_HOST"] in (ip, "0.0.0.0"), (name, p["env"])
    first = ips[nodes[0]]
    etcd_argv, front_argv = procs["etcd"]["argv"], procs["frontend"]["argv"]
    for flag in ("--listen-client-urls", "--listen-peer-urls"):
        assert _host(_arg(etcd_argv, flag)) in (first, "0.0.0.0"), (flag, etcd_argv)
    for flag in ("--advertise-client-urls", "--initial-advertise-peer-urls"):
        assert _host(_arg(etcd_argv, flag)) == first, (flag, etcd_argv)
    assert {p["env"]["ETCD_ENDPOINTS"] for n, p in procs.items() if n != "etcd"} == \
        {f"http://{first}:{procs['etcd']['port']}"}
    assert _arg(front_argv, "--http-host") in (first, "0.0.0.0"), front_argv
    assert result["endpoint"] == f"http://{first}:{procs['frontend']['port']}"


def _check_each_process_ran_on_its_node(result: dict, namespaces: dict[str, str]) -> None:
    """Each process ran under the slurmd of its node, in that node's namespace, listening there on its port; the
    workers registered with the frontend through etcd at the addresses of their own nodes."""
    nodes, ips = result["nodes"], result["node_ip"]
    for name, p in result["processes"].items():
        node = nodes[p["node"]]
        ran = result["ran"][name]
        assert ran["nodes"] == [node] and ran["netns"] == [namespaces[node]], (name, ran)
        assert {f"{ips[node]}:{p['port']}", f"0.0.0.0:{p['port']}"} & set(ran["listening"]), (name, ran)
    transport = {i["component"]: i["transport"]["tcp"].split(":")[0]
                 for i in result["frontend_health"]["instances"] if i["endpoint"] == "generate"}
    assert transport == {"prefill": ips[nodes[NODE_OF["prefill"]]], "backend": ips[nodes[NODE_OF["decode"]]]}


def _check_a_valid_loadgen_run(result: dict, work: Path) -> None:
    """A VALID loadgen run from the head through the frontend, with the engine's token ids."""
    stats = result["stats"]
    assert stats["failed"] == 0 and stats["completed"] >= SAMPLES, stats["errors"]
    assert stats["token_source"] == "engine" and stats["output_tokens"] == stats["completed"] * MAX_TOKENS
    run = load_run(work / "run")
    assert run.num_errors == 0 and run.valid, run


@pytest.fixture(scope="module")
def on_the_cluster(smoke_store: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict[str, str], Path]:
    """One run of the driver on a fresh netns cluster: its result, the cluster's namespaces and its work folder."""
    python = engine_python(".venv-dynamo", "venv-dynamo")
    etcd = system_command("etcd", "etcd-server")
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs root, unshare(1) and ip(8) for the cluster's namespaces")
    root = tmp_path_factory.mktemp("netns")
    cluster, work = root / "slurm", root / "work"
    work.mkdir()
    result = _run_on_the_cluster(python, etcd, smoke_store, cluster, work)
    return result, _namespaces(cluster), work


def test_dynamo_over_three_nodes_with_their_own_addresses(on_the_cluster: tuple[dict, dict[str, str], Path]) -> None:
    result, namespaces, work = on_the_cluster
    assert "launch_error" not in result, _failed_launch(result)
    _check_the_cluster(result, namespaces)
    _check_addresses_are_own_node_ips(result)
    _check_each_process_ran_on_its_node(result, namespaces)
    _check_a_valid_loadgen_run(result, work)
    # After the stop: no job, no step, no process of the job, nothing on record.
    assert result["left"] == {"jobs": [], "steps": [], "processes": [], "records": []}


def _gpu_rows(path: Path) -> list[dict]:
    return [g for line in telemetry.load(path) if line["kind"] == "sample" for g in line.get("gpus", [])]


def test_telemetry_from_every_engine_node_by_its_name(on_the_cluster: tuple[dict, dict[str, str], Path]) -> None:
    """The loadgen run's telemetry has GPU rows from each of the three engine nodes, each tagged with its node and
    holding the values that node's own nvidia-smi printed (read by a GPU sampler step per node); the DCGM template
    is filled with the allocated nodes' names, and each name reached the exporter in that node's namespace."""
    result, namespaces, work = on_the_cluster
    assert "launch_error" not in result, _failed_launch(result)
    nodes = result["nodes"]
    lines = telemetry.load(work / "run" / telemetry.FILE)
    assert lines[0]["nodes"] == nodes and lines[0]["dcgm"] == []
    assert sorted(lines[0]["gpu_samplers"]) == nodes
    assert all(Path(f).name == f"gpus-{n}.jsonl" for n, f in lines[0]["gpu_samplers"].items())
    assert lines[-1]["kind"] == "phase"   # the run's measured phase, as loadgen logged it
    rows = _gpu_rows(work / "run" / telemetry.FILE)
    seen = {(g["node"], g["index"], g["util_pct"], g["memory_mib"], g["power_w"]) for g in rows}
    assert seen == {(n, i, 10 * k + i, 1024 * k, 100 * k) for k, n in enumerate(nodes, 1) for i in (0, 1)}, seen
    # DCGM: one URL per allocated node, by name; each scraped at that name's own address, where an exporter ran in
    # that node's network namespace and answered with its own host name's value.
    lines = telemetry.load(work / "dcgm" / telemetry.FILE)
    assert lines[0]["dcgm"] == [f"http://{n}:{DCGM_PORT}/metrics" for n in nodes]
    assert lines[0]["gpu_samplers"] == {}   # one source of GPU facts: the exporters
    assert result["exporters"] == {n: namespaces[n] for n in nodes}
    assert not [x for x in lines if x["kind"] in ("missed", "unavailable") and x["source"].startswith("dcgm")], lines
    rows = _gpu_rows(work / "dcgm" / telemetry.FILE)
    assert {(g["node"], g["index"], g["util_pct"]) for g in rows} == {(n, 0, 50 + k) for k, n in enumerate(nodes, 1)}
