"""The audit step around its loadgen run: audit.config present only while the run runs (also when it crashes),
a failed verdict retried once and reported with what failed, the official run_verification.py run at the process
boundary (the round's own TEST09 script, from the `inference_src` fixture, agreeing; a small fake script that
disagrees or crashes on demand; real disagreements are in tests/unit/test_compliance_verify.py), and the TESTxx
folders carried into the tree and the report."""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
from pathlib import Path

import pytest

import tasks.accuracy
from submission.base.errors import CommandError
from submission.checks.checker import check_tree
from submission.plan import model as plans
from submission.results.runs import AuditRecord, RunRecord, RunSpec
from submission.rules import load_rules
from submission.tree.assemble import assemble
from submission.tree.systems import describe
from tasks.compliance import AuditJob, audit
from tasks.compliance import step as audits
from tasks.compliance.score import main as score_main
from tasks.engines import Endpoint
from tasks.reporting import artifacts as reporting
from tasks.serving import telemetry
from tests.loadgen_fake import default_user_conf, run_fake

RULES = load_rules("v6.1")
TOTAL, TOKENS = 16, 8
SMOKE = Path(__file__).parents[2] / "deployments" / "plans" / "smoke.yaml"
FAKE_VERIFY = """
import json, os, sys
from pathlib import Path
args = sys.argv[1:]
Path("called.json").write_text(json.dumps({"argv": sys.argv, "cwd": os.getcwd()}))
verdict = Path(__file__).with_name("verdict").read_text().strip()
if verdict == "crash":
    sys.exit("Traceback: something broke")
out = Path(args[args.index("-o") + 1]) / Path(__file__).parent.name
out.mkdir(parents=True, exist_ok=True)
(out / "verify_output_len.txt").write_text("Mean output tokens: 8.00\\n" + verdict + "\\n")
sys.exit(0 if verdict == "TEST PASS" else 1)
"""


class Engine:
    stall_s = None
    max_lost = None

    def stopped_if_hung(self) -> contextlib.nullcontext:
        return contextlib.nullcontext()

    def endpoint(self, performance: bool = True) -> Endpoint:
        return Endpoint(base_url="http://127.0.0.1:9", model="m", accepts_token_ids=True, returns_token_ids=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("runs")
    lines = audit("TEST09").config_lines(RULES, "gpt-oss-120b", {"test09_min_output_tokens": 7.2,
                                                                 "test09_max_output_tokens": 8.8})
    return {"TEST09": run_fake(base / "t09", total_count=TOTAL, tokens_per_sample=TOKENS, audit_config_lines=lines),
            "plain": run_fake(base / "plain", total_count=TOTAL, tokens_per_sample=TOKENS),
            "valid": run_fake(base / "valid", total_count=TOTAL, tokens_per_sample=TOKENS, latency_s=0.7),
            "accuracy": run_fake(base / "acc", total_count=TOTAL, tokens_per_sample=TOKENS, mode="accuracy")}


def _job(bounds: tuple[float, float] = (7.2, 8.8), **fields: object) -> AuditJob:
    lines = audit("TEST09").config_lines(RULES, "gpt-oss-120b", {"test09_min_output_tokens": bounds[0],
                                                                 "test09_max_output_tokens": bounds[1]})
    spec = RunSpec(plan="smoke", profile="smoke", round="v6.1", system="cpu-smoke", benchmark="gpt-oss-120b",
                   scenario="Offline", mode="performance", loadgen_model="gpt-oss-120b", loadgen_scenario="Offline",
                   user_conf=tuple(tuple(x.split(" = ")) for x in default_user_conf("gpt-oss-120b", TOTAL)),
                   dataset="d", dataset_sha256="-", model_sha256="-", engine="fake", max_tokens=TOKENS,
                   temperature=0.0, max_concurrency=1, audit="TEST09", audit_config=lines)
    return AuditJob(spec=spec, **fields)


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, runs: dict[str, Path]) -> dict:
    """Stands in for the harness child: records the audit.config it finds, then leaves a real run's logs."""
    state: dict = {"seen": [], "source": runs["TEST09"], "crash": False}

    def run(spec: RunSpec, endpoint: Endpoint, run_dir: Path, timeout_s: float | None = None,
            stall_s: float | None = None, speed: float | None = None, max_lost: int | None = None) -> dict:
        config = run_dir / "audit.config"
        state["seen"].append(config.read_text() if config.is_file() else None)
        if state["crash"]:
            raise CommandError(["python", "-m", "tasks.harness.runner"], -11, "Segmentation fault")
        shutil.copytree(state["source"], run_dir, dirs_exist_ok=True)
        return {"failed": 0}

    monkeypatch.setattr(audits.runner, "run", run)
    return state


def test_audit_config_exists_only_while_the_run_runs(runner: dict, tmp_path: Path) -> None:
    job = _job()
    record = audits.run_audit(job, Engine(), tmp_path)
    assert runner["seen"] == ["\n".join(job.spec.audit_config) + "\n"]
    assert record.passed and record.attempts == 1 and record.official == "not configured"
    assert not (Path(record.run_dir) / "audit.config").exists()
    assert Path(record.run_dir) == tmp_path / "runs" / job.spec.key()
    assert (Path(record.folder) / "verify_output_len.txt").read_text().count("TEST PASS") == 1
    header, *rest = telemetry.load(Path(record.run_dir) / telemetry.FILE)   # sampled like any run: nothing answers
    assert header["kind"] == "header" and rest and {x["kind"] for x in rest} <= {"missed", "unavailable", "phase"}, rest


def test_audit_config_is_removed_when_the_run_crashes(runner: dict, tmp_path: Path) -> None:
    runner["crash"] = True
    with pytest.raises(CommandError, match="-11"):
        audits.run_audit(_job(), Engine(), tmp_path)
    assert runner["seen"][0] is not None
    assert not list(tmp_path.rglob("audit.config"))


def test_a_failed_audit_is_retried_once_then_reported(runner: dict, tmp_path: Path) -> None:
    job = _job(bounds=(1150.38, 1406.02))
    with pytest.raises(audits.AuditFailed) as caught:
        audits.run_audit(job, Engine(), tmp_path)
    record = caught.value.record
    assert len(runner["seen"]) == 2 and record.attempts == 2 and not record.passed
    assert str(caught.value).startswith("cpu-smoke/gpt-oss-120b/Offline/TEST09: FAIL: mean output tokens 8 in "
                                        "[1150.38, 1406.02]: FAIL")
    assert (tmp_path / "runs" / f"{job.spec.key()}.attempt-1" / "compliance" / "TEST09").is_dir()
    assert caught.value.exit_code == 6   # a RunFailed: Prefect does not retry it a third time


def test_a_run_that_ignored_its_audit_config_fails(runner: dict, runs: dict[str, Path], tmp_path: Path) -> None:
    runner["source"] = runs["plain"]   # loadgen logged no "Found Audit Config file" warning
    record = audits.audit_once(_job(), Engine(), tmp_path)
    assert not record.passed and "loadgen read audit.config" in [c.name for c in record.failed_checks]
    assert "samples logged" in [c.name for c in record.failed_checks]   # no audit: no accuracy log entries either


def _checkout(tmp_path: Path, verdict: str) -> Path:
    script = tmp_path / "inference" / "compliance" / "TEST09" / "run_verification.py"
    script.parent.mkdir(parents=True)
    script.write_text(FAKE_VERIFY)
    (script.parent / "verdict").write_text(verdict)
    return tmp_path / "inference"


@pytest.mark.parametrize(("official", "disagreement"), [("TEST PASS", None), ("TEST FAIL", "says FAIL, Podium")])
def test_official_verification_runs_and_disagreements_are_reported(runner: dict, tmp_path: Path, official: str,
                                                                   disagreement: str | None) -> None:
    checkout = _checkout(tmp_path, official)
    record = audits.audit_once(_job(inference_src=str(checkout)), Engine(), tmp_path / "work")
    work = Path(record.run_dir) / "official"
    called = json.loads((work / "called.json").read_text())
    assert called["cwd"] == str(work)
    assert called["argv"] == [str(checkout / "compliance" / "TEST09" / "run_verification.py"), "-c", record.run_dir,
                              "-o", str(work / "output"), "--audit-config", str(work / "audit.config")]
    assert (work / "audit.config").read_text().splitlines() == list(_job().spec.audit_config)
    assert record.passed and record.official == official.split()[1]
    if disagreement is None:
        assert record.disagreement is None
    else:
        assert disagreement in record.disagreement and str(work / "official.log") in record.disagreement
    assert "exit code" in (work / "official.log").read_text()


def test_official_verification_that_cannot_run(runner: dict, tmp_path: Path) -> None:
    record = audits.audit_once(_job(inference_src=str(tmp_path / "nowhere")), Engine(), tmp_path / "a")
    assert record.official.startswith("not run: ") and "does not exist" in record.official
    assert record.passed and record.disagreement is None
    checkout = _checkout(tmp_path, "crash")
    record = audits.audit_once(_job(inference_src=str(checkout)), Engine(), tmp_path / "b")
    assert record.official.startswith("not run: run_verification.py exited 1 and left no verdict")


@pytest.mark.parametrize("bounds", [(7.2, 8.8), (1150.38, 1406.02)], ids=["pass", "fail"])
def test_the_official_script_through_the_audit_step(runner: dict, inference_src: Path, tmp_path: Path,
                                                    bounds: tuple[float, float]) -> None:
    """The round's own compliance/TEST09/run_verification.py, run by the audit step on the audit's run: its verdict
    recorded beside Podium's (8 tokens: PASS in [7.2, 8.8], FAIL in gpt-oss-120b's bounds), with no disagreement."""
    record = audits.audit_once(_job(bounds, inference_src=str(inference_src)), Engine(), tmp_path)
    assert record.passed == (bounds[0] < 8) and record.official == ("PASS" if record.passed else "FAIL")
    assert record.disagreement is None
    log = (Path(record.run_dir) / "official" / "official.log").read_text()
    assert str(inference_src / "compliance" / "TEST09" / "run_verification.py") in log.splitlines()[0]
    assert f"exit code: {0 if record.passed else 1}\n" in log and "Mean output tokens: 8.00" in log


def test_official_argv_of_every_test(runs: dict[str, Path], tmp_path: Path) -> None:
    run, out, script = runs["TEST09"], tmp_path / "out", tmp_path / "run_verification.py"
    job = _job(eos_token_ids=(128001, 128009), evaluator="smoke-exact-match", metric="exact_match",
               tokenizer="tok.json", reference_performance=str(runs["plain"]), reference_accuracy=str(runs["accuracy"]))
    server = job.model_copy(update={"spec": job.spec.model_copy(update={"loadgen_scenario": "Server"})})
    py = sys.executable
    assert audit("TEST06").official_argv(script, run, out, server, tmp_path) == [
        py, str(script), "-c", str(run), "-o", str(out), "-s", "Server", "--eos_token_id", "128001", "--dtype",
        "int32"]
    test07 = audit("TEST07").official_argv(script, run, out, job, tmp_path)
    assert test07[:8] == [py, str(script), "-c", str(run), "-o", str(out), "--audit-config",
                          str(tmp_path / "audit.config")]
    assert test07[8] == "--accuracy-script" and "'{accuracy_log}'" in test07[9]
    assert test07[9].startswith(f"{py} -m tasks.compliance.score --evaluator smoke-exact-match")
    assert test07[10:] == ["--score-pattern", r"'exact_match':\s*([\d.]+)"]
    test04 = audit("TEST04").official_argv(script, run, out, job, tmp_path / "t04")
    assert test04 == [py, str(script), "-r", str(tmp_path / "t04" / "results"), "-c", str(run), "-o", str(out)]
    assert (tmp_path / "t04" / "results" / "performance" / "run_1").resolve() == runs["plain"].resolve()
    test01 = audit("TEST01").official_argv(script, run, out, job, tmp_path / "t01")
    assert test01[-2:] == ["--dtype", "int32"]
    assert (tmp_path / "t01" / "results" / "accuracy" / "mlperf_log_accuracy.json").is_file()


class ExactEvaluator:
    """Every answer counts as right: enough to see the scoring command print what the official script parses."""

    name = "all-right"

    def evaluate(self, accuracy_log: Path, dataset: Path, tokenizer: Path | None) -> tasks.accuracy.AccuracyResult:
        return tasks.accuracy.AccuracyResult({"exact_match": 100.0}, 1)

    def accuracy_txt(self, result: tasks.accuracy.AccuracyResult) -> str:
        return f"{{'exact_match': {result.metrics['exact_match']:.3f}}}\n"


EVALUATOR = ExactEvaluator()


def test_the_scoring_command_prints_the_metric(monkeypatch: pytest.MonkeyPatch, runs: dict[str, Path],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(tasks.accuracy.EVALUATORS, "all-right", __name__)
    assert score_main(["--evaluator", "all-right", "--dataset", "d", "--log",
                       str(runs["TEST09"] / "mlperf_log_accuracy.json")]) == 0
    assert capsys.readouterr().out == "{'exact_match': 100.000}\n"
    assert score_main(["--evaluator", "nope", "--dataset", "d", "--log", "x"]) == 2


def test_testxx_folders_go_into_the_tree_and_the_report(runner: dict, runs: dict[str, Path], tmp_path: Path) -> None:
    record = audits.run_audit(_job(), Engine(), tmp_path / "work")
    acc = tmp_path / "acc"
    shutil.copytree(runs["accuracy"], acc)
    (acc / "accuracy.txt").write_text("{'exact_match': 100.000}\n")
    records = [RunRecord(key="p", system="cpu-smoke", benchmark="gpt-oss-120b", scenario="Offline",
                         mode="performance", run_dir=str(runs["valid"]), valid=True, validity="VALID"),
               RunRecord(key="a", system="cpu-smoke", benchmark="gpt-oss-120b", scenario="Offline", mode="accuracy",
                         run_dir=str(acc), valid=None, validity=None)]
    system = describe(division="open", submitter="Podium", system_name="cpu-smoke", status="available",
                      system_type="datacenter", number_of_nodes=1, framework="test", overrides={})
    root = tmp_path / "tree"
    assemble(plans.load(SMOKE), records, {"cpu-smoke": system}, root, tmp_path / "backup", commit="t",
             audits=[record])
    folder = root / "open" / "Podium" / "results" / "cpu-smoke" / "tiny-llama" / "Offline" / "TEST09"
    assert "TEST PASS" in (folder / "verify_output_len.txt").read_text()
    assert (folder / "accuracy" / "accuracy.txt").read_text().startswith("hash=")   # truncation handled TEST09
    assert (tmp_path / "backup" / folder.relative_to(root) / "accuracy" / "mlperf_log_accuracy.json").is_file()
    assert check_tree(root, "v6.1").ok
    failed = record.model_copy(update={"passed": False, "scenario": "Offline", "test": "TEST07", "attempts": 2,
                                       "checks": (record.checks[0].model_copy(update={"passed": False}),)})
    rows = reporting.table(records, [record, failed])
    assert rows[0]["compliance"] == "TEST09 PASS, TEST07 FAIL"
    text = reporting.markdown("smoke", "smoke", rows, None, {}, [], [record, failed])
    row = "| cpu-smoke | gpt-oss-120b | Offline | TEST09 | PASS | mean output tokens 8.00 | in [7.2, 8.8] | 1 |"
    assert row in text
    assert "| cpu-smoke | gpt-oss-120b | Offline | TEST07 | FAIL | samples logged 16.00 | \\> 0 | 2 |" in text
    reporting.write_run_files(tmp_path, records, text, [record])
    assert AuditRecord.model_validate(json.loads((tmp_path / "compliance.json").read_text())[0]) == record
