"""deepseek-r1 rehearsal data: the MLCommons download's 4388-sample pickle (performance and accuracy alike) in the
reference's columns, the LiveCodeBench tests its evaluator runs, and a tokenizer stand-in with DeepSeek-R1's markers.

| file (as the download) | rows | what |
|---|---|---|
| mlperf_deepseek_r1_dataset_4388_fp8_eval.pkl | 4388 | the columns `dataset`, `question`, `text_input`, |
| | | `tok_input`, `tok_input_len`, `ground_truth` |
| ….pkl.rehearsal.parquet | 4388 | the answers the simulated engine serves (`input_tokens` = `tok_input`) |
| livecodebench_tests.jsonl | 400 | one quick stdin problem per LiveCodeBench row (release_v1's format) |
| model/ | | tokenizer.json and tokenizer_config.json (as DeepSeek-R1's: a fast tokenizer, no clean-up of spaces), |
| | | generation_config.json (its EOS id, which TEST06 checks) |

The subset mix is ASSUMED (the round's sources do not publish it): MATH-500's 500 problems, GPQA Diamond's 198,
LiveCodeBench release_v1's 400, AIME 1983-2024's 933, and MMLU-Pro the remaining 2357. Each row is answered right or
wrong by a seeded draw at the rates of `CORRECT` (exact_match about 82.1 against the 80.5446 target), in the forms
the reference's parsers read, several per subset: tagged and parenthesised letters and MMLU-Pro's bare letter,
boxed and `Answer:` integers, MATH-500 answers written as the ground truth or differently but equal (`0.375` for
`\\frac{3}{8}`, `\\sqrt{12}` for `2\\sqrt{3}`, `(C)` for `\\text{(C)}`) and wrong ones that look alike (`6/16`),
and LiveCodeBench programs whose FIRST block is the one that counts. Served answers are `.` filler, then
`\\n</think>\\n\\n`, the answer and one EOS, `rehearsal_output_tokens` long: mean 3886.2 tokens, the checker's reference
tokens_per_sample.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from submission.base.files import replace_atomic, temporary, write_atomic
from submission.rules import load_rules
from tasks.engines.simulated.answers import ANSWER_TOKENS, METADATA_KEY, OUTPUT_TOKENS, PROMPT_COLUMN
from tasks.rehearsal.data import ANSWERS_SUFFIX, Built, lengths, scaled, token_column, write_table, write_tokenizer

BENCHMARK = "deepseek-r1"
ROUND = "v6.1"
SEED = 44
PROBLEMS = {"aime1983": 933, "gpqa": 198, "livecodebench": 400, "math500": 500, "mmlu_pro": 2357}   # ASSUMED mix
CORRECT = {"aime1983": 0.78, "gpqa": 0.72, "livecodebench": 0.62, "math500": 0.96, "mmlu_pro": 0.85}
INPUT = (800.0, 0.6, 64, 8192)              # ASSUMED prompt lengths
OUTPUT = (3886.2274, 0.8, 256, 19990)       # constants.py's reference tokens_per_sample; < max_tokens 20000
BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"   # special: decoding skips them
ADDED = ("<｜User｜>", "<｜Assistant｜>", "<think>", "</think>")   # not special: decoding keeps them
FILL, FINAL = ".", "\n</think>\n\n{}" + EOS
LCB_TESTS = "livecodebench_tests.jsonl"
_MARKERS = (BOS, EOS, *ADDED)
_SPLIT = re.compile("(" + "|".join(re.escape(m) for m in _MARKERS) + ")")


def encode(text: str) -> list[int]:
    """Token ids under the build's tokenizer: BOS 256, EOS 257, the added markers 258 on, every other byte its value."""
    ids: list[int] = []
    for part in _SPLIT.split(text):
        if part in _MARKERS:
            ids.append(256 + _MARKERS.index(part))
        elif part:
            ids.extend(part.encode("utf-8"))
    return ids


def lcb_problem(q: int) -> tuple[str, list[dict[str, str]], str, str]:
    """A LiveCodeBench-style problem: its question_id, three stdin tests, a right and a wrong program."""
    k, c = 2 + q % 13, q % 19
    tests = [{"input": f"{a} {b}\n", "output": f"{a * k + b - c}\n", "testtype": "stdin"}
             for a, b in ((1, 2), (9, 4), (30, 7 + q % 40))]
    right = f"a, b = map(int, input().split())\nprint(a * {k} + b - {c})"
    return f"rehearsal-lcb-r1-{q:04d}", tests, right, f"a, b = map(int, input().split())\nprint(a * {k} + b - {c} + 1)"


def _math(p: int, right: bool) -> tuple[str, str]:
    """(ground truth, boxed content) of MATH-500 problem p: five answer kinds, right ones written as the truth or
    differently but equal (by the PRM800K grader), wrong ones different or looking alike."""
    form, v = p % 5, p // 5
    if form == 0:
        n = 2 + (13 * p) % 200
        return str(n), (str(n), f"{n}.0")[v % 2] if right else str(n + 1)
    if form == 1:
        a = (1, 3, 5, 7)[v % 4]
        return f"\\frac{{{a}}}{{8}}", (f"\\dfrac{{{a}}}{{8}}", f"{a}/8", f"{a / 8:g}")[v % 3] if right else \
            (f"{2 * a}/16", f"\\frac{{{a}}}{{7}}")[v % 2]
    if form == 2:
        k, m = 2 + v % 4, (2, 3, 5, 7)[v % 4]
        return f"{k}\\sqrt{{{m}}}", (f"{k}\\sqrt{{{m}}}", f"\\sqrt{{{k * k * m}}}")[v % 2] if right else \
            f"{k + 1}\\sqrt{{{m}}}"
    if form == 3:
        x, y = 1 + v % 9, 11 + v % 7
        return f"({x}, {y})", f"({x},{y})" if right else f"({y}, {x})"
    letter = "ABCDE"[v % 5]
    return f"\\text{{({letter})}}", (f"({letter})", letter)[v % 2] if right else f"({'ABCDE'[(v + 1) % 5]})"


def answer(subset: str, p: int, right: bool) -> tuple[str, str]:
    """(ground truth, answer text) of problem p of `subset`."""
    if subset in ("gpqa", "mmlu_pro"):
        letters = "ABCD" if subset == "gpqa" else "ABCDEFGHIJ"
        truth = letters[(7 * p) % len(letters)]
        said = truth if right else letters[(letters.index(truth) + 1) % len(letters)]
        forms = [f"ANSWER: {said}", f"FINAL ANSWER: ({said})", f"Answer: {said.lower()}"]
        if subset == "mmlu_pro":
            forms.append(f"The answer is {said}")   # no tag: the reference's last-standalone-letter fallback
        return truth, forms[p % len(forms)]
    if subset == "aime1983":
        truth = (37 * p + 11) % 1000
        said = truth if right else (truth + 1) % 1000
        return str(truth), (f"The answer is \\boxed{{{said}}}.", f"Answer: {said}")[p % 2]
    if subset == "math500":
        truth, said = _math(p, right)
        return truth, f"So the final answer is \\boxed{{{said}}}."
    qid, _, good, bad = lcb_problem(p)
    block = "```python\n{}\n```"
    text = (block.format(good) + "\nA variant:\n" + block.format(bad)) if p % 2 else block.format(good)
    return qid, text if right else block.format(bad) + "\nBetter:\n" + block.format(good)


def _prompts(rng: np.random.Generator, subsets: list[str], problems: list[int], sizes: np.ndarray) -> list[list[int]]:
    body = rng.integers(32, 127, size=int(sizes.sum()), dtype=np.int32)
    out, at = [], 0
    for subset, p, size in zip(subsets, problems, sizes, strict=True):
        head = encode(f"{BOS}<｜User｜>rehearsal {subset} problem {p}: ")
        tail = encode("<｜Assistant｜><think>\n")
        rest = max(0, int(size) - len(head) - len(tail))
        out.append([*head, *body[at:at + rest].tolist(), *tail])
        at += rest
    return out


def _right(rng: np.random.Generator, rows: int, rate: float) -> np.ndarray:
    right = np.zeros(rows, dtype=bool)
    right[rng.permutation(rows)[:round(rate * rows)]] = True
    return right


def build(out: Path, *, scale: float = 1.0) -> Built:
    import pandas as pd

    bench = load_rules(ROUND).benchmark(BENCHMARK)
    problems = {d: scaled(n, scale) for d, n in PROBLEMS.items()}
    if scale == 1:   # the rules' count, or the data is not the rehearsal's full size
        assert sum(problems.values()) == bench.dataset.size == bench.scenario("Offline").accuracy_sample_count
    rng = np.random.default_rng(SEED)
    subsets, numbers, truths, texts = [], [], [], []
    for d, n in problems.items():
        right = _right(rng, n, CORRECT[d])
        for p in range(n):
            truth, text = answer(d, p, bool(right[p]))
            subsets.append(d)
            numbers.append(p)
            truths.append(truth)
            texts.append(text)
    prompts = _prompts(rng, subsets, numbers, lengths(rng, len(subsets), *INPUT))
    served = lengths(rng, len(subsets), *OUTPUT)
    path = out / bench.dataset.files["accuracy"]
    frame = pd.DataFrame({"dataset": subsets, "question": [f"rehearsal {d} problem {p}" for d, p in
                                                           zip(subsets, numbers, strict=True)],
                          "text_input": [f"rehearsal {d} problem {p}" for d, p in zip(subsets, numbers, strict=True)],
                          "tok_input": prompts, "tok_input_len": [len(p) for p in prompts], "ground_truth": truths})
    tmp = temporary(path)
    frame.to_pickle(tmp)
    replace_atomic(tmp, path)
    answers = Path(str(path) + ANSWERS_SUFFIX)
    meta = {METADATA_KEY.decode(): {"lead": [], "fill": encode(FILL)[0]}}
    write_table({PROMPT_COLUMN: token_column([np.asarray(p, dtype=np.int32) for p in prompts]),
                 ANSWER_TOKENS: token_column([np.asarray(encode(FINAL.format(t)), dtype=np.int32) for t in texts]),
                 OUTPUT_TOKENS: served}, answers, meta)
    tests = []
    for q in range(problems["livecodebench"]):
        qid, cases, _, _ = lcb_problem(q)
        tests.append(json.dumps({"question_id": qid, "public_test_cases": json.dumps(cases),
                                 "private_test_cases": "[]", "metadata": "{}"}))
    lcb = out / LCB_TESTS
    write_atomic(lcb, "\n".join(tests) + "\n")
    model = out / "model"
    tokenizer = write_tokenizer(model, (BOS, EOS), added=ADDED, config={
        "bos_token": BOS, "eos_token": EOS, "clean_up_tokenization_spaces": False, "model_max_length": 163840})
    write_atomic(model / "generation_config.json", json.dumps({"bos_token_id": 256, "eos_token_id": 257}) + "\n")
    return Built(
        benchmark=BENCHMARK, root=str(out), seed=SEED, scale=scale,
        plan={"dataset.performance": str(path), "dataset.accuracy": str(path), "model.source": str(model)},
        answers=(str(answers),), rows={str(path.relative_to(out)): len(subsets)},
        real=("row count (4388), file name and the columns the readers and the reference evaluator read",
              "the answer formats the reference's parsers read, MATH-500 graded by the PRM800K grader itself",
              "output length: mean 3886.2 tokens (the checker's reference tokens_per_sample)",
              "scoring: the real evaluator, its LiveCodeBench sandbox, TEST06's checks"),
        not_real=("the subset mix (assumed: 933 AIME, 198 GPQA, 400 LiveCodeBench, 500 MATH-500, 2357 MMLU-Pro)",
                  "prompt text and token ids (seeded bytes; a byte-level tokenizer, not DeepSeek-R1's)",
                  "prompt lengths and the spread of output lengths: assumed distributions",
                  "LiveCodeBench problems: one-line programs with three quick tests, not release_v1's 400",
                  "answers: known to the simulated engine, right at set rates; no model ran"),
        extra={"tokenizer": str(tokenizer), "lcb_tests": str(lcb)})
