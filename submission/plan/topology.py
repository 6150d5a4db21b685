"""Placing engine workers on nodes and GPUs: a pure function both the plan (does it fit?) and the backends (which
GPUs does worker i get?) use, so a plan that loads is a plan that places.

Workers are placed first-fit in the order given (prefill before decode, context before generation), each on the
first allowed node with enough free GPUs, taking that node's lowest free GPU ids. No worker spans nodes here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Pool:
    """`count` workers of one role, each needing `gpus` GPUs, allowed on `nodes` (None: any node)."""

    role: str
    count: int
    gpus: int
    nodes: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Slot:
    """Where worker `index` of `role` runs: its node and the GPU ids it owns there (none on a CPU-only host)."""

    role: str
    index: int
    node: int
    gpu_ids: tuple[int, ...] = ()


class TopologyError(ValueError):
    """The workers do not fit the nodes; the message says by how much and what to change."""


def describe(pools: Sequence[Pool]) -> str:
    return ", ".join(f"{p.role} {p.count} x {p.gpus} GPU(s)" for p in pools)


def place(pools: Sequence[Pool], nodes: int, gpus_per_node: int, workers_per_gpu: int = 1) -> list[Slot]:
    """Every worker's slot, or TopologyError naming the first worker that does not fit. With `workers_per_gpu` > 1
    (a prefill and a decode worker on one GPU, for tests) each GPU takes that many one-GPU workers."""
    for p in pools:
        bad = [n for n in p.nodes or () if not 0 <= n < nodes]
        if bad:
            raise TopologyError(f"{p.role}.nodes: node {bad[0]} does not exist; nodes are 0..{nodes - 1}")
    if gpus_per_node == 0:   # a CPU-only host: nothing to allocate, workers go round the allowed nodes
        return [Slot(p.role, i, (p.nodes or tuple(range(nodes)))[i % len(p.nodes or range(nodes))])
                for p in pools for i in range(p.count)]
    wide = next((p for p in pools if p.gpus > 1), None)
    if workers_per_gpu > 1 and wide is not None:
        raise TopologyError(f"workers_per_gpu: only one-GPU workers share a GPU, but a {wide.role} worker needs "
                            f"{wide.gpus}; set its tensor and pipeline parallel sizes to 1 or workers_per_gpu: 1")
    needed, seats = sum(p.count * p.gpus for p in pools), gpus_per_node * workers_per_gpu
    if needed > nodes * seats:
        shared = f" x {workers_per_gpu} workers each" if workers_per_gpu > 1 else ""
        raise TopologyError(f"the workers need {needed} GPUs ({describe(pools)}) but {nodes} node(s) x "
                            f"{gpus_per_node} GPUs{shared} = {nodes * seats}; use fewer workers or more nodes")
    free = [[g for g in range(gpus_per_node) for _ in range(workers_per_gpu)] for _ in range(nodes)]
    slots = []
    for p in pools:
        if p.gpus > gpus_per_node:
            raise TopologyError(f"a {p.role} worker needs {p.gpus} GPUs but a node has {gpus_per_node}; "
                                f"lower its tensor/pipeline parallel size (no worker spans nodes)")
        for i in range(p.count):
            node = next((n for n in (p.nodes or range(nodes)) if len(free[n]) >= p.gpus), None)
            if node is None:
                where = f"nodes {list(p.nodes)}" if p.nodes else "any node"
                raise TopologyError(f"{p.role} worker {i} needs {p.gpus} GPU(s) but {where} has fewer left "
                                    f"({describe(pools)} on {nodes} x {gpus_per_node} GPUs); "
                                    f"change the worker counts or their nodes")
            ids, free[node] = tuple(free[node][:p.gpus]), free[node][p.gpus:]
            slots.append(Slot(p.role, i, node, ids))
    return slots
