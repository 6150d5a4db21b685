"""deepseek-r1's exact_match and tokens_per_sample equal the round's own `language/deepseek-r1/eval_accuracy.py`, run
beside Podium (tests/references.py) on known-answer accuracy logs over the synthetic set (tasks/rehearsal/deepseek_r1:
every subset, right and wrong answers, MATH-500 answers written differently from the ground truth but equal, and
alike-looking wrong ones), MATH-500 through the same fetched PRM800K grader on both sides. The known answers are
checked without the reference too: each subset scores exactly the rows the builder answered right."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks.accuracy import evaluate_log
from tasks.accuracy.answers import code_answer
from tasks.accuracy.common import decoder
from tasks.datasets.prompts import read_deepseek
from tasks.engines.simulated import answers
from tasks.rehearsal import deepseek_r1 as synthetic
from tasks.rehearsal.data import Built, build
from tests import references
from tests.accuracy_logs import write_log

SCALE = 0.05   # 220 rows: 47 AIME, 10 GPQA, 20 LiveCodeBench, 25 MATH-500, 118 MMLU-Pro


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build(synthetic.BENCHMARK, tmp_path_factory.mktemp("deepseek"), scale=SCALE)


def served(built: Built) -> tuple[Path, list[tuple[int, list[int]]], tuple[str, ...]]:
    """The data set, each row's answer as the simulated engine serves it, and each row's subset."""
    data = Path(built.plan["dataset.accuracy"])
    rows = read_deepseek(data, accuracy=True)
    book = answers.load(built.answers)
    found = [book.find({"prompt": list(p)}) for p in rows.prompts]
    assert all(found), "every prompt has its answer"
    return data, [(i, book.token_ids(a, 20000)) for i, a in enumerate(found) if a], rows.subsets


def score(built: Built, log: Path, grader: Path):
    return evaluate_log("deepseek-r1", log, Path(built.plan["dataset.accuracy"]), Path(built.extra["tokenizer"]),
                        benchmark="deepseek-r1", math_grader=grader, lcb_tests=Path(built.extra["lcb_tests"]))


def test_known_answers_score_as_built(small: Built, prm800k_src: Path, tmp_path: Path) -> None:
    data, rows, subsets = served(small)
    result, _ = score(small, write_log(tmp_path / "log.json", rows, loadgen_layout=True), prm800k_src)
    for subset, problems in synthetic.PROBLEMS.items():
        n = round(problems * SCALE)
        assert subsets.count(subset) == n
        assert result.reported[f"exact_match[{subset}]"] == pytest.approx(
            100 * round(synthetic.CORRECT[subset] * n) / n), subset
    assert result.metrics["exact_match"] > 80.544618 and result.verdict.passed
    # the MATH-500 rows answered right include answers written unlike the ground truth (0.375 for \frac{3}{8} ...)
    truths = read_deepseek(data, accuracy=True).ground_truth
    decode = decoder(Path(small.extra["tokenizer"]), skip_special_tokens=True, benchmark="deepseek-r1")
    boxed = [synthetic.answer("math500", p, True)[1] for p in range(5)]
    assert any(t not in b for t, b in zip(truths[subsets.index("math500"):], boxed, strict=False))
    assert decode(rows[0][1]).startswith(".") and "</think>" in decode(rows[0][1])   # specials skipped, markers kept


def tricky(rows: list[tuple[int, list[int]]], subsets: tuple[str, ...]) -> list[tuple[int, list[int]]]:
    """The served answers with edge cases the two must treat alike: empty outputs, a bracketed artifact, an empty
    and an out-of-range box, and repeated qsl_idx (the first entry counts)."""
    first = {s: next(i for i, name in enumerate(subsets) if name == s) for s in set(subsets)}
    edits = {first["gpqa"]: "['ANSWER: C']", first["mmlu_pro"]: "", first["math500"]: "\\boxed{}",
             first["aime1983"]: "\\boxed{1000}"}
    out = [(i, synthetic.encode(synthetic.FINAL.format(edits[i])) if i in edits else ids) for i, ids in rows]
    return out + [(i, synthetic.encode(synthetic.FINAL.format("ANSWER: A \\boxed{7}"))) for i, _ in rows[:5]]


def test_every_subset_equals_the_reference(small: Built, inference_src: Path, prm800k_src: Path,
                                          tmp_path: Path) -> None:
    data, rows, subsets = served(small)
    kept = [(i, ids) for i, ids in rows if subsets[i] != "livecodebench"]   # the reference lacks its LiveCodeBench
    log = write_log(tmp_path / "log.json", tricky(kept, subsets), loadgen_layout=True)
    ref = references.deepseek_r1(inference_src, prm800k_src, log, data, Path(small.extra["tokenizer"]).parent,
                                 tmp_path / "ref")
    result, text = score(small, log, prm800k_src)
    assert text.splitlines()[-1] == ref.printed   # exact_match and tokens_per_sample, as printed, digit for digit
    assert {k.removeprefix("exact_match[").removesuffix("]"): v for k, v in result.reported.items()} == ref.per_subset
    assert set(ref.per_subset) == {"aime1983", "gpqa", "math500", "mmlu_pro"} and ref.rows == result.samples
    assert 0 < ref.per_subset["math500"] < 100   # right and wrong MATH-500 answers, graded alike


def test_livecodebench_program_is_the_references(small: Built, inference_src: Path, tmp_path: Path) -> None:
    _, rows, subsets = served(small)
    decode = decoder(Path(small.extra["tokenizer"]), skip_special_tokens=True, benchmark="deepseek-r1")
    texts = [decode(ids).strip() for i, ids in rows if subsets[i] == "livecodebench"]
    texts += ["```python\n```", "no code", "```python\nprint(1)\n``` and ```python\nprint(2)\n```"]
    ours = [code_answer(t, harmony=False) for t in texts]
    assert ours == references.deepseek_r1_code(inference_src, texts, tmp_path)
    assert len(set(ours)) > 2
