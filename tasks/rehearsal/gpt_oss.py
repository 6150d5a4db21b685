"""gpt-oss-120b rehearsal data: the MLCommons download's three parquet files at their row counts, the LiveCodeBench
tests the evaluator runs, and a byte-level tokenizer with the harmony markers that decodes the answers.

| file (as the download) | rows | answers served (after the prompt, `input_tokens`) |
|---|---|---|
| perf/perf_eval_ref.parquet | 6396 (performance_sample_count) | harmony text, mean 1278.2 tokens |
| acc/acc_eval_inputs.parquet | 4395: 30 x 8 aime25, 198 x 5 gpqa_diamond, 1055 x 3 livecodebench_v6 | right or wrong |
| acc/acc_eval_compliance_gpqa.parquet | 990 = 198 x 5 (TEST07 min_query_count) | idem, < 10240 tokens |

Counts come from the rules (performance_sample_count, accuracy_sample_count, TEST07's min_query_count) and the
evaluator's repeats (rules/evaluation.yaml); 30 AIME 2025 problems (I and II) and 198 GPQA Diamond questions are the
public sets' sizes, and 1055 LiveCodeBench problems is what is left of 4395 (3 x 1055 = 4395 - 240 - 990). Each
row's answer is right or wrong by a seeded draw at the rates of `CORRECT` (exact_match about 87.7 against the
82.2987 target; TEST07 about 80 against 60.698). A LiveCodeBench problem has three stdin tests of a one-line
program, so the real sandboxed grading runs every answer quickly. Served answers are `<|channel|>analysis
<|message|>`, then `.` filler, then the final channel with the answer, `rehearsal_output_tokens` long.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from submission.base.files import write_atomic
from submission.rules import load_rules
from submission.rules.evaluation import evaluation_constant
from tasks.engines.simulated.answers import ANSWER_TOKENS, METADATA_KEY, OUTPUT_TOKENS
from tasks.rehearsal.data import Built, lengths, scaled, token_column, write_table, write_tokenizer

BENCHMARK = "gpt-oss-120b"
ROUND = "v6.1"
SEED = 61
PROBLEMS = {"aime25": 30, "gpqa_diamond": 198, "livecodebench_v6": 1055}
CORRECT = {"aime25": 0.9, "gpqa_diamond": 0.85, "livecodebench_v6": 0.88}   # share of rows answered right
TEST07_CORRECT = 0.8
TEST07_REPEATS = 5   # acc_eval_compliance_gpqa.parquet: the GPQA Diamond questions, 5 times each (990 = 198 x 5)
# Token lengths: (mean, log-normal sigma, low, high). Only the performance output mean is published (README.md:235,
# TEST09's 1278.20); the rest are ASSUMED, bounded by the plan's limits: prompts <= 3072 tokens (35840 max_seq_len -
# 32768 accuracy max_tokens), accuracy answers < 32768, TEST07 answers < 10240 (its performance-mode max_tokens).
PERF_INPUT = (800.0, 0.6, 64, 8192)
PERF_OUTPUT = (1278.2, 0.7, 16, 10240)
ACC_INPUT = {"aime25": (250.0, 0.3, 64, 3072), "gpqa_diamond": (400.0, 0.4, 64, 3072),
             "livecodebench_v6": (700.0, 0.5, 64, 3072)}
ACC_OUTPUT = {"aime25": (9000.0, 0.5, 512, 32000), "gpqa_diamond": (5000.0, 0.6, 256, 32000),
              "livecodebench_v6": (8000.0, 0.6, 512, 32000)}
TEST07_OUTPUT = (4500.0, 0.6, 256, 10000)
HARMONY = ("<|start|>", "<|channel|>", "<|message|>", "<|return|>", "<|end|>", "<|endoftext|>")
LEAD, FILL = "<|channel|>analysis<|message|>", "."
FINAL = "<|end|><|start|>assistant<|channel|>final<|message|>{}<|return|>"
LCB_TESTS = "livecodebench_tests.jsonl"   # beside the accuracy file, where the evaluator looks by default


_SPECIAL = re.compile("(" + "|".join(re.escape(m) for m in HARMONY) + ")")


def encode(text: str) -> np.ndarray:
    """Token ids of `text` under the build's tokenizer (`write_tokenizer` with the harmony markers): harmony markers
    256+, every other byte its value."""
    ids: list[int] = []
    for part in _SPECIAL.split(text):
        if part in HARMONY:
            ids.append(256 + HARMONY.index(part))
        elif part:
            ids.extend(part.encode("utf-8"))
    return np.asarray(ids, dtype=np.int32)


def _prompts(rng: np.random.Generator, tag: str, sizes: np.ndarray) -> list[np.ndarray]:
    """One prompt per size: a harmony header naming the file and row (so every prompt differs), then seeded
    printable bytes to the size (a header longer than the size stays whole)."""
    body = rng.integers(32, 127, size=int(sizes.sum()), dtype=np.int32)
    out, at = [], 0
    for i, size in enumerate(sizes):
        head = encode(f"<|start|>system<|message|>rehearsal {tag} row {i}<|end|><|start|>user<|message|>")
        rest = max(0, int(size) - len(head))
        out.append(np.concatenate([head, body[at:at + rest]]))
        at += rest
    return out


def _right(rng: np.random.Generator, rows: int, rate: float) -> np.ndarray:
    """Which of `rows` are answered right: exactly round(rate x rows) of them, at seeded places."""
    right = np.zeros(rows, dtype=bool)
    right[rng.permutation(rows)[:round(rate * rows)]] = True
    return right


def _lcb(question: int) -> tuple[str, list[dict[str, str]], str, str]:
    """A LiveCodeBench-style problem: its id, three stdin tests, a right and a wrong program."""
    k, c = 2 + question % 17, question % 23
    tests = [{"input": f"{a} {b}\n", "output": f"{a * k + b + c}\n", "testtype": "stdin"}
             for a, b in ((1, 2), (7, 11), (40, 3 + question % 50))]
    right = f"a, b = map(int, input().split())\nprint(a * {k} + b + {c})"
    return f"rehearsal-lcb-{question:04d}", tests, right, right + " + 1"


def _answer(subset: str, problem: int, right: bool) -> tuple[str, str]:
    """(ground truth, final-channel text) of one row."""
    if subset == "aime25":
        truth = (37 * problem + 11) % 1000
        return str(truth), f"The answer is \\boxed{{{truth if right else (truth + 1) % 1000}}}."
    if subset == "gpqa_diamond":
        truth = "ABCD"[(problem * 7) % 4]
        return truth, truth if right else "ABCD"[("ABCD".index(truth) + 1) % 4]
    qid, _, good, bad = _lcb(problem)
    return qid, f"```python\n{good if right else bad}\n```"


def _rows(rng: np.random.Generator, subset: str, problems: int, repeats: int, rate: float) -> list[tuple[str, str]]:
    right = _right(rng, problems * repeats, rate)
    return [_answer(subset, p, bool(right[p * repeats + r])) for p in range(problems) for r in range(repeats)]


def _table(rng: np.random.Generator, tag: str, inputs: np.ndarray, outputs: np.ndarray,
           finals: list[str]) -> dict:
    return {"input_tokens": token_column(_prompts(rng, tag, inputs)),
            ANSWER_TOKENS: token_column([encode(FINAL.format(text)) for text in finals]),
            OUTPUT_TOKENS: outputs}


def build(out: Path, *, scale: float = 1.0) -> Built:
    rules = load_rules(ROUND)
    bench = rules.benchmark(BENCHMARK)
    files = bench.dataset.files
    repeats = evaluation_constant(BENCHMARK, "dataset_repeats")
    problems = {d: scaled(n, scale) for d, n in PROBLEMS.items()}
    if scale == 1:   # the counts the rules give, or the data is not the rehearsal's full size
        assert sum(problems[d] * repeats[d] for d in problems) == bench.scenario("Offline").accuracy_sample_count
        assert problems["gpqa_diamond"] * TEST07_REPEATS == rules.audit("TEST07").values(BENCHMARK)["min_query_count"]
    rng = np.random.default_rng(SEED)
    meta = {METADATA_KEY.decode(): {"lead": encode(LEAD).tolist(), "fill": int(encode(FILL)[0])}}
    paths = {role: out / name for role, name in files.items()}
    tokenizer = write_tokenizer(out / "model", HARMONY)

    perf_rows = scaled(bench.performance_sample_count, scale)
    perf_out = lengths(rng, perf_rows, *PERF_OUTPUT)
    write_table(_table(rng, "perf", lengths(rng, perf_rows, *PERF_INPUT), perf_out,
                       ["A short answer."] * perf_rows), paths["performance"], meta)

    subsets, truths, finals, inputs, outputs = [], [], [], [], []
    for d, n in problems.items():
        rows = _rows(rng, d, n, repeats[d], CORRECT[d])
        subsets += [d] * len(rows)
        truths += [t for t, _ in rows]
        finals += [f for _, f in rows]
        inputs.append(lengths(rng, len(rows), *ACC_INPUT[d]))
        outputs.append(lengths(rng, len(rows), *ACC_OUTPUT[d]))
    table = _table(rng, "acc", np.concatenate(inputs), np.concatenate(outputs), finals)
    write_table({"dataset": subsets, "ground_truth": truths, **table}, paths["accuracy"], meta)

    t07 = _rows(rng, "gpqa_diamond", problems["gpqa_diamond"], TEST07_REPEATS, TEST07_CORRECT)
    t07_sizes = lengths(rng, len(t07), *ACC_INPUT["gpqa_diamond"])
    table = _table(rng, "test07", t07_sizes, lengths(rng, len(t07), *TEST07_OUTPUT), [f for _, f in t07])
    write_table({"dataset": ["gpqa_diamond"] * len(t07), "ground_truth": [t for t, _ in t07], **table},
                paths["TEST07"], meta)

    tests = []
    for q in range(problems["livecodebench_v6"]):
        qid, cases, _, _ = _lcb(q)
        tests.append(json.dumps({"question_id": qid, "public_test_cases": json.dumps(cases),
                                 "private_test_cases": "[]", "metadata": "{}"}))
    lcb = paths["accuracy"].parent / LCB_TESTS
    write_atomic(lcb, "\n".join(tests) + "\n")

    return Built(
        benchmark=BENCHMARK, root=str(out), seed=SEED, scale=scale,
        plan={"dataset.performance": str(paths["performance"]), "dataset.accuracy": str(paths["accuracy"]),
              "dataset.compliance.TEST07": str(paths["TEST07"]), "model.source": str(tokenizer.parent)},
        answers=tuple(str(paths[r]) for r in ("performance", "accuracy", "TEST07")),
        rows={str(p.relative_to(out)): n for p, n in ((paths["performance"], perf_rows),
                                                      (paths["accuracy"], len(finals)), (paths["TEST07"], len(t07)))},
        real=("row counts (6396, 4395, 990) and the accuracy subset mix with its repeats",
              "file names, columns and the harmony answer format the evaluator reads",
              "performance output length: mean 1278.2 tokens (TEST09's reference)",
              "scoring: the real evaluator, its LiveCodeBench sandbox and TEST07's threshold"),
        not_real=("prompt text and token ids (seeded bytes; a byte-level tokenizer, not o200k_harmony)",
                  "prompt lengths and accuracy/TEST07 output lengths: assumed distributions",
                  "LiveCodeBench problems: one-line programs with three quick tests, not the 1055 real ones",
                  "answers: known to the simulated engine, right at set rates; no model ran"),
        extra={"tokenizer": str(tokenizer), "lcb_tests": str(lcb)})
