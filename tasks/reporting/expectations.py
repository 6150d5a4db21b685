"""Data checks over the results table: a great-expectations suite built from the round's rules.

One row per loadgen run (`RunRecord`). The suite asks: is there at least one row; is every performance run VALID,
with a positive metric and no loadgen or request errors; does each scenario's p99 TTFT, TPOT and latency stay
within the rules' limits; does each judged accuracy run reach the rules' floor (and stay under any upper limit; a
smoke plan's stand-in model measured by the endpoints client is reported, not judged: `accuracy_pass` None). Every
bound comes from `submission.rules` for the run's round, never from this file.

`validate(rows, round)` returns a plain `Validation` (success, statistics, the failures with the offending values
and run labels); `write()` stores it as `validation.json` in the run folder, which `publish` uploads with the rest.
great-expectations is imported only when a suite runs (it takes seconds), with its progress bars off.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prefect import task

from submission.results.runs import RunRecord

SUITE = "podium-results"
RESULT_FILE = "validation.json"
COLUMNS = tuple(RunRecord.model_fields)


@dataclass(frozen=True)
class Failure:
    check: str              # what the rule says, e.g. "Server TTFT p99 <= 3000 ms (rules v6.1)"
    expectation: str        # the great-expectations type
    column: str | None
    values: list[Any]       # the offending values (first 20)
    runs: list[str]         # labels of the offending rows


@dataclass(frozen=True)
class Validation:
    suite: str
    round: str
    success: bool
    rows: int
    evaluated: int
    failed: int
    failures: list[Failure] = field(default_factory=list)

    def summary(self) -> str:
        verdict = "passed" if self.success else "FAILED"
        return f"{self.suite} {verdict}: {self.evaluated - self.failed}/{self.evaluated} expectations over " \
               f"{self.rows} row(s)"

    def markdown(self) -> str:
        lines = [f"## Data checks ({self.suite}, rules {self.round})", "", self.summary(), ""]
        if self.failures:
            lines += ["| check | column | values | runs |", "|---|---|---|---|"]
            lines += [f"| {f.check} | {f.column or '-'} | {', '.join(map(str, f.values[:5]))} | "
                      f"{', '.join(f.runs[:5])} |" for f in self.failures]
        return "\n".join(lines) + "\n"


def frame(rows: list[RunRecord] | list[dict]) -> Any:
    """The results table as a DataFrame with every RunRecord column (and `label`), even when empty."""
    import pandas as pd

    dicts = [r.model_dump(mode="json") if isinstance(r, RunRecord) else dict(r) for r in rows]
    table = pd.DataFrame(dicts, columns=list(COLUMNS))
    table["label"] = [f"{d.get('system')}/{d.get('benchmark')}/{d.get('scenario')}/{d.get('mode')}" for d in dicts]
    return table


def checks(table: Any, round: str, relaxed: Mapping[tuple[str, str], Mapping[str, float]] | None = None,
           ) -> list[tuple[str, Any]]:
    """(description, expectation) pairs for this table under the round's rules; `relaxed`: a smoke plan's own
    latency bounds by (benchmark, scenario), each by what it bounds (ttft, tpot, latency), its named deviation (the
    plan's `scenarios.<name>.ttft_ms`, `tpot_ms`, `latency_ms`: ScenarioSpec.relaxed_limits)."""
    import great_expectations as gx
    from great_expectations.expectations.row_conditions import AndCondition
    from great_expectations.expectations.row_conditions import Column as Col

    from submission.rules import load_rules

    ex = gx.expectations
    rules = load_rules(round)
    perf = Col("mode") == "performance"
    out: list[tuple[str, Any]] = [
        ("at least one result row", ex.ExpectTableRowCountToBeBetween(min_value=1)),
        ("every performance run is VALID", ex.ExpectColumnValuesToBeInSet(
            column="validity", value_set=["VALID"], row_condition=perf)),
        ("every performance run has a metric", ex.ExpectColumnValuesToNotBeNull(
            column="metric", row_condition=perf)),
        ("every metric is positive", ex.ExpectColumnValuesToBeBetween(
            column="metric", min_value=0, strict_min=True, row_condition=perf)),
        ("no loadgen errors", ex.ExpectColumnValuesToBeBetween(column="num_errors", min_value=0, max_value=0)),
        ("no failed requests", ex.ExpectColumnValuesToBeBetween(column="sut_failures", min_value=0, max_value=0)),
    ]
    pairs = sorted({(b, s) for b, s in zip(table["benchmark"], table["scenario"], strict=True)
                    if b in rules.benchmarks})
    for bench, scenario in pairs:
        try:
            sc = rules.benchmark(bench).scenario(scenario)
        except Exception:  # a scenario the round does not have: the plan loader refuses those already
            continue
        where = [Col("benchmark") == bench, Col("scenario") == scenario]
        own = (relaxed or {}).get((bench, scenario), {})
        for column, limit, name in (("ttft_p99_ms", sc.ttft_ms, "TTFT"), ("tpot_p99_ms", sc.tpot_ms, "TPOT"),
                                    ("latency_p99_ms", sc.latency_ms, "latency")):
            if limit is not None:
                limit = own.get(name.lower(), limit)
                out.append((f"{bench} {scenario} {name} p99 <= {limit:g} ms", ex.ExpectColumnValuesToBeBetween(
                    column=column, max_value=limit, row_condition=AndCondition(conditions=[perf, *where]))))
        accuracy_rows = AndCondition(conditions=[Col("mode") == "accuracy", *where])
        for target in sc.accuracy:   # rows judged against it: a smoke stand-in's score is reported, not judged
            rows = AndCondition(conditions=[Col("mode") == "accuracy", *where, Col("accuracy_pass").is_not_null(),
                                            Col("accuracy_metric") == target.metric])
            if target.target is not None:
                out.append((f"{bench} {scenario} {target.metric} is reported", ex.ExpectColumnValuesToNotBeNull(
                    column="accuracy", row_condition=accuracy_rows)))
            if target.target is not None or target.upper_limit is not None:
                bound = " and ".join(x for x in (
                    f">= {target.target:g}" if target.target is not None else "",
                    f"<= {target.upper_limit:g}" if target.upper_limit is not None else "") if x)
                out.append((f"{bench} {scenario} {target.metric} {bound}", ex.ExpectColumnValuesToBeBetween(
                    column="accuracy", min_value=target.target, max_value=target.upper_limit, row_condition=rows)))
    return out


def validate(rows: list[RunRecord] | list[dict], round: str,
             relaxed: Mapping[tuple[str, str], Mapping[str, float]] | None = None) -> Validation:
    """Run the suite over the rows; never raises for failed expectations (they are in the result)."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    table = frame(rows)
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    batch = context.data_sources.add_pandas("podium").add_dataframe_asset("results") \
        .add_batch_definition_whole_dataframe("all").get_batch(batch_parameters={"dataframe": table})
    suite = gx.ExpectationSuite(name=SUITE)
    for text, expectation in checks(table, round, relaxed):
        expectation.meta = {"check": text}
        suite.add_expectation(expectation)
    suite = context.suites.add(suite)
    result = batch.validate(suite, result_format="COMPLETE")
    failures = []
    for r in result.results:
        if r.success:
            continue
        indices = r.result.get("partial_unexpected_index_list") or []
        failures.append(Failure(
            check=(r.expectation_config.meta or {}).get("check", r.expectation_config.type),
            expectation=r.expectation_config.type,
            column=r.expectation_config.kwargs.get("column"),
            values=[_plain(v) for v in (r.result.get("partial_unexpected_list") or [r.result.get("observed_value")])][
                :20], runs=[str(table["label"].iloc[i]) for i in indices if isinstance(i, int) and i < len(table)]))
    stats = result.statistics
    return Validation(suite=SUITE, round=round, success=bool(result.success), rows=len(table),
                      evaluated=int(stats["evaluated_expectations"]),
                      failed=int(stats["unsuccessful_expectations"]), failures=failures)


def write(report: Validation, folder: Path) -> Path:
    path = Path(folder) / RESULT_FILE
    path.write_text(json.dumps(asdict(report), indent=2))
    return path


def _plain(value: Any) -> Any:
    """JSON-safe scalars (numpy types, NaN) for the stored result."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value != value:
        return None
    return value


@task(name="validate-results")
def validate_results(rows: list[dict], round: str, folder: str,
                     relaxed: Mapping[tuple[str, str], Mapping[str, float]] | None = None) -> dict:
    """Run the suite after a flow: store `validation.json` in the run folder and show it as an artifact."""
    from prefect import get_run_logger
    from prefect.artifacts import create_markdown_artifact

    report = validate(rows, round, relaxed)
    write(report, Path(folder))
    create_markdown_artifact(key="validation", markdown=report.markdown(), description=report.summary())
    logger = get_run_logger()
    (logger.info if report.success else logger.error)(report.summary())
    for failure in report.failures:
        logger.error("data check failed: %s: %s (%s)", failure.check, failure.values[:5], ", ".join(failure.runs[:5]))
    return asdict(report) | {"markdown": report.markdown(), "summary": report.summary()}
