"""Curation (`podium assemble`): one organisation's tree from the run folders of several runs and plans.

A source is a run folder as `podium run` leaves it (`results.json`, `compliance.json`, `submission/`), read here from
local disk (`tasks.storage.sources` downloads the ones in object storage first). Each performance record of a source
is a candidate for its (system, benchmark, scenario); the unit of choice is the whole scenario folder of that source's
tree (performance, accuracy, TESTxx audits, measurements.json, user.conf, README.md), which one run produced from one
engine and model, so one run's performance never goes out with another run's accuracy or audits.

    sources = [load_source(Path(folder)) for folder in folders]
    result = curate(sources, "best")          # or "latest", or a run id (a unique prefix will do)
    write(result, Path("out"))                # out/submission/ and out/curation.json

Picks (documented in docs/fleet.md, "Curating a round"):
- `best`: the complete candidate with the highest performance metric (every scenario Podium runs reports a
  throughput, Tokens/s or Samples/s in the rules: higher is better); ties go to the later run.
- `latest`: the complete candidate that ended last (`RunRecord.ended_at`, else `started_at`, else the source's time).
- a run id: that run's candidate wherever the run has the scenario; if that candidate is incomplete the scenario is
  left out (no other run stands in for a run that was named); `best` for the scenarios the run does not have.
Smoke runs, dress rehearsals and real runs are never curated together; a tree curated from smoke runs or rehearsals
carries their marker, so `podium package` refuses a rehearsal's as it does a rehearsal run's own.
Complete: the performance run VALID, its accuracy run passed (when the benchmark has one) and every audit the plan ran
for the scenario passed, with none of the round's audits missing when the plan ran audits.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import yaml

from submission.base.errors import CurationError
from submission.plan import model as plans
from submission.plan.model import SCENARIOS, BenchmarkSpec, Plan
from submission.results.runs import AuditRecord, RunRecord
from submission.rules import load_rules
from submission.tree.assemble import benchmark_folder
from submission.tree.paths import Tree
from submission.tree.rehearsal_marker import MARKER as REHEARSAL_MARKER
from submission.tree.rehearsal_marker import is_rehearsal

PICKS = ("best", "latest")   # anything else is a run id
RESULTS, COMPLIANCE, TREE = "results.json", "compliance.json", "submission"
LEGACY_PLAN = "src/podium/plan.yaml"   # where trees assembled before plan_file() kept their one plan
# A result is submitted in one division: chosen scenarios that share these fields (of their plan's benchmark entry)
# must come from one division; a system may still be in closed for one benchmark and open for another. Source: the
# MLPerf practice of one division per result; Podium's curation policy, which the official checker, reading
# one tree folder at a time, does not check across divisions.
ONE_DIVISION_PER = ("system", "benchmark")

Key = tuple[str, str, str]   # (system, benchmark, scenario)


@dataclass(frozen=True)
class Source:
    """One run folder: where it came from (a path or an s3:// URI), its plan, its records and its tree."""

    label: str
    folder: Path
    run_id: str
    plan: Plan
    plan_path: Path
    records: tuple[RunRecord, ...]
    audits: tuple[AuditRecord, ...]
    time: str                      # ISO 8601 UTC: when the run folder was written (or its manifest)

    @property
    def tree(self) -> Tree:
        return Tree(self.folder / TREE, self.plan.division, self.plan.submitter)

    @property
    def kind(self) -> str:
        """`smoke`, `rehearsal` (a dress rehearsal's: `submission.tree.rehearsal_marker`) or `submission`."""
        if self.plan.profile == "smoke" or self.tree.smoke_marker.is_file():
            return "smoke"
        if is_rehearsal(self.plan.name) or (self.tree.root / REHEARSAL_MARKER).is_file():
            return "rehearsal"
        return "submission"


# What a curated choice of each kind of run says beside its reason (none for a real run)
KIND_NOTES = {"smoke": " (SMOKE run: not a valid MLPerf result)",
              "rehearsal": " (DRESS REHEARSAL: a simulated engine on synthetic data, not a measurement)"}


@dataclass(frozen=True)
class Candidate:
    """One source's scenario folder for a (system, benchmark, scenario), with the records that judge it."""

    source: Source
    bench: BenchmarkSpec
    scenario: str
    performance: RunRecord
    accuracy: RunRecord | None
    audits: tuple[AuditRecord, ...]
    problem: str | None            # why it cannot be picked; None when complete

    @property
    def key(self) -> Key:
        return (self.bench.system, self.bench.benchmark, self.scenario)

    @property
    def folder(self) -> str:
        return benchmark_folder(self.source.plan, self.bench)

    @property
    def division(self) -> str:
        return self.source.plan.division

    @property
    def path(self) -> Path:
        return self.source.tree.scenario(self.bench.system, self.folder, self.scenario)

    @property
    def metric(self) -> float:
        return self.performance.metric if self.performance.metric is not None else float("-inf")

    @property
    def time(self) -> str:
        return self.performance.ended_at or self.performance.started_at or self.source.time

    def describe(self) -> str:
        return f"{self.source.label} (run {self.source.run_id})"


@dataclass(frozen=True)
class Choice:
    candidate: Candidate
    why: str


@dataclass(frozen=True)
class LeftOut:
    candidate: Candidate
    reason: str


@dataclass
class Curation:
    """What `curate` decided: one choice per (system, benchmark, scenario), every other candidate and why not."""

    sources: list[Source]
    pick: str
    chosen: list[Choice] = field(default_factory=list)
    left_out: list[LeftOut] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def round(self) -> str:
        return self.sources[0].plan.round

    @property
    def kind(self) -> str:
        """The one kind of run every source is (`check_sources`): smoke, rehearsal or submission."""
        return self.sources[0].kind

    @property
    def contributing(self) -> list[Source]:
        """The sources at least one choice came from, in the order they were given."""
        used = {id(c.candidate.source) for c in self.chosen}
        return [s for s in self.sources if id(s) in used]


def _time_of(path: Path) -> str:
    return datetime.fromtimestamp(path.stat().st_mtime, UTC).isoformat()


def _plan_of(root: Path, label: str) -> tuple[Plan, Path]:
    """The one plan a run's tree keeps (`assemble.plan_file`, or the older `src/podium/plan.yaml`)."""
    found = sorted(root.glob("*/*/src/podium/plans/*.yaml")) + sorted(root.glob(f"*/*/{LEGACY_PLAN}"))
    if len(found) != 1:
        what = "no plan" if not found else f"{len(found)} plans ({', '.join(p.name for p in found)})"
        raise CurationError(f"{label}: its tree holds {what}; a run folder's tree holds the one plan that ran",
                            fix="pass run folders as `podium run` leaves them (<workspace>/runs/<flow run id>/)")
    return plans.parse(yaml.safe_load(found[0].read_text()), str(found[0])), found[0]


def load_source(folder: Path, *, label: str | None = None, run_id: str | None = None,
                time: str | None = None) -> Source:
    """Read a run folder: its plan (from its tree), results.json and compliance.json."""
    folder = Path(folder)
    label = label or str(folder)
    results = folder / RESULTS
    if not results.is_file() or not (folder / TREE).is_dir():
        raise CurationError(f"{label} is not a run folder: it has no {RESULTS} or no {TREE}/ tree",
                            fix="pass a folder `podium run` left (<workspace>/runs/<flow run id>/), an s3:// run "
                                "prefix or a plan name")
    plan, plan_path = _plan_of(folder / TREE, label)
    audits = folder / COMPLIANCE
    return Source(label=label, folder=folder, run_id=run_id or folder.resolve().name, plan=plan, plan_path=plan_path,
                  records=tuple(RunRecord.model_validate(r) for r in json.loads(results.read_text())),
                  audits=tuple(AuditRecord.model_validate(a) for a in json.loads(audits.read_text()))
                  if audits.is_file() else (),
                  time=time or _time_of(results))


def _problem(source: Source, bench: BenchmarkSpec, path: Path, perf: RunRecord, acc: RunRecord | None,
             audits: tuple[AuditRecord, ...]) -> str | None:
    """Why a candidate cannot be picked, in the words of its records; None when it is complete."""
    if perf.valid is not True:
        return f"performance {perf.validity or 'INVALID'}" + (
            f" ({'; '.join(perf.invalid_reasons)})" if perf.invalid_reasons else "")
    if bench.accuracy and acc is None:
        return "no accuracy run"
    if bench.accuracy and acc is not None and acc.accuracy_pass is not True:
        return f"accuracy failed ({acc.accuracy_metric} {acc.accuracy})"
    failed = [f"audit {a.test} failed ({a.summary()})" for a in audits if not a.passed]
    if failed:
        return "; ".join(failed)
    expected = load_rules(source.plan.round).benchmark(bench.benchmark).compliance_tests \
        if source.plan.audits_enabled else ()
    missing = sorted(set(expected) - {a.test for a in audits})
    if missing:
        return f"audit {', '.join(missing)} missing (the plan ran audits)"
    if not path.is_dir():
        return f"its scenario folder is missing from the tree ({path})"
    return None


def candidates(source: Source) -> list[Candidate]:
    """Every performance record of the source as a candidate, judged with its own accuracy record and audits."""
    by_label = {r.label: r for r in source.records}
    out = []
    for perf in (r for r in source.records if r.mode == "performance"):
        bench = source.plan.benchmark(f"{perf.system}/{perf.benchmark}")
        audits = tuple(a for a in source.audits if (a.system, a.benchmark, a.scenario) ==
                       (perf.system, perf.benchmark, perf.scenario))
        acc = by_label.get(f"{perf.system}/{perf.benchmark}/{perf.scenario}/accuracy")
        path = source.tree.scenario(perf.system, benchmark_folder(source.plan, bench), perf.scenario)
        out.append(Candidate(source, bench, perf.scenario, perf, acc, audits,
                             _problem(source, bench, path, perf, acc, audits)))
    return out


def _same(sources: list[Source], what: str, value: Callable[[Source], str], fix: str) -> None:
    first = sources[0]
    for other in sources[1:]:
        if value(other) != value(first):
            raise CurationError(f"two {what}s: {first.label} is {value(first)!r}, {other.label} is {value(other)!r}; "
                                "one submission tree holds one", fix=fix)


def _systems(source: Source) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(source.tree.systems.glob("*.json"))}


def _same_systems(sources: list[Source]) -> None:
    """One description per system name: compared whole, less `division` when the two runs' divisions differ."""
    seen: dict[str, tuple[Source, dict]] = {}
    for source in sources:
        for name, desc in _systems(source).items():
            first, known = seen.setdefault(name, (source, desc))
            ignore = {"division"} if first.plan.division != source.plan.division else set()
            fields = sorted(k for k in set(known) | set(desc) if k not in ignore and known.get(k) != desc.get(k))
            if fields:
                raise CurationError(
                    f"system {name!r} is described differently by {first.label} and {source.label}: "
                    + ", ".join(f"{k} {known.get(k)!r} vs {desc.get(k)!r}" for k in fields[:5]),
                    fix="run both under one description of the system (the plan's systems[].description), "
                        "or give the other system its own name")


def check_sources(sources: list[Source]) -> None:
    """Refuse sources that cannot make one tree: two rounds, submitters or kinds of run (smoke, dress rehearsal,
    submission), one system described twice."""
    if not sources:
        raise CurationError("no sources to curate from", fix="pass --from SOURCE at least once")
    _same(sources, "round", lambda s: s.plan.round, "curate the runs of one round at a time")
    _same(sources, "submitter", lambda s: s.plan.submitter, "curate one organisation's runs at a time")
    _same(sources, "profile", lambda s: s.kind,
          "curate smoke runs, dress rehearsals and real runs apart: neither a smoke run nor a rehearsal ever goes "
          "into a submission")
    _same_systems(sources)


def _run(sources: list[Source], run_id: str) -> str:
    """The run a --pick names: its exact id, else the one id it is a prefix of."""
    ids = list(dict.fromkeys(s.run_id for s in sources))
    if run_id in ids:
        return run_id
    matches = [i for i in ids if i.startswith(run_id)]
    if len(matches) != 1:
        what = "matches no run" if not matches else f"matches {len(matches)} runs ({', '.join(matches)})"
        raise CurationError(f"--pick {run_id!r} {what} of the sources",
                            fix=f"pass best, latest or one of: {', '.join(ids)}")
    return matches[0]


def _best(complete: list[Candidate], pick: str) -> tuple[Candidate, str]:
    """The choice among complete candidates by `best` or `latest`, and why in words."""
    if pick == "latest":
        chosen = max(complete, key=lambda c: (c.time, c.metric))
        return chosen, f"latest complete: ended {chosen.time}, of {len(complete)} candidate(s)"
    chosen = max(complete, key=lambda c: (c.metric, c.time))
    unit = f" {chosen.performance.unit}" if chosen.performance.unit else ""
    return chosen, f"best VALID: {chosen.metric:.1f}{unit} of {len(complete)} candidate(s)"


def _note(candidate: Candidate) -> str:
    return KIND_NOTES.get(candidate.source.kind, "")


def _choose(group: list[Candidate], pick: str, named: str | None) -> tuple[Candidate | None, str]:
    """One key's choice (None when nothing can be picked) and why, or why not."""
    mine = [c for c in group if named is not None and c.source.run_id == named]
    if mine:
        if mine[0].problem:
            return None, f"run {named} (named by --pick) has it incomplete: {mine[0].problem}; no other run stands in"
        return mine[0], f"named run {named}" + _note(mine[0])
    complete = [c for c in group if c.problem is None]
    if not complete:
        return None, "nothing complete to pick: " + "; ".join(f"{c.describe()}: {c.problem}" for c in group)
    chosen, why = _best(complete, "best" if named else pick)
    return chosen, (why + (f" (run {named} does not have it)" if named else "") + _note(chosen))


def _one_division(chosen: list[Choice]) -> None:
    """A result goes in one division (ONE_DIVISION_PER): refuse two choices that share it in two divisions."""
    seen: dict[tuple[str, ...], Candidate] = {}
    for choice in chosen:
        c = choice.candidate
        first = seen.setdefault(tuple(getattr(c.bench, name) for name in ONE_DIVISION_PER), c)
        if first.division != c.division:
            raise CurationError(
                f"{c.bench.system}/{c.bench.benchmark} would be submitted in two divisions: {first.division} from "
                f"{first.describe()}, {c.division} from {c.describe()}; a result is submitted in one division",
                fix="leave the runs of one of the two divisions out (--from)")


def curate(sources: list[Source], pick: str = "best") -> Curation:
    """Refuse what cannot go together, then choose per (system, benchmark, scenario); see the module's docstring."""
    unique: dict[str, Source] = {}
    for source in sources:
        unique.setdefault(source.run_id, source)   # a run given twice (its folder and its prefix) counts once
    result = Curation(sources=list(unique.values()), pick=pick, warnings=[
        f"{s.label} is run {s.run_id} again; {unique[s.run_id].label} is used"
        for s in sources if unique[s.run_id] is not s])
    check_sources(result.sources)
    named = None if pick in PICKS else _run(result.sources, pick)
    groups: dict[Key, list[Candidate]] = {}
    for candidate in (c for s in result.sources for c in candidates(s)):
        groups.setdefault(candidate.key, []).append(candidate)
    order = {name: i for i, name in enumerate(SCENARIOS)}
    for key in sorted(groups, key=lambda k: (k[0], k[1], order.get(k[2], len(order)))):
        chosen, why = _choose(groups[key], pick, named)
        if chosen is None:
            result.warnings.append(f"{'/'.join(key)} left out: {why}")
        else:
            result.chosen.append(Choice(chosen, why))
        result.left_out += [LeftOut(c, c.problem or _beaten(c, chosen, named)) for c in groups[key] if c is not chosen]
    if not result.chosen:
        raise CurationError("nothing complete to pick from the sources:\n  " + "\n  ".join(result.warnings),
                            fix="pass runs whose performance is VALID, accuracy passed and audits passed")
    _one_division(result.chosen)
    return result


def _beaten(candidate: Candidate, chosen: Candidate | None, named: str | None) -> str:
    if chosen is None:
        return f"run {named} was named by --pick"
    return f"not picked: {chosen.describe()} was chosen"
