"""What a `podium submit` did, step by step, as `<out>/submit.json` and the lines the command and the Prefect artifact
show (Prefect-free). It names where the submitter id came from, never the id."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field

from submission.base.files import write_atomic
from submission.tree.changes import Changes
from submission.tree.package import FinalTarball
from tasks.submit.server import Receipt

RECORD = "submit.json"
STEPS = {"podium": "Podium's checker", "preprocess": "preprocess_submission.py", "official": "the official checker"}


class Official(BaseModel):
    verdict: str
    summary: list[str]  # the checker's closing lines
    errors: int
    csv: str


class Record(BaseModel):
    tree: str
    out: str
    server: str
    round: str
    test_upload: bool
    dry_run: bool
    id_source: str = ""  # where the id came from ("from environment variable ..."), never the id
    podium_check: str = ""
    skipped: dict[str, str] = Field(default_factory=dict)  # step -> why it did not run
    preprocess_argv: list[str] = Field(default_factory=list)
    changes: Changes | None = None
    official: Official | None = None
    tarball: FinalTarball | None = None
    receipt: Receipt | None = None
    error: str = ""

    def steps(self) -> str:
        """Which checks ran (the official verdict with it) and which did not, and why."""
        ran = [STEPS["podium"]] * bool(self.podium_check) + [STEPS["preprocess"]] * (self.changes is not None)
        if self.official is not None:
            ran.append(f"{STEPS['official']} ({self.official.verdict.splitlines()[0]})")
        why: dict[str, list[str]] = {}
        for step, reason in self.skipped.items():
            why.setdefault(reason.removeprefix("skipped: "), []).append(STEPS[step])
        return "; ".join([f"ran {', '.join(ran) or 'no check'}",
                          *(f"not run: {' and '.join(steps)}, {reason}" for reason, steps in why.items())])

    def outcome(self) -> str:
        """The submit in one line; a finished one ends with what ran and what did not."""
        test = "TEST upload" if self.test_upload else "upload"
        if self.error:   # the error names the step that stopped it
            return f"submit failed: {self.error.splitlines()[0]}" + (
                f"; the tarball stays at {self.tarball.path}" if self.tarball else "")
        if self.receipt is not None:
            head = (f"{test} done: submission {self.receipt.submission_id} for {self.receipt.submitter_name!r} at "
                    f"{self.server}, its checker started; tarball {self.tarball.path if self.tarball else ''}")
        else:
            head = f"dry run: nothing uploaded; the {test} would send {self.tarball.path if self.tarball else self.out}"
        return f"{head}; {self.steps()}"

    def lines(self) -> list[str]:
        out = [f"tree            {self.tree}", *([f"podium check    {self.podium_check}"] * bool(self.podium_check)),
               *(f"{step:15} {why}" for step, why in self.skipped.items())]
        if self.changes is not None:
            out += [f"preprocess      {line}" for line in self.changes.lines()]
        if self.official is not None:
            out += [f"official        {line}" for line in self.official.summary or [self.official.verdict]]
        if self.tarball is not None:
            t = self.tarball
            out.append(f"tarball         {t.path} ({t.size:,} bytes, {t.files} files in {', '.join(t.divisions)}/), "
                       f"sha256 {t.sha256}")
        if self.id_source:
            out.append(f"submitter id    {self.id_source}")
        return [*out, self.outcome()]

    def markdown(self) -> str:
        return "# podium submit\n\n```\n" + "\n".join(self.lines()) + "\n```\n"

    def save(self) -> Path:
        return write_atomic(Path(self.out) / RECORD, json.dumps(self.model_dump(mode="json"), indent=2) + "\n")
