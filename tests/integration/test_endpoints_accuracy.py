"""The endpoints client's accuracy score, `podium score` and the official evaluator agree on the same answers, on the
known-answer Qwen3-VL cases (tests/qwen3_vl_cases.py: code fences, nulls, extra keys, duplicate keys, lax booleans,
...): a stub engine answers each request with its case's answer, the REAL client runs an accuracy run (`--mode both`),
`tasks.endpoints.answers` hands the accuracy phase's answers to Podium's reference evaluator, and mlcommons/inference
`evaluation.py` scores the same log (tests/references.py). The stub answers the performance phase (the first requests)
with the truth, so taking that phase's answers instead would score 1.0. One client run, about 10 s."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from submission.results.logs import parse_accuracy_log
from submission.results.runs import RunSpec
from tasks.accuracy import score
from tasks.accuracy.qwen3_vl import parse_answer
from tasks.endpoints import answers, measure, runner
from tasks.engines import Endpoint
from tests import references
from tests.local_http import LocalServer
from tests.qwen3_vl_cases import CATS, LOG, ROWS

pytestmark = pytest.mark.integration
BENCH = "qwen3-vl-235b-a22b"
TITLE = re.compile(r"The title of the product is the following:\n```text\n(.*?)\n```", re.DOTALL)  # the q3vl preset
CHUNK = 7   # characters per streamed event


class CaseEngine(LocalServer):
    """An OpenAI-compatible chat engine that answers each request with the answer of the product its title names:
    streamed as server-sent events when the request says `stream: true`, else as one JSON object. The first `decoys`
    requests (the client's performance phase) get the true answer instead."""

    def __init__(self, answers: dict[str, str], truths: dict[str, str], decoys: int) -> None:
        self.answers, self.truths, self.decoys = answers, truths, decoys
        self.served: list[bool] = []       # `stream` of each request
        self.lock = threading.Lock()
        super().__init__(CaseHandler)


class CaseHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _send(self, body: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._send(json.dumps({"object": "list", "data": [{"id": "stub", "object": "model"}]}).encode(),
                   "application/json")

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        text = "".join(part["text"] for message in request["messages"] if isinstance(message["content"], list)
                       for part in message["content"] if part["type"] == "text")
        title = TITLE.search(text).group(1)
        engine = self.server.fake   # type: ignore[attr-defined]
        with engine.lock:
            engine.served.append(bool(request.get("stream")))
            decoy = len(engine.served) <= engine.decoys
        answer = engine.truths[title] if decoy else engine.answers[title]
        if not request.get("stream"):
            self._send(json.dumps({"id": "stub", "object": "chat.completion", "model": "stub", "choices": [
                {"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}]}).encode(),
                "application/json")
            return
        events = [{"choices": [{"index": 0, "delta": {"content": answer[i:i + CHUNK]}}]}
                  for i in range(0, len(answer), CHUNK)]
        events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        self._send(b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n",
                   "text/event-stream")

    def log_message(self, *args: object) -> None:
        pass


def cases_parquet(path: Path) -> list[str]:
    """The cases in the Shopify schema, one row per entry of the reference run's log (row 2's case twice), so the
    official F1 of that log is the F1 of one answer per row; the rows' titles."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    image = io.BytesIO()
    Image.new("RGB", (4, 3), (1, 2, 3)).save(image, format="PNG")
    rows = [ROWS[i] for i in LOG]
    titles = [f"case {k:02d}" for k in range(len(rows))]
    pq.write_table(pa.table({
        "product_title": titles, "product_description": ["d"] * len(rows),
        "potential_product_categories": [CATS] * len(rows),
        "product_image": [{"bytes": image.getvalue(), "path": None}] * len(rows),
        "ground_truth_category": [r[0] for r in rows], "ground_truth_brand": [r[1] for r in rows],
        "ground_truth_is_secondhand": [r[2] for r in rows]}), path)
    return titles


def test_the_clients_score_and_podiums_agree_on_the_known_answer_cases(client: Path, inference_src: Path,
                                                                         tmp_path: Path) -> None:
    from tasks.engines.smoke import model

    model.build(tmp_path / "model")   # a tokenizer for the client's token counts
    titles = cases_parquet(tmp_path / "cases.parquet")
    rows = [ROWS[i] for i in LOG]
    case_answers = {t: r[3].decode() for t, r in zip(titles, rows, strict=True)}
    truths = {t: json.dumps({"category": r[0], "brand": r[1], "is_secondhand": r[2]})
              for t, r in zip(titles, rows, strict=True)}
    spec = RunSpec(plan="endpoints", profile="smoke", round="v6.1", system="cpu", benchmark=BENCH, scenario="Offline",
                   mode="accuracy", harness="endpoints", loadgen_model=BENCH, loadgen_scenario="Offline",
                   user_conf=((f"{BENCH}.Offline.target_qps", "1"), (f"{BENCH}.Offline.min_duration", "100")),
                   dataset=str(tmp_path / "cases.parquet"), dataset_sha256="-", model_sha256="-", engine="stub",
                   max_tokens=64, temperature=0.0, max_concurrency=4)
    run_dir = tmp_path / "run"
    with CaseEngine(case_answers, truths, decoys=len(rows)) as engine:
        result = runner.run(spec, Endpoint(engine.url, "stub", False, False), run_dir, tokenizer=tmp_path / "model",
                            data_dir=tmp_path / "converted", timeout_s=120, client=client)
        plain = urllib.request.Request(f"{engine.url}/v1/chat/completions", json.dumps({"messages": [
            {"role": "user", "content": [{"type": "text", "text": f"The title of the product is the following:\n"
                                                                  f"```text\n{titles[4]}\n```"}]}]}).encode())
        with urllib.request.urlopen(plain, timeout=10) as reply:   # the stub's non-streaming answer
            assert json.loads(reply.read())["choices"][0]["message"]["content"] == case_answers[titles[4]]
    # the performance phase (one whole data set: 1 q/s x 0.1 s x 1.1, rounded up), then the accuracy phase, streamed
    assert result.issued == len(rows) and engine.served == [True] * (2 * len(rows)) + [False]

    log = run_dir / answers.ACCURACY_LOG
    assert answers.write_accuracy_log(run_dir / "report", log) == len(rows)
    entries = parse_accuracy_log(log)
    assert sorted(e.qsl_idx for e in entries) == list(range(len(rows)))     # each row once, as the staged row
    for entry in entries:
        assert bytes.fromhex(entry.data).decode() == case_answers[titles[entry.qsl_idx]]

    ours = score(BENCH, run_dir, tmp_path / "cases.parquet", None, benchmark=BENCH).metrics["F1_HIERARCHICAL"]
    assert result.accuracy == pytest.approx(ours, abs=measure.AGREE)
    data = tmp_path / "reference-data"   # the folder layout datasets.load_dataset reads: data/train-*.parquet
    (data / "data").mkdir(parents=True)
    shutil.copy(tmp_path / "cases.parquet", data / "data" / "train-00000.parquet")
    reference = references.qwen3_vl(inference_src, log, data, tmp_path / "reference")   # the official evaluator
    f1_line = reference.accuracy_txt.splitlines()[2]
    assert (run_dir / "accuracy.txt").read_text().splitlines()[2] == f1_line   # {"f1": ...}, every digit
    assert result.accuracy == pytest.approx(json.loads(f1_line)["f1"], abs=1e-6)
    assert reference.rejected == sum(parse_answer(a) is None for a in case_answers.values()) > 0
    scored = measure.score_answers(spec, run_dir, None, None)    # the endpoints run step's own cross-check
    assert scored.metrics["F1_HIERARCHICAL"] == ours and scored.verdict is not None and not scored.verdict.passed


def test_where_the_client_and_the_reference_differ(client: Path, inference_src: Path, tmp_path: Path) -> None:
    """Outside the known-answer cases they differ on a category ending in the separator: the client strips the
    answer's category before splitting it (evaluation/scoring.py `_parse_response_to_category`), the reference
    (evaluation.py, `pred_item.category`) and Podium do not. Pinned so a client that changes it is noticed."""
    from tasks.accuracy.qwen3_vl import prefix_components

    answer = json.dumps({"category": "A > B > ", "brand": "Acme", "is_secondhand": False})
    script = ("import sys, json\nfrom inference_endpoint.evaluation.scoring import _match_hierarchical_paths as m, "
              "_parse_response_to_category as p\nprint(json.dumps(m(p(sys.argv[1], 'A > B > C'), 'A > B > C')))")
    found = subprocess.run([str(client.parent / "python"), "-c", script, answer], capture_output=True, text=True,
                           timeout=60, check=True)
    assert json.loads(found.stdout) == [1, 2, 3]                                       # "A > B >": A, then "B >"
    official = references.qwen3_vl_components(inference_src, answer, "A > B > C", tmp_path)
    assert prefix_components(parse_answer(answer).category, "A > B > C", " > ") == official == (2, 3, 3)   # A, B, ""
