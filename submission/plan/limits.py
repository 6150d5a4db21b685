"""The most a plan may give for what a system has: a rate, a node count, a sequence length; and how deep a plan
may nest. Each bound is far above the largest real one, which its comment cites, so only a value no run could have is
refused (a typo, a unit slip, `1e308`): the value would otherwise reach loadgen, Slurm or an engine as a number they
overflow on, or a run length nothing finishes. The plan's fields take them as types; the plan reference shows each as
the field's maximum.
"""

from __future__ import annotations

from typing import Annotated, Any

from annotated_types import Ge, Gt

from submission.base.schema import AtMost

# The largest rate published in v6.1 (submission/rules/published-v6.1.csv) is 5,749,440 tokens/s (gpt-oss-120b
# Offline on 512 MI355X); a query yields at least one token, so no published system answers more queries per second.
# 1e9 leaves a factor of over 100 for systems to come.
MAX_QPS = 1_000_000_000
# Fugaku has 158,976 nodes (RIKEN), the most of any TOP500 system; the largest published v6.1 system has 72
# (published-v6.1.csv `nodes`). 1e6 is above both by far.
MAX_NODES = 1_000_000
# Tokens in one sequence (prompt and output): the longest context window published is 10M tokens (Llama 4 Scout,
# Meta's model card); the reference models have at most 262,144 (submission/rules/models.yaml max_position).
MAX_TOKENS = 2**24

Rate = Annotated[float, Gt(0), AtMost(MAX_QPS, "more queries per second than any system serves (over 100 x the "
                                               "largest published rate, submission/plan/limits.py)")]
Nodes = Annotated[int, Ge(1), AtMost(MAX_NODES, "more nodes than any cluster has (the largest has 158,976, "
                                                "submission/plan/limits.py)")]
_CONTEXT = AtMost(MAX_TOKENS, "longer than any model's context (the longest published is 10M tokens, "
                              "submission/plan/limits.py)")
Tokens = Annotated[int, Ge(1), _CONTEXT]
AnswerTokens = Annotated[int, Ge(2), _CONTEXT]   # an answer's: loadgen times TPOT from the second token on

# Levels of mappings and lists in a plan: the shipped plans have at most 7 (deployments/plans/). pydantic stops
# serialising a value past a few hundred levels ("Maximum serialization depth exceeded"), and the YAML parser a
# little deeper (RecursionError), so a deeper plan is refused at load with its field instead.
MAX_DEPTH = 32


def levels(node: Any, level: int = 1, seen: dict[int, int] | None = None) -> int:
    """Levels of mappings and lists in `node`, which sits `level` levels down, counted until they pass MAX_DEPTH; each
    mapping and list once, however many YAML aliases share it; one that holds itself counts as too deep."""
    if not isinstance(node, dict | list):
        return 0
    if level > MAX_DEPTH:
        return 1   # the count has passed the bound on this path already
    seen = {} if seen is None else seen
    if id(node) not in seen:
        seen[id(node)] = MAX_DEPTH + 1   # met again inside itself: a cycle
        inner = node.values() if isinstance(node, dict) else node
        seen[id(node)] = 1 + max((levels(v, level + 1, seen) for v in inner), default=0)
    return seen[id(node)]
