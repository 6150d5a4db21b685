"""tasks.endpoints.answers on hand-written endpoints client reports, in the shape a real run of the pinned client
leaves (sample_idx_map.json, events.jsonl, accuracy/accuracy_results.json; see the module's doc): the accuracy phase's
answers become a loadgen accuracy log that Podium's evaluators read, and a report without them is a clear error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from submission.base.errors import RunFailed
from submission.results.logs import parse_accuracy_log
from tasks.endpoints.answers import ACCURACY_LOG, write_accuracy_log

NAME = "shopify_product_catalogue::q3vl"


def event(kind: str, uuid: str = "", data: Any = None, **more: Any) -> dict[str, Any]:
    return {"event_type": kind, "timestamp_ns": 1, "sample_uuid": uuid, "conversation_id": "", "turn": None,
            "data": data, **more}


def done(uuid: str, output: Any, reasoning: Any = None, tool_calls: Any = None) -> dict[str, Any]:
    return event("sample.complete", uuid, ["TextModelOutput", output, reasoning, tool_calls], finish_reason="stop",
                 worker_id=0)


# The performance phase's answers ("perf ...") come first and must not reach the log; the accuracy phase completes
# out of row order: row 2 streamed (first chunk, then the rest joined), row 0 not streamed, row 1 with reasoning.
EVENTS = [event("session.started"),
          *(event("sample.issued", u, ["PromptData", None, None, None, None, None, None, None])
            for u in ("p0", "p1", "a0", "a1", "a2")),
          done("p0", ["perf ", "zero"]), done("p1", "perf one"),
          event("sample.recv_first", "a2"), done("a2", ["{\"a\"", ": 2}"]), done("a0", "zéro"),
          done("a1", ["one"], ["think", "ing "]), event("session.ended")]
ACCURACY = {"accuracy_scores": [{"dataset_name": NAME, "score": 0.5, "unit_samples": 3, "num_repeats": 1,
                                 "complete": True, "dataset_type": "accuracy"}]}


def report(folder: Path, events: list[dict] = EVENTS, accuracy: dict | None = ACCURACY,
           phases: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    phases = {"performance": {"p0": 1, "p1": 0}, NAME: {"a0": 0, "a1": 1, "a2": 2}} if phases is None else phases
    (folder / "sample_idx_map.json").write_text(json.dumps(phases, indent=2))
    (folder / "events.jsonl").write_text("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in events))
    if accuracy is not None:
        (folder / "accuracy").mkdir()
        (folder / "accuracy" / "accuracy_results.json").write_text(json.dumps(accuracy))
    return folder


def test_the_accuracy_phases_answers_as_a_loadgen_log(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tasks.accuracy import score

    out = tmp_path / "run" / ACCURACY_LOG
    assert write_accuracy_log(report(tmp_path / "report"), out) == 3
    entries = parse_accuracy_log(out)
    assert [(e.seq_id, e.qsl_idx, bytes.fromhex(e.data).decode()) for e in entries] == \
        [(0, 2, '{"a": 2}'), (1, 0, "zéro"), (2, 1, "thinking one")]    # completion order; reasoning, then output
    assert entries[1].data == "zéro".encode().hex().upper()               # loadgen writes upper-case hex
    refs = tmp_path / "refs.parquet"   # the VLM smoke evaluator reads the same log
    pq.write_table(pa.table({"reference_answer": ["zéro", "thinking one", '{"a": 2}']}), refs)
    assert score("smoke-vlm-exact-match", out.parent, refs, None).metrics == {"exact_match": 100.0}


@pytest.mark.parametrize(("missing", "said"), [
    ("sample_idx_map.json", "no readable sample_idx_map.json"), ("events.jsonl", "no readable events.jsonl"),
    ("accuracy/accuracy_results.json", "no accuracy phase (accuracy/accuracy_results.json is missing)")])
def test_a_missing_file_is_named(tmp_path: Path, missing: str, said: str) -> None:
    folder = report(tmp_path / "report")
    (folder / missing).unlink()
    with pytest.raises(RunFailed, match=r"fix: .*run the accuracy run again") as caught:
        write_accuracy_log(folder, tmp_path / ACCURACY_LOG)
    assert said in str(caught.value) and not (tmp_path / ACCURACY_LOG).exists()


@pytest.mark.parametrize(("accuracy", "phases", "said"), [
    (None, None, "no accuracy phase"),                                            # a performance run's report
    ({"accuracy_scores": [{"dataset_name": "performance", "dataset_type": "performance", "unit_samples": 2}]}, None,
     "scored 0 accuracy data set(s) []"),
    (ACCURACY, {"performance": {"p0": 1, "p1": 0}}, f"no samples of the accuracy phase '{NAME}'")])
def test_a_report_without_an_accuracy_phase(tmp_path: Path, accuracy: dict | None, phases: dict | None,
                                            said: str) -> None:
    folder = report(tmp_path / "report", accuracy=accuracy, phases=phases)
    with pytest.raises(RunFailed) as caught:
        write_accuracy_log(folder, tmp_path / ACCURACY_LOG)
    assert said in str(caught.value)


def test_a_row_without_an_answer(tmp_path: Path) -> None:
    lost = [e for e in EVENTS if e["sample_uuid"] != "a1" or e["event_type"] != "sample.complete"]
    with pytest.raises(RunFailed) as caught:
        write_accuracy_log(report(tmp_path / "lost", lost), tmp_path / ACCURACY_LOG)
    assert f"1 of 3 rows of the accuracy data set '{NAME}' have no answer in events.jsonl: row 1" in str(caught.value)
    for phase in ({"a0": 0, "a1": 1, "a2": 2, "a3": 1},   # a second repeat of row 1 that never completed
                  {"a0": 0, "a2": 2}):                    # row 1 never issued
        with pytest.raises(RunFailed, match=r"1 of 3 rows .* row 1\n"):
            write_accuracy_log(report(tmp_path / str(len(phase)), phases={NAME: phase}), tmp_path / ACCURACY_LOG)
    failed: list[dict] = []
    for e in EVENTS:   # a failed sample: its error event, then a COMPLETE event without data
        failing = e["event_type"] == "sample.complete" and e["sample_uuid"] == "a0"
        failed += [event("error.generic", "a0", ["ErrorData", "HTTP 500", "no KV cache"]),
                   event("sample.complete", "a0")] if failing else [e]
    with pytest.raises(RunFailed) as caught:
        write_accuracy_log(report(tmp_path / "failed", failed), tmp_path / ACCURACY_LOG)
    line = 1 + failed.index(event("sample.complete", "a0"))
    assert f"row 0 (its sample failed: {tmp_path / 'failed' / 'events.jsonl'}:{line})" in str(caught.value)


@pytest.mark.parametrize(("data", "said"), [
    (["TextModelOutput", "", None, [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]],
     "tool calls"),
    (["ErrorData", "HTTP 500", ""], "is not a TextModelOutput")])
def test_an_answer_podium_cannot_read(tmp_path: Path, data: list, said: str) -> None:
    events = [event("sample.complete", "a0", data) if e.get("sample_uuid") == "a0" and
              e["event_type"] == "sample.complete" else e for e in EVENTS]
    with pytest.raises(RunFailed, match=said):
        write_accuracy_log(report(tmp_path / "report", events), tmp_path / ACCURACY_LOG)
