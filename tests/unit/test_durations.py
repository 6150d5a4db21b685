"""The measured seconds per test file that order the suite (tests/conftest.py), and their writer."""

from __future__ import annotations

import json
from pathlib import Path

from tests.durations import OUT, per_file

REPO = Path(__file__).parents[2]


def test_per_file_sums_every_test_of_a_file_longest_first(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text('<testsuites><testsuite>'
                     '<testcase classname="tests.unit.test_a" name="one" time="1.5"/>'
                     '<testcase classname="tests.unit.test_a.TestGroup" name="two" time="2.0"/>'
                     '<testcase classname="tests.integration.test_b" name="three[x]" time="4.25"/>'
                     '</testsuite></testsuites>')
    assert per_file(junit) == {"tests/integration/test_b.py": 4.2, "tests/unit/test_a.py": 3.5}


def test_the_measured_files_exist() -> None:
    """A file renamed or deleted leaves the list: measure again (tests/durations.py)."""
    gone = [name for name in json.loads(OUT.read_text()) if not (REPO / name).is_file()]
    assert gone == [], f"not in the repository any more: {gone}; python -m tests.durations JUNIT_XML"
