"""The GPU acceptance script's carried leg: Podium's smoke scenarios on a GPU node that reaches no package index.

    python3 deployments/gpu/smoke_leg.py assets --workspace WS        # the tiny model and data set into WS/store
    python3 deployments/gpu/smoke_leg.py review PLAN --workspace WS   # what a launch would start, as `podium launch
                                                                      # PLAN --dry-run` prints it; starts nothing
    python3 deployments/gpu/smoke_leg.py run PLAN --workspace WS      # launch, measure, score: WS/runs/<UTC time>/

It runs on the node's own Python with what its image has (node-image.txt) plus the carried wheels (carry.txt; both
checked there by carry_check.py): the plan model, the local launcher, the warm-up, Podium's harness over the real
loadgen and the plan's evaluator, through the same functions `podium run` uses (tasks.harness.measure.run_once), but
without Prefect, object storage, caching, audits or a submission tree, since those and their dependencies do not fit
in a 64 MiB carry (docs/engines.md, "GPU acceptance").
Each run's record goes to `results.json` in the run folder, as `podium run` writes it, so the acceptance table reads
both alike. The plan is a smoke plan: never a submission.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:   # run as a script from anywhere: Podium's packages are at the repository root
    sys.path.insert(0, str(ROOT))

from submission.base.errors import LaunchError, PodiumError, RunFailed  # noqa: E402
from submission.base.files import sha256_file, write_atomic  # noqa: E402
from submission.plan import model as plans  # noqa: E402
from submission.results.runs import RunRecord, plan_runs  # noqa: E402
from submission.rules import load_rules  # noqa: E402
from tasks.engines import backend, engine_identity  # noqa: E402
from tasks.engines.smoke import build_assets  # noqa: E402
from tasks.harness.measure import run_once  # noqa: E402
from tasks.launchers import Launcher, start_ready  # noqa: E402
from tasks.measuring import RunRejected, summary  # noqa: E402
from tasks.serving import warmup  # noqa: E402
from tasks.serving.launch import make_launcher, render, reviews  # noqa: E402
from tasks.workspace import Workspace  # noqa: E402

log = logging.getLogger("podium.smoke-leg")


def content_key(path: Path) -> str:
    """sha256 over a file's bytes, or over a folder's files (relative path and sha256 of each, sorted): the content
    part of the run keys (`podium run` takes it from its staging manifest; this leg reads the sources in place)."""
    if path.is_file():
        return sha256_file(path)
    files = {str(p.relative_to(path)): sha256_file(p) for p in sorted(path.rglob("*")) if p.is_file()}
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


@dataclass
class LaunchedEngine:
    """The leg's engine, launched once by the plan's launcher: what tasks.measuring.Engine asks of an engine.
    An engine that dies is not relaunched (the run fails, and the table says so)."""

    where: Launcher
    deployment: Any
    endpoint_: Any
    stall_s: float | None
    max_lost: int | None = None   # one serving instance: no replicas to lose

    def endpoint(self, performance: bool = True) -> Any:
        if not self.alive():
            raise LaunchError(f"the engine is not running:\n{self.log_report()}", fix="read the engine log")
        return self.endpoint_

    def alive(self) -> bool:
        return self.deployment is None or self.where.alive(self.deployment)

    def log_report(self, lines: int = 20) -> str:
        return (self.where.log_report(self.deployment, lines) if self.deployment is not None else None) or ""

    def close(self) -> None:
        if self.deployment is not None:
            self.where.stop(self.deployment)
            self.deployment = None


def run(plan_path: Path, ws: Workspace) -> int:
    """Every performance and accuracy run of the plan's benchmarks, in order, on one launch of each engine. Returns
    the exit status: 0 when every run passed."""
    plan = plans.load(plan_path)
    rules = load_rules(plan.round)
    folder = ws.run_folder(datetime.now(UTC).strftime("smoke-leg-%Y%m%dT%H%M%SZ"))
    records: list[RunRecord] = []
    failures: list[str] = []
    for bench in plan.benchmarks:
        model = Path(bench.model.source).resolve()
        datasets = {p: content_key(Path(p)) for _, kind, p in bench.sources() if kind == "datasets"}
        specs = plan_runs(plan, bench, rules, model_sha256=content_key(model), dataset_sha256=datasets,
                          engine=engine_identity(bench.engine.name, bench.engine.config()))
        # the harness runs in each run's own folder: the data sets by their absolute paths, as staged ones are
        specs = [s.model_copy(update={"dataset": str(Path(s.dataset).resolve())}) for s in specs]
        where = make_launcher(bench.engine, ws.pids)
        deployment, endpoint = start_ready(backend(bench.engine.name), bench.engine.config(), model, where,
                                           folder / "logs" / "engine", log, bench.engine.ready_timeout_s)
        engine = LaunchedEngine(where, deployment, endpoint, bench.engine.stall_timeout_s)
        try:
            if (warm := warmup.planned(bench.engine, specs)) is not None:   # as every EngineSession launch is
                warmup.warm_up(bench.engine.name, endpoint, warm, log)
            for spec in specs:
                try:
                    rec = run_once(spec, engine, folder / "logs", bench.evaluator, str(model / "tokenizer.json"))
                except RunRejected as e:
                    rec = e.record
                    failures.append(str(e))
                except (PodiumError, RunFailed) as e:
                    failures.append(f"{spec.label}: {e}")
                    log.error("%s failed: %s", spec.label, e)
                    continue
                records.append(rec)
                log.info("%s: %s", spec.label, summary(rec))
                # after each run: a leg killed at its limit still reports what it finished
                write_atomic(folder / "results.json", json.dumps([r.model_dump(mode="json") for r in records],
                                                                 indent=2))
        finally:
            engine.close()
    write_atomic(folder / "results.json", json.dumps([r.model_dump(mode="json") for r in records], indent=2))
    log.info("%d run(s) recorded in %s, %d failed", len(records), folder / "results.json", len(failures))
    for line in failures:
        log.error("failed: %s", line.splitlines()[0])
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("assets", "review", "run"))
    parser.add_argument("plan", nargs="?", type=Path)
    parser.add_argument("--workspace", type=Path, default=Path(".podium"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stdout)
    ws = Workspace.at(args.workspace)
    if args.command != "assets" and args.plan is None:
        parser.error(f"{args.command} needs a PLAN")
    try:
        if args.command == "assets":
            print("\n".join(build_assets(ws.store)))
            return 0
        if args.command == "review":
            items = reviews(plans.load(args.plan), ws.root)
            print(render(items))
            write_atomic(ws.root / "smoke-leg-review.json", json.dumps(items, indent=2, default=str))
            return 0
        return run(args.plan, ws)
    except PodiumError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
