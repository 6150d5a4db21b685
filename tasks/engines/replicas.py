"""An engine as R independent serving replicas (`engine.replicas`, submission/plan/replicas.py): one replica's process
spec, as its backend makes it today, made R times.

`replicated(backend, layout)` is itself an `EngineBackend`, so launchers and the dry run take it as any other: its
`demand` is the layout's N nodes with K x (one replica's ports) on each, and its `processes` ask the backend for one
replica on a placement of its own (its node's address, its own ports: the (i % K)-th block of its node's, or the
node's first ones where every process has an address of its own, a Kubernetes Service), then name it `replica-<i>`,
put it on node i // K and pin it to the (i % K)-th block of that node's GPUs (its platform's pin: CUDA_VISIBLE_DEVICES,
or ROCm's ROCR_VISIBLE_DEVICES with the variables read after it numbered from 0). Its `endpoint`
is the backend's for the first replica, listing every replica (`Endpoint.replicas`; the launcher keeps those that are
ready and names their nodes). It works for any backend whose one instance is one process on one node (vllm,
trtllm's aggregated trtllm-serve, simulated) and refuses the others (a PlanError naming why).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from submission.base.errors import PlanError
from submission.plan.engine_options import OptionsLike
from submission.plan.model import EngineSpec
from submission.plan.replicas import Layout
from tasks.engines import Endpoint, EngineBackend, Placement, ProcessSpec, Replica, backend
from tasks.engines.common import gpu_env


class Replicated(EngineBackend):
    """`inner`'s one instance, `layout.count` times."""

    def __init__(self, inner: EngineBackend, layout: Layout) -> None:
        self.inner, self.layout = inner, layout
        self.name, self.ports_needed, self.max_port = inner.name, inner.ports_needed, inner.max_port

    def options(self, options: OptionsLike) -> Any:
        return self.inner.options(options)

    def version(self, options: OptionsLike | None = None) -> str:
        return self.inner.version(options)

    def services(self, options: OptionsLike) -> dict[str, str]:
        return self.inner.services(options)

    def build(self, options: OptionsLike, model_dir: Path, out_dir: Path, runner: Any) -> list[str]:
        return self.inner.build(options, model_dir, out_dir, runner)   # one build serves every replica

    def _ports(self, options: OptionsLike) -> int:
        nodes, ports = self.inner.demand(options)
        if nodes != 1:
            raise PlanError(f"one {self.name} instance of these options spans {nodes} nodes; a replica runs on one",
                            where="engine.replicas", fix="give one replica a node's GPUs at most")
        return ports

    def demand(self, options: OptionsLike) -> tuple[int, int]:
        return self.layout.nodes, self.layout.per_node * self._ports(options)

    def processes(self, options: OptionsLike, model_dir: Path, placement: Placement,
                  build_dir: Path | None = None) -> list[ProcessSpec]:
        ports, lay = self._ports(options), self.layout
        specs = []
        for i in range(lay.count):
            index, name = lay.node(i), lay.name(i)
            node = placement.node(index)
            first = 0 if placement.service_address else lay.slot(i) * ports
            own = Placement(node.host, node.ports[first:first + ports], bind=placement.bind,
                            service_address=placement.address(index, name) if placement.service_address else None,
                            workdir=placement.workdir, platform=placement.platform)
            made = self.inner.processes(options, model_dir, own, build_dir)
            if len(made) != 1 or made[0].nodes != 1 or made[0].mpi_ranks != 1:
                raise PlanError(f"one {self.name} instance of these options is {len(made)} process(es) over "
                                f"{made[0].nodes if made else 0} node(s); a replica is one process on one node",
                                where="engine.replicas", fix="serve each replica as one server (no disaggregation)")
            spec, ids = made[0], lay.gpu_ids(i)
            if spec.gpus != lay.gpus:
                raise PlanError(f"one replica's process holds {spec.gpus} GPU(s) but the layout gives it {lay.gpus}",
                                where="engine.replicas", fix="report this: the backend and the layout disagree")
            numbering = placement.platform.visibility_env()   # whatever the backend pinned, this replica's block
            env = {k: v for k, v in spec.env.items() if k not in numbering} | gpu_env(ids, placement.platform)
            specs.append(dataclasses.replace(spec, name=name, node_index=index, gpu_ids=ids, env=env, replica=i,
                                             host=placement.address(index, name)))
        return specs

    def endpoint(self, options: OptionsLike, model_dir: Path, processes: list[ProcessSpec]) -> Endpoint:
        """The backend's endpoint of the first replica, listing every replica (node `node<i>` until the launcher
        names it)."""
        ends = [self.inner.endpoint(options, model_dir, [spec]) for spec in processes]
        replicas = tuple(Replica(s.name, e.base_url, f"node{s.node_index}", s.gpu_ids)
                         for s, e in zip(processes, ends, strict=True))
        return dataclasses.replace(ends[0], replicas=replicas)


def replicated(inner: EngineBackend, layout: Layout | None) -> EngineBackend:
    """`inner` as `layout`'s replicas; `inner` itself without a layout (or when it is replicated already)."""
    if layout is None or isinstance(inner, Replicated):
        return inner
    return Replicated(inner, layout)


def for_engine(engine: EngineSpec) -> EngineBackend:
    """The backend a plan's engine section serves with: its engine's, replicated where it has `replicas`."""
    return replicated(backend(engine.name), engine.replica_layout())
