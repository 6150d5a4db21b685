"""Worker placement on nodes and GPUs, and the typed engine options of a plan: the seed's topologies fit, every
mistake is named by its field with the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from submission.base.errors import PlanError
from submission.plan import model as plans
from submission.plan.engine_options import OPTIONS
from submission.plan.topology import Pool, Slot, TopologyError, place
from tasks.engines import BACKENDS

PLANS = Path(__file__).parents[2] / "deployments" / "plans"


def test_the_75_25_split_places_prefill_on_three_nodes_and_decode_on_the_fourth() -> None:
    slots = place([Pool("prefill", 6, 2), Pool("decode", 4, 1)], nodes=4, gpus_per_node=4)
    assert slots == [Slot("prefill", 0, 0, (0, 1)), Slot("prefill", 1, 0, (2, 3)),
                     Slot("prefill", 2, 1, (0, 1)), Slot("prefill", 3, 1, (2, 3)),
                     Slot("prefill", 4, 2, (0, 1)), Slot("prefill", 5, 2, (2, 3)),
                     Slot("decode", 0, 3, (0,)), Slot("decode", 1, 3, (1,)),
                     Slot("decode", 2, 3, (2,)), Slot("decode", 3, 3, (3,))]


def test_the_50_50_split_with_pinned_nodes() -> None:
    slots = place([Pool("prefill", 4, 2, (0, 1)), Pool("decode", 8, 1, (2, 3))], nodes=4, gpus_per_node=4)
    assert [(s.role, s.node, s.gpu_ids) for s in slots[:4]] == [("prefill", 0, (0, 1)), ("prefill", 0, (2, 3)),
                                                                 ("prefill", 1, (0, 1)), ("prefill", 1, (2, 3))]
    assert [s.node for s in slots[4:]] == [2, 2, 2, 2, 3, 3, 3, 3]
    assert {s.gpu_ids for s in slots[4:]} == {(0,), (1,), (2,), (3,)}


def test_too_many_gpus_says_how_many_and_what_to_change() -> None:
    with pytest.raises(TopologyError, match=r"need 18 GPUs \(prefill 6 x 2 GPU\(s\), decode 6 x 1 GPU\(s\)\) "
                                            r"but 4 node\(s\) x 4 GPUs = 16; use fewer workers or more nodes"):
        place([Pool("prefill", 6, 2), Pool("decode", 6, 1)], nodes=4, gpus_per_node=4)


def test_a_worker_larger_than_a_node_and_a_node_that_does_not_exist() -> None:
    with pytest.raises(TopologyError, match="a prefill worker needs 8 GPUs but a node has 4"):
        place([Pool("prefill", 1, 8)], nodes=4, gpus_per_node=4)
    with pytest.raises(TopologyError, match=r"decode.nodes: node 4 does not exist; nodes are 0..3"):
        place([Pool("decode", 1, 1, (4,))], nodes=4, gpus_per_node=4)


def test_fragmentation_names_the_worker_that_does_not_fit() -> None:
    # two 3-GPU workers leave one GPU per node: a 2-GPU worker fits nowhere although 2 GPUs are free
    with pytest.raises(TopologyError, match=r"prefill worker 0 needs 2 GPU\(s\) but any node has fewer left"):
        place([Pool("decode", 2, 3), Pool("prefill", 1, 2)], nodes=2, gpus_per_node=4)


def test_a_cpu_host_places_workers_without_gpus() -> None:
    assert place([Pool("prefill", 1, 1), Pool("decode", 2, 1)], nodes=1, gpus_per_node=0) == [
        Slot("prefill", 0, 0, ()), Slot("decode", 0, 0, ()), Slot("decode", 1, 0, ())]


def test_every_backend_has_typed_options_and_back() -> None:
    assert set(OPTIONS) == set(BACKENDS)


@pytest.mark.parametrize("name", ["gpt-oss-120b-trtllm-k8s.yaml", "qwen3-vl-dynamo-75-25.yaml",
                                  "qwen3-vl-dynamo-50-50.yaml"])
def test_the_seed_topologies_load(name: str) -> None:
    plan = plans.load(PLANS / name)
    config = plan.benchmarks[0].engine.config()
    assert config.nodes == plan.systems[0].nodes


def _plan(engine: dict, nodes: int = 4) -> dict:
    data = yaml.safe_load((PLANS / "qwen3-vl-dynamo-75-25.yaml").read_text())
    data["systems"][0]["nodes"] = nodes
    data["benchmarks"][0]["engine"] = engine
    return data


def _error(engine: dict, nodes: int = 4) -> str:
    with pytest.raises(PlanError) as e:
        plans.parse(_plan(engine, nodes))
    return str(e.value)


DYNAMO = {"name": "dynamo", "launcher": "slurm",
          "options": {"nodes": 4, "gpus_per_node": 4, "prefill": {"workers": 6, "tensor_parallel_size": 2},
                      "decode": {"workers": 4}}}


@pytest.mark.parametrize(("engine", "expected"), [
    ({"name": "dynamoo"}, "benchmarks.0.engine: name: unknown engine 'dynamoo'; did you mean 'dynamo'?"),
    ({**DYNAMO, "options": {**DYNAMO["options"], "prefil": {"workers": 1}}},
     "benchmarks.0.engine: options.prefil: unknown option; remove it or check its spelling"),
    ({**DYNAMO, "options": {**DYNAMO["options"], "decode": {"workers": 6}}},
     "benchmarks.0.engine: options: the workers need 18 GPUs"),
    ({**DYNAMO, "options": {**DYNAMO["options"], "prefill": {"workers": 1, "tensor_parallel_size": 0}}},
     "options.prefill.tensor_parallel_size: Input should be greater than or equal to 1"),
    ({**DYNAMO, "options": {**DYNAMO["options"], "discovery": "file"}},
     "options: discovery: file discovery works within one node; use etcd (Slurm) or kubernetes"),
    ({**DYNAMO, "launcher": "kubernetes"}, "kubernetes: the kubernetes launcher needs its section"),
    ({**DYNAMO, "launcher": "kubernetes", "kubernetes": {"image": "dynamo:1.6.1"}},
     "options.discovery: on Kubernetes the Dynamo operator does discovery; set discovery: kubernetes"),
    ({**DYNAMO, "kubernetes": {"image": "x"}}, "kubernetes: only the kubernetes launcher reads it"),
    ({**DYNAMO, "launcher": "kubernetes", "kubernetes": {"image": "x"},
      "options": {**DYNAMO["options"], "discovery": "kubernetes"}},
     "options.version: the engine runs in the container image"),
    ({"name": "trtllm", "options": {"backend": "tensorrt", "gpus_per_node": 4}},
     "options: build: the tensorrt backend serves a built engine"),
    ({"name": "trtllm", "options": {"llm_api_options": {"tensor_parallel_size": 8}}},
     "options: llm_api_options.tensor_parallel_size: set it as options.tensor_parallel_size instead"),
    ({"name": "trtllm", "options": {"served_model_name": "gpt"}},
     "served_model_name: trtllm-serve names the model after the folder it serves"),
    ({"name": "vllm", "options": {"nodes": 2}}, "nodes: the vllm engine serves from one node"),
    ({"name": "vllm", "options": {"tensor_parallel_size": 8, "gpus_per_node": 4}},
     "tensor x pipeline x data parallel = 8 GPUs but gpus_per_node is 4"),
    ({"name": "external", "launcher": "slurm", "options": {"base_url": "http://h:1", "served_model_name": "m"}},
     "launcher: an external engine is never launched"),
    ({"name": "external", "options": {"base_url": "h:1", "served_model_name": "m"}},
     "options.base_url: String should match pattern"),
])
def test_engine_mistakes_name_the_field(engine: dict, expected: str) -> None:
    assert expected in _error(engine)


def test_an_engine_larger_than_its_system() -> None:
    assert ("benchmarks.0.engine.options.nodes: the engine spans 4 nodes but system 'gb200x16-slurm' has 2; "
            "set that system's nodes: 4") in _error(DYNAMO, nodes=2)


def test_one_gpu_workers_may_share_a_gpu_and_wider_ones_may_not() -> None:
    pools = [Pool("prefill", 1, 1), Pool("decode", 1, 1)]
    assert place(pools, 1, 1, workers_per_gpu=2) == [Slot("prefill", 0, 0, (0,)), Slot("decode", 0, 0, (0,))]
    with pytest.raises(TopologyError, match="1 GPUs x 2 workers each = 2"):
        place([Pool("decode", 3, 1)], 1, 1, workers_per_gpu=2)
    with pytest.raises(TopologyError, match="only one-GPU workers share a GPU, but a prefill worker needs 2"):
        place([Pool("prefill", 1, 2), Pool("decode", 1, 1)], 1, 2, workers_per_gpu=2)


def test_workers_sharing_a_gpu_must_leave_each_other_room_and_run_locally() -> None:
    options = {"python": "py", "gpus_per_node": 1, "workers_per_gpu": 2, "discovery": "file",
               "prefill": {"workers": 1}, "decode": {"workers": 1}}
    with pytest.raises(ValueError, match=r"give every worker at most 0\.46"):
        OPTIONS["dynamo"].model_validate(options | {"worker_args": ["--gpu-memory-utilization", "0.5"]})
    OPTIONS["dynamo"].model_validate(options | {"worker_args": ["--gpu-memory-utilization", "0.4"]})
    from submission.plan.engine_options import engine_problems
    _, problems = engine_problems("dynamo", options | {"discovery": "etcd", "worker_args": [
        "--gpu-memory-utilization", "0.4"]}, "slurm", None)
    assert any("only the local launcher shares a GPU" in p for p in problems)
