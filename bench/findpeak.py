"""Loadgen's own FindPeakPerformance mode (Server) through Podium's harness, in a child process of its own.

    python bench/findpeak.py RUN_DIR     # RUN_DIR holds run.json, endpoint.json and findpeak.json (the settings)

The spec's user.conf gives the lower bound (target_qps, which must pass) and the run length; findpeak.json gives
`server_find_peak_qps_decimals_of_precision` and `server_find_peak_qps_boundary_step_size`. Every step of the
search is a full run; the steps are in mlperf_log_detail.txt as `generic_message` lines (`parse_steps`).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# loadgen logs the rates with std::to_string: "FindBoundaries: Checking fields [33.500000, 67.000000)"
CHECK = re.compile(r"FindBoundaries: Checking fields \[[\d.]+, ([\d.]+)\)")
MID = re.compile(r"Testing the mid value of bounds \[[\d.]+, [\d.]+\): ([\d.]+)")
FOUND = re.compile(r"Found peak performance field: ([\d.]+)")


def main(run_dir: Path) -> None:
    import mlperf_loadgen as lg

    from submission.results.runs import RunSpec
    from tasks.datasets.requests import build_requests
    from tasks.engines import Endpoint
    from tasks.harness.client import CompletionClient
    from tasks.harness.sut import PromptQSL, StreamingSUT

    spec = RunSpec.model_validate_json((run_dir / "run.json").read_text())
    data = json.loads((run_dir / "endpoint.json").read_text())
    endpoint = Endpoint.from_client(data)
    requests = build_requests(spec.benchmark, spec.dataset, "performance", max_tokens=spec.max_tokens,
                              temperature=spec.temperature)
    (run_dir / "user.conf").write_text(spec.user_conf_text())
    settings = lg.TestSettings()
    settings.FromConfig(str(run_dir / "user.conf"), spec.loadgen_model, "Server")
    settings.scenario = lg.TestScenario.Server
    settings.mode = lg.TestMode.FindPeakPerformance
    for key, value in json.loads((run_dir / "findpeak.json").read_text()).items():
        setattr(settings, key, value)
    log = lg.LogSettings()
    log.log_output.outdir = str(run_dir)
    log.log_output.copy_summary_to_stdout = False
    client = CompletionClient(endpoint, max_tokens=spec.max_tokens, temperature=spec.temperature,
                              max_concurrency=spec.max_concurrency)
    with PromptQSL(len(requests)) as qsl, StreamingSUT(client, requests, report_first_token=True) as sut:
        lg.StartTestWithLogSettings(sut.handle, qsl.handle, settings, log)


def parse_steps(detail: Path) -> dict:
    """The rates FindPeakPerformance ran (the lower bound first) and the one it reported."""
    text = detail.read_text(errors="replace")
    steps = [float(m) for m in CHECK.findall(text)] + [float(m) for m in MID.findall(text)]
    found = FOUND.findall(text)
    return {"runs": 1 + len(steps), "tried": steps, "found": float(found[-1]) if found else None}


if __name__ == "__main__":
    main(Path(sys.argv[1]))
