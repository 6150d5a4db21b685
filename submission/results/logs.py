"""Loadgen log parsing: `mlperf_log_detail.txt`, `mlperf_log_summary.txt` and `mlperf_log_accuracy.json`.

Key names are the ones mlcommons-loadgen 6.0.17 writes (checked against real runs, `tests/loadgen_fake.py`).
A repeated detail key keeps its last value. A malformed line is skipped and recorded as a warning.
Accuracy-mode runs log no `result_*` keys, so their validity is None.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from submission.base.errors import RunFailed

DETAIL_FILE = "mlperf_log_detail.txt"
SUMMARY_FILE = "mlperf_log_summary.txt"
MLLOG_PREFIX = ":::MLLOG "
SEED_KEYS = ("qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed")
_STAT = r"(?:(?P<pct>\d+\.\d+)_percentile|(?P<stat>min|max|mean))"
_LATENCY = re.compile(rf"^result_{_STAT}_latency_ns$")
_TTFT = re.compile(rf"^result_first_token_{_STAT}_latency_ns$")
_TPOT = re.compile(
    r"^result_time_(?:per_output_token_(?P<pct>\d+\.\d+)_percentile_ns"
    r"|to_output_token_(?P<stat>min|max|mean))$"
)
_FROZEN = ConfigDict(frozen=True, extra="forbid")


class DetailLog(BaseModel):
    """Every key of a detail log (last value wins), its error and warning messages (unique, in order)."""

    model_config = _FROZEN
    values: dict[str, Any]
    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    error_count: int = 0  # error entries, repeats included

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


class RunSettings(BaseModel):
    """The effective (or, where loadgen logs only those, requested) settings a checker needs."""

    model_config = _FROZEN
    min_duration_ms: int | None = None
    min_query_count: int | None = None
    samples_per_query: int | None = None
    target_qps: float | None = None
    target_latency_ns: int | None = None
    performance_sample_count: int | None = None
    accuracy_sample_count: int | None = None
    use_token_latencies: bool | None = None
    ttft_latency_ns: int | None = None  # requested_server_ttft_latency; logged in Server only
    tpot_latency_ns: int | None = None  # requested_server_tpot_latency; logged in Server only
    sample_concatenate_permutation: bool | None = None
    performance_issue_unique: bool | None = None


_SETTING_KEYS: dict[str, tuple[str, type]] = {
    "min_duration_ms": ("effective_min_duration_ms", int),
    "min_query_count": ("effective_min_query_count", int),
    "samples_per_query": ("effective_samples_per_query", int),
    "target_qps": ("effective_target_qps", float),
    "target_latency_ns": ("effective_target_latency_ns", int),
    "performance_sample_count": ("effective_performance_sample_count", int),
    "accuracy_sample_count": ("effective_accuracy_sample_count", int),
    "use_token_latencies": ("requested_use_token_latencies", bool),
    "ttft_latency_ns": ("requested_server_ttft_latency", int),
    "tpot_latency_ns": ("requested_server_tpot_latency", int),
    "sample_concatenate_permutation": ("effective_sample_concatenate_permutation", bool),
    "performance_issue_unique": ("effective_performance_issue_unique", bool),
}


class LoadgenRun(BaseModel):
    """One loadgen run, typed. `detail` keeps every raw key and is left out of serialisation."""

    model_config = _FROZEN
    folder: Path
    scenario: str | None = None
    mode: str | None = None
    loadgen_version: str | None = None
    validity: str | None = None  # "VALID" / "INVALID"; None for accuracy runs (loadgen logs no result there)
    valid: bool = False
    perf_constraints_met: bool | None = None
    min_duration_met: bool | None = None
    min_queries_met: bool | None = None
    early_stopping_met: bool | None = None
    invalid_reasons: tuple[str, ...] = ()
    num_errors: int = 0
    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    seeds: dict[str, int] = Field(default_factory=dict)
    settings: RunSettings = RunSettings()
    samples_per_second: float | None = None
    tokens_per_second: float | None = None
    completed_samples_per_second: float | None = None
    completed_tokens_per_second: float | None = None
    ttft_p99_ns: int | None = None
    tpot_p99_ns: int | None = None
    latency_ns: dict[str, int] = Field(default_factory=dict)
    ttft_ns: dict[str, int] = Field(default_factory=dict)
    tpot_ns: dict[str, int] = Field(default_factory=dict)
    generated_query_count: int | None = None
    generated_samples_per_query: int | None = None
    qsl_total_count: int | None = None
    summary: dict[str, str] = Field(default_factory=dict)
    detail: DetailLog = Field(exclude=True)

    def result(self, field: str) -> float | None:
        """A numeric result from the detail log, e.g. `result_tokens_per_second`; None if absent or not a number."""
        return _number(self.detail.get(field))


class AccuracyEntry(BaseModel):
    """One entry of `mlperf_log_accuracy.json`; `data`/`token_data` are hex of little-endian int32 token ids."""

    model_config = ConfigDict(frozen=True)
    seq_id: int
    qsl_idx: int
    data: str
    token_count: int | None = None
    token_data: str | None = None

    def tokens(self) -> list[int]:
        return _int32s(self.data)

    def first_tokens(self) -> list[int] | None:
        return None if self.token_data is None else _int32s(self.token_data)


def parse_detail(path: Path) -> DetailLog:
    """Parse `:::MLLOG {json}` lines; never raises on a bad line (it becomes a warning)."""
    values: dict[str, Any] = {}
    errors: dict[str, None] = {}
    warnings: dict[str, None] = {}
    error_count = 0
    for number, line in enumerate(Path(path).read_text(errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line.split(MLLOG_PREFIX, 1)[1])
            key, value, meta = entry["key"], entry.get("value"), entry.get("metadata")
            if not isinstance(key, str):
                raise TypeError(key)
        except (IndexError, ValueError, KeyError, TypeError, AttributeError):
            warnings[f"{Path(path).name} line {number}: not a ':::MLLOG {{json}}' entry, skipped"] = None
            continue
        values[key] = value
        meta = meta if isinstance(meta, dict) else {}
        text = value if isinstance(value, str) else json.dumps(value)
        if meta.get("is_error"):
            errors[text] = None
            error_count += 1
        if meta.get("is_warning"):
            warnings[text] = None
    return DetailLog(values=values, errors=tuple(errors), warnings=tuple(warnings), error_count=error_count)


def parse_summary(path: Path) -> tuple[dict[str, str], list[str]]:
    """`key : value` lines (last wins) and the results section's `*` lines, continuation lines joined."""
    values: dict[str, str] = {}
    stars: list[str] = []
    in_results = True  # until the "Additional Stats" banner that follows "Result is"
    for line in Path(path).read_text(errors="replace").splitlines():
        text = line.strip()
        if text.startswith("=") and "Result is" in values:
            in_results = False
        if in_results and text.startswith("*"):
            stars.append(text.lstrip("* ").strip())
        elif in_results and stars and line.startswith(" ") and text and ":" not in text and stars[-1][-1:] != ".":
            stars[-1] += " " + text
        elif ":" in text:
            key, value = text.split(":", 1)
            values[key.strip()] = value.strip()
    return values, stars


def load_run(folder: Path) -> LoadgenRun:
    """Parse one loadgen output folder. Raises RunFailed if the detail log is missing or empty."""
    folder = Path(folder)
    detail_path = folder / DETAIL_FILE
    if not detail_path.is_file() or detail_path.stat().st_size == 0:
        state = "is empty" if detail_path.is_file() else "does not exist"
        raise RunFailed(
            f"loadgen detail log {detail_path} {state}",
            fix="check that loadgen ran to the end with log_output.outdir set to this folder, then rerun the step",
        )
    detail = parse_detail(detail_path)
    summary: dict[str, str] = {}
    stars: list[str] = []
    if (folder / SUMMARY_FILE).is_file():
        summary, stars = parse_summary(folder / SUMMARY_FILE)

    def get(key: str, kind: type = str) -> Any:
        return _as(detail.get(key), kind)

    validity = get("result_validity") or summary.get("Result is")
    stats = {name: _stats(detail.values, pattern) for name, pattern in (("l", _LATENCY), ("t", _TTFT), ("p", _TPOT))}
    return LoadgenRun(
        folder=folder,
        scenario=get("effective_scenario"),
        mode=get("effective_test_mode"),
        loadgen_version=get("loadgen_version"),
        validity=validity,
        valid=validity == "VALID",
        perf_constraints_met=get("result_perf_constraints_met", bool),
        min_duration_met=get("result_min_duration_met", bool),
        min_queries_met=get("result_min_queries_met", bool),
        early_stopping_met=get("early_stopping_met", bool),
        invalid_reasons=_invalid_reasons(detail, validity, stars),
        num_errors=max(detail.error_count, get("num_errors", int) or 0),
        errors=detail.errors,
        warnings=detail.warnings,
        seeds={key: seed for key in SEED_KEYS if (seed := get(f"effective_{key}", int)) is not None},
        settings=RunSettings(**{name: get(key, kind) for name, (key, kind) in _SETTING_KEYS.items()}),
        samples_per_second=get("result_samples_per_second", float),
        tokens_per_second=get("result_tokens_per_second", float),
        completed_samples_per_second=get("result_completed_samples_per_sec", float),
        completed_tokens_per_second=get("result_completed_tokens_per_second", float),
        ttft_p99_ns=stats["t"].get("99.00"),
        tpot_p99_ns=stats["p"].get("99.00"),
        latency_ns=stats["l"],
        ttft_ns=stats["t"],
        tpot_ns=stats["p"],
        generated_query_count=get("generated_query_count", int),
        generated_samples_per_query=get("generated_samples_per_query", int),
        qsl_total_count=get("qsl_reported_total_count", int),
        summary=summary,
        detail=detail,
    )


# loadgen's `power_begin` and `power_end`: the bounds of the measured phase (what a power measurement is judged over),
# in UTC (loadgen 6.0.17 under TZ=America/New_York logged the UTC time) and the format the official checker parses
# (tools/submission/submission_checker/checks/power_check.py)
POWER_FORMAT = "%m-%d-%Y %H:%M:%S.%f"


def measured_window(folder: Path) -> tuple[float, float] | None:
    """A loadgen run's measured phase as UNIX seconds, `power_begin` to `power_end` of its detail log; None when it
    has neither (each run's telemetry marks it: tasks/clients.py `window`)."""
    path = Path(folder) / DETAIL_FILE
    detail = parse_detail(path) if path.is_file() else None
    begin, end = (detail.get("power_begin"), detail.get("power_end")) if detail else (None, None)
    if not begin or not end:
        return None
    start, stop = (datetime.strptime(v, POWER_FORMAT).replace(tzinfo=UTC).timestamp() for v in (begin, end))
    return start, stop


def parse_accuracy_log(path: Path) -> list[AccuracyEntry]:
    """All entries of `mlperf_log_accuracy.json` (a JSON array). Raises RunFailed if it is missing or unreadable."""
    try:
        return [AccuracyEntry.model_validate(item) for item in json.loads(Path(path).read_text())]
    except (OSError, ValueError, TypeError) as error:  # pydantic's ValidationError is a ValueError
        raise RunFailed(
            f"loadgen accuracy log {path} is missing or not a JSON array of entries ({type(error).__name__})",
            fix="rerun the accuracy step; loadgen writes the whole file only when the run ends",
        ) from error


def _invalid_reasons(detail: DetailLog, validity: str | None, stars: list[str]) -> tuple[str, ...]:
    reasons = [text] if (text := str(detail.get("result_invalid_reason") or "").strip()) else []
    if validity is None or validity == "VALID":
        return tuple(reasons)
    if detail.get("early_stopping_met") is False:
        for which in ("ttft", "tpot"):
            raw = str(detail.get(f"early_stopping_{which}_result") or "")
            if text := " ".join(part.strip() for part in raw.split("*") if part.strip()):
                reasons.append(f"{which.upper()} early stopping: {' '.join(text.split())}")
    for star in stars:
        if star != "Run successful." and not any(star in reason for reason in reasons):
            reasons.append(star)
    return tuple(reasons)


def _stats(values: dict[str, Any], pattern: re.Pattern[str]) -> dict[str, int]:
    found: dict[str, int] = {}
    for key, value in values.items():
        if (match := pattern.match(key)) and (number := _number(value)) is not None:
            found[match["pct"] or match["stat"]] = round(number)
    return found


def _as(value: Any, kind: type) -> Any:
    """`value` if it has the expected JSON type, else None: a wrong type never crashes the parser."""
    if kind is float:
        return _number(value)
    if kind is int and isinstance(value, bool):
        return None
    return value if isinstance(value, kind) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _int32s(hex_text: str) -> list[int]:
    raw = bytes.fromhex(hex_text)
    return [int.from_bytes(raw[i : i + 4], "little", signed=True) for i in range(0, len(raw) - len(raw) % 4, 4)]
