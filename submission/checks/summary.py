"""The official checker's CSV summary (`submission_checker/results.py` columns, reference §2.6), one row per scenario
folder. Unlike the official checker, which lists only the rows that passed, every scenario folder gets a row and
the `errors` column counts the errors found in it.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from submission.base.files import write_atomic
from submission.checks.findings import Finding, ScenarioResult

COLUMNS = (
    "Organization", "Availability", "Division", "SystemType", "SystemName", "Platform", "Model", "MlperfModel",
    "Scenario", "Result", "Accuracy", "number_of_nodes", "host_processor_model_name", "host_processors_per_node",
    "host_processor_core_count", "accelerator_model_name", "accelerators_per_node", "total_accelerators", "Location",
    "framework", "operating_system", "notes", "compliance", "errors", "version", "inferred", "has_power", "Units",
    "weight_data_types", "design_power_watts", "PrivateID",
)


def _int(value: object) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None


def _inside(path: str, folder: str) -> bool:
    return PurePosixPath(path) == PurePosixPath(folder) or PurePosixPath(folder) in PurePosixPath(path).parents


def rows(round: str, results: Sequence[ScenarioResult], findings: Sequence[Finding]) -> list[dict[str, str]]:
    """One row per scenario folder of a check (`submission.checks.checker.CheckReport`: its round, results,
    findings)."""
    out = []
    for r in results:
        desc = r.system_desc
        nodes, accelerators = _int(desc.get("number_of_nodes")), _int(desc.get("accelerators_per_node"))
        notes = ". ".join(str(n) for n in (desc.get("hw_notes"), desc.get("sw_notes")) if n)
        location = f"{r.path}/performance/run_1" if r.layout == "loadgen" else r.path
        row = {
            "Organization": r.submitter, "Availability": desc.get("status", ""), "Division": r.division,
            "SystemType": desc.get("system_type", ""), "SystemName": desc.get("system_name", ""),
            "Platform": r.system, "Model": r.benchmark_folder, "MlperfModel": r.benchmark, "Scenario": r.scenario,
            "Result": "" if r.result is None else f"{r.result:g}",
            "Accuracy": "  ".join(f"{metric}: {value}" for metric, value in r.accuracy.items()),
            "total_accelerators": "" if nodes is None or accelerators is None else str(nodes * accelerators),
            "Location": location, "notes": notes,
            "compliance": r.division,  # what the official checker writes here (marked TODO upstream)
            "errors": str(sum(f.severity == "error" and _inside(f.path, r.path) for f in findings)),
            "version": round,
            "inferred": "1" if r.log_scenario is not None and r.log_scenario != r.scenario else "0",
            "has_power": "False", "Units": r.unit, "weight_data_types": r.weight_data_types,
            "design_power_watts": "", "PrivateID": "",
        }
        for field in ("number_of_nodes", "host_processor_model_name", "host_processors_per_node",
                      "host_processor_core_count", "accelerator_model_name", "accelerators_per_node", "framework",
                      "operating_system"):
            row[field] = str(desc.get(field, ""))
        out.append({column: str(row.get(column, "")) for column in COLUMNS})
    return out


def to_csv(rows_: Sequence[dict[str, str]]) -> str:
    """The header unquoted, every value quoted, as results.py writes them."""
    buffer = io.StringIO()
    buffer.write(",".join(COLUMNS) + "\n")
    writer = csv.writer(buffer, quoting=csv.QUOTE_ALL, lineterminator="\n")
    for row in rows_:
        writer.writerow([row[column] for column in COLUMNS])
    return buffer.getvalue()


def write_csv(rows_: Sequence[dict[str, str]], path: Path) -> Path:
    return write_atomic(Path(path), to_csv(rows_))
