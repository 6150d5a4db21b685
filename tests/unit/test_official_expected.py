"""Official-checker differences fully explained by Podium's named deviations are EXPECTED (naming them); any other
official error keeps the DIFFERS line. The error lines are the official v6.1 checker's, as it printed them for a
smoke tree here (`podium check --inference-src`, mlcommons/inference b66003e1)."""

from __future__ import annotations

from submission.checks import official
from submission.checks.checker import CheckReport, Finding, ScenarioResult

ROOT = "/runs/x/submission/"
SC = "open/Podium/results/cpu-smoke/tiny-llama/Offline"
OFFICIAL_LINES = [  # the real checker's log lines for the smoke Offline folder
    f"[2026-12-01 14:13:44,336 performance_check.py:202 ERROR] {ROOT}{SC}/performance/run_1/mlperf_log_detail.txt "
    "performance_sample_count, found 32, needs to be >= 6396",
    f"[2026-12-01 14:13:44,337 performance_check.py:381 ERROR] {ROOT}{SC}/performance/run_1/mlperf_log_detail.txt "
    "Test duration less than 600s in user config. expected=600000, found=1000",
    f"[2026-12-01 14:13:44,337 base.py:58 ERROR] Some performance checks Checks failed for: {ROOT}{SC}/performance/"
    "run_1/mlperf_log_detail.txt",
    f"[2026-12-01 14:13:44,337 accuracy_check.py:306 ERROR] {ROOT}{SC}/accuracy/mlperf_log_detail.txt accurcy run "
    "does not cover all dataset, accuracy samples: 16, dataset size: 4395",
    f"[2026-12-01 14:13:44,374 main.py:236 ERROR] NoResults {ROOT}{SC}/performance/run_1/mlperf_log_detail.txt",
    "[2026-12-01 14:13:44,375 main.py:361 ERROR] SUMMARY: submission has errors",
]
DEVIATIONS = [("performance-sample-count", f"{SC}/performance/run_1"), ("min-duration", f"{SC}/performance/run_1"),
              ("accuracy-coverage", f"{SC}/accuracy")]


def reports(extra_errors: tuple[str, ...] = (), deviations=DEVIATIONS) -> tuple[CheckReport, official.OfficialReport]:
    result = ScenarioResult(division="open", submitter="Podium", system="cpu-smoke", benchmark_folder="tiny-llama",
                            benchmark="gpt-oss-120b", scenario="Offline", layout="loadgen", path=SC)
    findings = [Finding(rule=r, severity="deviation", path=p, message="(smoke profile)") for r, p in deviations]
    ours = CheckReport(round="v6.1", profile="smoke", scenarios_checked=1, findings=findings, results=[result])
    lines = [*OFFICIAL_LINES, *extra_errors]
    errors = [m["text"].strip() for line in lines if (m := official._ERROR.match(line))]
    theirs = official.OfficialReport(argv=["x"], cwd=".", returncode=1, errors=errors,
                                     no_results=[f"{ROOT}{SC}/performance/run_1/mlperf_log_detail.txt"])
    return ours, theirs


def test_real_log_lines_are_read() -> None:
    _, theirs = reports()
    assert len(theirs.errors) == len(OFFICIAL_LINES)
    assert theirs.errors[1].endswith("Test duration less than 600s in user config. expected=600000, found=1000")


def test_named_deviations_explain_the_rejection() -> None:
    diffs = official.compare(*reports())
    assert [d.kind for d in diffs] == ["verdict", "rejected-by-official"] and all(d.expected for d in diffs)
    names = "accuracy-coverage, min-duration, performance-sample-count"
    assert all(d.line().startswith("EXPECTED") and names in d.line() for d in diffs), [d.line() for d in diffs]


def test_an_unexplained_official_error_still_differs() -> None:
    seeds = (f"[2026-12-01 14:13:44,337 performance_check.py:228 ERROR] {ROOT}{SC}/performance/run_1/"
             "mlperf_log_detail.txt qsl_rng_seed is wrong, expected=1, found=2")
    diffs = official.compare(*reports((seeds,)))
    assert diffs and not any(d.expected for d in diffs)
    assert all(d.line().startswith("DIFFERS") for d in diffs)
    assert "qsl_rng_seed is wrong" in diffs[1].message


def test_a_deviation_of_another_folder_explains_nothing() -> None:
    elsewhere = [(rule, path.replace("/Offline/", "/Server/")) for rule, path in DEVIATIONS]
    diffs = official.compare(*reports(deviations=elsewhere))
    assert {d.kind for d in diffs} == {"verdict", "rejected-by-official"} and not any(d.expected for d in diffs)


def test_a_smoke_latency_bound_explains_the_official_latency_constraint() -> None:
    """The official checker's line for a smoke-vlm Server folder judged by the plan's 60 s (p99 26.0 s measured on two
    cores busy with other work, over the round's 12 s): Podium's `latency-limit` deviation explains it."""
    vlm = "open/Podium/results/cpu-smoke/tiny-llava/Server"
    latency = (f"[2026-12-05 08:41:02,101 performance_check.py:319 ERROR] {ROOT}{vlm}/performance/run_1/"
               "mlperf_log_detail.txt Latency constraint not met, expected=12000000000, found=26037103592.0")
    assert official.OFFICIAL_MESSAGES["Latency constraint not met"] == "latency-limit"
    result = ScenarioResult(division="open", submitter="Podium", system="cpu-smoke", benchmark_folder="tiny-llava",
                            benchmark="qwen3-vl-235b-a22b", scenario="Server", layout="endpoints", path=vlm)
    findings = [Finding(rule="latency-limit", severity="deviation", path=f"{vlm}/performance/result_summary.json",
                        message="(smoke profile)")]
    ours = CheckReport(round="v6.1", profile="smoke", scenarios_checked=1, findings=findings, results=[result])
    errors = [m["text"].strip() for line in (latency, OFFICIAL_LINES[-1]) if (m := official._ERROR.match(line))]
    theirs = official.OfficialReport(argv=["x"], cwd=".", returncode=1, errors=errors,
                                     no_results=[f"{ROOT}{vlm}/performance/run_1/mlperf_log_detail.txt"])
    diffs = official.compare(ours, theirs)
    assert diffs and all(d.expected for d in diffs), [d.line() for d in diffs]


def test_the_token_latency_line_is_placed_by_the_checks_closing_line() -> None:
    """The official token-latency check logs no file (performance_check.py:498 at b66003e1); the "Some performance
    checks Checks failed for: FILE" line after it places it, so a Server folder's `latency-limit` deviation explains it
    and the same deviation on another folder does not."""
    server = SC.replace("/Offline", "/Server")
    perf = f"{ROOT}{server}/performance/run_1/mlperf_log_detail.txt"
    lines = ["[2026-12-07 09:50:23,101 performance_check.py:498 ERROR] Failed extra check for TTFT and TPOT. Obtained: "
             "TTFT 99-tile: 3561.0000, TPOT 99-tile: 61.0000. Required: TTFT 99-tile: 3000.0000, TPOT 99-tile: "
             "80.0000",
             f"[2026-12-07 09:50:23,101 base.py:58 ERROR] Some performance checks Checks failed for: {perf}",
             OFFICIAL_LINES[-1]]
    errors = [m["text"].strip() for line in lines if (m := official._ERROR.match(line))]
    result = ScenarioResult(division="open", submitter="Podium", system="cpu-smoke", benchmark_folder="tiny-llama",
                            benchmark="gpt-oss-120b", scenario="Server", layout="loadgen", path=server)
    for where, expected in ((server, True), (SC, False)):
        findings = [Finding(rule="latency-limit", severity="deviation", path=f"{where}/performance/run_1",
                            message="(smoke profile)")]
        ours = CheckReport(round="v6.1", profile="smoke", scenarios_checked=1, findings=findings, results=[result])
        theirs = official.OfficialReport(argv=["x"], cwd=".", returncode=1, errors=errors, no_results=[perf])
        diffs = official.compare(ours, theirs)
        assert [d.kind for d in diffs] == ["verdict", "rejected-by-official"], where
        assert all(d.expected is expected for d in diffs), [d.line() for d in diffs]


def test_its_closing_lines_are_kept_in_either_log_format() -> None:
    """The counts and verdict the real checker ends with (main.py at b66003e1, as it printed them for a closed tree
    here), unprefixed; its per-result `Results <path> <value>` lines are not among them."""
    lines = ["[2026-12-06 08:53:41,824 main.py:231 INFO] Results /t/closed/Podium/results/s/gpt-oss-120b/Offline/"
             "performance/run_1/mlperf_log_detail.txt 13126.5",
             "[2026-12-06 08:53:41,824 main.py:314 INFO] ---",
             "[2026-12-06 08:53:41,824 main.py:315 INFO] Results=5, NoResults=0, Power Results=0",
             "[2026-12-06 08:53:41,824 main.py:323 INFO] Closed Results=5, Closed Power Results=0",
             "", "[2026-12-06 08:53:41,825 main.py:340 INFO] Systems=1, Power Systems=0",
             "[2026-12-06 08:53:41,825 main.py:354 INFO] Network Systems=0, Network Power Systems=0",
             "[2026-12-06 08:53:41,825 main.py:364 INFO] SUMMARY: submission looks OK",
             "ERROR:main:SUMMARY: submission has errors"]
    assert official.summary_lines(lines) == [
        "Results=5, NoResults=0, Power Results=0", "Closed Results=5, Closed Power Results=0",
        "Systems=1, Power Systems=0", "Network Systems=0, Network Power Systems=0", "SUMMARY: submission looks OK",
        "SUMMARY: submission has errors"]
