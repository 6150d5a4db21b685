"""The answers an endpoints client run scored, as a loadgen accuracy log, so every Podium evaluator
(`tasks.accuracy.score`) scores exactly the answers the client scored.

    count = write_accuracy_log(run_dir / "report", run_dir / ACCURACY_LOG)

What the client's report holds (paths under its src/inference_endpoint/, at the commit the round's rules pin):
- `accuracy/accuracy_results.json`: one entry per scored data set; the accuracy data set's has `dataset_type`
  "accuracy", its `dataset_name` (the config's name, `shopify_product_catalogue::q3vl`) and `unit_samples`, its row
  count (commands/benchmark/accuracy.py `score_accuracy`). A performance run has none (no accuracy/ folder at all).
- `sample_idx_map.json`: {phase: {sample uuid: data set row}}, one phase per name: "performance", and each accuracy
  phase under its data set's name (commands/benchmark/execute.py `_write_scoring_artifacts`), so the accuracy
  phase's samples are told from the performance phase's even when both draw from the same data set.
- `events.jsonl`: one EventRecord per line; a `sample.complete` event carries the sample's uuid and its output,
  `data` = ["TextModelOutput", output, reasoning, tool_calls] (core/types.py, a tagged array-like struct): output
  and reasoning each a string (not streamed) or a list of string chunks (streamed: the first chunk, then the rest
  joined), or null. A failed sample completes with `data` null, after its error event.

The client scores the text `str(TextModelOutput)`, reasoning then output, chunks joined (evaluation/scoring.py
`Scorer.get_raw_outputs`), of every COMPLETE event whose uuid the accuracy phase issued, paired with the data set row
the map gives it (`Scorer.match_sample_index`); the log holds the same text, UTF-8 in `data` as hex, `qsl_idx` = that
row, which is the staged data set's row (tasks.endpoints.dataset keeps the row order). Entries are in the order of
events.jsonl, i.e. completion order, as loadgen writes its log; `seq_id` counts them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from submission.base.errors import RunFailed
from submission.base.files import write_atomic
from tasks.endpoints.results import ACCURACY, EVENTS

ACCURACY_LOG = "mlperf_log_accuracy.json"
SAMPLE_MAP = "sample_idx_map.json"
COMPLETE = "sample.complete"
OUTPUT_TAG = "TextModelOutput"
RERUN = "run the accuracy run again (the client writes its report when the run ends)"
SHOWN = 10   # rows named in an error


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise RunFailed(f"the endpoints client's report has no readable {path.name}: {error}", where=str(path),
                        fix=RERUN) from None


def accuracy_phase(report_dir: Path) -> tuple[str, int]:
    """(name, row count) of the report's one accuracy data set; RunFailed when the report has none."""
    path = report_dir / ACCURACY
    if not path.exists():
        raise RunFailed(f"the endpoints client's report has no accuracy phase ({ACCURACY} is missing)",
                        where=str(report_dir), fix="answers exist only for an accuracy run (client --mode both or "
                        f"acc, with an accuracy data set in its config); {RERUN}")
    scores = (_json(path) or {}).get("accuracy_scores") or []
    found = [s for s in scores if isinstance(s, dict) and s.get("dataset_type") == "accuracy"]
    if len(found) != 1 or not isinstance(found[0].get("dataset_name"), str) \
            or not isinstance(found[0].get("unit_samples"), int):
        names = [s.get("dataset_name") for s in found]
        raise RunFailed(f"the endpoints client's report scored {len(found)} accuracy data set(s) {names}, not the one "
                        "(with its dataset_name and unit_samples) an accuracy run of Podium's config scores",
                        where=str(path), fix=f"check the run's config (one accuracy data set); {RERUN}")
    return found[0]["dataset_name"], found[0]["unit_samples"]


def answer_text(data: Any, where: str) -> str | None:
    """The text the client scores for a COMPLETE event's `data` (reasoning, then output); None for a failed sample."""
    if data is None:
        return None
    if not (isinstance(data, list) and data and data[0] == OUTPUT_TAG):
        raise RunFailed(f"{where}: a {COMPLETE} event's data is not a {OUTPUT_TAG} ({str(data)[:200]})",
                        fix="install the endpoints client at the commit the round's rules pin (make venv-endpoints)")
    output, reasoning, tool_calls = [*data[1:], None, None, None][:3]
    if tool_calls:
        raise RunFailed(f"{where}: the answer carries tool calls, which no Podium evaluator reads",
                        fix="serve the benchmark without tools (its requests name none)")
    parts = []
    for field in (reasoning, output):
        chunks = [field] if isinstance(field, str) else field or []
        if not isinstance(chunks, list) or not all(isinstance(c, str) for c in chunks):
            raise RunFailed(f"{where}: a {COMPLETE} event's output is not text ({str(field)[:200]})",
                            fix="serve a model that answers in text")
        parts.extend(chunks)
    return "".join(parts)


def completions(events: Path) -> Iterator[tuple[str, str | None, str]]:
    """(sample uuid, answer text or None, where) of each COMPLETE event, in file order."""
    try:
        lines = events.open(encoding="utf-8")
    except OSError as error:
        raise RunFailed(f"the endpoints client's report has no readable {events.name}: {error}", where=str(events),
                        fix=RERUN) from None
    with lines:
        for number, line in enumerate(lines, 1):
            if f'"{COMPLETE}"' not in line:   # issued, first-chunk and session events: most of the file
                continue
            where = f"{events}:{number}"
            try:
                record = json.loads(line)
            except ValueError:
                raise RunFailed(f"{where}: not a JSON event", fix=RERUN) from None
            if record.get("event_type") == COMPLETE:
                yield str(record.get("sample_uuid")), answer_text(record.get("data"), where), where


def _named(rows: list[int], failed: dict[int, str]) -> str:
    named = [f"row {row}" + (f" (its sample failed: {failed[row]})" if row in failed else "") for row in rows[:SHOWN]]
    return ", ".join(named) + (f" and {len(rows) - SHOWN} more" if len(rows) > SHOWN else "")


def write_accuracy_log(report_dir: Path, out: Path) -> int:
    """Write the accuracy phase's answers of the client's report `report_dir` to `out` (loadgen's
    mlperf_log_accuracy.json) atomically; the number of entries. RunFailed when a file of the report is missing, the
    run had no accuracy phase, or a data set row has no answer (a sample of it failed, never completed or was never
    issued): the client scores such a sample as an empty answer, Podium scores no run short of an answer."""
    report_dir = Path(report_dir)
    name, rows = accuracy_phase(report_dir)
    phases = _json(report_dir / SAMPLE_MAP)
    issued = phases.get(name) if isinstance(phases, dict) else None
    if not isinstance(issued, dict) or not issued:
        raise RunFailed(f"the endpoints client's {SAMPLE_MAP} has no samples of the accuracy phase {name!r}",
                        where=str(report_dir / SAMPLE_MAP), fix=RERUN)
    entries, answered, failed = [], set(), {}
    for uuid, text, where in completions(report_dir / EVENTS):
        row = issued.get(uuid)
        if row is None:
            continue   # the performance phase's
        if text is None:
            failed[row] = where
            continue
        entries.append({"seq_id": len(entries), "qsl_idx": row, "data": text.encode("utf-8").hex().upper()})
        answered.add(uuid)
    outside = sorted(set(issued.values()) - set(range(rows)))
    if outside:
        raise RunFailed(f"{SAMPLE_MAP} names rows {outside[:SHOWN]} of the accuracy data set {name!r}, which has "
                        f"{rows}", where=str(report_dir / SAMPLE_MAP), fix=RERUN)
    # every sample the phase issued (a row each, or a row per repeat) answered, and every row issued
    missing = sorted({issued[uuid] for uuid in set(issued) - answered} | (set(range(rows)) - set(issued.values())))
    if missing:
        raise RunFailed(f"{len(missing)} of {rows} rows of the accuracy data set {name!r} have no answer in "
                        f"{EVENTS}: {_named(missing, failed)}", where=str(report_dir),
                        fix=f"make the engine answer every sample (the client's error events say why one failed); "
                            f"{RERUN}")
    write_atomic(Path(out), json.dumps(entries))
    return len(entries)
