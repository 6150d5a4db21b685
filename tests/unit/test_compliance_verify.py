"""Each verifier on real loadgen 6.0.17 audit runs (the fake token SUT of tests/loadgen_fake.py, with the audit's
audit.config applied by loadgen): it passes a consistent run and fails, naming the check and the measured value, a
run that breaks its criterion. The TESTxx folders it leaves have exactly the reference §1.5 layout. The official
TEST06, TEST07 and TEST09 run_verification.py of the round's sources run beside Podium's verdicts on the same runs,
passing and failing, and agree with them (where they do not, the test names the difference)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import tasks.accuracy
from submission.results.logs import parse_accuracy_log
from submission.results.runs import RunSpec
from submission.rules import load_rules
from tasks.accuracy import AccuracyResult
from tasks.compliance import AuditJob, Verdict, audit
from tasks.compliance.official_scripts import Official, run_official, script_for
from tests import references
from tests.loadgen_fake import default_user_conf, fake_tokens, run_fake

RULES = load_rules("v6.1")
TOTAL, TOKENS = 16, 8
LATENCY_S = 2.0   # the Offline fake SUT answers its one query after this long: the run's duration, for TEST01/04


class FirstTokenEvaluator:
    """A test evaluator: an answer is right when its first token is the fake SUT's first token for the sample."""

    name = "fake-first-token"

    def evaluate(self, accuracy_log: Path, dataset: Path, tokenizer: Path | None) -> AccuracyResult:
        entries = {e.qsl_idx: e.tokens() for e in parse_accuracy_log(accuracy_log)}
        right = sum(bool(t) and t[0] == int(fake_tokens(i, 1)[0]) for i, t in entries.items())
        return AccuracyResult({"exact_match": 100.0 * right / len(entries)}, len(entries))

    def accuracy_txt(self, result: AccuracyResult) -> str:
        return f"{{'exact_match': {result.metrics['exact_match']:.3f}}}\n"


EVALUATOR = FirstTokenEvaluator()


class HalfPercentLowerEvaluator(FirstTokenEvaluator):
    """A test evaluator for TEST01's score comparison: the accuracy run's outputs score 100, the audit's 99.5."""

    name = "fake-half-percent-lower"

    def evaluate(self, accuracy_log: Path, dataset: Path, tokenizer: Path | None) -> AccuracyResult:
        n = len(parse_accuracy_log(accuracy_log))
        return AccuracyResult({"exact_match": 100.0 if accuracy_log.name == "test01_baseline_log.json" else 99.5}, n)


HALF_PERCENT_LOWER = HalfPercentLowerEvaluator()


@pytest.fixture(autouse=True)
def fake_evaluator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(tasks.accuracy.EVALUATORS, EVALUATOR.name, __name__)
    monkeypatch.setitem(tasks.accuracy.EVALUATORS, HALF_PERCENT_LOWER.name, f"{__name__}:HALF_PERCENT_LOWER")


def _lines(test: str, benchmark: str, **overrides: float) -> tuple[str, ...]:
    return audit(test).config_lines(RULES, benchmark, overrides or None)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real loadgen runs, a few at a time (each is a child process)."""
    base = tmp_path_factory.mktemp("audit-runs")
    offline = {"scenario": "Offline", "total_count": TOTAL, "tokens_per_sample": TOKENS}
    jobs = {
        "TEST09": dict(offline, audit_config_lines=_lines("TEST09", "gpt-oss-120b")),
        "TEST07": dict(offline, audit_config_lines=_lines("TEST07", "gpt-oss-120b")),
        "TEST06-Server": dict(offline, scenario="Server", loadgen_model="llama3_1-8b",
                              audit_config_lines=_lines("TEST06", "llama3.1-8b")),
        "TEST06-short-count": dict(offline, loadgen_model="llama3_1-8b", n_tokens_override=TOKENS - 3,
                                   audit_config_lines=_lines("TEST06", "llama3.1-8b")),
        "perf": dict(offline, latency_s=LATENCY_S),
        "perf-slow": dict(offline, latency_s=2 * LATENCY_S),
        "TEST04": dict(offline, latency_s=LATENCY_S, audit_config_lines=_lines("TEST04", "gpt-oss-120b")),
        "accuracy": dict(offline, mode="accuracy"),
        "TEST01": dict(offline, latency_s=LATENCY_S, audit_config_lines=_lines(
            "TEST01", "gpt-oss-120b", accuracy_log_sampling_target=8)),
    }
    with ThreadPoolExecutor(max_workers=3) as pool:
        done = {name: pool.submit(run_fake, base / name, **kwargs) for name, kwargs in jobs.items()}
        return {name: future.result() for name, future in done.items()}


def _job(test: str, benchmark: str, run: Path, *, scenario: str = "Offline", lines: tuple[str, ...] | None = None,
         **fields: object) -> AuditJob:
    model = RULES.benchmark(benchmark).loadgen_model_for(scenario)
    spec = RunSpec(
        plan="unit", profile="smoke", round="v6.1", system="sys", benchmark=benchmark, scenario=scenario,
        mode="performance", loadgen_model=model, loadgen_scenario=RULES.benchmark(benchmark).scenario(
            scenario).loadgen_scenario,
        user_conf=tuple(tuple(line.split(" = ")) for line in default_user_conf(model, TOTAL)),
        dataset=str(run / "dataset"), dataset_sha256="-", model_sha256="-", engine="fake", max_tokens=TOKENS,
        temperature=0.0, max_concurrency=1, audit=test, audit_config=lines or _lines(test, benchmark))
    return AuditJob(spec=spec, **fields)


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def _failed(verdict: Verdict) -> dict[str, object]:
    return {c.name: c.measured for c in verdict.checks if c.passed is False}


def test_test09_mean_output_length_within_the_bounds(runs: dict[str, Path], tmp_path: Path) -> None:
    fitting = _job("TEST09", "gpt-oss-120b", runs["TEST09"], lines=_lines(
        "TEST09", "gpt-oss-120b", test09_min_output_tokens=7.2, test09_max_output_tokens=8.8))
    verdict = audit("TEST09").verify(runs["TEST09"], fitting)
    assert verdict.passed and _failed(verdict) == {}
    assert "TEST PASS" in verdict.files["verify_output_len.txt"]
    gpt_oss = audit("TEST09").verify(runs["TEST09"], _job("TEST09", "gpt-oss-120b", runs["TEST09"]))
    assert not gpt_oss.passed and _failed(gpt_oss) == {"mean output tokens": 8.0}   # 8 tokens vs [1150.38, 1406.02]
    assert "TEST FAIL" in gpt_oss.files["verify_output_len.txt"]
    assert "TEST PASS" not in gpt_oss.files["verify_output_len.txt"]
    folder = audit("TEST09").lay_out(runs["TEST09"], verdict, tmp_path)
    assert _files(folder) == {"verify_output_len.txt", "accuracy/mlperf_log_accuracy.json",
                              "performance/run_1/mlperf_log_summary.txt", "performance/run_1/mlperf_log_detail.txt"}
    assert len(parse_accuracy_log(folder / "accuracy" / "mlperf_log_accuracy.json")) == TOTAL   # every sample, once


def test_test06_passes_a_consistent_server_run(runs: dict[str, Path], tmp_path: Path) -> None:
    job = _job("TEST06", "llama3.1-8b", runs["TEST06-Server"], scenario="Server", eos_token_ids=(2,))
    verdict = audit("TEST06").verify(runs["TEST06-Server"], job)
    assert verdict.passed, verdict.checks
    assert verdict.files["verify_accuracy.txt"].splitlines()[:4] == [
        "First token check pass: True", "EOS check pass: True", "Sample length check pass: True",
        "TEST06 verification complete"]
    folder = audit("TEST06").lay_out(runs["TEST06-Server"], verdict, tmp_path)
    assert _files(folder) == {"verify_accuracy.txt", "accuracy/mlperf_log_accuracy.json"}


def test_test06_fails_two_trailing_eos(runs: dict[str, Path]) -> None:
    """Every fake answer ends in its two last tokens; declared EOS, each answer ends in two EOS tokens."""
    entries = parse_accuracy_log(runs["TEST06-Server"] / "mlperf_log_accuracy.json")
    eos = tuple(sorted({t for e in entries for t in e.tokens()[-2:]}))
    job = _job("TEST06", "llama3.1-8b", runs["TEST06-Server"], scenario="Server", eos_token_ids=eos)
    verdict = audit("TEST06").verify(runs["TEST06-Server"], job)
    assert _failed(verdict) == {"outputs ending in more than 1 EOS": len(entries)}
    assert "EOS check pass: False" in verdict.files["verify_accuracy.txt"]
    one = _job("TEST06", "llama3.1-8b", runs["TEST06-Server"], scenario="Server",
               eos_token_ids=tuple(sorted({e.tokens()[-1] for e in entries})))
    assert audit("TEST06").verify(runs["TEST06-Server"], one).passed   # one trailing EOS is allowed


def test_test06_fails_a_first_token_that_is_not_the_outputs(runs: dict[str, Path], tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(runs["TEST06-Server"], run)
    entries = json.loads((run / "mlperf_log_accuracy.json").read_text())
    entries[3]["token_data"] = entries[3]["data"][8:16]   # the answer's second int32 token reported as its first
    (run / "mlperf_log_accuracy.json").write_text(json.dumps(entries))
    verdict = audit("TEST06").verify(run, _job("TEST06", "llama3.1-8b", run, scenario="Server", eos_token_ids=(2,)))
    assert _failed(verdict) == {"first token differs from the output": 1}
    assert "First token check pass: False" in verdict.files["verify_accuracy.txt"]


def test_test06_fails_token_counts_and_skips_the_first_token_offline(runs: dict[str, Path]) -> None:
    run = runs["TEST06-short-count"]
    verdict = audit("TEST06").verify(run, _job("TEST06", "llama3.1-8b", run, eos_token_ids=(2,)))
    assert _failed(verdict) == {"token_count differs from the output length": 100}   # min_query_count 100
    lines = verdict.files["verify_accuracy.txt"].splitlines()
    assert lines[0] == "First token check pass: Skipped" and lines[2] == "Sample length check pass: False"


def test_test07_scores_the_compliance_set_against_the_threshold(runs: dict[str, Path], tmp_path: Path) -> None:
    run = runs["TEST07"]
    conf = (("gpt-oss-120b.*.performance_sample_count_override", str(TOTAL)),)
    job = _job("TEST07", "gpt-oss-120b", run, evaluator=EVALUATOR.name, metric="exact_match")
    job = job.model_copy(update={"spec": job.spec.model_copy(update={"user_conf": conf})})
    verdict = audit("TEST07").verify(run, job)
    assert verdict.passed and "TEST PASS" in verdict.files["verify_accuracy.txt"]
    assert "'exact_match': 100.000" in verdict.files["verify_accuracy.txt"]
    strict = job.model_copy(update={"spec": job.spec.model_copy(update={"audit_config": _lines(
        "TEST07", "gpt-oss-120b", test07_accuracy_threshold=100.5)})})
    failing = audit("TEST07").verify(run, strict)
    assert _failed(failing) == {"exact_match": 100.0}
    assert "TEST PASS" not in failing.files["verify_accuracy.txt"]
    folder = audit("TEST07").lay_out(run, verdict, tmp_path)
    assert _files(folder) == {"verify_accuracy.txt", "accuracy/mlperf_log_accuracy.json",
                              "performance/run_1/mlperf_log_summary.txt", "performance/run_1/mlperf_log_detail.txt"}


def test_test07_run_settings_set_the_sample_count_to_the_set_size() -> None:
    base = (("gpt-oss-120b.Offline.target_qps", "100"), ("gpt-oss-120b.*.performance_sample_count_override", "32"))
    assert audit("TEST07").run_settings(base, "gpt-oss-120b", 990) == (
        ("gpt-oss-120b.Offline.target_qps", "100"), ("gpt-oss-120b.*.performance_sample_count_override", "990"))
    assert audit("TEST09").run_settings(base, "gpt-oss-120b", None) == base


def test_test04_fails_a_run_faster_than_the_performance_run(runs: dict[str, Path], tmp_path: Path) -> None:
    same = audit("TEST04").verify(runs["TEST04"], _job("TEST04", "gpt-oss-120b", runs["TEST04"],
                                                        reference_performance=str(runs["perf"])))
    assert same.passed, same.checks
    faster = audit("TEST04").verify(runs["TEST04"], _job("TEST04", "gpt-oss-120b", runs["TEST04"],
                                                          reference_performance=str(runs["perf-slow"])))
    failed = _failed(faster)
    assert set(failed) == {"audit score / performance score"} and failed["audit score / performance score"] > 1.5
    assert "TEST FAIL" in faster.files["verify_performance.txt"]
    folder = audit("TEST04").lay_out(runs["TEST04"], same, tmp_path)
    assert _files(folder) == {"verify_performance.txt", "performance/run_1/mlperf_log_summary.txt",
                              "performance/run_1/mlperf_log_detail.txt"}


def test_test01_outputs_and_performance_match(runs: dict[str, Path], tmp_path: Path) -> None:
    job = _job("TEST01", "gpt-oss-120b", runs["TEST01"], lines=_lines(
        "TEST01", "gpt-oss-120b", accuracy_log_sampling_target=8), reference_performance=str(runs["perf"]),
        reference_accuracy=str(runs["accuracy"]))
    verdict = audit("TEST01").verify(runs["TEST01"], job)
    assert verdict.passed, verdict.checks
    assert "TEST PASS" in verdict.files["verify_accuracy.txt"] and "TEST PASS" in verdict.files[
        "verify_performance.txt"]
    folder = audit("TEST01").lay_out(runs["TEST01"], verdict, tmp_path)
    assert _files(folder) == {"verify_accuracy.txt", "verify_performance.txt", "accuracy/mlperf_log_accuracy.json",
                              "performance/run_1/mlperf_log_summary.txt", "performance/run_1/mlperf_log_detail.txt"}
    slow = audit("TEST01").verify(runs["TEST01"], job.model_copy(update={"reference_performance": str(
        runs["perf-slow"])}))
    assert set(_failed(slow)) == {"audit score / performance score"}


def test_test01_differing_outputs_fail_unless_the_score_holds(runs: dict[str, Path], tmp_path: Path) -> None:
    accuracy = tmp_path / "accuracy"
    shutil.copytree(runs["accuracy"], accuracy)
    entries = json.loads((accuracy / "mlperf_log_accuracy.json").read_text())
    for entry in entries:   # the accuracy run answered differently in its last token
        entry["data"] = entry["data"][:-8] + "00000000"
    (accuracy / "mlperf_log_accuracy.json").write_text(json.dumps(entries))
    job = _job("TEST01", "gpt-oss-120b", runs["TEST01"], lines=_lines(
        "TEST01", "gpt-oss-120b", accuracy_log_sampling_target=8), reference_performance=str(runs["perf"]),
        reference_accuracy=str(accuracy))
    plain = audit("TEST01").verify(runs["TEST01"], job)
    logged = len(parse_accuracy_log(runs["TEST01"] / "mlperf_log_accuracy.json"))
    assert _failed(plain) == {"logged outputs differing from the accuracy run": logged}
    scored = audit("TEST01").verify(runs["TEST01"], job.model_copy(update={
        "evaluator": EVALUATOR.name, "metric": "exact_match"}))
    assert scored.passed   # the first tokens, all this evaluator scores, did not change: README Part III
    assert "TEST FAIL" in scored.files["verify_accuracy.txt"]   # as the official script writes it
    assert {"accuracy/baseline_accuracy.txt", "accuracy/compliance_accuracy.txt"} <= set(scored.files)


def test_test01_score_delta_is_the_checkers_per_accuracy_class(runs: dict[str, Path], tmp_path: Path) -> None:
    """Outputs differ and the score moves by |1 - 100 / 99.5| = 0.5025 % (the checker's formula, relative to the
    audit's score): within the 1 % a 99 % benchmark allows, over the 0.1 % of a 99.9 % one (get_delta_perc)."""
    accuracy = tmp_path / "accuracy"
    shutil.copytree(runs["accuracy"], accuracy)
    entries = json.loads((accuracy / "mlperf_log_accuracy.json").read_text())
    for entry in entries:
        entry["data"] = entry["data"][:-8] + "00000000"
    (accuracy / "mlperf_log_accuracy.json").write_text(json.dumps(entries))
    verdicts = {}
    for benchmark in ("gpt-oss-120b", "llama2-70b-99.9"):
        lines = _lines("TEST01", benchmark, accuracy_log_sampling_target=8)
        job = _job("TEST01", benchmark, runs["TEST01"], lines=lines, reference_performance=str(runs["perf"]),
                   reference_accuracy=str(accuracy), evaluator=HALF_PERCENT_LOWER.name, metric="exact_match")
        verdicts[benchmark] = {c.name: (c.passed, c.measured, c.bound) for c in audit("TEST01").verify(
            runs["TEST01"], job).checks}
    name = "exact_match change from the accuracy run (%)"
    assert verdicts["gpt-oss-120b"][name] == (True, 0.5025, "<= 1")
    assert verdicts["llama2-70b-99.9"][name] == (False, 0.5025, "<= 0.1")


def test_folders_pass_the_checkers_compliance_checks(runs: dict[str, Path], tmp_path: Path) -> None:
    """Each passing verdict's folder, truncated as the tree's are, gives no finding of submission/checks/compliance
    (file set, pass lines, audit in effect, hash line); a failing one gives its compliance-pass finding."""
    from submission.checks.compliance import check_test
    from submission.checks.findings import Context
    from submission.tree.truncate import truncate_accuracy_dir

    test07 = _job("TEST07", "gpt-oss-120b", runs["TEST07"], evaluator=EVALUATOR.name, metric="exact_match")
    test07 = test07.model_copy(update={"spec": test07.spec.model_copy(update={"user_conf": (
        ("gpt-oss-120b.*.performance_sample_count_override", str(TOTAL)),)})})
    cases = {
        "TEST07": ("gpt-oss-120b", "Offline", runs["TEST07"], test07),
        "TEST01": ("gpt-oss-120b", "Offline", runs["TEST01"], _job(
            "TEST01", "gpt-oss-120b", runs["TEST01"], lines=_lines("TEST01", "gpt-oss-120b",
                                                                   accuracy_log_sampling_target=8),
            reference_performance=str(runs["perf"]), reference_accuracy=str(runs["accuracy"]))),
        "TEST04": ("gpt-oss-120b", "Offline", runs["TEST04"], _job(
            "TEST04", "gpt-oss-120b", runs["TEST04"], reference_performance=str(runs["perf"]))),
        "TEST06": ("llama3.1-8b", "Server", runs["TEST06-Server"], _job(
            "TEST06", "llama3.1-8b", runs["TEST06-Server"], scenario="Server", eos_token_ids=(2,))),
        "TEST09": ("gpt-oss-120b", "Offline", runs["TEST09"], _job(
            "TEST09", "gpt-oss-120b", runs["TEST09"], lines=_lines(
                "TEST09", "gpt-oss-120b", test09_min_output_tokens=7.2, test09_max_output_tokens=8.8))),
        "TEST09-fail": ("gpt-oss-120b", "Offline", runs["TEST09"], _job("TEST09", "gpt-oss-120b", runs["TEST09"])),
    }
    compliance_rules = {"unexpected-file", "compliance-files", "compliance-pass", "compliance-audit", "accuracy-hash"}
    for name, (benchmark, scenario, run, job) in cases.items():
        impl = audit(job.test)
        verdict = impl.verify(run, job)
        folder = impl.lay_out(run, verdict, tmp_path / name)
        if (folder / "accuracy").is_dir() and job.test != "TEST06":
            truncate_accuracy_dir(folder / "accuracy")
        ctx = Context(tmp_path, RULES, "submission")
        b = RULES.benchmark(benchmark)
        check_test(ctx, job.test, folder, b, b.scenario(scenario))
        found = {f.rule for f in ctx.findings} & compliance_rules
        assert found == ({"compliance-pass"} if name.endswith("fail") else set()), (name, ctx.findings)


# The official compliance/TESTxx/run_verification.py of the round's sources beside Podium's verdicts, run by Podium's
# own wrapper (tasks/compliance/official_scripts.py) on a copy of the same run, unless a test says otherwise.
TEST09_LINES = ("Total samples: ", "Mean output tokens: ", "Min output tokens: ", "Max output tokens: ",
                "Min threshold: ", "Max threshold: ", "Min check pass: ", "Max check pass: ", "TEST PASS", "TEST FAIL")
EOS = "02000000"   # int32 2, little-endian: the EOS id TEST06's script checks when given none


def _official(job: AuditJob, run: Path, src: Path, work: Path) -> tuple[Official, list[str]]:
    """The official verification of `job` on a copy of `run` in `work`: its verdict and its verify file's lines."""
    copy = work / "run"
    shutil.copytree(run, copy)
    official = run_official(audit(job.test), job.model_copy(update={"inference_src": str(src)}), copy)
    text = (copy / "official" / "output" / job.test / audit(job.test).verify_files[0]).read_text()
    return official, text.splitlines()


def _agree(official: Official, verdict: Verdict) -> None:
    assert official.verdict == ("PASS" if verdict.passed else "FAIL") and official.disagreement(verdict.passed) is None


def _edited(run: Path, dest: Path, edit: Callable[[list[dict]], object]) -> Path:
    """A copy of `run` whose accuracy log entries `edit` changed in place."""
    shutil.copytree(run, dest)
    entries = json.loads((dest / "mlperf_log_accuracy.json").read_text())
    edit(entries)
    (dest / "mlperf_log_accuracy.json").write_text(json.dumps(entries))
    return dest


@pytest.mark.parametrize("bounds", [(7.2, 8.8), None], ids=["pass", "fail"])
def test_test09_as_the_official_script(runs: dict[str, Path], inference_src: Path, tmp_path: Path,
                                       bounds: tuple[float, float] | None) -> None:
    """Same verdict, and the same statistics, thresholds and check lines, as TEST09's run_verification.py (8 tokens
    against smoke bounds, then against gpt-oss-120b's [1150.38, 1406.02])."""
    overrides = {"test09_min_output_tokens": bounds[0], "test09_max_output_tokens": bounds[1]} if bounds else {}
    job = _job("TEST09", "gpt-oss-120b", runs["TEST09"], lines=_lines("TEST09", "gpt-oss-120b", **overrides))
    ours = audit("TEST09").verify(runs["TEST09"], job)
    official, lines = _official(job, runs["TEST09"], inference_src, tmp_path)
    _agree(official, ours)
    assert ours.passed == (bounds is not None)
    shared = {line for line in lines if line.startswith(TEST09_LINES)}
    assert len(shared) == 9 and shared == {line for line in ours.files["verify_output_len.txt"].splitlines()
                                           if line.startswith(TEST09_LINES)}


@pytest.mark.parametrize("case", ["consistent", "first token", "token count"])
def test_test06_as_the_official_script(runs: dict[str, Path], inference_src: Path, tmp_path: Path, case: str) -> None:
    """TEST06's run_verification.py writes Podium's four lines word for word, with the same verdict: a consistent
    Server run, one answer whose reported first token is not its output's, token counts that are not the output's
    (Offline: the first token check skipped)."""
    run, scenario = (runs["TEST06-short-count"], "Offline") if case == "token count" else (runs["TEST06-Server"],
                                                                                           "Server")
    if case == "first token":
        run = _edited(run, tmp_path / "edited", lambda es: es[3].update(token_data=es[3]["data"][8:16]))
    job = _job("TEST06", "llama3.1-8b", run, scenario=scenario, eos_token_ids=(2,))
    ours = audit("TEST06").verify(run, job)
    official, lines = _official(job, run, inference_src, tmp_path)
    _agree(official, ours)
    assert ours.passed == (case == "consistent")
    assert lines == ours.files["verify_accuracy.txt"].splitlines()[:4]


def _trailing_eos(entries: list[dict], *, bad: bool) -> None:
    """An output of exactly two EOS and one ending in one EOS (both allowed); with `bad`, one ending in two EOS."""
    entries[0].update(data=EOS * 2, token_data=EOS, token_count=2)
    entries[1].update(data=entries[1]["data"] + EOS, token_count=entries[1]["token_count"] + 1)
    if bad:
        entries[2].update(data=entries[2]["data"] + EOS * 2, token_count=entries[2]["token_count"] + 2)


@pytest.mark.parametrize("bad", [False, True], ids=["allowed", "two-trailing"])
def test_test06_eos_check_as_the_official_script(runs: dict[str, Path], inference_src: Path, tmp_path: Path,
                                                 bad: bool) -> None:
    """TEST06's script as its README runs it (no --eos_token_id: it checks the integer 2) and Podium, told the EOS id
    is 2, judge trailing EOS tokens alike, word for word."""
    run = _edited(runs["TEST06-Server"], tmp_path / "run", lambda es: _trailing_eos(es, bad=bad))
    ours = audit("TEST06").verify(run, _job("TEST06", "llama3.1-8b", run, scenario="Server", eos_token_ids=(2,)))
    out = tmp_path / "official"
    subprocess.run([sys.executable, str(script_for(str(inference_src), "TEST06")), "-c", str(run), "-o", str(out),
                    "-s", "Server"], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True)
    lines = (out / "TEST06" / "verify_accuracy.txt").read_text().splitlines()
    assert lines == ours.files["verify_accuracy.txt"].splitlines()[:4]
    assert f"EOS check pass: {not bad}" in lines and ours.passed is not bad


def test_test06_official_eos_check_passes_whatever_eos_id_it_is_given(runs: dict[str, Path], inference_src: Path,
                                                                      tmp_path: Path) -> None:
    """The script parses `--eos_token_id` (which Podium passes: the model's EOS id) as a string, which no int32 token
    equals: its EOS check passes a run ending in two EOS that Podium fails, and the record names the disagreement."""
    run = _edited(runs["TEST06-Server"], tmp_path / "edited", lambda es: _trailing_eos(es, bad=True))
    job = _job("TEST06", "llama3.1-8b", run, scenario="Server", eos_token_ids=(2,))
    ours = audit("TEST06").verify(run, job)
    official, lines = _official(job, run, inference_src, tmp_path)
    assert "--eos_token_id" in official.argv and "EOS check pass: True" in lines
    assert _failed(ours) == {"outputs ending in more than 1 EOS": 1}
    assert official.verdict == "PASS" and "says PASS, Podium says FAIL" in (official.disagreement(ours.passed) or "")


def _gpt_oss_test07(tmp_path: Path, **overrides: float) -> tuple[Path, AuditJob, dict[str, Path]]:
    """A TEST07 run folder holding the known-answer gpt-oss-120b log (tests/gpt_oss_cases.py: 5 prompts, 7 entries),
    its job scored by Podium's gpt-oss-120b evaluator."""
    from tests.gpt_oss_cases import ROWS, write_case

    case = write_case(tmp_path / "case")
    run = tmp_path / "audit-run"
    run.mkdir()
    shutil.copy(case["log"], run / "mlperf_log_accuracy.json")
    job = _job("TEST07", "gpt-oss-120b", run, lines=_lines("TEST07", "gpt-oss-120b", **overrides),
               evaluator="gpt-oss-120b", metric="exact_match", tokenizer=str(case["tokenizer"]))
    spec = job.spec.model_copy(update={"dataset": str(case["data"]), "user_conf": (
        ("gpt-oss-120b.*.performance_sample_count_override", str(len(ROWS))),)})
    return run, job.model_copy(update={"spec": spec}), case


def _score(verdict: Verdict) -> float:
    return next(c.measured for c in verdict.checks if c.name == "exact_match")


@pytest.mark.parametrize("threshold", [None, 58.5], ids=["fail", "pass"])
def test_test07_as_the_official_script(inference_src: Path, tmp_path: Path, threshold: float | None) -> None:
    """TEST07's run_verification.py, scoring through `python -m tasks.compliance.score` as Podium runs it: the same
    verdict, at gpt-oss-120b's 60.698 and at 58.5, the score it parsed being Podium's to the three decimals printed."""
    run, job, _ = _gpt_oss_test07(tmp_path, **({"test07_accuracy_threshold": threshold} if threshold else {}))
    ours = audit("TEST07").verify(run, job)
    official, lines = _official(job, run, inference_src, tmp_path)
    _agree(official, ours)
    assert ours.passed == (threshold is not None)
    assert f"Accuracy score: {round(_score(ours), 3)}" in lines
    podium = ours.files["verify_accuracy.txt"].splitlines()
    for key in ("Accuracy threshold: ", "Accuracy check pass: "):
        assert [x for x in lines if x.startswith(key)] == [x for x in podium if x.startswith(key)]


def test_test07_with_the_reference_evaluator(inference_src: Path, tmp_path: Path) -> None:
    """TEST07's script with the benchmark's reference evaluator as its accuracy script, as compliance/TEST07/README.md
    runs it: the score it parses is Podium's to the three decimals printed, and the verdict (FAIL at 60.698) too."""
    run, job, case = _gpt_oss_test07(tmp_path)
    ours = audit("TEST07").verify(run, job)
    work = tmp_path / "official"
    work.mkdir()
    (work / "audit.config").write_text("\n".join(job.spec.audit_config) + "\n")
    references.run([sys.executable, str(script_for(str(inference_src), "TEST07")), "-c", str(run), "-o",
                    str(work / "output"), "--audit-config", str(work / "audit.config"), "--accuracy-script",
                    references.gpt_oss_command(inference_src, case["data"], case["tokenizer"].parent)], work)
    text = (work / "output" / "TEST07" / "verify_accuracy.txt").read_text()
    assert "'exact_match': " in text and f"Accuracy score: {round(_score(ours), 3)}\n" in text
    assert not ours.passed and "TEST FAIL" in text and "TEST PASS" not in text


def test_test07_official_script_compares_the_printed_score(inference_src: Path, tmp_path: Path) -> None:
    """The script compares the score as the evaluator printed it (3 decimals), Podium the score itself: at a threshold
    of 59.091 the case's 59.0909... passes there and fails here, and the record names the disagreement."""
    run, job, _ = _gpt_oss_test07(tmp_path, test07_accuracy_threshold=59.091)
    ours = audit("TEST07").verify(run, job)
    official, lines = _official(job, run, inference_src, tmp_path)
    assert 59.0905 < _score(ours) < 59.091 and "Accuracy score: 59.091" in lines
    assert official.verdict == "PASS" and "says PASS, Podium says FAIL" in (official.disagreement(ours.passed) or "")
