"""The suite's guard against Python 3.11's AST race (tests/conftest.py, `_one_parse_at_a_time`), with the race forced.

Before 3.11.8 (gh-106905) the AST constructor keeps its recursion depth in interpreter-wide state, and 3.11 collects
garbage inside allocations, so a finalizer can run while `ast.parse` builds its tree. A child process makes that happen
every time: a thread parses from a deep stack, and each collection inside that parse runs a finalizer that starts a
second parse, in another thread (`threads`: handed off and waited for, until it finishes or is seen waiting at the
guard's lock) or in the same one (`nested`: as a finalizer that formats a traceback does). Unguarded, the second parse
resets the shared depth mid-tree and the first raises `SystemError: AST constructor recursion depth mismatch`, in
every attempt; under the guard none does. Interpreters without the race (3.11.8 and later; 3.12, which collects only
between bytecodes) raise nothing either way.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ATTEMPTS = 5
RACY = (3, 11) <= sys.version_info[:3] < (3, 11, 8)   # the shared depth; fixed by gh-106905 in 3.11.8 and 3.12.2

RACE = """
import ast, gc, json, sys, threading
mode, root, variant, attempts = sys.argv[1:5]
if mode == "guarded":
    sys.path.insert(0, root)
    import tests.conftest
SOURCE = "\\n".join(f"def f{i}(a, b):\\n    return [a, {{'k': (b, {i})}}]" for i in range(60))
counts = {"errors": [], "second_parses": 0}
go, done = threading.Event(), threading.Event()
state = {"outer": None}

def deep(depth, then, *args):
    # the first parse starts deeper than a handed-off one and shallower than a nested one, so their depths differ
    return deep(depth - 1, then, *args) if depth else then(*args)

def waiting_at_the_lock(thread):
    frame = sys._current_frames().get(thread.ident)
    return frame is not None and frame.f_code.co_name == "locked_parse"

class Cycle:
    # garbage only a collection frees: collected in the outer thread, it starts a second parse and leaves another
    def __init__(self):
        self.me = self

    def __del__(self):
        if threading.current_thread() is not state["outer"]:
            return
        Cycle()
        counts["second_parses"] += 1
        if variant == "nested":
            deep(60, ast.parse, "x = [1, 2]")
            return
        done.clear()
        go.set()
        while not done.wait(0.001) and not waiting_at_the_lock(inner):
            pass

def inner_parses():
    while True:
        go.wait()
        go.clear()
        ast.parse("x = [1, 2]")
        done.set()

def first_parse():
    Cycle()
    try:
        ast.parse(SOURCE)
    except SystemError as e:
        counts["errors"].append(str(e))

inner = threading.Thread(target=inner_parses, daemon=True)
inner.start()
gc.set_threshold(50)
for _ in range(int(attempts)):
    state["outer"] = threading.Thread(target=deep, args=(100, first_parse))
    state["outer"].start()
    state["outer"].join()
    state["outer"] = None
print(json.dumps(counts))
"""


def _race(mode: str, variant: str) -> dict:
    run = subprocess.run([sys.executable, "-c", RACE, mode, str(ROOT), variant, str(ATTEMPTS)], capture_output=True,
                         text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.splitlines()[-1])


@pytest.mark.parametrize("variant", ["threads", "nested"])
def test_the_forced_race_raises_unguarded_and_never_under_the_guard(variant: str) -> None:
    plain, guarded = _race("plain", variant), _race("guarded", variant)
    assert guarded["errors"] == [], guarded
    if not RACY:   # nothing to guard against: the forced interleaving raises nothing unguarded either
        assert plain["errors"] == [], plain
        return
    assert plain["second_parses"] >= ATTEMPTS, plain               # a second parse inside each first one
    assert len(plain["errors"]) == ATTEMPTS, plain
    assert all("AST constructor recursion depth mismatch" in e for e in plain["errors"]), plain
