"""What `podium submit` was asked to do, checked once before anything starts (Prefect-free): the tree, where its
outputs go, the server, the official sources, and whether the upload is a test."""

from __future__ import annotations

from pathlib import Path

from submission.base.errors import PlanError
from submission.base.schema import Strict
from submission.checks import official, preprocess
from submission.tree import rehearsal_marker
from submission.tree.paths import SMOKE_MARKER
from tasks.submit.identity import DEFAULT_BLOCK, DEFAULT_ENV
from tasks.submit.server import DEFAULT_URL, check_server

TEST_MARKERS = (SMOKE_MARKER, rehearsal_marker.MARKER)  # at the top of a tree that is not a submission
TEST_FLAG = "--test-upload"
PREPROCESS_FLAG = "--preprocess"
NOT_ASKED = f"skipped: optional in the submission guide, not asked for ({PREPROCESS_FLAG} runs it)"


class SubmitSettings(Strict):
    tree: Path
    out: Path  # preprocessed/, official.csv, submission.tar.gz (+ .sha256), submit.json
    server: str = DEFAULT_URL
    round: str = "v6.1"
    inference_src: Path | None = None  # mlcommons/inference: preprocess_submission.py and the checker run from it
    preprocess: bool = False  # optional in the submission guide, and asked for: PREPROCESS_FLAG
    dry_run: bool = False  # everything up to the tarball, no upload
    test_upload: bool = False  # a smoke or rehearsal tree may go; without inference_src the official steps skip
    submitter: str | None = None  # the organisation the id must belong to
    id_env: str = DEFAULT_ENV
    id_block: str = DEFAULT_BLOCK

    @classmethod
    def make(cls, tree: Path, out: Path | None = None, **values: object) -> SubmitSettings:
        """Settings with absolute paths; `out` defaults to `<tree>.submit` beside the tree."""
        tree = Path(tree).resolve()
        return cls(tree=tree, out=Path(out).resolve() if out else tree.with_name(f"{tree.name}.submit"), **values)

    def test_marker(self) -> str | None:
        return next((m for m in TEST_MARKERS if (self.tree / m).exists()), None)

    def require(self) -> None:
        """PlanError for what must stop `podium submit` before it starts, each with its fix."""
        if not self.tree.is_dir():
            raise PlanError(f"{self.tree} is not a folder", fix="pass the submission tree (the folder holding closed/)")
        if self.out == self.tree or self.tree in self.out.parents:
            raise PlanError(f"the output folder {self.out} is inside the tree", fix="choose a folder outside it")
        check_server(self.server)
        marker = self.test_marker()
        if marker and not self.test_upload:
            raise PlanError(f"{self.tree} is not a submission ({marker} is at its top: a smoke run's or a dress "
                            "rehearsal's tree)", fix=f"pass {TEST_FLAG} to send it to a test server as a test")
        if self.inference_src is None:
            if self.preprocess:
                raise PlanError(f"{PREPROCESS_FLAG} runs the round's preprocess_submission.py from a checkout of "
                                "mlcommons/inference, and none was given",
                                fix=f"pass --inference-src DIR (`podium fetch-inference` prints the folder), or leave "
                                    f"out {PREPROCESS_FLAG}")
            if not self.test_upload:
                raise PlanError("a submission goes up only after the round's official checker passed it, and the "
                                "checker runs from a checkout of mlcommons/inference",
                                fix="pass --inference-src DIR (`podium fetch-inference` prints the folder)")
            return
        official.checker_dir(self.inference_src)
        if self.preprocess:
            preprocess.script(self.inference_src)

    def steps_skipped(self) -> dict[str, str]:
        """The official steps this submit leaves out, each with why (recorded in the summary)."""
        if self.inference_src is None:
            why = f"skipped: no --inference-src ({TEST_FLAG})"
            return {"preprocess": why, "official": why}
        return {} if self.preprocess else {"preprocess": NOT_ASKED}
