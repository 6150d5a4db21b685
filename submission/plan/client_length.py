"""The endpoints client's sample count, its own arithmetic (mlcommons/endpoints at the round's pin,
src/inference_endpoint/config/runtime_settings.py): what a run issues, and the smallest Offline target_qps whose run
lasts its min duration on an engine of a known rate. The plan refuses a shorter one at load (`Plan`'s
`_runs_last_their_min_duration`); submission/budget/run_length.py turns counts into a run's length.
"""

from __future__ import annotations

import math

PADDING = 1.1                 # runtime_settings.py total_samples_to_issue(padding_factor=1.1)
OFFLINE_DEFAULT_QPS = 10.0    # runtime_settings.py _from_config_default: an Offline config with no target_qps


def client_samples(target_qps: float | None, min_duration_ms: int, rows: int, offline: bool = True) -> int:
    """What the endpoints client issues in a performance phase without an explicit count (module doc)."""
    qps = target_qps if target_qps is not None else (OFFLINE_DEFAULT_QPS if offline else 0.0)
    if min_duration_ms == 0:
        return max(1, rows)
    samples = max(1, math.ceil(qps * (min_duration_ms / 1000) * PADDING))
    return samples if rows <= 0 or samples % rows == 0 else samples + rows - samples % rows


def smallest_offline_target(rate: float, min_duration_ms: int, rows: int) -> int:
    """The smallest whole Offline target_qps whose run lasts its min duration on an engine doing `rate` samples/s:
    the client must issue at least rate x min_duration samples, which it does once its padded count passes the whole
    data sets below that."""
    needed = math.ceil(rate * min_duration_ms / 1000)
    below = (needed - 1) // rows * rows if rows > 0 else needed - 1   # the largest issued count still too short
    target = max(1, math.floor(below / PADDING / (min_duration_ms / 1000)))
    while client_samples(target, min_duration_ms, rows) <= below:
        target += 1
    return target
