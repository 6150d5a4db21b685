"""Write what `submission.tree.curation.curate` chose: `<out>/submission/` (the tree) and `<out>/curation.json` (why).

Each chosen scenario folder is copied whole from its source's tree; beside them go the systems JSON of each chosen
system (from a source of that division), the open division's model_mapping.json entries (merged), the closed
division's calibration.md lines (merged), each contributing plan at `assemble.plan_file` (named by plan and
fingerprint, so two plans never collide), each contributing run's Podium source (`submission.tree.source`: one
archive per commit) and, for smoke runs or dress rehearsals, their marker (a rehearsal's makes `podium package` refuse
the tree).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from submission.base.errors import CurationError
from submission.base.files import write_atomic
from submission.base.markdown import table as md_table
from submission.plan.model import Plan
from submission.plan.secret_env import shown_options
from submission.tree import rehearsal_marker, source
from submission.tree.assemble import plan_file, write_code_readmes, write_plan
from submission.tree.curation import LEGACY_PLAN, Candidate, Choice, Curation, Source
from submission.tree.paths import README, SMOKE_MARKER, Tree

CURATION_FILE = "curation.json"


def _tree(root: Path, candidate: Candidate) -> Tree:
    return Tree(root, candidate.division, candidate.source.plan.submitter)


def _copy_scenario(root: Path, candidate: Candidate) -> None:
    """The scenario folder, whole; a README of an older tree is pointed at where this tree keeps its plan."""
    c = candidate
    target = _tree(root, c).scenario(c.bench.system, c.folder, c.scenario)
    shutil.copytree(c.path, target)
    readme = target / README
    if readme.is_file() and LEGACY_PLAN in (text := readme.read_text()):
        write_atomic(readme, text.replace(LEGACY_PLAN, plan_file(c.source.plan)))


def _systems(root: Path, chosen: list[Choice]) -> None:
    """systems/<system>.json in each division a system is chosen in, from a source of that division."""
    for choice in chosen:
        c = choice.candidate
        target = _tree(root, c).system_json(c.bench.system)
        if not target.is_file():
            write_atomic(target, c.source.tree.system_json(c.bench.system).read_bytes())


def _model_mapping(root: Path, chosen: list[Choice]) -> None:
    """The open division's model_mapping.json: every source's entries for the folders chosen from it, merged; one
    folder name mapped onto two benchmarks is refused (both would be one results folder)."""
    merged: dict[Path, dict[str, tuple[str, Candidate]]] = {}
    for c in (choice.candidate for choice in chosen if choice.candidate.division == "open"):
        path = c.source.tree.model_mapping
        entries = json.loads(path.read_text()) if path.is_file() else {}
        if c.folder not in entries:
            continue
        mapping = merged.setdefault(_tree(root, c).model_mapping, {})
        benchmark, first = mapping.setdefault(c.folder, (entries[c.folder], c))
        if benchmark != entries[c.folder]:
            raise CurationError(f"model {c.folder!r} is mapped onto {benchmark} by {first.describe()} and onto "
                                f"{entries[c.folder]} by {c.describe()}; both would be one results folder",
                                fix="leave one of the two runs out (--from), or serve the model under another name")
    for path, mapping in merged.items():
        write_atomic(path, json.dumps({k: v for k, (v, _) in sorted(mapping.items())}, indent=2) + "\n")


def _calibration(root: Path, chosen: list[Choice]) -> None:
    """The closed division's calibration.md: the lines of every contributing source's, each once."""
    lines: dict[Path, list[str]] = {}
    for c in (choice.candidate for choice in chosen if choice.candidate.division == "closed"):
        path = c.source.tree.calibration
        body = path.read_text().splitlines() if path.is_file() else []
        kept = lines.setdefault(_tree(root, c).calibration, ["# Calibration", ""])
        kept += [line for line in body if line.strip() and not line.startswith("# ") and line not in kept]
    for path, text in lines.items():
        write_atomic(path, "\n".join(text) + "\n")


def _src(root: Path, result: Curation) -> None:
    """Each contributing source's plan where `plan_file` says, its Podium source (`submission.tree.source`), a README
    naming them, and one README per benchmark folder."""
    by_tree: dict[Path, list[Source]] = {}
    by_folder: dict[Tree, dict[str, list[Plan]]] = {}
    for c in (choice.candidate for choice in result.chosen):
        tree = _tree(root, c)
        if c.source not in by_tree.setdefault(tree.org, []):
            write_plan(tree, c.source.plan)
            by_tree[tree.org].append(c.source)
        plans = by_folder.setdefault(tree, {}).setdefault(c.folder, [])
        if c.source.plan not in plans:
            plans.append(c.source.plan)
    for tree, folders in by_folder.items():
        write_code_readmes(tree, folders)
    for org, sources in by_tree.items():
        codes = source.place([c for s in sources for c in source.read(s.tree.src / "podium")], org / "src" / "podium")
        write_atomic(org / "src" / "podium" / README, "\n".join([
            f"Podium curated this submission (`podium assemble --pick {result.pick}`) from {len(sources)} run(s); "
            "each scenario's README names the plan that produced it:", "",
            *(f"- `{plan_file(s.plan)}`: run {s.run_id} ({s.label})" for s in sources),
            "", "The harness is Podium's loadgen SUT over the engine's OpenAI-compatible streaming endpoint.", "",
            *source.readme(codes)]))


def _marker(root: Path, result: Curation) -> None:
    """A curated smoke tree stays a smoke tree, a curated rehearsal a rehearsal."""
    if result.kind == "rehearsal":
        rehearsal_marker.mark(root)
    if result.kind == "smoke":
        plans = ", ".join(f"`{s.plan.name}`" for s in result.contributing)
        write_atomic(root / SMOKE_MARKER,
                     "# SMOKE RUN: not a valid MLPerf submission\n\n"
                     f"Curated from smoke runs of {plans}: shortened durations and sample counts, a tiny model mapped "
                     "onto the benchmark. `podium check` lists every deviation by name.\nprofile: smoke\n")


def _candidate(c: Candidate) -> dict:
    """A candidate as curation.json lists it: where it came from, what judged it, which engine and model made it."""
    return {
        "system": c.bench.system, "benchmark": c.bench.benchmark, "scenario": c.scenario, "division": c.division,
        "folder": c.folder, "source": c.source.label, "run_id": c.source.run_id,
        "plan": {"name": c.source.plan.name, "fingerprint": c.source.plan.fingerprint(),
                 "file": plan_file(c.source.plan)},
        "metric": c.performance.metric, "unit": c.performance.unit, "time": c.time,
        "performance": c.performance.key, "accuracy": c.accuracy.key if c.accuracy else None,
        "audits": {a.test: "PASS" if a.passed else "FAIL" for a in c.audits},
        "engine": {"name": c.bench.engine.name, "options": shown_options(c.bench.engine.options)},
        "model": {"name": c.bench.model.name, "source": c.bench.model.source},
    }


def record(result: Curation) -> dict:
    """curation.json: the sources, one entry per chosen scenario (and why), every other candidate and why not."""
    return {
        "round": result.round, "profile": result.kind, "pick": result.pick,
        "sources": [{"source": s.label, "run_id": s.run_id, "plan": s.plan.name, "time": s.time}
                    for s in result.sources],
        "chosen": [_candidate(ch.candidate) | {"why": ch.why} for ch in result.chosen],
        "left_out": [_candidate(lo.candidate) | {"why": lo.reason} for lo in result.left_out],
        "warnings": result.warnings,
    }


def write(result: Curation, out: Path) -> Path:
    """`<out>/submission/` (replaced when present) and `<out>/curation.json`; returns the tree's root."""
    root = Path(out) / "submission"
    if root.exists():
        shutil.rmtree(root)
    for choice in result.chosen:
        _copy_scenario(root, choice.candidate)
    _systems(root, result.chosen)
    _model_mapping(root, result.chosen)
    _calibration(root, result.chosen)
    _src(root, result)
    _marker(root, result)
    write_atomic(Path(out) / CURATION_FILE, json.dumps(record(result), indent=2) + "\n")
    return root


def table(result: Curation) -> list[str]:
    """The choices as a Markdown table."""
    rows = [{"system": c.bench.system, "benchmark": c.bench.benchmark, "scenario": c.scenario,
             "division": c.division, "run": c.source.run_id[:8], "plan": c.source.plan.name,
             "metric": f"{c.performance.metric:,.1f} {c.performance.unit or ''}".strip()
             if c.performance.metric is not None else None, "why": ch.why}
            for ch in result.chosen for c in [ch.candidate]]
    columns = ("system", "benchmark", "scenario", "division", "run", "plan", "metric", "why")
    return md_table(columns, rows)
