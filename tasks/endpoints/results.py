"""What an endpoints client run measured, read from its report folder.

- `performance/result_summary.json`: samples issued, completed and failed, `qps`, and for TTFT, TPOT and latency the
  early-stopping percentiles (`early_stopping_percentiles`, in ns; the checker judges latency by its "99.0" entry,
  which is null when too few samples were measured to estimate it);
- `accuracy/accuracy_results.json` (accuracy runs): each data set's `score`, the hierarchical F1 for
  `shopify_category_f1`;
- `events.jsonl`: why samples failed (`error.*` events, their message third in `data`).

The client exits 0 even when every sample failed, and calls a run complete when it stopped waiting for answers; a run
with failed samples, or with samples issued and never completed, is an error here, with its reasons.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from submission.base.errors import RunFailed
from submission.results.runs import CLIENT_REPORT

SUMMARY = Path("performance") / "result_summary.json"
ACCURACY = Path("accuracy") / "accuracy_results.json"
EVENTS = "events.jsonl"
P99 = "99.0"


@dataclass(frozen=True)
class ClientResult:
    report_dir: str
    issued: int
    completed: int
    failed: int
    qps: float | None
    duration_s: float
    ttft_p99_ms: float | None       # early-stopping p99 estimates; None when the client could not estimate them
    tpot_p99_ms: float | None
    latency_p99_ms: float | None
    accuracy: float | None = None   # the accuracy data set's score (Qwen3-VL: hierarchical F1), accuracy runs only
    # the client invocation's wall seconds (start-up, the performance and accuracy phases, their drains): what the run
    # held the engine for, on the client's clock; `duration_s` is the performance phase as its report states it
    wall_s: float | None = None


def _p99_ms(summary: dict[str, Any], metric: str) -> float | None:
    value = ((summary.get(metric) or {}).get("early_stopping_percentiles") or {}).get(P99)
    return None if value is None else value / 1e6


def _json(path: Path, fix: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise RunFailed(f"the endpoints client left no readable {path.name}: {error}", where=str(path),
                        fix=fix) from None
    if not isinstance(data, dict):
        raise RunFailed(f"{path.name} is not a JSON object", where=str(path), fix=fix)
    return data


def failure_reasons(report_dir: Path, limit: int = 3) -> list[str]:
    """The most frequent error messages of the run's `error.*` events, with their counts."""
    counts: Counter[str] = Counter()
    events = report_dir / EVENTS
    lines = events.read_text(errors="replace").splitlines() if events.exists() else []
    for line in lines:
        if '"error.' not in line:
            continue
        data = json.loads(line).get("data") or []
        counts[str(data[-1]) if data else "no message"] += 1
    return [f"{n} x {message}" for message, n in counts.most_common(limit)]


def query_times(report_dir: Path) -> dict[str, list] | None:
    """Per-sample times from the run's events (`sample.issued`, `sample.recv_first`, `sample.complete`, by
    `sample_uuid`), in seconds since the first issue, for the search's overload signals (tasks.tuning.overload); the
    client logs no token counts there. None when the run has no events file."""
    events = report_dir / EVENTS
    if not events.is_file():
        return None
    seen: dict[str, dict[str, float]] = {}
    names = {"sample.issued": "issued", "sample.recv_first": "first", "sample.complete": "done"}
    for line in events.read_text(errors="replace").splitlines():
        kind = next((name for event, name in names.items() if f'"{event}"' in line), None)
        if kind:
            event = json.loads(line)
            seen.setdefault(event["sample_uuid"], {})[kind] = event["timestamp_ns"] / 1e9
    rows = [r for r in seen.values() if "issued" in r and "done" in r]
    if not rows:
        return None
    t0 = min(r["issued"] for r in rows)
    return {"issued": [r["issued"] - t0 for r in rows], "done": [r["done"] - t0 for r in rows],
            "first": [r["first"] - t0 if "first" in r else float("nan") for r in rows]}


def measured_window(run_dir: Path) -> tuple[float, float] | None:
    """The measured phase of an endpoints client run, as UNIX seconds: its first `sample.issued` to its last
    `sample.complete` event. The client stamps events on the monotonic clock (`time.monotonic_ns()`,
    load_generator/session.py), which this host shares with it; None without events."""
    times = [json.loads(line)["timestamp_ns"] / 1e9 for line in _lines(Path(run_dir) / CLIENT_REPORT / EVENTS)
             if '"sample.issued"' in line or '"sample.complete"' in line]
    if not times:
        return None
    offset = time.time() - time.monotonic()
    return min(times) + offset, max(times) + offset


def _lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines() if path.is_file() else []


def issued(report_dir: Path) -> tuple[int, float] | None:
    """(samples issued, seconds on the client's clock) of a run as its report says, whatever its verdict: what the
    run cost (the search counts its spend by it); None when it left no readable summary."""
    try:
        summary = json.loads((Path(report_dir) / SUMMARY).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(summary, dict):
        return None
    return int(summary.get("n_samples_issued") or 0), (summary.get("duration_ns") or 0) / 1e9


def read_result(report_dir: Path, *, accuracy: bool, log: Path) -> ClientResult:
    """The run's result; RunFailed when samples failed (with the client's reasons), the run did not complete, or an
    accuracy run has no score."""
    fix = f"read the client's log {log} and the report in {report_dir}"
    summary = _json(report_dir / SUMMARY, fix)
    failed = int(summary.get("n_samples_failed") or 0)
    if failed:
        reasons = failure_reasons(report_dir) or [f"no error events in {report_dir / EVENTS}"]
        raise RunFailed(f"{failed} of {summary.get('n_samples_issued')} samples failed in the endpoints client run: "
                        f"{'; '.join(reasons)}", where=str(report_dir), fix=f"make the engine answer them; {fix}")
    if summary.get("state") != "complete" or not summary.get("complete"):
        raise RunFailed(f"the endpoints client run did not complete (state {summary.get('state')!r})",
                        where=str(report_dir / SUMMARY), fix=fix)
    issued, completed = int(summary.get("n_samples_issued") or 0), int(summary.get("n_samples_completed") or 0)
    if completed < issued:   # the client stopped waiting for them (a drain timeout): it still says "complete"
        raise RunFailed(f"{issued - completed} of {issued} samples the endpoints client issued never completed",
                        where=str(report_dir / SUMMARY), fix=f"check the drain timeouts of its config; {fix}")
    score = None
    if accuracy:
        scores = _json(report_dir / ACCURACY, fix).get("accuracy_scores") or []
        found = [s for s in scores if s.get("dataset_type") == "accuracy" and s.get("score") is not None]
        if not found or not found[0].get("complete"):
            raise RunFailed("the endpoints client scored no complete accuracy data set",
                            where=str(report_dir / ACCURACY), fix=fix)
        score = float(found[0]["score"])
    qps = summary.get("qps")
    return ClientResult(report_dir=str(report_dir), issued=issued, completed=completed, failed=failed,
                        qps=None if qps is None else float(qps), duration_s=(summary.get("duration_ns") or 0) / 1e9,
                        ttft_p99_ms=_p99_ms(summary, "ttft"), tpot_p99_ms=_p99_ms(summary, "tpot"),
                        latency_p99_ms=_p99_ms(summary, "latency"), accuracy=score)
