"""Submission day as a flow: a checked tree -> (when asked) the round's preprocess_submission.py on a copy -> the
official checker -> the final tarball in the Submission UI's layout -> the upload to the MLCommons submission server
(signed URL, PUT, its checker started). `podium submit` runs it (flows/submit_cli.py); `dry_run` stops before the
upload. Podium's checker always runs, the official one whenever `inference_src` is given (which only a test upload
may leave out); preprocess_submission.py, optional in the submission guide, only with `--preprocess`.

The submitter id is looked up here, inside the run, from the environment or a Prefect Secret block: it is never a
parameter of the flow (Prefect keeps those) and reaches only the upload task, as a SecretStr.
"""

from __future__ import annotations

import os
import shutil

from prefect import flow
from prefect.states import Completed, State

from submission.base.errors import PodiumError
from tasks.steps import run_logger
from tasks.submit import identity
from tasks.submit.record import Record
from tasks.submit.settings import SubmitSettings
from tasks.submit.steps import check_official, check_podium, pack, preprocess_tree, upload


@flow(name="podium-submit")
def submit_tree(settings: SubmitSettings) -> State:
    settings.require()
    s, logger = settings, run_logger("submit")
    record = Record(tree=str(s.tree), out=str(s.out), server=s.server, round=s.round, test_upload=s.test_upload,
                    dry_run=s.dry_run, skipped=s.steps_skipped())
    s.out.mkdir(parents=True, exist_ok=True)
    for stale in ("submission.tar.gz", "submission.tar.gz.sha256", "official.csv"):   # a tarball is always this run's
        (s.out / stale).unlink(missing_ok=True)
    shutil.rmtree(s.out / "preprocessed", ignore_errors=True)
    try:
        who = None if s.dry_run else identity.find(s.id_env, s.id_block, os.environ)
        record.id_source = f"from {who.source}" if who else "not looked up (--dry-run)"
        record.podium_check = check_podium(s.tree, s.round)
        tree = s.tree
        if s.inference_src is not None and s.preprocess:
            done = preprocess_tree(s.tree, s.inference_src, s.round, s.out / "preprocessed")
            record.preprocess_argv, record.changes, tree = done.argv, done.changes, done.output
        if s.inference_src is not None:
            record.official = check_official(tree, s.inference_src, s.round, s.out / "official.csv",
                                             must_pass=not s.test_upload)
        record.tarball = pack(tree, s.out / "submission.tar.gz")
        if who is not None:
            record.receipt = upload(s.server, record.tarball.path, who.value, s.submitter)
    except Exception as error:
        record.error = str(error) if isinstance(error, PodiumError) else f"{type(error).__name__}: {error}"
        raise
    finally:
        record.save()
        _publish(record)
    logger.info(record.outcome())
    return Completed(message=record.outcome(), data=record.model_dump(mode="json"))


def _publish(record: Record) -> None:
    from prefect.artifacts import create_markdown_artifact

    create_markdown_artifact(key="submit", markdown=record.markdown(), description=record.outcome())
