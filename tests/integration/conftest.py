"""Plan copies for the integration suite (its fixtures are in tests/conftest.py, shared with tests/faults)."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).parents[2]
SMOKE = REPO / "deployments" / "plans" / "smoke.yaml"


def write_plan(path: Path, store: Path, **changes: object) -> Path:
    """The smoke plan with its sources pointed at `store`; top-level keys replaced by `changes`."""
    data = yaml.safe_load(SMOKE.read_text())
    bench = data["benchmarks"][0]
    bench["model"]["source"] = str(store / "models" / "tiny-llama")
    bench["dataset"] = {"performance": str(store / "datasets" / "smoke" / "perf_eval_ref.parquet"),
                        "accuracy": str(store / "datasets" / "smoke" / "acc_eval_inputs.parquet"),
                        "compliance": {"TEST07": str(store / "datasets" / "smoke" / "acc_eval_inputs.parquet")}}
    data.update(changes)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
