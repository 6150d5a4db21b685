"""`podium run PLAN --only SYSTEM/BENCHMARK/SCENARIO`, for real: the smoke plan without audits is run for Offline and
Server (`--only` twice: Interactive, not selected and never measured, is left out), then `--only .../Server` through
the CLI measures Server again while Offline comes from the cache and Interactive is left out again; a name the plan
does not have stops the CLI with exit code 2 before anything starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from submission.results.runs import RunRecord
from tasks.storage import s3server
from tests.integration.conftest import REPO, write_plan

pytestmark = pytest.mark.integration

BENCH = "cpu-smoke/gpt-oss-120b"
NOT_RUN = "not run: not selected by --only and not in the cache"


def podium(*args: str) -> subprocess.CompletedProcess[str]:
    """The `podium` command against the session's Prefect test server, on this checkout's code."""
    from prefect.settings import PREFECT_API_URL

    env = os.environ | {"PREFECT_API_URL": str(PREFECT_API_URL.value()),
                        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([str(Path(sys.executable).parent / "podium"), *args], capture_output=True, text=True,
                          timeout=600, env=env, check=False)


def records(folder: Path) -> dict[str, RunRecord]:
    rows = json.loads((folder / "results.json").read_text())
    return {f"{r['scenario']}/{r['mode']}": RunRecord.model_validate(r) for r in rows}


@pytest.fixture(scope="module")
def reran(prefect_server: None, smoke_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    from flows.submission import submission

    base = tmp_path_factory.mktemp("only")
    plan = write_plan(base / "plan.yaml", smoke_store, compliance={"run": "never"})
    data = yaml.safe_load(plan.read_text())
    data["benchmarks"][0]["scenarios"]["Server"]["target_qps"] = 50   # its 460 queries in 9 s, twice (p99s far
    plan.write_text(yaml.safe_dump(data, sort_keys=False))              # under the limits on two shared cores)
    ws = base / "ws"
    server = s3server.start(ws / "s3")   # both runs publish to it
    try:
        began = time.monotonic()
        first = submission(str(plan), str(ws), [f"{BENCH}/Offline", f"{BENCH}/Server"], return_state=True)
        first_folder = (ws / "runs" / "latest").resolve()
        print(f"first run (Offline, Server): {time.monotonic() - began:.1f} s")
        bad = podium("run", str(plan), "--workspace", str(ws), "--only", f"{BENCH}/Serverr")
        began = time.monotonic()
        second = podium("run", str(plan), "--workspace", str(ws), "--only", f"{BENCH}/Server")
        print(f"podium run --only Server: {time.monotonic() - began:.1f} s")
        yield {"first": first, "first_folder": first_folder, "bad": bad, "second": second, "ws": ws,
               "folder": (ws / "runs" / "latest").resolve()}
    finally:
        s3server.stop(server)


def test_the_first_run_measures_only_the_selected_scenarios(reran: dict) -> None:
    state = reran["first"]
    assert state.is_completed(), state.message
    assert "2/3 runs VALID" in state.message and "2 run(s) not run (--only)" in state.message, state.message
    assert state.result()["not_run"] == [f"{BENCH}/Interactive/performance", f"{BENCH}/Interactive/accuracy"]
    assert sorted(records(reran["first_folder"])) == ["Offline/accuracy", "Offline/performance", "Server/accuracy",
                                                      "Server/performance"]


def test_a_name_the_plan_lacks_stops_before_anything_runs(reran: dict) -> None:
    bad = reran["bad"]
    assert bad.returncode == 2, bad.stdout[-2000:] + bad.stderr[-2000:]
    assert f"--only '{BENCH}/Serverr'" in bad.stderr and f"did you mean '{BENCH}/Server'?" in bad.stderr
    assert f"valid values: {BENCH}, {BENCH}/Interactive, {BENCH}/Offline, {BENCH}/Server" in bad.stderr
    assert "run folder:" not in bad.stdout   # no flow run started


def test_only_measures_the_scenario_again_and_takes_the_rest_from_the_cache(reran: dict) -> None:
    done = reran["second"]
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert output.count("Cached(type=COMPLETED)") == 2, output[-4000:]   # the two Offline runs, and only those
    assert "engine launched 1 time(s)" in output and "2 run(s) not run (--only)" in output
    progress = [line.split("; last: ", 1)[1] for line in output.splitlines() if "; last: " in line]
    for mode in ("performance", "accuracy"):
        assert any(p.startswith(f"{BENCH}/Offline/{mode}: ") and p.endswith(" (cached)") for p in progress), progress
        assert any(p.startswith(f"{BENCH}/Server/{mode}: ") and "cached" not in p for p in progress), progress
        assert f"{BENCH}/Interactive/{mode}: {NOT_RUN}" in progress
    before, after = records(reran["first_folder"]), records(reran["folder"])
    assert reran["folder"] != reran["first_folder"] and sorted(after) == sorted(before)
    for name in ("Offline/performance", "Offline/accuracy"):   # the same runs, from the cache
        assert after[name] == before[name], name
    for name in ("Server/performance", "Server/accuracy"):     # measured again, in its key's folder
        assert after[name].key == before[name].key and after[name].started_at > before[name].ended_at, name
        (aside,) = Path(after[name].run_dir).parent.glob(f"{after[name].key}.replaced-*")   # the first one, kept
        assert (aside / "mlperf_log_detail.txt").is_file() and Path(after[name].run_dir).is_dir()
    assert after["Server/performance"].valid is True
    (results,) = (reran["folder"] / "submission").glob("open/*/results/cpu-smoke/*")   # the model's name in open
    assert sorted(p.name for p in results.iterdir()) == ["Offline", "Server"]   # the tree holds both scenarios
