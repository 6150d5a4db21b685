"""The accelerated clock's fall-back (tasks.clock, tasks.measuring.on_slower_clocks): which loadgen verdicts send a
rehearsal run to a slower client clock (real loadgen runs of the fake SUT; two of them edited), where the ladder
ends, and a run that really runs again on the slower clock: `run_once` and `audit_once` with the harness child
replaced by a fake that leaves the logs of the run recorded for the clock faketime would give it."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from submission.results.logs import DETAIL_FILE, load_run
from submission.results.runs import RunSpec
from tasks import clock
from tasks.compliance import step as audits
from tasks.engines import Endpoint
from tasks.harness import runner
from tasks.harness.measure import latency_alone, run_once
from tasks.measuring import RunRejected
from tests.loadgen_fake import run_fake
from tests.unit.test_compliance_audits import Engine as AuditEngine
from tests.unit.test_compliance_audits import _job

VALID_CONF = ["gpt-oss-120b.*.performance_sample_count_override = 16", "*.Server.target_qps = 2000",
              "*.Server.min_duration = 100", "*.Server.min_query_count = 480"]   # as tests/unit/test_checker.py


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real loadgen verdicts of the fake SUT, about a second each."""
    base = tmp_path_factory.mktemp("verdicts")
    return {
        # one token a second after the first, answered one at a time: TTFT and TPOT p99 over their limits
        "slow": run_fake(base / "slow", scenario="Server", token_gap_s=1.0, clock_speed=100),
        # 32 queries, none over a limit: early stopping fails for too few queries
        "few": run_fake(base / "few", scenario="Server"),
        "valid": run_fake(base / "valid", scenario="Server", user_conf_lines=VALID_CONF),
        "short": run_fake(base / "short", scenario="Offline"),   # done before its min duration
        "accuracy": run_fake(base / "accuracy", scenario="Server", mode="accuracy"),
    }


def edited(run: Path, folder: Path, key: str, value: str) -> Path:
    """A copy of `run` whose detail log says `value` for `key`."""
    shutil.copytree(run, folder)
    path = folder / DETAIL_FILE
    text, count = re.subn(rf'("key": "{key}", "value": )[^,]+', rf"\g<1>{value}", path.read_text())
    assert count == 1, key
    path.write_text(text)
    return folder


def test_only_a_run_invalid_for_its_latency_alone_falls_back(runs: dict[str, Path], tmp_path: Path) -> None:
    judged = {name: latency_alone(load_run(path), {}) for name, path in runs.items()}
    assert judged == {"slow": True, "few": False, "valid": False, "short": False, "accuracy": False}
    slow, few = load_run(runs["slow"]), load_run(runs["few"])
    assert slow.perf_constraints_met is False and slow.min_duration_met and slow.min_queries_met
    assert few.validity == "INVALID" and few.early_stopping_met is False and few.perf_constraints_met
    assert load_run(runs["short"]).min_duration_met is False
    assert not latency_alone(slow, {"failed": 1})   # failed requests: not latency alone
    late = edited(runs["slow"], tmp_path / "late", "result_min_duration_met", "false")
    assert not latency_alone(load_run(late), {})
    # early stopping alone, with one query over the TTFT limit (3 s): latency
    over = edited(runs["few"], tmp_path / "over", "result_first_token_max_latency_ns", "3500000000")
    assert latency_alone(load_run(over), {})


def test_the_ladder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(clock.ENV, raising=False)
    assert clock.ladder() == (None,)   # a real run is measured once
    for value, expected in (("real", (None,)), ("x10", (10, 5, 2)), ("x20", (20, 10, 5, 2)), ("x2", (2,)),
                            ("x1.5", (1.5,))):
        monkeypatch.setenv(clock.ENV, value)
        assert clock.ladder() == expected, value
    assert clock.wrap(["a"], 5.0)[-3:] == ["-f", "+0 x5", "a"] and clock.wrap(["a"])[-3:] == ["-f", "+0 x1.5", "a"]


class Engine:
    stall_s = None
    max_lost = None

    def endpoint(self, performance: bool = True) -> Endpoint:
        return Endpoint(base_url="http://127.0.0.1:9", model="m", accepts_token_ids=True, returns_token_ids=True)

    def alive(self) -> bool:
        return True

    def log_report(self, lines: int = 20) -> str:
        return ""

    def close(self) -> None:
        return None


@pytest.fixture
def child(monkeypatch: pytest.MonkeyPatch) -> dict:
    """Stands in for the harness child (its subprocess.Popen): notes the clock its argv runs it on (None: no
    faketime) and leaves the logs recorded for that clock in its working folder (`logs`, by clock)."""
    state: dict = {"clocks": [], "logs": {}}

    def popen(argv: list[str], cwd: Path, **_: object) -> SimpleNamespace:
        speed = float(argv[2].removeprefix("+0 x")) if argv[1:2] == ["-f"] else None
        state["clocks"].append(speed)
        shutil.copytree(state["logs"][speed], cwd, dirs_exist_ok=True)
        (Path(cwd) / runner.STATS).write_text(json.dumps({"failed": 0}))
        return SimpleNamespace(wait=lambda timeout=None: 0, poll=lambda: 0)

    monkeypatch.setattr(runner.subprocess, "Popen", popen)
    return state


def server_spec() -> RunSpec:
    return RunSpec(plan="p", profile="smoke", round="v6.1", system="s", benchmark="gpt-oss-120b", scenario="Server",
                   mode="performance", loadgen_model="gpt-oss-120b", loadgen_scenario="Server",
                   user_conf=(("*.Server.target_qps", "50"),), dataset="d", dataset_sha256="-", model_sha256="-",
                   engine="fake", max_tokens=8, temperature=0.0, max_concurrency=1)


def test_a_run_invalid_for_latency_runs_again_on_the_slower_clock(child: dict, runs: dict[str, Path],
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    monkeypatch.setenv(clock.ENV, "x10")
    child["logs"] = {10.0: runs["slow"], 5.0: runs["valid"]}
    spec = server_spec()
    rec = run_once(spec, Engine(), tmp_path, None, None)
    assert child["clocks"] == [10.0, 5.0]
    assert rec.valid and rec.clock == 5.0 and rec.run_dir == str(tmp_path / "runs" / spec.key())
    [aside] = (tmp_path / "runs").glob(f"{spec.key()}.clock-x10-*")   # the x10 attempt, kept beside it
    assert load_run(aside).perf_constraints_met is False


def test_the_ladder_ends_and_other_verdicts_stand(child: dict, runs: dict[str, Path],
                                                   monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(clock.ENV, "x10")
    child["logs"] = {10.0: runs["slow"], 5.0: runs["slow"], 2.0: runs["slow"]}
    with pytest.raises(RunRejected) as caught:
        run_once(server_spec(), Engine(), tmp_path / "end", None, None)
    assert child["clocks"] == [10.0, 5.0, 2.0] and caught.value.record.clock == 2.0   # x2 was the last
    assert len(list((tmp_path / "end" / "runs").glob("*.clock-x*"))) == 2
    child["clocks"], child["logs"] = [], {10.0: runs["few"]}
    with pytest.raises(RunRejected, match="early stopping"):   # too few queries: no slower clock helps
        run_once(server_spec(), Engine(), tmp_path / "few", None, None)
    assert child["clocks"] == [10.0]
    monkeypatch.delenv(clock.ENV)   # a real run: measured once, as ever
    child["clocks"], child["logs"] = [], {None: runs["slow"]}
    with pytest.raises(RunRejected) as caught:
        run_once(server_spec(), Engine(), tmp_path / "real", None, None)
    assert child["clocks"] == [None] and caught.value.record.clock is None


def test_an_audit_falls_back_where_its_run_is_judged(child: dict, runs: dict[str, Path],
                                                     monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """TEST04's performance run is judged like a performance run: it falls back. TEST09's is not (the official
    checker passed a rehearsal's INVALID Server TEST07 run): it stands on the rehearsal's clock."""
    monkeypatch.setenv(clock.ENV, "x10")
    child["logs"] = {10.0: runs["slow"], 5.0: runs["slow"], 2.0: runs["valid"]}
    job = _job()
    test04 = job.model_copy(update={"spec": job.spec.model_copy(update={"audit": "TEST04"}),
                                    "reference_performance": str(runs["valid"])})
    with contextlib.suppress(audits.AuditFailed):   # TEST04's verdict on these logs is beside the point here
        audits.audit_once(test04, AuditEngine(), tmp_path / "test04")
    assert child["clocks"] == [10.0, 5.0, 2.0]
    child["clocks"] = []
    record = audits.audit_once(job, AuditEngine(), tmp_path / "test09")
    assert child["clocks"] == [10.0] and record.clock == 10.0


def test_rehearsal_md_lists_the_runs_that_needed_a_slower_clock(tmp_path: Path) -> None:
    from flows.rehearsal_cli import report
    from submission.plan import model as plans
    from submission.results.runs import AuditRecord, RunRecord

    base = {"system": "rehearsal-gb200x4-k8s", "benchmark": "gpt-oss-120b", "run_dir": "/r"}
    records = [RunRecord(**base, key="a", scenario="Server", mode="performance", valid=True, validity="VALID",
                         clock=5.0),
               RunRecord(**base, key="b", scenario="Offline", mode="performance", valid=True, validity="VALID",
                         clock=10.0),
               RunRecord(**base, key="c", scenario="Offline", mode="accuracy", valid=None, validity=None)]
    audit = AuditRecord(**base, key="d", scenario="Server", test="TEST09", folder="/f", passed=True, checks=(),
                        clock=2.0)
    (tmp_path / "results.json").write_text(json.dumps([r.model_dump(mode="json") for r in records]))
    (tmp_path / "compliance.json").write_text(json.dumps([audit.model_dump(mode="json")]))
    plan = plans.load(Path(__file__).parents[2] / "deployments" / "plans" / "gpt-oss-120b-trtllm-k8s.yaml")
    text = report(plan, tmp_path, "x10", 60.0)
    section = text.split("## Runs that needed a slower clock\n")[1].split("\n## ")[0]
    assert "| rehearsal-gb200x4-k8s/gpt-oss-120b/Server/performance | x5 |" in section
    assert "| rehearsal-gb200x4-k8s/gpt-oss-120b/Server/TEST09 | x2 |" in section
    assert "Offline" not in section   # kept x10, or measured on no accelerated clock at all
    (tmp_path / "results.json").write_text(json.dumps([records[1].model_dump(mode="json")]))
    (tmp_path / "compliance.json").unlink()
    assert "None: every run kept the x10 clock." in report(plan, tmp_path, "x10", 60.0)
    assert "slower clock" not in report(plan, tmp_path, "real", 60.0)
