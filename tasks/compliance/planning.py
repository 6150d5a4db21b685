"""Which audits a benchmark runs, and each one's loadgen run, resolved from the plan, the rules and the finished
runs of the benchmark flow. Pure apart from reading the size of a compliance set and the model's EOS ids.

Per scenario folder (Offline, Server, Interactive) every test the rules name for the benchmark runs once. An audit
run is the scenario's performance run with: the audit's audit.config lines, the audit's own data set where the
rules give it one (TEST07's compliance set), the audit's run settings, and in Server and Interactive the target
QPS derated by `compliance.server_qps_factor`.
"""

from __future__ import annotations

from pathlib import Path

from submission.plan.model import BenchmarkSpec, Plan
from submission.results.runs import RunRecord, RunSpec
from submission.rules import Rules
from tasks.compliance import AuditJob, audit, required_tests
from tasks.compliance.test06 import eos_token_ids


def derated(user_conf: tuple[tuple[str, str], ...], loadgen_model: str,
            factor: float) -> tuple[tuple[tuple[str, str], ...], float | None]:
    """The Server user.conf with `target_qps` times `factor`; returns the lines and the new rate."""
    key = f"{loadgen_model}.Server.target_qps"
    rate = next((float(v) for k, v in user_conf if k == key), None)
    if rate is None:
        return user_conf, None
    new = rate * factor
    return tuple((k, f"{new:g}" if k == key else v) for k, v in user_conf), float(f"{new:g}")


def _set_size(benchmark: str, path: str) -> int:
    """The number of samples the harness's QSL will hold for this data set."""
    from tasks.datasets.requests import build_requests

    return len(build_requests(benchmark, path, "performance"))


def audit_jobs(plan: Plan, bench: BenchmarkSpec, rules: Rules, specs: list[RunSpec], records: list[RunRecord], *,
               datasets: dict[str, dict[str, str]], model_dir: str, tokenizer: str | None,
               ) -> tuple[list[AuditJob], list[str]]:
    """The audit jobs of one benchmark, and why any audit could not be planned (a reference run failed).

    `specs` are the benchmark's runs (dataset paths staged), `records` its finished runs, `datasets` the staged
    data sets by plan source ({"path", "sha256"}).
    """
    if not plan.audits_enabled:
        return [], []
    brules = rules.benchmark(bench.benchmark)
    finished = {r.key: r for r in records}
    jobs: list[AuditJob] = []
    skipped: list[str] = []
    eos: tuple[int, ...] | None = None
    for perf in (s for s in specs if s.mode == "performance" and s.audit is None):
        acc = next((s for s in specs if s.mode == "accuracy" and s.scenario == perf.scenario and s.audit is None),
                   None)
        perf_rec, acc_rec = finished.get(perf.key()), acc and finished.get(acc.key())
        for test in required_tests(rules, bench.benchmark):
            impl = audit(test)
            label = f"{perf.label.rsplit('/', 1)[0]}/{test}"
            if impl.needs_performance_run and perf_rec is None:
                skipped.append(f"{label}: not run, the scenario's performance run has no result")
                continue
            if impl.needs_accuracy_run and acc_rec is None:
                skipped.append(f"{label}: not run, the scenario's accuracy run has no result")
                continue
            dataset, sha, size = perf.dataset, perf.dataset_sha256, None
            if test in brules.dataset.files:   # the rules give this test a data set of its own
                staged = datasets[bench.dataset.compliance[test]]
                dataset, sha = staged["path"], staged["sha256"]
                size = _set_size(bench.benchmark, dataset)
            user_conf, rate = perf.user_conf, None
            if perf.loadgen_scenario == "Server":
                user_conf, rate = derated(user_conf, perf.loadgen_model, plan.compliance.server_qps_factor)
            if impl.needs_eos and eos is None:
                eos = eos_token_ids(Path(model_dir))
            spec = perf.model_copy(update={
                "audit": test,
                "audit_config": impl.config_lines(rules, bench.benchmark, plan.compliance.overrides.get(test)),
                "user_conf": impl.run_settings(user_conf, perf.loadgen_model, size),
                "dataset": dataset, "dataset_sha256": sha})
            jobs.append(AuditJob(
                spec=spec, evaluator=bench.evaluator or bench.benchmark,
                metric=brules.scenario(perf.scenario).accuracy[0].metric, tokenizer=tokenizer,
                eos_token_ids=eos if impl.needs_eos and eos else (),
                reference_performance=perf_rec.run_dir if perf_rec and impl.needs_performance_run else None,
                reference_accuracy=acc_rec.run_dir if acc_rec and impl.needs_accuracy_run else None,
                target_qps=rate, inference_src=plan.inference_src))
    return jobs, skipped
