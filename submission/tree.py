"""Every path of the v6.x submission tree, built in one place from validated names.

    <division>/<submitter>/
      systems/<system>.json
      src/                          (required; Podium writes the plan and how to reproduce)
      documentation/calibration.md  (closed division)
      model_mapping.json            (open division: custom model name -> benchmark)
      results/<system>/<benchmark>/<Scenario>/
        measurements.json, user.conf, README.md
        performance/run_1/{mlperf_log_summary.txt, mlperf_log_detail.txt}
        accuracy/{mlperf_log_summary.txt, mlperf_log_detail.txt, mlperf_log_accuracy.json, accuracy.txt}
        TEST07/ TEST09/ ...         (compliance, closed division)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from submission.plan import check_name

SCENARIO_FOLDERS = ("SingleStream", "MultiStream", "Offline", "Server", "Interactive")
DIVISIONS = ("closed", "open", "network")
SMOKE_MARKER = "SMOKE-NOT-A-SUBMISSION.md"


def _name(value: str) -> str:
    return check_name(value)


@dataclass(frozen=True)
class Tree:
    root: Path
    division: str
    submitter: str

    def __post_init__(self) -> None:
        if self.division not in DIVISIONS:
            raise ValueError(f"division {self.division!r} is not one of {', '.join(DIVISIONS)}")
        _name(self.submitter)

    @property
    def org(self) -> Path:
        return self.root / self.division / self.submitter

    @property
    def systems(self) -> Path:
        return self.org / "systems"

    def system_json(self, system: str) -> Path:
        return self.systems / f"{_name(system)}.json"

    @property
    def src(self) -> Path:
        return self.org / "src"

    @property
    def calibration(self) -> Path:
        return self.org / "documentation" / "calibration.md"

    @property
    def model_mapping(self) -> Path:
        return self.org / "model_mapping.json"

    @property
    def smoke_marker(self) -> Path:
        return self.root / SMOKE_MARKER

    def scenario(self, system: str, benchmark: str, scenario: str) -> Path:
        if scenario not in SCENARIO_FOLDERS:
            raise ValueError(f"scenario {scenario!r} is not one of {', '.join(SCENARIO_FOLDERS)}")
        return self.org / "results" / _name(system) / _name(benchmark) / scenario

    def performance(self, system: str, benchmark: str, scenario: str, run: int = 1) -> Path:
        return self.scenario(system, benchmark, scenario) / "performance" / f"run_{run}"

    def accuracy(self, system: str, benchmark: str, scenario: str) -> Path:
        return self.scenario(system, benchmark, scenario) / "accuracy"

    def compliance(self, system: str, benchmark: str, scenario: str, test: str) -> Path:
        return self.scenario(system, benchmark, scenario) / _name(test)
