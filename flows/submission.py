"""The submission pipeline: plan -> preflight -> one benchmark flow per (system, benchmark) -> assemble -> check
-> publish -> report. Everything a run produced stays in its run folder and in object storage, even when a step
failed; the flow then ends Failed and a re-run resumes from the cached steps.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.context import get_run_context
from prefect.states import Failed

from flows.benchmark import benchmark
from submission import plan as plans
from submission.plan import Plan
from submission.runs import AuditRecord, RunRecord
from tasks.ops import notifications
from tasks.ops.preflight import preflight
from tasks.reporting import artifacts as reporting
from tasks.reporting import expectations as validation
from tasks.reporting.expectations import validate_results
from tasks.reporting.gate_inputs import acceptance_gates
from tasks.storage import objects as storage
from tasks.storage import s3server
from tasks.storage.publish import publish
from tasks.tree import assemble_tree, check
from tasks.workspace import Workspace, git_commit


@contextlib.contextmanager
def object_storage(plan: Plan, ws: Workspace) -> Iterator[storage.StorageConfig]:
    """The plan's storage. Credentials come from boto3's own chain (environment, profile, instance role), never
    from flow parameters; the embedded SeaweedFS is reused when running, else started for the flow's duration."""
    s = plan.storage
    if not s.embedded:
        yield storage.StorageConfig(s.endpoint_url, s.bucket, s.prefix, s.region)
        return
    with s3server.serving(ws.s3) as server:
        yield storage.StorageConfig(server.endpoint_url, s.bucket, s.prefix, s.region,
                                    server.credentials.access_key, server.credentials.secret_key)


def _keep_logs(records: list[RunRecord] | list[AuditRecord], folder: Path) -> None:
    """Full, untruncated logs of every run go into the run folder (and so to object storage)."""
    for r in records:
        dest = folder / "logs" / "runs" / r.label.replace("/", "-")
        shutil.copytree(r.run_dir, dest, dirs_exist_ok=True)


@flow(name="podium-submission", flow_run_name="{plan_path}")
def submission(plan_path: str, workspace: str = ".podium") -> dict | Failed:
    plan = plans.load(plan_path)
    ws = Workspace.at(workspace)
    run_id = str(get_run_context().flow_run.id)
    folder = ws.run_folder(run_id)
    logs = folder / "logs"
    commit = git_commit()
    logger = get_run_logger()
    logger.info("plan %s (%s profile), run folder %s", plan.name, plan.profile, folder)
    with object_storage(plan, ws) as cfg:
        systems = preflight(plan, cfg)
        records, failures, launches, audits = [], [], 0, []
        for bench in plan.benchmarks:
            out = benchmark(plan_path, bench.key, str(ws.root), str(logs))
            records += [RunRecord.model_validate(r) for r in out["records"]]
            audits += [AuditRecord.model_validate(a) for a in out.get("audits", [])]
            failures += out["failures"]
            launches += out["engine_launches"]
        _keep_logs(records, folder)
        _keep_logs(audits, folder)
        root = assemble_tree(plan, records, systems, str(folder), commit, audits)
        report = check(root, plan.round, plan.profile, plan.inference_src)
        key_prefix = f"{plan.name}/{run_id}"
        links = {"manifest": storage.presign(cfg, storage.object_key(cfg, key_prefix, storage.MANIFEST)),
                 "submission tarball": storage.presign(cfg, storage.object_key(cfg, key_prefix, "submission.tar.gz")),
                 "report": storage.presign(cfg, storage.object_key(cfg, key_prefix, "report.md"))}
        data_checks = validate_results([r.model_dump(mode="json") for r in records], plan.round, str(folder))
        links["data checks"] = storage.presign(cfg, storage.object_key(cfg, key_prefix, validation.RESULT_FILE))
        notifications.emit_result_events(records, run_id, plan.name)   # INVALID -> the notification automation
        notifications.emit_audit_events(audits, run_id, plan.name)
        plots = {p.name: storage.presign(cfg, storage.object_key(cfg, key_prefix, "plots", p.name))
                 for p in reporting.plot_run(records, folder / "plots", plan.round)}
        rows = reporting.table(records, audits)
        text = reporting.markdown(plan.name, plan.profile, rows, report, links, failures, audits)
        text += reporting.plots_markdown(plots) + "\n" + data_checks["markdown"]
        gate_report = acceptance_gates(plan, [r.model_dump(mode="json") for r in records], systems, cfg, run_id,
                                       str(ws.root))
        text += "\n" + gate_report["markdown"]
        (folder / "gates.json").write_text(json.dumps(gate_report, indent=2, default=str))
        reporting.write_run_files(folder, records, text, audits)
        uploaded = publish(cfg, str(folder), key_prefix,
                           {"flow-run-id": run_id, "plan-sha256": plan.fingerprint(), "git-commit": commit})
        reporting.publish_artifacts(rows, text, links, audits)
        reporting.publish_images(plots)
    result = {"run_id": run_id, "run_folder": str(folder), "tree": root, "s3": f"s3://{cfg.bucket}/"
              f"{storage.object_key(cfg, key_prefix)}", "objects": len(uploaded), "rows": rows,
              "check": report.summary(), "failures": failures, "engine_launches": launches,
              "compliance": reporting.compliance_rows(audits), "data_checks": data_checks["failed"],
              "gates_failed": gate_report["failed"]}
    if failures or not report.ok or data_checks["failed"]:   # a Failed state: an expected outcome, no traceback
        return Failed(message=f"{len(failures)} step(s) failed, the checker found {len(report.errors)} error(s) and "
                      f"{data_checks['failed']} data check(s) failed; "
                      f"everything finished is in {folder} and {result['s3']}; read {folder / 'report.md'}",
                      data=result)
    return result
