"""One benchmark on one system: stage -> engine -> performance per scenario -> accuracy per scenario -> the
compliance audits the rules name, per scenario.

Every run is cached by its content key, and the engine starts only when a run is not cached, so re-running an
unchanged plan repeats nothing. Under `podium run --only` (submission.plan.selection) the selected scenarios' runs and
audits
are measured afresh and the others only taken from the cache. Returns the records of the finished runs, the failures
of the others and the runs not run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger

from submission.plan import model as plans
from submission.plan.model import SCENARIOS
from submission.plan.selection import NOT_RUN, reuse
from submission.results.runs import AuditRecord, RunRecord, RunSpec, phase_rows, plan_runs
from submission.rules import load_rules
from tasks.compliance import required_tests
from tasks.compliance.planning import audit_jobs
from tasks.compliance.step import AuditFailed, run_audit_task
from tasks.engines import engine_identity
from tasks.measuring import RunRejected, summary
from tasks.ops.inputs import require_fit
from tasks.reporting import progress
from tasks.run_step import run_measured
from tasks.serving import warmup
from tasks.serving.build import build_engine
from tasks.serving.launch import model_dir_for, owner, read_in_place, sizing, where
from tasks.serving.session import EngineSession
from tasks.staging.stage import S3Access, stage_task
from tasks.workspace import Workspace


def run_name() -> str:
    """`<benchmark> on <system>`, e.g. `gpt-oss-120b on cpu-smoke`."""
    from prefect.runtime import flow_run

    system, _, benchmark = flow_run.parameters["key"].partition("/")
    return f"{benchmark} on {system}"


@flow(name="benchmark", flow_run_name=run_name)
def benchmark(plan_path: str, key: str, workspace: str, log_dir: str, only: list[str] | None = None) -> dict:
    return measure(plans.load(plan_path), key, Workspace.at(workspace), Path(log_dir), only or ())


def measure(plan: plans.Plan, key: str, ws: Workspace, log_dir: Path, only: Sequence[str] = ()) -> dict:
    """Stage, build, serve and run every measured run and audit of benchmark `key` (inside a benchmark flow run: here,
    or a fleet member on its own cluster, flows/fleet.py); `only`: the scenario keys `--only` selected
    (submission.plan.selection.resolve), none for a plain run. Returns the records, audits, failures, the labels of the
    runs and audits not run, and the engine launches."""
    bench = plan.benchmark(key)
    logger = get_run_logger()
    access = asdict(S3Access.for_plan(plan.storage, ws.s3))   # for s3:// sources (no secrets in it)
    model = stage_task(bench.model.source, str(ws.stage / "models"), access,   # not copied when the engine
                       in_place=read_in_place(bench.engine, bench.model.source))   # reads it from its volume
    sources = {source for _, kind, source in bench.sources() if kind == "datasets"}
    datasets = {p: stage_task(p, str(ws.stage / "datasets"), access) for p in sorted(sources)}
    staged = {p: d["path"] for p, d in datasets.items()}
    tests = {p: stage_task(p, str(ws.stage / "tests"), access)["path"]
             for _, kind, p in bench.sources() if kind == "tests"}   # beside no data set: given to the evaluator
    check_staged(plan, bench, model["path"], staged)
    variants = bench.engine_variants()   # one engine launch per variant of the options, each for its scenarios
    identity = {s: engine_identity(bench.engine.name, options, bench.engine.replica_layout())
                for names, options in variants for s in names}
    specs = plan_runs(plan, bench, load_rules(plan.round), model_sha256=model["sha256"],
                      dataset_sha256={p: d["sha256"] for p, d in datasets.items()},
                      engine=identity[variants[0][0][0]])
    specs = [s.model_copy(update={"dataset": staged[s.dataset], "lcb_tests": tests.get(bench.dataset.lcb_tests or ""),
                                  "math_grader": tests.get(bench.dataset.math_grader or ""),
                                  "engine": identity[s.scenario]}) for s in specs]
    tokenizer = str(Path(model["path"]) / "tokenizer.json")
    records, audits, failures, skipped, launches = [], [], [], [], 0
    for scenarios, options in variants:
        group = [s for s in specs if s.scenario in scenarios]
        built = build_engine(bench.engine.name, options, model["path"], model["sha256"], str(ws.builds))
        with EngineSession(bench.engine.name, options, str(model_dir_for(bench.engine, Path(model["path"]))),
                           str(ws.pids), str(log_dir / "engine" / key.replace("/", "-")),
                           timeout_s=bench.engine.ready_timeout_s, where=where(bench.engine, owner(plan, bench)),
                           build_dir=built["path"], stall_s=bench.engine.stall_timeout_s,
                           warmup=warmup.planned(bench.engine, group),
                           exporter_urls=bench.engine.telemetry.exporter_urls) as engine:
            done, failed, left = _runs(group, engine, ws, bench.evaluator, tokenizer, only)
            found, failures, skipped = _audits(plan, bench, group, done, datasets, model["path"], tokenizer, engine,
                                               ws, failures + failed, skipped + left, only)
            records, audits, launches = records + done, audits + found, launches + engine.launches
    logger.info("%s: %d run(s) recorded, %d failed, %d not run, engine launched %d time(s)", key, len(records),
                len(failures), len(skipped), launches)
    return {"records": [r.model_dump(mode="json") for r in records], "failures": failures, "engine_launches": launches,
            "audits": [a.model_dump(mode="json") for a in audits], "skipped": skipped}


def _runs(specs: list[RunSpec], engine: EngineSession, ws: Workspace, evaluator: str | None, tokenizer: str,
          only: Sequence[str]) -> tuple[list[RunRecord], list[str], list[str]]:
    """The performance and accuracy runs, in order, on the (lazily launched) engine; under `--only` an unselected
    run that is not cached is left out (its label in the third list). An endpoints run with accuracy gives two rows,
    its performance and its accuracy result (`phase_rows`)."""
    records: list[RunRecord] = []
    failures: list[str] = []
    skipped: list[str] = []
    for spec in specs:
        state = run_measured(spec, engine, str(ws.work), evaluator, tokenizer,
                             reuse(only, spec.system, spec.benchmark, spec.scenario), return_state=True)
        if state is None:
            _not_run(spec.label, skipped)
        else:
            _settle(state, spec.label, RunRejected, records, failures, summary)
    rows = []
    for rec in records:
        rows += phase_rows(rec)
        if rows[-1] is not rec and rows[-1].mode == "accuracy":   # the accuracy result, counted as planned
            progress.finished(f"{rows[-1].label}: {summary(rows[-1])} (in the performance run's client report)")
    return rows, failures, skipped


def _settle(state: Any, label: str, rejected: type[Exception], done: list, failures: list[str],
            says: Callable[[Any], str]) -> None:
    """A run's or audit's final task state into `done` (its record, also when rejected: it is reported) or
    `failures`, and one progress line on the run a person started."""
    if state.is_completed():
        done.append(state.result())
        progress.finished(f"{label}: {says(done[-1])}" + (" (cached)" if state.name == "Cached" else ""))
        return
    error = state.result(raise_on_failure=False)
    if isinstance(error, rejected):
        done.append(error.record)
    failures.append(f"{label}: {error}")
    progress.finished(f"{label}: failed: {_first_line(error)}")
    get_run_logger().error("%s failed: %s", label, error)


def _not_run(label: str, skipped: list[str]) -> None:
    skipped.append(label)
    progress.finished(f"{label}: {NOT_RUN}")


def _first_line(error: object) -> str:
    return str(error).splitlines()[0][:200] if str(error) else type(error).__name__


def check_staged(plan: plans.Plan, bench: plans.BenchmarkSpec, model: str, datasets: dict[str, str]) -> None:
    """Before the build and the launch: the staged weights fit the GPUs and the staged prompts the sequence budgets."""
    require_fit([sizing(plan, bench, model=Path(model), datasets=datasets)], get_run_logger().info, " after staging")


def _audits(plan: plans.Plan, bench: plans.BenchmarkSpec, specs: list[RunSpec], records: list[RunRecord],
            datasets: dict[str, dict], model_dir: str, tokenizer: str, engine: EngineSession, ws: Workspace,
            failures: list[str], skipped: list[str], only: Sequence[str],
            ) -> tuple[list[AuditRecord], list[str], list[str]]:
    """The compliance audits after the accuracy runs, on the same (lazily launched) engine. Under `--only`, a
    scenario with a run left out has its audits left out too (not failures: nobody asked for them)."""
    left_out = {s.scenario for s in specs if s.label in skipped}
    jobs, unplanned = audit_jobs(plan, bench, load_rules(plan.round), [s for s in specs if s.scenario not in left_out],
                                 records, datasets=datasets, model_dir=model_dir, tokenizer=tokenizer)
    audits, failures, skipped = [], failures + unplanned, list(skipped)
    for line in unplanned:
        progress.finished(line)
    tests = required_tests(load_rules(plan.round), bench.benchmark) if plan.audits_enabled else ()
    for label in (f"{bench.key}/{scenario}/{test}" for scenario in SCENARIOS if scenario in left_out for test in tests):
        _not_run(label, skipped)
    for job in jobs:
        spec = job.spec
        state = run_audit_task(job, engine, str(ws.work), reuse(only, spec.system, spec.benchmark, spec.scenario),
                               return_state=True)
        if state is None:
            _not_run(job.label, skipped)
        else:
            _settle(state, job.label, AuditFailed, audits, failures, AuditRecord.summary)
    return audits, failures, skipped
