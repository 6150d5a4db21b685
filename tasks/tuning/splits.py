"""Prefill:decode splits of a disaggregated deployment: which ones the GPUs allow, how a split becomes engine
options, which one won, and the plan fragment that records the winner.

A split of G GPUs gives `prefill` workers of `prefill_tp` GPUs each and `decode` workers of `decode_tp` GPUs each,
using every GPU: prefill TP2 and decode TP1 on 4 nodes x 4 GPUs allow 2+14, 4+12, ..., 14+2 GPUs; "75:25" is
6 prefill workers (12 GPUs) and 4 decode workers (4 GPUs). Each split must also place on the nodes
(`submission.plan.topology.place`: no worker spans nodes).

Podium's placement is first fit, prefill then decode, so a node may hold workers of both roles: 5 prefill workers at
TP2 + 6 decode at TP1 on 4 x 4 GPUs put two prefill and two decode workers on node 2. Where each role takes whole
nodes, as the Slurm scripts of the seed's v6.1 Qwen3-VL submission did, that split cannot be placed (its Interactive
README: 6 + 4 and 4 + 8 were measured, 5 + 6 was not). Each split records the nodes it shares (`shared_nodes`) and the
sweep's output says so (`sharing_note`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from submission.base.errors import PlanError
from submission.base.schema import Strict
from submission.plan.engine_options import EngineOptions
from submission.plan.topology import Pool, TopologyError, place


class Split(Strict):
    prefill: int          # prefill workers
    decode: int           # decode workers
    prefill_tp: int
    decode_tp: int
    shared_nodes: tuple[int, ...] = ()   # nodes Podium's placement gives workers of both roles (none on one node)

    @property
    def gpus(self) -> int:
        return self.prefill * self.prefill_tp + self.decode * self.decode_tp

    @property
    def ratio(self) -> str:
        """The GPU share, e.g. "75:25" (prefill:decode)."""
        share = round(100 * self.prefill * self.prefill_tp / self.gpus)
        return f"{share}:{100 - share}"

    def apply(self, options: EngineOptions) -> EngineOptions:
        """The engine's options with the prefill and decode pools sized as this split (the engine's own
        `split`: submission/plan/engine_options.py)."""
        return options.split(self.prefill, self.decode, self.prefill_tp, self.decode_tp)

    @property
    def label(self) -> str:
        return f"{self.ratio} ({self.prefill}P x TP{self.prefill_tp} + {self.decode}D x TP{self.decode_tp})"


def splits(gpus: int, *, prefill_tp: int = 1, decode_tp: int = 1, nodes: int = 1,
           gpus_per_node: int | None = None, min_workers: int = 1) -> list[Split]:
    """Every split that uses all `gpus` with at least `min_workers` of each kind and places on `nodes` nodes,
    most prefill first."""
    if gpus < prefill_tp + decode_tp:
        raise PlanError(f"{gpus} GPU(s) cannot hold one prefill worker (TP{prefill_tp}) and one decode worker "
                        f"(TP{decode_tp})", fix="give the sweep more GPUs or smaller tensor-parallel sizes")
    per_node = gpus_per_node if gpus_per_node is not None else -(-gpus // nodes)
    found = []
    for prefill_gpus in range(gpus - decode_tp * min_workers, prefill_tp * min_workers - 1, -1):
        decode_gpus = gpus - prefill_gpus
        if prefill_gpus % prefill_tp or decode_gpus % decode_tp:
            continue
        split = Split(prefill=prefill_gpus // prefill_tp, decode=decode_gpus // decode_tp, prefill_tp=prefill_tp,
                      decode_tp=decode_tp)
        if split.prefill < min_workers or split.decode < min_workers:
            continue
        try:
            slots = place([Pool("prefill", split.prefill, prefill_tp), Pool("decode", split.decode, decode_tp)], nodes,
                          per_node)
        except TopologyError:
            continue
        roles = {n: {s.role for s in slots if s.node == n} for n in range(nodes)}
        shared = tuple(n for n, held in roles.items() if len(held) == 2) if nodes > 1 else ()
        found.append(split.model_copy(update={"shared_nodes": shared}))
    if not found:
        raise PlanError(f"no prefill:decode split of {gpus} GPUs fits {nodes} node(s) x {per_node} GPUs with "
                        f"prefill TP{prefill_tp} and decode TP{decode_tp}",
                        fix="check --gpus, --nodes and the TP sizes")
    return found


def sharing_note(rows: Sequence[dict[str, Any]]) -> str | None:
    """The sweep's line on the splits that put both roles on a node (rows with `label` and `shared_nodes`), or None
    when none does."""
    shared = [r for r in rows if r.get("shared_nodes")]
    if not shared:
        return None
    which = "; ".join(f"{r['label']} on node(s) {', '.join(map(str, r['shared_nodes']))}" for r in shared)
    return (f"prefill and decode workers share a node in {len(shared)} split(s): {which}. Podium's placement mixes "
            "roles on a node; where each role takes whole nodes (the Slurm scripts of the seed's v6.1 Qwen3-VL "
            "submission) these splits cannot be placed, e.g. 5 prefill TP2 + 6 decode TP1 on 16 GPUs")


def best(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The confirmed row with the highest metric per GPU (ties: fewer prefill workers first, i.e. later rows)."""
    confirmed = [r for r in rows if r.get("confirmed") and r.get("metric_per_gpu") is not None]
    return max(reversed(confirmed), key=lambda r: r["metric_per_gpu"], default=None)


def fragment(system: str, benchmark: str, scenario: str, engine: str, options: dict[str, Any], qps: float,
             note: str) -> str:
    """The winning topology as a plan fragment (YAML) to merge into the plan's benchmark entry."""
    body = {"benchmarks": [{"system": system, "benchmark": benchmark,
                            "engine": {"name": engine, "options": options},
                            "scenarios": {scenario: {"target_qps": qps}}}]}
    head = "".join(f"# {line}\n" for line in note.splitlines())
    return head + yaml.safe_dump(body, sort_keys=False)
