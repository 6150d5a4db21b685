"""The walk over the tree: divisions, submitters, systems, benchmarks, scenario folders, and what each may hold.

Official checks implemented here (reference §2.4, §2.5, §1.1-1.6): the scenario set (`scenarios_check`), the
systems JSON (`SystemCheck`), src/ (`MeasurementsCheck`), calibration.md (old checker), the model mapping, the
network division fields (`network_check`); and Podium's own: an empty tree fails, unsafe names and symlinks, exact
file lists at every level, systems without results.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from submission.checks import endpoints, loadgen
from submission.checks.findings import Context, ScenarioResult
from submission.plan.model import check_name
from submission.rules import BenchmarkRules
from submission.tree.paths import DIVISIONS, ORG_DIRS, ORG_FILES, SCENARIO_FOLDERS, SMOKE_MARKER, layout_of
from submission.tree.rehearsal_marker import MARKER as REHEARSAL_MARKER
from submission.tree.systems import validate as validate_system

# constants.py SYSTEM_DESC_REQUIRED_FIELDS_NETWORK_MODE and NETWORK_MODE_REQUIRED_SUBSTRING_IN_SUT_NAME
NETWORK_FIELDS = ("is_network", "network_type", "network_media", "network_rate", "nic_loadgen", "number_nic_loadgen",
                  "net_software_stack_loadgen", "network_protocol", "number_connections", "nic_sut", "number_nic_sut",
                  "net_software_stack_sut", "network_topology")
NETWORK_SUT_NAME = "Network SUT"
POWER_YAML_SUFFIX = "_power.yaml"  # systems/<system>_power.yaml, optional in v6.1 (reference §1.1)


def _safe(ctx: Context, path: Path) -> bool:
    try:
        check_name(path.name)
    except ValueError as error:
        ctx.add("unsafe-name", path, str(error), "rename it; every name in the tree becomes a folder name")
        return False
    return True


def walk(ctx: Context) -> None:
    for link in sorted(p for p in ctx.root.rglob("*") if p.is_symlink()):
        ctx.add("symlink", link, "a symbolic link in the tree", "copy the file in; a tarball or upload may not follow "
                "links, and a link can point outside the tree")
    ctx.unexpected(ctx.root, files={SMOKE_MARKER, REHEARSAL_MARKER}, dirs=set(DIVISIONS),
                   why=" at the top level (only closed/, open/ and network/ belong here)")
    if (ctx.root / REHEARSAL_MARKER).is_file():   # the official checker reads no file at the top and passes it
        ctx.add("rehearsal", ctx.root / REHEARSAL_MARKER, "a dress rehearsal's tree (podium rehearse), not a "
                "submission", "run the plan itself on its hardware for a submission", severity="warning")
    for division in DIVISIONS:
        folder = ctx.root / division
        if not folder.is_dir():
            continue
        for org in sorted(folder.iterdir()):
            if not org.is_dir():
                ctx.add("unexpected-file", org, f"unexpected file {org.name!r} in {division}/",
                        "only submitter folders belong here")
            elif _safe(ctx, org):
                organisation(ctx, division, org)
    if not ctx.results and not any(f.severity == "error" for f in ctx.findings):  # else it fails already
        ctx.add("empty-tree", ctx.root, "no results/<system>/<benchmark>/<scenario> folders found",
                "point at the folder that holds closed/, open/ or network/ (the official checker says OK here)")


def organisation(ctx: Context, division: str, org: Path) -> None:
    ctx.unexpected(org, files=set(ORG_FILES), dirs=set(ORG_DIRS))
    if not (org / "src").is_dir():
        ctx.add("src-dir", org / "src", "the src directory does not exist", "add the code used (Podium writes it)")
    if division == "closed" and not any((org / p).is_file() for p in
                                        ("calibration.md", "documentation/calibration.md")):
        ctx.add("calibration", org, "no calibration.md or documentation/calibration.md",
                "describe the calibration (or say none was used) in documentation/calibration.md")
    mapping = model_mapping(ctx, division, org)
    results = org / "results"
    if not results.is_dir():
        ctx.add("results-dir", results, "the results directory does not exist", "assemble the tree again")
        return
    ctx.unexpected(results, files=set(), dirs={p.name for p in results.iterdir() if p.is_dir()})
    systems = [p for p in sorted(results.iterdir()) if p.is_dir() and _safe(ctx, p)]
    systems_folder(ctx, org, {p.name for p in systems})
    for system in systems:
        desc = system_description(ctx, division, org, system.name)
        ctx.unexpected(system, files=set(), dirs={p.name for p in system.iterdir() if p.is_dir()})
        for bench in sorted(p for p in system.iterdir() if p.is_dir()):
            if _safe(ctx, bench):
                benchmark(ctx, division, org, bench, mapping, desc)


def model_mapping(ctx: Context, division: str, org: Path) -> dict[str, str]:
    path = org / "model_mapping.json"
    if not path.is_file():
        return {}
    if division != "open":
        ctx.add("model-mapping", path, f"a model mapping in the {division} division",
                "remove it: the closed and network divisions run each benchmark under its own name")
        return {}
    data = ctx.read_json_object("model-mapping", path, " of custom name -> benchmark")
    if data is None:
        return {}
    unknown = {k: v for k, v in data.items() if v not in ctx.rules.benchmarks}
    for name, target in unknown.items():
        ctx.add("model-mapping", path, f"{name!r} maps to {target!r}, which is not a {ctx.rules.round} benchmark",
                f"map it to one of {', '.join(ctx.rules.benchmarks)}")
    return {k: v for k, v in data.items() if k not in unknown}


def systems_folder(ctx: Context, org: Path, with_results: set[str]) -> None:
    folder = org / "systems"
    if not folder.is_dir():
        return  # each system with results reports its missing description
    described = {p.name[:-len(".json")] for p in folder.glob("*.json")}
    for name in sorted(described):
        try:
            check_name(name)
        except ValueError as error:
            ctx.add("unsafe-name", folder / f"{name}.json", str(error), "rename the system (folder and description)")
            described.discard(name)
    powers = {p.name for p in folder.glob(f"*{POWER_YAML_SUFFIX}")
              if p.name[:-len(POWER_YAML_SUFFIX)] in described}
    ctx.unexpected(folder, files={p.name for p in folder.glob("*.json")} | powers,
                   why=" in systems/ (only <system>.json and <system>_power.yaml)")
    for name in sorted(described - with_results):
        ctx.add("system-without-results", folder / f"{name}.json", "a system description with no results folder",
                "remove it, or add the results of that system", severity="warning")


def system_description(ctx: Context, division: str, org: Path, system: str) -> dict[str, Any]:
    path = org / "systems" / f"{system}.json"
    if not path.is_file():
        ctx.add("system-description", path, "missing (the official checker crashes here)",
                "write the system description (Podium's assemble step does)")
        return {}
    desc = ctx.read_json_object("system-description", path)
    if desc is None:
        return {}
    for problem in validate_system(desc, division=division, submitter=org.name, round=ctx.rules.round):
        ctx.add("system-description", path, problem, "correct the field in the plan's system entry")
    if division == "network":
        absent = [field for field in NETWORK_FIELDS if not desc.get(field)]
        if absent:
            ctx.add("network", path, f"network division fields missing or empty: {', '.join(absent)}")
        if NETWORK_SUT_NAME not in str(desc.get("system_name", "")):
            ctx.add("network", path, f"system_name {desc.get('system_name')!r} lacks {NETWORK_SUT_NAME!r}",
                    f"name the system '... {NETWORK_SUT_NAME}' in the network division")
    return desc


def benchmark(ctx: Context, division: str, org: Path, bench: Path, mapping: dict[str, str],
              desc: dict[str, Any]) -> None:
    name = bench.name if bench.name in ctx.rules.benchmarks else mapping.get(bench.name)
    if name is None:
        fix = ("use the checker's benchmark name" if division != "open" else
               "use the checker's benchmark name, or map the folder's name in model_mapping.json")
        ctx.add("unknown-benchmark", bench, f"{bench.name!r} is not a {ctx.rules.round} benchmark", fix)
        return
    b = ctx.rules.benchmark(name)
    ctx.unexpected(bench, files=set(), dirs={p.name for p in bench.iterdir() if p.is_dir()})
    present = {p.name for p in bench.iterdir() if p.is_dir()}
    if division != "open":
        required_scenarios(ctx, bench, b, present)
    for scenario in sorted(present):
        folder = bench / scenario
        if scenario not in SCENARIO_FOLDERS or scenario not in b.allowed_scenarios:
            ctx.add("unknown-scenario", folder, f"{scenario!r} is not a {b.name} scenario",
                    f"use one of {', '.join(b.allowed_scenarios)}")
            continue
        result = ScenarioResult(division=division, submitter=org.name, system=bench.parent.name,
                                benchmark_folder=bench.name, benchmark=b.name, scenario=scenario,
                                layout=layout_of(folder), path=ctx.rel(folder), system_desc=desc,
                                compliance_tests=b.compliance_tests if division != "open" else ())
        ctx.results.append(result)
        if result.layout == "endpoints":
            endpoints.check_scenario(ctx, division, folder, b, b.scenario(scenario), result)
        else:
            loadgen.check_scenario(ctx, division, folder, b, b.scenario(scenario), result)


def required_scenarios(ctx: Context, bench: Path, b: BenchmarkRules, present: set[str]) -> None:
    missing = [s for s in b.required_scenarios if s not in present]
    if b.one_of_scenarios and not present & set(b.one_of_scenarios):
        missing.append(f"(one of) {' or '.join(b.one_of_scenarios)}")
    if missing:
        ctx.add("required-scenarios", bench, f"missing scenarios: {', '.join(missing)}",
                f"run and add {', '.join(missing)}")
