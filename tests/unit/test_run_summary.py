"""The one log line per loadgen run names only what the run measured."""

from submission.runs import RunRecord
from tasks.loadgen import summary

BASE = {"key": "k", "system": "cpu-smoke", "benchmark": "gpt-oss-120b", "run_dir": "/r"}


def test_performance_and_accuracy_runs() -> None:
    server = RunRecord(**BASE, scenario="Server", mode="performance", valid=True, validity="VALID", metric=386.874,
                       unit="Tokens/s", ttft_p99_ms=23.383, tpot_p99_ms=6.563)
    assert summary(server) == "VALID, 386.874 Tokens/s, TTFT p99 23.383 ms, TPOT p99 6.563 ms"
    offline = RunRecord(**BASE, scenario="Offline", mode="performance", valid=False, validity="INVALID",
                        metric=1594.1, unit="Tokens/s")
    assert summary(offline) == "INVALID, 1594.1 Tokens/s"
    accuracy = RunRecord(**BASE, scenario="Offline", mode="accuracy", valid=None, validity=None,
                         accuracy_metric="exact_match", accuracy=100.0)
    assert summary(accuracy) == "exact_match 100"
    assert summary(RunRecord(**BASE, scenario="Offline", mode="accuracy", valid=None, validity=None)) == "no result"
