"""Where a benchmark's inputs come from: the `fetch` section of a benchmark, destination -> source, what
`podium fetch PLAN` brings onto the cluster's storage before anything is allocated (tasks/staging/fetch.py).

A source is a Hugging Face repository (`repo`, a model or a data set, at a commit) or a plain URL with its sha256.
A repository the round's rules pin (the reference checkpoint, the data sets: `Rules.hub_pins`) takes the round's
commit, and a plan that writes another is refused; any other repository (an NVFP4 checkpoint of the plan's choice)
names its own commit. Every destination is one the benchmark reads: its model.source, a data set file, or a folder
that holds one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, model_validator

from submission.base.schema import Strict

COMMIT = re.compile(r"^[0-9a-f]{40}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")


class FetchSource(Strict):
    """One input's source: a Hugging Face repository (`repo`) or a URL (`url` with its `sha256`)."""

    hub: Literal["huggingface"] = Field("huggingface", description="the hub `repo` is on (Hugging Face; its "
                                        "endpoint from HF_ENDPOINT, its token from HF_TOKEN)")
    repo: str | None = Field(None, description="the repository, e.g. openai/gpt-oss-120b; the whole repository at "
                             "`revision` lands in the destination folder")
    repo_type: Literal["model", "dataset"] = Field("model", description="model or dataset (a Hugging Face data set, "
                                                   "e.g. Shopify/product-catalogue)")
    revision: str | None = Field(None, description="the full 40-hex commit; default: the commit the round's rules "
                                 "pin for `repo` (submission/rules/<round>.yaml), which a plan may not change")
    url: str | None = Field(None, description="an http(s) URL of one file, fetched to the destination file")
    sha256: str | None = Field(None, description="the sha256 of the file at `url`; a download that differs is "
                               "refused")

    @model_validator(mode="after")
    def _one_source(self) -> FetchSource:
        if (self.repo is None) == (self.url is None):
            raise ValueError("name one source: repo (a Hugging Face repository) or url (one file, with its sha256)")
        if self.url is not None:
            if not self.url.startswith(("http://", "https://")):
                raise ValueError(f"url: {self.url!r} is not an http(s) URL")
            if self.sha256 is None or not SHA256.fullmatch(self.sha256):
                raise ValueError("sha256: a url needs the file's sha256 (64 lowercase hex digits) to be verified")
            if self.revision is not None:
                raise ValueError("revision: only a repo has one; remove it")
        else:
            if self.sha256 is not None:
                raise ValueError("sha256: a repo is verified file by file against the hub's listing; remove it")
            if "/" not in self.repo.strip("/"):
                raise ValueError(f"repo: {self.repo!r} is not owner/name, e.g. openai/gpt-oss-120b")
            if self.revision is not None and not COMMIT.fullmatch(self.revision):
                raise ValueError(f"revision: {self.revision!r} is not a full commit (40 hex digits); a branch or a "
                                 "short hash can move or clash: pin the commit, e.g. from the repository's history")
        return self

    def describe(self) -> str:
        return self.url if self.url is not None else f"{self.hub}:{self.repo}"


@dataclass(frozen=True)
class FetchItem:
    """One input to fetch, resolved against the round's pins."""

    field: str            # the plan field, e.g. benchmarks.0.fetch./mnt/mlperf/models/gpt-oss-120b
    dest: str             # as the plan writes it
    source: FetchSource
    revision: str | None  # the commit (hub items), the plan's or the round's


def reads_from(dest: str, paths: list[str]) -> bool:
    """Whether one of the plan's `paths` is `dest` or lies under it."""
    root = dest.rstrip("/")
    return any(p.rstrip("/") == root or p.startswith(root + "/") for p in paths)


def fetch_problems(where: str, fetch: dict[str, FetchSource], paths: list[str], pins: dict[str, str]) -> list[str]:
    """What is wrong with one benchmark's `fetch` section: a destination no field reads, an unpinned repository, a
    pin the round already holds written differently."""
    problems = []
    for dest, src in fetch.items():
        field = f"{where}.fetch.{dest}"
        if dest.startswith("s3://"):
            problems.append(f"{field}: fetch writes to a filesystem path (a local or shared folder); fetch there, "
                            "then upload it or stage from it")
        elif not reads_from(dest, paths):
            problems.append(f"{field}: no field of this benchmark reads from it; make it the model.source, a data "
                            "set file or a folder that holds one")
        if src.repo is None:
            continue
        pin = pins.get(src.repo)
        if pin is not None and src.revision not in (None, pin):
            problems.append(f"{field}.revision: the round pins {src.repo} at {pin}; remove revision")
        elif pin is None and src.revision is None:
            problems.append(f"{field}.revision: the round pins no commit of {src.repo}; name it, e.g. revision: "
                            "<the 40-hex commit>")
    return problems


def items(benchmarks: list, pins: dict[str, str]) -> list[FetchItem]:
    """Every fetch of the plan's benchmarks, once per destination (benchmarks that share one name one source)."""
    found: dict[str, FetchItem] = {}
    for i, b in enumerate(benchmarks):
        for dest, src in b.fetch.items():
            item = FetchItem(f"benchmarks.{i}.fetch.{dest}", dest, src,
                             (src.revision or pins.get(src.repo)) if src.repo else None)
            seen = found.get(dest)
            if seen is not None and (seen.source, seen.revision) != (item.source, item.revision):
                raise ValueError(f"{item.field}: {seen.field} fetches another source to the same destination; "
                                 "name one source per destination")
            found.setdefault(dest, item)
    return list(found.values())
