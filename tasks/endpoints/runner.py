"""Run one endpoints client test against an endpoint: the peer of `tasks.harness.runner.run` for benchmarks the
round measures with the MLCommons endpoints client (`harness: endpoints` in the rules).

    result = run(spec, endpoint, run_dir, tokenizer=model_dir, data_dir=work_dir / "endpoints-data")

In `run_dir`: the client's config (`endpoints.yaml`), its data set where it looks for it (a link to the converted
file, converted once per staged data set into `data_dir`), its log (`client.log`, stdout and stderr) and its report
folder (`report/`, with config.yaml, performance/, accuracy/, events.jsonl). The client runs in a session of its own
with `run_dir` as its working folder and the model hub off; past `timeout_s` its whole process group is ended, and
whatever of its group outlives it is killed when it exits.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import signal
import subprocess
import time
from pathlib import Path

from submission.base.errors import CommandError
from submission.base.files import tail
from submission.results.runs import RunSpec
from tasks import clock
from tasks.endpoints import config as client_config
from tasks.endpoints import dataset
from tasks.endpoints.install import require_client
from tasks.endpoints.results import ClientResult, read_result
from tasks.engines import Endpoint

LOG = "client.log"
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
TERM_GRACE_S = 30.0   # after SIGTERM the client writes its partial report (execute.py `run_benchmark`)
TIMED_OUT = 124


def converted_dataset(spec: RunSpec, data_dir: Path) -> Path:
    """The run's staged data set in the client's columns, converted on first use into `data_dir`."""
    key = hashlib.sha256(f"{spec.dataset}\0{spec.dataset_sha256}".encode()).hexdigest()[:20]
    out = data_dir / f"{key}.parquet"
    return out if out.exists() else dataset.convert(Path(spec.dataset), out)


def prepare(spec: RunSpec, endpoint: Endpoint, run_dir: Path, *, tokenizer: Path, data_dir: Path,
            speed: float | None = None) -> Path:
    """Write the run's config and place its data set in `run_dir`; the config's path. A submission run's data set
    must have the rules' row count (the client's performance sample count)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    dataset_id, split, rows = client_config.client_dataset(spec)
    dataset.place(converted_dataset(spec, data_dir), run_dir, dataset_id, split,
                  rows=rows if spec.profile == "submission" else None, source=spec.dataset)
    return client_config.write_config(client_config.client_config(spec, endpoint, run_dir, tokenizer, speed), run_dir)


def command(spec: RunSpec, config: Path, client: Path | str) -> list[str]:
    """The client's command line for the run whose config is `config`."""
    return [str(client), "benchmark", "from-config", "-c", str(config), "--mode", client_config.client_mode(spec)]


def review(spec: RunSpec, endpoint: Endpoint, run_dir: Path, tokenizer: Path) -> dict:
    """What the run would do, as plain data (`podium launch PLAN --dry-run`): the client's command and config."""
    config = client_config.client_config(spec, endpoint, run_dir, tokenizer)
    return {"label": spec.label, "command": command(spec, run_dir / client_config.CONFIG, "inference-endpoint"),
            "config": config}


def run(spec: RunSpec, endpoint: Endpoint, run_dir: Path, *, tokenizer: Path, data_dir: Path,
        timeout_s: float | None = None, client: Path | None = None, speed: float | None = None) -> ClientResult:
    """Run the client (`client`, else the one `make venv-endpoints` installed, checked at the round's pin) and read
    its result. CommandError when it exits non-zero or runs past `timeout_s`; RunFailed when samples failed.
    `speed`: the client's accelerated clock (tasks.clock.ladder); None: the one PODIUM_CLOCK asks for."""
    config = prepare(spec, endpoint, run_dir, tokenizer=tokenizer, data_dir=data_dir, speed=speed)
    argv = clock.wrap(command(spec, config, client or require_client(spec.round)), speed)
    log = run_dir / LOG
    started = time.monotonic()
    with log.open("wb") as out:
        child = subprocess.Popen(argv, cwd=run_dir, stdout=out, stderr=subprocess.STDOUT,  # noqa: S603
                                 env=os.environ | OFFLINE_ENV, start_new_session=True)
        try:
            code = child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _end_group(child)
            raise CommandError(argv, TIMED_OUT, tail(log), fix=f"the client ran past {timeout_s:g} s; read {log}, "
                               "then raise the step's timeout or lower the run's min duration") from None
        finally:
            if child.poll() is None:
                _end_group(child)
            else:
                _end_leftovers(child)
    if code != 0:
        raise CommandError(argv, code, tail(log), fix=f"read {log} and the report in {run_dir / client_config.REPORT}")
    wall_s = (time.monotonic() - started) * (speed or clock.speed() or 1.0)   # on the client's clock
    result = read_result(run_dir / client_config.REPORT, accuracy=client_config.with_accuracy(spec), log=log)
    return dataclasses.replace(result, wall_s=round(wall_s, 3))


def _end_leftovers(child: subprocess.Popen) -> None:
    """Kill what the client, now exited, left running in its process group: a client that failed to start its
    services leaves their children (a tokenizer process, multiprocessing's resource tracker) behind, for good."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)


def _end_group(child: subprocess.Popen) -> None:
    """End the client's process group (it leads its session): SIGTERM and TERM_GRACE_S to write its partial report,
    then SIGKILL for whatever of the group is left (its worker processes)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=TERM_GRACE_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()
