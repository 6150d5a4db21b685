"""Answer extraction rules of the reasoning benchmarks (gpt-oss-120b, deepseek-r1), written from the reference
definitions in `language/gpt-oss-120b/eval_accuracy.py` and `language/deepseek-r1/eval_accuracy.py`:

- harmony final channel: the text between `<|channel|>final...<|message|>` and `<|return|>` (or the end); an
  output without one is scored on its whole text, as the reference does;
- AIME: the last `\\boxed{N}` of the whole output, else the last `Answer: N`; an integer in 0..999;
- multiple choice (GPQA A-D, MMLU-Pro A-J): a letter opening the final section, else `Answer: X` there, else the
  last `ANSWER: X` / `FINAL ANSWER: X` of the whole output (MMLU-Pro: else the last standalone letter);
- code (LiveCodeBench): the last ```python block of the final section, else its last plain ``` block, else the
  same search over the whole output.
"""

from __future__ import annotations

import re

FINAL = re.compile(r"<\|channel\|>final[^<]*<\|message\|>(.*?)(?:<\|return\|>|$)", re.DOTALL)
BOXED_INT = re.compile(r"\\boxed\{\s*(\d+)\s*\}")
ANSWER_INT = re.compile(r"Answer:\s*(\d+)(?!\.)\b", re.IGNORECASE | re.MULTILINE)
BOLD = re.compile(r"\*\*([^*]+)\*\*")
PYTHON_BLOCK = re.compile(r"```python(.*?)```", re.DOTALL)
ANY_BLOCK = re.compile(r"```(.*?)```", re.DOTALL)
LANG_TAG = re.compile(r"^(?:python|py)\s*\n", re.IGNORECASE)


def final_section(text: str) -> tuple[str, bool]:
    """(the final channel's text, True), or (the whole text, False) when the output has no final channel."""
    text = (text or "").strip()
    match = FINAL.search(text)
    return (match.group(1).strip(), True) if match else (text, False)


def aime_answer(text: str) -> int | None:
    text = (text or "").strip()
    found = BOXED_INT.findall(text) or ANSWER_INT.findall(text)
    if not found:
        return None
    value = int(found[-1])
    return value if 0 <= value <= 999 else None


def _choice_patterns(last: str) -> tuple[re.Pattern, re.Pattern, re.Pattern]:
    opening = re.compile(rf"^[^a-zA-Z]*([A-{last}])(?:[^a-zA-Z]|$)", re.IGNORECASE)
    answer = re.compile(rf"\b(?:Answer|ANSWER)\s*[:.]?\s*([A-{last}])\b", re.IGNORECASE)
    tagged = re.compile(rf"\b(?:ANSWER|FINAL\s*ANSWER)\b\s*[:=]?\s*(?:\(?\s*([A-{last}])\s*\)?)(?:\s*$|[^A-Za-z])",
                        re.IGNORECASE)
    return opening, answer, tagged


def _escapes(text: str) -> str:
    return text.replace("\\n", "\n").replace("\\'", "'")


def _unwrap(text: str) -> str:
    if text.startswith(("['", '["')) and text.endswith(("']", '"]')):
        text = text[2:-2].strip()
    return _escapes(text)


def choice_answer(text: str, last: str = "D", *, harmony: bool = True) -> str | None:
    """A multiple-choice letter A..`last`. `harmony=False` (deepseek-r1) uses only the tagged-answer rules on
    the whole output."""
    text = (text or "").strip()
    if not text:
        return None
    opening, answer, tagged = _choice_patterns(last)
    section = text
    if harmony:
        section = _unwrap(BOLD.sub(r"\1", final_section(text)[0]))
        if match := opening.match(section.strip()):
            return match.group(1).upper()
        if match := answer.search(section):
            return match.group(1).upper()
    whole = _escapes(text) if harmony else _unwrap(text)
    if found := tagged.findall(whole):
        return found[-1].upper()
    if last == "J" and (found := re.findall(rf"\b([A-{last}])\b", section if harmony else whole, re.IGNORECASE)):
        return found[-1].upper()
    return None


def _last_block(text: str) -> str | None:
    if found := PYTHON_BLOCK.findall(text):
        return found[-1].strip()
    if found := ANY_BLOCK.findall(text):
        return LANG_TAG.sub("", found[-1].strip())
    return None


def code_answer(text: str, *, harmony: bool = True) -> str | None:
    """The program to run. deepseek-r1 (`harmony=False`) takes the FIRST ```python block of the whole output."""
    text = (text or "").strip()
    if not text:
        return None
    if not harmony:
        match = PYTHON_BLOCK.search(text)
        return match.group(1).strip() if match else None
    section, found = final_section(text)
    if found and (code := _last_block(section)) is not None:
        return code
    return _last_block(text)


def choice_correct(parsed: str | None, truth: str, letters: str) -> bool:
    truth = (truth or "").strip().upper()
    return bool(parsed) and bool(truth) and parsed in letters and parsed == truth


def int_correct(parsed: int | None, truth: str) -> bool:
    if parsed is None:
        return False
    try:
        return parsed == int(str(truth).strip())
    except ValueError:
        return False
