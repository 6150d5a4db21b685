"""`podium ladder` for real: a plan of simulated replicas derived from deployments/plans/scale-sim-64.yaml (its 2-node
step, 2 replicas a node, on this host through the local launcher), its Offline rate a node at 1 and 2 nodes through
the real loadgen, Podium's dispatch and a Prefect flow; a floor above linear ends the ladder with exit 6."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from submission.base.errors import RunFailed
from submission.plan.steps import at_nodes

pytestmark = pytest.mark.integration
SCALE_SIM = Path(__file__).parents[2] / "deployments" / "plans" / "scale-sim-64.yaml"
PER_NODE = 2
# one replica: 2 sequences at 10 ms a token (20 ms in a full batch), 8 tokens an answer: 12.5 answers/s at most, a
# node's 2 replicas 25; the Offline rate asked is 40 a node, above what they can serve, so every step's run lasts its
# min_duration and is VALID however busy the machine is
ENGINE = {"prefill_workers": 1, "prefill_ms": 2, "decode_workers": 1, "decode_slots": 2, "tpot_ms": 10,
          "output_tokens": 8, "chunk_tokens": 4}
RATE = 40   # Offline target_qps a node


def ladder_plan(tmp: Path, store: Path) -> Path:
    """scale-sim-64.yaml at its 2-node step, 2 replicas a node, a faster replica and rates sized for it, reading the
    smoke store the fixture built."""
    data = at_nodes(yaml.safe_load(SCALE_SIM.read_text()), 2)
    bench = data["benchmarks"][0]
    smoke = store / "datasets" / "smoke"
    bench["engine"]["options"] = {**ENGINE, "answers": [str(smoke / "acc_answers.parquet")]}
    bench["engine"]["replicas"]["per_node"] = PER_NODE
    bench["engine"]["ready_timeout_s"] = 120
    bench["model"]["source"] = str(store / "models" / "tiny-llama")
    bench["dataset"] = {"performance": str(smoke / "perf_eval_ref.parquet"),
                        "accuracy": str(smoke / "acc_eval_inputs.parquet")}
    bench["scenarios"]["Offline"].update(target_qps=2 * RATE, max_concurrency=8 * PER_NODE)
    path = tmp / "ladder.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _ladder(plan: Path, workspace: Path, *more: str) -> tuple[int, dict]:
    result = CliRunner().invoke(app, ["ladder", str(plan), "--steps", "1,2", "--probe-ms", "2000", *more,
                                      "--workspace", str(workspace), "--json"])
    text = result.output
    assert '{\n  "rows"' in text, text
    return result.exit_code, json.loads(text[text.index('{\n  "rows"'): text.rindex("\n}") + 2])


def test_the_ladder_measures_each_step_and_a_sub_linear_one_exits_6(tmp_path: Path, smoke_store: Path) -> None:
    plan, ws = ladder_plan(tmp_path, smoke_store), tmp_path / "ws"
    code, out = _ladder(plan, ws, "--floor", "0.5")
    assert code == 0, out
    one, two = out["rows"]
    assert (one["nodes"], one["replicas"], two["nodes"], two["replicas"]) == (1, PER_NODE, 2, 2 * PER_NODE)
    assert one["valid"] and two["valid"] and not one["cached"] and not two["cached"], json.dumps(out["rows"])
    assert one["per_node"] == pytest.approx(one["metric"]) and two["per_node"] == pytest.approx(two["metric"] / 2)
    assert one["vs_previous"] is None and two["vs_previous"] == pytest.approx(two["per_node"] / one["per_node"],
                                                                              rel=1e-3)
    assert two["vs_previous"] >= 0.5 and out["linear"] and out["not_run"] == [] and out["full_nodes"] == 2
    assert out["verdict"].startswith("LINEAR") and Path(out["plot"]).is_file()
    print(out["summary"])
    # each step is a plan of its own in the workspace: the 1-node one with half the replicas and half the rate
    assert sorted(p.name for p in (ws / "steps").iterdir()) == ["scale-sim-64-n2-n1.yaml", "scale-sim-64-n2.yaml"]
    step = yaml.safe_load((ws / "steps" / "scale-sim-64-n2-n1.yaml").read_text())["benchmarks"][0]
    assert step["engine"]["replicas"]["nodes"] == 1 and step["scenarios"]["Offline"]["target_qps"] == RATE

    # a floor above linear: the 2-node step is sub-linear, from the probe cache (no engine started again): exit 6
    code, out = _ladder(plan, ws, "--floor", "1.5")
    assert code == RunFailed.exit_code == 6
    assert [r["cached"] for r in out["rows"]] == [True, True] and out["rows"][1]["linear"] is False
    assert not out["linear"] and out["verdict"].startswith("SUB-LINEAR at 2 nodes") and "under the floor 1.5" in \
        out["verdict"]
