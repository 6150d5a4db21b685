"""The layout docs/architecture.md describes, kept true: imports go flows -> tasks -> submission only, and inside
submission/ and tasks/ from each part only to the parts below it in LAYERS (each exception named with its reason); no
module imports another that imports it back (imports inside functions count), no function runs over 60 lines outside
bench/, and no tracked file leans on what sits beside the checkout or on this project's issue numbers."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).parents[2]
PACKAGES = ("flows", "tasks", "submission")
LAYER = {"submission": 0, "tasks": 1, "flows": 2}
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every module of ours that `name` imports, anywhere in its body (a function's imports too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[:len(package.split(".")) - node.level + 1], *filter(None, [base])])
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


# The parts of each package, lowest first: a part imports only parts of an earlier row. Parts on one row are
# siblings and import nothing of each other. In tasks/ a part is a folder or a top-level module.
LAYERS: dict[str, list[tuple[str, ...]]] = {
    "submission": [("base",), ("rules",), ("plan",), ("results",), ("budget", "tree"), ("checks",)],
    "tasks": [
        ("clock", "datasets", "storage"),
        ("accuracy", "engines"),                      # evaluators read data sets; backends describe processes
        ("launchers", "measuring", "clients"),        # where engines run; what every measured run shares
        ("steps", "workspace"),
        ("staging",),
        ("serving",),                                 # an engine built, launched, warmed up, watched
        ("reporting",),
        ("tuning",),                                  # the search and its probe task (which asks `clients`)
        ("harness", "endpoints"),                     # the two measuring clients, each on an engine session
        ("compliance", "rehearsal", "run_step", "submit", "tree"),
        ("ops",),                                     # preflight and the cluster checks look at everything
    ],
}
# Imports that climb, allowed one by one (a module, the part it reaches into), each with its reason.
CLIMBS_ALLOWED = {
    ("tasks.serving.warmup", "tasks.harness"):
        "the warm-up sends its untimed requests through the loadgen client's own request builder and HTTP client",
}


def _part(module: str) -> str | None:
    """The part of its package that `module` belongs to (None for a package's own __init__)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def climbs(graph: dict[str, set[str]]) -> list[str]:
    """Every import that leaves its part for one that is not below it (LAYERS), less CLIMBS_ALLOWED."""
    out = []
    for a, targets in sorted(graph.items()):
        for b in sorted(targets):
            package = a.split(".")[0]
            if b.split(".")[0] != package or package not in LAYERS:
                continue
            rank = {part: i for i, row in enumerate(LAYERS[package]) for part in row}
            pa, pb = _part(a), _part(b)
            if pa is None or pb is None or pa == pb or (a, f"{package}.{pb}") in CLIMBS_ALLOWED:
                continue
            if pa not in rank or pb not in rank or rank[pb] >= rank[pa]:
                out.append(f"{a} imports {b}")
    return out


def test_imports_go_one_way_and_never_round() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    upward = [f"{a} imports {b}" for a, targets in graph.items() for b in targets
              if LAYER[b.split(".")[0]] > LAYER[a.split(".")[0]]]
    assert upward == [], "submission/ imports nothing of tasks/ or flows/, tasks/ nothing of flows/"
    assert climbs(graph) == [], "inside submission/ and tasks/, a part imports only the parts below it (LAYERS)"
    assert _cycles(graph) == []


def test_every_allowed_climb_still_happens() -> None:
    modules = _modules()
    for a, part in CLIMBS_ALLOWED:
        assert any(b.startswith(f"{part}.") for b in _imports(a, modules[a], modules)), \
            f"{a} no longer imports {part}: drop it from CLIMBS_ALLOWED"


def test_a_planted_upward_import_is_found() -> None:
    planted = {"tasks.engines.simulated.queueing": {"tasks.tuning.bisection", "tasks.clock"},
               "tasks.harness.sut": {"tasks.endpoints.runner"},          # a sibling
               "tasks.serving.warmup": {"tasks.harness.child"},          # allowed, with its reason
               "tasks.newroom.x": {"tasks.clock"},                       # a part the contract does not know
               "submission.plan.model": {"submission.tree.paths"},
               "submission.checks.run": {"submission.results.logs"}}
    assert climbs(planted) == ["submission.plan.model imports submission.tree.paths",
                               "tasks.engines.simulated.queueing imports tasks.tuning.bisection",
                               "tasks.harness.sut imports tasks.endpoints.runner",
                               "tasks.newroom.x imports tasks.clock"]


def test_every_part_is_in_the_contract_and_says_what_it_holds() -> None:
    assert sorted(p.name for p in (REPO / "submission").glob("*.py")) == ["__init__.py"]
    for package, rows in LAYERS.items():
        named = sorted(part for row in rows for part in row)
        folders = [p.name for p in (REPO / package).iterdir() if (p / "__init__.py").is_file()]
        top = [p.stem for p in (REPO / package).glob("*.py") if p.name != "__init__.py"]
        assert sorted(folders + top) == named, package
        assert len(top) <= 10, top
        for folder in folders:   # each says what it holds (docs/architecture.md is the map)
            assert ast.get_docstring(ast.parse((REPO / package / folder / "__init__.py").read_text())), folder


def test_the_cycle_finder_finds_one() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_function_over_sixty_lines_outside_bench() -> None:
    long = []
    for folder in (*PACKAGES, "tests", "deployments"):
        for path in (REPO / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = node.end_lineno - node.lineno + 1   # type: ignore[operator]
                    if lines > MAX_FUNCTION_LINES:
                        long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []


# The project stands on its own: no tracked file names a folder beside the checkout (where the development machines
# keep notes and archives), and none cites an issue number of this project, which a reader of the repository cannot
# open; sources are cited by their upstream location and commit, upstream issues as owner/repo#N. `.ci/run` alone
# names where CI finds the endpoints client's archive (GitHub is out of reach there). The names are spelled in
# pieces below so that this file passes its own test and a plain `git grep` for them.
NEIGHBOUR, ISSUE, HASH = "shared", "issue", "#"
OUTSIDE = re.compile(rf"\.\./{NEIGHBOUR}|/work/{NEIGHBOUR}|{NEIGHBOUR}/(?:reference|tools|vendor)")
PROJECT_ISSUE = re.compile(r"\b[Ii]ssues?[\s#]*(?:no\.\s*)?\d+|(?<![\w/.&-])#\d+\b")
MAY_NAME_OUTSIDE = {".ci/run"}


def _self_reference_findings(files: dict[str, str]) -> list[str]:
    found = []
    for name, text in sorted(files.items()):
        for pattern, what in ((OUTSIDE, "names a path outside the repository"),
                              (PROJECT_ISSUE, "cites an issue of this project")):
            if pattern is OUTSIDE and name in MAY_NAME_OUTSIDE:
                continue
            for match in pattern.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{name}:{line} {what}: {match.group(0)!r}")
    return found


def test_no_tracked_file_names_the_neighbours_or_an_issue_number() -> None:
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: no list of tracked files")
    names = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.split(b"\0")
    files = {}
    for name in filter(None, (n.decode() for n in names)):
        path = REPO / name
        data = path.read_bytes() if path.is_file() else b""
        if b"\0" not in data:   # text files only (the plots are PNGs)
            files[name] = data.decode("utf-8", errors="replace")
    assert len(files) > 100 and "tests/unit/test_architecture.py" in files   # the listing worked
    assert _self_reference_findings(files) == []


def test_the_self_reference_finder_finds_each_kind() -> None:
    planted = {
        "docs/a.md": f"see ../{NEIGHBOUR}/reference/rules.md §2 ({ISSUE} 13's review)\n",
        "b.py": f"# the fix of\n# {ISSUE}\n# 24, and {HASH}7\n",
        "c.yaml": f"x: 1  # /work/{NEIGHBOUR}/vendor/x.tar.gz\n",
        ".ci/run": f"make test SRC=../{NEIGHBOUR}/vendor/x.tar.gz\n",
        "ok.md": "upstream mlcommons/inference#2654 and minio/minio#21647; issues of the fleet; #!/bin/sh; &#38;\n",
    }
    assert _self_reference_findings(planted) == [
        f"b.py:2 cites an issue of this project: '{ISSUE}\\n# 24'",
        f"b.py:3 cites an issue of this project: '{HASH}7'",
        f"c.yaml:1 names a path outside the repository: '/work/{NEIGHBOUR}'",
        f"docs/a.md:1 names a path outside the repository: '../{NEIGHBOUR}'",
        f"docs/a.md:1 cites an issue of this project: '{ISSUE} 13'",
    ]
