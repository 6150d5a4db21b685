"""A benchmark's engine launch, seen from the plan: which launcher, which model path, and the review that
`podium launch PLAN --dry-run` prints (every process spec: node, argv, env, ports, GPUs, probes, files) without
starting anything or asking any cluster. The plan's engine env values show as `<set>` (submission/plan/secret_env.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from submission.base.errors import PlanError, PodiumError
from submission.budget import capacity as capacity_checks
from submission.plan.model import BenchmarkSpec, EngineSpec, Plan
from submission.plan.platforms import PLATFORMS
from submission.plan.secret_env import SHOWN, shown_env, shown_options
from submission.plan.slurm_options import SlurmSettings
from submission.rules import load_rules
from submission.tree.host_facts import accelerators
from tasks import clients
from tasks.engines import Endpoint, HttpProbe, Node, Placement, ProcessSpec
from tasks.engines.replicas import for_engine
from tasks.launchers import Launcher, launched, launcher, slurm_cli, slurm_replicas, slurm_stage
from tasks.serving import replica_review
from tasks.workspace import Workspace

REVIEW_PORT = 8000   # local and Slurm launches take free ports; the review shows them counted from here


def slurm_address(node: int) -> str:
    """How the review names node `node`'s IPv4 address, which only the launch finds out (on the node)."""
    return f"NODE{node}_IPV4"


def owner(plan: Plan, bench: BenchmarkSpec) -> dict[str, str]:
    """What an engine serves (plan, system, benchmark): the kubernetes launcher labels its objects with it."""
    return {"plan": plan.name, "system": bench.system, "benchmark": bench.benchmark}


def where(engine: EngineSpec, owner: dict[str, str] | None = None) -> dict[str, Any]:
    """The part of an engine spec that says where it runs, its sections typed (a Prefect task parameter), `owner`
    (see `owner`) for a launcher that labels what it creates, the layout of its replicas (None: one instance) and the
    name of its system's GPU platform (submission/plan/platforms.py)."""
    return {"launcher": engine.launcher, "slurm": engine.slurm_settings(), "kubernetes": engine.kubernetes,
            "owner": owner, "replicas": engine.replica_layout(), "platform": engine.platform().name}


def launcher_for(engine_name: str, where: dict[str, Any] | None, state_dir: Path) -> Launcher:
    """The launcher `where` names (None: local), with its own section of settings and its system's GPU platform;
    made with `replicas`, it starts the engine's replicas (tasks/launchers/__init__.py `start_ready`)."""
    name, replicas = (where or {}).get("launcher", "local"), (where or {}).get("replicas")
    platform = PLATFORMS[(where or {}).get("platform", "nvidia")]
    if name == "kubernetes":
        return launcher("kubernetes", state_dir=state_dir, settings=where["kubernetes"], engine=engine_name,
                        owner=where.get("owner"), replicas=replicas, platform=platform)
    if name == "slurm" and where.get("slurm"):
        return launcher("slurm", state_dir=state_dir, settings=where["slurm"], replicas=replicas, platform=platform)
    return launcher(name, state_dir=state_dir, replicas=replicas, platform=platform)


def make_launcher(engine: EngineSpec, state_dir: Path, owner: dict[str, str] | None = None) -> Launcher:
    """The plan's launcher for this engine."""
    return launcher_for(engine.name, where(engine, owner), state_dir)


def model_dir_for(engine: EngineSpec, staged: Path) -> Path:
    """The model folder as the engine's processes see it (a pod may mount it elsewhere)."""
    k8s = engine.kubernetes
    return Path(k8s.model_path) if engine.launcher == "kubernetes" and k8s and k8s.model_path else staged


def read_in_place(engine: EngineSpec, source: str) -> bool:
    """Whether the engine reads the model where the plan's source is, from a volume its pods mount (a Kubernetes
    engine's `model_claim` or `model_host_path`), so the flow copies nothing and verifies it there: a copy in the
    flow's workspace would be read by nobody."""
    k8s = engine.kubernetes
    return engine.launcher == "kubernetes" and k8s is not None and bool(k8s.model_claim or k8s.model_host_path) \
        and not source.startswith("s3://")


def review_placement(engine: EngineSpec, state_dir: Path) -> Placement:
    """The placement a launch would get, without reserving anything: the kubernetes launcher's own (it is fixed);
    for local and Slurm, ports counted from REVIEW_PORT on `127.0.0.1` or on `NODE<i>_IPV4` (node i's IPv4 address,
    which the Slurm launcher resolves on the node at launch)."""
    nodes, ports = for_engine(engine).demand(engine.config())
    if engine.launcher == "kubernetes":
        where = make_launcher(engine, state_dir)
        return where.placement(ports, nodes=nodes)
    hosts = ["127.0.0.1"] * nodes if engine.launcher == "local" else [slurm_address(i) for i in range(nodes)]
    step = ports if engine.launcher == "local" else 0   # one host: every node's ports differ
    per_node = tuple(Node(h, tuple(REVIEW_PORT + i * step + p for p in range(ports))) for i, h in enumerate(hosts))
    return Placement(hosts[0], per_node[0].ports, nodes=per_node if nodes > 1 else (),
                     workdir="<deployment folder>", platform=engine.platform())


def sizing(plan: Plan, bench: BenchmarkSpec, *, model: Path | None = None, datasets: dict[str, str] | None = None,
           capacity: str | None = None) -> capacity_checks.Review:
    """The memory fit and sequence budgets of `bench`'s engine, from the model folder and data set files given
    (staged: plan source -> local path) or, where absent, from the plan's local sources (a shared filesystem); the
    system's GPU memory from `capacity` (preflight's system description), the plan's description, or this host's
    GPUs when the engine runs here."""
    from tasks.datasets.prompts import longest_prompts

    src = Path(bench.model.source)
    folder = model or (src if not bench.model.source.startswith("s3://") and src.is_dir() else None)
    sources = {bench.dataset.performance, bench.dataset.accuracy, *bench.dataset.compliance.values()}
    files = datasets or {s: s for s in sources if not s.startswith("s3://")}
    if not bench.engine.config().workers():   # nothing to size (smoke, simulated, external, the Dynamo mocker)
        files = {}
    capacity = capacity or plan.system(bench.system).description.get("accelerator_memory_capacity")
    if capacity is None and bench.engine.launcher == "local":   # the GPUs are this host's
        capacity = accelerators().get("accelerator_memory_capacity")
    return capacity_checks.review(plan, bench, load_rules(plan.round), model_folder=folder,
                                  prompt_max=longest_prompts(bench.benchmark, files), capacity=capacity)


def _probe(p: HttpProbe) -> dict[str, Any]:
    out: dict[str, Any] = {"method": "GET" if p.body is None else "POST", "path": p.path}
    if p.body is not None:
        out["body"] = p.body
    if p.contains is not None:
        out["contains"] = p.contains
    return out


def process_view(spec: ProcessSpec, secret: frozenset[str] = frozenset()) -> dict[str, Any]:
    """A process as the review shows it; the values of the `secret` variables (the plan's engine env) as `<set>`."""
    return {"name": spec.name, "role": spec.role, "replica": spec.replica, "node": spec.node_index, "host": spec.host,
            "bind": spec.bind or spec.host, "port": spec.port, "side_ports": spec.side_ports, "gpus": spec.gpus,
            "gpu_ids": list(spec.gpu_ids), "mpi_ranks": spec.mpi_ranks, "nodes": spec.nodes, "argv": list(spec.argv),
            "env": shown_env(spec.env, secret), "probes": [_probe(p) for p in spec.probes], "files": spec.files}


def review(plan: Plan, bench: BenchmarkSpec, workspace: Path) -> dict[str, Any]:
    """Everything a launch of this benchmark's engine would start, as plain data."""
    engine = bench.engine
    be = for_engine(engine)
    try:
        version = be.version(engine.config())
    except PodiumError as e:
        version = f"not detected here ({e.message})"
    staged = Path(bench.model.source) if not bench.model.source.startswith("s3://") else Path("<staged model>")
    model_dir = model_dir_for(engine, staged)
    build_dir = Workspace.at(workspace).builds / f"{engine.name}-<build key>"
    placement = review_placement(engine, workspace / "pids")
    (scenarios, options), *relaunched = bench.engine_variants()   # one launch per variant (sglang's speculative)
    specs = be.processes(options, model_dir, placement, build_dir)
    endpoint = be.endpoint(engine.config(), model_dir, specs)
    secret = frozenset(getattr(engine.config(), "env", None) or ())
    out: dict[str, Any] = {
        "benchmark": bench.key, "engine": engine.name, "launcher": engine.launcher, "version": version,
        "platform": engine.platform().name,
        "options": shown_options(engine.options), "model_dir": str(model_dir), "build_dir": str(build_dir),
        "scenarios": list(scenarios), "processes": [process_view(s, secret) for s in specs],
        "relaunches": [{"scenarios": list(names), "argv": [list(s.argv) for s in be.processes(o, model_dir, placement,
                                                                                               build_dir)
                                                           if getattr(s, "replica", None) in (None, 0)]}
                       for names, o in relaunched]}
    if engine.launcher == "kubernetes":   # the objects it would create are part of the review (no cluster asked)
        extra, endpoint = make_launcher(engine, workspace / "pids").review(specs, endpoint)
        out |= extra
    if engine.launcher == "slurm":   # the steps it would run: salloc, each process's srun, each node's GPU sampler
        settings = engine.slurm_settings() or SlurmSettings()
        copies: dict[str, list[str]] = {}
        if settings.local_stage:   # and first the model's copy on each node that reads it, which the argv then names
            names = [f"node{i}" for i in range(max(s.node_index + s.nodes for s in specs))]
            copies = slurm_stage.review(settings, specs, model_dir, names)
            specs = slurm_stage.localised(settings, specs, model_dir, names)
            out["processes"] = [process_view(s, secret) for s in specs]
        steps = slurm_replicas.node_steps(specs, settings.python, engine.platform())   # a supervisor step per node
        out["slurm"] = {**slurm_cli.review(settings, steps, engine.platform()), "local_stage": copies}
    if engine.replica_layout() is not None:
        out["replicas"] = replica_review.view(bench, specs)
    out["endpoint"] = endpoint.for_client()

    out["measuring"] = clients.review(plan, bench, endpoint, model_dir, Workspace.at(workspace).work)
    sized = sizing(plan, bench)
    out["capacity"] = sized.as_dict()
    out["predicted"] = _predicted(plan, bench)
    out["slurm_time"] = _slurm_time(plan, bench)
    out["time_problems"] = (out["slurm_time"] or {}).get("problems", [])
    out["description"] = _description(plan, bench)
    return out


def _predicted(plan: Plan, bench: BenchmarkSpec) -> dict[str, Any]:
    """Each run and audit's predicted seconds and GPU-hours, each scenario's and the whole (submission/budget/cost.py),
    whatever the launcher."""
    from submission.budget import cost

    needs, gpus = cost.run_needs(plan, bench), cost.benchmark_gpus(bench)
    runs = [{"run": n.label, "samples": n.length.samples, "accuracy_samples": n.length.accuracy_samples,
             "seconds": round(n.length.seconds, 1), "gpu_hours": n.gpu_hours} for n in needs]
    seconds = sum(n.length.seconds for n in needs)
    return {"gpus": gpus, "runs": runs, "scenarios": cost.scenario_totals(needs, gpus), "seconds": round(seconds, 1),
            "gpu_hours": cost.gpu_hours(seconds, gpus), "text": cost.prediction_lines(plan, bench, needs)}


def _slurm_time(plan: Plan, bench: BenchmarkSpec) -> dict[str, Any] | None:
    """What a Slurm engine's allocation and the job Podium runs in must last (submission/budget/slurm_time.py)."""
    if bench.engine.launcher != "slurm":
        return None
    from submission.budget.slurm_time import job_need, need, slurm_time, time_problems

    n, settings = need(plan, bench), bench.engine.slurm_settings() or SlurmSettings()
    job = slurm_time(job_need(plan))
    nodes = settings.nodes or job_nodes(bench.engine, inside=True)
    sbatch = slurm_cli.sbatch_argv(settings, nodes, job, ["run", "PLAN.yaml"])
    text = [n.limit_line(), f"  Slurm time: engine.slurm.time_limit is {settings.time_limit} (used when Podium "
                            f"takes the allocation itself); sbatch deployments/slurm/podium.sbatch needs --time >= "
                            f"{job} for the whole plan (preflight checks the job's time left)"]
    if settings.allocation != "new":
        text.append(f"  Podium inside one job, with engine.slurm's allocation: {shlex.join(sbatch)}")
    return {"runs": n.runs, "allocation": slurm_time(n.allocation_s), "job": job, "sbatch": sbatch,
            "problems": [p for p in time_problems(plan) if p.startswith(f"benchmarks.{plan.benchmarks.index(bench)}.")],
            "time_limit": settings.time_limit, "text": text}


def job_nodes(engine: EngineSpec, inside: bool) -> int:
    """The nodes a Slurm allocation holds for this engine: its topology's, and, when Podium runs inside that job
    (`inside`: podium.sbatch) and the engine's replicas give their head a node of its own, that node too."""
    layout = engine.replica_layout()
    head = inside and layout is not None and layout.head == "own-node"
    return for_engine(engine).demand(engine.config())[0] + int(head)


def _description(plan: Plan, bench: BenchmarkSpec) -> dict[str, Any]:
    """Where each field the checker requires non-empty, and the plan does not give, will come from."""
    from submission.tree.systems import forecast

    i, system = next((i, s) for i, s in enumerate(plan.systems) if s.name == bench.system)
    node = {"slurm": "node 0 of the engine's Slurm allocation (a Slurm step, at preflight)",
            "kubernetes": "the node a pod like the engine's lands on (engine image, node selector, GPUs; at "
                          "preflight)"}.get(bench.engine.launcher,
                                                                                  "this host")
    fields = forecast(system.description, system.nodes, plan.round)
    sources = {"detected": f"detected on {node}", "N/A": "N/A (does not apply)",
               "nowhere": f"nowhere: give systems.{i}.description.<field>"
                          + (" (preflight refuses a closed submission without it)" if plan.strict_description
                             else "; \"unknown\" until then")}
    text = [f"  system description {system.name!r}: the plan gives {len(system.description)} field(s); the rest:"]
    for source in ("nowhere", "detected", "N/A"):
        names = [f for f, s in fields if s == source]
        if names:
            text.append(f"    {sources[source]}: {', '.join(names)}")
    return {"system": system.name, "fields": dict(fields), "text": text}


def reviews(plan: Plan, workspace: Path, key: str | None = None) -> list[dict[str, Any]]:
    benches = [plan.benchmark(key)] if key else plan.benchmarks
    return [review(plan, b, workspace) for b in benches]


def require_capacity(items: list[dict[str, Any]]) -> None:
    """Exit 2 (PlanError) when a reviewed engine does not fit its GPUs, a run's sequence budget is short or a Slurm
    allocation's time limit is shorter than what it runs."""
    capacity_checks.require([p for r in items for p in r["capacity"]["problems"] + r.get("time_problems", [])])


def _indent(text: str, prefix: str = "      | ") -> str:
    return "\n".join(prefix + line for line in text.rstrip("\n").splitlines())


def _routing(processes: list[dict[str, Any]]) -> list[str]:
    """What a KV router routes on: the workers' KV-cache events, or its own predictions."""
    routers = [p for p in processes if "--router-mode" in p["argv"]
               and p["argv"][p["argv"].index("--router-mode") + 1] == "kv"]
    if not routers:
        return []
    publishers = [p["name"] for p in processes if "kv_events" in p["side_ports"]]
    if "--load-aware" in routers[0]["argv"]:
        return ["  KV router: load-aware (--load-aware): the workers run with --no-enable-prefix-caching, so there is "
                "no cached prefix to match; it routes on each worker's in-flight prefill tokens and active KV blocks, "
                "reads no KV events and credits no overlap"]
    if "--no-router-kv-events" in routers[0]["argv"]:
        return ["  KV router: no worker publishes KV events here; it predicts cache state from its own routing"]
    source = f"the KV events of {len(publishers)} worker(s), each on its kv_events port" if publishers else \
        "the KV events the workers publish over the event plane"
    return [f"  KV router: fed by {source}"]


def _measuring(measuring: dict[str, Any]) -> list[str]:
    """How each run is measured: loadgen's user.conf, or the endpoints client's command and config."""
    if measuring["harness"] == "loadgen":
        return [f"  measured by loadgen (Podium's SUT), {len(measuring['runs'])} run(s); user.conf of each:",
                *(_indent(r["user_conf"], f"    {r['label']}: ") for r in measuring["runs"])]
    lines = [f"  measured by the MLCommons endpoints client, {len(measuring['runs'])} run(s), each in its run folder:"]
    for r in measuring["runs"]:
        lines += [f"    {r['label']}: {shlex.join(r['command'])}",
                  _indent(yaml.safe_dump(r["config"], sort_keys=False), "      | ")]
    return lines


def _env_text(env: dict[str, str]) -> str:
    """`K=V ...` as a shell would take it; a secret's `<set>` as it is."""
    return " ".join(f"{k}={v if v == SHOWN else shlex.quote(v)}" for k, v in sorted(env.items()))


def render(items: list[dict[str, Any]]) -> str:
    """The review as text, one block per process."""
    lines = []
    for r in items:
        lines += [f"{r['benchmark']}: engine {r['engine']} ({r['version']}), launcher {r['launcher']}",
                  f"  model {r['model_dir']}; build folder {r['build_dir']}"]
        if r["launcher"] == "slurm":
            lines.append(f"  addresses: {slurm_address(0).replace('0', '<i>')} is node i's IPv4 address, resolved on "
                         "the node at launch from its NodeAddr; every process binds and advertises it")
        if r["launcher"] != "kubernetes":
            lines.append(f"  ports are picked free at launch; shown here counted from {REVIEW_PORT}")
        else:
            platform = PLATFORMS[r.get("platform", "nvidia")]
            lines.append(f"  each process is a pod holding {platform.resource} GPUs: "
                         f"{', '.join(platform.visibility_env())} dropped there (the device plugin picks a pod's GPUs "
                         "and numbers them from 0); config files come from a ConfigMap at the paths shown")
        for p in r["processes"]:
            if p.get("replica") not in (None, 0):
                continue   # every replica runs as replica-0 does; the table below says where each runs
            gpus = f"{p['gpus']} GPU(s) {p['gpu_ids']}" if p["gpus"] else "no GPU"
            mpi = f", {p['mpi_ranks']} MPI ranks over {p['nodes']} node(s)" if p["mpi_ranks"] > 1 else ""
            side = "".join(f", {k} {v}" for k, v in p["side_ports"].items())
            lines += [f"  [node {p['node']}] {p['name']} ({p['role']}) on {p['host']}:{p['port']}{side}; "
                      f"{gpus}{mpi}",
                      f"    argv: {shlex.join(p['argv'])}",
                      f"    env:  {_env_text(p['env'])}",
                      "    ready when: " + "; ".join(
                          f"{q['method']} {q['path']}" + (f" {json.dumps(q['body'])}" if "body" in q else "")
                          + (f" contains {q['contains']}" if "contains" in q else "") for q in p["probes"])]
            for path, text in p["files"].items():
                lines += [f"    file {path}:", _indent(text)]
        for again in r.get("relaunches", ()):
            lines.append(f"  these serve {', '.join(r['scenarios'])}; for {', '.join(again['scenarios'])} the engine "
                         "is stopped and launched again, as above but with:")
            lines += [f"    argv: {shlex.join(argv)}" for argv in again["argv"]]
        lines += _routing(r["processes"])
        if "replicas" in r:
            lines += replica_review.lines(r["replicas"], r.get("slurm"))
        e = r["endpoint"]
        lines.append(f"  endpoint {e['base_url']} model {e['model']!r}; token-id prompts: "
                     f"{'yes' if e['accepts_token_ids'] else 'no'}; token ids back: "
                     f"{'yes' if e['returns_token_ids'] else 'no'}")
        if "kubernetes" in r:
            lines.append(f"  kubernetes objects: {_objects(r['kubernetes'])} (--json shows them in full)")
        lines += _local_copies(r.get("slurm"))
        lines += _sampler_steps(r.get("slurm"))
        lines += _measuring(r["measuring"])
        lines += r["capacity"]["text"]
        lines += r["predicted"]["text"]
        lines += (r.get("slurm_time") or {}).get("text", [])
        lines += r["description"]["text"]
        lines.append("")
    return "\n".join(lines)


def _objects(objects: list[dict[str, Any]]) -> str:
    """`Kind name` of each object; more than three of a kind as `N Kinds (first .. last)`."""
    by_kind: dict[str, list[str]] = {}
    for o in objects:
        by_kind.setdefault(o["kind"], []).append(o["metadata"]["name"])
    return ", ".join(", ".join(f"{kind} {n}" for n in names) if len(names) <= 3 else
                     f"{len(names)} {kind}s ({names[0]} .. {names[-1]})" for kind, names in by_kind.items())


def _local_copies(slurm: dict[str, Any] | None) -> list[str]:
    """The step a Slurm launch with `local_stage` runs on each node that reads the model, before the engine."""
    lines = []
    for node, argv in ((slurm or {}).get("local_stage") or {}).items():
        script = argv.index("-c") + 1
        shown = [*argv[:script], "<tasks/launchers/slurm_stage.py NODE_COPY>", *argv[script + 1:]]
        lines.append(f"  model copied onto {node} (verified against its manifest) before the engine starts: "
                     f"{shlex.join(shown)}")
    return lines


def _sampler_steps(slurm: dict[str, Any] | None) -> list[str]:
    """The GPU sampler step a Slurm launch starts on each engine node, its script named rather than printed."""
    lines = []
    for node, argv in ((slurm or {}).get("samplers") or {}).items():
        script = argv.index("-c") + 1
        shown = [*argv[:script], "<tasks/launchers/gpu_sampler.py SCRIPT>", *argv[script + 1:]]
        lines.append(f"  GPU sampler on {node}: {shlex.join(shown)}")
    return lines


@contextlib.contextmanager
def serving(plan: Plan, bench: BenchmarkSpec, workspace: Path,
            logger: logging.Logger | logging.LoggerAdapter) -> Iterator[Endpoint]:
    """Stage the model (or verify it where the engine reads it: `read_in_place`), build the engine (or reuse the
    build), launch it where the plan says, yield its endpoint once it generates, and always stop it. Plain
    functions: `podium launch` uses it outside any flow."""
    from tasks.serving.build import build
    from tasks.staging.stage import S3Access, stage, verify_in_place

    ws, engine = Workspace.at(workspace), bench.engine
    staged = verify_in_place(bench.model.source, ws.stage / "models") if read_in_place(engine, bench.model.source) \
        else stage(bench.model.source, ws.stage / "models", access=S3Access.for_plan(plan.storage, ws.s3))
    be = for_engine(engine)
    built = build(engine.name, engine.config(), Path(staged.path), staged.sha256, be.version(engine.config()),
                  ws.builds, logger)
    where = make_launcher(engine, ws.pids, owner(plan, bench))
    log_dir = ws.root / "launch" / bench.key.replace("/", "-")
    with launched(be, engine.config(), model_dir_for(engine, Path(staged.path)), where, log_dir, logger,  # type: ignore[arg-type]
                  engine.ready_timeout_s, Path(built.path)) as endpoint:
        yield endpoint


def pick(plan: Plan, key: str | None) -> BenchmarkSpec:
    if key is not None:
        return plan.benchmark(key)
    if len(plan.benchmarks) > 1:
        raise PlanError(f"plan {plan.name!r} has {len(plan.benchmarks)} benchmarks",
                        fix="name one: --benchmark " + " | ".join(b.key for b in plan.benchmarks))
    return plan.benchmarks[0]
