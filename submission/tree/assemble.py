"""Assemble the submission tree from finished runs. Paths come from `submission.tree.paths`; nothing here runs anything.

Accuracy logs are truncated with the `hash=` line (`submission.tree.truncate`); the full logs are kept in the backup
folder, which the pipeline uploads with the rest of the run.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from submission.base.errors import RuleViolation
from submission.base.files import write_atomic
from submission.plan.model import SCENARIOS, BenchmarkSpec, Plan
from submission.plan.secret_env import shown_options, shown_plan
from submission.results.runs import CLIENT_REPORT, AuditRecord, RunRecord
from submission.tree import served, source
from submission.tree.paths import ACCURACY_RESULTS, ENDPOINTS_CONFIG, RESULT_SUMMARY, Tree
from submission.tree.source import Code
from submission.tree.truncate import truncate_tree

PERF_FILES = ("mlperf_log_summary.txt", "mlperf_log_detail.txt")
ACC_FILES = (*PERF_FILES, "mlperf_log_accuracy.json", "accuracy.txt")


def benchmark_folder(plan: Plan, bench: BenchmarkSpec) -> str:
    """The closed division uses the benchmark's name; the open division the model's, mapped in model_mapping.json."""
    return bench.benchmark if plan.division == "closed" else bench.model.name


def _copy(files: tuple[str, ...], src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for name in files:
        shutil.copy2(src / name, dst / name)


def plan_file(plan: Plan) -> str:
    """Where the tree keeps the plan, relative to `<division>/<submitter>/`: one file per plan, named by the plan and
    its fingerprint, so that the plans of several runs (a curated tree, `submission.tree.curation`) never collide."""
    return f"src/podium/plans/{plan.name}-{plan.fingerprint()[:8]}.yaml"


def write_plan(tree: Tree, plan: Plan) -> Path:
    """The plan as the tree keeps it (`plan_file`), as validated YAML, each engine env value as `<set>`."""
    return write_atomic(tree.org / plan_file(plan), yaml.safe_dump(shown_plan(plan.model_dump(mode="json")),
                                                                   sort_keys=False))


def write_code_readmes(tree: Tree, plans_by_folder: dict[str, list[Plan]]) -> None:
    """src/<benchmark folder>/README.md for each benchmark folder of results/ (`Tree.code`), naming the plans whose
    runs fill it and what measured them."""
    for folder, plans in plans_by_folder.items():
        lines = [f"# {folder}", "", "Podium's harness and engine configuration for this benchmark are the plan(s) "
                 "below (under src/podium/plans/); `podium run <plan>` reproduces the runs.", ""]
        for plan in plans:
            harnesses = sorted({HARNESS_SRC[plan.harness(b)] for b in plan.benchmarks
                                if benchmark_folder(plan, b) == folder})
            lines.append(f"- `{plan_file(plan)}`: measured by {'; '.join(harnesses)}")
        write_atomic(tree.code(folder) / "README.md", "\n".join(lines) + "\n")


def _scenario_readme(plan: Plan, bench: BenchmarkSpec, scenario: str, commit: str, harness: str) -> str:
    smoke = plan.profile == "smoke"
    lines = [f"# {bench.benchmark} {scenario} on {bench.system}", ""]
    if smoke:
        lines += ["**SMOKE RUN: not a valid MLPerf submission.** Durations and sample counts are shortened and the",
                  f"model is `{bench.model.name}`, not the benchmark's; the checker lists each deviation.", ""]
    lines += [
        f"Produced by Podium (commit {commit}) from plan `{plan.name}` ({plan.profile} profile, round {plan.round}).",
        "", "## Reproduce", "",
        "```", f"podium run {Path(plan_file(plan)).name}   # the plan is in {plan_file(plan)}", "```", "",
        f"- engine: `{bench.engine.name}` "
        f"{json.dumps(shown_options(bench.engine.options)) if bench.engine.options else ''}",
        f"- model: `{bench.model.name}` from `{bench.model.source}`",
        HARNESS_LINES[harness](plan),
        *_guided_decoding_line(bench),
        _warmup_line(bench),
    ]
    return "\n".join(lines) + "\n"


def _client_line(plan: Plan) -> str:
    from submission.rules import load_rules

    pin = load_rules(plan.round).endpoints_client
    at = f" at commit {pin.commit}" if pin else ""
    return (f"- measured by the MLCommons endpoints client (`inference-endpoint`{at}); its config: `config.yaml` "
            "beside this file")


# What measured the scenario, by the runs' `harness`: the README line, and the src/ line.
HARNESS_LINES = {"loadgen": lambda plan: "- loadgen settings: `user.conf` beside this file",
                 "endpoints": _client_line}
HARNESS_SRC = {"loadgen": "Podium's loadgen SUT over the engine's OpenAI-compatible streaming endpoint",
               "endpoints": "the MLCommons endpoints client (`inference-endpoint`) against the engine's "
                            "OpenAI-compatible endpoint, with the config Podium wrote from the plan"}


def _warmup_line(bench: BenchmarkSpec) -> str:
    """What the engine answered after each launch before any timed run (tasks/serving/warmup.py), and the rule that
    puts it outside the timed run."""
    from submission.rules.generation import reference_generation

    n = bench.engine.warmup_requests
    if n == 0:
        return "- warm-up: none (`engine.warmup_requests: 0`): the first timed run after each launch met a cold engine"
    sampling = reference_generation(bench.benchmark, "performance").merged(
        max_tokens=bench.generation.max_tokens, temperature=bench.generation.temperature).request_fields()
    return (f"- warm-up: after each launch, before any timed run, the engine answered {n} untimed requests built like "
            f"the performance run's (its first samples) with the run's sampling settings `{json.dumps(sampling)}`, "
            "as part of the SUT's start-up, which the MLPerf Inference rules place before LoadGen starts its clock "
            "(inference_rules.adoc, LoadGen Operation, run procedure steps 2-3)")


def _guided_decoding_line(bench: BenchmarkSpec) -> list[str]:
    """Qwen3-VL: whether requests constrained answers to the answer schema (the reference's use_guided_decoding)."""
    from submission.rules.generation import load_generation

    known = load_generation().benchmarks.get(bench.benchmark)
    if known is None or known.guided_decoding is None:
        return []
    if bench.generation.guided_decoding:
        return ["- guided decoding: on (every request's `response_format` is the answer JSON schema, as the "
                "reference's `use_guided_decoding`)"]
    return ["- guided decoding: off (answers are not constrained to the answer JSON schema)"]


def _measurements(bench: BenchmarkSpec) -> str:
    m = bench.model
    return json.dumps({
        "input_data_types": m.input_data_types,
        "retraining": "No",
        "starting_weights_filename": m.starting_weights_filename or m.source,
        "weight_data_types": m.weight_data_types,
        "weight_transformations": m.weight_transformations,
    }, indent=2) + "\n"


def _loadgen_scenario(tree: Tree, where: tuple[str, str, str], perf: RunRecord, acc: RunRecord | None) -> None:
    """The loadgen layout: performance/run_1 and accuracy/ loadgen logs, the run's user.conf."""
    _copy(PERF_FILES, Path(perf.run_dir), tree.performance(*where))
    shutil.copy2(Path(perf.run_dir) / "user.conf", tree.user_conf(*where))
    if acc is not None:
        _copy(ACC_FILES, Path(acc.run_dir), tree.accuracy(*where))


def _endpoints_scenario(tree: Tree, where: tuple[str, str, str], perf: RunRecord, acc: RunRecord | None) -> None:
    """The endpoints layout: one client report's own files unchanged, its config.yaml,
    performance/result_summary.json and, when the run measured accuracy too (`--mode both`),
    accuracy/accuracy_results.json; an accuracy result from any other client run would not match that config."""
    report = Path(perf.run_dir) / CLIENT_REPORT
    files = [(report / ENDPOINTS_CONFIG, tree.endpoints_config(*where)),
             (report / "performance" / RESULT_SUMMARY, tree.endpoints_result_summary(*where))]
    if acc is not None:
        if Path(acc.run_dir) != Path(perf.run_dir):
            raise RuleViolation(f"{acc.label}: its accuracy result is from client run {acc.run_dir}, the performance "
                                f"result from {perf.run_dir}; the scenario folder holds one client report",
                                where=acc.run_dir, fix="measure the scenario again: one client run (--mode both) "
                                                       "gives both results")
        files.append((report / "accuracy" / ACCURACY_RESULTS, tree.endpoints_accuracy_results(*where)))
    for src, dst in files:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)


# Each measuring client's scenario folder layout (submission.tree.paths), by the runs' `harness`.
LAYOUTS = {"loadgen": _loadgen_scenario, "endpoints": _endpoints_scenario}


def assemble(plan: Plan, records: list[RunRecord], systems: dict[str, dict[str, str]], root: Path,
             backup: Path, *, commit: str, audits: list[AuditRecord] | None = None, code: Code | None = None) -> Tree:
    """Write the tree under `root` (replaced if present); return its Tree. Each audit's TESTxx folder (laid out
    as its run_verification.py leaves it) goes into the scenario folder of a performance run in the tree; `code`,
    Podium's source as `submission.tree.source.snapshot` wrote it, into src/podium/."""
    served.check(plan, records)   # a result fewer replicas served is not packaged as the whole system
    if root.exists():
        shutil.rmtree(root)
    tree = Tree(root, plan.division, plan.submitter)
    by_label = {r.label: r for r in records}
    for name, desc in systems.items():
        write_atomic(tree.system_json(name), json.dumps(desc, indent=2) + "\n")
    mapping = {}
    for bench in plan.benchmarks:
        folder = benchmark_folder(plan, bench)
        if folder != bench.benchmark:
            mapping[folder] = bench.benchmark
        for scenario in (s for s in SCENARIOS if s in bench.scenarios):
            perf = by_label.get(f"{bench.system}/{bench.benchmark}/{scenario}/performance")
            if perf is None:
                continue
            acc = by_label.get(f"{bench.system}/{bench.benchmark}/{scenario}/accuracy")
            where = (bench.system, folder, scenario)
            LAYOUTS[perf.harness](tree, where, perf, acc)
            base = tree.scenario(*where)
            write_atomic(base / "measurements.json", _measurements(bench))
            write_atomic(base / "README.md", _scenario_readme(plan, bench, scenario, commit, perf.harness))
            for audit in (a for a in audits or () if a.label.startswith(f"{bench.system}/{bench.benchmark}/"
                                                                        f"{scenario}/")):
                shutil.copytree(audit.folder, tree.compliance(*where, audit.test))
    if mapping:
        write_atomic(tree.model_mapping, json.dumps(mapping, indent=2) + "\n")
    write_plan(tree, plan)
    write_code_readmes(tree, {benchmark_folder(plan, b): [plan] for b in plan.benchmarks})
    placed = source.place([code], tree.src / "podium") if code else []
    write_atomic(tree.src / "podium" / "README.md", "\n".join([
        f"Podium (commit {commit}) ran this submission from `{plan_file(plan)}`: `podium run "
        f"{Path(plan_file(plan)).name}`.", *(f"{b.key} is measured by {HARNESS_SRC[plan.harness(b)]}."
                                             for b in plan.benchmarks), "", *source.readme(placed)]))
    if plan.division == "closed":
        write_atomic(tree.calibration, "# Calibration\n\n" + "\n".join(
            f"- {b.benchmark}: weights {b.model.weight_data_types}, transformations: {b.model.weight_transformations}"
            for b in plan.benchmarks) + "\n")
    if plan.profile == "smoke":
        write_atomic(tree.smoke_marker, "# SMOKE RUN: not a valid MLPerf submission\n\n"
                     f"Plan `{plan.name}` ran with the smoke profile: shortened durations and sample counts, a tiny "
                     "model\nmapped onto the benchmark, open division. `podium check` lists every deviation by name.\n"
                     f"profile: smoke\n")
    truncate_tree(root, backup)
    return tree
