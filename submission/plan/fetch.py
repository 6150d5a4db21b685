"""Where a plan's inputs come from: the `fetch` section of a benchmark (and of the plan itself), destination ->
source, what `podium fetch PLAN` brings onto the cluster's storage before anything is allocated
(tasks/staging/fetch.py).

A source is one of six kinds:
- `repo`: a Hugging Face repository (a model or a data set) at a commit, landing whole in the destination folder;
- `url`: one file, with its sha256;
- `archive`: a tar archive at a URL, with its sha256, unpacked into the destination folder;
- `github`: a GitHub repository's archive of a commit, unpacked into the destination folder;
- `livecodebench`: a LiveCodeBench release's tests, converted into the JSON lines Podium's evaluator reads;
- `mlcommons_uri`: a data set on MLCommons' storage, named by its `.uri` as MLCommons' R2 downloader takes it, every
  file its `.md5` listing names landing in the destination folder (tasks/staging/fetch_r2.py).

A repository the round's rules pin (the reference checkpoint, the data sets: `Rules.hub_pins`; mlcommons/inference
and the endpoints client: `Rules.source_pins`) takes the round's commit, and a plan that writes another is refused;
any other repository names its own commit. A LiveCodeBench release is one the rules name (`Rules.livecodebench`), at
their commit. Every destination of a benchmark is one the benchmark reads: its model.source, a data set file, the
LiveCodeBench tests or a folder that holds one. The plan's own section holds the source archives of the round's
tools (mlcommons/inference for `inference_src`, the endpoints client's source), which no benchmark reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, model_validator

from submission.base.schema import Input
from submission.rules import Rules

COMMIT = re.compile(r"^[0-9a-f]{40}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
KINDS = ("repo", "url", "archive", "github", "livecodebench", "mlcommons_uri")
TOOL_KINDS = ("archive", "github")   # what the plan's own section may fetch


class FetchSource(Input):
    """One input's source: name exactly one of `repo`, `url`, `archive`, `github`, `livecodebench`,
    `mlcommons_uri`."""

    hub: Literal["huggingface"] = Field("huggingface", description="the hub `repo` is on (Hugging Face; its "
                                        "endpoint from HF_ENDPOINT, its token from HF_TOKEN or a Prefect Secret)")
    repo: str | None = Field(None, description="the repository, e.g. openai/gpt-oss-120b; the whole repository at "
                             "`revision` lands in the destination folder")
    repo_type: Literal["model", "dataset"] = Field("model", description="model or dataset (a Hugging Face data set, "
                                                   "e.g. Shopify/product-catalogue)")
    revision: str | None = Field(None, description="the full 40-hex commit of `repo`, `github` or the LiveCodeBench "
                                 "data set; default: the commit the round's rules pin (submission/rules/<round>.yaml), "
                                 "which a plan may not change")
    url: str | None = Field(None, description="an http(s) URL of one file, fetched to the destination file")
    archive: str | None = Field(None, description="an http(s) URL of a tar archive (.tar, .tar.gz, ...), unpacked "
                                "into the destination folder and kept beside it as <destination>.tar.gz")
    github: str | None = Field(None, description="a GitHub repository, owner/name: its archive of `revision` (GitHub's "
                               "/archive/<commit>.tar.gz), unpacked into the destination folder and kept beside it as "
                               "<destination>.tar.gz, e.g. mlcommons/inference")
    livecodebench: str | None = Field(None, description="a LiveCodeBench release the round names (release_v6): its "
                                      "tests fetched from the hub and converted into the JSON lines file the "
                                      "evaluator reads (dataset.lcb_tests)")
    mlcommons_uri: str | None = Field(None, description="the http(s) URL of a data set's <name>.uri on MLCommons' "
                                      "storage, what MLCommons' R2 downloader takes, e.g. https://inference."
                                      "mlcommons-storage.org/metadata/gpt-oss-data.uri: every file its <name>.md5 "
                                      "lists lands in the destination folder, each MD5 checked")
    sha256: str | None = Field(None, description="the sha256 of the file at `url` or of the `archive`; a download "
                               "that differs is refused (optional for `github`: the archive must name its commit)")
    max_unpacked_gib: float = Field(4.0, gt=0, description="the most an `archive` or `github` archive may unpack to, "
                                    "in GiB (its tar stream: files and headers); a larger one is refused before its "
                                    "data is inflated (a source tree unpacks to far less)")

    @property
    def kind(self) -> str:
        return next(k for k in KINDS if getattr(self, k) is not None)

    @model_validator(mode="after")
    def _one_source(self) -> FetchSource:
        named = [k for k in KINDS if getattr(self, k) is not None]
        if len(named) != 1:
            raise ValueError("name one source: repo (a Hugging Face repository), url (one file, with its sha256), "
                             "archive (a tar archive, with its sha256), github (owner/name at a commit), "
                             "livecodebench (a release, e.g. release_v6) or mlcommons_uri (a data set's .uri on "
                             "MLCommons' storage)" + (f"; not {' and '.join(named)}" if named else ""))
        kind = named[0]
        if kind == "mlcommons_uri":
            _check_uri(self.mlcommons_uri, self.revision)
        if kind in ("url", "archive"):
            link = getattr(self, kind)
            if not link.startswith(("http://", "https://")):
                raise ValueError(f"{kind}: {link!r} is not an http(s) URL")
            if self.sha256 is None:
                raise ValueError(f"sha256: {'a url' if kind == 'url' else 'an archive'} needs the file's sha256 (64 "
                                 "lowercase hex digits) to be verified")
            if self.revision is not None:
                raise ValueError("revision: only a repo, github or livecodebench source has one; remove it")
        if self.sha256 is not None and not SHA256.fullmatch(self.sha256):
            raise ValueError(f"sha256: {self.sha256!r} is not 64 lowercase hex digits")
        if self.sha256 is not None and kind in ("repo", "livecodebench", "mlcommons_uri"):
            raise ValueError(f"sha256: a {kind} source is verified file by file against its listing; remove it")
        if "max_unpacked_gib" in self.model_fields_set and kind not in ("archive", "github"):
            raise ValueError(f"max_unpacked_gib: a {kind} source is not unpacked; remove it")
        if kind in ("repo", "github") and "/" not in getattr(self, kind).strip("/"):
            example = "openai/gpt-oss-120b" if kind == "repo" else "mlcommons/inference"
            raise ValueError(f"{kind}: {getattr(self, kind)!r} is not owner/name, e.g. {example}")
        if self.revision is not None and not COMMIT.fullmatch(self.revision):
            raise ValueError(f"revision: {self.revision!r} is not a full commit (40 hex digits); a branch or a "
                             "short hash can move or clash: pin the commit, e.g. from the repository's history")
        return self

    def describe(self) -> str:
        kind = self.kind
        if kind in ("url", "archive", "mlcommons_uri"):
            return str(getattr(self, kind))
        return f"{self.hub}:{self.repo}" if kind == "repo" else f"{kind}:{getattr(self, kind)}"


def _check_uri(uri: str, revision: str | None) -> None:
    """A `mlcommons_uri` is the URL of a `.uri` file, as MLCommons' R2 downloader takes it (its `.md5` lies beside)."""
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment \
            or not parts.path.endswith(".uri") or parts.path.endswith("/.uri"):
        raise ValueError(f"mlcommons_uri: {uri!r} is not the http(s) URL of a <name>.uri file, e.g. "
                         "https://inference.mlcommons-storage.org/metadata/gpt-oss-data.uri")
    if revision is not None:
        raise ValueError("revision: only a repo, github or livecodebench source has one; remove it")


@dataclass(frozen=True)
class FetchItem:
    """One input to fetch, resolved against the round's pins."""

    field: str            # the plan field, e.g. benchmarks.0.fetch./mnt/mlperf/models/gpt-oss-120b
    dest: str             # as the plan writes it
    source: FetchSource
    revision: str | None  # the commit (repo, github, livecodebench items), the plan's or the round's
    repo: str | None = None          # the hub repository (repo, livecodebench) or owner/name (github)
    files: tuple[str, ...] = ()      # a livecodebench item: the release's files in the repository


def reads_from(dest: str, paths: list[str]) -> bool:
    """Whether one of the plan's `paths` is `dest` or lies under it."""
    root = dest.rstrip("/")
    return any(p.rstrip("/") == root or p.startswith(root + "/") for p in paths)


def fetch_problems(where: str, fetch: dict[str, FetchSource], paths: list[str] | None, rules: Rules,
                   inference_src: str | None = None) -> list[str]:
    """What is wrong with one `fetch` section: a benchmark's (`where` benchmarks.<i>, `paths` what it reads) or the
    plan's own (`where` empty, `paths` None: source archives only, mlcommons/inference where `inference_src` reads
    it); a destination no field reads, an unpinned repository, a pin the round already holds written differently."""
    problems = []
    for dest, src in fetch.items():
        field = f"{where}.fetch.{dest}" if where else f"fetch.{dest}"
        if dest.startswith("s3://"):
            problems.append(f"{field}: fetch writes to a filesystem path (a local or shared folder); fetch there, "
                            "then upload it or stage from it")
        elif paths is None and src.kind not in TOOL_KINDS:
            problems.append(f"{field}: the plan's own fetch section holds source archives (github, archive); move a "
                            f"{src.kind} source to the fetch section of the benchmark that reads it")
        elif paths is not None and not reads_from(dest, paths):
            problems.append(f"{field}: no field of this benchmark reads from it; make it the model.source, a data "
                            "set file, dataset.lcb_tests, dataset.math_grader or a folder that holds one")
        problems += _pin_problems(field, src, rules)
        checker = paths is None and src.github is not None and src.github == rules.inference_sources.github
        if checker and inference_src and dest.rstrip("/") != inference_src.rstrip("/"):
            problems.append(f"{field}: inference_src is {inference_src}, not this destination; make them one folder")
    return problems


def _pin_problems(field: str, src: FetchSource, rules: Rules) -> list[str]:
    if src.kind == "livecodebench":
        release = rules.livecodebench.get(src.livecodebench)
        if release is None:
            known = ", ".join(rules.livecodebench) or "none"
            return [f"{field}.livecodebench: round {rules.round} names no LiveCodeBench release "
                    f"{src.livecodebench!r} (it names: {known})"]
        if src.revision not in (None, release.revision):
            return [f"{field}.revision: the round pins {release.repo} at {release.revision}; remove revision"]
        return []
    if src.kind not in ("repo", "github"):
        return []
    name = getattr(src, src.kind)
    pin = (rules.hub_pins() if src.kind == "repo" else rules.source_pins()).get(name)
    if pin is not None and src.revision not in (None, pin):
        return [f"{field}.revision: the round pins {name} at {pin}; remove revision"]
    if pin is None and src.revision is None:
        return [f"{field}.revision: the round pins no commit of {name}; name it, e.g. revision: <the 40-hex commit>"]
    return []


def resolve(field: str, dest: str, src: FetchSource, rules: Rules) -> FetchItem:
    """The item `src` names, with the commit the plan or the round gives it."""
    if src.kind == "livecodebench":
        release = rules.livecodebench[src.livecodebench]
        return FetchItem(field, dest, src, release.revision, release.repo, release.files)
    if src.kind == "repo":
        return FetchItem(field, dest, src, src.revision or rules.hub_pins().get(src.repo), src.repo)
    if src.kind == "github":
        return FetchItem(field, dest, src, src.revision or rules.source_pins().get(src.github), src.github)
    return FetchItem(field, dest, src, None)


def items(benchmarks: list, rules: Rules, own: dict[str, FetchSource] | None = None) -> list[FetchItem]:
    """Every fetch of the plan (its own section first, then its benchmarks'), once per destination (benchmarks that
    share one name one source)."""
    sections = [("", own or {}), *((f"benchmarks.{i}.", b.fetch) for i, b in enumerate(benchmarks))]
    found: dict[str, FetchItem] = {}
    for prefix, fetch in sections:
        for dest, src in fetch.items():
            item = resolve(f"{prefix}fetch.{dest}", dest, src, rules)
            seen = found.get(dest)
            if seen is not None and (seen.source, seen.revision) != (item.source, item.revision):
                raise ValueError(f"{item.field}: {seen.field} fetches another source to the same destination; "
                                 "name one source per destination")
            found.setdefault(dest, item)
    return list(found.values())
