"""The GPU acceptance script (deployments/gpu/acceptance.sh) without a GPU: its two plans as `podium launch --dry-run`
reviews them (the flags each engine gets, both Dynamo workers on GPU 0), its step limits against the 10-minute
budget, the shell itself (bash -n, shellcheck when installed) and the table it prints from a leg's results."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from submission import plan as plans

REPO = Path(__file__).parents[2]
GPU = REPO / "deployments" / "gpu"
SCRIPT = GPU / "acceptance.sh"
BUDGET_S = 600          # the issue: the whole script within 10 minutes
AFTER_DEADLINE_S = 30   # what may follow the last step: the table and packing the logs
RUNS_S = 40             # a leg's loadgen runs, assembly and publishing once its engine is ready (tiny model, GPU)
runner = CliRunner()


def _review(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.chdir(REPO)   # the plans name the smoke store and .venv-gpu relative to the repository root
    result = runner.invoke(app, ["launch", str(GPU / f"{name}.yaml"), "--dry-run", "--json",
                                 "--workspace", str(tmp_path / "ws")])
    assert result.exit_code == 0, result.output
    [review] = json.loads(result.output)
    return review


def _flag(argv: list[str], flag: str) -> str:
    assert argv.count(flag) == 1, f"{flag} given {argv.count(flag)} times in {argv}"
    return argv[argv.index(flag) + 1]


def test_vllm_leg_serves_the_fp32_model_on_gpu_0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    review = _review("vllm", tmp_path, monkeypatch)
    assert (review["engine"], review["launcher"]) == ("vllm", "local")
    [server] = review["processes"]
    argv = server["argv"]
    assert argv[:2] == ["vllm", "serve"]   # the production CLI, found on PATH in .venv-gpu/bin
    assert _flag(argv, "--dtype") == "float32"   # the references are the fp32 model's own greedy answers
    assert "--enforce-eager" in argv
    assert float(_flag(argv, "--gpu-memory-utilization")) <= 0.5
    assert _flag(argv, "--max-model-len") == "2048"
    assert (server["gpus"], server["gpu_ids"], server["env"]["CUDA_VISIBLE_DEVICES"]) == (1, [0], "0")
    assert review["endpoint"]["request_fields"] == {"return_token_ids": True}
    assert not review["capacity"]["problems"]
    plan = plans.load(GPU / "vllm.yaml")
    [bench] = plan.benchmarks
    assert set(bench.scenarios) == {"Offline", "Server", "Interactive"} and bench.accuracy
    assert bench.engine.options["version"] == "0.31.0"   # preflight refuses another installed vLLM


def test_dynamo_leg_puts_prefill_and_decode_on_one_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    review = _review("dynamo", tmp_path, monkeypatch)
    procs = {p["name"]: p for p in review["processes"]}
    assert set(procs) == {"prefill-0", "decode-0", "frontend"}   # file discovery: no etcd, no NATS
    workers = [procs["prefill-0"], procs["decode-0"]]
    utilization = 0.0
    for mode, worker in zip(("prefill", "decode"), workers, strict=True):
        argv = worker["argv"]
        assert argv[:3] == [".venv-gpu/bin/python", "-m", "dynamo.vllm"]
        assert _flag(argv, "--disaggregation-mode") == mode
        assert json.loads(_flag(argv, "--kv-transfer-config")) == {"kv_connector": "NixlConnector",
                                                                    "kv_role": "kv_both"}
        assert _flag(argv, "--discovery-backend") == "file"
        assert _flag(argv, "--dtype") == "float32" and "--enforce-eager" in argv
        assert int(_flag(argv, "--kv-cache-memory-bytes")) <= 4 * 1024**3   # fixed: no sizing from free memory
        utilization += float(_flag(argv, "--gpu-memory-utilization"))
        assert worker["env"]["CUDA_VISIBLE_DEVICES"] == "0"
        assert worker["env"]["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "127.0.0.1"
    # each worker refuses to start unless its share is free while the other holds its own
    assert utilization <= 0.5
    ports = [port for p in review["processes"] for port in (p["port"], *p["side_ports"].values())]
    assert len(ports) == len(set(ports))
    side = {w["env"]["VLLM_NIXL_SIDE_CHANNEL_PORT"] for w in workers}
    assert len(side) == 2
    front = procs["frontend"]
    assert _flag(front["argv"], "--discovery-backend") == "file"
    assert {"method": "GET", "path": "/health", "contains": '"component":"prefill"'} in front["probes"]
    assert review["endpoint"]["token_ids_in"] == "nvext"
    [bench] = plans.load(GPU / "dynamo.yaml").benchmarks
    assert list(bench.scenarios) == ["Offline"] and bench.accuracy


def _script() -> str:
    return SCRIPT.read_text()


def _limits() -> dict[str, int]:
    block = re.search(r"declare -A LIMIT=\((.*?)\)\n", _script(), re.S)
    assert block, "no `declare -A LIMIT=(...)` in the script"
    return {k: int(v) for k, v in re.findall(r"\[([a-z-]+)\]=(\d+)", block.group(1))}


def _constant(text: str, name: str) -> int:
    found = re.search(rf"^{name}=(\d+)\b", text, re.M)
    assert found, f"no {name}=<seconds> in the script"
    return int(found.group(1))


def test_step_limits_fit_ten_minutes() -> None:
    text, limits = _script(), _limits()
    deadline = int(re.search(r"DEADLINE_S=\$\{PODIUM_GPU_DEADLINE_S:-(\d+)\}", text).group(1))
    # what may follow a step's limit: KILL after the TERM, the group's grace, a leg's after_leg
    reserve = sum(_constant(text, name) for name in ("KILL_AFTER_S", "GRACE_S", "AFTER_S"))
    assert "STEP_RESERVE_S=$(( KILL_AFTER_S + GRACE_S + AFTER_S ))" in text
    assert 'left=$(( DEADLINE_S - ($(date +%s) - T0) - STEP_RESERVE_S ))' in text
    beside = re.search(r"BESIDE_ENGINES=\(([^)]*)\)", text).group(1).split()
    steps = re.findall(r"\b(?:step|skip|leg_step) \d+ ([a-z-]+)\b", text)
    assert set(steps) == set(limits)   # every step has a limit, and no limit is left over
    assert set(beside) < set(limits) and "install-engines" not in beside
    serial = [s for s in limits if s not in beside and s != "install-engines"]
    longest = sum(limits[s] for s in serial) + max(limits["install-engines"], sum(limits[s] for s in beside))
    assert longest + reserve <= deadline, f"the longest path of step limits is {longest} s (+{reserve} s after the " \
                                          f"last one), over the {deadline} s deadline"
    assert deadline + AFTER_DEADLINE_S <= BUDGET_S
    # each leg's engine must be ready with time left in the leg's own limit for its loadgen runs
    for leg in ("vllm", "dynamo"):
        [bench] = plans.load(GPU / f"{leg}.yaml").benchmarks
        assert bench.engine.ready_timeout_s + RUNS_S <= limits[leg]


def test_shell_parses_and_passes_shellcheck() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    if shutil.which("shellcheck"):
        done = subprocess.run(["shellcheck", "-x", str(SCRIPT)], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout


def _report(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(GPU / "report.py"), *args], capture_output=True, text=True,
                          check=False)


def test_table_shows_each_scenario_of_a_leg(tmp_path: Path) -> None:
    run, logs = tmp_path / "run", tmp_path / "results" / "logs"
    run.mkdir()
    logs.mkdir(parents=True)
    base = {"system": "gpu-vllm", "benchmark": "gpt-oss-120b", "key": "k", "run_dir": "d", "validity": None}
    run.joinpath("results.json").write_text(json.dumps([
        base | {"scenario": "Offline", "mode": "performance", "valid": True, "metric": 12345.6, "unit": "Tokens/s",
                "ttft_p99_ms": 3.0, "tpot_p99_ms": 1.25},
        base | {"scenario": "Offline", "mode": "accuracy", "valid": None, "accuracy_metric": "exact_match",
                "accuracy": 100.0, "accuracy_pass": True},
        base | {"scenario": "Server", "mode": "performance", "valid": False, "metric": 3000.0, "unit": "Tokens/s",
                "ttft_p99_ms": 9.0, "tpot_p99_ms": 22.5, "invalid_reasons": ["TPOT p99 over 15 ms"]}]))
    leg = _report("leg", str(run), str(logs / "vllm.rows.json"))
    assert leg.returncode == 0, leg.stderr
    assert leg.stdout.strip() == ("1 of 2 performance runs VALID, 1 of 1 accuracy runs PASS; "
                                  "Offline 12,345.6 Tokens/s")
    for order, (name, status) in enumerate((("gpu", "PASS"), ("vllm", "FAIL"))):
        assert _report("step", str(logs / "steps.jsonl"), str(order), name, status, "1.5", "15", "",
                       "last line").returncode == 0
    table = _report("table", str(tmp_path / "results"), "42")
    assert table.returncode == 1   # a failed step fails the script
    assert "| vllm/Offline | VALID | | | Offline VALID 12,345.6 Tokens/s, TTFT p99 3.0 ms, TPOT p99 1.25 ms; " \
           "exact_match 100.000 PASS |" in table.stdout
    assert "| vllm/Server | INVALID | | | Server INVALID 3,000.0 Tokens/s, TTFT p99 9.0 ms, TPOT p99 22.50 ms " \
           "(TPOT p99 over 15 ms) |" in table.stdout
    assert "result: FAIL (vllm) in 42 s" in table.stdout
    summary = json.loads((tmp_path / "results" / "summary.json").read_text())
    assert [s["step"] for s in summary["steps"]] == ["gpu", "vllm"] and summary["legs"]["vllm"][0]["valid"]


@pytest.mark.integration
def test_dry_run_reviews_both_plans(tmp_path: Path) -> None:
    """The script end to end with --dry-run: nothing installed or launched, the plans reviewed, a table printed."""
    if not (REPO / ".venv" / "bin" / "podium").exists():
        pytest.skip("needs the repository's .venv (make install)")
    done = subprocess.run(["bash", str(SCRIPT), "--dry-run"], capture_output=True, text=True, timeout=300,
                          check=False, cwd=REPO, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                                      "PODIUM_GPU_RESULTS": str(tmp_path / "out")})
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"\| plans \| PASS \|.*dynamo ai-dynamo 1\.6\.1: prefill-0 GPU 0, decode-0 GPU 0", done.stdout)
    assert re.search(r"\| vllm \| DRY \|.*podium run deployments/gpu/vllm\.yaml", done.stdout)
    assert (tmp_path / "out" / "table.md").is_file()
    assert json.loads((tmp_path / "out" / "logs" / "dryrun-dynamo.json").read_text())[0]["engine"] == "dynamo"
