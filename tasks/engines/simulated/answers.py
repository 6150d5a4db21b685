"""Known answers the simulated engine can serve: a data set that carries, per row, the answer a real evaluator scores
and the length the answer is to have, so accuracy runs and the audits that score outputs (TEST07, TEST09) run at full
size through the real evaluators without a model.

A data set carries them as extra parquet columns (`tasks.rehearsal` writes them; readers of the benchmark's own
columns ignore them):

| column | what |
|---|---|
| `rehearsal_output_tokens` | int32: how many tokens the answer has when served (the reference's output length) |
| `rehearsal_answer_tokens` | list<int32>: token-id benchmarks (gpt-oss-120b): the answer's end, after the filler |
| `rehearsal_answer` | string: chat benchmarks (Qwen3-VL): the answer text, padded with JSON whitespace |

and, in the parquet schema's metadata under `rehearsal`, a JSON object: `lead` (token ids every token-id answer
starts with) and `fill` (the token id repeated between lead and answer to reach the length). A token-id request is
matched by its whole prompt (the `input_tokens` of a row); a chat request by the item marker (`MARKER`, e.g.
`SKU-R0012345`) that the row's `product_title` holds and every client puts in its prompt. A request that matches
nothing is answered as before (seeded filler tokens): warm-up and readiness probes still work.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

OUTPUT_TOKENS = "rehearsal_output_tokens"
ANSWER_TOKENS = "rehearsal_answer_tokens"
ANSWER_TEXT = "rehearsal_answer"
METADATA_KEY = b"rehearsal"
MARKER = re.compile(r"SKU-R(\d{7})")
PROMPT_COLUMN = "input_tokens"
TITLE_COLUMN = "product_title"


def prompt_key(ids: Iterable[int]) -> bytes:
    """The key of a token-id prompt: a hash of its ids as int32 (what the data set stores and the harness sends)."""
    return hashlib.blake2b(np.asarray(list(ids), dtype="<i4").tobytes(), digest_size=16).digest()


@dataclass(frozen=True)
class Answer:
    tokens: int                          # the served length
    ids: tuple[int, ...] = ()            # token-id answers: the part after lead and filler
    text: str = ""                       # chat answers


@dataclass(frozen=True)
class AnswerBook:
    by_prompt: dict[bytes, Answer]
    by_marker: dict[str, Answer]
    lead: tuple[int, ...] = ()
    fill: int = 0

    def __len__(self) -> int:
        return len(self.by_prompt) + len(self.by_marker)

    def find(self, request: dict) -> Answer | None:
        """The answer for an OpenAI completions or chat request, or None."""
        prompt = request.get("prompt")
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            return self.by_prompt.get(prompt_key(prompt))
        if not self.by_marker:
            return None
        found = MARKER.search(json.dumps(request.get("messages") or prompt or "", ensure_ascii=False))
        return self.by_marker.get(found.group(1)) if found else None

    def token_ids(self, answer: Answer, max_tokens: int | None) -> list[int]:
        """lead + filler + the answer's ids, `answer.tokens` long (never shorter than lead and answer together), cut
        at `max_tokens` as an engine cuts a long answer."""
        filler = max(0, answer.tokens - len(self.lead) - len(answer.ids))
        ids = [*self.lead, *([self.fill] * filler), *answer.ids]
        return ids[:max_tokens] if max_tokens else ids


def text_pieces(answer: Answer, max_tokens: int | None) -> list[str]:
    """A chat answer as `answer.tokens` streamed pieces: one character each, trailing spaces (JSON whitespace) up to
    the length, or longer pieces when the text has more characters than tokens; cut at `max_tokens`."""
    text, count = answer.text, max(1, answer.tokens)
    if len(text) <= count:
        pieces = list(text.ljust(count))
    else:
        bounds = [round(k * len(text) / count) for k in range(count + 1)]
        pieces = [text[bounds[k]:bounds[k + 1]] for k in range(count)]
    return pieces[:max_tokens] if max_tokens else pieces


def load(paths: Iterable[str | Path]) -> AnswerBook:
    """Every row with known answers in the parquet files `paths`; a file without the columns adds nothing."""
    import pyarrow.parquet as pq

    by_prompt: dict[bytes, Answer] = {}
    by_marker: dict[str, Answer] = {}
    lead: tuple[int, ...] = ()
    fill = 0
    for path in paths:
        schema = pq.read_schema(path)
        meta = json.loads((schema.metadata or {}).get(METADATA_KEY, b"{}"))
        if meta:
            lead, fill = tuple(meta.get("lead", ())), int(meta.get("fill", 0))
        if OUTPUT_TOKENS not in schema.names:
            continue
        if ANSWER_TOKENS in schema.names:
            table = pq.read_table(path, columns=[PROMPT_COLUMN, ANSWER_TOKENS, OUTPUT_TOKENS])
            for prompt, ids, n in zip(*(table[c].to_pylist() for c in table.column_names), strict=True):
                by_prompt[prompt_key(prompt)] = Answer(int(n), ids=tuple(ids))
        else:
            table = pq.read_table(path, columns=[TITLE_COLUMN, ANSWER_TEXT, OUTPUT_TOKENS])
            for title, text, n in zip(*(table[c].to_pylist() for c in table.column_names), strict=True):
                found = MARKER.search(title or "")
                if found:
                    by_marker[found.group(1)] = Answer(int(n), text=text)
    return AnswerBook(by_prompt, by_marker, lead, fill)
