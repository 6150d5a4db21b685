"""Synthetic rehearsal data (tasks/rehearsal): scaled-down builds through the same code as the full size, read by the
benchmark's own readers, served by the simulated engine's answer book, and scored by Podium's real evaluators (the
ones checked equal to the official scripts) above the round's targets; the full-size gpt-oss set once (about 1 s)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer
from typer.testing import CliRunner

from submission.rules import load_rules
from tasks.accuracy.gpt_oss import GptOssExactMatch
from tasks.accuracy.qwen3_vl import Qwen3VLCategoryF1
from tasks.datasets.prompts import read_gpt_oss
from tasks.datasets.requests import build_requests
from tasks.datasets.shopify import read_products
from tasks.engines.simulated import answers
from tasks.engines.simulated.queueing import SimConfig
from tasks.engines.simulated.server import running
from tasks.launchers.local import free_port
from tasks.rehearsal.data import Built, build, load
from tests.accuracy_logs import write_log

RULES = load_rules("v6.1")
GPT, QWEN = "gpt-oss-120b", "qwen3-vl-235b-a22b"


def target(benchmark: str, scenario: str = "Offline") -> float:
    return float(RULES.benchmark(benchmark).scenario(scenario).accuracy[0].target)


@pytest.fixture(scope="module")
def gpt_small(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build(GPT, tmp_path_factory.mktemp("gpt"), scale=0.02)


@pytest.fixture(scope="module")
def qwen_small(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build(QWEN, tmp_path_factory.mktemp("qwen"), scale=0.002)


def served_log(book: answers.AnswerBook, data: Path, out: Path, max_tokens: int) -> Path:
    """The accuracy log the simulated engine's answers make: every row's prompt looked up, answered at its length."""
    rows = read_gpt_oss(data, accuracy=False).prompts
    found = [book.find({"prompt": list(p)}) for p in rows]
    assert all(found), "every prompt of the data set has its answer"
    return write_log(out, [(i, book.token_ids(a, max_tokens)) for i, a in enumerate(found) if a])


def test_gpt_oss_schema_lengths_and_scores_above_target(gpt_small: Built, tmp_path: Path) -> None:
    acc = read_gpt_oss(Path(gpt_small.plan["dataset.accuracy"]), accuracy=True)
    assert set(acc.subsets) == {"aime25", "gpqa_diamond", "livecodebench_v6"}
    assert len(acc) == gpt_small.rows["acc/acc_eval_inputs.parquet"] == 8 + 4 * 5 + 21 * 3
    assert max(map(len, acc.prompts)) <= 35840 - 32768   # the plan's max_seq_len leaves 3072 for a prompt
    perf = pq.read_table(gpt_small.plan["dataset.performance"]).column(answers.OUTPUT_TOKENS).to_numpy()
    assert abs(perf.mean() - 1278.2) < 0.5 and perf.max() <= 10240   # TEST09's reference mean, max_tokens
    book = answers.load(gpt_small.answers)
    evaluator = GptOssExactMatch(workers=2)
    tokenizer = Path(gpt_small.plan["model.source"])
    result = evaluator.evaluate(served_log(book, Path(gpt_small.plan["dataset.accuracy"]), tmp_path / "acc.json",
                                           32768), Path(gpt_small.plan["dataset.accuracy"]), tokenizer)
    assert target(GPT) < result.metrics["exact_match"] < 100, result.notes   # wrong answers are scored wrong
    assert not [n for n in result.notes if "no harmony final channel" in n or "had no code block" in n]
    test07 = Path(gpt_small.plan["dataset.compliance.TEST07"])
    audit = evaluator.evaluate(served_log(book, test07, tmp_path / "t07.json", 10240), test07, tokenizer)
    threshold = RULES.audit("TEST07").values(GPT)["test07_accuracy_threshold"]
    assert threshold < audit.metrics["exact_match"] < 100


def test_qwen_schema_and_scores_above_both_targets(qwen_small: Built, tmp_path: Path) -> None:
    book = answers.load(qwen_small.answers)
    for field, scenario in (("dataset.accuracy", "Offline"), ("dataset.scenarios.Interactive", "Interactive")):
        data = Path(qwen_small.plan[field])
        products = read_products(data, accuracy=True).products
        assert all(p.image_format == "png" and p.category in p.categories for p in products)
        requests = build_requests(QWEN, data, "accuracy", max_tokens=150)
        log = []
        for i in range(len(requests)):
            found = book.find(requests.body(i))
            assert found is not None and found.tokens <= 150
            log.append((i, "".join(answers.text_pieces(found, 150)).encode()))
        result = Qwen3VLCategoryF1().evaluate(write_log(tmp_path / f"{scenario}.json", log), data, None)
        assert target(QWEN, scenario) < result.metrics["F1_HIERARCHICAL"] < 1, result.notes
    assert qwen_small.rows == {"shopify_product_catalogue.parquet": 97, "shopify_product_catalogue_8k.parquet": 16}
    model = Path(qwen_small.plan["model.source"])   # the endpoints client refuses a model folder without a tokenizer
    assert {"tokenizer.json", "tokenizer_config.json"} <= {p.name for p in model.iterdir()}
    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    answer = json.loads(pq.read_table(qwen_small.plan["dataset.accuracy"])[answers.ANSWER_TEXT][0].as_py())
    assert json.loads(tokenizer.decode(tokenizer.encode(json.dumps(answer)).ids)) == answer
    assert any("image bytes" in line for line in qwen_small.not_real)


def test_the_engine_serves_known_answers_at_their_lengths(gpt_small: Built, qwen_small: Built) -> None:
    book = answers.load([*gpt_small.answers, *qwen_small.answers])
    table = pq.read_table(gpt_small.plan["dataset.accuracy"])
    prompt, length = table["input_tokens"][0].as_py(), table[answers.OUTPUT_TOKENS][0].as_py()
    product = read_products(qwen_small.plan["dataset.accuracy"]).products[3]
    with running(SimConfig(output_tokens=8, tpot_ms=0.01, prefill_ms=0.01), free_port(), answers=book) as url, \
            httpx.Client(base_url=url, timeout=30) as http:
        known = http.post("/v1/completions", json={"prompt": prompt, "max_tokens": 32768}).json()
        capped = http.post("/v1/completions", json={"prompt": prompt, "max_tokens": 100}).json()
        unknown = http.post("/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 100}).json()
        chat = http.post("/v1/chat/completions", json={"max_tokens": 150, "messages": [
            {"role": "user", "content": [{"type": "text", "text": f"Title:\n{product.title}\n"}]}]}).json()
    assert len(known["choices"][0]["token_ids"]) == known["usage"]["completion_tokens"] == length
    assert known["choices"][0]["token_ids"][-1] == 256 + 3   # <|return|>: the answer ends the output
    assert capped["usage"]["completion_tokens"] == 100 and unknown["usage"]["completion_tokens"] == 8
    assert json.loads(chat["choices"][0]["message"]["content"])["category"]   # the JSON answer, whitespace-padded


def test_full_size_gpt_oss_counts(tmp_path: Path) -> None:
    built = build(GPT, tmp_path)
    assert built.rows == {"perf/perf_eval_ref.parquet": 6396, "acc/acc_eval_inputs.parquet": 4395,
                          "acc/acc_eval_compliance_gpqa.parquet": 990}
    subsets = pq.read_table(built.plan["dataset.accuracy"], columns=["dataset"])["dataset"].to_pylist()
    assert {s: subsets.count(s) for s in set(subsets)} == {"aime25": 240, "gpqa_diamond": 990, "livecodebench_v6": 3165}
    assert len(answers.load(built.answers)) == 6396 + 4395 + 990   # every prompt differs
    assert load(tmp_path) == built
    again = build(GPT, tmp_path / "again")   # seeded: the same bytes every time
    for name in built.rows:
        assert pq.read_table(Path(built.root) / name).equals(pq.read_table(Path(again.root) / name))


def test_cli_builds_and_names_unknown_benchmarks(tmp_path: Path) -> None:
    from flows.cli import app

    done = CliRunner().invoke(app, ["dev", "rehearsal-data", "--benchmark", GPT, "--out", str(tmp_path),
                                    "--scale", "0.01"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert report["rows"]["acc/acc_eval_inputs.parquet"] == 8 + 2 * 5 + 11 * 3 and report["bytes"] > 0
    assert {"build_s", "peak_rss_mib", "plan", "answers", "not_real"} <= set(report)
    wrong = CliRunner().invoke(app, ["dev", "rehearsal-data", "--benchmark", "gpt-oss", "--out", str(tmp_path)])
    assert wrong.exit_code == 2 and "did you mean 'gpt-oss-120b'" in wrong.output
