"""The submission tree steps: assemble (the run records into the tree the rules lay out, Podium's own source in its
src/podium/, and the run's tarball) and check (Podium's checker, and the official MLCommons checker too when a
checkout of mlcommons/inference is given)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from prefect import task

from submission.checks.checker import CheckReport
from submission.plan.model import Plan
from submission.results.runs import AuditRecord, RunRecord
from submission.tree import rehearsal_marker, source
from submission.tree.assemble import assemble
from submission.tree.package import write_tarball
from tasks.steps import run_logger

TARBALL = "submission.tar.gz"  # beside the tree in the run folder: the tree under a top folder `submission/`


@task(name="assemble")
def assemble_tree(plan: Plan, records: list[RunRecord], systems: dict, folder: str, commit: str,
                  audits: list[AuditRecord] | None = None) -> str:
    """The tree in `<folder>/submission/`, with Podium's source at the run's `commit` in its src/podium/
    (`submission.tree.source`), and `<folder>/submission.tar.gz` of it, written atomically."""
    logger = run_logger("assemble")
    root = Path(folder) / "submission"
    with tempfile.TemporaryDirectory(prefix="podium-source-") as staging:
        code = source.snapshot(Path(staging), commit)
        assemble(plan, records, systems, root, Path(folder) / "logs" / "accuracy-full", commit=commit,
                 audits=audits or [], code=code)
    what = f"git archive of commit {code.commit}" if code.origin == "git" else f"the installed files ({code.note})"
    logger.info("src/podium/%s: %s, %d bytes", code.archive.name, what, code.archive.size)
    if code.uncommitted:
        logger.warning("the checkout has uncommitted changes (%d file(s)); %s", len(code.uncommitted),
                       f"src/podium/{code.diff.name} holds them" if code.diff else code.note)
    if rehearsal_marker.is_rehearsal(plan.name):
        rehearsal_marker.mark(root)
    write_tarball(root, [root], Path(folder) / TARBALL, top="submission")
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
