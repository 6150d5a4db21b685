"""The manual as the tests read it: its pages, their code, the fenced shell blocks of the quickstarts with the reason
written before a block the tests do not run, and a runner that runs a page's commands as a user types them.

A quickstart's shell block is run by its test unless the line right before it (blank lines aside) is
`<!-- not run by the tests: REASON -->`. Its commands are its lines, a line ending in `\\` or inside an open quote
joined to the next, comments and blank lines left out.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).parents[1]
DOCS = REPO / "docs"
QUICKSTARTS = ("quickstart-local.md", "quickstart-slurm.md", "quickstart-kubernetes.md")
SHELL = ("bash", "sh", "shell", "console")
CODE = re.compile(r"```.*?```|`[^`\n]+`", re.DOTALL)   # fenced blocks and code spans
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
NOT_RUN = re.compile(r"<!--\s*not run by the tests:\s*((?:(?!-->).)*?)\s*-->\s*\Z", re.DOTALL)   # one comment
STEP = re.compile(r"^## (\d+)\. (.+)$", re.MULTILINE)


def pages() -> list[Path]:
    """README.md and every page of docs/ (the generated plan.md and cli.md included)."""
    return [REPO / "README.md", *sorted(DOCS.glob("*.md"))]


def code(markdown: str) -> list[str]:
    """The code of a Markdown text: each fenced block and each code span, with its backticks."""
    return CODE.findall(markdown)


@dataclass(frozen=True)
class Block:
    page: str
    line: int             # where its fence opens, 1-based
    lang: str
    text: str
    step: int | None      # the number of the `## N. ...` step it sits under
    not_run: str | None   # the reason written right before it, when the tests do not run it

    def commands(self) -> list[str]:
        return commands(self.text)


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a page, in order."""
    text = path.read_text()
    steps = [(m.start(), int(m.group(1))) for m in STEP.finditer(text)]
    out = []
    for m in FENCE.finditer(text):
        before = NOT_RUN.search(text[:m.start()].rstrip() + "\n")
        step = max((n for at, n in steps if at < m.start()), default=None)
        out.append(Block(path.name, text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2), step,
                         before.group(1) if before else None))
    return out


def shell_blocks(path: Path) -> list[Block]:
    return [b for b in blocks(path) if b.lang in SHELL]


def runnable(path: Path) -> list[str]:
    """The commands of a page the tests run, in the page's order."""
    return [c for b in shell_blocks(path) if b.not_run is None for c in b.commands()]


def commands(text: str) -> list[str]:
    """The commands of a shell block: continuation lines and open quotes joined, comment lines left out."""
    out: list[str] = []
    pending = ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending = f"{pending}\n{line}" if pending else line
        if pending.endswith("\\"):
            continue
        try:
            shlex.split(pending, comments=True)
        except ValueError:   # a quote still open: the command goes on
            continue
        out.append(pending)
        pending = ""
    assert not pending, f"a command that never ends: {pending!r}"
    return out


def bare(command: str) -> str:
    """A command without its trailing comment (how the tests name the command whose output they read)."""
    quote = ""
    for at, char in enumerate(command):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and at and command[at - 1].isspace():
            return command[:at].rstrip()
    return command


@dataclass
class Runner:
    """Runs a page's commands with bash, as a user would in `cwd`, with `env`. `export` lines set the runner's
    environment for the commands after them, except the names in `pinned` (where the test points a variable at what
    it prepared, e.g. PLAN at a plan cut to what a test can run). Every command it ran is in `ran`."""

    cwd: Path
    env: dict[str, str]
    pinned: frozenset[str] = frozenset()
    ran: list[str] = field(default_factory=list)

    def run(self, command: str, *, expect: int = 0, timeout_s: float = 300, instead: str | None = None
            ) -> subprocess.CompletedProcess[str]:
        """Run `command` (or `instead`, a test's version of it, recorded as `command`); assert its exit code."""
        self.ran.append(command)
        script = instead or command
        if script.startswith("export "):
            script += "\nenv -0"
        done = subprocess.run(["bash", "-c", script], cwd=self.cwd, env=self.env, capture_output=True, text=True,
                              timeout=timeout_s, check=False)
        assert done.returncode == expect, f"{script}\nexit {done.returncode}:\n{done.stdout}\n{done.stderr}"
        if script.endswith("\nenv -0"):
            names = set(re.findall(r"(?:^export|\s)([A-Za-z_]\w*)=", script.split("\n")[0]))
            found = dict(v.split("=", 1) for v in done.stdout.split("\0") if "=" in v)
            self.env.update({n: found[n] for n in names - self.pinned})
        return done


def runner_env(**pinned: str) -> dict[str, str]:
    """The environment of a page's commands: this interpreter's `podium` and `prefect` first on PATH, this checkout's
    code first on PYTHONPATH, and the pinned variables."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    python_path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PATH": path, "PYTHONPATH": python_path, **pinned}


def checkout(folder: Path) -> Path:
    """A folder that looks like the repository's root (each top-level entry a link to it, .venv too), so that what
    a page's commands write lands in the test's folder, not in the repository."""
    folder.mkdir(parents=True, exist_ok=True)
    for entry in REPO.iterdir():
        if entry.name not in (".podium", "build", "site"):   # what the pages write stays the test's (the Slurm
            # page's site/); .git is linked too: a page may ask `git rev-parse`
            (folder / entry.name).symlink_to(entry)
    return folder
