"""The manual reads as a manual and builds as a site: no page reads like a change log, names a path outside the
repository, states facts of the machines Podium is built on or calls a published system by a working name; every
section a file points at is there and every link resolves in the checkout; the quickstarts go in numbered steps from
fetching the inputs to submitting, each shell block in them is run by a test or says why not, and the figures they
quote from the dry run are the ones it prints; the generated references cover every plan field and every command and
are committed as the code generates them; `mkdocs build --strict` passes; and the facts the review found wrong stay
right."""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.manual import CODE, DOCS, QUICKSTARTS, REPO, STEP, blocks, pages, shell_blocks

# Phrases of a change log or a test diary: what a page said before, what a session did. History goes in
# CHANGELOG.md and git log.
PHRASES = ("before this change", "after this change", "before the change", "before the fix", "after the fix",
           "this session", "other sessions", "was available to", "on this branch", "on the final code",
           "device tool", "the issue's")
# Paths of the machines the project is developed on, never a user's: absolute ones (not `<workspace>/work/...`) and
# the folder beside the checkout (spelled in pieces: tests/unit/test_architecture.py scans this file too).
NEIGHBOUR = "shared"
OUTSIDE = re.compile(rf"(?<![\w>}}.-])(?:/work/|/root/|/tmp/pytest-)|\.\./{NEIGHBOUR}\b")
# Facts of the machines Podium is built and tested on: the manual speaks to operators, whose machines these are not (a
# measured figure states its conditions instead, "on 2 CPU cores"). The developers' page describes the test machines.
BUILD_MACHINE = re.compile(r"\b\d+-core (?:machine|vm)s?\b|\b(?:development|developers'|ci|test) machines?\b"
                           r"|\bscreenshot", re.IGNORECASE)
DEVELOPERS = "docs/development.md"
# A working name for the published results the shipped plans reproduce: the manual names them (Crusoe's MLPerf
# Inference v6.1 results, closed/Crusoe in mlcommons/inference_results_v6.1).
WORKING_NAME = re.compile(r"\bthe seed\b", re.IGNORECASE)
# `docs/PAGE.md, "Heading"` (or `docs/PAGE.md "Heading"`, or `, step N`) anywhere in a tracked file
REFERENCE = re.compile(r"docs/([\w-]+)\.md(?:,?\s+(?:\\?\"([^\"\\]+)\\?\"|step (\d+)))?")


def findings(files: dict[str, str]) -> list[str]:
    """Each change-log phrase, path outside the repository, fact of the build machine (outside the developers' page)
    and working name in these texts, as `name:line what`."""
    found = []
    for name, text in sorted(files.items()):
        lower = text.lower()
        for phrase in PHRASES:
            for at in (m.start() for m in re.finditer(re.escape(phrase), lower)):
                found.append(f"{name}:{text.count(chr(10), 0, at) + 1} reads like a change log: {phrase!r}")
        kinds = [(OUTSIDE, "names a path outside the repository"),
                 (WORKING_NAME, "names a published system by a working name")]
        if name != DEVELOPERS:
            kinds.append((BUILD_MACHINE, "states a fact of the build machine"))
        for pattern, what in kinds:
            found += [f"{name}:{text.count(chr(10), 0, m.start()) + 1} {what}: {m.group(0)!r}"
                      for m in pattern.finditer(text)]
    return found


def test_no_page_reads_like_a_change_log_or_names_a_path_outside_the_repository() -> None:
    files = {p.relative_to(REPO).as_posix(): p.read_text() for p in pages()}
    assert "README.md" in files and "docs/quickstart-local.md" in files
    assert findings(files) == []


def test_the_finder_finds_each_kind() -> None:
    planted = {"docs/a.md": "Before the fix the run failed.\nIt was available to this session.\n",
               "docs/b.md": f"see /work/main/docs, ../{NEIGHBOUR}/notes.md and /root/.pyenv\n",
               "docs/c.md": "runs land in `<workspace>/work/runs/<key>/`; `/tmp/junit.xml` is fine\n",
               "docs/d.md": "~45 s on this 2-core machine (shared 2-core VMs);\nThe Seed's plan, from the CI "
                            "machine; a screenshot.\nOn 2 CPU cores, seeded weights, the round's seed: fine.\n",
               DEVELOPERS: "Measured on the developers' machine (2 shared cores); the seed is wrong here too.\n"}
    assert findings(planted) == [
        "docs/a.md:1 reads like a change log: 'before the fix'",
        "docs/a.md:2 reads like a change log: 'this session'",
        "docs/a.md:2 reads like a change log: 'was available to'",
        "docs/b.md:1 names a path outside the repository: '/work/'",
        f"docs/b.md:1 names a path outside the repository: '../{NEIGHBOUR}'",
        "docs/b.md:1 names a path outside the repository: '/root/'",
        "docs/d.md:2 names a published system by a working name: 'The Seed'",
        "docs/d.md:1 states a fact of the build machine: '2-core machine'",
        "docs/d.md:1 states a fact of the build machine: '2-core VMs'",
        "docs/d.md:2 states a fact of the build machine: 'CI machine'",
        "docs/d.md:2 states a fact of the build machine: 'screenshot'",
        f"{DEVELOPERS}:1 names a published system by a working name: 'the seed'",
    ]


# ----- references from code and pages to the manual's sections ---------------------------------------------------
def headings(page: str) -> list[str]:
    """The headings of a page as text (code marks and links dropped)."""
    text = re.sub(r"^```.*?^```", "", (DOCS / page).read_text(), flags=re.DOTALL | re.MULTILINE)
    found = re.findall(r"^#{1,4} (.+?)(?:\s*\{#[\w-]+\})?\s*$", text, re.MULTILINE)
    return [re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", h).replace("`", "") for h in found]


def broken_references(files: dict[str, str]) -> list[str]:
    """Each `docs/PAGE.md, "Heading"` whose page is not there or has no heading holding that text."""
    broken = []
    for name, text in sorted(files.items()):
        for m in REFERENCE.finditer(text):
            page, heading, step = m.group(1) + ".md", m.group(2), m.group(3)
            line = f"{name}:{text.count(chr(10), 0, m.start()) + 1}"
            if not (DOCS / page).is_file():
                broken.append(f"{line} {page} is not a page of the manual")
            elif heading and not any(" ".join(heading.split()).lower() in h.lower() for h in headings(page)):
                broken.append(f"{line} {page} has no section {' '.join(heading.split())!r}")
            elif step and not any(h.startswith(f"{step}. ") for h in headings(page)):
                broken.append(f"{line} {page} has no step {step}")
    return broken


def test_every_section_a_file_points_at_is_there() -> None:
    names = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    # history names the pages as they were; these tests plant references that are not there, or name mlcommons/
    # inference's own docs/ files
    skip = {"CHANGELOG.md", "tests/unit/test_docs_pages.py", "tests/unit/test_architecture.py",
            "tests/unit/test_fetch_archives.py"}
    files = {n: (REPO / n).read_text(errors="replace") for n in names
             if n not in skip and n.endswith((".py", ".md", ".yaml", ".yml", ".sh", ".sbatch", ".toml", "Makefile"))
             and (REPO / n).is_file()}
    assert len(files) > 100
    assert broken_references(files) == []


def test_a_broken_reference_is_found() -> None:
    planted = {"a.py": 'fix = "see docs/runs.md, \\"The cache\\" and docs/operations.md, \\"Production quickstart"\n',
               "b.md": "docs/nowhere.md; docs/quickstart-slurm.md, step 1; docs/quickstart-slurm.md, step 12\n"}
    assert broken_references(planted) == ["a.py:1 operations.md has no section 'Production quickstart'",
                                          "b.md:1 nowhere.md is not a page of the manual",
                                          "b.md:1 quickstart-slurm.md has no step 12"]


# A Markdown link or image: [text](target) or ![alt](target), its target up to a space or the closing parenthesis
LINK = re.compile(r"\]\(([^)\s]+)")


def unresolved(files: dict[Path, str]) -> list[str]:
    """Each relative link in these pages (code left out) whose file is not in the checkout, as `name:line target`:
    what a reader following it on GitHub would find missing. URLs and anchors of the same page are not files."""
    broken = []
    for path, text in sorted(files.items()):
        prose = CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)   # same lines, no code
        for m in LINK.finditer(prose):
            target = m.group(1).split("#")[0]
            if not target or re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue
            if not (path.parent / target).exists():
                broken.append(f"{path.name}:{prose.count(chr(10), 0, m.start()) + 1} {m.group(1)}")
    return broken


def test_every_link_of_the_manual_resolves_in_the_checkout() -> None:
    files = {p: p.read_text() for p in pages()}
    assert sum(len(LINK.findall(t)) for t in files.values()) > 100
    assert unresolved(files) == []


def test_an_unresolved_link_is_found(tmp_path: Path) -> None:
    (tmp_path / "here.md").write_text("x")
    page = tmp_path / "a.md"
    planted = {page: "[Plan fields](plan.md), [x](here.md#top), [y](#local), [z](https://example.org/a.md)\n"
                     "`[not a link](gone.md)`\n```\n[nor this](gone.md)\n```\n![img](images/x.png \"t\")\n"}
    assert unresolved(planted) == ["a.md:1 plan.md", "a.md:6 images/x.png"]


# ----- the quickstarts -------------------------------------------------------------------------------------------
# the steps every quickstart takes, in this order (a preflight and a dry run in either order)
ORDER = (r"\bfetch\b", r"\bpreflight\b|\bdry run\b", r"^run\b", r"\bcheck\b", r"\bsubmit\b")


@pytest.mark.parametrize("page", QUICKSTARTS)
def test_a_quickstart_goes_in_numbered_steps_from_fetch_to_submit(page: str) -> None:
    steps = [(int(n), title.lower()) for n, title in STEP.findall((DOCS / page).read_text())]
    assert [n for n, _ in steps] == list(range(1, len(steps) + 1)), steps
    at = []
    for kinds in ORDER:
        hits = [n for n, title in steps if re.search(kinds, title)]
        assert hits, f"{page} has no step for {kinds}"
        at.append((min(hits), max(hits)))
    assert all(a[1] < b[0] for a, b in itertools.pairwise(at)), f"{page}: {steps}"


# The shell blocks each quickstart's test does not run, each with its reason on the page (what only a real cluster,
# real GPUs, the MLCommons server or a network download can do, or what another test runs): pinned, so that a new
# exemption fails here until it is counted
NOT_RUN_BLOCKS = {"quickstart-local.md": 5, "quickstart-slurm.md": 5, "quickstart-kubernetes.md": 6}


@pytest.mark.parametrize("page", QUICKSTARTS)
def test_each_quickstart_block_is_run_by_its_test_or_says_why_not(page: str) -> None:
    """The page names its test, which runs the page's runnable commands (`runnable`) and asserts it ran each of them
    in order; every other block says why it is not run, and there are as many of those as pinned."""
    text = (DOCS / page).read_text()
    [test] = re.findall(r"`(tests/integration/test_\w+\.py)`", text.split("## 1.")[0])
    source = (REPO / test).read_text()
    assert page in source, f"{test} does not read {page}"
    assert "runnable(PAGE)" in source and "runner.ran == commands" in source, f"{test} does not run the page"
    found = shell_blocks(DOCS / page)
    for block in found:
        assert block.commands(), f"{page}:{block.line} holds no command"
        assert block.not_run is None or (len(block.not_run) > 20 and "<!--" not in block.not_run), \
            f"{page}:{block.line}: say why it is not run, in one comment"
    exempt = [(b.line, b.not_run) for b in found if b.not_run is not None]
    assert len(exempt) == NOT_RUN_BLOCKS[page], exempt
    assert len(found) > len(exempt), f"{page}: the tests run none of its commands"


@pytest.mark.parametrize("page", QUICKSTARTS)
def test_a_quickstart_submits_one_tree_assembled_from_several_sources(page: str) -> None:
    """A round is one submission (each upload opens a new one): the page's `podium submit` commands all send the tree
    its `podium assemble` writes from two sources or more, after it."""
    commands = [shlex.split(c, comments=True) for b in shell_blocks(DOCS / page) for c in b.commands()]
    podium = [c[1:] for c in commands if c and c[0].endswith("podium")]   # podium's arguments, in the page's order
    [assemble] = [(at, c) for at, c in enumerate(podium) if c[0] == "assemble"]
    submits = [(at, c) for at, c in enumerate(podium) if c[0] == "submit"]
    at, argv = assemble
    assert argv.count("--from") >= 2, argv
    tree = f"{argv[argv.index('--out') + 1]}/submission"
    assert submits and all(after > at and c[1] == tree for after, c in submits), (tree, submits)


def test_the_block_reader_finds_the_reason_and_joins_lines(tmp_path: Path) -> None:
    page = tmp_path / "q.md"
    page.write_text("## 1. Install\n\n<!-- not run by the tests: it installs -->\n\n```bash\nmake install\n```\n\n"
                    "## 2. Run\n\n```bash\n# a comment\nexport A=1\nsrun x \\\n  --y\nbash -c 'a &&\n  b'\n```\n"
                    "<!-- not run by the tests: a reason far from any block -->\n\nText.\n\n```yaml\nx: 1\n```\n")
    found = blocks(page)
    assert [(b.lang, b.step, b.not_run) for b in found] == [("bash", 1, "it installs"), ("bash", 2, None),
                                                             ("yaml", 2, None)]
    page.write_text(page.read_text() + "<!-- not run by the tests: the second one -->\n```bash\nmake b\n```\n")
    assert [b.not_run for b in blocks(page)] == ["it installs", None, None, "the second one"]   # its own comment
    assert found[1].commands() == ["export A=1", "srun x \\\n  --y", "bash -c 'a &&\n  b'"]


def _shipped(plan: str) -> dict:
    return yaml.safe_load((REPO / "deployments" / "plans" / plan).read_text())


@pytest.mark.parametrize(("page", "plan"), [("quickstart-slurm.md", "qwen3-vl-dynamo-50-50.yaml"),
                                            ("quickstart-kubernetes.md", "gpt-oss-120b-trtllm-k8s.yaml")])
def test_the_plan_step_names_every_field_a_site_must_change(page: str, plan: str) -> None:
    """The fields the shipped plan fills with Podium's own values (`submitter: Podium`), its storage and its system
    description are each named in the quickstart's step that edits the plan."""
    text = (DOCS / page).read_text()
    step = re.search(r"^## \d+\. The plan\n(.*?)^## ", text, re.DOTALL | re.MULTILINE).group(1)
    ours = [k for k, v in _shipped(plan).items() if v == "Podium"]
    assert ours == ["submitter"]
    for field in [*ours, "storage", "systems[].description"]:
        assert f"`{field}`" in step, f"{page}'s plan step does not name {field}"


# The figures of the Slurm dry run (submission/budget/slurm_time.py) the Slurm quickstart quotes, each found by the same
# pattern in the page and in what the dry run of the page's plan prints
SLURM_FIGURES = {"runs and their time": r"Slurm time: (\d+) run\(s\) x their length x [\d.]+ = (\d\d:\d\d:\d\d)",
                 "the engine's allocation": r"time_limit >= (\d\d:\d\d:\d\d)",
                 "the job": r"needs --time >= (\d\d:\d\d:\d\d) for the whole plan",
                 "the sbatch command's --time": r"\bsbatch [^`]*?--time=(\d\d:\d\d:\d\d)"}
TIME = re.compile(r"\b\d\d:\d\d:\d\d\b")


def test_the_slurm_quickstart_quotes_the_dry_run_of_its_plan(tmp_path: Path) -> None:
    """Every Slurm time on the page is one the dry run of the page's plan prints now, each figure the page quotes in
    its place (the runs, the engine's allocation, the job, the sbatch command's --time)."""
    from typer.testing import CliRunner

    from flows.cli import app

    page = (DOCS / "quickstart-slurm.md").read_text()
    plan = re.search(r"\bcp (deployments/plans/\S+\.yaml) ", page).group(1)
    done = CliRunner().invoke(app, ["launch", str(REPO / plan), "--dry-run", "--workspace", str(tmp_path)])
    assert done.exit_code == 0, done.output
    flat = " ".join(page.split())   # a quote may break across the page's lines
    for what, pattern in SLURM_FIGURES.items():
        printed, quoted = set(re.findall(pattern, done.output)), set(re.findall(pattern, flat))
        assert printed and quoted == printed, f"{what}: the page says {quoted}, the dry run of {plan} prints {printed}"
    assert set(TIME.findall(page)) <= set(TIME.findall(done.output)), (TIME.findall(page), done.output[-2000:])


def test_the_first_page_links_to_the_three_quickstarts() -> None:
    first = (DOCS / "index.md").read_text().split("\n## ", 2)
    start = first[0] + first[1]   # the title and the section after it
    for page in QUICKSTARTS:
        assert f"]({page})" in start


# ----- the generated references and the site ----------------------------------------------------------------------
def _hooks():   # docs/hooks.py, as mkdocs loads it
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _models(model: type) -> list[type]:
    """`model` and every model its fields name, once each."""
    from pydantic import BaseModel

    out, todo = [], [model]
    while todo:
        m = todo.pop()
        if m in out:
            continue
        out.append(m)
        for f in m.model_fields.values():
            args = [f.annotation, *getattr(f.annotation, "__args__", ())]
            args += [a for x in list(args) for a in getattr(x, "__args__", ())]
            todo += [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
    return out


def test_the_generated_pages_are_committed_as_the_code_generates_them() -> None:
    """docs/plan.md and docs/cli.md are in the checkout (a link to them resolves there and on GitHub) and hold what
    docs/hooks.py generates from the code now."""
    hooks = _hooks()
    pages = hooks.generated()
    assert set(pages) == {"plan.md", "cli.md"}
    assert hooks.stale(pages) == [], f"run `{hooks.REGENERATE}` and commit what it writes"


def test_the_plan_reference_has_every_field_of_every_model() -> None:
    from submission.plan.engine_options import OPTIONS
    from submission.plan.model import Plan
    from submission.plan.slurm_options import SlurmSettings

    text = _hooks().plan_reference()
    sections = re.split(r"^## ", text, flags=re.MULTILINE)
    models = _models(Plan) + [m for o in {*OPTIONS.values(), SlurmSettings} for m in _models(o)]
    for model in models:
        fields = set(model.model_fields)
        assert any(fields <= set(re.findall(r"^\| `(\w+)` \|", s, re.MULTILINE)) for s in sections), model.__name__
    for name in OPTIONS:
        assert f"`{name}`" in text
    assert "| `submitter` | string | *required* |" in text
    assert "| `target_qps` | number > 0, ≤ 1000000000 or null | `null` |" in text


def test_the_cli_reference_has_every_command_and_exit_code() -> None:
    import typer.main

    from flows.cli import app
    from submission.base import errors

    text = _hooks().cli_reference()
    group = typer.main.get_command(app)
    for name, command in group.commands.items():
        for sub in getattr(command, "commands", {None: None}):
            assert f"`podium {name}{' ' + sub if sub else ''}`" in text, name
    for error in (errors.PlanError, errors.StorageError, errors.RunFailed):
        assert f"| {error.exit_code} | `{error.__name__}` |" in text


def test_the_site_builds_with_no_warning(tmp_path: Path) -> None:
    """`make docs` as a test: mkdocs with --strict (a broken link or anchor, a page left out of the menu, a warning of
    the generated pages: each fails it); the first page links to the quickstarts, the generated pages are there."""
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
                          env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    index = (tmp_path / "site" / "index.html").read_text()
    for page in QUICKSTARTS:
        assert f'href="{page.removesuffix(".md")}/"' in index
    assert "benchmarks[].scenarios.&lt;name&gt;" in (tmp_path / "site" / "plan" / "index.html").read_text()
    assert "podium preflight" in (tmp_path / "site" / "cli" / "index.html").read_text()


def test_the_retention_rule_names_the_prefix_podium_setup_registers() -> None:
    """The lifecycle rule's prefix for Prefect's results is the folder `podium setup` (no prefix) saves them in."""
    from tasks.ops.registration import RESULTS_FOLDER
    from tasks.storage.objects import StorageConfig, object_key

    text = (DOCS / "operations.md").read_text()
    rules = json.loads(re.search(r"```json\n(.*?)```", text.split("Retention rule")[1], re.DOTALL).group(1))
    [rule] = [r for r in rules["Rules"] if r["ID"] == "prefect-results-30d"]
    assert rule["Filter"]["Prefix"] == object_key(StorageConfig(None, "bucket"), RESULTS_FOLDER) + "/"
