"""No argv is built through a shell: an AST scan of every Python file the repository tracks (not the virtualenvs, nor
what a workspace holds: the round's own tools unpacked there use shells) for
`shell=True`, `os.system`, `os.popen`, `asyncio.create_subprocess_shell`, and subprocess calls whose command is a
string (a literal, an f-string, a concatenation or `.format()`). Nothing is allowlisted: a finding fails the test."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.faults]

REPO = Path(__file__).parents[2]
SUBPROCESS_CALLS = {"run", "call", "check_call", "check_output", "Popen", "getoutput", "getstatusoutput"}
SHELL_CALLS = {("os", "system"), ("os", "popen"), ("asyncio", "create_subprocess_shell"),
               ("subprocess", "getoutput"), ("subprocess", "getstatusoutput")}


def python_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z", "--", "*.py"], cwd=REPO, capture_output=True, check=True)
    return sorted(REPO / name.decode() for name in listed.stdout.split(b"\0") if name)


def _dotted(node: ast.expr) -> tuple[str, ...]:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.insert(0, node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.insert(0, node.id)
    return tuple(parts)


def _is_string(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mod):
        return _is_string(node.left) or _is_string(node.right)
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format" \
        and _is_string(node.func.value)


def findings(source: str, name: str) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(source, name)):
        if not isinstance(node, ast.Call):
            continue
        where = f"{name}:{node.lineno}"
        dotted = _dotted(node.func)
        for kw in node.keywords:
            if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                out.append(f"{where}: shell={ast.unparse(kw.value)}")
        if dotted[-2:] in SHELL_CALLS:
            out.append(f"{where}: {'.'.join(dotted)}()")
        elif len(dotted) >= 2 and dotted[-2] == "subprocess" and dotted[-1] in SUBPROCESS_CALLS:
            command = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "args"), None)
            if command is not None and _is_string(command):
                out.append(f"{where}: subprocess.{dotted[-1]} with a string command")
    return out


def test_the_scanner_catches_each_form() -> None:
    bad = ("import os, subprocess, asyncio\nsubprocess.run('ls -l', shell=True)\nos.system('ls')\n"
           "os.popen('ls')\nsubprocess.check_output(f'ls {x}')\nsubprocess.Popen('a' + b)\n"
           "asyncio.create_subprocess_shell('ls')\nsubprocess.call(args='ls {}'.format(1))\n")
    assert len(findings(bad, "bad.py")) == 8
    good = "import subprocess\nsubprocess.run(['ls', '-l'], check=True)\nsubprocess.run(argv, shell=False)\n"
    assert findings(good, "good.py") == []


def test_no_argv_goes_through_a_shell() -> None:
    files = python_files()
    assert len(files) > 100 and any(p.parts[-2:] == ("launchers", "local.py") for p in files)
    found = [f for p in files for f in findings(p.read_text(), str(p.relative_to(REPO)))]
    assert found == [], "\n".join(found)
