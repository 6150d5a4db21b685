"""ROUGE for the summarisation benchmarks, as `language/llama3.1-8b/evaluation.py` and
`language/llama2-70b/evaluate-accuracy.py` define it, with Google's `rouge-score` (the package the references
reach through `evaluate.load("rouge")`).

Per sample (first entry of each qsl_idx): decode the int32 token ids skipping special tokens, strip, put each
sentence on its own line (nltk `sent_tokenize`; rougeLsum splits on newlines), do the same to the reference, then
ROUGE-1/2/L/Lsum F-measures with the Porter stemmer. Reported as 100 x the mean over samples, rounded to 4
places. gen_len is the sum of the characters of the post-processed predictions; llama2-70b adds
tokens_per_sample = round(output tokens / samples, 1).

Sentence splitting needs nltk's `punkt_tab` English model, which is downloaded data, not a package: when it is
installed (`python -m nltk.downloader punkt_tab`) Podium uses it as the references do; otherwise an untrained
Punkt splitter, which splits after abbreviations too. That changes only rougeLsum and gen_len slightly, and the
notes in accuracy.txt say which splitter ran.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tasks.accuracy import AccuracyResult
from tasks.accuracy.common import decoder, unique_entries
from tasks.datasets.prompts import PromptSet, read_cnn_eval, read_open_orca

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")
CHECKER_NAMES = {"rouge1": "ROUGE1", "rouge2": "ROUGE2", "rougeL": "ROUGEL", "rougeLsum": "ROUGELSUM"}


def sentence_splitter() -> tuple[Callable[[str], list[str]], str]:
    import nltk

    try:
        nltk.data.find("tokenizers/punkt_tab/english/")
        return nltk.sent_tokenize, "nltk punkt_tab (as the reference)"
    except LookupError:
        from nltk.tokenize.punkt import PunktSentenceTokenizer

        return (PunktSentenceTokenizer().tokenize,
                "untrained Punkt (punkt_tab not installed; rougeLsum/gen_len approximate)")


def postprocess(text: str, split: Callable[[str], list[str]]) -> str:
    return "\n".join(split(text.strip()))


def rouge_means(predictions: list[str], references: list[str]) -> dict[str, float]:
    """100 x mean F-measure per ROUGE type, rounded to 4 places (0 for no samples)."""
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)
    sums = dict.fromkeys(ROUGE_TYPES, 0.0)
    for prediction, reference in zip(predictions, references, strict=True):
        scores = scorer.score(reference, prediction)
        for kind in ROUGE_TYPES:
            sums[kind] += scores[kind].fmeasure
    n = len(predictions)
    return {kind: round(100 * total / n, 4) if n else 0.0 for kind, total in sums.items()}


@dataclass(frozen=True)
class RougeEvaluator:
    name: str
    reader: Callable[[Path, bool], PromptSet]
    tokens_per_sample: bool       # llama2-70b prints it (gated); llama3.1-8b does not
    quoted: bool                  # llama3.1-8b prints its ROUGE values as strings ('38.7792')

    def evaluate(self, accuracy_log: Path, dataset: Path, tokenizer: Path | None) -> AccuracyResult:
        data = self.reader(Path(dataset), True)
        decode = decoder(tokenizer, skip_special_tokens=True, benchmark=self.name)
        entries = unique_entries(accuracy_log, len(data), Path(dataset))
        split, splitter = sentence_splitter()
        token_ids = [entry.tokens() for entry in entries]
        predictions = [postprocess(decode(ids), split) for ids in token_ids]
        references = [postprocess(data.ground_truth[e.qsl_idx], split) for e in entries]
        scores = rouge_means(predictions, references)
        metrics = {CHECKER_NAMES[k]: v for k, v in scores.items()}
        metrics["GEN_LEN"] = float(sum(len(p) for p in predictions))
        metrics["GEN_NUM"] = float(len(predictions))
        output_tokens = sum(len(ids) for ids in token_ids)
        metrics["GEN_TOK_LEN"] = float(output_tokens)
        if self.tokens_per_sample:
            metrics["TOKENS_PER_SAMPLE"] = round(output_tokens / len(entries), 1) if entries else 0.0
        return AccuracyResult(metrics, len(entries), (f"sentence splitter: {splitter}",))

    def accuracy_txt(self, result: AccuracyResult) -> str:
        m = result.metrics
        parts = [f"'{k}': " + (f"'{m[CHECKER_NAMES[k]]:.4f}'" if self.quoted else f"{m[CHECKER_NAMES[k]]:.4f}")
                 for k in ROUGE_TYPES]
        parts += [f"'gen_len': {int(m['GEN_LEN'])}", f"'gen_num': {int(m['GEN_NUM'])}"]
        if self.tokens_per_sample:
            parts += [f"'gen_tok_len': {int(m['GEN_TOK_LEN'])}", f"'tokens_per_sample': {m['TOKENS_PER_SAMPLE']:.1f}"]
        head = f"{self.name} ROUGE (Podium; {result.notes[0]})"
        return f"{head}\n\nResults\n\n{{{', '.join(parts)}}}\n"


LLAMA3_1_8B = RougeEvaluator("llama3.1-8b", read_cnn_eval, tokens_per_sample=False, quoted=True)
LLAMA2_70B = RougeEvaluator("llama2-70b-99.9", read_open_orca, tokens_per_sample=True, quoted=False)
