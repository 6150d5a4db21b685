"""What the real-engine tests share: their virtualenvs (made by `make venv-vllm venv-dynamo`), a loadgen run spec
over the smoke data set, and the listening sockets of a process group."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from submission.runs import RunSpec

REPO = Path(__file__).parents[2]
BENCH = "gpt-oss-120b"


def engine_python(venv: str, target: str) -> Path:
    """The interpreter of a real engine's virtualenv; `make test` requires it, a plain pytest skips without it."""
    python = REPO / venv / "bin" / "python"
    if not python.exists():
        message = f"{python} is missing; run `make {target}`"
        if os.environ.get("PODIUM_REQUIRE_ENGINES"):
            pytest.fail(message)
        pytest.skip(message)
    return python


def offline_spec(dataset: Path, mode: str, *, samples: int, max_tokens: int, engine: str,
                 qps: int | None = None) -> RunSpec:
    """A short Offline run of the smoke data set over `samples` prompts; a performance run's one query holds about
    1.1 x `qps` samples, which must take the engine over the 1 s minimum duration for a VALID result."""
    conf = [(f"{BENCH}.Offline.target_qps", str(qps or samples)), (f"{BENCH}.Offline.min_duration", "1000"),
            (f"{BENCH}.*.performance_sample_count_override", str(samples))]
    if mode == "accuracy":
        conf.append((f"{BENCH}.*.accuracy_sample_count_override", str(samples)))
    return RunSpec(plan="engines", profile="smoke", round="v6.1", system="cpu", benchmark=BENCH, scenario="Offline",
                   mode=mode, loadgen_model=BENCH, loadgen_scenario="Offline", user_conf=tuple(conf),
                   dataset=str(dataset), dataset_sha256="-", model_sha256="-", engine=engine,
                   max_tokens=max_tokens, temperature=0.0, max_concurrency=8)


def listening(pgids: set[int]) -> list[str]:
    """`address:port` of every TCP socket that a process of these process groups listens on."""
    pids = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) in pgids:
            pids.add(int(stat.parent.name))
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    return [line.split()[3] for line in out.splitlines() if any(f"pid={p}," in line for p in pids)]
