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


def test_verdicts():
    ok = verify_boxed("<think>\nmaybe \\boxed{3}\n</think>\n\nThe answer is \\boxed{1,000}.", 1000)
    assert ok.correct and ok.predicted == 1000 and ok.reason == "correct"
    assert verify_boxed("The answer is \\boxed{+5}", "5.0").correct  # completion after a prefill
    wrong = verify_boxed("</think>\\boxed{4}", 5)
    assert not wrong.correct and wrong.predicted == 4 and "wrong answer" in wrong.reason
    draft = verify_boxed("<think>\\boxed{5}</think>I think it is five.", 5)
    assert not draft.correct and "only inside the reasoning" in draft.reason
    assert "never closed" in verify_boxed("<think>\\boxed{5}", 5).reason
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
