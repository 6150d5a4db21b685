"""Run the real loadgen against a fake token-emitting SUT (no network, no model) and return its log folder.

Each sample answers with `fake_tokens(qsl_idx, n)`, int32 ids that tests can
decode back from `mlperf_log_accuracy.json`. Responses come from a worker thread, never from inside the
issue callback. Each run takes about a second with the default user.conf.

Loadgen keeps config state per process: only the first `FromConfig(..., conf_type=1)` of a process loads
the embedded mlperf.conf; later ones skip it (no token latencies, no model settings) and log the ERROR
"Multiple conf files are used". So `run_fake` runs each test in a fresh child process by default
(this file as a script: `python tests/loadgen_fake.py OUTDIR '{"scenario": "Server"}'`).

`clock_speed=100` runs that child under libfaketime (`faketime -f "+0 x100"`, Debian package `faketime`, installed
by deployments/ci/system-deps.sh): every clock loadgen and the fake SUT read, CLOCK_MONOTONIC included, and every
sleep run 100 times faster, so a closed-division run configured with the real `min_duration` of 600000 ms lasts
600 s on loadgen's clock and about 6 s on the wall. `audit_config_lines` writes an audit.config that loadgen
applies as a compliance audit (deleted after the run, as the audit procedure does); `seeds` sets the RNG seeds
through TestSettings after FromConfig (how a log of another round's loadgen is made); `short_every=N` makes every
Nth response claim a single token, a SUT bug loadgen logs as an error. Under an accelerated clock every real
millisecond the fake SUT waits for a CPU counts a hundred times, so `token_gap_s=0` drops the pause between first
and last token and `niceness` (e.g. -10, honoured only where the OS allows it) keeps a busy machine from turning a
scheduling delay into a missed latency limit.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import mlperf_loadgen as lg
import numpy as np

SCENARIOS = {"Offline": lg.TestScenario.Offline, "Server": lg.TestScenario.Server}
MODES = {"performance": lg.TestMode.PerformanceOnly, "accuracy": lg.TestMode.AccuracyOnly}
TOKEN_GAP_S = 0.001  # between the first token and the last one, so TPOT is never zero
OFFLINE_BATCH = 64
AUDIT_CONFIG = "audit.config"
SEED_ATTRIBUTES = ("qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed")


def faketime_argv(clock_speed: float) -> list[str]:
    """The argv prefix that runs a command under an accelerated clock (libfaketime)."""
    binary = shutil.which("faketime")
    if binary is None:
        raise RuntimeError("`faketime` is not installed; run `make system-deps` (deployments/ci/system-deps.sh), "
                           "which apt-installs it")
    return [binary, "-f", f"+0 x{clock_speed:g}"]


def fake_tokens(qsl_idx: int, n: int) -> np.ndarray:
    """The int32 token ids the fake SUT sends for one sample: distinct per sample, easy to check."""
    return (np.arange(n, dtype=np.int32) + qsl_idx * 1000 + 7).astype("<i4")


def default_user_conf(loadgen_model: str, total_count: int) -> list[str]:
    """A user.conf that keeps a run to about a second."""
    return [
        f"{loadgen_model}.*.performance_sample_count_override = {total_count}",
        f"{loadgen_model}.*.accuracy_sample_count_override = {total_count}",
        "*.Offline.min_duration = 500",
        "*.Offline.target_qps = 50",
        "*.Server.min_duration = 500",
        "*.Server.target_qps = 50",
        f"*.*.min_query_count = {total_count}",
    ]


class _FakeSut:
    """Answers queries from a worker thread: optional first token, then all tokens."""

    def __init__(self, *, server: bool, first_token: bool, tokens_per_sample: int, n_tokens: int, latency_s: float,
                 short_every: int | None = None, token_gap_s: float = TOKEN_GAP_S):
        self.server = server
        self.token_gap_s = token_gap_s
        self.short_every = short_every
        self.answered = 0
        self.first_token = first_token
        self.tokens_per_sample = tokens_per_sample
        self.n_tokens = n_tokens
        self.latency_s = latency_s
        self.pending: queue.Queue[list[tuple[int, int]] | None] = queue.Queue()
        self.worker = threading.Thread(target=self._work, name="fake-sut", daemon=True)

    def issue(self, samples: Sequence[lg.QuerySample]) -> None:
        pairs = [(s.id, s.index) for s in samples]
        step = 1 if self.server else OFFLINE_BATCH
        for start in range(0, len(pairs), step):
            self.pending.put(pairs[start : start + step])

    def flush(self) -> None:
        return None

    def _work(self) -> None:
        while (batch := self.pending.get()) is not None:
            if self.latency_s:
                time.sleep(self.latency_s)
            ids = [sample_id for sample_id, _ in batch]
            arrays = [fake_tokens(index, self.tokens_per_sample) for _, index in batch]
            if self.server and self.first_token:
                firsts = [a[:1] for a in arrays]
                lg.FirstTokenComplete(_responses(ids, firsts, [1] * len(ids)))
                if self.token_gap_s:
                    time.sleep(self.token_gap_s)
            counts = [self.n_tokens] * len(ids)
            if self.short_every:
                counts = [1 if (self.answered + i + 1) % self.short_every == 0 else n for i, n in enumerate(counts)]
            self.answered += len(ids)
            lg.QuerySamplesComplete(_responses(ids, arrays, counts))


def _responses(ids: list[int], arrays: list[np.ndarray], n_tokens: list[int]) -> list[lg.QuerySampleResponse]:
    """Loadgen copies the bytes during the *Complete call, so `arrays` only has to outlive that call."""
    return [
        lg.QuerySampleResponse(i, a.ctypes.data, a.nbytes, n) for i, a, n in zip(ids, arrays, n_tokens, strict=True)
    ]


def run_fake(
    outdir: Path,
    *,
    scenario: str = "Offline",
    mode: str = "performance",
    loadgen_model: str = "gpt-oss-120b",
    user_conf_lines: Sequence[str] | None = None,
    total_count: int = 16,
    tokens_per_sample: int = 8,
    first_token: bool = True,
    n_tokens_override: int | None = None,
    latency_s: float = 0.0,
    audit_config_lines: Sequence[str] | None = None,
    seeds: dict[str, int] | None = None,
    short_every: int | None = None,
    token_gap_s: float = TOKEN_GAP_S,
    niceness: int | None = None,
    clock_speed: float | None = None,
    in_process: bool = False,
) -> Path:
    """Run loadgen once and return `outdir`, which then holds the mlperf_log_* files (and user.conf).

    `in_process=True` runs loadgen in this process: only correct for the first run of a process.
    """
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    options = {
        "scenario": scenario,
        "mode": mode,
        "loadgen_model": loadgen_model,
        "user_conf_lines": None if user_conf_lines is None else list(user_conf_lines),
        "total_count": total_count,
        "tokens_per_sample": tokens_per_sample,
        "first_token": first_token,
        "n_tokens_override": n_tokens_override,
        "latency_s": latency_s,
        "audit_config_lines": None if audit_config_lines is None else list(audit_config_lines),
        "seeds": seeds,
        "short_every": short_every,
        "token_gap_s": token_gap_s,
        "niceness": niceness,
    }
    if in_process:
        _run_in_this_process(outdir, **options)
    else:
        _run_in_a_child(outdir, options, clock_speed)
    return outdir


def _run_in_a_child(outdir: Path, options: dict, clock_speed: float | None) -> None:
    """`run_fake(outdir, **options, in_process=True)` in a fresh Python process (this file as a script), under an
    accelerated clock when `clock_speed` is given."""
    argv = [sys.executable, str(Path(__file__).resolve()), str(outdir), json.dumps(options)]
    if clock_speed is not None:
        argv = faketime_argv(clock_speed) + argv
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"fake loadgen run exited with {done.returncode}: {done.stderr[-2000:]}")


def _test_settings(user_conf: Path, loadgen_model: str, scenario: str, mode: str,
                   seeds: dict[str, int] | None) -> lg.TestSettings:
    """Loadgen's settings from `user_conf` (and the embedded mlperf.conf), then the scenario, mode and seeds."""
    settings = lg.TestSettings()
    settings.FromConfig(str(user_conf), loadgen_model, scenario, 1)
    settings.scenario = SCENARIOS[scenario]
    settings.mode = MODES[mode]
    for name, value in (seeds or {}).items():
        if name not in SEED_ATTRIBUTES:
            raise ValueError(f"unknown seed {name!r}; use {', '.join(SEED_ATTRIBUTES)}")
        setattr(settings, name, value)
    return settings


def _log_settings(outdir: Path) -> lg.LogSettings:
    """Logs into `outdir`, no summary on stdout, no trace."""
    log_settings = lg.LogSettings()
    log_settings.log_output.outdir = str(outdir)
    log_settings.log_output.copy_summary_to_stdout = False
    log_settings.enable_trace = False  # as the harness runs it (tasks/harness/runner.py)
    return log_settings


def _audit_file(outdir: Path, audit_config_lines: Sequence[str] | None) -> Path:
    """The audit.config loadgen is to read: written into `outdir` from the lines given, else a path that is absent."""
    if audit_config_lines is None:
        return outdir / "no-audit.config"
    audit = outdir / AUDIT_CONFIG
    audit.write_text("\n".join(audit_config_lines) + "\n")
    return audit


def _run_in_this_process(
    outdir: Path,
    *,
    scenario: str,
    mode: str,
    loadgen_model: str,
    user_conf_lines: Sequence[str] | None,
    total_count: int,
    tokens_per_sample: int,
    first_token: bool,
    n_tokens_override: int | None,
    latency_s: float,
    audit_config_lines: Sequence[str] | None,
    seeds: dict[str, int] | None,
    short_every: int | None,
    token_gap_s: float,
    niceness: int | None,
) -> None:
    """One loadgen run against `_FakeSut`, in this process, logging into `outdir`."""
    if niceness is not None:
        with contextlib.suppress(PermissionError):  # raising the priority needs CAP_SYS_NICE; lowering never fails
            os.nice(niceness)
    lines = default_user_conf(loadgen_model, total_count) if user_conf_lines is None else list(user_conf_lines)
    user_conf = outdir / "user.conf"
    user_conf.write_text("\n".join(lines) + "\n")
    settings = _test_settings(user_conf, loadgen_model, scenario, mode, seeds)
    audit = _audit_file(outdir, audit_config_lines)
    fake = _FakeSut(
        server=scenario != "Offline",
        first_token=first_token,
        tokens_per_sample=tokens_per_sample,
        n_tokens=tokens_per_sample if n_tokens_override is None else n_tokens_override,
        latency_s=latency_s,
        short_every=short_every,
        token_gap_s=token_gap_s,
    )
    fake.worker.start()
    sut = lg.ConstructSUT(fake.issue, fake.flush)
    qsl = lg.ConstructQSL(total_count, total_count, lambda _: None, lambda _: None)
    try:
        # An audit.config in the CWD would silently override settings: loadgen reads only the one named here
        # (absent unless audit_config_lines were given).
        lg.StartTestWithLogSettings(sut, qsl, settings, _log_settings(outdir), str(audit))
    finally:
        if audit_config_lines is not None:
            audit.unlink(missing_ok=True)
        fake.pending.put(None)
        fake.worker.join(timeout=30)
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)


if __name__ == "__main__":
    options = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    print(run_fake(Path(sys.argv[1]), **options, in_process=True))
