"""The published results of a round as data, and a run compared with them per accelerator.

`rules/published-<round>.csv` holds, per result row of the round's `summary.csv` (mlcommons/inference_results_<round>,
the file its header names with the commit), what the comparison needs for the benchmarks the round's rules know;
`rebuild` writes it from a `summary.csv` (a later round's too). `compare` puts one measured value beside the published
ones of the same benchmark, scenario and division whose accelerator matches by `accelerator_key`: the best per
accelerator, the best at the same accelerator count, and the rank this value would take.

What it is: a comparison per accelerator of a result no one has reviewed, against reviewed results of other
systems. It is not an MLPerf metric (MLPerf publishes per-system results, never per-accelerator ones), and a
scenario whose published values are bound by a target rather than by the hardware (`Comparison.target_bound`) says
little per accelerator.
"""

from __future__ import annotations

import csv
import functools
import io
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from submission.base.errors import PlanError
from submission.rules import ROUNDS, load_rules

_DATA = Path(__file__).parents[1] / "rules"
DEFAULT_DIVISION = "closed"   # closed results run the reference model as the rules fix it: the like-for-like baseline
TARGET_BOUND_TOLERANCE = 2e-4   # published values this close (relative), from several systems on different hardware:
TARGET_BOUND_SYSTEMS = 3         # set by the scenario's target, not by the hardware (Qwen3-VL Interactive: 3.9941,
                                 # 3.9944, 3.9945 q/s on 4 GB200 and 8 B300; unrelated results differ by 0.08 % or more)
COLUMNS = ("submitter", "system", "accelerator", "accelerators", "nodes", "benchmark", "scenario", "value", "unit",
           "division", "category", "availability", "location")
# summary.csv column -> ours (mlcommons/inference tools/submission/generate_final_report.py writes summary.csv)
SUMMARY_COLUMNS = {"Organization": "submitter", "SystemName": "system", "accelerator_model_name": "accelerator",
                   "total_accelerators": "accelerators", "number_of_nodes": "nodes", "Scenario": "scenario",
                   "Result": "value", "Units": "unit", "Division": "division", "SystemType": "category",
                   "Availability": "availability", "Location": "location"}
_MIXED = re.compile(r"\s\+\s|\sand\s", re.IGNORECASE)   # "H200-SXM-141GB + MI350X ...", "MI300X ... and MI355X ..."
_NOISE = re.compile(r"\(r\)|\(tm\)|\b\d+\s*gb\b|\bhbm\d*e?\b|\bserver edition\b|\bsxm\d*\b|\bpcie\b|\bnvidia\b|\bamd\b"
                    r"|\bintel\b|\binstinct\b")


def accelerator_key(name: str) -> str:
    """The accelerator a name means, spelled one way: lower case without the vendor, memory size and type, form
    factor or "Server Edition" ("Nvidia B300-SXM-270GB" and "NVIDIA B300" -> "b300"; "AMD Instinct MI355X 288GB HBM3e"
    -> "mi355x"). Empty for no accelerator ("N/A", "0")."""
    text = name.lower().replace("_", " ").strip()
    if text in ("n/a", "na", "none", "0", ""):
        return ""
    text = _NOISE.sub(" ", re.sub(r"[-/,]", " ", text))
    return " ".join(text.split())


def mixed(name: str) -> bool:
    """A system with more than one kind of accelerator: its per-accelerator value belongs to none of them."""
    return bool(_MIXED.search(name))


@dataclass(frozen=True)
class Result:
    """One published result row."""

    submitter: str
    system: str
    accelerator: str
    accelerators: int
    nodes: int
    benchmark: str
    scenario: str
    value: float
    unit: str
    division: str
    category: str
    availability: str
    location: str

    @property
    def per_accelerator(self) -> float | None:
        return self.value / self.accelerators if self.accelerators else None

    @property
    def label(self) -> str:
        note = "" if self.availability == "available" else f", {self.availability}"
        return f"{self.submitter} {self.system} ({self.accelerators} x {self.accelerator}{note})"


@dataclass(frozen=True)
class Published:
    """The published results of one round and where they came from."""

    round: str
    source: str          # e.g. "github.com/mlcommons/inference_results_v6.1 summary.csv @ 7bf15fd..."
    commit: str
    results: tuple[Result, ...]

    def select(self, benchmark: str, scenario: str | None = None, accelerator: str | None = None,
               division: str | None = DEFAULT_DIVISION) -> list[Result]:
        """The rows of a benchmark (and scenario, accelerator by `accelerator_key`, division; None: any)."""
        key = accelerator_key(accelerator) if accelerator else None
        return [r for r in self.results if r.benchmark == benchmark and scenario in (None, r.scenario)
                and division in (None, r.division) and (key is None or accelerator_key(r.accelerator) == key)]


def data_file(round: str) -> Path:
    return _DATA / f"published-{round}.csv"


@functools.cache
def load(round: str = "v6.1") -> Published:
    """`rules/published-<round>.csv`: its `# commit:` header line and its rows."""
    path = data_file(round)
    if not path.is_file():
        have = sorted(p.stem.removeprefix("published-") for p in _DATA.glob("published-*.csv"))
        raise PlanError(f"no published results for round {round!r} ({path.name})",
                        fix=f"rounds with published results: {', '.join(have) or 'none'}; "
                            "`podium published --rebuild summary.csv --commit SHA --round R` writes one")
    return parse(path.read_text(), round, str(path))


def parse(text: str, round: str, where: str) -> Published:
    header = dict(line[2:].split(": ", 1) for line in text.splitlines() if line.startswith("# ") and ": " in line)
    if "commit" not in header or "source" not in header:
        raise PlanError(f"{where} lacks its `# source:` or `# commit:` header line",
                        fix="rebuild it with `podium published --rebuild summary.csv --commit SHA`")
    rows = csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
    results = tuple(Result(**{**row, "accelerators": int(row["accelerators"]), "nodes": int(row["nodes"]),
                              "value": float(row["value"])}) for row in rows)
    return Published(round=round, source=header["source"], commit=header["commit"].strip(), results=results)


def benchmark_of(model: str, mlperf_model: str, known: Iterable[str]) -> str | None:
    """The rules' benchmark name of a summary.csv row: its Model ("qwen3-vl-235b-a22b"), else its MlperfModel when a
    submitter spelled the Model its own way ("llama3_1-8b" for llama3.1-8b); None for a benchmark the rules lack."""
    names = set(known)
    return next((n for n in (model, mlperf_model) if n in names), None)


def rebuild(summary: str, round: str, commit: str, repository: str | None = None) -> tuple[str, dict[str, int]]:
    """The text of `published-<round>.csv` from the text of a round's `summary.csv`: the rows of the benchmarks the
    round's rules know, in the file's order; and the number of rows kept per benchmark."""
    if round not in ROUNDS:
        raise PlanError(f"unknown round {round!r}", fix=f"rounds with rules: {', '.join(ROUNDS)}")
    known = load_rules(round).benchmarks.keys()
    reader = csv.DictReader(io.StringIO(summary))
    missing = sorted({*SUMMARY_COLUMNS, "Model", "MlperfModel"} - set(reader.fieldnames or ()))
    if missing:
        raise PlanError(f"summary.csv lacks the column(s) {', '.join(missing)}",
                        fix="pass the summary.csv at the root of mlcommons/inference_results_<round>")
    repository = repository or f"mlcommons/inference_results_{round}"
    out = io.StringIO()
    out.write(f"# Published MLPerf Inference {round} results of the benchmarks Podium's rules know, one a row.\n"
              f"# source: github.com/{repository} summary.csv\n# commit: {commit}\n"
              "# Rebuilt by `podium published --rebuild summary.csv --commit SHA`; never edited by hand.\n")
    writer = csv.DictWriter(out, COLUMNS, lineterminator="\n")
    writer.writeheader()
    counts: dict[str, int] = {}
    for row in reader:
        benchmark = benchmark_of(row["Model"], row["MlperfModel"], known)
        if benchmark is None:
            continue
        counts[benchmark] = counts.get(benchmark, 0) + 1
        writer.writerow({"benchmark": benchmark, **{ours: row[theirs].strip() for theirs, ours in
                                                     SUMMARY_COLUMNS.items()}})
    return out.getvalue(), counts


@dataclass
class Comparison:
    """One measured value against the published results with the same accelerator (`compare`)."""

    benchmark: str
    scenario: str
    division: str
    accelerator: str                     # the run's, as its system description names it
    key: str                             # accelerator_key of it
    accelerators: int
    value: float
    unit: str
    matched: list[str] = field(default_factory=list)     # the published accelerator names that matched
    results: list[Result] = field(default_factory=list)  # those rows, best per accelerator first
    mixed_left_out: int = 0
    best: Result | None = None
    same_count: Result | None = None
    rank: int | None = None              # 1 = better than every published result per accelerator
    target_bound: float | None = None    # the value several hardware configurations reported: bound by a target
    system: str = ""                     # the run's system

    @property
    def subject(self) -> str:
        return f"{self.system}/{self.benchmark}/{self.scenario}"

    @property
    def per_accelerator(self) -> float | None:
        return self.value / self.accelerators if self.accelerators else None

    @property
    def fraction(self) -> float | None:
        """This result per accelerator over the best published one per accelerator."""
        if self.best is None or not self.per_accelerator:
            return None
        return self.per_accelerator / self.best.per_accelerator

    @property
    def same_count_fraction(self) -> float | None:
        return None if self.same_count is None else self.value / self.same_count.value

    @property
    def short(self) -> str:
        """A name for the accelerator in one line: its key in capitals ("NVIDIA GB200" -> "GB200", "AMD Instinct
        MI355X 288GB HBM3e" -> "MI355X")."""
        return self.key.upper() or self.accelerator

    def line(self, min_fraction: float | None = None) -> str:
        """The verdict in a few words, e.g. "gpt-oss-120b Offline: 83 % of the best published GB200 per GPU"."""
        head = f"{self.benchmark} {self.scenario}"
        if self.fraction is None:
            return f"{head}: no published {self.division} result for accelerator {self.accelerator!r}"
        text = f"{head}: {percent(self.fraction)} of the best published {self.short} per GPU"
        if self.best is not None and self.best.availability != "available":
            text += f" (a {self.best.availability} result)"
        if self.target_bound is not None:
            return text + f" (published values bound by a target, {self.target_bound:.4g} {self.unit})"
        if min_fraction is not None and self.fraction < min_fraction:
            text += f" FAIL: under {percent(min_fraction)}"
        return text


def percent(fraction: float) -> str:
    """83.2 % and 83 % read the same at a glance; small fractions keep a digit that is not zero."""
    value = 100 * fraction
    return f"{value:.0f} %" if value >= 10 else f"{value:.2g} %"


def target_bound(rows: Sequence[Result], tolerance: float = TARGET_BOUND_TOLERANCE,
                 systems: int = TARGET_BOUND_SYSTEMS) -> float | None:
    """A value that `systems` or more published results, on more than one hardware configuration (accelerator or
    count), agree on within `tolerance`: the scenario's target bounds them, not the hardware (Qwen3-VL Interactive:
    3.994 q/s on 4 GB200 and on 8 B300)."""
    ordered = sorted(rows, key=lambda r: r.value)
    for i, low in enumerate(ordered):
        close = [r for r in ordered[i:] if r.value <= low.value * (1 + tolerance)]
        if len(close) >= systems and len({(accelerator_key(r.accelerator), r.accelerators) for r in close}) > 1:
            return low.value
    return None


def compare(published: Published, benchmark: str, scenario: str, value: float, unit: str, accelerator: str,
            accelerators: int, division: str = DEFAULT_DIVISION, system: str = "") -> Comparison:
    """`value` (of `accelerators` x `accelerator`) against the published results of the same benchmark, scenario and
    division whose accelerator has the same key; systems of mixed accelerators are left out."""
    key = accelerator_key(accelerator)
    out = Comparison(benchmark, scenario, division, accelerator, key, accelerators, value, unit, system=system)
    scenario_rows = published.select(benchmark, scenario, division=division)
    out.target_bound = target_bound(scenario_rows)
    if not key or not accelerators:
        return out
    out.mixed_left_out = sum(mixed(r.accelerator) for r in scenario_rows)
    same = [r for r in scenario_rows if not mixed(r.accelerator) and r.accelerators
            and accelerator_key(r.accelerator) == key]
    same.sort(key=lambda r: r.per_accelerator or 0.0, reverse=True)
    out.results = same
    out.matched = sorted({r.accelerator for r in same})
    if not same:
        return out
    out.best = same[0]
    counted = [r for r in same if r.accelerators == accelerators]
    out.same_count = max(counted, key=lambda r: r.value) if counted else None
    mine = out.per_accelerator or 0.0
    out.rank = 1 + sum((r.per_accelerator or 0.0) > mine for r in same)
    return out


def verdict(comparisons: Sequence[Comparison], min_fraction: float | None = None, round: str = "") -> str:
    """The comparisons in one line: each scenario's `Comparison.line` where a published result matched, one
    "no published result" per accelerator where none did (the CPU smoke run: "N/A")."""
    parts = [c.line(min_fraction) for c in comparisons if c.fraction is not None]
    missing = sorted({(c.accelerator, c.division) for c in comparisons if c.fraction is None})
    parts += [f"no published {division} {round} result for accelerator ".replace("  ", " ")
              + (repr(name) if name else "(none named in the system description)") for name, division in missing]
    return "; ".join(parts)


@dataclass(frozen=True)
class PlannedRow:
    """One scenario of a plan's system beside the published results of the same benchmark, accelerator and count."""

    system: str
    benchmark: str
    scenario: str
    accelerator: str
    accelerators: int
    target: float | None                  # the plan's target_qps for the scenario
    published: tuple[Result, ...]          # best first


def against_plan(published: Published, plan: Any, division: str | None = DEFAULT_DIVISION) -> list[PlannedRow]:
    """Each (system, benchmark, scenario) of `plan` (a loaded Plan) with the published results of the same
    benchmark and scenario on the same accelerator (by `accelerator_key`) and the same count (the system's
    description: accelerators_per_node x its nodes)."""
    out = []
    systems = {s.name: s for s in plan.systems}
    for bench in plan.benchmarks:
        system = systems[bench.system]
        name = system.description.get("accelerator_model_name", "")
        try:
            count = int(system.description.get("accelerators_per_node") or 0) * system.nodes
        except ValueError:
            count = 0
        for scenario, spec in bench.scenarios.items():
            rows = [r for r in published.select(bench.benchmark, scenario, name or None, division)
                    if name and r.accelerators == count and not mixed(r.accelerator)]
            rows.sort(key=lambda r: r.value, reverse=True)
            out.append(PlannedRow(system.name, bench.benchmark, scenario, name, count, spec.target_qps, tuple(rows)))
    return out
