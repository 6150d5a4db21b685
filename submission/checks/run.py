"""Checks on one loadgen performance run (a scenario's performance/run_1, or a compliance test's).

Official (`checks/performance_check.py`, reference §2.4): performance sample count, seeds, latency (early stopping,
target latency), min query count and Offline samples per query, min duration, the LLM token-latency flag and TTFT/TPOT
limits, scenario/folder consistency, the performance metric. Podium's own (reference §2.5): an INVALID result, loadgen
errors, seeds of another round, an Interactive run configured with Server limits, the test mode, an audit.config
left in place for a main run, and for compliance runs whether the audit.config really took effect.
"""

from __future__ import annotations

from pathlib import Path

from submission.base.errors import PlanError, RunFailed
from submission.checks.findings import Context
from submission.results.logs import LoadgenRun, load_run
from submission.rules import ROUNDS, BenchmarkRules, ScenarioRules, load_rules

AUDIT_WARNING = "Found Audit Config file"  # loadgen's warning when an audit.config overrides the settings
# audit.config key -> the requested_* key loadgen logs once the audit has been applied (mlcommons-loadgen 6.0.17)
AUDIT_LOG_KEYS = {
    "mode": "requested_test_mode",
    "min_duration": "requested_min_duration_ms",
    "min_query_count": "requested_min_query_count",
    "performance_issue_unique": "requested_performance_issue_unique",
    "performance_issue_same": "requested_performance_issue_same",
    "performance_issue_same_index": "requested_performance_issue_same_index",
    "sample_concatenate_permutation": "requested_sample_concatenate_permutation",
    "accuracy_log_rng_seed": "requested_accuracy_log_rng_seed",
    "accuracy_log_sampling_target": "requested_accuracy_log_sampling_target",
}
TEST_MODES = {0: "SubmissionRun", 1: "AccuracyOnly", 2: "PerformanceOnly", 3: "FindPeakPerformance"}  # TestMode


def load(ctx: Context, rule: str, folder: Path, mode: str) -> LoadgenRun | None:
    """The loadgen run in `folder`, or None after a finding (`rule`) saying why it cannot be read. A run of another
    test mode than `mode` (AccuracyOnly, PerformanceOnly) is loaded and reported."""
    try:
        run = load_run(folder)
    except RunFailed as error:
        ctx.add(rule, folder, error.message, error.fix or "")
        return None
    if run.mode != mode:
        article = "an" if mode[0] in "AEIOU" else "a"
        ctx.add("test-mode", folder, f"the log is a {run.mode} run, not {article} {mode} one",
                f"put the {mode.removesuffix('Only').lower()}-mode run's logs here")
    return run


def seeds_round(seeds: dict[str, int], keys: tuple[str, ...]) -> str | None:
    """The round whose seeds these are, if any."""
    for name in ROUNDS:
        expected = load_rules(name).seeds.model_dump()
        if all(seeds.get(k) == expected[k] for k in keys):
            return name
    return None


def check_seeds(ctx: Context, path: Path, seeds: dict[str, int | None], keys: tuple[str, ...], fix: str) -> None:
    """The round's seeds, key by key; seeds of another round get their own rule (a log from that round's loadgen)."""
    expected = ctx.rules.seeds.model_dump()
    wrong = {k: seeds.get(k) for k in keys if seeds.get(k) != expected[k]}
    if not wrong:
        return
    found = {k: v for k, v in seeds.items() if isinstance(v, int)}
    other = seeds_round(found, keys)
    if other is not None and other != ctx.rules.round:
        ctx.add("seeds-round", path, f"the seeds are the {other} seeds, not the {ctx.rules.round} ones: a log of "
                f"the {other} loadgen in a {ctx.rules.round} tree", f"re-run with the {ctx.rules.round} loadgen")
        return
    ctx.add("seeds", path, "; ".join(f"{k} is {v}, expected {expected[k]}" for k, v in wrong.items()), fix)


def check_run(ctx: Context, run_dir: Path, b: BenchmarkRules, sc: ScenarioRules, *, audit: str | None = None,
              full: bool = True) -> LoadgenRun | None:
    """Check the performance run in `run_dir`. `audit` names the compliance test it belongs to; `full` applies the
    duration, sample-count and latency checks (the official checker does so for the main run, TEST01 and TEST04)."""
    run = load(ctx, "performance-files", run_dir, "PerformanceOnly")
    if run is None:
        return None
    if run.validity != "VALID":   # an error where the official checker judges the run (`full`), else a warning
        ctx.add("result-valid", run_dir, f"Result is {run.validity}: {'; '.join(run.invalid_reasons) or '?'}"
                + ("" if full else f" (the official checker does not judge {audit}'s performance run)"),
                "lower target_qps (Server) or raise it (Offline), then re-run", severity="error" if full else "warning")
    consistency(ctx, run_dir, run)
    if run.num_errors:
        ctx.add("loadgen-errors", run_dir, f"{run.num_errors} loadgen error(s): {'; '.join(run.errors[:3])}",
                "fix the SUT (every response needs n_tokens >= 2; first token before the last) and re-run")
    check_seeds(ctx, run_dir, dict(run.seeds), ("qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed"),
                "use the loadgen release of the round; never set seeds in user.conf")
    if run.scenario != sc.loadgen_scenario:
        ctx.add("scenario-mismatch", run_dir, f"the log's scenario is {run.scenario}, the folder is {sc.name}",
                f"put a loadgen {sc.loadgen_scenario} run in the {sc.name} folder")
    audited = any(AUDIT_WARNING in warning for warning in run.warnings)
    if audit is None and audited:
        ctx.add("audit-in-run", run_dir, "loadgen applied an audit.config to this run: it is a compliance run",
                "delete audit.config from the harness's folder and re-run the performance run")
    if audit is not None:
        check_audit(ctx, run_dir, run, b, audit, audited)
    latency_config(ctx, run_dir, run, b, sc)
    if full:
        limits(ctx, run_dir, run, b, sc)
    return run


# loadgen (results.cc) logs result_validity VALID exactly when these four are all true; the summary repeats them.
# detail key: (LoadgenRun field, summary line)
VALIDITY_PARTS = {"result_perf_constraints_met": ("perf_constraints_met", "Performance constraints satisfied"),
                  "result_min_duration_met": ("min_duration_met", "Min duration satisfied"),
                  "result_min_queries_met": ("min_queries_met", "Min queries satisfied"),
                  "early_stopping_met": ("early_stopping_met", "Early stopping satisfied")}


def consistency(ctx: Context, run_dir: Path, run: LoadgenRun) -> None:
    """Podium's own: a VALID result whose own fields say a constraint was not met (in the detail log or the
    summary), or a summary whose verdict is not the detail log's, cannot come from loadgen: a tampered or corrupt log.
    The official checker reads result_validity alone and does not notice."""
    if run.validity is None:
        return
    said = str(run.detail.get("result_validity") or "")
    summary = run.summary.get("Result is")
    contradicting = []
    if summary is not None and said and summary != said:
        contradicting.append(f"result_validity {said} but the summary says Result is {summary}")
    if "VALID" in (said, summary):
        for key, (field, line) in VALIDITY_PARTS.items():
            if getattr(run, field) is False:
                contradicting.append(f"{key} is false")
            if run.summary.get(line, "").upper() == "NO":
                contradicting.append(f"the summary's {line!r} is NO")
    if contradicting:
        ctx.add("log-consistency", run_dir, f"the loadgen log says VALID, yet {'; '.join(contradicting)}: loadgen "
                "never writes that, so the log was edited or corrupted",
                "restore the logs exactly as loadgen wrote them, or re-run the performance run")


def check_audit(ctx: Context, run_dir: Path, run: LoadgenRun, b: BenchmarkRules, test: str, audited: bool) -> None:
    if not audited:
        ctx.add("compliance-audit", run_dir, f"the {test} run shows no audit.config in effect",
                f"copy the {test} audit.config into the harness's folder before the run")
        return
    try:
        values = ctx.rules.audit(test).values(b.name)
    except PlanError:
        values = ctx.rules.audit(test).settings  # benchmark-specific values unknown: check the common ones
    for key, value in values.items():
        log_key = AUDIT_LOG_KEYS.get(key)
        if log_key is None:
            continue  # read by run_verification.py, not by loadgen (test07_accuracy_threshold, ...)
        want = TEST_MODES.get(int(value)) if key == "mode" else value
        got = run.detail.get(log_key)
        booleans = isinstance(got, bool) or isinstance(want, bool)
        if (bool(got) != bool(want)) if booleans else got != want:
            ctx.add("compliance-audit", run_dir, f"{log_key} is {got!r}, the {test} audit.config sets {key} = "
                    f"{value}", f"run {test} with its own audit.config, unchanged")


def relaxed(ctx: Context, run: LoadgenRun, b: BenchmarkRules, sc: ScenarioRules, what: str) -> bool:
    """Whether a smoke run's loadgen judged `what` (ttft, tpot) by a bound of the plan's own (`ttft_ms`, `tpot_ms`):
    over the round's, and not another scenario's (that is a run under the wrong loadgen model name)."""
    limit, requested = getattr(sc, f"{what}_ns"), getattr(run.settings, f"{what}_latency_ns")
    others = {getattr(other, f"{what}_ns") for other in b.scenarios.values()}
    return (ctx.profile == "smoke" and limit is not None and requested is not None and requested > limit
            and requested not in others)


def latency_config(ctx: Context, run_dir: Path, run: LoadgenRun, b: BenchmarkRules, sc: ScenarioRules) -> None:
    """Podium's own: the TTFT/TPOT limits loadgen enforced must be the folder's (Interactive vs Server); a smoke
    plan's own bound over the round's is its named deviation `latency-limit`."""
    if sc.loadgen_scenario != "Server":
        return
    for what, limit, requested in (("ttft", sc.ttft_ns, run.settings.ttft_latency_ns),
                                   ("tpot", sc.tpot_ns, run.settings.tpot_latency_ns)):
        if relaxed(ctx, run, b, sc, what):
            ctx.add("latency-limit", run_dir, f"loadgen judged {what.upper()} by {requested} ns, over the {limit} "
                    f"ns {sc.name} requires", f"remove {what}_latency from user.conf ({what}_ms from the plan)")
        elif limit is not None and requested != limit:
            ctx.add("latency-config", run_dir, f"loadgen ran with {what} limit {requested} ns, but {sc.name} "
                    f"requires {limit} ns", f"run {sc.name} with the right loadgen model name")


def target_latency(ctx: Context, run_dir: Path, target: int | None, sc: ScenarioRules) -> None:
    """The target latency a Server run ran at (mlperf.conf's, or a user.conf `target_latency`): set where the scenario
    bounds the p99, and never over the round's cap (checker latency-constraint, checks/performance_check.py, which
    compares the log's effective_target_latency_ns with it)."""
    cap = sc.max_target_latency_ns if sc.max_target_latency_ns is not None else sc.latency_ns
    if sc.latency_ns is not None and not target:
        ctx.add("latency-config", run_dir, f"loadgen ran with no target latency; {sc.name} requires a p99 of at most "
                f"{sc.latency_ns} ns", "do not override target_latency in user.conf")
    elif cap is not None and target is not None and target > cap:
        ctx.add("latency-config", run_dir, f"loadgen's target latency is {target} ns, over the {cap} ns the round "
                f"allows in {sc.name} (the checker's latency-constraint)",
                f"remove target_latency from user.conf, or set it to at most {cap // 1_000_000} ms")


def limits(ctx: Context, run_dir: Path, run: LoadgenRun, b: BenchmarkRules, sc: ScenarioRules) -> None:
    s = ctx.rules
    settings = run.settings
    if settings.min_duration_ms is None or settings.min_duration_ms < s.min_duration_ms:
        ctx.add("min-duration", run_dir, f"min_duration {settings.min_duration_ms} ms < {s.min_duration_ms} ms",
                "remove min_duration from user.conf")
    if settings.performance_sample_count is None or settings.performance_sample_count < b.performance_sample_count:
        ctx.add("performance-sample-count", run_dir,
                f"performance_sample_count {settings.performance_sample_count} < {b.performance_sample_count}",
                "remove performance_sample_count_override from user.conf")
    if sc.loadgen_scenario == "Offline":
        minimum = b.min_queries.get("Offline", 1)
        if (settings.min_query_count or 0) < minimum:
            ctx.add("min-queries", run_dir, f"min_query_count {settings.min_query_count} < {minimum}")
        if (settings.samples_per_query or 0) < b.offline_min_samples_per_query:
            ctx.add("offline-samples-per-query", run_dir,
                    f"samples per query {settings.samples_per_query} < {b.offline_min_samples_per_query}",
                    f"set {b.loadgen_model}.Offline.min_query_count = {b.offline_min_samples_per_query}")
    if b.use_token_latencies and not settings.use_token_latencies:
        ctx.add("token-latencies", run_dir, "use_token_latencies is off for an LLM benchmark",
                "do not override use_token_latencies in user.conf")
    if sc.loadgen_scenario == "Server":
        if run.early_stopping_met is not True:
            ctx.add("early-stopping", run_dir, "early stopping not met", "run more queries (min_query_count)")
        for what, limit, measured in (("ttft", sc.ttft_ns, run.ttft_p99_ns), ("tpot", sc.tpot_ns, run.tpot_p99_ns)):
            if limit is not None and (measured is None or measured >= limit):
                ctx.add("latency-limit" if relaxed(ctx, run, b, sc, what) else f"{what}-limit", run_dir,
                        f"{what.upper()} p99 {measured} ns is not under {limit} ns", "lower target_qps")
    if sc.loadgen_scenario == "Server":
        target_latency(ctx, run_dir, settings.target_latency_ns, sc)
    if sc.latency_ns is not None:
        p99 = run.latency_ns.get("99.00")
        if p99 is None or p99 > sc.latency_ns:
            ctx.add("latency-limit", run_dir, f"p99 latency {p99} ns exceeds {sc.latency_ns} ns", "lower target_qps")
    value = run.result(sc.result_field)
    if value is None or value <= 0:
        ctx.add("performance-metric", run_dir, f"no positive {sc.result_field} in the log",
                "re-run; loadgen writes the metric only when the run ends")
