"""The child of `tasks.accuracy.math_grader`: the PRM800K grader of a fetched folder, on a JSON list of answers.

    python -I math_grader_child.py PRM800K_DIR ANSWER_TIMEOUT_S  < [[given, truth], ...]

PRM800K_DIR is the repository's `prm800k/` folder, put first on `sys.path` as the reference does before its
`from grading.grader import grade_answer` (it also works from that folder, as the reference's `os.chdir` does).
Prints one JSON list: per answer `grade_answer(given_answer=given, ground_truth=truth)` as a bool, or null when it
ran over ANSWER_TIMEOUT_S seconds.
"""

import json
import os
import signal
import sys


class Timeout(Exception):
    pass


def _alarm(_signum, _frame):
    raise Timeout


def main() -> None:
    folder, limit = sys.argv[1], float(sys.argv[2])
    sys.path.insert(0, folder)
    os.chdir(folder)
    from grading.grader import grade_answer

    signal.signal(signal.SIGALRM, _alarm)
    out = []
    for given, truth in json.load(sys.stdin):
        signal.setitimer(signal.ITIMER_REAL, limit)
        try:
            out.append(bool(grade_answer(given_answer=given, ground_truth=truth)))
        except Timeout:
            out.append(None)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
