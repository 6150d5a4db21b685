"""A plan's N-node step: the same plan with its replicas on N of their nodes, as a data-parallel system is brought up
(Crusoe's published MI355X runs ran the same manifests at N=1 and N=8 nodes before all 64). `podium rehearse PLAN
--nodes N` and `podium launch PLAN --dry-run --nodes N` take it; a ladder of steps is this function at each N.

    at_nodes(yaml.safe_load(path.read_text()), 8)   -> the plan's data at 8 nodes (validated by the caller)

A system is stepped when every one of its benchmarks serves `engine.replicas` (the others, e.g. a Dynamo graph over a
fixed topology, stay as they are; a plan with no such system is refused). For each stepped system, from its N0 nodes
(its replicas' `nodes`, else the system's):
- the system: `nodes` N, its name suffixed `-n<N>` (another system in the tree: its description says N nodes), and the
  plan's name too;
- each of its benchmarks: `engine.replicas.nodes` N; `min_ready` and `performance_min_ready` where they are counts
  scaled by N / N0 and rounded up (fractions stay), `max_lost` rounded down (under the R replicas left); an explicit
  `engine.slurm.nodes` keeps its nodes beyond the replicas' (the head's);
- each scenario's `target_qps` and `expected_qps` scaled by N / N0 (a plan's rates are the whole system's), and its
  `max_concurrency` and `harness_workers` too, rounded up.
Nothing else changes: one replica's engine options, the data, the rules' counts. Pure: plain data in, plain data out.

A ladder (`podium ladder`, flows/scaling.py) runs a benchmark at a few of these steps: `ladder_steps` says which, from
`planned_nodes`, the nodes its deployment spans; the command checks them before Prefect starts.
"""

from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING, Any

from submission.base.errors import PlanError

if TYPE_CHECKING:
    from submission.plan.model import BenchmarkSpec

SUFFIX = "-n{nodes}"
RATES = ("target_qps", "expected_qps")
SPREAD = ("max_concurrency", "harness_workers")   # in flight over all replicas; client processes on the head
LADDER = (1, 8)   # a ladder's steps under the plan's full size: 1 node, then 8


def _stepped(data: dict[str, Any]) -> dict[str, int]:
    """system -> its N0, for each system every one of whose benchmarks serves replicas."""
    out: dict[str, int] = {}
    for system in data.get("systems") or []:
        benches = [b for b in data.get("benchmarks") or [] if b.get("system") == system["name"]]
        if benches and all((b.get("engine") or {}).get("replicas") for b in benches):
            counts = {b["engine"]["replicas"].get("nodes") or system.get("nodes", 1) for b in benches}
            if len(counts) > 1:
                raise PlanError(f"system {system['name']!r}: its benchmarks' replicas span {sorted(counts)} nodes",
                                fix="give each benchmark of a system the same engine.replicas.nodes")
            out[system["name"]] = counts.pop()
    return out


def _scaled(value: int | float, factor: float) -> int | float:
    """A replica count scaled and rounded up (at least 1); a fraction as it is."""
    return max(1, math.ceil(value * factor - 1e-9)) if isinstance(value, int) else value


def at_nodes(data: dict[str, Any], nodes: int) -> dict[str, Any]:
    """The plan `data` (its YAML, before validation) at its `nodes`-node step: see the module's docstring. PlanError
    for a step above a system's nodes, or a plan with nothing to step."""
    stepped = _stepped(data)
    if not stepped:
        raise PlanError("no system of the plan serves its benchmarks as engine.replicas, so it has no node steps",
                        fix="give its engine replicas (docs/replicas.md), or leave out --nodes")
    if nodes < 1 or any(nodes > n0 for n0 in stepped.values()):
        raise PlanError(f"--nodes {nodes}: a step is 1 to the replicas' nodes "
                        f"({', '.join(f'{s}: {n}' for s, n in stepped.items())})",
                        fix="give a step between 1 and the plan's nodes")
    if all(nodes == n0 for n0 in stepped.values()):
        return copy.deepcopy(data)
    out = copy.deepcopy(data)
    suffix = SUFFIX.format(nodes=nodes)
    names = {name: name + suffix for name in stepped}
    out["name"] = data["name"] + suffix
    for system in out["systems"]:
        if system["name"] in stepped:
            system["nodes"], system["name"] = nodes, names[system["name"]]
    for bench in out["benchmarks"]:
        n0 = stepped.get(bench["system"])
        if n0 is None:
            continue
        factor = nodes / n0
        bench["system"] = names[bench["system"]]
        engine = bench["engine"]
        replicas = engine["replicas"]
        count = replicas["per_node"] * nodes
        replicas["nodes"] = nodes
        for field in ("min_ready", "performance_min_ready"):
            if field in replicas:
                replicas[field] = min(count, _scaled(replicas[field], factor))
        if replicas.get("max_lost"):
            replicas["max_lost"] = min(count - 1, math.floor(replicas["max_lost"] * factor))
        slurm = engine.get("slurm") or {}
        if slurm.get("nodes"):
            slurm["nodes"] = nodes + max(0, slurm["nodes"] - n0)
        for scenario in (bench.get("scenarios") or {}).values():
            for field in RATES:
                if scenario.get(field) is not None:
                    scenario[field] = round(scenario[field] * factor, 3)
            for field in SPREAD:
                if scenario.get(field) is not None:
                    scenario[field] = max(1, math.ceil(scenario[field] * factor))
    return out


def planned_nodes(bench: BenchmarkSpec) -> int:
    """The nodes the benchmark's deployment spans: its replicas' N, else its engine's own `nodes` (1 without)."""
    layout = bench.engine.replica_layout()
    return layout.nodes if layout is not None else getattr(bench.engine.config(), "nodes", 1)


def ladder_steps(steps: list[int] | None, full: int) -> list[int]:
    """The sizes of a ladder to `full` nodes: those asked, else 1, 8 and `full` (those under it), in order."""
    counts = sorted(set(steps)) if steps else sorted({*(n for n in LADDER if n < full), full})
    if counts[0] < 1 or counts[-1] > full:
        raise PlanError(f"ladder steps {counts}: each must lie in 1..{full}, the plan's nodes",
                        fix=f"pass steps within them, e.g. --steps {','.join(map(str, ladder_steps(None, full)))}")
    return counts
