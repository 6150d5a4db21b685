"""Bad input through the real CLI: each malformed plan gives ONE message naming the field (or the file) and the fix,
exits 2, and starts nothing (no workspace folder, no process)."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

pytestmark = [pytest.mark.integration, pytest.mark.faults]

REPO = Path(__file__).parents[2]
SMOKE = REPO / "deployments" / "plans" / "smoke.yaml"
PODIUM = [sys.executable, "-c", "from flows.cli import main; main()"]


def _bench(d: dict) -> dict:
    return d["benchmarks"][0]


def _set(path: str, value: Any) -> Callable[[dict], None]:
    """A change at a dotted path (`benchmarks.0.generation.max_tokens`); a missing key is created."""
    def change(d: dict) -> None:
        *parents, last = path.split(".")
        node: Any = d
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
        node[int(last) if isinstance(node, list) else last] = value
    return change


def _drop(path: str) -> Callable[[dict], None]:
    def change(d: dict) -> None:
        *parents, last = path.split(".")
        node: Any = d
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        del node[last]
    return change


def _rename_scenario(old: str, new: str) -> Callable[[dict], None]:
    def change(d: dict) -> None:
        scenarios = _bench(d)["scenarios"]
        scenarios[new] = scenarios.pop(old)
    return change


def _system_name(name: str) -> Callable[[dict], None]:
    def change(d: dict) -> None:
        d["systems"][0]["name"] = name
        _bench(d)["system"] = name
    return change


def _external_storage(d: dict) -> None:
    d["storage"] = {"bucket": "podium", "endpoint_url": "http://127.0.0.1:9", "embedded": False}


def _submission_profile(d: dict) -> None:
    d["profile"] = "submission"
    d.pop("compliance")
    _bench(d)["loadgen"] = {"min_duration_ms": 1000}


def _gpu_too_small(d: dict) -> None:
    """A 70B bf16 model on one 24 GB GPU (vLLM, version pinned so nothing is asked of an engine here)."""
    d["systems"][0]["description"] = {"accelerator_memory_capacity": "24 GB"}
    _bench(d)["engine"] = {"name": "vllm", "options": {"gpus_per_node": 1, "version": "0.31.0"}}
    _bench(d)["model"] |= {"parameters": 70e9, "weight_data_types": "bf16"}


def _not_utf8(d: dict) -> bytes:
    """The plan saved as Latin-1, a system description holding an e acute."""
    d["systems"][0]["description"] = {"host_processor_model_name": "caf\u00e9"}
    return yaml.safe_dump(d, sort_keys=False, allow_unicode=True).encode("latin-1")


def _nested(depth: int) -> Callable[[dict], bytes]:
    """A free-form engine option (vLLM's mm_processor_kwargs) holding lists `depth` levels deep."""
    def change(d: dict) -> bytes:
        _bench(d)["engine"] = {"name": "vllm", "options": {"gpus_per_node": 1, "version": "0.31.0",
                                                           "mm_processor_kwargs": {"x": "HOLE"}}}
        return yaml.safe_dump(d, sort_keys=False).replace("HOLE", "[" * depth + "]" * depth).encode()
    return change


def _vllm_env(env: dict[str, str]) -> Callable[[dict], None]:
    def change(d: dict) -> None:
        _bench(d)["engine"] = {"name": "vllm", "options": {"gpus_per_node": 1, "version": "0.31.0", "env": env}}
    return change


def _short_sequence_budget(d: dict) -> None:
    _bench(d)["engine"] = {"name": "vllm", "options": {"gpus_per_node": 1, "version": "0.31.0", "max_model_len": 64}}
    _bench(d)["model"] |= {"parameters": 1e6}
    _bench(d)["generation"]["max_tokens"] = 64


# (id, change, what the message must name: the field, then the fix); a change that returns bytes writes them as the plan
CASES: list[tuple[str, Callable[[dict], bytes | None], tuple[str, ...]]] = [
    ("unknown-top-key", _set("nmae", "x"), ("nmae: unknown field", "remove it or check its spelling")),
    ("unknown-scenario-key", _set("benchmarks.0.scenarios.Server.target_qsp", 25),
     ("benchmarks.0.scenarios.Server.target_qsp: unknown field", "check its spelling")),
    ("unknown-engine-option", _set("benchmarks.0.engine.options", {"tensor_parallel_size": 2}),
     ("benchmarks.0.engine", "tensor_parallel_size")),
    ("max-tokens-not-int", _set("benchmarks.0.generation.max_tokens", "many"),
     ("benchmarks.0.generation.max_tokens", "integer")),
    ("max-tokens-one", _set("benchmarks.0.generation.max_tokens", 1),
     ("benchmarks.0.generation.max_tokens", "greater than or equal to 2")),
    ("nodes-not-int", _set("systems.0.nodes", "two"), ("systems.0.nodes", "integer")),
    ("negative-qps", _set("benchmarks.0.scenarios.Offline.target_qps", -5),
     ("benchmarks.0.scenarios.Offline.target_qps", "greater than 0")),
    ("zero-concurrency", _set("benchmarks.0.scenarios.Server.max_concurrency", 0),
     ("benchmarks.0.scenarios.Server.max_concurrency", "greater than or equal to 1")),
    ("negative-temperature", _set("benchmarks.0.generation.temperature", -1),
     ("benchmarks.0.generation.temperature", "greater than or equal to 0")),
    ("unknown-benchmark", _set("benchmarks.0.benchmark", "gpt-oss-12b"),
     ("benchmarks.0.benchmark: unknown benchmark 'gpt-oss-12b'", "did you mean 'gpt-oss-120b'")),
    ("unknown-scenario", _rename_scenario("Server", "Servr"),
     ("benchmarks.0.scenarios: 'Servr'", "did you mean 'Server'")),
    ("server-without-qps", _set("benchmarks.0.scenarios.Server", {"min_query_count": 460}),
     ("benchmarks.0.scenarios.Server.target_qps is required", "e.g. target_qps:")),
    ("submission-short-duration", _submission_profile,
     ("benchmarks.0.loadgen.min_duration_ms: 1000 is under the round's minimum", "use profile: smoke")),
    ("system-with-slash", _system_name("rack/a"), ("systems.0.name", "no '/', no '..'")),
    ("system-with-dotdot", _system_name("a..b"), ("systems.0.name", "no '/', no '..'")),
    ("submitter-escapes", _set("submitter", "../evil"), ("submitter", "no '/', no '..'")),
    ("system-not-listed", _set("benchmarks.0.system", "cpu-smok"),
     ("benchmarks.0.system: 'cpu-smok' is not among systems", "did you mean 'cpu-smoke'")),
    ("unknown-engine", _set("benchmarks.0.engine.name", "smok"), ("benchmarks.0.engine", "did you mean 'smoke'")),
    ("unknown-round", _set("round", "v9.9"), ("round: unknown round 'v9.9'", "valid values")),
    ("unknown-division", _set("division", "closd"), ("division", "'closed'")),
    ("missing-storage", _drop("storage"), ("storage: required field is missing", "deployments/plans/smoke.yaml")),
    ("embedded-and-endpoint", _set("storage.endpoint_url", "http://127.0.0.1:9"),
     ("storage", "remove endpoint_url or set embedded: false")),
    ("missing-credentials", _external_storage,
     ("storage: no credentials for http://127.0.0.1:9", "export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")),
    ("missing-model", _set("benchmarks.0.model.source", "/nonexistent/tiny-llama"),
     ("benchmarks.0.model.source: /nonexistent/tiny-llama does not exist", "make smoke-assets")),
    ("missing-compliance-set", _set("benchmarks.0.dataset.compliance.TEST07", "/nonexistent/gpqa.parquet"),
     ("benchmarks.0.dataset.compliance.TEST07: /nonexistent/gpqa.parquet does not exist", "fix the path")),
    ("gpu-memory", _gpu_too_small,
     ("server worker (1 x TP1 x PP1) holds 130.4 GiB of weights per GPU (70B parameters x bf16",
      "fix: a smaller weight dtype, e.g. model.weight_data_types: nvfp4")),
    ("sequence-budget", _short_sequence_budget,
     ("performance, accuracy, TEST07, TEST09 runs need 67 tokens (the longest prompt of ", "(3 tokens) + max_tokens "
      "64), but the engine is launched with max_model_len 64",
      "fix: set benchmarks[cpu-smoke/gpt-oss-120b].engine.options.max_model_len to at least 67")),
    ("not-utf8", _not_utf8, ("plan.yaml:", "not UTF-8 text: byte 0xe9", "fix: save the plan as UTF-8")),
    ("nested-20k", _nested(20_000), ("plan.yaml: nested deeper than the YAML parser follows",
                                     "a plan is a few levels deep")),
    ("nested-300", _nested(300), ("benchmarks: nested more than 32 levels deep", "a plan is a few levels deep")),
    ("qps-inf", _set("benchmarks.0.scenarios.Offline.target_qps", float("inf")),
     ("benchmarks.0.scenarios.Offline.target_qps: inf is not a finite number", "give a number")),
    ("margin-nan", _set("gates.accuracy_margin_min", float("nan")),
     ("gates.accuracy_margin_min: nan is not a finite number", "give a number")),
    ("timeout-inf", _set("benchmarks.0.engine.ready_timeout_s", float("inf")),
     ("benchmarks.0.engine.ready_timeout_s: inf is not a finite number", "give a number")),
    ("qps-1e308", _set("benchmarks.0.scenarios.Server.target_qps", 1e308),
     ("benchmarks.0.scenarios.Server.target_qps: 1e+308 is over 1000000000", "give the real value")),
    ("nodes-1e20", _set("systems.0.nodes", 10**20),
     ("systems.0.nodes: 100000000000000000000 is over 1000000, more nodes than any cluster has",
      "give the real value")),
    ("max-tokens-1e12", _set("benchmarks.0.generation.max_tokens", 10**12),
     ("benchmarks.0.generation.max_tokens: 1000000000000 is over 16777216", "give the real value")),
    ("env-name-comma", _vllm_env({"A,B": "1"}),
     ("options.env: 'A,B' is not an environment variable name", "one variable per key")),
    ("nodelist-comma", _set("benchmarks.0.engine", {"name": "smoke", "launcher": "slurm",
                                                    "slurm": {"nodelist": ["gpu01,gpu02"]}}),
     ("slurm.nodelist: 'gpu01,gpu02' is not one node", "one per list item")),
]


MESSAGE_LINES = 3   # `error:` with the file, the problem with its field, its `fix:`


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The smoke plan with its sources pointed at files that exist: empty model folder, one-prompt data sets (read
    before a run only for the sequence budgets of GPU engines)."""
    store = tmp_path_factory.mktemp("store")
    data = yaml.safe_load(SMOKE.read_text())
    model = store / "tiny-llama"
    model.mkdir()
    sets = {name: store / f"{name}.parquet" for name in ("perf", "acc")}
    for path in sets.values():
        pd.DataFrame({"input_tokens": [[1, 2, 3]], "ground_truth": ["x"], "dataset": ["gpqa"]}).to_parquet(path)
    _bench(data)["model"]["source"] = str(model)
    _bench(data)["dataset"] = {"performance": str(sets["perf"]), "accuracy": str(sets["acc"]),
                               "compliance": {"TEST07": str(sets["acc"])}}
    return data


def _run(plan: Path, workspace: Path) -> subprocess.CompletedProcess:
    home = plan.parent / "home"   # no ~/.aws; no AWS_* variables; no instance metadata lookup
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PREFECT_"))}
    env |= {"HOME": str(home), "AWS_EC2_METADATA_DISABLED": "true", "PYTHONPATH": str(REPO)}
    return subprocess.run([*PODIUM, "run", str(plan), "--workspace", str(workspace)], capture_output=True,
                          text=True, env=env, cwd=plan.parent, timeout=120)


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            blob = (proc / "cmdline").read_bytes() + (proc / "environ").read_bytes()
        except OSError:
            continue
        if text.encode() in blob:
            found.append(int(proc.name))
    return found


def test_every_bad_plan_gives_one_clear_message_and_starts_nothing(base: dict, tmp_path: Path) -> None:
    assert len(CASES) >= 20
    jobs = []
    for name, change, _ in CASES:
        folder = tmp_path / name
        (folder / "home").mkdir(parents=True)
        data = copy.deepcopy(base)
        raw = change(data)
        plan = folder / "plan.yaml"
        plan.write_bytes(raw if raw is not None else yaml.safe_dump(data, sort_keys=False).encode())
        jobs.append((plan, folder / "ws"))
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda job: _run(*job), jobs))
    problems = []
    for (name, _, expected), (_plan, ws), result in zip(CASES, jobs, results, strict=True):
        err = result.stderr
        if result.returncode != 2:
            problems.append(f"{name}: exit {result.returncode}, stderr:\n{err}")
            continue
        missing = [e for e in expected if e not in err]
        if missing:
            problems.append(f"{name}: message lacks {missing}:\n{err}")
        if err.count("error:") != 1 or err.count("\n  - ") > 1 or err.count("fix:") != 1:
            problems.append(f"{name}: not exactly one message with one fix:\n{err}")
        if "Traceback" in err + result.stdout or len(err.splitlines()) > MESSAGE_LINES:
            problems.append(f"{name}: a traceback, or more than one message")
        if ws.exists():
            problems.append(f"{name}: the workspace {ws} was created")
    assert not problems, "\n\n".join(problems)
    assert _processes_mentioning(str(tmp_path)) == []   # nothing started lives on (engine, S3, Prefect)
