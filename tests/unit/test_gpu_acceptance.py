"""The GPU acceptance script (deployments/gpu/acceptance.sh) without a GPU: its two plans as `podium launch --dry-run`
reviews them (the flags each engine gets, both Dynamo workers on GPU 0), its step limits against the 10-minute
budget, the shell itself (bash -n, and shellcheck on every shell script under deployments/: `make system-deps`
installs it), the table it prints from a leg's results, and its dry run in each setting and on ROCm (its checks in
tests/unit/test_gpu_acceptance_rocm.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from submission.plan import model as plans
from tests.amd_gpus import fake_amd_smi

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


def test_the_vllm_legs_dry_run_places_the_fp32_model_on_gpu_0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
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


def test_the_dynamo_legs_dry_run_places_prefill_and_decode_on_one_gpu(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
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


def _array(text: str, name: str) -> list[str]:
    found = re.search(rf"^{name}=\(([^)]*)\)", text, re.M)
    assert found, f"no {name}=(...) in the script"
    return found.group(1).split()


def test_step_limits_fit_ten_minutes() -> None:
    text, limits = _script(), _limits()
    deadline = int(re.search(r"DEADLINE_S=\$\{PODIUM_GPU_DEADLINE_S:-(\d+)\}", text).group(1))
    # what may follow a step's limit: KILL after the TERM, the group's grace, a leg's after_leg
    reserve = sum(_constant(text, name) for name in ("KILL_AFTER_S", "GRACE_S", "AFTER_S"))
    assert "STEP_RESERVE_S=$(( KILL_AFTER_S + GRACE_S + AFTER_S ))" in text
    assert 'left=$(( DEADLINE_S - ($(date +%s) - T0) - STEP_RESERVE_S ))' in text
    steps = re.findall(r"\b(?:step|skip|leg_step|not_run) \d+ ([a-z-]+)\b", text)
    assert set(steps) == set(limits)   # every step has a limit, and no limit is left over
    beside_engines, beside_assets = _array(text, "BESIDE_ENGINES"), _array(text, "BESIDE_ASSETS")
    assert beside_engines == ["install-podium", "plans"] and beside_assets == ["argv"]
    registry = (limits["gpu"] + limits["uv"] + max(limits["install-engines"], sum(limits[s] for s in beside_engines))
                + max(limits["assets"], sum(limits[s] for s in beside_assets)) + limits["vllm"] + limits["dynamo"])
    carried = sum(limits[s] for s in ("gpu", "wheels", "assets", "review", "smoke"))
    rocm = sum(limits[s] for s in ("gpu", "devices", "plugin", "engine", "wheels", "assets", "review", "smoke"))
    for setting, longest in (("registry", registry), ("carried", carried), ("rocm", rocm)):
        assert longest + reserve <= deadline, f"{setting}: the longest path of step limits is {longest} s " \
                                              f"(+{reserve} s after the last one), over the {deadline} s deadline"
    assert deadline + AFTER_DEADLINE_S <= BUDGET_S
    # each leg's engine must be ready with time left in the leg's own limit for its loadgen runs
    for leg in ("vllm", "dynamo", "smoke"):
        [bench] = plans.load(GPU / f"{leg}.yaml").benchmarks
        assert bench.engine.ready_timeout_s + RUNS_S <= limits[leg]


def test_a_rerun_after_a_partial_install_keeps_the_virtualenvs() -> None:
    """`uv venv` on an existing virtualenv exits 2 ("use --clear"); every one the script makes allows it."""
    made = re.findall(r'"\$UV" venv ([^\n]*)', _script())
    assert len(made) == 2 and all("--allow-existing" in line for line in made), made


def test_the_engines_and_podium_share_one_torch() -> None:
    """Podium goes in without torch beside the engines, then links theirs: both must pin the same one; the carried
    leg's wheels are the versions the CPU tests run."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = dict(re.match(r"([A-Za-z0-9_.\[\]-]+)==(\S+)", d).groups() for d in
                project["dependencies"] + project["optional-dependencies"]["smoke"] if "==" in d)
    lock = dict(re.findall(r"^([a-z0-9_.-]+)==(\S+)$", (GPU / "engines.lock.txt").read_text(), re.M))
    assert pins["torch"] == lock["torch"]
    assert "torch" in (GPU / "podium-excludes.txt").read_text().split()
    carry = dict(re.findall(r"^([a-z0-9_.-]+)==(\S+)$", (GPU / "carry.txt").read_text(), re.M))
    assert carry["transformers"] == pins["transformers[serving]"]
    assert carry["mlcommons-loadgen"] == pins["mlcommons-loadgen"]


def _shellcheck(*scripts: Path) -> subprocess.CompletedProcess:
    binary = shutil.which("shellcheck")
    assert binary, "shellcheck is not installed; run `make system-deps` (deployments/ci/system-deps.sh), which " \
                   "apt-installs it"
    return subprocess.run([binary, "-x", *map(str, scripts)], capture_output=True, text=True, check=False,
                          cwd=REPO)


def test_the_shell_scripts_parse_and_pass_shellcheck(tmp_path: Path) -> None:
    """The acceptance script and every other shell script under deployments/ parse and pass shellcheck, which must
    be installed; and shellcheck finds what it is there for (an unquoted variable in a planted script)."""
    scripts = sorted({*(REPO / "deployments").rglob("*.sh"), *(REPO / "deployments").rglob("*.sbatch")})
    assert SCRIPT in scripts and len(scripts) >= 4, scripts
    for script in scripts:
        subprocess.run(["bash", "-n", str(script)], check=True)
    done = _shellcheck(*scripts)
    assert done.returncode == 0, done.stdout
    planted = tmp_path / "planted.sh"
    planted.write_text('#!/usr/bin/env bash\nset -euo pipefail\nrm -rf $1/cache\n')
    flagged = _shellcheck(planted)
    assert flagged.returncode != 0 and "SC2086" in flagged.stdout, flagged.stdout


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


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.integration
def test_dry_run_rehearses_a_leg_killed_mid_run(tmp_path: Path) -> None:
    """The script end to end with --dry-run in each setting, and on ROCm: nothing installed and no GPU, the plans
    reviewed, a table printed, and a leg (the simulated engine, under `podium run` or the carried leg's driver) KILLed
    mid-run (a few seconds after its engine is on record, however long a busy machine took to start it), after which
    the clean-up ends what it left, and the row says so. One setting after the other in one test: each builds the
    smoke assets into the repository's .podium, which two test workers must not do at once."""
    if not (REPO / ".venv" / "bin" / "podium").exists():
        pytest.skip("needs the repository's .venv (make install)")
    for setting in ("registry", "carried", "rocm"):
        _dry_run(setting, tmp_path / setting)


def _dry_run(setting: str, tmp_path: Path) -> None:
    tmp_path.mkdir()
    out = tmp_path / "out"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PODIUM_GPU_RESULTS": str(out),
           "PODIUM_GPU_SETTING": setting}
    if setting in ("carried", "rocm"):   # the node's own Python holds torch and the rest; the project's stands in
        env["PODIUM_GPU_PYTHON"] = str(REPO / ".venv" / "bin" / "python")
        env["PODIUM_GPU_WHEELS"] = str(tmp_path / "wheels")   # none: the dry run says what it would install
    if setting == "rocm":   # an MI355X node on Kubernetes, as its amd-smi and kubectl answer (chosen by amd-smi)
        tools = tmp_path / "bin"
        fake_amd_smi(tools)
        _kubectl(tools)
        env |= {"PATH": f"{tools}:/usr/bin:/bin", "PODIUM_GPU_K8S_NODE": "mi355x-0"}
        del env["PODIUM_GPU_SETTING"]
    done = subprocess.run(["bash", str(SCRIPT), "--dry-run"], capture_output=True, text=True, timeout=300,
                          check=False, cwd=REPO, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    header = (f"setting: {setting} (PODIUM_GPU_SETTING={setting}), cuda platform" if setting != "rocm" else
              "setting: carried (rocm: the engine is the ROCm image's), rocm platform")
    assert (out / "table.md").is_file() and header in done.stdout
    rows = {s["step"]: s for s in json.loads((out / "summary.json").read_text())["steps"]}
    rehearsal = rows["rehearsal"]
    assert rehearsal["status"] == "PASS" and rehearsal["note"].startswith("killed mid-run"), rehearsal
    assert (out / "logs" / "rehearsal.killed").is_file()   # by the mid-run watcher, not by its limit
    assert "killed mid-run; the clean-up ended 1 engine process group(s)" in rehearsal["figure"]
    after = (out / "logs" / "rehearsal.after.log").read_text()
    left = [int(pid) for pid in re.findall(r"ending simulated-server \(pid (\d+)\)", after)]
    if setting == "registry":
        assert re.search(r"\| plans \| PASS \|.*dynamo ai-dynamo 1\.6\.1: prefill-0 GPU 0, decode-0 GPU 0", done.stdout)
        assert re.search(r"\| vllm \| DRY \|.*podium run deployments/gpu/vllm\.yaml", done.stdout)
        assert json.loads((out / "logs" / "dryrun-dynamo.json").read_text())[0]["engine"] == "dynamo"
        assert "and stopped the S3 server" in rehearsal["figure"]
        left += [int(pid) for pid in re.findall(r"stopped the S3 server \(pid (\d+)\)", after)]
    elif setting == "carried":
        assert rows["review"]["status"] == "PASS" and "smoke-server GPU 0" in rows["review"]["figure"]
        assert rows["wheels"]["status"] == "DRY" and rows["smoke"]["status"] == "DRY"
        for leg in ("vllm", "dynamo"):
            assert rows[leg]["status"] == "NOT RUN" and "far over what a carry holds" in rows[leg]["note"]
        assert "not run in this setting: vllm, dynamo" in done.stdout
    if setting == "rocm":   # the node's checks listed: run where this host can, else what they would check
        assert rows["gpu"]["status"] == "PASS" and rows["gpu"]["figure"] == (
            "8 x AMD Instinct MI355X 288GB HBM3e (288 GB), ROCm 7.2.0, amdgpu driver 6.16.6")
        assert rows["plugin"]["status"] == "PASS" and rows["plugin"]["figure"] == \
            "node mi355x-0: 8 amd.com/gpu allocatable"
        for check, here in (("devices", "here: /dev/kfd is missing"), ("engine", "is not a ROCm build")):
            assert rows[check]["status"] == "DRY" and rows[check]["figure"].startswith("would check: ") and \
                here in rows[check]["figure"], rows[check]
        assert [s for s in rows if s not in ("rehearsal",)] == ["gpu", "devices", "plugin", "engine", "wheels",
                                                                "assets", "review", "smoke", "vllm", "dynamo"]
        assert rows["smoke"]["status"] == "DRY" and "smoke-server GPU 0" in rows["review"]["figure"]
        for leg in ("vllm", "dynamo"):
            assert rows[leg]["status"] == "NOT RUN" and "install CUDA builds" in rows[leg]["note"]
    assert left and not [pid for pid in left if _alive(pid)], after
    run = Path((out / "logs" / "rehearsal.run").read_text().split(": ", 1)[1].strip())
    shutil.rmtree(run.parents[1])   # the rehearsal's workspace, .podium/gpu-acceptance/ws-<time>


def _kubectl(folder: Path) -> None:
    """A kubectl that answers `get node mi355x-0 -o json` with a node whose device plugin offers 8 amd.com/gpu."""
    node = {"kind": "Node", "metadata": {"name": "mi355x-0"},
            "status": {"capacity": {"amd.com/gpu": "8"}, "allocatable": {"amd.com/gpu": "8"}}}
    script = folder / "kubectl"
    script.write_text('#!/bin/sh\n[ "$*" = "get node mi355x-0 -o json" ] || exit 3\n'
                      f"echo '{json.dumps(node)}'\n")
    script.chmod(0o755)


def test_legs_a_setting_cannot_run_are_named_not_failed(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for order, (name, status) in enumerate((("gpu", "PASS"), ("smoke", "PASS"), ("vllm", "NOT RUN"),
                                            ("dynamo", "NOT RUN"))):
        assert _report("step", str(logs / "steps.jsonl"), str(order), name, status, "1", "15", "",
                       "carried setting (no index): vLLM is about 9 GB").returncode == 0
    table = _report("table", str(tmp_path), "42", "carried (no index)")
    assert table.returncode == 0, table.stdout
    assert table.stdout.startswith("setting: carried (no index)\n")
    assert "| vllm | NOT RUN | 1 | 15 | carried setting (no index): vLLM is about 9 GB |" in table.stdout
    assert "result: PASS; not run in this setting: vllm, dynamo in 42 s" in table.stdout


def test_the_carried_leg_checks_its_wheels_where_it_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`carry_check.py` on the node: a carried wheel missing or at another version, or a requirement of one that
    the node does not meet, named with the fix."""
    sys.path.insert(0, str(GPU))
    try:
        import carry_check
    finally:
        sys.path.remove(str(GPU))
    assert carry_check.check() == []   # the project's own environment holds every pin of carry.txt
    carry = tmp_path / "carry.txt"
    carry.write_text("# pins\norjson==0.0.1\nno-such-distribution==1.0\npydantic==2.14.4\n")
    monkeypatch.setattr(carry_check, "CARRY", carry)
    from importlib import metadata

    monkeypatch.setattr(metadata, "requires", lambda name: ["pydantic-core==0.0.1", "colorama; extra == 'cli'"]
                        if name == "pydantic" else [])
    problems = carry_check.check()
    assert problems[0].startswith("orjson is ") and problems[0].endswith(", carry.txt pins 0.0.1")
    assert problems[1:] == ["no-such-distribution==1.0 (carry.txt) is not installed",
                            "pydantic needs pydantic-core==0.0.1, found pydantic-core 2.50.5: pin a fitting one in "
                            "carry.txt"]


TRACE = """import atexit, os, sys
def _dump():
    with open(os.path.join(os.environ["PODIUM_TRACE"], f"{os.getpid()}.txt"), "w") as f:
        f.write(" ".join(sys.argv) + "\\n" + " ".join(sorted({m.split(".")[0] for m in list(sys.modules)})))
atexit.register(_dump)
"""


# imported only when installed (each import guarded by its importer), so a node without them runs the same: httpx's
# HTTP/2 support (httpcore), pyarrow's and pandas' pickling helper
OPTIONAL = {"h2", "hpack", "hyperframe", "cloudpickle"}


def _pins(path: Path) -> set[str]:
    return {re.split(r"[=<>;\s]", line, maxsplit=1)[0].lower() for line in path.read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")}


@pytest.mark.integration
def test_the_carried_leg_measures_with_the_image_and_the_carry_alone(tmp_path: Path) -> None:
    """deployments/gpu/smoke_leg.py end to end on the simulated engine (an Offline run through the harness and the
    real loadgen), every Python process it starts traced: what they import comes from the node's image
    (node-image.txt), the carried wheels (carry.txt) or Podium, and never from Prefect, boto3 or the rest of what does
    not fit a carry."""
    from importlib import metadata

    trace, site = tmp_path / "trace", tmp_path / "site"
    trace.mkdir()
    site.mkdir()
    (site / "sitecustomize.py").write_text(TRACE)
    plan = yaml.safe_load((GPU / "rehearsal.yaml").read_text())
    [bench] = plan["benchmarks"]
    bench["loadgen"]["min_duration_ms"] = 1000
    bench["scenarios"] = {"Offline": {"target_qps": 100}}
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
    if not (REPO / ".podium" / "store" / "datasets" / "smoke").is_dir():
        pytest.skip("needs the smoke assets (make smoke-assets)")
    done = subprocess.run([sys.executable, str(GPU / "smoke_leg.py"), "run", str(tmp_path / "plan.yaml"),
                           "--workspace", str(tmp_path / "ws")], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False, env={**os.environ, "PYTHONPATH": str(site),
                                                         "PODIUM_TRACE": str(trace)})
    assert done.returncode == 0, done.stdout + done.stderr
    [record] = json.loads(next((tmp_path / "ws" / "runs").glob("smoke-leg-*/results.json")).read_text())
    assert (record["scenario"], record["valid"]) == ("Offline", True)
    traced = {p.read_text().split("\n")[0]: set(p.read_text().split("\n")[1].split()) for p in trace.glob("*.txt")}
    assert any("smoke_leg.py" in argv for argv in traced) and any("harness/runner.py" in argv for argv in traced)
    allowed = _pins(GPU / "node-image.txt") | _pins(GPU / "carry.txt") | {"podium"} | OPTIONAL
    owners = metadata.packages_distributions()
    for argv, modules in traced.items():
        if "simulated/server.py" in argv:   # the rehearsal's engine, not the GPU leg's
            continue
        dists = {m: {d.lower().replace("_", "-") for d in owners[m]} for m in modules if m in owners}
        outside = {m: d for m, d in dists.items() if not d & allowed}
        assert not outside, f"{argv}: imports from neither the node's image nor the carry: {outside}"
