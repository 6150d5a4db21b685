"""What `podium launch PLAN --dry-run` says of an engine served as replicas (`engine.replicas`): "<R> replicas on <N>
nodes", every replica (node, address, GPUs, port), where the head runs, the readiness counts and the losses allowed,
and each rate's share per replica. The text shows one replica's process in full (they differ only in node, GPUs and
port) and a table of the nodes; `--json` lists every replica and every process.
"""

from __future__ import annotations

import shlex
from typing import Any

from submission.plan.model import BenchmarkSpec, EngineSpec
from submission.plan.replicas import Layout
from tasks.engines import ProcessSpec


def head_text(engine: EngineSpec, layout: Layout) -> str:
    """Where the head (LoadGen and the dispatch) runs, for this launcher and the plan's `head`."""
    apart = layout.head == "own-node"
    if engine.launcher == "kubernetes":
        from tasks.launchers.kubernetes_manifests import HEAD_LABELS  # the kubernetes client: imported when needed

        labels = ",".join(f"{k}={v}" for k, v in HEAD_LABELS.items())
        return ("in the flow pod; every replica pod keeps off its node (a required pod anti-affinity on " + labels
                + ")") if apart else "in the flow pod, wherever the scheduler puts it, replica pods beside it or not"
    if engine.launcher == "slurm":
        if apart:
            return ("on the host Podium runs on; when Podium runs inside the job (sbatch), that node of the job "
                    "serves no replica (the job holds one node more)")
        return "on the host Podium runs on; inside the job (sbatch) that node serves replicas too"
    return "on this host, beside its replicas (the local launcher runs everything here)"


NODES = {"kubernetes": "each replica is a pod of its own asking for its GPUs, which the device plugin gives it; the "
                       "scheduler picks its node, so `node` below is the plan's grouping and the launch names each "
                       "replica's node",
         "slurm": "node i is the i-th node of the allocation, one step each",
         "local": "every node is this host, its name a label"}


def view(bench: BenchmarkSpec, specs: list[ProcessSpec]) -> dict[str, Any]:
    """The replicas of `bench`'s engine as the review's JSON shows them."""
    lay = bench.engine.replica_layout()
    assert lay is not None
    rates = {name: {k: round(lay.per_replica(v), 6) for k, v in (("target_qps", s.target_qps),
                                                                  ("expected_qps", s.expected_qps)) if v}
             for name, s in bench.scenarios.items()}
    return {"count": lay.count, "nodes": lay.nodes, "per_node": lay.per_node, "gpus_per_replica": lay.gpus,
            "gpus": lay.count * lay.gpus, "min_ready": lay.min_ready, "performance_min_ready":
            lay.performance_min_ready, "max_lost": lay.max_lost, "head": lay.head,
            "head_runs": head_text(bench.engine, lay), "per_replica_rates": rates,
            "nodes_are": NODES[bench.engine.launcher],
            "list": [{"name": s.name, "node": s.node_index, "host": s.host, "port": s.port,
                      "gpu_ids": list(s.gpu_ids)} for s in specs if s.replica is not None]}


def _span(values: list[str]) -> str:
    """`a .. b` for a run of values, the value itself when they are all one."""
    return values[0] if len(set(values)) == 1 else f"{values[0]} .. {values[-1]}"


def _hosts(items: list[dict[str, Any]]) -> str:
    """The node's address, or the pattern of its replicas' own addresses (a Service each: `...-<replica>....`)."""
    hosts = [i["host"] for i in items]
    pattern = hosts[0].replace(items[0]["name"], "<replica>")
    if len(set(hosts)) > 1 and all(i["host"] == pattern.replace("<replica>", i["name"]) for i in items):
        return pattern
    return _span(hosts)


def _ports(ports: list[int]) -> str:
    if len(set(ports)) == 1:
        return f"{ports[0]} each"
    if ports == list(range(ports[0], ports[0] + len(ports))):
        return f"{ports[0]}-{ports[-1]}"
    return " ".join(map(str, ports))


def lines(replicas: dict[str, Any], slurm: dict[str, Any] | None) -> list[str]:
    """The replicas as the review's text shows them: the layout, a row per node, the head, the counts, the rates."""
    r = replicas
    gpus = f"{r['gpus_per_replica']} GPU(s) each, {r['gpus']} in all" if r["gpus_per_replica"] else "no GPU"
    out = [f"  {r['count']} replicas on {r['nodes']} nodes ({r['per_node']} a node, {gpus}); each runs as "
           f"replica-0 above, on its own node, GPUs and port(s) ({r['nodes_are']}):",
           f"    {'node':<6}{'address':<48}{'replicas':<28}{'GPUs (one block each)':<26}ports"]
    by_node: dict[int, list[dict[str, Any]]] = {}
    for item in r["list"]:
        by_node.setdefault(item["node"], []).append(item)
    for node, items in sorted(by_node.items()):
        blocks = " ".join(",".join(map(str, i["gpu_ids"])) for i in items) if r["gpus_per_replica"] else "none"
        out.append(f"    {node:<6}{_hosts(items):<48}{_span([i['name'] for i in items]):<28}"
                   f"{blocks:<26}{_ports([i['port'] for i in items])}")
    out += [f"  head (LoadGen and the dispatch, no model): {r['head']}: {r['head_runs']}",
            f"  ready before accuracy runs and audits: {r['min_ready']} of {r['count']}; before performance runs: "
            f"{r['performance_min_ready']}; replicas a run may lose: {r['max_lost']}"]
    for scenario, rates in r["per_replica_rates"].items():
        shares = ", ".join(f"{k} {v:g}" for k, v in rates.items())
        if shares:
            out.append(f"  {scenario} per replica (the plan's rates are the whole system's): {shares}")
    return out + _steps(slurm)


def _steps(slurm: dict[str, Any] | None) -> list[str]:
    """The Slurm steps of the replicas: one per node, a supervisor starting that node's replicas."""
    steps = {name: argv for name, argv in ((slurm or {}).get("srun") or {}).items() if name.startswith("replicas-")}
    if not steps:
        return []
    first = next(iter(steps.values()))
    out = [f"  Slurm: {len(steps)} step(s), one per node, each a supervisor (tasks/launchers/slurm_replicas.py) "
           "that starts its node's replicas with their blocks of the step's GPUs; the first:",
           f"    {shlex.join(first[:first.index('-c') + 1])} <SUPERVISOR> <its replicas as JSON> "
           f"{shlex.quote(first[-1])}"]
    for name, argv in steps.items():
        node = next((a.split("=", 1)[1] for a in argv if a.startswith("--nodelist=")), "?")
        gpus = next((a.split("=", 1)[1] for a in argv if a.startswith("--gpus=")), "0")
        out.append(f"    step {name} on {node}: {gpus} GPU(s)")
    return out
