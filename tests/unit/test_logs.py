"""submission.results.logs on real loadgen 6.0.17 logs, made by the fake token SUT in tests/loadgen_fake.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from submission.base.errors import RunFailed
from submission.results.logs import DETAIL_FILE, SUMMARY_FILE, load_run, parse_accuracy_log, parse_detail
from tests.loadgen_fake import fake_tokens, run_fake

V61_SEEDS = {
    "qsl_rng_seed": 2085463073848966840,
    "sample_index_rng_seed": 2747215439041700203,
    "schedule_rng_seed": 16159082839903944936,
}
TOKEN_LIMITS_NS = {  # requested_server_ttft_latency / requested_server_tpot_latency from loadgen's mlperf.conf
    "gpt-oss-120b": (3_000_000_000, 80_000_000),
    "gpt-oss-120b-interactive": (2_000_000_000, 15_000_000),
}
TOTAL, TOKENS = 16, 8


@pytest.fixture(scope="module")
def offline_perf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_fake(tmp_path_factory.mktemp("offline_perf"), scenario="Offline", total_count=TOTAL)


@pytest.fixture(scope="module", params=sorted(TOKEN_LIMITS_NS))
def server_perf(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    folder = tmp_path_factory.mktemp("server_perf")
    return request.param, run_fake(folder, scenario="Server", loadgen_model=request.param, total_count=TOTAL)


def _summary_result(folder: Path) -> str:
    lines = (folder / SUMMARY_FILE).read_text().splitlines()
    return next(line.split(":", 1)[1].strip() for line in lines if line.startswith("Result is"))


def test_offline_performance_run(offline_perf: Path) -> None:
    run = load_run(offline_perf)
    assert run.scenario == "Offline"
    assert run.mode == "PerformanceOnly"
    assert run.loadgen_version is not None and run.loadgen_version.startswith("6.0.17")
    assert run.validity == _summary_result(offline_perf)
    assert run.valid == (run.validity == "VALID")
    assert run.tokens_per_second is not None and run.tokens_per_second > 0
    assert run.samples_per_second is not None and run.samples_per_second > 0
    assert run.result("result_tokens_per_second") == run.tokens_per_second
    assert run.result("result_no_such_field") is None
    assert run.seeds == V61_SEEDS
    assert run.num_errors == 0 and run.errors == ()
    assert run.qsl_total_count == TOTAL
    assert run.settings.performance_sample_count == TOTAL
    assert run.settings.use_token_latencies is True
    assert run.settings.min_duration_ms == 500
    assert {"min", "max", "mean", "50.00", "90.00", "99.00"} <= set(run.latency_ns)
    assert run.ttft_p99_ns is None and run.tpot_p99_ns is None
    if not run.valid:
        assert run.invalid_reasons, "an INVALID run must say why"
    if run.min_duration_met is False:
        assert any("expected QPS" in reason for reason in run.invalid_reasons)


def test_offline_run_that_lasts_min_duration_is_valid(tmp_path: Path) -> None:
    # 500 ms min_duration: a one-batch answer after 0.6 s lets loadgen call the run VALID.
    run = load_run(run_fake(tmp_path, scenario="Offline", latency_s=0.6))
    assert run.validity == _summary_result(tmp_path) == "VALID"
    assert run.valid and run.min_duration_met and run.min_queries_met
    assert run.invalid_reasons == ()


def test_run_serialises_to_json_without_the_raw_detail(offline_perf: Path) -> None:
    dumped = load_run(offline_perf).model_dump(mode="json")
    assert "detail" not in dumped
    assert json.loads(json.dumps(dumped))["seeds"] == V61_SEEDS


def test_server_run_has_token_latencies(server_perf: tuple[str, Path]) -> None:
    model, folder = server_perf
    run = load_run(folder)
    assert run.scenario == "Server"
    assert run.validity == _summary_result(folder)
    assert run.ttft_p99_ns is not None and run.ttft_p99_ns > 0
    assert run.tpot_p99_ns is not None and run.tpot_p99_ns > 0
    assert run.ttft_ns["99.00"] == run.ttft_p99_ns and {"min", "max", "mean"} <= set(run.tpot_ns)
    assert run.completed_tokens_per_second is not None and run.completed_tokens_per_second > 0
    assert run.result("result_completed_samples_per_sec") == run.completed_samples_per_second
    assert (run.settings.ttft_latency_ns, run.settings.tpot_latency_ns) == TOKEN_LIMITS_NS[model]
    assert run.settings.use_token_latencies is True
    assert isinstance(run.perf_constraints_met, bool) and isinstance(run.early_stopping_met, bool)
    if run.early_stopping_met is False:
        assert any("early stopping" in reason for reason in run.invalid_reasons)


@pytest.mark.parametrize("scenario", ["Offline", "Server"])
def test_accuracy_run_round_trips_tokens(scenario: str, tmp_path: Path) -> None:
    folder = run_fake(tmp_path, scenario=scenario, mode="accuracy", total_count=TOTAL, tokens_per_sample=TOKENS)
    run = load_run(folder)
    assert run.mode == "AccuracyOnly"
    assert run.validity is None and not run.valid  # loadgen logs no result in accuracy mode
    entries = parse_accuracy_log(folder / "mlperf_log_accuracy.json")
    assert len(entries) == TOTAL
    assert sorted(entry.qsl_idx for entry in entries) == list(range(TOTAL))
    for entry in entries:
        assert entry.tokens() == fake_tokens(entry.qsl_idx, TOKENS).tolist()
        assert entry.token_count == TOKENS
        if scenario == "Server":
            assert entry.first_tokens() == entry.tokens()[:1]
        else:
            assert entry.token_data is None and entry.first_tokens() is None


def test_single_token_responses_are_loadgen_errors(tmp_path: Path) -> None:
    run = load_run(run_fake(tmp_path, scenario="Server", n_tokens_override=1))
    assert run.num_errors >= 1
    assert "Number of tokens need to be greater than 1" in run.errors
    assert run.detail.error_count == run.num_errors


def test_missing_detail_log_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(RunFailed) as caught:
        load_run(tmp_path)
    assert str(tmp_path / DETAIL_FILE) in str(caught.value)
    assert caught.value.fix


def test_empty_detail_log_names_the_path(tmp_path: Path) -> None:
    (tmp_path / DETAIL_FILE).write_text("")
    with pytest.raises(RunFailed, match="empty") as caught:
        load_run(tmp_path)
    assert str(tmp_path / DETAIL_FILE) in str(caught.value)


def test_garbage_and_truncated_lines_are_skipped_and_recorded(offline_perf: Path, tmp_path: Path) -> None:
    lines = (offline_perf / DETAIL_FILE).read_text().splitlines()
    warning = {"key": "warning_generic_message", "value": "a test warning", "metadata": {"is_warning": True}}
    repeat = {"key": "result_validity", "value": "VALID", "metadata": {}}
    damaged = [
        lines[0],
        "garbage that is not a log line",
        ":::MLLOG {not json",
        ':::MLLOG {"key": 5, "value": 1}',
        ':::MLLOG {"key": "odd_metadata", "value": 1, "metadata": [1]}',
        *lines[1:],
        ":::MLLOG " + json.dumps(warning),
        ":::MLLOG " + json.dumps(repeat),
        lines[-1][: len(lines[-1]) // 2],  # a line cut off mid-write
    ]
    (tmp_path / DETAIL_FILE).write_text("\n".join(damaged) + "\n")
    run = load_run(tmp_path)  # no summary file: it is optional
    assert run.summary == {}
    assert run.loadgen_version is not None and run.seeds == V61_SEEDS
    assert run.validity == "VALID"  # the last value of a repeated key wins
    skipped = [text for text in run.warnings if "skipped" in text]
    assert [text.split(" line ")[1].split(":")[0] for text in skipped] == ["2", "3", "4", str(len(damaged))]
    assert run.detail.get("odd_metadata") == 1
    assert "a test warning" in run.warnings


def test_parse_detail_reads_a_copied_log(offline_perf: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.txt"
    shutil.copy(offline_perf / DETAIL_FILE, copy)
    detail = parse_detail(copy)
    assert detail.get("effective_scenario") == "Offline"
    assert detail.get("absent", 7) == 7
    assert detail.warnings == () and detail.errors == ()


def test_unreadable_accuracy_log_is_a_run_failure(tmp_path: Path) -> None:
    broken = tmp_path / "mlperf_log_accuracy.json"
    broken.write_text('[\n{ "seq_id" : 0, "qsl_idx" : 3, "data" : "0700')
    with pytest.raises(RunFailed, match="accuracy log"):
        parse_accuracy_log(broken)
    with pytest.raises(RunFailed):
        parse_accuracy_log(tmp_path / "absent.json")
