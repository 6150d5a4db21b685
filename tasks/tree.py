"""The submission tree steps: assemble (the run records into the tree the rules lay out, and its tarball) and check
(Podium's checker, and the official MLCommons checker too when a checkout of mlcommons/inference is given)."""

from __future__ import annotations

import tarfile
from pathlib import Path

from prefect import task

from submission.checks.checker import CheckReport
from submission.plan.model import Plan
from submission.results.runs import AuditRecord, RunRecord
from submission.tree import rehearsal_marker
from submission.tree.assemble import assemble
from tasks.steps import run_logger


@task(name="assemble")
def assemble_tree(plan: Plan, records: list[RunRecord], systems: dict, folder: str, commit: str,
                  audits: list[AuditRecord] | None = None) -> str:
    root = Path(folder) / "submission"
    assemble(plan, records, systems, root, Path(folder) / "logs" / "accuracy-full", commit=commit, audits=audits or [])
    if rehearsal_marker.is_rehearsal(plan.name):
        rehearsal_marker.mark(root)
    with tarfile.open(Path(folder) / "submission.tar.gz", "w:gz") as tar:
        tar.add(root, arcname="submission")
    return str(root)


@task(name="check")
def check(root: str, round: str, profile: str, inference_src: str | None = None) -> CheckReport:
    """Podium's checker, writing summary.csv beside the tree; with a checkout of mlcommons/inference, the official
    checker too (its CSV beside ours), each place where the two verdicts differ logged as a warning. The two run as
    `podium check` runs them (`official_checker.check_all`); an official checker that cannot run is logged, and the
    tree and Podium's verdict stand."""
    from submission.checks import official

    logger = run_logger("check")
    csv_file = Path(root).parent / "summary.csv"
    try:
        checked = official.check_all(Path(root), round, profile=profile, csv_file=csv_file,
                                     inference_src=inference_src)
    except official.OfficialCheckerUnavailable as error:
        logger.error("the official checker did not run: %s", error)
        checked = official.check_all(Path(root), round, profile=profile, csv_file=csv_file)
    report = checked.report
    for finding in report.findings:
        (logger.error if finding.severity == "error" else logger.warning)(finding.line())
    logger.info(report.summary())
    if checked.official is not None:
        logger.info("official checker: %s", checked.official.verdict())
        for difference in checked.differences:
            logger.warning(difference.line())
    return report
