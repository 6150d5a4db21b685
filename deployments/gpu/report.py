"""The GPU acceptance script's bookkeeping: one JSON line per step, the figures of a leg's `podium run`, one table.

    python3 deployments/gpu/report.py step STEPS.jsonl ORDER NAME STATUS SECONDS LIMIT FIGURE NOTE
    python3 deployments/gpu/report.py leg RUN_FOLDER ROWS.json   # prints the leg's figure, writes its rows
    python3 deployments/gpu/report.py table RESULTS [WALL_S [SETTING]]   # prints the table; writes table.md and
                                                                         # summary.json

RESULTS holds logs/steps.jsonl and logs/<leg>.rows.json (a leg's rows are shown under the step of the same name).

Standard library only: it runs with the host's python3 even when no virtualenv could be installed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

COLUMNS = ("step", "status", "seconds", "limit", "figure")


def record(steps: Path, order: str, name: str, status: str, seconds: str, limit: str, figure: str,
           note: str) -> None:
    """Append one step's row (a line of JSON; steps that ran in the background append theirs when they end)."""
    row = {"order": int(order), "step": name, "status": status, "seconds": round(float(seconds), 1),
           "limit": int(limit), "figure": figure.strip(), "note": note.strip()}
    with steps.open("a") as f:
        f.write(json.dumps(row) + "\n")


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def leg_rows(run_folder: Path) -> list[dict]:
    """One row per scenario of a `podium run`: the performance verdict and metric, latencies, accuracy."""
    records = json.loads((run_folder / "results.json").read_text())
    rows: dict[str, dict] = {}
    for r in records:
        row = rows.setdefault(r["scenario"], {"scenario": r["scenario"], "valid": None, "metric": None, "unit": None,
                                              "ttft_p99_ms": None, "tpot_p99_ms": None, "accuracy": None,
                                              "accuracy_metric": None, "accuracy_pass": None,
                                              "invalid_reasons": []})
        if r["mode"] == "performance":
            row.update(valid=r["valid"], metric=r["metric"], unit=r["unit"], ttft_p99_ms=r.get("ttft_p99_ms"),
                       tpot_p99_ms=r.get("tpot_p99_ms"), invalid_reasons=list(r.get("invalid_reasons") or []))
        elif r.get("accuracy") is not None:
            row.update(accuracy=r["accuracy"], accuracy_metric=r.get("accuracy_metric"),
                       accuracy_pass=r.get("accuracy_pass"))
    return list(rows.values())


def figure(row: dict) -> str:
    """`Offline VALID 12,345.6 tokens/s, TTFT p99 3.1 ms, TPOT p99 1.2 ms; exact_match 100.000 PASS`."""
    verdict = {True: "VALID", False: "INVALID", None: "no performance run"}[row["valid"]]
    text = f"{row['scenario']} {verdict}"
    if row["metric"] is not None:
        text += f" {_fmt(row['metric'])} {row['unit'] or ''}".rstrip()
    if row["ttft_p99_ms"] is not None:
        text += f", TTFT p99 {_fmt(row['ttft_p99_ms'])} ms, TPOT p99 {_fmt(row['tpot_p99_ms'], 2)} ms"
    if row["invalid_reasons"]:
        text += f" ({'; '.join(row['invalid_reasons'])})"
    if row["accuracy"] is not None:
        passed = {True: "PASS", False: "FAIL", None: ""}[row["accuracy_pass"]]
        text += f"; {row['accuracy_metric']} {row['accuracy']:.3f} {passed}".rstrip()
    return text


def leg_figure(rows: list[dict]) -> str:
    """The leg's line in the table: how many runs were VALID and scored PASS, and the Offline throughput; each
    scenario's own row follows it."""
    if not rows:
        return "no loadgen run finished (the leg's report.md says why)"
    perf = [r for r in rows if r["valid"] is not None]
    acc = [r for r in rows if r["accuracy"] is not None]
    text = (f"{sum(r['valid'] for r in perf)} of {len(perf)} performance runs VALID, "
            f"{sum(bool(r['accuracy_pass']) for r in acc)} of {len(acc)} accuracy runs PASS")
    offline = next((r for r in rows if r["scenario"] == "Offline" and r["metric"] is not None), None)
    if offline is not None:
        text += f"; Offline {_fmt(offline['metric'])} {offline['unit'] or ''}".rstrip()
    return text


def leg(run_folder: Path, rows_file: Path) -> None:
    rows = leg_rows(run_folder)
    rows_file.write_text(json.dumps(rows, indent=2))
    print(leg_figure(rows))


OK = ("PASS", "DRY", "NOT RUN")   # NOT RUN: a leg the setting cannot run; named in the verdict, not a failure


def table(results: Path, wall_s: float | None = None, setting: str | None = None) -> int:
    """Print the table of every step (in the script's order) and write table.md and summary.json into RESULTS."""
    steps_file = results / "logs" / "steps.jsonl"
    steps = [json.loads(line) for line in steps_file.read_text().splitlines() if line.strip()] \
        if steps_file.is_file() else []
    steps.sort(key=lambda s: s["order"])
    legs = {p.name.removesuffix(".rows.json"): json.loads(p.read_text())
            for p in sorted((results / "logs").glob("*.rows.json"))}
    lines = ["| step | status | seconds | limit | figure |", "|---|---|---|---|---|"]
    for s in steps:
        shown = s["figure"] or s["note"]
        if s["note"] and s["figure"] and s["status"] not in OK:
            shown = f"{s['figure']} ({s['note']})"
        lines.append(f"| {s['step']} | {s['status']} | {s['seconds']:.0f} | {s['limit']} | {_cell(shown)} |")
        for row in legs.get(s["step"], []):
            lines.append(f"| {s['step']}/{row['scenario']} | "
                         f"{ {True: 'VALID', False: 'INVALID', None: '-'}[row['valid']] } | | | {_cell(figure(row))} |")
    failed = [s["step"] for s in steps if s["status"] not in OK]
    dry = [s["step"] for s in steps if s["status"] == "DRY"]
    not_run = [s["step"] for s in steps if s["status"] == "NOT RUN"]
    verdict = "PASS" if steps and not failed else f"FAIL ({', '.join(failed) or 'no step ran'})"
    if verdict == "PASS" and dry:
        verdict = f"DRY RUN: every step that ran passed; {', '.join(dry)} only said what they would run"
    if not_run and not failed:
        verdict += f"; not run in this setting: {', '.join(not_run)}"
    wall = f" in {wall_s:.0f} s" if wall_s is not None else ""
    head = f"setting: {setting}\n\n" if setting else ""
    text = head + "\n".join(lines) + f"\n\nresult: {verdict}{wall}\n"
    (results / "table.md").write_text(text)
    (results / "summary.json").write_text(json.dumps({"setting": setting, "steps": steps, "legs": legs,
                                                      "verdict": verdict, "wall_s": wall_s}, indent=2))
    print(text, end="")
    return 0 if not failed else 1


def _cell(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "step":
        record(Path(args[0]), *args[1:8])
    elif command == "leg":
        leg(Path(args[0]), Path(args[1]))
    elif command == "table":
        sys.exit(table(Path(args[0]), float(args[1]) if len(args) > 1 else None, args[2] if len(args) > 2 else None))
    else:
        sys.exit(f"unknown command {command!r}; use step, leg or table")
