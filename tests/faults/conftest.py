"""Fault plans: the smoke plan cut down to what one fault needs (fixtures: tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.integration.conftest import write_plan

SCENARIOS = {"Offline": {"target_qps": 800},   # as in the smoke plan: over 1 s on a faster machine too
             # bounds no busy machine breaks: a fault test measures recovery, not latency (the smoke deviation
             # latency-limit names them)
             "Server": {"target_qps": 25, "min_query_count": 460, "ttft_ms": 60000, "tpot_ms": 5000}}


def fault_plan(path: Path, store: Path, scenarios: tuple[str, ...] = ("Server",), **changes: object) -> Path:
    """The smoke plan without audits, with only `scenarios` (each with its performance and accuracy run; the checker
    wants both): what one fault needs."""
    write_plan(path, store, compliance={"run": "never"}, **changes)
    data = yaml.safe_load(path.read_text())
    bench = data["benchmarks"][0]
    bench["scenarios"] = {name: SCENARIOS[name] for name in scenarios}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="session", autouse=True)
def _one_prefect_api(prefect_server: None) -> None:
    """Every fault test shares the session's Prefect server, the `podium` commands it starts too."""
