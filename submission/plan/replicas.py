"""`engine.replicas`: an engine served as R independent replicas, K on each of N nodes, each with the parallelism its
engine options give one replica (TP x PP GPUs), behind the head's own dispatch (LoadGen and the dispatch, no model).

    replicas: {per_node: 8, nodes: 64, min_ready: 0.97, max_lost: 8, head: own-node}

`ReplicasSpec` is what a plan writes; `Layout` is what it resolves to once the system is known (N defaults to the
system's nodes; `min_ready` and `performance_min_ready` become counts). Replica i is `replica-<i>`, on node i // K,
holding the (i % K)-th block of its node's GPUs. The plan's rates stay the whole system's: `Layout.per_replica` derives
a replica's share where anything needs it. Pure: the plan validates with it, the backends and launchers place with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

from submission.base.schema import AtMost, Input
from submission.plan.limits import Nodes

# Replicas on one node: the largest GPU nodes hold 8 to 72 accelerators (an NVL72 domain counts as 72); CPU stand-ins
# may run more. 1024 is far above any of them.
MAX_PER_NODE = 1024
HEADS = ("own-node", "beside")


def _count_or_fraction(value: int | float) -> int | float:
    if isinstance(value, bool) or (isinstance(value, int) and value < 1) or \
            (isinstance(value, float) and not 0 < value <= 1):
        raise ValueError(f"{value!r} is neither a count of replicas (a whole number, at least 1, e.g. 496) nor a "
                         "fraction of them (over 0, at most 1, e.g. 0.97)")
    return value


CountOrFraction = Annotated[int | float, AfterValidator(_count_or_fraction)]


class ReplicasSpec(Input):
    """The engine as independent serving replicas (docs/replicas.md)."""

    per_node: Annotated[int, Field(ge=1), AtMost(MAX_PER_NODE, "more replicas than any node has GPUs "
                                                               "(submission/plan/replicas.py)")] = Field(
        description="K: replicas on each node; each holds the GPUs its engine options give one replica (tensor x "
                    "pipeline parallel), the (i % K)-th block of its node's GPUs")
    nodes: Nodes | None = Field(None, description="N: nodes the replicas run on; default: the system's nodes")
    min_ready: CountOrFraction = Field(1.0, description="replicas that must be ready (a real generation) before "
                                       "accuracy runs and audits start: a count (496) or a fraction of R (0.97, "
                                       "rounded up); the rest are named and left out. Default: every replica")
    performance_min_ready: CountOrFraction = Field(1.0, description="the same for performance runs; default: every "
                                                   "replica")
    max_lost: int = Field(0, ge=0, description="replicas that may die during a run, their unanswered samples moved to "
                          "live ones, before the run fails; 0: any loss fails it (a result is the whole system's)")
    head: Literal["own-node", "beside"] = Field("own-node", description="where the head (LoadGen and the dispatch, no "
                                                "model) runs: own-node, a node that serves no replica (Slurm: the "
                                                "host Podium runs on is kept out of the replicas' nodes; Kubernetes: "
                                                "replica pods avoid the flow pod's node); beside: it may share a "
                                                "node with replicas")
    package_fewer: bool = Field(False, description="package a performance result that fewer replicas served than R "
                                "(some left out at start-up, or lost during the run) as this system all the same; "
                                "false: assembling the tree refuses it, naming the replicas that did not serve")


@dataclass(frozen=True)
class Layout:
    """Replicas resolved against the system: R = per_node x nodes, each holding `gpus` GPUs; the readiness counts and
    the losses allowed are counts of replicas."""

    per_node: int
    nodes: int
    gpus: int                  # per replica (0: a CPU engine)
    min_ready: int
    performance_min_ready: int
    max_lost: int
    head: str

    @property
    def count(self) -> int:
        return self.per_node * self.nodes

    def name(self, index: int) -> str:
        return f"replica-{index}"

    def node(self, index: int) -> int:
        """The node replica `index` runs on (node-major)."""
        return index // self.per_node

    def slot(self, index: int) -> int:
        """Its place among its node's replicas."""
        return index % self.per_node

    def gpu_ids(self, index: int) -> tuple[int, ...]:
        """Its GPUs on its node: the (index % per_node)-th block of `gpus`."""
        first = self.slot(index) * self.gpus
        return tuple(range(first, first + self.gpus))

    def per_replica(self, rate: float) -> float:
        """A whole-system rate's share of one replica (the plan states rates for the whole system only)."""
        return rate / self.count

    def ready_needed(self, performance: bool) -> int:
        """Replicas that must be ready before a performance run (`performance`) or an accuracy run or audit."""
        return self.performance_min_ready if performance else self.min_ready

    def describe(self) -> str:
        gpus = f"{self.gpus} GPU(s) each, {self.count * self.gpus} in all" if self.gpus else "no GPU"
        return f"{self.count} replicas on {self.nodes} nodes ({self.per_node} a node, {gpus})"


def resolve(value: int | float, count: int) -> int:
    """A count or fraction of `count` replicas as a count (a fraction rounded up: 0.97 of 512 is 497)."""
    return value if isinstance(value, int) else math.ceil(value * count - 1e-9)


def node_gpus(description: dict[str, str]) -> int | None:
    """A node's GPUs as the system description states them (`accelerators_per_node`); None when it does not."""
    value = description.get("accelerators_per_node", "").strip()
    return int(value) if value.isdigit() else None


def layout(spec: ReplicasSpec, options: Any, system_nodes: int | None = None) -> Layout:
    """The layout of `spec` for an engine whose typed options are `options` (their `replica_gpus`: ValueError for an
    engine that cannot be replicated), N being the spec's nodes, else `system_nodes`, else 1."""
    nodes = spec.nodes or system_nodes or 1
    count = spec.per_node * nodes
    return Layout(spec.per_node, nodes, options.replica_gpus(), resolve(spec.min_ready, count),
                  resolve(spec.performance_min_ready, count), spec.max_lost, spec.head)


def problems(spec: ReplicasSpec, options: Any, *, launcher: str, endpoint_url: str | None, system: str,
             system_nodes: int, description: dict[str, str], harness: str = "loadgen") -> list[str]:
    """Everything wrong with `spec` for these engine options on this system, measured by the client `harness`,
    each naming its field under `engine` and the fix."""
    try:
        found = layout(spec, options, system_nodes)
    except ValueError as e:
        return [str(e)]
    out = []
    if harness == "endpoints":   # the MLCommons endpoints client sends every request to the one URL it is given
        out.append("replicas: the benchmark is measured by the endpoints client, which sends every sample to one URL "
                   "and cannot spread them over replicas (only loadgen's SUT, Podium's dispatch, can); serve it as "
                   "one engine whose own router spreads the load (the dynamo engine: more decode.workers behind its "
                   "frontend) and remove replicas, or, in a smoke plan, measure it with harness: loadgen")
    if found.nodes > system_nodes:
        out.append(f"replicas.nodes: {found.nodes} nodes but system {system!r} has {system_nodes}; set that "
                   f"system's nodes: {found.nodes} or lower replicas.nodes")
    used = found.per_node * found.gpus
    for have, source in ((node_gpus(description), f"a node of system {system!r} has (its description's "
                                                  "accelerators_per_node)"),
                         (getattr(options, "gpus_per_node", None) if found.gpus else None,
                          "options.gpus_per_node gives a node")):
        if have is not None and used > have:
            out.append(f"replicas.per_node: {found.per_node} replicas x {found.gpus} GPU(s) = {used} GPUs but "
                       f"{source} {have}; lower per_node or one replica's tensor/pipeline parallel size")
    for field in ("min_ready", "performance_min_ready"):
        if getattr(found, field) > found.count:
            out.append(f"replicas.{field}: {getattr(spec, field)} is over the {found.count} replicas "
                       f"({found.per_node} x {found.nodes} nodes); give at most {found.count} or a fraction")
    if found.max_lost >= found.count:
        out.append(f"replicas.max_lost: {found.max_lost} would let every one of the {found.count} replicas die; "
                   f"give at most {found.count - 1}")
    if launcher == "kubernetes" and endpoint_url:
        out.append("kubernetes.endpoint_url: one URL cannot reach each replica; remove it (the head reaches every "
                   "replica at its own Service)")
    return out
