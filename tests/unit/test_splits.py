"""Prefill:decode splits, how they become engine options, the winner and its plan fragment; scaled options."""

from __future__ import annotations

import pytest
import yaml

from submission.base.errors import PlanError
from submission.plan.engine_options import parse_options
from tasks.tuning.splits import Split, best, fragment, sharing_note, splits


def test_the_seed_s_splits_of_sixteen_gpus() -> None:
    """Prefill TP2, decode TP1, 4 nodes x 4 GPUs: 75:25 is 6 prefill + 4 decode, 50:50 is 4 + 8."""
    found = splits(16, prefill_tp=2, decode_tp=1, nodes=4, gpus_per_node=4)
    by_ratio = {s.ratio: s for s in found}
    assert (by_ratio["75:25"].prefill, by_ratio["75:25"].decode) == (6, 4)
    assert (by_ratio["50:50"].prefill, by_ratio["50:50"].decode) == (4, 8)
    assert [s.prefill for s in found] == [7, 6, 5, 4, 3, 2, 1]           # most prefill first
    assert all(s.gpus == 16 for s in found)
    assert by_ratio["50:50"].label == "50:50 (4P x TP2 + 8D x TP1)"


def test_podium_places_splits_that_whole_node_roles_could_not() -> None:
    """The seed's 16 GPUs: 5 prefill TP2 + 6 decode TP1 could not be placed where each role took whole Slurm nodes;
    Podium's placement puts both roles on node 2, and the sweep's output says so."""
    found = {s.ratio: s for s in splits(16, prefill_tp=2, decode_tp=1, nodes=4, gpus_per_node=4)}
    assert (found["62:38"].prefill, found["62:38"].decode, found["62:38"].shared_nodes) == (5, 6, (2,))
    assert found["75:25"].shared_nodes == found["50:50"].shared_nodes == ()      # the seed's two: whole nodes
    note = sharing_note([{"label": s.label, "shared_nodes": s.shared_nodes} for s in found.values()])
    assert note.startswith("prefill and decode workers share a node in 4 split(s): 88:12 (7P x TP2 + 2D x TP1) on "
                           "node(s) 3; 62:38 (5P x TP2 + 6D x TP1) on node(s) 2;")
    assert "Podium's placement mixes roles on a node" in note and "5 prefill TP2 + 6 decode TP1" in note
    assert sharing_note([{"label": "50:50", "shared_nodes": []}]) is None
    assert all(s.shared_nodes == () for s in splits(3))                            # one node: nothing to say
    # a plan that pins each role to its nodes (the shipped 50:50 Dynamo plan) is placed afresh when split
    pinned = parse_options("dynamo", {"worker": "vllm", "nodes": 4, "gpus_per_node": 4,
                                      "prefill": {"workers": 4, "tensor_parallel_size": 2, "nodes": [0, 1]},
                                      "decode": {"workers": 8, "nodes": [2, 3]}})
    five_six = found["62:38"].apply(pinned).as_plan()
    assert five_six["prefill"] == {"workers": 5, "tensor_parallel_size": 2}
    assert five_six["decode"] == {"workers": 6, "tensor_parallel_size": 1}


def test_splits_that_do_not_place_are_left_out() -> None:
    # TP4 prefill workers on 2-GPU nodes never fit; only TP-compatible totals are kept
    with pytest.raises(PlanError, match="no prefill:decode split"):
        splits(8, prefill_tp=4, decode_tp=1, nodes=4, gpus_per_node=2)
    assert [(s.prefill, s.decode) for s in splits(6, prefill_tp=2, decode_tp=2)] == [(2, 1), (1, 2)]
    with pytest.raises(PlanError, match="cannot hold"):
        splits(2, prefill_tp=2, decode_tp=1)


def test_each_engine_splits_its_own_pools() -> None:
    split = Split(prefill=3, decode=5, prefill_tp=2, decode_tp=1)
    sim = split.apply(parse_options("simulated", {"tpot_ms": 20}))
    assert sim.as_plan() == {"tpot_ms": 20, "prefill_workers": 3, "decode_workers": 5}
    dyn = split.apply(parse_options("dynamo", {"worker": "mocker", "gpus_per_node": 0,
                                               "prefill": {"extra_args": ["-x"]}})).as_plan()
    assert dyn["prefill"] == {"extra_args": ["-x"], "workers": 3, "tensor_parallel_size": 2}
    assert dyn["decode"] == {"workers": 5, "tensor_parallel_size": 1}
    parse_options("dynamo", dyn)                                          # still valid typed Dynamo options
    with pytest.raises(PlanError, match="no prefill and decode pools"):
        split.apply(parse_options("smoke", {}))


def test_best_is_the_highest_confirmed_metric_per_gpu() -> None:
    rows = [{"label": "a", "confirmed": True, "metric_per_gpu": 10.0},
            {"label": "b", "confirmed": False, "metric_per_gpu": 99.0},
            {"label": "c", "confirmed": True, "metric_per_gpu": 25.0},
            {"label": "d", "confirmed": True, "metric_per_gpu": None}]
    assert best(rows)["label"] == "c"
    assert best([rows[1]]) is None


def test_fragment_is_yaml_with_the_winning_topology() -> None:
    text = fragment("sys", "gpt-oss-120b", "Interactive", "simulated", {"prefill_workers": 4, "decode_workers": 8},
                    39.85, "best split\n50:50")
    assert text.startswith("# best split\n# 50:50\n")
    data = yaml.safe_load(text)
    entry = data["benchmarks"][0]
    assert entry["engine"] == {"name": "simulated", "options": {"prefill_workers": 4, "decode_workers": 8}}
    assert entry["scenarios"] == {"Interactive": {"target_qps": 39.85}}


def test_scaled_options() -> None:
    def scaled(engine: str, options: dict, nodes: int) -> dict:
        return parse_options(engine, options).scaled(nodes).as_plan()

    assert scaled("simulated", {"tpot_ms": 5}, 4) == {"tpot_ms": 5, "nodes": 4}
    dyn = {"nodes": 1, "prefill": {"workers": 2}, "decode": {"workers": 3}}
    assert scaled("dynamo", dyn, 4) == {"nodes": 4, "prefill": {"workers": 8}, "decode": {"workers": 12}}
    with pytest.raises(PlanError, match="serves from one node"):
        scaled("vllm", {}, 2)
    with pytest.raises(PlanError, match="whole copies"):
        scaled("dynamo", {"nodes": 2, "decode": {"workers": 2}}, 3)
