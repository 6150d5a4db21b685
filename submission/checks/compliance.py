"""The TESTxx folders of a loadgen scenario folder (closed and network divisions; open division skips compliance).

Official (`checks/compliance_check.py`, reference §1.5): each test folder the benchmark needs exists, with its
verification file and pass lines: TEST01 "TEST PASS" in verify_accuracy.txt and verify_performance.txt, TEST04 in
verify_performance.txt, TEST06 the three check lines, TEST07 "TEST PASS" in verify_accuracy.txt, TEST08 in
verify_accuracy.txt, TEST09 in verify_output_len.txt; TEST01/TEST04 performance/run_1 with exactly the two logs,
checked like a performance run. Podium's own: the exact file set of every test folder, the audit run's log (VALID,
an error for TEST01/TEST04 and a warning for the tests whose performance run the official checker does not judge; no
errors, the round's seeds, the folder's scenario and limits, the audit.config in effect), truncated accuracy logs with
their hash line.
"""

from __future__ import annotations

from pathlib import Path

from submission.checks.accuracy import hash_line
from submission.checks.findings import Context
from submission.checks.run import check_run
from submission.rules import BenchmarkRules, ScenarioRules
from submission.tree.paths import ACCURACY_TXT, COMPLIANCE_FILES, DETAIL, TOLERATED_EXTRAS

PASS = "TEST PASS"  # what run_verification.py writes on success (compliance/TESTxx/run_verification.py)
# file -> the lines it must hold; a tuple of alternatives means any one of them (checks/compliance_check.py)
PASS_LINES: dict[str, dict[str, tuple[tuple[str, ...], ...]]] = {
    "TEST01": {"verify_accuracy.txt": ((PASS,),), "verify_performance.txt": ((PASS,),)},
    "TEST04": {"verify_performance.txt": ((PASS,),)},
    "TEST06": {"verify_accuracy.txt": (("First token check pass: True", "First token check pass: Skipped"),
                                       ("EOS check pass: True",), ("Sample length check pass: True",))},
    "TEST07": {"verify_accuracy.txt": ((PASS,),)},
    "TEST08": {"verify_accuracy.txt": ((PASS,),)},
    "TEST09": {"verify_output_len.txt": ((PASS,),)},
}
SUBSTRING_PASS = ("TEST07", "TEST09")  # the checker looks for "TEST PASS" anywhere in these files, not as a line
FULL_PERFORMANCE_CHECK = ("TEST01", "TEST04")  # the checker runs its whole PerformanceCheck on these runs
HASHED_ACCURACY = ("TEST01", "TEST07", "TEST09")  # truncate_accuracy_log.py writes their accuracy.txt hash line


def _files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() or p.is_symlink()}


def check(ctx: Context, division: str, folder: Path, b: BenchmarkRules, sc: ScenarioRules) -> None:
    if division == "open":
        return
    for test in b.compliance_tests:
        test_dir = folder / test
        if not test_dir.is_dir():
            ctx.add("compliance-missing", test_dir, f"{test} is required for {b.name}",
                    f"run the {test} audit for {sc.name} and its run_verification.py")
            continue
        check_test(ctx, test, test_dir, b, sc)


def check_test(ctx: Context, test: str, test_dir: Path, b: BenchmarkRules, sc: ScenarioRules) -> None:
    spec = COMPLIANCE_FILES[test]
    present = _files(test_dir)
    allowed = set(spec.required) | set(spec.optional)
    for extra in sorted(present - allowed):
        if Path(extra).name not in TOLERATED_EXTRAS:
            ctx.add("unexpected-file", test_dir / extra, f"unexpected file in {test}",
                    "remove it: the checker compares the test folder's file list exactly")
    gone = sorted(set(spec.required) - present)
    if gone:
        ctx.add("compliance-files", test_dir, f"missing: {', '.join(gone)}",
                f"re-run the {test} audit and its run_verification.py")
    for name, needs in PASS_LINES[test].items():
        path = test_dir / name
        if not path.is_file():
            continue  # reported as missing above
        text = path.read_text(encoding="utf-8", errors="replace")
        lines = {line.strip() for line in text.splitlines()}
        for options in needs:
            ok = any(option in text for option in options) if test in SUBSTRING_PASS else bool(lines & set(options))
            if not ok:
                ctx.add("compliance-pass", path, f"{test} did not pass: no line {' or '.join(map(repr, options))}",
                        f"find why {test} failed (its verification output says), fix it and re-run the audit")
    if spec.perf_run and (test_dir / "performance" / "run_1" / DETAIL).is_file():
        check_run(ctx, test_dir / "performance" / "run_1", b, sc, audit=test, full=test in FULL_PERFORMANCE_CHECK)
    if spec.accuracy_log and test in HASHED_ACCURACY:
        txt = test_dir / "accuracy" / ACCURACY_TXT
        hash_line(ctx, test_dir / "accuracy",
                  txt.read_text(encoding="utf-8", errors="replace") if txt.is_file() else None)
