"""One error hierarchy for Podium. Each error says what, where and what to do.

The CLI maps each class to an exit code and prints `str(error)` without a traceback.
Foreign errors (subprocess codes, botocore, YAML parse errors) are translated into these at the boundary.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence


class PodiumError(Exception):
    """Base class. `exit_code` is what the CLI exits with; `final`: another attempt would fail the same way (the plan's
    fault, the rules', a run's own results, corrupt data), so a step's retries never repeat it."""

    exit_code = 1
    final = False

    def __init__(self, message: str, *, fix: str | None = None, where: str | None = None) -> None:
        self.message = message
        self.fix = fix
        self.where = where
        super().__init__(str(self))

    def __str__(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        if self.fix:
            text += f"\n  fix: {self.fix}"
        return text


class PlanError(PodiumError):
    """The plan (or another input file) is invalid. Raised before anything starts."""

    exit_code = 2
    final = True


class RuleViolation(PodiumError):
    """A value breaks the MLPerf rules of the round."""

    exit_code = 3
    final = True


class LaunchError(PodiumError):
    """An engine process could not be started or did not become ready."""

    exit_code = 4


class CommandError(PodiumError):
    """A subprocess exited non-zero. Carries argv, returncode and the tail of its output."""

    exit_code = 4

    def __init__(self, argv: Sequence[str], returncode: int, output_tail: str = "", *, fix: str | None = None) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.output_tail = output_tail
        message = f"command {self.argv[0]!r} exited with code {returncode}"
        if output_tail:
            message += f"; last output:\n{output_tail}"
        super().__init__(message, fix=fix)


class StorageError(PodiumError):
    """Object storage did not answer or refused a request."""

    exit_code = 5


class UploadError(PodiumError):
    """The MLCommons submission server refused a request or did not answer (`podium submit`); the tarball stays."""

    exit_code = 7


class RunFailed(PodiumError):
    """A benchmark run finished but its result cannot be used (INVALID, loadgen errors, accuracy under the floor)."""

    exit_code = 6
    final = True


class CurationError(PodiumError):
    """Runs that cannot go into one submission tree together (`podium assemble`): two rounds, two submitters, two
    descriptions of one system, one result in two divisions; the message names both sources."""

    exit_code = 2
    final = True


def one_error(problems: Sequence[PodiumError], fix: str, where: str | None = None) -> PlanError:
    """Every problem as one PlanError (exit 2) placed at `where` (e.g. the plan file): the problem itself when it is
    the only one (its message, place and fix), else a list of each with its own fix (its place, unless `where`),
    and `fix` for the whole."""
    if len(problems) == 1:
        return PlanError(problems[0].message, fix=problems[0].fix, where=problems[0].where or where)
    items = "".join("\n  - " + str(PodiumError(p.message, fix=p.fix, where=None if p.where == where else p.where))
                    .replace("\n", "\n    ") for p in problems)
    return PlanError(f"{len(problems)} problems:{items}", fix=fix, where=where)


def did_you_mean(value: str, valid: Iterable[str]) -> str:
    """A hint for an unknown name: the closest valid names, then the full list."""
    options = sorted(valid)
    close = difflib.get_close_matches(value, options, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"{hint}valid values: {', '.join(options)}"
