"""gpt-oss-120b exact match, as `language/gpt-oss-120b/eval_mlperf_accuracy.py` defines it.

Each log entry's data is little-endian int32 token ids, decoded with the model's tokenizer keeping special tokens
(the harmony markers). Per source data set (the `dataset` column): AIME compares the integer answer, GPQA the
letter A-D, LiveCodeBench runs the program against the problem's tests (`ground_truth` is the question_id). A data
set whose problems repeat r times weighs 1/r:

    score = 100 * sum_d(correct_d / r_d) / sum_d(total_d / r_d),   r = {aime25: 8, gpqa_diamond: 5, livecodebench_v6: 3}

i.e. the mean over unique problems of each problem's pass rate. Subset names are lower-cased before grouping and
the repeats look-up, and every log entry counts (a repeated qsl_idx twice, with a warning naming it), as the
reference does. Printed as `'exact_match': 83.500` (3 decimals),
the line the checker's pattern reads. An output without a final channel is scored on its whole text (reference
behaviour) and counted in the notes.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from submission.rules.evaluation import evaluation_constant
from tasks.accuracy import AccuracyResult
from tasks.accuracy.answers import aime_answer, choice_answer, choice_correct, code_answer, final_section, int_correct
from tasks.accuracy.common import decoder, log_entries, repeat_note, subset_kind
from tasks.accuracy.livecodebench import CodeGrading
from tasks.datasets.prompts import read_gpt_oss

BENCHMARK = "gpt-oss-120b"
KINDS = ("aime", "gpqa", "livecodebench")   # matched as substrings of the dataset name, as the reference does


def subset_name(subset: str) -> str:
    """The data set name as the reference groups and looks up repeats by: lower-cased (eval_accuracy.py
    `validate_dataset_name`), so `AIME25` and `aime25` are one subset with 8 repeats."""
    return str(subset).lower()


def weighted_score(counts: dict[str, tuple[int, int]], repeats: dict[str, int]) -> float:
    """100 * sum_d(correct_d / r_d) / sum_d(total_d / r_d); 0 when nothing was scored."""
    correct = sum(c / repeats.get(d, 1) for d, (c, _) in counts.items())
    total = sum(t / repeats.get(d, 1) for d, (_, t) in counts.items())
    return 100.0 * correct / total if total else 0.0


@dataclass(frozen=True)
class GptOssExactMatch(CodeGrading):
    name: str = BENCHMARK

    def evaluate(self, accuracy_log: Path, dataset: Path, tokenizer: Path | None) -> AccuracyResult:
        data = read_gpt_oss(Path(dataset), accuracy=True)
        decode = decoder(tokenizer, skip_special_tokens=False, benchmark=BENCHMARK)
        entries, repeated = log_entries(accuracy_log, len(data), Path(dataset))
        counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        no_final = 0
        code_jobs = []
        for entry in entries:
            subset, truth = subset_name(data.subsets[entry.qsl_idx]), data.ground_truth[entry.qsl_idx]
            text = decode(entry.tokens())
            no_final += not final_section(text)[1]
            counts[subset][1] += 1
            kind = subset_kind(subset, KINDS, BENCHMARK, "the accuracy file's dataset column")
            if kind == "aime":
                counts[subset][0] += int_correct(aime_answer(text), truth)
            elif kind == "gpqa":
                counts[subset][0] += choice_correct(choice_answer(text, "D"), truth, "ABCD")
            else:
                code_jobs.append((subset, code_answer(text), truth.strip()))
        unrun = 0
        if code_jobs:
            passed = self.grade([(code, question) for _, code, question in code_jobs], Path(dataset))
            unrun = passed.count(None)
            for (subset, _, _), ok in zip(code_jobs, passed, strict=True):
                counts[subset][0] += bool(ok)
        repeats = evaluation_constant(BENCHMARK, "dataset_repeats")
        final = {d: (c, t) for d, (c, t) in counts.items()}
        notes = repeat_note(repeated, accuracy_log) + tuple(
            f"{d}: {c} of {t} correct (repeats {repeats.get(d, 1)})" for d, (c, t) in sorted(final.items()))
        if no_final:
            notes += (f"{no_final} output(s) had no harmony final channel and were scored on their whole text",)
        if unrun:
            notes += (f"{unrun} LiveCodeBench output(s) had no code block or an unknown question_id (scored wrong)",)
        return AccuracyResult({"exact_match": weighted_score(final, repeats)}, len(entries), notes)

    def accuracy_txt(self, result: AccuracyResult) -> str:
        lines = ["gpt-oss-120b exact match (Podium; definition of language/gpt-oss-120b/eval_mlperf_accuracy.py)",
                 *result.notes,
                 f"{{'exact_match': {result.metrics['exact_match']:.3f}, 'num_samples': {result.samples}}}"]
        return "\n".join(lines) + "\n"


EVALUATOR = GptOssExactMatch()
