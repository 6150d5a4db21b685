"""Known answers for the extraction rules of the reasoning benchmarks (gpt-oss-120b, deepseek-r1)."""

from __future__ import annotations

from tasks.accuracy.answers import aime_answer, choice_answer, choice_correct, code_answer, final_section, int_correct
from tasks.accuracy.deepseek_r1 import boxed

ANALYSIS = "<|channel|>analysis<|message|>Try 7: \\boxed{7}. Maybe C.<|end|><|start|>assistant"


def harmony(final: str, *, closed: bool = True) -> str:
    return f"{ANALYSIS}<|channel|>final<|message|>{final}{'<|return|>' if closed else ''}"


def test_final_channel() -> None:
    assert final_section(harmony(" The answer is 3. ")) == ("The answer is 3.", True)
    assert final_section(harmony("cut off mid-sentence", closed=False)) == ("cut off mid-sentence", True)
    assert final_section("<|channel|>final 明<|message|>odd marker<|return|>") == ("odd marker", True)
    assert final_section(ANALYSIS) == (ANALYSIS, False)   # absent: the whole text is scored
    assert final_section("") == ("", False)


def test_aime_boxed_and_fallbacks() -> None:
    assert aime_answer(harmony("So \\boxed{42}.")) == 42                       # several boxed: the last wins
    assert aime_answer("first \\boxed{12} then \\boxed{ 305 }") == 305
    assert aime_answer("no box here. Answer: 17") == 17                        # Answer: N when no box
    assert aime_answer("Answer: 3.5") is None                                  # not an integer answer
    assert aime_answer("\\boxed{1000}") is None                                # AIME answers are 0..999
    assert aime_answer("\\boxed{x+1}") is None and aime_answer("") is None     # no boxed integer, empty output
    assert aime_answer(ANALYSIS) == 7                                          # no final channel: whole text
    assert int_correct(42, "042") and not int_correct(42, "42.0") and not int_correct(None, "1")


def test_gpqa_letters() -> None:
    assert choice_answer(harmony("C")) == "C"
    assert choice_answer(harmony("**B** is right because ...")) == "B"       # markdown bold stripped
    assert choice_answer(harmony("The correct option: Answer: D")) == "D"
    assert choice_answer(harmony("I pick option number four.")) is None        # no letter rule matches
    assert choice_answer("no channel. FINAL ANSWER: (a)") == "A"             # tagged answer in the whole text
    assert choice_answer("ANSWER: B ... ANSWER: C", harmony=False) == "C"      # deepseek: the last tagged one
    assert choice_answer("", "D") is None
    assert choice_answer(harmony("so I'd say, maybe, H"), "J") == "H"          # MMLU-Pro standalone fallback
    assert choice_correct("C", " c ", "ABCD") and not choice_correct("E", "E", "ABCD")
    assert not choice_correct(None, "A", "ABCD")


def test_code_blocks() -> None:
    text = harmony("Here:\n```python\nprint(1)\n```\nor better\n```python\nprint(2)\n```")
    assert code_answer(text) == "print(2)"                                     # the last python block of final
    assert code_answer(harmony("```py\nprint(3)\n```")) == "print(3)"          # plain block, language tag removed
    assert code_answer(harmony("no code") + "") is None
    assert code_answer("```python\nprint(4)\n```") == "print(4)"               # no final channel: whole text
    deepseek = "```python\nfirst()\n```\n```python\nsecond()\n```"
    assert code_answer(deepseek, harmony=False) == "first()"                   # deepseek: the first block
    assert code_answer("", harmony=False) is None


def test_math500_boxed() -> None:
    assert boxed("x \\boxed{\\frac{1}{2}} and finally \\boxed{\\dfrac{3}{4}}") == "\\dfrac{3}{4}"
    assert boxed("\\boxed{unclosed") is None and boxed("none") is None
