"""What a plan needs before an engine starts, Prefect-free (`podium preflight`, `podium run` and the flows'
preflight task, tasks/ops/preflight.py, call these). `host_checks`: on the host that runs the flow, before anything
is allocated, every problem reported at once:

- every local source the plan names exists, and object storage has credentials (tasks/ops/inputs.py);
- a closed submission gives every description field that no node can tell (`require_description_sources`);
- each engine is known and installed (its version: the plan's pin, or what `options.python` has), each evaluator known;
- the LiveCodeBench tests of an accuracy score that runs them (gpt-oss-120b: `dataset.lcb_tests`), since the scoring
  reads them only after the whole accuracy run; likewise deepseek-r1's MATH-500 grader (`dataset.math_grader`:
  openai/prm800k at the round's commit, unpacked by `podium fetch-grader` or `podium fetch`, unchanged);
- the endpoints client, where a benchmark is measured by it, installed on a Python >= 3.12 at the commit the round
  pins (tasks/endpoints/install.py), since it runs on this host;
- `inference_src`, where the plan gives it: mlcommons/inference at the commit the round pins, a checkout or an
  unpacked archive of it, unchanged, the checker in it (tasks/ops/inference_sources.py);
- the commands a local engine starts beside itself (Dynamo's etcd and nats-server, `EngineBackend.services`) found on
  this host. A Slurm engine's, and its own commands, are looked for on the nodes of its allocation that run them by
  the node checks (tasks/ops/slurm_checks.py); a Kubernetes engine's are its image's, not checked;
- when asked, every engine fits its GPUs and every run its sequence budget (tasks/ops/inputs.py `check_capacity`).

Each check returns its problems (PodiumErrors naming the plan field or the missing piece, and the command that fixes
it); `Findings.require` raises them as one PlanError (exit 2).

`cluster_checks`: what the clusters answer without an allocation or a pod (`podium preflight PLAN` asks it without
`--nodes`): Slurm's verdict on each Slurm engine's allocation (`sbatch --test-only`, tasks/ops/slurm_request.py); for
each Kubernetes engine, that its account may make every call the launcher makes in its namespace, that its model's
claim exists (tasks/ops/kube_checks.py `access_problems`) and that its image's registry holds a platform for the
architecture of every node its pods may land on (`image_problems`). A Slurm engine's image is checked on its nodes.

`on_nodes`: then, on the engines' nodes, each system described from the node that runs its engine: node 0 of its
Slurm allocation, by Slurm steps that also find the engine's commands on the nodes that run them
(tasks/ops/slurm_checks.py); under Kubernetes, the node a short-lived pod shaped like the engine's lands on
(tasks/ops/kube_checks.py); a local engine's system from this host. A closed submission
takes no field that holds no fact (`unknown`, or a guessed default). A GPU engine's node must show the system's GPU
platform (`node_platform_problems`): an AMD system's node its GPUs through ROCm's amd-smi, which a ROCm image carries
itself (NVIDIA's container runtime brings nvidia-smi into a container from the host's driver), and no node GPUs of the
other vendor."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from submission.base.errors import PlanError, PodiumError, one_error
from submission.plan.model import Plan
from submission.plan.platforms import AMD, MODEL_FIELD, matches, platform_of
from submission.rules import load_rules
from submission.tree.systems import describe_sourced, forecast, gaps, require_complete
from tasks.accuracy import evaluator
from tasks.accuracy.livecodebench import CodeGrading
from tasks.engines import backend, engine_identity, service_fix
from tasks.ops.inputs import check_capacity, input_problems

FIX = "fix each as it says, then check again with `podium preflight PLAN`"
LCB_FIX = ("set it to the LiveCodeBench release_v6 tests as JSON lines (docs/benchmarks.md, \"gpt-oss-120b\": "
           "`question_id`, `public_test_cases`, `private_test_cases`, `metadata`, one problem a line); `podium fetch "
           "PLAN` writes that file from the release with a fetch entry {<that file>: {livecodebench: release_v6}}")


@dataclass
class Findings:
    """What was checked, every problem found, and what was not checked here (and where it is)."""

    where: str | None = None   # the plan file
    checked: list[str] = field(default_factory=list)
    problems: list[PodiumError] = field(default_factory=list)
    elsewhere: list[str] = field(default_factory=list)
    refused: set[str] = field(default_factory=set)   # launchers whose cluster refused: their nodes wait

    def check(self, what: str, problems: list[PodiumError]) -> None:
        """One check's outcome: `what` is checked when it found no problem."""
        if problems:
            self.problems += problems
        else:
            self.checked.append(what)

    def require(self) -> None:
        """One PlanError naming every problem, if there is any."""
        if self.problems:
            raise one_error(self.problems, fix=FIX, where=self.where)


def raised(call: Callable[..., Any], *args: Any, where: str | None = None) -> list[PodiumError]:
    """The problem `call(*args)` raises (as a PlanError placed at `where` when given), or none."""
    try:
        call(*args)
    except PodiumError as e:
        return [PlanError(e.message, fix=e.fix, where=where or e.where)]
    return []


def host_checks(plan: Plan, source: str | None = None, *, capacity: bool = True) -> Findings:
    """Every check of this module's doc on `plan` (its local systems: `Plan.local()`); `capacity`: also the memory
    fit and sequence budgets from the plan's descriptions (the flow checks them with the engine nodes' own)."""
    found = Findings(where=source)
    found.check("every source the plan names exists; object storage has credentials", input_problems(plan, source))
    found.check("the systems' descriptions: every field a closed submission needs has a source",
                raised(require_description_sources, plan))
    for i, b in enumerate(plan.benchmarks):
        found.check(f"{b.key}: engine {b.engine.name} known, its version pinned or installed",
                    raised(engine_identity, b.engine.name, b.engine.config(), where=f"benchmarks.{i}.engine"))
        if b.accuracy:
            found.check(f"{b.key}: evaluator {b.evaluator or b.benchmark} known",
                        raised(evaluator, b.evaluator or b.benchmark, where=f"benchmarks.{i}.evaluator"))
    if any(_runs_lcb(b) for b in plan.benchmarks):
        found.check("the LiveCodeBench tests of each gpt-oss-120b accuracy score named", lcb_problems(plan))
    if any(_grades_math(b) for b in plan.benchmarks):
        found.check(f"the MATH-500 grader of each deepseek-r1 accuracy score: openai/prm800k at the {plan.round} "
                    "commit", math_grader_problems(plan))
    if any(plan.harness(b) == "endpoints" for b in plan.benchmarks):
        found.check(f"the endpoints client at the {plan.round} commit, on Python >= 3.12", endpoints_problems(plan))
    if plan.inference_src:
        found.check(f"inference_src: mlcommons/inference at the {plan.round} commit", inference_src_problems(plan))
    services = {b.key: (b.engine.launcher, backend(b.engine.name).services(b.engine.config()),
                        getattr(b.engine.config(), "services_node", 0)) for b in plan.benchmarks}
    if any(launcher == "local" and named for launcher, named, _ in services.values()):
        found.check("the commands the local engines start (etcd, nats-server) found here", service_problems(plan))
    found.elsewhere += [f"{key}: {', '.join(named.values())} "
                        + (f"on node {node} of its Slurm allocation, by the node checks" if launcher == "slurm"
                           else "in the engine's image, not checked")
                        for key, (launcher, named, node) in services.items() if launcher != "local" and named]
    found.elsewhere += [f"{b.key}: the {b.engine.name} engine's commands "
                        + ("on the nodes of its Slurm allocation, by the node checks" if b.engine.launcher == "slurm"
                           else "in its image (engine.kubernetes.image), not checked")
                        for b in plan.benchmarks
                        if b.engine.launcher != "local" and not backend(b.engine.name).external]
    if capacity:
        found.check("every engine fits its GPUs, every run its sequence budget and Slurm time",
                    raised(check_capacity, plan))
    return found


def cluster_checks(plan: Plan, state_dir: Path | None = None, environ: Mapping[str, str] | None = None,
                   found: Findings | None = None) -> Findings:
    """What the clusters' control planes answer before anything is allocated or created (no allocation, no pod, no
    step): each Slurm engine's allocation as the scheduler judges it (tasks/ops/slurm_request.py, `sbatch
    --test-only`); each Kubernetes engine's rights, model claim and image platforms (tasks/ops/kube_checks.py).
    Added to `found` when given. `environ`: where the Slurm client runs (SLURM_JOB_ID: inside a job)."""
    from tasks.ops.kube_checks import plan_access_problems
    from tasks.ops.slurm_request import request, request_problems

    found = found if found is not None else Findings()
    environ = os.environ if environ is None else environ
    slurm = [b for b in plan.benchmarks if b.engine.launcher == "slurm"]
    if any(request(plan, b, environ) is not None for b in slurm):
        refused = request_problems(plan, environ)
        found.check("Slurm would grant each Slurm engine's allocation (sbatch --test-only, nothing submitted)", refused)
        found.refused |= {"slurm"} if refused else set()
    found.elsewhere += [f"{b.key}: its allocation is the Slurm job this runs in ({environ.get('SLURM_JOB_ID')}), "
                        "already granted" for b in slurm if request(plan, b, environ) is None]
    if any(b.engine.launcher == "kubernetes" for b in plan.benchmarks):
        refused = plan_access_problems(plan, state_dir, environ)
        found.check("the Kubernetes engines' account may make every call they need; their model claims exist; "
                    "their images hold a platform for their nodes' architecture", refused)
        found.refused |= {"kubernetes"} if refused else set()
    return found


def on_nodes(plan: Plan, root: Path | None, log: Callable[[str], object],
             found: Findings | None = None) -> dict[str, dict[str, str]]:
    """After `host_checks` and `cluster_checks`: the nodes of each Slurm engine (tasks/ops/slurm_checks.py: its
    interpreter's architecture, the commands it runs and starts, the job's time) and a pod like each Kubernetes
    engine's (tasks/ops/kube_checks.py) describe its system; every description complete; every engine fitting the
    GPUs the descriptions give. Takes a Slurm allocation for seconds where none is held, or starts one short-lived
    pod; not for a launcher whose cluster refused (`found.refused`). Every problem in one PlanError, or added to
    `found` when given. Returns the descriptions (`root`: the workspace, for the launchers' state; none when a
    problem was found)."""
    from tasks.ops.kube_checks import describe_engine_nodes
    from tasks.ops.slurm_checks import node_checks

    own = found is None
    found = Findings() if found is None else found
    pids = root / "pids" if root else None
    before = len(found.problems)
    nodes: dict[str, dict[str, str]] = {}
    if "slurm" not in found.refused:
        nodes, problems = node_checks(plan, pids, str(root or "/"), log)   # on each Slurm engine's nodes
        found.problems += problems
    systems: dict[str, dict[str, str]] = {}
    try:
        if "kubernetes" not in found.refused:
            nodes |= describe_engine_nodes(plan, pids, log)          # a pod like each k8s engine's
        found.problems += node_platform_problems(plan, nodes)        # the system's GPUs, by its platform's tool
        if len(found.problems) == before and not found.refused:      # each system from its engine's node
            systems = describe_systems(plan, nodes)
            gpu_memory = {name: d.get("accelerator_memory_capacity", "") for name, d in systems.items()}
            check_capacity(plan, gpu_memory, log)                    # fits its GPUs; every run within its budget
    except PodiumError as e:
        found.problems.append(e)
    if own:
        found.require()
    return systems


# The platforms whose tool the engine's image must carry: ROCm's amd-smi (the ROCm images have it in /opt/rocm/bin);
# NVIDIA's container toolkit mounts the host driver's nvidia-smi into every GPU container (its `utility` capability).
TOOL_IN_IMAGE = (AMD,)


def node_platform_problems(plan: Plan, detected: dict[str, dict[str, str]]) -> list[PodiumError]:
    """Each system whose GPU engine's node was described (`detected`: the host facts its node printed) and shows
    another platform's GPUs than its description names, or, on a platform whose tool the image carries, none at all
    (the tool missing, or finding nothing)."""
    problems: list[PodiumError] = []
    for i, system in enumerate(plan.systems):
        facts = detected.get(system.name)
        gpus = any(getattr(b.engine.config(), "gpus_per_node", 0) for b in plan.benchmarks if b.system == system.name)
        if facts is None or not gpus:
            continue
        platform, seen = platform_of(system.description), facts.get(MODEL_FIELD, "")
        others = [p for p in matches(seen) if p is not platform]
        where = f"systems.{i}.description.{MODEL_FIELD}"
        if others:
            problems.append(PlanError(f"system {system.name!r}: its engine's node has {others[0].vendor} GPUs "
                                      f"({seen}), but its description names {platform.vendor}'s",
                                      fix="describe the system's own GPUs, or run the engine on the nodes that "
                                          "have them (engine.kubernetes.node_selector, engine.slurm.partition)",
                                      where=where))
        elif platform in TOOL_IN_IMAGE and platform not in matches(seen):
            why = "found no GPU there" if facts.get("accelerators_per_node") == "unknown" else \
                "is not on its PATH (neither is nvidia-smi)"
            problems.append(PlanError(f"system {system.name!r}: {platform.facts_tool} on its engine's node {why}, so "
                                      f"the node shows none of the system's {platform.vendor} GPUs",
                                      fix=f"run the engine in a {platform.runtime} image that has "
                                          f"{platform.facts_tool} (the ROCm images of vLLM and SGLang, docs/amd.md), "
                                          "on nodes with the system's GPUs", where=where))
    return problems


def describe_systems(plan: Plan, detected: dict[str, dict[str, str]] | None = None) -> dict[str, dict[str, str]]:
    """Each system's description from the plan's overrides and what its engine's node told (`detected`; this host
    for a system missing there), checked complete; a closed submission's also free of guesses."""
    systems = {}
    for system in plan.systems:
        frameworks = sorted({f"{b.engine.name} {backend(b.engine.name).version(b.engine.config())}"
                             for b in plan.benchmarks if b.system == system.name})
        desc, sources = describe_sourced(
            division=plan.division, submitter=plan.submitter, system_name=system.name, status=system.status,
            system_type=system.system_type, number_of_nodes=system.nodes, framework=", ".join(frameworks) or "none",
            overrides=system.description, host=(detected or {}).get(system.name), round=plan.round)
        require_complete(desc, division=plan.division, submitter=plan.submitter, round=plan.round)
        missing = gaps(desc, sources, plan.round) if plan.strict_description else []
        if missing:
            i = plan.systems.index(system)
            raise PlanError(f"system {system.name!r}: a closed submission needs a real value for "
                            f"{len(missing)} field(s) that nothing detected: "
                            + ", ".join(f"{f} (now {desc[f]!r}, {sources[f]})" for f in missing),
                            fix=f"give each in systems.{i}.description, e.g. {missing[0]}: ...")
        systems[system.name] = desc
    return systems


def require_description_sources(plan: Plan) -> None:
    """Before the flow starts (and again in preflight): a closed submission's fields that neither the plan gives
    nor a node can tell, one PlanError listing them all with the fix."""
    if not plan.strict_description:
        return
    problems = [f"systems.{i}.description.{field}" for i, system in enumerate(plan.systems)
                for field, source in forecast(system.description, system.nodes, plan.round) if source == "nowhere"]
    if problems:
        raise PlanError("a closed submission's system description needs fields that no node can tell and the plan "
                        "does not give:\n  - " + "\n  - ".join(problems),
                        fix="give each one in the plan (what the official checker requires non-empty; "
                            "`podium launch PLAN --dry-run` lists where every field comes from)")


def _runs_lcb(bench: Any) -> bool:
    """Whether the benchmark's accuracy score runs LiveCodeBench tests (an unknown evaluator: its own check says)."""
    try:
        return bench.accuracy and isinstance(evaluator(bench.evaluator or bench.benchmark), CodeGrading)
    except PodiumError:
        return False


def lcb_problems(plan: Plan) -> list[PodiumError]:
    """An accuracy score that runs LiveCodeBench tests needs `dataset.lcb_tests` (a staged data set sits alone in its
    stage folder, so no file beside it is found); that it exists is `input_problems`'."""
    return [PlanError(f"{b.benchmark}'s accuracy score needs the LiveCodeBench tests, and the plan names none",
                      where=f"benchmarks.{i}.dataset.lcb_tests", fix=LCB_FIX)
            for i, b in enumerate(plan.benchmarks) if _runs_lcb(b) and not b.dataset.lcb_tests]


def _grades_math(bench: Any) -> bool:
    """Whether the benchmark's accuracy score grades MATH-500 answers (deepseek-r1's: the PRM800K grader)."""
    try:
        return bench.accuracy and hasattr(evaluator(bench.evaluator or bench.benchmark), "math_grader")
    except PodiumError:
        return False


def math_grader_problems(plan: Plan) -> list[PodiumError]:
    """A deepseek-r1 accuracy score needs `dataset.math_grader`: openai/prm800k at the round's commit as `podium
    fetch-grader` or `podium fetch` unpacked it (tasks/ops/grader_source.py), checked here, since the score runs only
    after the whole accuracy run."""
    from tasks.ops import grader_source

    rules, found = load_rules(plan.round), []
    for i, b in enumerate(plan.benchmarks):
        where = f"benchmarks.{i}.dataset.math_grader"
        if not _grades_math(b):
            continue
        if not b.dataset.math_grader:
            found.append(PlanError(f"{b.benchmark}'s accuracy score grades MATH-500 with the PRM800K grader, and the "
                                   "plan names none", where=where, fix="`podium fetch-grader` prints the folder of "
                                   "openai/prm800k at the round's commit: set dataset.math_grader to it (or a fetch "
                                   "entry {github: openai/prm800k} for `podium fetch PLAN`)"))
        elif not b.dataset.math_grader.startswith("s3://"):
            found += grader_source.problems(b.dataset.math_grader, rules, where)
    return found


def endpoints_problems(plan: Plan) -> list[PodiumError]:
    """The endpoints client installed as the round pins it, when a benchmark is measured by it."""
    from tasks.endpoints.install import require_client

    users = [f"benchmarks.{i}" for i, b in enumerate(plan.benchmarks) if plan.harness(b) == "endpoints"]
    if not users:
        return []
    return raised(require_client, plan.round, where=f"{', '.join(users)} (measured by the endpoints client)")


def inference_src_problems(plan: Plan) -> list[PodiumError]:
    """`inference_src`, when given: mlcommons/inference at the round's pinned commit as Podium fetches it
    (tasks/ops/inference_sources.py `check`): a checkout of the commit, unchanged, or an archive of the commit as
    `podium fetch-inference --archive` or `podium fetch` unpacked it, every file of its manifest there, unchanged; the
    checker and the audits in it."""
    from tasks.ops.inference_sources import check

    if not plan.inference_src:
        return []
    pin = load_rules(plan.round).inference_sources
    folder = Path(plan.inference_src).expanduser()
    fix = (f"`podium fetch-inference --round {plan.round}` fetches mlcommons/inference at {pin.commit[:12]} (or "
           "unpacks it from a `git archive` of that commit with --archive) and prints its folder: set inference_src "
           f"to that folder (or fetch it with `podium fetch PLAN`: fetch: {{{folder}: {{github: mlcommons/inference}}}}"
           " in the plan)")
    if not folder.is_dir():
        return [PlanError(f"{folder} does not exist", where="inference_src", fix=fix)]
    try:
        check(folder.resolve(), pin.commit)
    except PodiumError as e:
        return [PlanError(f"{e.message} (the {plan.round} checker's sources are mlcommons/inference at "
                          f"{pin.commit[:12]})", where="inference_src", fix=fix)]
    return []


def service_problems(plan: Plan) -> list[PodiumError]:
    """Each command a local engine starts beside itself, found on this host (a path, or a name on PATH)."""
    return [PlanError(f"{command} is not on this host (not a path, not on PATH), and the engine starts it",
                      where=f"benchmarks.{i}.engine.{option}", fix=service_fix(option, command, "this host"))
            for i, b in enumerate(plan.benchmarks) if b.engine.launcher == "local"
            for option, command in backend(b.engine.name).services(b.engine.config()).items()
            if shutil.which(command) is None]
