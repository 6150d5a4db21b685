"""The steps of `podium submit` as Prefect tasks, each a thin wrapper: Podium's checker, the round's
preprocess_submission.py, the official checker, the final tarball, the upload. None is retried: the local steps would
fail the same way again, and each upload makes a new submission on the server."""

from __future__ import annotations

import shutil
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE
from pydantic import SecretStr

from submission.base.errors import RunFailed
from submission.checks import official
from submission.checks.checker import check_tree
from submission.checks.preprocess import Preprocessed, PreprocessFailed, run_preprocess
from submission.tree.package import FinalTarball, final_tarball
from tasks.steps import run_logger
from tasks.submit import server
from tasks.submit.record import Official


@task(name="podium-check")
def check_podium(tree: Path, round: str) -> str:
    """Podium's checker on the tree as assembled (a smoke tree by its smoke profile); an error stops the submit."""
    report = check_tree(tree, round)
    logger = run_logger("submit")
    for finding in report.errors:
        logger.error(finding.line())
    if not report.ok:
        raise RunFailed(f"{tree} has {len(report.errors)} error(s) by Podium's checker; nothing was packed or "
                        "uploaded", fix=f"fix them (`podium check {tree}` lists them), then submit again")
    logger.info("podium check: %s", report.summary())
    return report.summary()


@task(name="preprocess")
def preprocess_tree(tree: Path, inference_src: Path, round: str, out: Path) -> Preprocessed:
    """preprocess_submission.py on the tree into `out` (made afresh), and what it changed, file by file."""
    logger = run_logger("submit")
    shutil.rmtree(out, ignore_errors=True)   # the script refuses a folder that exists; this one is Podium's
    try:
        done = run_preprocess(tree, inference_src, round, out)
    except PreprocessFailed as error:
        logger.error("preprocess_submission.py exited %d; the tail of its output:\n%s", error.returncode, error.log)
        raise
    for note in done.notes:   # its own word on each result it dropped or moved
        logger.warning("preprocess_submission.py: %s", note)
    for line in done.changes.lines():
        logger.info("preprocess: %s", line)
    return done


@task(name="official-check")
def check_official(tree: Path, inference_src: Path, round: str, csv: Path, must_pass: bool) -> Official:
    """The round's checker on the tree that will be packed, its closing lines kept; a failed verdict stops a real
    upload (a test upload records it and goes on)."""
    report = official.run_official(tree, inference_src, round, csv)
    logger = run_logger("submit")
    for line in report.summary or [report.output_tail]:
        logger.info("official checker: %s", line)
    last = report.output_tail.strip().splitlines()[-1:] if report.crashed else []
    verdict = ": ".join([report.verdict(), *last])   # a crash with the error it ended on
    if must_pass and not report.ok:
        raise RunFailed(f"the official checker: {verdict}, {len(report.errors)} ERROR line(s); nothing was packed or "
                        f"uploaded", fix=f"`podium check {tree} --inference-src {inference_src}` lists them beside "
                                         "Podium's own findings")
    return Official(verdict=verdict, summary=report.summary, errors=len(report.errors), csv=str(csv))


@task(name="final-tarball")
def pack(tree: Path, target: Path) -> FinalTarball:
    made = final_tarball(tree, target)
    run_logger("submit").info("tarball %s: %d files, %d bytes, sha256 %s", made.path, made.files, made.size,
                              made.sha256)
    return made


@task(name="upload", cache_policy=NO_CACHE, persist_result=False)
def upload(url: str, tarball: Path, submitter_id: SecretStr, submitter: str | None) -> server.Receipt:
    """The three calls to the submission server (tasks/submit/server.py). Not cached, its result not stored."""
    logger = run_logger("submit")
    return server.upload(url, tarball, submitter_id, submitter=submitter, say=logger.info)
