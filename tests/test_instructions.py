"""IFEval-style verifiable instructions: each type, strict vs loose, JSON, sampling."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadekit.verify.instructions import (
    CONSTRAINT_TYPES, BulletCount, EndsWith, ForbiddenWords, IncludeWords, JsonFormat,
    Lowercase, MaxWords, MinWords, NoCommas, Quoted, SectionCount, StartsWith, Uppercase,
    constraints_from_json, constraints_to_json, loose_variants, sample_constraints,
    verify_instructions,
)

CASES = [
    (MinWords(3), "one two three", "one two"),
    (MaxWords(2), "one two", "one two three"),
    (Lowercase(), "all lower here.", "Not lower"),
    (Uppercase(), "ALL UPPER!", "Mostly UPPER"),
    (IncludeWords(("river", "Lantern")), "A lantern by the river.", "A lantern alone."),
    (ForbiddenWords(("winter",)), "Summer is warm; wintery is not a word here.", "Winter is cold."),
    (StartsWith("My answer is"), "  my answer is yes", "Well, my answer is yes"),
    (EndsWith("Any other questions?"), "Done. Any other questions?\n", "Any other questions? Yes."),
    (BulletCount(2), "* one\n* two\ntext", "* one\n* two\n- three"),
    (JsonFormat(), '```json\n{"a": [1, 2]}\n```', "{'a': 1}"),
    (SectionCount(2), "Section 1\nintro\nSection 2\nbody", "Section 1 only"),
    (NoCommas(), "no commas at all", "one, two"),
    (Quoted(), '"wrapped"', 'not "wrapped"'),
]


def test_every_type_is_covered():
    assert {c.kind for c, _, _ in CASES} == set(CONSTRAINT_TYPES)
    assert len(CONSTRAINT_TYPES) >= 10


@pytest.mark.parametrize("constraint, good, bad", CASES, ids=[c.kind for c, _, _ in CASES])
def test_each_constraint(constraint, good, bad):
    assert constraint.check(good)
    assert not constraint.check(bad)
    assert constraint.describe() and constraint.describe().endswith((".", "]", "2", "?"))


def test_strict_vs_loose():
    text = "Sure! Here is my answer:\nall lowercase content here"
    verdict = verify_instructions(text, [Lowercase()])
    assert not verdict.strict_all and verdict.loose_all
    assert "loosely" in verdict.reason
    bold = verify_instructions('**"wrapped in quotes"**', [Quoted()])
    assert bold.strict_all is False and bold.loose_all  # markdown * stripped in loose mode


def test_verdict_reports_each_constraint_and_skips_the_think_block():
    text = "<think>\nI Must Use Capitals, Commas.\n</think>\n\nall fine here<|im_end|>"
    verdict = verify_instructions(text, [Lowercase(), NoCommas(), MinWords(5)])
    assert [r.strict for r in verdict.per_constraint] == [True, True, False]
    assert verdict.reason == "failed: min_words"
    assert verdict.strict_fraction == pytest.approx(2 / 3)
    assert verify_instructions("<think>never closed", [Lowercase()]).reason.startswith("think block")
    assert verify_instructions("anything", []).strict_all


def test_loose_variants():
    variants = loose_variants("Intro\n*body*\nOutro")
    assert "*body*" in variants and "body" in variants and "Intro\n*body*\nOutro" in variants


def test_json_round_trip_and_bad_kind():
    constraints = [c for c, _, _ in CASES]
    assert constraints_from_json(constraints_to_json(constraints)) == constraints
    with pytest.raises(ValueError):
        constraints_from_json('[{"kind": "no_such_thing"}]')


def test_sampler_is_seeded_and_avoids_conflicts():
    assert sample_constraints(7, k=3) == sample_constraints(7, k=3)
    kinds_seen = set()
    for seed in range(200):
        cs = sample_constraints(seed, k=3)
        kinds = {c.kind for c in cs}
        assert len(kinds) == 3
        assert not {"lowercase", "uppercase"} <= kinds
        assert not {"min_words", "max_words"} <= kinds
        kinds_seen |= kinds
    assert kinds_seen == set(CONSTRAINT_TYPES)


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=300), seed=st.integers(0, 10_000))
def test_never_raises(text, seed):
    verdict = verify_instructions(text, sample_constraints(seed, k=3))
    assert isinstance(verdict.strict_all, bool) and verdict.reason
    assert verdict.strict_all <= verdict.loose_all  # strict implies loose
