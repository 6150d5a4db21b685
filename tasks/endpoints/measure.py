"""One endpoints client run measured, scored and judged: the plain function under the endpoints-run task
(tasks.run_step), the peer of `tasks.harness.measure`.

Judged as the official v6.1 checker judges an endpoints folder (submission/checks/endpoints.py): a performance run is
VALID when no sample failed and the early-stopping p99 of each limited latency is within its limit (Qwen3-VL: the
end-to-end latency, 12 s Server, 1.5 s Interactive; a p99 the client could not estimate is no pass). Podium adds the
minimum duration: a run that ended sooner (an Offline engine faster than its target_qps sized the run for) is INVALID
too. A run with accuracy (`--mode both`: one client run per scenario, its report holding both results) is gated on
the client's own score against the round's target, the score the checker reads (accuracy/accuracy_results.json
`accuracy_score`); the plan's evaluator (the benchmark's reference one unless the plan names another) scores the same
answers (tasks.endpoints.answers) as a cross-check: both scores are in the record, and a warning says when they differ
by more than AGREE, which fails nothing on its own. Under the smoke profile (a tiny model standing in) the accuracy
verdict is reported, not gated on. Under a rehearsal's accelerated clock a performance run INVALID for its latency alone
(`latency_alone`) is measured again on a slower client clock first (tasks.clock).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

from submission.base.errors import CommandError, LaunchError, RunFailed
from submission.plan import client_length
from submission.plan.selection import rerun
from submission.results.runs import RunRecord, RunSpec
from submission.rules import Rules, ScenarioRules, load_rules
from tasks.accuracy import AccuracyResult, score
from tasks.endpoints import answers, runner
from tasks.endpoints import config as client_config
from tasks.endpoints.results import ClientResult
from tasks.measuring import Engine, RunRejected, on_slower_clocks, problems, set_aside, utc_now
from tasks.serving import telemetry

log = logging.getLogger(__name__)
AGREE = 1e-6   # the client's score and the evaluator's on the same answers agree within it (both print 7 digits)


def limits(sc: ScenarioRules, spec: RunSpec | None = None) -> list[tuple[str, str, float]]:
    """(name, ClientResult field, limit in ms) of each p99 the scenario limits; a smoke run's `target_latency` line
    (the plan's `latency_ms`, a named smoke deviation) replaces the latency limit."""
    smoke = client_config.smoke_latency_ms(spec) if spec is not None else None
    named = (("TTFT", "ttft_p99_ms", sc.ttft_ms), ("TPOT", "tpot_p99_ms", sc.tpot_ms),
             ("latency", "latency_p99_ms", smoke if smoke is not None and sc.latency_ms else sc.latency_ms))
    return [(name, field, limit) for name, field, limit in named if limit]


def over_limits(sc: ScenarioRules, result: ClientResult, spec: RunSpec | None = None) -> list[str]:
    """Each early-stopping p99 over its limit: the latency part of the verdict."""
    return [f"p99 {name} (early stopping) {p99:g} ms exceeds {limit:g} ms" for name, field, limit in limits(sc, spec)
            if (p99 := getattr(result, field)) is not None and p99 > limit]


def invalid_reasons(spec: RunSpec, result: ClientResult, rules: Rules) -> list[str]:
    """Why a performance run is INVALID (none: VALID)."""
    sc = rules.benchmark(spec.benchmark).scenario(spec.scenario)
    reasons = [f"the client could not estimate the early-stopping p99 {name} (too few samples)"
               for name, field, _ in limits(sc, spec) if getattr(result, field) is None]
    reasons += over_limits(sc, result, spec)
    minimum = client_config.min_duration_ms(spec, rules)
    if result.duration_s * 1000 < minimum:
        reasons.append(f"the run took {result.duration_s:.1f} s, under its min duration of {minimum / 1000:g} s")
    return reasons


def latency_alone(spec: RunSpec, result: ClientResult, rules: Rules) -> bool:
    """Whether a performance run is INVALID for its latency alone, the verdict a slower client clock can change
    (tasks.clock): some early-stopping p99 is over its limit, and the client estimated every p99, ran its min
    duration and had no failed sample."""
    if spec.mode != "performance" or result.failed:
        return False
    over = over_limits(rules.benchmark(spec.benchmark).scenario(spec.scenario), result, spec)
    return bool(over) and invalid_reasons(spec, result, rules) == over


def resize(spec: RunSpec, result: ClientResult, reasons: list[str]) -> str | None:
    """The fix for an Offline run that ended before its minimum duration: the client issues whole passes of
    1.1 x target_qps x min duration samples (submission/plan/client_length.py), so an engine faster than target_qps
    says finishes them too soon; the smallest target that lasts at the measured rate (a smoke set's rows are its own:
    half again the measured rate there)."""
    if spec.loadgen_scenario != "Offline" or not result.qps or not any("min duration" in r for r in reasons):
        return None
    minimum = client_config.min_duration_ms(spec, load_rules(spec.round))
    smallest = (client_length.smallest_offline_target(result.qps, minimum, client_config.client_dataset(spec)[2])
                if spec.profile == "submission" else math.ceil(1.5 * result.qps))
    return (f"the engine did {result.qps:.1f} samples/s, more than the Offline target_qps sized the run for: set "
            f"benchmarks[{spec.benchmark}].scenarios.{spec.scenario}.target_qps to at least {smallest} and "
            f"expected_qps: {result.qps:.0f}, and run the plan again "
            f"({rerun(spec.system, spec.benchmark, spec.scenario)})")


def client_passes(spec: RunSpec, score: float | None, rules: Rules) -> bool:
    """The accuracy verdict the checker gives: the client's score against the round's headline target (the client
    scores that metric alone: Qwen3-VL's hierarchical F1)."""
    target = rules.benchmark(spec.benchmark).scenario(spec.scenario).accuracy[0]
    return score is not None and target.passes(score)


def cross_check(spec: RunSpec, result: ClientResult, scored: AccuracyResult, metric: str,
                evaluator: str) -> tuple[str, ...]:
    """The warning when the evaluator's score of the client's answers differs from the client's own."""
    ours = scored.metrics.get(metric)
    if ours is not None and result.accuracy is not None and abs(ours - result.accuracy) <= AGREE:
        return ()
    return (f"{spec.label}: the endpoints client scored {metric} {result.accuracy}, Podium's {evaluator} evaluator "
            f"{ours} on the same answers (accuracy.txt beside the client's report); the verdict is the client's, "
            "as the checker's",)


def record(spec: RunSpec, run_dir: Path, result: ClientResult, rules: Rules, scored: AccuracyResult | None, *,
           evaluator: str | None = None, flow_run_id: str | None = None, started_at: str | None = None,
           ended_at: str | None = None, clock: float | None = None) -> RunRecord:
    """The results row of an endpoints run: the client's own numbers, Podium's verdict; with `scored` (the
    evaluator's score of its answers) the client's accuracy score, gated on, and the evaluator's as a cross-check."""
    sc = rules.benchmark(spec.benchmark).scenario(spec.scenario)
    fields: dict = {}
    if spec.mode == "performance":
        reasons = invalid_reasons(spec, result, rules)
        fields = {"valid": not reasons, "validity": "INVALID" if reasons else "VALID", "invalid_reasons": reasons,
                  "metric": result.qps, "unit": sc.unit}
    if scored is not None:   # the smoke profile's stand-in model is reported against the target, never gated on it
        metric = sc.accuracy[0].metric
        fields |= {"accuracy_metric": metric, "accuracy": result.accuracy,
                   "accuracy_pass": None if spec.profile == "smoke" else client_passes(spec, result.accuracy, rules),
                   "accuracy_reference": scored.metrics.get(metric),
                   "warnings": cross_check(spec, result, scored, metric, evaluator or spec.benchmark)}
    return RunRecord(key=spec.key(), system=spec.system, benchmark=spec.benchmark, scenario=spec.scenario,
                     mode=spec.mode, run_dir=str(run_dir), harness="endpoints", valid=fields.pop("valid", None),
                     validity=fields.pop("validity", None), ttft_p99_ms=result.ttft_p99_ms,
                     tpot_p99_ms=result.tpot_p99_ms, latency_p99_ms=result.latency_p99_ms,
                     sut_failures=result.failed, token_source="endpoints client",
                     wall_s=round(result.duration_s if result.wall_s is None else result.wall_s, 3),
                     flow_run_id=flow_run_id, started_at=started_at,
                     ended_at=ended_at, clock=clock, **fields)


def score_answers(spec: RunSpec, run_dir: Path, evaluator: str | None, tokenizer: Path | None) -> AccuracyResult:
    """Score the client's answers with the plan's evaluator (accuracy.txt in the run folder, beside the client's
    report): the cross-check of the client's own score."""
    answers.write_accuracy_log(run_dir / client_config.REPORT, run_dir / answers.ACCURACY_LOG)
    return score(evaluator or spec.benchmark, run_dir, Path(spec.dataset), tokenizer, benchmark=spec.benchmark,
                 scenario=spec.scenario, round=spec.round)


def run_once(spec: RunSpec, engine: Engine, work_dir: Path, evaluator: str | None, tokenizer: str | None,
             flow_run_id: str | None = None) -> RunRecord:
    """Run, score and judge one endpoints client run; `tokenizer`: the staged model's tokenizer.json (the client
    reads the folder it is in)."""
    run_dir = work_dir / "runs" / spec.key()
    if run_dir.exists():   # a failed attempt's partial logs: kept apart, never reused
        set_aside(run_dir)
    endpoint = engine.endpoint()
    model_dir = Path(tokenizer).parent if tokenizer else None
    rules = load_rules(spec.round)

    def measure(speed: float | None) -> tuple[str, ClientResult]:
        started_at = utc_now()
        with telemetry.sampling(run_dir, endpoint, spec.engine, spec.harness):
            return started_at, runner.run(spec, endpoint, run_dir, tokenizer=model_dir or Path(spec.dataset).parent,
                                          data_dir=work_dir / "endpoints-data", speed=speed)

    try:
        (started_at, result), speed = on_slower_clocks(spec.label, run_dir, measure,
                                                       lambda measured: latency_alone(spec, measured[1], rules))
    except (CommandError, RunFailed) as error:
        if engine.alive():
            raise
        report = engine.log_report()
        engine.close()
        raise LaunchError(f"{spec.label}: the engine stopped during the endpoints client run; the run's partial "
                          f"logs are set aside in {set_aside(run_dir)}\n{error}\n{report}",
                          fix="read the engine log; the step is retried once on a relaunched engine") from None
    ended_at = utc_now()
    scored = None
    if client_config.with_accuracy(spec):
        scored = score_answers(spec, run_dir, evaluator, tokenizer and Path(tokenizer))
    rec = record(spec, run_dir, result, rules, scored, evaluator=evaluator, flow_run_id=flow_run_id,
                 started_at=started_at, ended_at=ended_at, clock=speed)
    for warning in rec.warnings:
        log.warning("%s", warning)
    found = problems(rec)
    if found:
        raise RunRejected(f"{spec.label}: {'; '.join(found)}", rec,
                          fix=resize(spec, result, list(rec.invalid_reasons)))
    return rec
