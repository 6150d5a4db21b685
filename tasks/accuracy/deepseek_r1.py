"""deepseek-r1 exact match and tokens per sample, as `language/deepseek-r1/eval_accuracy.py` computes them.

The first entry of each qsl_idx counts (the reference skips repeats); its int32 token ids are decoded skipping
special tokens and stripped. Per source data set (the `dataset` column, lower-cased, matched by substring in the
reference's order gpqa, mmlu_pro, math500, aime, livecodebench): GPQA letter A-D and MMLU-Pro letter A-J (the last
`ANSWER: X` / `FINAL ANSWER: X`; MMLU-Pro falls back to the last standalone letter), AIME the integer of the last
`\\boxed{N}` (else `Answer: N`), MATH-500 the content of the last `\\boxed{...}` graded by the PRM800K grader the
reference imports (`tasks.accuracy.math_grader`: the fetched openai/prm800k itself, never a copy), LiveCodeBench
the FIRST ```python block run against the `release_v1` tests of the question_id in `ground_truth`.

    exact_match = 100 * correct / samples         tokens_per_sample = output tokens / samples

printed as the reference prints them (`{'exact_match': ..., 'tokens_per_sample': ..., 'num-samples': N}`, Python's
float repr), the line the checker's patterns read. Each source data set's own exact match is in the notes and in
`AccuracyResult.reported` (`exact_match[<dataset>]`), over its rows as the reference's `prompt_accuracy` column.
Podium's choices where the reference has none: an index outside the data set is an error, not a warning; a MATH-500
answer whose grading runs over `math_grader.ANSWER_TIMEOUT_S` is scored wrong (the reference waits).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Self

from tasks.accuracy import AccuracyResult
from tasks.accuracy import math_grader as grader
from tasks.accuracy.answers import aime_answer, choice_answer, code_answer, int_correct
from tasks.accuracy.common import decoder, subset_kind, unique_entries
from tasks.accuracy.livecodebench import CodeGrading
from tasks.datasets.prompts import read_deepseek

BENCHMARK = "deepseek-r1"
KINDS = ("gpqa", "mmlu_pro", "math500", "aime", "livecodebench")   # eval_accuracy.py DATASET_EVALUATORS, in order
LETTERS = {"gpqa": "ABCD", "mmlu_pro": "ABCDEFGHIJ"}


def boxed(text: str) -> str | None:
    """The content of the last \\boxed{...}, braces balanced, stripped; None when there is none or it is unclosed."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed{")
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            if depth == 0:
                return text[i:j].strip()
            depth -= 1
    return None


def choice_ok(parsed: str | None, truth: str, letters: str) -> bool:
    """The reference's `evaluate_multiple_choice`: both present, upper-cased alike, the letter one of `letters`."""
    if not parsed or not truth:
        return False
    return parsed.upper() in letters and parsed.upper() == truth.upper()


@dataclass(frozen=True)
class DeepSeekExactMatch(CodeGrading):
    name: str = BENCHMARK
    math_grader: Path | None = None   # openai/prm800k as fetched (`podium fetch-grader`; dataset.math_grader)

    def with_options(self, *, math_grader: Path | None = None, **options: object) -> Self:
        return replace(super().with_options(**options), math_grader=math_grader or self.math_grader)

    def evaluate(self, accuracy_log: Path, dataset: Path, tokenizer: Path | None) -> AccuracyResult:
        data = read_deepseek(Path(dataset), accuracy=True)
        decode = decoder(tokenizer, skip_special_tokens=True, benchmark=BENCHMARK)
        entries = unique_entries(accuracy_log, len(data), Path(dataset))
        right: list[bool] = []
        names: list[str] = []
        output_tokens = 0
        math, code = [], []   # (row, parsed answer, truth) graded in batches below
        for row, entry in enumerate(entries):
            ids = entry.tokens()
            output_tokens += len(ids)
            text, truth = decode(ids).strip(), data.ground_truth[entry.qsl_idx]
            names.append(data.subsets[entry.qsl_idx])
            kind = subset_kind(names[-1], KINDS, BENCHMARK)
            right.append(False)
            if kind in LETTERS:
                right[row] = choice_ok(choice_answer(text, LETTERS[kind][-1], harmony=False), truth, LETTERS[kind])
            elif kind == "aime":
                right[row] = int_correct(aime_answer(text), truth)
            elif kind == "math500":
                parsed = boxed(text)
                if parsed and truth:
                    math.append((row, parsed, truth))
            elif (program := code_answer(text, harmony=False)) and truth:   # an empty block is wrong there too
                code.append((row, program, truth))
        graded = grader.grade(self.math_grader, [(p, t) for _, p, t in math]) if math else grader.Graded((), 0)
        for (row, _, _), ok in zip(math, graded.verdicts, strict=True):
            right[row] = ok
        passed = self.grade([(p, t) for _, p, t in code], Path(dataset)) if code else []
        for (row, _, _), ok in zip(code, passed, strict=True):
            right[row] = bool(ok)
        n = len(entries)
        per: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for name, ok in zip(names, right, strict=True):
            per[name][0] += ok
            per[name][1] += 1
        notes = tuple(f"{d}: {c} of {t} correct" for d, (c, t) in sorted(per.items()))
        if graded.timed_out:
            notes += (f"{graded.timed_out} MATH-500 answer(s) ran over the grader's {grader.ANSWER_TIMEOUT_S} s and "
                      "were scored wrong",)
        unrun = passed.count(None)
        if unrun:
            notes += (f"{unrun} LiveCodeBench answer(s) name a question_id the tests do not hold (scored wrong)",)
        metrics = {"exact_match": 100.0 * sum(right) / n if n else 0.0,
                   "TOKENS_PER_SAMPLE": output_tokens / n if n else 0.0}
        reported = {f"exact_match[{d}]": 100.0 * c / t for d, (c, t) in sorted(per.items())}
        return AccuracyResult(metrics, n, notes, reported=reported)

    def accuracy_txt(self, result: AccuracyResult) -> str:
        m = result.metrics
        printed = {"exact_match": m["exact_match"], "tokens_per_sample": m["TOKENS_PER_SAMPLE"],
                   "num-samples": result.samples}
        return "\n".join(["deepseek-r1 exact match (Podium; definition of language/deepseek-r1/eval_accuracy.py, "
                          "MATH-500 by the PRM800K grader)", *result.notes, str(printed)]) + "\n"


EVALUATOR = DeepSeekExactMatch()
