"""The sandboxed child of `tasks.accuracy.livecodebench`: runs one program against its tests, prints one verdict.

    python -I lcb_child.py NONCE     # cwd: a fresh temporary folder holding solution.py and tests.json

Before the program runs, this process leaves the network (a new, empty network namespace when the kernel allows
it; sockets are refused in any case), caps its own memory, CPU time, file size and open files with setrlimit,
and takes away the calls that reach outside its folder (process control, deletion, renaming). Then each test runs
under a wall-clock alarm. Only the standard library is imported here. The verdict is one line on the original
stdout, `NONCE {json}`, so that nothing the program prints can pass for it.
"""

from __future__ import annotations

import builtins
import ctypes
import io
import json
import os
import resource
import signal
import socket
import sys
from decimal import Decimal, InvalidOperation

CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000


class Timeout(Exception):
    pass


def leave_network() -> str:
    libc = ctypes.CDLL(None, use_errno=True)
    for flags, how in ((CLONE_NEWNET, "network namespace"), (CLONE_NEWUSER | CLONE_NEWNET, "user+network namespace")):
        if libc.unshare(flags) == 0:
            return how
    return "sockets refused (no namespace)"


def refuse(*_args: object, **_kwargs: object) -> None:
    raise PermissionError("not allowed in the LiveCodeBench sandbox")


def confine(limits: dict) -> None:
    memory = int(limits["memory_mb"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    cpu = int(limits["cpu_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    size = int(limits["file_mb"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    socket.socket = refuse  # type: ignore[misc, assignment]
    socket.create_connection = refuse  # type: ignore[assignment]
    for name in ("system", "kill", "killpg", "fork", "forkpty", "execv", "execve", "execvp", "spawnv", "remove",
                 "unlink", "rmdir", "removedirs", "rename", "renames", "replace", "chmod", "chown", "truncate",
                 "putenv", "setuid", "setgid", "chdir", "chroot"):
        if hasattr(os, name):
            setattr(os, name, refuse)
    import shutil
    import subprocess

    shutil.rmtree = refuse  # type: ignore[assignment]
    shutil.move = refuse  # type: ignore[assignment]
    subprocess.Popen = refuse  # type: ignore[misc, assignment]


def alarm(_signum: int, _frame: object) -> None:
    raise Timeout


def same_output(actual: str, expected: str) -> bool:
    """Line by line, each line stripped, trailing blank lines ignored; tokens equal as text or as numbers."""
    def lines(text: str) -> list[str]:
        out = [line.strip() for line in text.strip().split("\n")]
        return out

    got, want = lines(actual), lines(expected)
    if got == want:
        return True
    if len(got) != len(want):
        return False
    for a, b in zip(got, want, strict=True):
        ta, tb = a.split(), b.split()
        if ta == tb:
            continue
        if len(ta) != len(tb):
            return False
        try:
            if any(Decimal(x) != Decimal(y) for x, y in zip(ta, tb, strict=True)):
                return False
        except InvalidOperation:
            return False
    return True


def run_stdin(code: object, test: dict) -> tuple[bool, str]:
    stdin = io.TextIOWrapper(io.BytesIO(test["input"].encode()), encoding="utf-8")
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    sys.stdin, sys.stdout = stdin, stdout
    try:
        exec(code, {"__name__": "__main__", "__builtins__": builtins})
    except SystemExit:
        pass
    finally:
        sys.stdin, sys.stdout = sys.__stdin__, sys.__stdout__
    stdout.flush()
    actual = stdout.buffer.getvalue().decode("utf-8", errors="replace")
    return same_output(actual, test["output"]), "wrong output"


def run_call(code: object, test: dict, func_name: str) -> tuple[bool, str]:
    space: dict = {"__name__": "solution", "__builtins__": builtins}
    sys.stdout = io.StringIO()
    try:
        exec(code, space)
        target = space["Solution"]() if "Solution" in space else None
        fn = getattr(target, func_name, None) if target is not None else space.get(func_name)
        if fn is None:
            return False, f"no function {func_name}"
        args = [json.loads(line) for line in test["input"].split("\n") if line.strip()]
        result = fn(*args)
    finally:
        sys.stdout = sys.__stdout__
    return json.loads(json.dumps(result)) == json.loads(test["output"]), "wrong result"


def main() -> None:
    nonce = sys.argv[1]
    verdict_out = os.fdopen(os.dup(1), "w")
    with open("tests.json", encoding="utf-8") as f:
        spec = json.load(f)
    isolation = leave_network()
    with open("solution.py", encoding="utf-8") as f:
        source = f.read()
    confine(spec["limits"])
    signal.signal(signal.SIGALRM, alarm)
    passed, detail = 0, "all tests passed"
    try:
        code = compile(source, "solution.py", "exec")
        for i, test in enumerate(spec["tests"]):
            signal.setitimer(signal.ITIMER_REAL, float(spec["limits"]["test_timeout_s"]))
            try:
                if test.get("testtype") == "functional":
                    ok, why = run_call(code, test, spec["func_name"])
                else:
                    ok, why = run_stdin(code, test)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            if not ok:
                detail = f"test {i}: {why}"
                break
            passed += 1
    except Timeout:
        detail = f"test {passed}: time limit exceeded"
    except MemoryError:
        detail = f"test {passed}: memory limit exceeded"
    except BaseException as e:  # the program's own failure (SyntaxError, exceptions, SystemExit in a call)
        detail = f"test {passed}: {type(e).__name__}: {str(e)[:200]}"
    verdict = {"passed": passed, "total": len(spec["tests"]), "detail": detail, "isolation": isolation}
    verdict_out.write(f"{nonce} {json.dumps(verdict)}\n")
    verdict_out.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
