"""What the pipeline costs around loadgen: the smoke submission's wall time minus the time inside its loadgen runs,
and the wall time of a re-run that finds every step done (`make bench-orchestration`).

    python bench/orchestration.py [--reps 1]     # writes bench/results/orchestration.json

Each repetition is a fresh workspace in a temporary folder: `podium dev smoke-assets`, then `podium run` of
deployments/plans/smoke.yaml (first run), then the same command again (re-run). A loadgen run's time is the
harness's own `wall_s` (sut_stats.json of every loadgen child: the time from the client's start to loadgen's
return). The rest is orchestration: Prefect, the engine's launch and readiness, staging, accuracy scoring, the
compliance checks, assembling, checking, publishing to S3 and the report. The flow runs some loadgen runs at
the same time, so the time inside loadgen is the time covered by at least one run, not their sum (both are kept).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PODIUM = Path(sys.executable).parent / "podium"
PLAN = ROOT / "deployments" / "plans" / "smoke.yaml"


def timed(argv: list[str], cwd: Path, log: Path) -> tuple[float, int]:
    started = time.monotonic()
    with log.open("w") as out:
        code = subprocess.run(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, check=False).returncode  # noqa: S603
    return time.monotonic() - started, code


def loadgen_seconds(ws: Path, since: float) -> tuple[float, float, int]:
    """The loadgen runs whose statistics were written after `since` (epoch seconds): the time covered by at least one
    of them (the union of their intervals: the flow runs some at once), the sum of their times, and their count.
    A run's interval ends when its sut_stats.json was written and lasts its `wall_s`."""
    stats = [p for p in ws.rglob("sut_stats.json") if p.stat().st_mtime >= since]
    spans = sorted((p.stat().st_mtime - json.loads(p.read_text())["wall_s"], p.stat().st_mtime) for p in stats)
    covered, end = 0.0, float("-inf")
    for start, stop in spans:
        covered += max(0.0, stop - max(start, end))
        end = max(end, stop)
    return covered, sum(stop - start for start, stop in spans), len(spans)


def one(tmp: Path) -> dict:
    ws = tmp / ".podium"
    timed([str(PODIUM), "dev", "smoke-assets", "--workspace", str(ws)], tmp, tmp / "assets.log")
    out: dict = {}
    for name in ("first", "rerun"):
        since = time.time()
        wall, code = timed([str(PODIUM), "run", str(PLAN), "--workspace", str(ws)], tmp, tmp / f"{name}.log")
        inside, summed, runs = loadgen_seconds(ws, since)
        out[name] = {"exit_code": code, "wall_s": round(wall, 2), "loadgen_s": round(inside, 2),
                     "loadgen_s_summed": round(summed, 2), "loadgen_runs": runs, "overhead_s": round(wall - inside, 2),
                     "overhead_fraction": round((wall - inside) / wall, 3)}
        print(name, out[name], flush=True)
    timed([str(PODIUM), "dev", "down", "--workspace", str(ws)], tmp, tmp / "down.log")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "orchestration.json")
    args = parser.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    reps = []
    for _ in range(args.reps):
        tmp = Path(tempfile.mkdtemp(prefix="podium-bench-orch-"))
        try:
            reps.append(one(tmp))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    summary = {name: {key: statistics.median(r[name][key] for r in reps)
                      for key in ("wall_s", "loadgen_s", "overhead_s", "overhead_fraction")}
               for name in ("first", "rerun")}
    result = {"started": started, "cpus": os.cpu_count(), "load_average_at_end": os.getloadavg()[0],
              "plan": str(PLAN.relative_to(ROOT)), "median": summary, "runs": reps}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
