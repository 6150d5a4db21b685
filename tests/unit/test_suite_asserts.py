"""Every test checks something: a `def test_` anywhere in tests/ that has no `assert`, no `pytest.raises`,
`pytest.warns` or `pytest.fail`, and calls no helper that checks, is reported with its file and line. A helper is a
function defined anywhere in tests/, found by the name it is called by (`check(...)`, `self.check(...)`,
`support.check(...)`), that asserts, raises or uses one of those itself, or calls a helper that does."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
PYTEST_CHECKS = {"raises", "warns", "fail", "deprecated_call"}
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _own_nodes(fn: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's own body, not those of the functions and classes defined inside it (they count
    where they are called)."""
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (*FUNCTIONS, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))


def _called(node: ast.Call) -> str | None:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _checks_itself(fn: ast.AST, *, raising: bool) -> bool:
    """Whether the function asserts, uses pytest.raises / warns / fail (raises too, for a helper)."""
    for node in _own_nodes(fn):
        if isinstance(node, ast.Assert) or (raising and isinstance(node, ast.Raise)):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in PYTEST_CHECKS \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "pytest":
            return True
    return False


def _calls(fn: ast.AST) -> set[str]:
    return {name for node in _own_nodes(fn) if isinstance(node, ast.Call) and (name := _called(node))}


def unchecked(sources: dict[str, str]) -> list[str]:
    """`path:line name` of each `def test_` of `sources` (path -> Python source) that checks nothing, itself or
    through the helpers of `sources` it calls."""
    trees = {path: ast.parse(text, path) for path, text in sources.items()}
    functions = [(path, fn) for path, tree in trees.items() for fn in ast.walk(tree) if isinstance(fn, FUNCTIONS)]
    checking = {fn.name for _, fn in functions if _checks_itself(fn, raising=True)}
    calls = {id(fn): _calls(fn) for _, fn in functions}
    grown = True
    while grown:   # a helper that calls a checking helper checks
        found = {fn.name for _, fn in functions if fn.name not in checking and calls[id(fn)] & checking}
        checking |= found
        grown = bool(found)
    return [f"{path}:{fn.lineno} {fn.name}" for path, fn in functions if fn.name.startswith("test_")
            and not _checks_itself(fn, raising=False) and not calls[id(fn)] & (checking - {fn.name})]


PLANTED = '''
import pytest

def _checks(value):
    assert value

def _through(value):
    return _checks(value)

def _refuses(value):
    if not value:
        raise ValueError(value)

def _quiet(value):
    return value + 1

def test_asserts():
    assert _quiet(1) == 2

def test_raises():
    with pytest.raises(ZeroDivisionError):
        _quiet(1 / 0)

def test_through_two_helpers():
    _through(1)

def test_through_a_method(support):
    support._refuses(1)

def test_only_runs():
    _quiet(1)

def test_recursing_on_itself():
    test_recursing_on_itself()

class TestGroup:
    def test_in_a_class(self):
        def inner():
            assert False
        self.value = _quiet(1)
'''


def test_the_checker_catches_a_planted_test_without_asserts() -> None:
    lines = PLANTED.splitlines()
    expected = [f"planted.py:{lines.index(f'{indent}def {name}({args}):') + 1} {name}" for indent, name, args in (
        ("", "test_only_runs", ""), ("", "test_recursing_on_itself", ""), ("    ", "test_in_a_class", "self"))]
    assert unchecked({"planted.py": PLANTED}) == expected


def test_every_test_of_the_suite_checks_something() -> None:
    files = sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)
    assert len(files) > 100 and Path(__file__) in files
    found = unchecked({p.relative_to(TESTS.parent).as_posix(): p.read_text() for p in files})
    assert found == [], "tests that check nothing (assert what the name claims):\n" + "\n".join(found)
