"""deepseek-r1 exact match and tokens per sample, after `language/deepseek-r1/eval_accuracy.py`.

Each entry's int32 token ids are decoded skipping special tokens. Per source data set (`dataset` column, matched
by substring): GPQA letter A-D and MMLU-Pro letter A-J (the last `ANSWER: X` / `FINAL ANSWER: X`; MMLU-Pro falls
back to the last standalone letter), AIME the integer of the last `\\boxed{N}` (else `Answer: N`), MATH-500 the
content of the last `\\boxed{...}`, LiveCodeBench the FIRST ```python block run against its tests.

    exact_match = 100 * correct / samples         tokens_per_sample = output tokens / samples

What Podium cannot reproduce exactly: MATH-500 answers are graded by the PRM800K grader (sympy-based
equivalence) in the reference; Podium compares normalised strings and numbers (`math_equal`), which can call an
equivalent but differently written answer wrong. LiveCodeBench needs the release_v1 tests (see livecodebench.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from tasks.accuracy import AccuracyResult
from tasks.accuracy.answers import aime_answer, choice_answer, choice_correct, code_answer, int_correct
from tasks.accuracy.common import decoder, subset_kind, unique_entries
from tasks.accuracy.livecodebench import CodeGrading
from tasks.datasets.prompts import read_deepseek

BENCHMARK = "deepseek-r1"
KINDS = ("gpqa", "mmlu_pro", "math500", "aime", "livecodebench")


def boxed(text: str) -> str | None:
    """The content of the last \\boxed{...}, braces balanced; None when there is none or it is unclosed."""
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


_TEXT = re.compile(r"\\text\{([^{}]*)\}")


def _normal(answer: str) -> str:
    s = _TEXT.sub(r"\1", answer.strip().strip("$"))
    for old, new in (("\\left", ""), ("\\right", ""), ("\\!", ""), ("\\,", ""), ("dfrac", "frac"),
                     ("tfrac", "frac"), ("^\\circ", ""), ("^{\\circ}", ""), ("\\%", ""), ("%", "")):
        s = s.replace(old, new)
    s = re.sub(r"\s+", "", s).rstrip(".")
    return re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)


def _number(s: str) -> Fraction | None:
    s = s.replace(",", "")
    if m := re.fullmatch(r"\\frac\{(-?\d+)\}\{(-?\d+)\}", s):
        return Fraction(int(m.group(1)), int(m.group(2))) if int(m.group(2)) else None
    try:
        return Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None


def math_equal(predicted: str | None, truth: str) -> bool:
    """Normalised string equality, or equal as numbers (Podium's stand-in for the PRM800K grader)."""
    if not predicted or not str(truth).strip():
        return False
    a, b = _normal(predicted), _normal(str(truth))
    if a == b:
        return True
    na, nb = _number(a), _number(b)
    return na is not None and na == nb


@dataclass(frozen=True)
class DeepSeekExactMatch(CodeGrading):
    name: str = BENCHMARK

    def _correct(self, kind: str, text: str, truth: str) -> bool:
        if kind == "gpqa":
            return choice_correct(choice_answer(text, "D", harmony=False), truth, "ABCD")
        if kind == "mmlu_pro":
            return choice_correct(choice_answer(text, "J", harmony=False), truth, "ABCDEFGHIJ")
        if kind == "aime":
            return int_correct(aime_answer(text), truth)
        return math_equal(boxed(text), truth)

    def evaluate(self, accuracy_log: Path, dataset: Path, tokenizer: Path | None) -> AccuracyResult:
        data = read_deepseek(Path(dataset), accuracy=True)
        decode = decoder(tokenizer, skip_special_tokens=True, benchmark=BENCHMARK)
        entries = unique_entries(accuracy_log, len(data), Path(dataset))
        correct, output_tokens, code_jobs = 0, 0, []
        for entry in entries:
            ids = entry.tokens()
            output_tokens += len(ids)
            text, truth = decode(ids), data.ground_truth[entry.qsl_idx]
            kind = subset_kind(data.subsets[entry.qsl_idx], KINDS, BENCHMARK)
            if kind == "livecodebench":
                code_jobs.append((code_answer(text, harmony=False), truth.strip()))
            else:
                correct += self._correct(kind, text, truth)
        if code_jobs:
            correct += sum(bool(ok) for ok in self.grade(code_jobs, Path(dataset)))
        n = len(entries)
        metrics = {"exact_match": 100.0 * correct / n if n else 0.0,
                   "TOKENS_PER_SAMPLE": output_tokens / n if n else 0.0}
        notes = (f"{correct} of {n} correct; MATH-500 graded by normalised comparison, not the PRM800K grader",)
        return AccuracyResult(metrics, n, notes)

    def accuracy_txt(self, result: AccuracyResult) -> str:
        m = result.metrics
        return (f"deepseek-r1 exact match (Podium; {result.notes[0]})\n"
                f"{{'exact_match': {m['exact_match']:.4f}, 'tokens_per_sample': {m['TOKENS_PER_SAMPLE']:.4f}, "
                f"'num_samples': {result.samples}}}\n")


EVALUATOR = DeepSeekExactMatch()
