"""Boxed math answers: extraction after the think block, integer normalization, reasons."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadekit.verify.boxed import answer_part, extract_boxed, normalize_integer, verify_boxed


@pytest.mark.parametrize("raw, value", [
    ("5", 5), ("+5", 5), ("-5", -5), ("5.0", 5), ("5.", 5), ("1,000", 1000), ("1{,}000", 1000),
    ("1\\,000", 1000), (" $42$ ", 42), ("\\text{7}", 7), ("12,345,678", 12345678), ("−3", -3),
])
def test_normalize_integer_accepts(raw, value):
    assert normalize_integer(raw) == value


@pytest.mark.parametrize("raw", ["5.5", "1,00", "x", "", "1e3", "3/4", "12,34,567", "9" * 100])
def test_normalize_integer_rejects(raw):
    assert normalize_integer(raw) is None


def test_extract_boxed_balances_braces():
    assert extract_boxed(r"so \boxed{\frac{1}{2}} and \boxed{3}") == [r"\frac{1}{2}", "3"]
    assert extract_boxed(r"\boxed{unclosed") == []


def test_answer_part():
    assert answer_part("<think>r</think>a") == "a"
    assert answer_part("<think>still thinking") == ""
    assert answer_part("no think") == "no think"


@pytest.mark.parametrize("turn, answer", [
    ("\n <think>\nr\n</think>\n\na<|im_end|>", "\n\na"),  # the block may follow whitespace; the end is cut
    ("<think>r</think>a<|im_end|>\n", "a"),
    ("<think>r</think>s = '</think>'\n", "s = '</think>'\n"),  # the first </think> closes; later ones are content
    ("<think>r</think>a\n<think>b</think>c", "a\n<think>b</think>c"),
    ("s = '</think>'\nt = 1\n", "s = '</think>'\nt = 1\n"),  # no think block: all answer
    ("s = '<think>'\n", "s = '<think>'\n"),  # a <think> that does not open the turn is no block left open
    ("say '<|im_end|>' now", "say '<|im_end|>' now"),  # the end-of-turn only at the very end
    ("<|im_end|>x", "<|im_end|>x"),
    ("pre <think>r</think>a", "pre <think>r</think>a"),  # text before <think>: the chat format's block is not there
])
def test_chat_markers_are_structure_only_where_the_chat_format_puts_them(turn, answer):
    assert answer_part(turn) == answer


def test_verdicts():
    ok = verify_boxed("<think>\nmaybe \\boxed{3}\n</think>\n\nThe answer is \\boxed{1,000}.", 1000)
    assert ok.correct and ok.predicted == 1000 and ok.reason == "correct"
    assert verify_boxed("The answer is \\boxed{+5}", "5.0").correct  # completion after a prefill
    wrong = verify_boxed("</think>\\boxed{4}", 5)
    assert not wrong.correct and wrong.predicted == 4 and "wrong answer" in wrong.reason
    draft = verify_boxed("<think>\\boxed{5}</think>I think it is five.", 5)
    assert not draft.correct and "only inside the reasoning" in draft.reason
    assert "never closed" in verify_boxed("<think>\\boxed{5}", 5).reason
    assert verify_boxed("Tags like <think> are markup; \\boxed{5}", 5).correct  # not a block left open
    hedge = verify_boxed("\\boxed{4} or \\boxed{5}", 5)
    assert not hedge.correct and "disagree" in hedge.reason
    assert verify_boxed("\\boxed{5} so \\boxed{5.0}", 5).correct
    assert "not an integer" in verify_boxed("\\boxed{x+1}", 5).reason
    assert "not an integer" in verify_boxed("\\boxed{5}", "five").reason
    assert not verify_boxed(None, 5).correct  # type: ignore[arg-type]


@given(st.integers(-10**12, 10**12))
def test_formatted_integers_round_trip(n):
    assert normalize_integer(f"{n:,}") == n
    assert verify_boxed(f"<think>x</think>\\boxed{{{n:,}}}", n).correct


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200), st.one_of(st.integers(), st.text(max_size=10)))
def test_never_raises(text, expected):
    verdict = verify_boxed(text, expected)
    assert isinstance(verdict.correct, bool) and verdict.reason
