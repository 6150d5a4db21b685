"""Write tests/durations.json, the seconds each test file took, from a JUnit XML report of a whole run:

    pytest --junitxml=/tmp/junit.xml ... && python -m tests.durations /tmp/junit.xml

tests/conftest.py starts the longest files first from it; a file it does not list starts after them."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

OUT = Path(__file__).with_name("durations.json")


def per_file(junit: Path) -> dict[str, float]:
    """Seconds per test file (setup, call and teardown of each of its tests), longest first."""
    seconds: Counter[str] = Counter()
    for case in ET.parse(junit).iter("testcase"):
        module = case.get("classname", "").split(".")
        while module and not module[-1].startswith("test_"):   # a test class: its file is the part before
            module.pop()
        if module:
            seconds["/".join(module) + ".py"] += float(case.get("time") or 0)
    return {name: round(s, 1) for name, s in seconds.most_common()}


if __name__ == "__main__":
    OUT.write_text(json.dumps(per_file(Path(sys.argv[1])), indent=0) + "\n")
    print(f"wrote {OUT}")
