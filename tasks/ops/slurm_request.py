"""Whether Slurm would grant a Slurm engine's allocation, asked of the controller before anything is submitted:
`sbatch --test-only` with the options a launch gives (`salloc`'s, or for `allocation: inherit` the `sbatch` of
deployments/slurm/podium.sbatch that the dry run prints, with the time the whole plan needs). Slurm answers when and
where the job would start and creates no job.

When it refuses, each option is asked again on its own (the partition, account, QOS and reservation first, then the
nodes, then the rest on top of those that passed), so the report names the plan field Slurm refuses (an impossible
`engine.slurm.mem`, a partition that does not exist) with Slurm's own words; a refusal no single option explains
names the whole request. Inside a job (`allocation: auto` or `inherit` with SLURM_JOB_ID set) the allocation is
that job's, already granted: nothing is asked (its time left is checked on the nodes, tasks/ops/slurm_checks.py).
Needs no allocation: `podium preflight PLAN` asks it without `--nodes`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from submission.base.errors import CommandError, PlanError, PodiumError
from submission.budget.slurm_time import job_need, slurm_time
from submission.plan.model import BenchmarkSpec, Plan
from submission.plan.slurm_options import SlurmSettings
from tasks.launchers import slurm_cli as cli
from tasks.serving.launch import job_nodes

WHERE = ("partition", "account", "qos", "reservation")   # asked first: what the other options are judged against
# What to change, by the field Slurm refuses (the generic fix of a known message would name other fields).
FIELD_FIX = {
    "partition": "set engine.slurm.partition to one of `sinfo -s`",
    "account": "set engine.slurm.account to one of yours (`sacctmgr show assoc user=$USER format=account,partition`)",
    "qos": "set engine.slurm.qos to one your account may use (`sacctmgr show assoc user=$USER format=qos`)",
    "reservation": "set engine.slurm.reservation to an active one (`scontrol show reservation`)",
    "constraint": "set engine.slurm.constraint to features the nodes have (`sinfo -o '%N %f'`)",
    "nodelist": "set engine.slurm.nodelist to nodes of the partition (`sinfo -N`), as many as the engine needs",
    "nodes": "lower the nodes the engine needs (engine.options.nodes, or engine.slurm.nodes), or pick a partition "
             "with more (`sinfo -s`)",
    "gpus_per_node": "set engine.slurm.gpus_per_node to what the nodes have (`sinfo -o '%N %G'`)",
    "mem": "set engine.slurm.mem to what a node has (`sinfo -o '%P %m'`, in megabytes), or \"0\" for all of it",
    "exclusive": "set engine.slurm.exclusive: false, or use a partition that grants whole nodes",
    "time": "lower engine.slurm.time_limit to the partition's limit (`sinfo -o '%P %l'`)",
}
JOB_TIME_FIX = ("run fewer benchmarks or scenarios per job (`podium launch PLAN --dry-run` shows each one's share), "
                "or use a partition whose limit covers it (`sinfo -o '%P %l'`)")


def refusal(env: Mapping[str, str], args: Sequence[str], name: str) -> str | None:
    """Slurm's reason for refusing a job of `args` (its last line), or None when it would be granted."""
    try:
        cli.run(["sbatch", "--test-only", f"--job-name={name}", *args, "--wrap=true"], env)
    except CommandError as e:
        lines = [line for line in e.output_tail.splitlines() if line.strip()]
        return lines[-1].strip() if lines else f"sbatch exited with code {e.returncode}"
    return None


def request(plan: Plan, bench: BenchmarkSpec, environ: Mapping[str, str]) -> list[tuple[str, str]] | None:
    """(field, option) of what a launch of `bench`'s engine asks Slurm for; None inside the job that holds it."""
    settings = bench.engine.slurm_settings() or SlurmSettings()
    if settings.allocation != "new" and environ.get("SLURM_JOB_ID"):
        return None
    needed = job_nodes(bench.engine, inside=settings.allocation == "inherit")   # inherit: podium.sbatch's job
    fields = cli.allocation_fields(settings, settings.nodes or needed)
    if settings.allocation == "inherit":   # submitted by the operator: podium.sbatch with what the plan needs
        return [*fields, ("job time", f"--time={slurm_time(job_need(plan))}")]
    return [*fields, ("time", f"--time={settings.time_limit}")]


def request_problems(plan: Plan, environ: Mapping[str, str]) -> list[PodiumError]:
    """Each Slurm engine's request that Slurm refuses, by the field it refuses (once for equal requests)."""
    problems: list[PodiumError] = []
    seen: set[tuple[str, ...]] = set()
    for i, bench in enumerate(plan.benchmarks):
        if bench.engine.launcher != "slurm":
            continue
        fields = request(plan, bench, environ)
        if fields is None:
            continue
        settings = bench.engine.slurm_settings() or SlurmSettings()
        key = (settings.slurm_conf or "", *(a for _, a in fields))
        if key in seen:
            continue
        seen.add(key)
        env = cli.client_env(settings, environ)
        try:
            problems += _refused(env, fields, f"benchmarks.{i}.engine", f"{settings.job_name}-preflight",
                                 settings.nodes is not None)
        except PodiumError as e:   # no sbatch here, no controller answering
            problems.append(PlanError(f"asking Slurm whether it grants the engine's allocation: {e.message}",
                                      fix=e.fix, where=f"benchmarks.{i}.engine.slurm"))
    return problems


def _refused(env: Mapping[str, str], fields: list[tuple[str, str]], where: str, name: str,
             slurm_nodes: bool) -> list[PodiumError]:
    """The problems of one request: none when Slurm would grant it, else each option it refuses on its own."""
    whole = [a for _, a in fields]
    reason = refusal(env, whole, name)
    if reason is None:
        return []
    options = dict(fields)
    base = ["--nodes=1"]
    bad: dict[str, str] = {}
    for field in [f for f in WHERE if f in options]:
        said = refusal(env, [*base, options[field]], name)
        if said is None:
            base.append(options[field])
        else:
            bad[field] = said
    said = refusal(env, base, name)
    if said is not None:   # not even one node of what passed: the cluster, not an option
        fix = cli.explain(said)
        return [PlanError(f"Slurm refuses even a one-node job ({' '.join(base)}): {said} (sbatch --test-only; "
                          "nothing was submitted)", fix=f"{fix[0]}: {fix[1]}" if fix else "read Slurm's message",
                          where=f"{where}.slurm")]
    said = refusal(env, [*base[1:], options["nodes"]], name)
    if said is None:
        base = [options["nodes"], *base[1:]]
    else:
        bad["nodes"] = said
    for field, arg in fields:
        if field not in (*WHERE, "nodes"):
            said = refusal(env, [*base, arg], name)
            if said is not None:
                bad[field] = said
    if not bad:
        return [PlanError(f"Slurm refuses the engine's allocation ({' '.join(whole)}): {reason}; each option "
                          "alone would be granted (sbatch --test-only; nothing was submitted)",
                          fix="ask for less at once: fewer nodes, GPUs or memory, or a shorter time",
                          where=f"{where}.slurm")]
    return [_problem(field, options[field], said, where, slurm_nodes) for field, said in bad.items()]


def _problem(field: str, arg: str, said: str, where: str, slurm_nodes: bool) -> PlanError:
    if field == "job time":
        return PlanError(f"Slurm refuses {arg}, what the whole plan needs of the job podium.sbatch runs it in: "
                         f"{said} (sbatch --test-only; nothing was submitted)", fix=JOB_TIME_FIX, where=where)
    place = {"time": "slurm.time_limit", "nodes": "slurm.nodes" if slurm_nodes else "options.nodes"}.get(
        field, f"slurm.{field}")
    return PlanError(f"Slurm refuses {arg}: {said} (sbatch --test-only; nothing was submitted)",
                     fix=FIELD_FIX[field], where=f"{where}.{place}")
