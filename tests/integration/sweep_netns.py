"""Runs inside a fresh network namespace (`unshare -n`): `podium sweep` (the sweep_prefill_decode flow, with its
own ephemeral Prefect API) over the Dynamo mocker topology, whose workers listen on 0.0.0.0.

    unshare -n python -m tests.integration.sweep_netns SPEC.json      (from the repository root)

SPEC.json names the plan, the scenario, the GPU count, the search settings and the work folder; the flow's result
goes to `<work>/result.json`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def main(spec_file: Path) -> None:
    spec = json.loads(spec_file.read_text())
    work = Path(spec["work"])
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    os.environ["PREFECT_HOME"] = str(work / "prefect")
    os.environ.pop("PREFECT_API_URL", None)         # the ephemeral API, inside this namespace
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    (work / "prefect").mkdir(parents=True, exist_ok=True)
    from flows.search import sweep_prefill_decode

    result = sweep_prefill_decode(spec["plan"], scenario=spec["scenario"], workspace=str(work / "ws"),
                                  gpus=spec["gpus"], settings=spec["settings"])
    (work / "result.json").write_text(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
