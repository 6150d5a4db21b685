"""The per-node GPU sampler: what reads a node's GPUs for each run's telemetry where the flow's host cannot
(tasks/serving/telemetry.py). A launcher that places an engine on nodes of its own (Slurm) starts one beside the
engine on each of its nodes and stops it with the engine; it prints one JSON line per interval to its output, which
the launcher keeps in a file on the flow's host: `{"t": <UNIX seconds>, "out": <the tool's output>}` (nvidia-smi's
CSV, or amd-smi's JSON on an AMD node), or `{"t": ..., "error": <why the tool gave nothing>}`. It never exits on its
own: a node without the tool says so every interval.
"""

from __future__ import annotations

# nvidia-smi's query: one CSV line per GPU, GPU_FIELDS in order (the local sampler asks the same, telemetry parses it)
NVIDIA_SMI = ("nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used,power.draw", "--format=csv,noheader,nounits")
GPU_FIELDS = ("index", "util_pct", "memory_mib", "power_w")
# amd-smi's metrics of every GPU as JSON (read by tasks/serving/metrics.py `amd_smi_gpus`, which cites its format)
AMD_SMI = ("amd-smi", "metric", "--usage", "--power", "--temperature", "--mem-usage", "--json")
QUERIES = {"nvidia": NVIDIA_SMI, "amd": AMD_SMI}   # by platform (submission/plan/platforms.py)
INTERVAL_S = 1.0   # seconds between a sampler's lines

# Runs on the node (bare, not in the engine's container): `python -c SCRIPT INTERVAL_S TOOL ARGS...`
SCRIPT = """
import json, subprocess, sys, time
interval, argv = float(sys.argv[1]), sys.argv[2:]
while True:
    line = {"t": time.time()}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
        if done.returncode == 0:
            line["out"] = done.stdout
        else:
            line["error"] = f"{argv[0]} exited {done.returncode}: {done.stderr.strip()[-300:]}"
    except (OSError, subprocess.SubprocessError) as e:
        line["error"] = f"{type(e).__name__}: {e}"
    print(json.dumps(line), flush=True)
    time.sleep(interval)
"""


def argv(python: str, platform: str = "nvidia") -> list[str]:
    """The sampler's command on a node whose Python is `python` and whose GPUs are `platform`'s."""
    return [python, "-c", SCRIPT, f"{INTERVAL_S:g}", *QUERIES[platform]]
