"""The submission pipeline: plan -> preflight -> one benchmark flow per (system, benchmark) -> assemble -> check
-> publish -> report. Everything a run produced stays in its run folder and in object storage, even when a step
failed; the flow then ends Failed and a re-run resumes from the cached steps. `only` (`podium run --only`) measures
the named scenarios afresh and takes the rest from the cache (submission.plan.selection).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.context import get_run_context
from prefect.states import Completed, Failed, State

from flows import fleet
from flows.benchmark import benchmark
from submission.base.errors import PodiumError
from submission.base.files import copy_run_folder, write_atomic
from submission.checks.checker import CheckReport
from submission.plan import model as plans
from submission.plan import selection
from submission.plan.model import Plan
from submission.results import runs
from submission.results.runs import AuditRecord, RunRecord
from submission.tree import rehearsal_marker
from tasks.ops import notifications
from tasks.ops.preflight import preflight
from tasks.reporting import artifacts as reporting
from tasks.reporting import expectations as validation
from tasks.reporting import gpu_time, progress
from tasks.reporting.expectations import validate_results
from tasks.reporting.gate_inputs import acceptance_gates
from tasks.storage import links as storage_links
from tasks.storage import objects as storage
from tasks.storage import s3server
from tasks.storage.publish import publish
from tasks.tree import assemble_tree, check
from tasks.workspace import Workspace, git_commit


def _keep_logs(records: list[RunRecord] | list[AuditRecord], folder: Path) -> None:
    """Full, untruncated logs of every run go into the run folder (and so to object storage), not the inputs linked
    there (`copy_run_folder`)."""
    for r in records:
        dest = folder / "logs" / "runs" / r.label.replace("/", "-")
        copy_run_folder(Path(r.run_dir), dest)


def _run_name() -> str:
    """`<plan name> on <systems>`, e.g. `smoke on cpu-smoke`; the plan file's stem when the plan does not load (the
    run then fails saying why)."""
    from prefect.runtime import flow_run

    path = flow_run.parameters["plan_path"]
    try:
        plan = plans.load(path)
    except PodiumError:
        return Path(path).stem
    return f"{plan.name} on {', '.join(s.name for s in plan.systems)}"


@dataclass
class Finished:
    """What the benchmark flows of a plan left: their records, audits, failures and engine launches."""

    records: list[RunRecord] = field(default_factory=list)
    audits: list[AuditRecord] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)   # runs and audits not run: unselected under --only, not cached
    launches: int = 0
    systems: dict[str, dict] = field(default_factory=dict)   # descriptions the fleet's members made on their hosts
    tree: str = ""                       # the assembled tree
    check: CheckReport | None = None     # the checker's report on it

    def add(self, out: dict) -> None:
        """One benchmark flow's (or fleet member's) result."""
        self.records += [RunRecord.model_validate(r) for r in out["records"]]
        self.audits += [AuditRecord.model_validate(a) for a in out.get("audits", [])]
        self.failures += out["failures"]
        self.skipped += out.get("skipped", [])
        self.launches += out["engine_launches"]
        self.systems |= out.get("systems", {})


def run_benchmarks(plan_path: str, plan: Plan, ws: Workspace, folder: Path, cfg: storage.StorageConfig,
                   only: tuple[str, ...] = ()) -> Finished:
    """The pooled systems' benchmarks started on their clusters (flows.fleet), meanwhile the others here, one
    benchmark flow each; then the members' results gathered. Every run's full logs end up in the run folder."""
    done, run_id = Finished(), folder.name
    started = fleet.start(plan, run_id, only) if plan.pools() else []
    for bench in (b for b in plan.benchmarks if b.system not in plan.pools()):
        done.add(benchmark(plan_path, bench.key, str(ws.root), str(folder / "logs"), list(only)))
    for member, state in fleet.wait(started):
        done.add(fleet.gather(member, state, cfg, folder))
    _keep_logs([r for r in done.records if not Path(r.run_dir).is_relative_to(folder)], folder)
    _keep_logs([a for a in done.audits if not Path(a.run_dir).is_relative_to(folder)], folder)
    return done


def rehearsal_banner() -> str:
    """What a dress rehearsal replaced, atop its report (tasks.rehearsal.plan.changes)."""
    from tasks import clock
    from tasks.rehearsal.plan import changes, scale

    return (f"> **{rehearsal_marker.NOTICE}**\n>\n" + "".join(f"> - {c}\n" for c in changes(clock.speed(), scale()))
            + "\n")


def report_and_publish(plan: Plan, planned: runs.Planned, done: Finished, systems: dict[str, dict],
                       cfg: storage.StorageConfig, ws: Workspace, folder: Path, tags: dict[str, str]) -> dict:
    """The report (results, compliance, checker, plots, data checks, gates) into the run folder, the run folder
    into object storage, the artifacts into Prefect; returns what the flow's result and outcome line need. Objects
    are named by their s3:// URL with the `podium link` command: no presigned URL goes anywhere a run keeps."""
    run_id, records = tags["flow-run-id"], [r.model_dump(mode="json") for r in done.records]
    key_prefix = f"{plan.name}/{run_id}"
    s3 = f"s3://{cfg.bucket}/{storage.object_key(cfg, key_prefix)}/"
    objects = {"report": "report.md", "submission tarball": "submission.tar.gz", "manifest": storage.MANIFEST,
               "data checks": validation.RESULT_FILE}
    link = reporting.LinkCommand(storage_links.command(plan.storage, s3 + "submission.tar.gz", ws.root),
                                 storage_links.lifetime(plan.storage.link_expiry_s))
    data_checks = validate_results(records, plan.round, str(folder), {
        (b.benchmark, name): sc.relaxed_limits() for b in plan.benchmarks for name, sc in b.scenarios.items()
        if sc.relaxed_limits()})   # a smoke plan's own latency bounds, its named deviation
    notifications.emit_result_events(done.records, run_id, plan.name)   # INVALID -> the notification automation
    notifications.emit_audit_events(done.audits, run_id, plan.name)
    plots = reporting.plot_run(done.records, folder / "plots", plan.round)
    gate_report = acceptance_gates(plan, records, systems, cfg, run_id, str(ws.root))
    notifications.emit_gate_events(gate_report["gates"], run_id, plan.name)   # a failed published gate -> webhook
    line = reporting.outcome(plan.name, planned, done.records, done.audits, done.check, failures=len(done.failures),
                             data_checks=data_checks["failed"], gates=gate_report["failed"], tree=done.tree, s3=s3,
                             not_run=len(done.skipped), published=gate_report["published_line"])
    rows = reporting.table(done.records, done.audits)
    if rehearsal_marker.is_rehearsal(plan.name):   # said on every page: the outcome line, the report, the artifacts
        line = f"DRESS REHEARSAL (not a submission): {line}"
    text = reporting.markdown(plan.name, plan.profile, rows, done.check, objects, done.failures, done.audits,
                              folder=str(folder), tree=done.tree, s3=s3, link=link,
                              warnings=[w for r in done.records for w in r.warnings],
                              gpu_time=gpu_time.rows(done.records, gpu_time.predicted(plan)), records=done.records)
    if rehearsal_marker.is_rehearsal(plan.name):
        text = rehearsal_banner() + text
    text += (reporting.plots_markdown([f"plots/{p.name}" for p in plots]) + "\n" + data_checks["markdown"] + "\n"
             + gate_report["markdown"])
    write_atomic(folder / "gates.json", json.dumps(gate_report, indent=2, default=str))
    reporting.write_run_files(folder, done.records, text, done.audits)
    uploaded = publish(cfg, str(folder), key_prefix, tags)
    reporting.publish_artifacts(rows, text, done.audits, outcome=line)
    reporting.publish_plots(plots)
    return {"s3": s3, "objects": len(uploaded), "rows": rows, "data_checks": data_checks["failed"],
            "gates_failed": gate_report["failed"], "outcome": line}


@flow(name="podium-submission", flow_run_name=_run_name)
def submission(plan_path: str, workspace: str = ".podium", only: list[str] | None = None) -> State:
    plan = plans.load(plan_path)
    chosen = selection.resolve(plan, only or (), where=plan_path)   # a name the plan lacks: before any GPU time
    ws = Workspace.at(workspace)
    run_id = str(get_run_context().flow_run.id)
    folder = ws.run_folder(run_id)
    commit = git_commit()
    planned = runs.planned(plan)
    get_run_logger().info("plan %s (%s profile): %d runs planned; run folder %s", plan.name, plan.profile,
                          planned.total, folder)
    if chosen:
        get_run_logger().info("--only: measuring %s afresh; every other run from the cache, or not at all",
                              ", ".join(chosen))
    with progress.tracking(planned.total), s3server.plan_storage(plan.storage, ws.s3) as cfg:
        systems = preflight(plan, cfg, str(ws.root))
        done = run_benchmarks(plan_path, plan, ws, folder, cfg, chosen)
        systems |= done.systems
        done.tree = assemble_tree(plan, done.records, systems, str(folder), commit, done.audits)
        done.check = report = check(done.tree, plan.round, plan.profile, plan.inference_src)
        tags = {"flow-run-id": run_id, "plan-sha256": plan.fingerprint(), "git-commit": commit}
        out = report_and_publish(plan, planned, done, systems, cfg, ws, folder, tags)
    result = {"run_id": run_id, "run_folder": str(folder), "tree": done.tree, "check": report.summary(),
              "failures": done.failures, "not_run": done.skipped, "engine_launches": done.launches,
              "compliance": reporting.compliance_rows(done.audits), **out}
    get_run_logger().info(out["outcome"])
    if done.failures or not report.ok or out["data_checks"]:   # a Failed state: an expected outcome, no traceback
        return Failed(message=out["outcome"], data=result)
    return Completed(message=out["outcome"], data=result)
