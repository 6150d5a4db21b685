"""The audits against the real CPU engine and the real loadgen: TEST06 passes for real on llama3.1-8b (the tiny
model), and each verifier fails, for the right reason, when a fault proxy in front of the engine makes the SUT
cheat: padded outputs (TEST09), early EOS and a wrong first token (TEST06), wrong answers (TEST07), cached
answers (TEST04). TEST07 and TEST09 passing for real is shown by the smoke flow (tests/integration/test_smoke_flow.py).
Each TEST06, TEST07 and TEST09 audit also runs the round's run_verification.py (the `inference_src` fixture), whose
verdict and lines are compared with Podium's."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from submission.base.files import sha256_file
from submission.plan import model as plans
from submission.results.logs import load_run, parse_accuracy_log
from submission.results.runs import AuditRecord, RunRecord, plan_runs
from submission.rules import load_rules
from tasks.compliance import AuditJob
from tasks.compliance.planning import audit_jobs
from tasks.compliance.step import AuditFailed, run_audit
from tasks.datasets.prompts import read_token_prompts
from tasks.engines import Endpoint, backend
from tasks.harness.measure import run_once
from tasks.launchers import launched, launcher
from tasks.measuring import RunRejected
from tests.fault_proxy import FaultProxy
from tests.integration.conftest import write_plan

pytestmark = pytest.mark.integration
LOG = logging.getLogger("test-compliance")


class Fixed:
    """What an audit asks of an engine session: its endpoint (here the engine's, or a fault proxy's)."""

    def __init__(self, endpoint: Endpoint, base_url: str | None = None) -> None:
        self._endpoint = dataclasses.replace(endpoint, base_url=base_url or endpoint.base_url)

    stall_s = None
    max_lost = None

    def endpoint(self, performance: bool = True) -> Endpoint:
        return self._endpoint

    def stopped_if_hung(self) -> contextlib.nullcontext:
        return contextlib.nullcontext()


@pytest.fixture(scope="module")
def engine(smoke_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    base = tmp_path_factory.mktemp("engine")
    where = launcher("local", state_dir=base / "pids")
    with launched(backend("smoke"), {}, smoke_store / "models" / "tiny-llama", where, base / "logs", LOG) as ep:
        yield ep


def _cnn_eval(store: Path, tmp: Path) -> dict[str, str]:
    """The smoke prompts in llama3.1-8b's data format (cnn_eval.json: records with tok_input and output)."""
    smoke = store / "datasets" / "smoke"
    out = {}
    for role, name in (("performance", "perf_eval_ref.parquet"), ("accuracy", "acc_eval_inputs.parquet")):
        prompts = read_token_prompts(smoke / name)
        truth = prompts.ground_truth or ("",) * len(prompts)
        records = [{"tok_input": list(p), "output": t} for p, t in zip(prompts.prompts, truth, strict=True)]
        (tmp / f"{role}.json").write_text(json.dumps(records))
        out[role] = str(tmp / f"{role}.json")
    return out


def _plan(tmp: Path, store: Path, benchmark: str, scenarios: dict) -> plans.Plan:
    path = write_plan(tmp / "plan.yaml", store)
    data = yaml.safe_load(path.read_text())
    data["benchmarks"][0] |= {"benchmark": benchmark, "scenarios": scenarios}
    if benchmark == "llama3.1-8b":   # the tiny model mapped onto llama3.1-8b, which requires TEST06
        data["benchmarks"][0]["dataset"] = _cnn_eval(store, tmp)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return plans.load(path)


def _jobs(plan: plans.Plan, store: Path, records: list[RunRecord] = ()) -> dict[str, AuditJob]:
    """The plan's audit jobs by label (datasets used in place, hashed as staging would)."""
    bench, rules = plan.benchmarks[0], load_rules(plan.round)
    sources = {bench.dataset.performance, bench.dataset.accuracy, *bench.dataset.compliance.values()}
    datasets = {s: {"path": s, "sha256": sha256_file(Path(s))} for s in sources}
    specs = plan_runs(plan, bench, rules, model_sha256="tiny", engine="smoke test",
                      dataset_sha256={s: d["sha256"] for s, d in datasets.items()})
    model = store / "models" / "tiny-llama"
    jobs, skipped = audit_jobs(plan, bench, rules, specs, list(records), datasets=datasets, model_dir=str(model),
                               tokenizer=str(model / "tokenizer.json"))
    assert not skipped
    return {job.label: job for job in jobs}


def _official(job: AuditJob, src: Path) -> AuditJob:
    """The job with the round's sources: the audit runs their run_verification.py on its run too."""
    return job.model_copy(update={"inference_src": str(src)})


def _official_lines(record: AuditRecord, name: str) -> list[str]:
    """The lines of the verify file the official script left for `record`'s run."""
    return (Path(record.run_dir) / "official" / "output" / record.test / name).read_text().splitlines()


def _failed(job: AuditJob, session: Fixed, work: Path, attempts: int = 1) -> AuditFailed:
    with pytest.raises(AuditFailed) as caught:
        run_audit(job, session, work, attempts=attempts)
    return caught.value


def test_test06_passes_on_the_cpu_engine(engine: Endpoint, smoke_store: Path, inference_src: Path,
                                        tmp_path: Path) -> None:
    plan = _plan(tmp_path, smoke_store, "llama3.1-8b", {"Server": {"target_qps": 25}})
    job = _official(_jobs(plan, smoke_store)["cpu-smoke/llama3.1-8b/Server/TEST06"], inference_src)
    record = run_audit(job, Fixed(engine), tmp_path / "work")
    assert record.passed, record.summary()
    assert record.official == "PASS" and record.disagreement is None   # the round's run_verification.py agrees
    assert record.attempts == 1 and record.target_qps == 24.25   # 0.97 x 25
    run_dir = Path(record.run_dir)
    assert not (run_dir / "audit.config").exists()   # present only while the run ran
    run = load_run(run_dir)
    assert any("Found Audit Config file" in w for w in run.warnings)
    assert run.settings.min_duration_ms == 0 and run.generated_query_count == 100   # from TEST06's audit.config
    assert "llama3_1-8b.Server.target_qps = 24.25" in (run_dir / "user.conf").read_text()
    entries = parse_accuracy_log(run_dir / "mlperf_log_accuracy.json")
    assert len(entries) == 100 and all(e.token_data for e in entries)   # every sample logged, with its first token
    verify = (Path(record.folder) / "verify_accuracy.txt").read_text().splitlines()
    assert verify[:4] == ["First token check pass: True", "EOS check pass: True", "Sample length check pass: True",
                          "TEST06 verification complete"] == _official_lines(record, "verify_accuracy.txt")
    assert sorted(str(p.relative_to(record.folder)) for p in Path(record.folder).rglob("*") if p.is_file()) == [
        "accuracy/mlperf_log_accuracy.json", "verify_accuracy.txt"]


def test_test06_fails_on_early_eos(engine: Endpoint, smoke_store: Path, inference_src: Path, tmp_path: Path) -> None:
    """Podium fails it; the round's run_verification.py, given the model's EOS id as Podium passes it, cannot (it
    compares tokens with the id as a string, tests/unit/test_compliance_verify.py): a disagreement, reported."""
    plan = _plan(tmp_path, smoke_store, "llama3.1-8b", {"Offline": {"target_qps": 800}})
    job = _official(_jobs(plan, smoke_store)["cpu-smoke/llama3.1-8b/Offline/TEST06"], inference_src)
    with FaultProxy(engine.base_url, "eos", keep=4) as proxy:
        error = _failed(job, Fixed(engine, proxy.url), tmp_path / "work")
    failed = {c.name: c for c in error.record.failed_checks}
    assert set(failed) == {"outputs ending in more than 1 EOS"}
    assert failed["outputs ending in more than 1 EOS"].measured == 100   # every answer: 4 words, then 12 EOS
    assert "EOS check pass: False" in (Path(error.record.folder) / "verify_accuracy.txt").read_text()
    assert "EOS check pass: True" in _official_lines(error.record, "verify_accuracy.txt")
    assert error.record.official == "PASS" and "says PASS, Podium says FAIL" in error.record.disagreement


def test_test06_fails_when_the_first_token_is_not_the_outputs(engine: Endpoint, smoke_store: Path,
                                                              inference_src: Path, tmp_path: Path) -> None:
    plan = _plan(tmp_path, smoke_store, "llama3.1-8b", {"Interactive": {"target_qps": 25}})
    job = _official(_jobs(plan, smoke_store)["cpu-smoke/llama3.1-8b/Interactive/TEST06"], inference_src)
    with FaultProxy(engine.base_url, "split_first") as proxy:
        error = _failed(job, Fixed(engine, proxy.url), tmp_path / "work")
    failed = {c.name: c for c in error.record.failed_checks}
    assert set(failed) == {"first token differs from the output"}
    assert failed["first token differs from the output"].measured > 50
    verify = (Path(error.record.folder) / "verify_accuracy.txt").read_text().splitlines()
    assert "First token check pass: False" in verify and verify[:4] == _official_lines(error.record,
                                                                                        "verify_accuracy.txt")
    assert error.record.official == "FAIL" and error.record.disagreement is None


def test_test09_fails_on_padded_outputs_and_is_retried_once(engine: Endpoint, smoke_store: Path,
                                                            inference_src: Path, tmp_path: Path) -> None:
    plan = _plan(tmp_path, smoke_store, "gpt-oss-120b", {"Offline": {"target_qps": 800}})
    job = _official(_jobs(plan, smoke_store)["cpu-smoke/gpt-oss-120b/Offline/TEST09"], inference_src)
    with FaultProxy(engine.base_url, "pad", pad_to=32) as proxy:
        error = _failed(job, Fixed(engine, proxy.url), tmp_path / "work", attempts=2)
    record = error.record
    assert record.attempts == 2 and proxy.requests == 64   # 32 samples, each issued once, twice
    assert [c.name for c in record.failed_checks] == ["mean output tokens"]
    assert record.failed_checks[0].measured == 32 and record.failed_checks[0].bound == "in [14.4, 17.6]"
    assert "mean output tokens 32 in [14.4, 17.6]: FAIL" in str(error)
    assert (Path(record.run_dir).parent / f"{Path(record.run_dir).name}.attempt-1").is_dir()
    text = (Path(record.folder) / "verify_output_len.txt").read_text()
    assert "TEST FAIL" in text and "TEST PASS" not in text
    assert record.official == "FAIL" and record.disagreement is None
    assert "Mean output tokens: 32.00" in _official_lines(record, "verify_output_len.txt")


def test_test07_fails_on_wrong_answers(engine: Endpoint, smoke_store: Path, inference_src: Path,
                                      tmp_path: Path) -> None:
    plan = _plan(tmp_path, smoke_store, "gpt-oss-120b", {"Offline": {"target_qps": 800}})
    job = _official(_jobs(plan, smoke_store)["cpu-smoke/gpt-oss-120b/Offline/TEST07"], inference_src)
    assert ("gpt-oss-120b.*.performance_sample_count_override", "16") in job.spec.user_conf   # the set's size
    with FaultProxy(engine.base_url, "corrupt") as proxy:
        error = _failed(job, Fixed(engine, proxy.url), tmp_path / "work")
    failed = {c.name: c for c in error.record.failed_checks}
    assert set(failed) == {"exact_match"}
    assert failed["exact_match"].measured < 60.698 and failed["exact_match"].bound == ">= 60.698"
    text = (Path(error.record.folder) / "verify_accuracy.txt").read_text()
    assert "'exact_match'" in text and "TEST PASS" not in text
    assert error.record.official == "FAIL" and error.record.disagreement is None
    official = _official_lines(error.record, "verify_accuracy.txt")
    assert f"Accuracy score: {round(failed['exact_match'].measured, 3)}" in official and "TEST FAIL" in official


def test_test04_fails_against_a_caching_sut(engine: Endpoint, smoke_store: Path, tmp_path: Path) -> None:
    """No Podium benchmark requires TEST04 (the rules name it for resnet, sdxl, wan); its module runs here on the
    smoke plan: the performance run and the audit both go through a proxy that caches answers."""
    plan = _plan(tmp_path, smoke_store, "gpt-oss-120b", {"Offline": {"target_qps": 800}})
    rules = load_rules(plan.round)
    bench = rules.benchmark("gpt-oss-120b").model_copy(update={"compliance_tests": ("TEST04",)})
    rules = rules.model_copy(update={"benchmarks": {**rules.benchmarks, "gpt-oss-120b": bench}})
    work = tmp_path / "work"
    with FaultProxy(engine.base_url, "cache") as proxy:
        session = Fixed(engine, proxy.url)
        specs = plan_runs(plan, plan.benchmarks[0], rules, model_sha256="tiny", engine="smoke test",
                          dataset_sha256=dict.fromkeys((plan.benchmarks[0].dataset.performance,
                                                        plan.benchmarks[0].dataset.accuracy), "x"))
        perf = specs[0]
        try:
            reference = run_once(perf, session, work, None, None)
        except RunRejected as rejected:   # the cache may make even the performance run too short to be VALID
            reference = rejected.record
        bench_spec = plan.benchmarks[0]
        jobs, _ = audit_jobs(plan, bench_spec, rules, specs, [reference], datasets={}, model_dir="", tokenizer=None)
        error = _failed(jobs[0], session, work)
    speed = next(c for c in error.record.checks if c.name == "audit score / performance score")
    assert speed.passed is False and speed.measured > 1.1 and speed.bound == "< 1.1"
    assert proxy.cache_hits > 100
    assert "TEST FAIL" in (Path(error.record.folder) / "verify_performance.txt").read_text()
