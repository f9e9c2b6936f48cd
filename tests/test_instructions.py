"""IFEval-style verifiable instructions: each kind, strict vs loose, JSON, sampling."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadekit.verify.instructions import (
    CONSTRAINT_TYPES, Bracketed, BulletCount, EndsWith, ForbiddenWord, IncludeWord, JsonFormat,
    LineCount, Lowercase, MaxWords, MinWords, NoCommas, NoPeriods, Quoted, SectionCount, StartsWith,
    Uppercase, compatible, constraints_from_json, constraints_to_json, loose_variants, sample_constraints,
    verify_instructions,
)

CASES = [
    (Lowercase(), "the answer is 14.", "The answer is 14."),
    (Uppercase(), "THE ANSWER IS 14.", "The ANSWER IS 14."),
    (Quoted(), '"The answer is 14."', 'The answer is "14".'),
    (Bracketed(), "[The answer is 14.]", "The answer is [14]."),
    (LineCount(2), "I checked each step.\n\nThe answer is 14.", "I checked each step. The answer is 14."),
    (BulletCount(2), "* one\n* two\ntext", "* one\n* two\n- three"),
    (SectionCount(2), "Section 1: I am sure.\nSection 2: The answer is 14.", "Section 1: The answer is 14."),
    (StartsWith("Sure"), "  sure! The answer is 14.", "Well, sure. The answer is 14."),
    (EndsWith("Thank you"), "The answer is 14. Thank you\n", "Thank you. The answer is 14."),
    (NoCommas(), "The answer is 14.", "Well, the answer is 14."),
    (NoPeriods(), "The answer is 14", "The answer is 14."),
    (JsonFormat(), '```json\n{"response": "The answer is 14."}\n```', "{'response': 14}"),
    (MinWords(6), "I am sure. The answer is 14.", "The answer is 14."),
    (MaxWords(4), "The answer is 14.", "I am sure. The answer is 14."),
    (IncludeWord("total"), "The TOTAL is 14.", "The totals are 14."),
    (ForbiddenWord("answer"), "The result is 14. Answers vary.", "The Answer is 14."),
]


def test_every_kind_is_covered() -> None:
    assert {c.kind for c, _, _ in CASES} == set(CONSTRAINT_TYPES)
    assert len(CONSTRAINT_TYPES) >= 12


@pytest.mark.parametrize("constraint, good, bad", CASES, ids=[c.kind for c, _, _ in CASES])
def test_each_constraint(constraint, good, bad) -> None:
    assert constraint.check(good)
    assert not constraint.check(bad)
    assert verify_instructions(good, [constraint]).strict_all
    assert not verify_instructions(bad, [constraint]).strict_all


def test_each_kind_is_one_short_fixed_sentence() -> None:
    sentences = {c.describe() for c, _, _ in CASES}
    assert len(sentences) == len(CASES)
    assert all(s.endswith(".") and "\n" not in s and len(s) <= 50 for s in sentences)
    assert Lowercase().describe() == "Answer in lowercase."
    assert StartsWith("Sure").describe() == "Start with 'Sure'."
    assert LineCount(3).describe() == "Answer in 3 lines."


def test_strict_vs_loose() -> None:
    text = "Sure! Here is my answer:\nthe answer is 14."
    verdict = verify_instructions(text, [Lowercase()])
    assert not verdict.strict_all and verdict.loose_all
    assert "loosely" in verdict.reason
    bold = verify_instructions('**"The answer is 14."**', [Quoted()])
    assert bold.strict_all is False and bold.loose_all  # markdown * stripped in loose mode


def test_verdict_reports_each_constraint_and_skips_the_think_block() -> None:
    text = "<think>\nI Must Use Capitals, Commas.\n</think>\n\nthe answer is 14<|im_end|>"
    verdict = verify_instructions(text, [Lowercase(), NoCommas(), MinWords(5)])
    assert [r.strict for r in verdict.per_constraint] == [True, True, False]
    assert verdict.reason == "failed: min_words"
    assert verdict.strict_fraction == pytest.approx(2 / 3)
    assert verify_instructions("<think>never closed", [Lowercase()]).reason.startswith("think block")
    assert verify_instructions("anything", []).strict_all


def test_an_empty_answer_follows_nothing() -> None:
    """IFEval's rule: lowercase, no commas, at most n words... all fail on an empty response."""
    for text in ("", "   \n", "<think>\nthe answer is 14.\n</think>\n\n"):
        verdict = verify_instructions(text, [Lowercase(), NoCommas(), MaxWords(5)])
        assert not any(r.strict or r.loose for r in verdict.per_constraint)


def test_a_dotted_capital_i_does_not_split_a_word() -> None:
    """``"İ".lower()`` is two characters, the second not a word character: count words before lowering."""
    assert MaxWords(1).check("İstanbul") and not MinWords(2).check("İstanbul")
    assert IncludeWord("total").check("İn TOTAL")


def test_loose_variants() -> None:
    variants = loose_variants("Intro\n*body*\nOutro")
    assert "*body*" in variants and "body" in variants and "Intro\n*body*\nOutro" in variants


def test_json_round_trip() -> None:
    constraints = [c for c, _, _ in CASES]
    assert constraints_from_json(constraints_to_json(constraints)) == constraints


@pytest.mark.parametrize("data, names", [
    ('[{"kind": "shout"}]', "'shout'"),
    ('[{"n": 2}]', "None"),
    ('[{"kind": "line_count"}]', "constraint 'line_count' without field 'n'"),
    ('[{"kind": "line_count", "n": "2"}]', "'n'"),
    ('[{"kind": "line_count", "n": true}]', "'n'"),
    ('[{"kind": "line_count", "n": 2, "colour": 1}]', "'colour'"),
    ('[{"kind": "starts_with", "phrase": ""}]', "'phrase'"),
    ('[{"kind": "include_word", "word": ["a"]}]', "'word'"),
    ('["lowercase"]', "a constraint that is not an object: 'lowercase'"),
    ('{"kind": "lowercase"}', "a JSON dict where a list of constraints belongs"),
    ("not json", r"invalid JSON \(Expecting value"),
    ("[" * 100_000, "JSON nested too deeply"),
    (None, "a NoneType where a JSON string belongs"),
])
def test_bad_json_is_a_value_error_naming_what_is_wrong(data, names) -> None:
    with pytest.raises(ValueError, match=names):
        constraints_from_json(data)


def test_an_unknown_kind_is_named_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"^unknown constraint kind 'shout' \(known: lowercase, uppercase, "):
        constraints_from_json('[{"kind": "lowercase"}, {"kind": "shout"}]')


def test_sampler_is_seeded_and_avoids_conflicts() -> None:
    assert sample_constraints(7, k=3) == sample_constraints(7, k=3)
    kinds_seen = set()
    for seed in range(300):
        cs = sample_constraints(seed, k=3)
        kinds = [c.kind for c in cs]
        assert len(set(kinds)) == 3 and compatible(kinds)
        assert not {"lowercase", "uppercase"} <= set(kinds)
        assert not {"min_words", "max_words"} <= set(kinds)
        assert not {"quoted", "bracketed"} <= set(kinds)
        kinds_seen |= set(kinds)
    assert kinds_seen == set(CONSTRAINT_TYPES)
    assert not compatible(["json_format", "line_count"]) and not compatible(["quoted", "quoted"])


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=300), seed=st.integers(0, 10_000))
def test_never_raises(text: str, seed: int) -> None:
    verdict = verify_instructions(text, sample_constraints(seed, k=3))
    assert isinstance(verdict.strict_all, bool) and verdict.reason
    assert verdict.strict_all <= verdict.loose_all  # strict implies loose
    assert json.loads(constraints_to_json(sample_constraints(seed, k=3)))
