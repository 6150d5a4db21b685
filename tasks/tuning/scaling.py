"""The engine options of a deployment grown to N nodes, for the scaling check (`flows/scaling.py`).

Growing a deployment keeps what one node runs and repeats it: the plan's options describe the deployment at its own
`nodes` (default 1); at N nodes every worker pool holds N / nodes times as many workers. The simulated engine takes
`nodes` directly. Engines that serve from one node (vllm, smoke) cannot be scaled and say so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from submission.errors import PlanError, did_you_mean


def _simulated(options: dict[str, Any], nodes: int) -> dict[str, Any]:
    return {**options, "nodes": nodes}


def _pools(*names: str, count: str) -> Callable[[dict[str, Any], int], dict[str, Any]]:
    def scale(options: dict[str, Any], nodes: int) -> dict[str, Any]:
        base = int(options.get("nodes", 1))
        if nodes % base and base % nodes:
            raise PlanError(f"cannot grow a {base}-node deployment to {nodes} nodes by whole copies",
                            fix=f"use node counts that are multiples of {base}")
        out = {**options, "nodes": nodes}
        for name in names:
            pool = options.get(name)
            if pool is None:
                continue
            workers = int(pool.get(count, 1)) * nodes // base
            if workers < 1:
                raise PlanError(f"{name}: {pool.get(count, 1)} {count} on {base} nodes leave none on {nodes}",
                                fix="start the scaling check at the plan's own node count or above")
            out[name] = {**pool, count: workers}
        return out

    return scale


SCALERS: dict[str, Callable[[dict[str, Any], int], dict[str, Any]]] = {
    "simulated": _simulated,
    "dynamo": _pools("prefill", "decode", count="workers"),
}


def scale_options(engine: str, options: dict[str, Any], nodes: int) -> dict[str, Any]:
    """`options` for the same deployment spread over `nodes` nodes."""
    if nodes < 1:
        raise PlanError(f"a deployment needs at least one node, got {nodes}", fix="pass node counts >= 1")
    if engine not in SCALERS:
        raise PlanError(f"engine {engine!r} serves from one node; the scaling check cannot grow it",
                        fix=f"scale a multi-node engine; {did_you_mean(engine, SCALERS)}")
    return SCALERS[engine](options, nodes)
