"""Every path of the v6.x submission tree, built in one place from validated names, and the file sets of each folder.

    <division>/<submitter>/
      systems/<system>.json             (one per results/<system>; <system>_power.yaml optional, v6.1)
      src/                              (required; Podium writes its source, the plan and how to reproduce)
        podium/                         (Podium's README, its source (`source`) and the plans, `assemble.plan_file`)
        <benchmark>/README.md           (one per benchmark folder of results/: the code of that benchmark)
      documentation/calibration.md      (closed division; calibration.md beside systems/ is accepted too)
      model_mapping.json                (open division: custom model name -> benchmark)
      results/<system>/<benchmark>/<Scenario>/
        loadgen layout:
          measurements.json, user.conf, README.md [, mlperf.conf]
          performance/run_1/{mlperf_log_summary.txt, mlperf_log_detail.txt [, mlperf_log_accuracy.json]}
          accuracy/{mlperf_log_summary.txt, mlperf_log_detail.txt, mlperf_log_accuracy.json, accuracy.txt}
          TEST07/ TEST09/ ...             (compliance, closed and network divisions; see COMPLIANCE_FILES)
        endpoints layout (loadgen-less, v6.1; Qwen3-VL's reference harness):
          config.yaml, measurements.json, README.md
          performance/result_summary.json
          accuracy/accuracy_results.json
          audit/audit_<test name>.json    (compliance records; see ENDPOINTS_AUDIT_NAMES)

`src/<benchmark>/` is where tools/submission/submission_structure.md puts each benchmark's code
(`code/<benchmark_name>`, named `src/` from v6.0 on: constants.py SRC_PATH; the samples hold
`src/<benchmark>/README.md`); preprocess_submission.py copies it with a result it moves from closed to open, and
stops with FileNotFoundError when it is missing.
Sources: tools/submission/submission_structure.md, submission_checker/constants.py (*_PATH, REQUIRED_*_FILES,
ENDPOINTS_COMPLIANCE_MAPPING), checks/compliance_check.py, parsers/endpoints_parser.py (reference §1.1-1.5).
Benchmark folders carry the checker's benchmark names; Interactive is a scenario folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from submission.plan.model import check_name

SCENARIO_FOLDERS = ("SingleStream", "MultiStream", "Offline", "Server", "Interactive")
DIVISIONS = ("closed", "open", "network")
SMOKE_MARKER = "SMOKE-NOT-A-SUBMISSION.md"
Layout = Literal["loadgen", "endpoints"]

# -- file names ------------------------------------------------------------------------------------------------
DETAIL = "mlperf_log_detail.txt"
SUMMARY = "mlperf_log_summary.txt"
ACCURACY_LOG = "mlperf_log_accuracy.json"
ACCURACY_TXT = "accuracy.txt"
MEASUREMENTS = "measurements.json"
USER_CONF = "user.conf"
README = "README.md"
MLPERF_CONF = "mlperf.conf"  # optional in a scenario folder (the sample trees carry it)
ENDPOINTS_CONFIG = "config.yaml"  # marks an endpoints scenario folder (truncate_accuracy_log.py skips those)
RESULT_SUMMARY = "result_summary.json"
ACCURACY_RESULTS = "accuracy_results.json"
AUDIT_DIR = "audit"
TOLERATED_EXTRAS = ("mlperf_log_trace.json", "results.json", ".gitkeep")  # submission_checker_old.py file lists

# -- file sets per folder (relative to the folder; `optional` files may be absent, nothing else may be present) --
ORG_FILES = ("calibration.md", "model_mapping.json")  # beside systems/ in <division>/<submitter>/
ORG_DIRS = ("systems", "src", "results", "documentation")
LOADGEN_SCENARIO_ROOT = (MEASUREMENTS, USER_CONF, README)  # constants.py MEASUREMENTS_PATH, REQUIRED_MEASURE_FILES
LOADGEN_SCENARIO_OPTIONAL = (MLPERF_CONF,)
ENDPOINTS_SCENARIO_ROOT = (ENDPOINTS_CONFIG, MEASUREMENTS, README)  # user.conf is not required for endpoints
ENDPOINTS_PERFORMANCE = (f"performance/{RESULT_SUMMARY}",)
ENDPOINTS_ACCURACY = (f"accuracy/{ACCURACY_RESULTS}",)
# constants.py ENDPOINTS_COMPLIANCE_MAPPING: the audit record written by the endpoints harness for each test
ENDPOINTS_AUDIT_NAMES = {
    "TEST01": "accuracy_in_performance_test",
    "TEST04": "output_caching_test",
    "TEST06": "consistency_output_test",
    "TEST07": "accuracy_in_performance_full_test",
    "TEST08": "accuracy_in_performance_dlrmv3_test",
}


@dataclass(frozen=True)
class ComplianceFiles:
    """What a TESTxx folder holds after its run_verification.py and the accuracy-log truncation (reference §1.5)."""

    required: tuple[str, ...]
    optional: tuple[str, ...] = ()
    perf_run: bool = False  # performance/run_1/ holds the audit run's loadgen logs
    accuracy_log: bool = False  # accuracy/mlperf_log_accuracy.json holds the audit run's sampled outputs


_PERF_RUN = (f"performance/run_1/{SUMMARY}", f"performance/run_1/{DETAIL}")
_ACC = (f"accuracy/{ACCURACY_LOG}",)
COMPLIANCE_FILES = {
    "TEST01": ComplianceFiles(("verify_accuracy.txt", "verify_performance.txt", *_ACC, *_PERF_RUN),
                              (f"accuracy/{ACCURACY_TXT}", "accuracy/baseline_accuracy.txt",
                               "accuracy/compliance_accuracy.txt", f"performance/run_1/{ACCURACY_LOG}"),
                              perf_run=True, accuracy_log=True),
    "TEST04": ComplianceFiles(("verify_performance.txt", *_PERF_RUN), (f"performance/run_1/{ACCURACY_LOG}",),
                              perf_run=True),
    "TEST06": ComplianceFiles(("verify_accuracy.txt", *_ACC), accuracy_log=True),
    # TEST07/TEST09: truncate_accuracy_log.py writes accuracy/accuracy.txt holding only the hash line
    "TEST07": ComplianceFiles(("verify_accuracy.txt", *_ACC, *_PERF_RUN), (f"accuracy/{ACCURACY_TXT}",),
                              perf_run=True, accuracy_log=True),
    "TEST08": ComplianceFiles(("verify_accuracy.txt",)),
    "TEST09": ComplianceFiles(("verify_output_len.txt", *_ACC, *_PERF_RUN), (f"accuracy/{ACCURACY_TXT}",),
                              perf_run=True, accuracy_log=True),
}


def _name(value: str) -> str:
    return check_name(value)


def layout_of(scenario_dir: Path) -> Layout:
    """Which layout a scenario folder uses: endpoints when it has config.yaml, or (as the checker's loader decides)
    when neither loadgen detail log exists but the endpoints result summary does."""
    if (scenario_dir / ENDPOINTS_CONFIG).exists():
        return "endpoints"
    logs = (scenario_dir / "performance" / "run_1" / DETAIL, scenario_dir / "accuracy" / DETAIL)
    if not any(log.exists() for log in logs) and (scenario_dir / "performance" / RESULT_SUMMARY).exists():
        return "endpoints"
    return "loadgen"


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

    def code(self, benchmark_folder: str) -> Path:
        """src/<benchmark folder>/: the code of one benchmark folder of results/ (its README names the plan)."""
        return self.src / _name(benchmark_folder)

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

    def measurements(self, system: str, benchmark: str, scenario: str) -> Path:
        return self.scenario(system, benchmark, scenario) / MEASUREMENTS

    def user_conf(self, system: str, benchmark: str, scenario: str) -> Path:
        return self.scenario(system, benchmark, scenario) / USER_CONF

    def readme(self, system: str, benchmark: str, scenario: str) -> Path:
        return self.scenario(system, benchmark, scenario) / README

    def performance(self, system: str, benchmark: str, scenario: str, run: int = 1) -> Path:
        return self.scenario(system, benchmark, scenario) / "performance" / f"run_{run}"

    def accuracy(self, system: str, benchmark: str, scenario: str) -> Path:
        return self.scenario(system, benchmark, scenario) / "accuracy"

    def compliance(self, system: str, benchmark: str, scenario: str, test: str) -> Path:
        return self.scenario(system, benchmark, scenario) / _name(test)

    # -- endpoints layout ---------------------------------------------------------------------------------------
    def endpoints_config(self, system: str, benchmark: str, scenario: str) -> Path:
        return self.scenario(system, benchmark, scenario) / ENDPOINTS_CONFIG

    def endpoints_result_summary(self, system: str, benchmark: str, scenario: str) -> Path:
        return self.scenario(system, benchmark, scenario) / "performance" / RESULT_SUMMARY

    def endpoints_accuracy_results(self, system: str, benchmark: str, scenario: str) -> Path:
        return self.scenario(system, benchmark, scenario) / "accuracy" / ACCURACY_RESULTS

    def endpoints_audit(self, system: str, benchmark: str, scenario: str, test: str) -> Path:
        """audit/audit_<name>.json, e.g. TEST04 -> audit/audit_output_caching_test.json."""
        name = ENDPOINTS_AUDIT_NAMES.get(test)
        if name is None:
            raise ValueError(f"{test!r} has no endpoints audit record; known: {', '.join(ENDPOINTS_AUDIT_NAMES)}")
        return self.scenario(system, benchmark, scenario) / AUDIT_DIR / f"audit_{name}.json"
