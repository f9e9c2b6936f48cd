"""The process-verified judge: gold verifies, each kind of mutation is caught, nothing raises."""

from __future__ import annotations

from dataclasses import asdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cascadekit.verify.mutations import (answer_only, change_value, drop_step, solution_steps, swap_parent,
                                          with_steps, wrong_answer)
from cascadekit.verify.process import ParsedSolution, ProcessVerdict, evaluate, judge, parse_solution
from cascadekit.world import CONTEXTS, generate_problem, generate_problems
from cascadekit.world.render import STYLES


@pytest.mark.parametrize("style", STYLES)
def test_every_gold_solution_verifies(style):
    problems = generate_problems(ops=range(2, 21), contexts=tuple(CONTEXTS), n=1140, seed=0, style=style)
    for p in problems:
        for text in (p.training_text, p.rl_prompt + " " + p.training_text.removeprefix(p.rl_prompt)):
            verdict = judge(text, p)
            assert verdict.correct, (verdict.reason, p.training_text)
        completion = p.training_text.removeprefix(p.rl_prompt)  # what an RL policy writes
        assert judge(completion, p).process_accuracy == 1.0


@given(seed=st.integers(0, 2**32), op=st.integers(2, 20), context=st.sampled_from(sorted(CONTEXTS)),
       style=st.sampled_from(STYLES))
@settings(max_examples=200, deadline=None)
def test_gold_verifies_property(seed, op, context, style):
    p = generate_problem(op, context, seed, style)
    verdict = judge(p.training_text, p)
    assert verdict.correct and verdict.n_extra == 0 and verdict.reason == "correct"


@pytest.fixture(scope="module")
def problems():
    return [generate_problem(op, c, seed, s) for op in (3, 8, 15) for c in CONTEXTS
            for seed in range(4) for s in STYLES]


def test_dropped_step_is_missing(problems):
    for p in problems:
        verdict = judge(drop_step(p), p)
        assert not verdict.correct and verdict.n_missing == 1
        assert verdict.process_accuracy < 1


def test_changed_value_is_value_mismatch(problems):
    tested = 0
    for p in problems:
        text = change_value(p)
        if text is None:
            continue  # a reverse-mode problem whose only given value is the equation's
        verdict = judge(text, p)
        assert not verdict.correct and verdict.n_value == 1 and verdict.n_dependency == 0
        assert verdict.answer_correct and verdict.n_missing == 0
        tested += 1
    assert tested >= 0.9 * len(problems)


def test_swapped_parent_is_dependency_mismatch(problems):
    tested = 0
    for p in problems:
        text = swap_parent(p)
        if text is None:
            continue  # the last step already uses every earlier quantity
        verdict = judge(text, p)
        assert not verdict.correct and verdict.n_dependency == 1 and verdict.n_value == 0, verdict
        tested += 1
    assert tested >= len(problems) // 2


def test_wrong_answer_is_answer_mismatch(problems):
    for p in problems:
        verdict = judge(wrong_answer(p), p)
        assert not verdict.correct and verdict.answer_mismatch and not verdict.answer_correct
        assert verdict.process_accuracy == 1.0
        assert "answer" in verdict.reason


def test_extra_nodes_are_allowed_but_counted():
    p = generate_problem(5, "A", seed=2, style="compact")
    free = next(c for c in "ZYXWVU" if f" {c};" not in p.solution_text and f" {c} " not in p.solution_text)
    extra = f"Define owls in Nowhere as {free}; so {free} = 4."
    verdict = judge(with_steps(p, [extra, *solution_steps(p)]), p)
    assert verdict.correct and verdict.n_extra == 1


def test_a_letter_is_one_ascii_letter_as_in_the_official_parser():
    """``as Z9;`` is no definition (the official grammar's letter is one letter): its text joins the step before."""
    p = generate_problem(5, "A", seed=2, style="compact")
    steps = solution_steps(p)
    verdict = judge(with_steps(p, [*steps[:1], "Define owls in Nowhere as Z9; so Z9 = 4.", *steps[1:]]), p)
    assert verdict.n_extra == 0


def test_answer_only_is_not_correct():
    p = generate_problem(6, "B", seed=4)
    verdict = judge(answer_only(p), p)
    assert verdict.answer_correct and not verdict.correct
    assert verdict.n_missing == verdict.n_gold and verdict.process_accuracy == 0


def test_parse_resolves_intermediate_letters():
    text = ("Define bees in Oak as a; so a = 2. Define ants in Oak as b; so b = 3. "
            "Define moths in Elm as c; t = a + b = 2 + 3 = 5; so c = 2 * t = 2 * 5 = 10. Answer: 10.")
    parsed = parse_solution(text)
    assert [s.name for s in parsed.steps] == ["bees in oak", "ants in oak", "moths in elm"]
    assert parsed.steps[2].parents == {"bees in oak", "ants in oak"}
    assert parsed.steps[2].value == 10 and parsed.answer == 10


def test_parse_reads_named_steps_of_the_minimal_rendering():
    text = ("bees = 2. ants = 3. all insects = bees + ants = 2 + 3 = 5. "
            "owls = 2 * (all insects + bees) = 2 * (5 + 2) = 2 * 7 = 14. Answer: 14.")
    parsed = parse_solution(text)
    assert [s.name for s in parsed.steps] == ["bees", "ants", "all insects", "owls"]
    assert parsed.steps[0].parents == set() and parsed.steps[0].value == 2
    assert parsed.steps[2].parents == {"bees", "ants"} and parsed.steps[2].value == 5
    assert parsed.steps[3].parents == {"all insects", "bees"} and parsed.steps[3].value == 14
    assert parsed.answer == 14


def test_a_named_step_with_the_right_numbers_but_a_wrong_parent_is_a_dependency_mismatch():
    p = next(p for seed in range(50) if (p := generate_problem(6, "A", seed=seed, style="minimal"))
             and any(n.name not in p.nodes[-1].parents for n in p.nodes[:-1]))
    last = p.nodes[-1]
    stranger = next(n.name for n in p.nodes[:-1] if n.name not in last.parents)
    steps = solution_steps(p)
    steps[-1] = steps[-1].replace(f"= {last.parents[0]}", f"= {stranger}", 1).replace(
        f" {last.parents[0]} ", f" {stranger} ", 1)
    assert steps[-1] != solution_steps(p)[-1]
    verdict = judge(with_steps(p, steps), p)
    assert verdict.answer_correct and verdict.n_dependency == 1 and verdict.n_value == 0 and not verdict.correct


def test_value_falls_back_to_last_number():
    parsed = parse_solution("Define x in y as q; so q = about 7 or so.")
    assert parsed.steps[0].value == 7
    assert parse_solution("Define x in y as q; so q = (2 + 3) * 4 = 20 oops.").steps[0].value == 20


@pytest.mark.parametrize("expression,value", [
    ("1 + 2 * 3", 7), ("(1 + 2) * 3", 9), ("-(4 - 6)", 2), ("7 / 2", 3.5), ("8 / (4 - 4)", None),
    ("2 ** 3", None), ("10" * 50, None), ("(" * 60 + "1" + ")" * 60, None), ("1 +", None),
    ("", None), ("x + 1", None), ("٣ + 1", None), ("__import__('os')", None),
])
def test_evaluate(expression, value):
    assert evaluate(expression) == value


_ADVERSARIAL = st.sampled_from([
    "Define", "Define ", " as ", "x", ";", "=", "so", "<answer>", "</answer>", "<solution>", "</solution>",
    "Answer:", "(", ")", "*", "/", "0", "-", " ", str(10**400), "((((((((((", "1/0", "∑", "é", "\x00",
    "Define the number of adult lions in Maple Zoo as x; so x = 3.", "\n", ".", "lions = 3.", "all birds = ",
])


@given(text=st.one_of(st.text(max_size=400), st.lists(_ADVERSARIAL, max_size=80).map("".join)))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_never_raises(text):
    p = generate_problem(3, "A", seed=0)
    verdict = judge(text, p)
    assert isinstance(verdict, ProcessVerdict) and 0.0 <= verdict.process_accuracy <= 1.0
    assert isinstance(parse_solution(text), ParsedSolution)
    asdict(verdict)


def test_pathological_inputs_are_fast():
    p = generate_problem(3, "A", seed=0)
    for text in ("Define " * 30_000, "a = " * 30_000, "a. " * 50_000, "(" * 100_000, "1" * 100_000 + "x", "Define a as b; " * 5_000,
                 "<answer> " + "9" * 5000, "Answer: -" + "1" * 10_000):
        judge(text, p)  # would hang or raise on quadratic regexes or huge ints


# --- hostile model text (security issue: "verifiers never raise on any output") -------------

_ANY_CHAR = st.characters(exclude_categories=())  # surrogates and NUL included


@given(text=st.text(alphabet=_ANY_CHAR, max_size=300))
@settings(max_examples=200, deadline=None)
def test_judge_never_raises_on_any_text_surrogates_included(text):
    verdict = judge(text, generate_problem(4, "B", seed=1, style="minimal"))
    assert isinstance(verdict, ProcessVerdict) and verdict.reason and not verdict.correct


@pytest.mark.parametrize("text", [
    "[" * 200_000, "(" * 200_000 + "1", "Define x as a; so a = " + "(" * 200_000 + "1",
    "<answer> " + "9" * 5000 + " </answer>", "x = " + "9" * 5000 + ".", "Answer: 1" + "0" * 4999,
    "\x00" * 1000 + "Define a\x00b as c; so c = 1", "Define \ud800 as a; so a = 1 \udfff. <answer> \udc80 </answer>",
    "Define x as a; so a = 1 + 2. " * 350_000,  # about 10 MB
])
def test_issue_inputs_give_a_verdict_with_a_reason(text):
    p = generate_problem(3, "A", seed=0)
    verdict = judge(text, p)
    assert not verdict.correct and verdict.answer_mismatch
    assert verdict.reason.startswith("missing: ") and f"!= {p.answer}" in verdict.reason


def test_a_correct_solution_after_hostile_noise_still_verifies():
    p = generate_problem(3, "A", seed=0)
    assert judge(p.training_text + "\x00" + "[" * 10_000, p).correct


# --- issue 35: no prefix acceptance, tags of any length, Unicode decided ----------------------

def _paper_problem(mode: str = "forward", seed: int = 3):
    from cascadekit.world import paper
    import random
    return paper.generate(6, "A", random.Random(seed), seed=seed, mode=mode)


def _wrong_redefinition(p) -> str:
    """The last gold step again, under its own letter, with a value one too many."""
    last = solution_steps(p)[-1]
    head = last.split(";")[0]
    letter = head.rsplit(" ", 1)[1]
    return f"{head}; so {letter} = {p.nodes[-1].value + 1}."


def test_an_output_over_the_cap_is_rejected_whole_never_judged_on_its_prefix():
    from cascadekit.verify.process import MAX_TEXT
    p = _paper_problem()
    prefix = p.training_text
    text = prefix + " " * (MAX_TEXT - len(prefix)) + _wrong_redefinition(p)
    assert judge(prefix, p).correct and len(text) > MAX_TEXT
    verdict = judge(text, p)
    assert not verdict.correct and verdict.n_missing == verdict.n_gold and verdict.answer_mismatch
    assert "200,000-character cap" in verdict.reason and verdict.reason.startswith("missing: every step")


def test_a_wrong_redefinition_late_in_a_long_output_is_read():
    from cascadekit.verify.process import MAX_TEXT
    p = _paper_problem()
    body = p.training_text.split("</solution>")[0]
    text = body + " " * (MAX_TEXT - len(body) - 200) + _wrong_redefinition(p) + " </solution>"
    assert len(text) <= MAX_TEXT
    verdict = judge(text, p)
    assert not verdict.correct and verdict.n_value == 1, verdict.reason


@pytest.mark.parametrize("length", [0, 199, 201, 5_000])
def test_a_tag_of_any_length_is_stripped(length):
    p = _paper_problem()
    body, tail = p.training_text.split("</solution>")
    tag = f"<note {'n' * length} {_wrong_redefinition(p)}>"
    assert judge(f"{body} {tag} </solution>{tail}", p).correct  # a tag's content is never a step


def test_many_unclosed_angle_brackets_are_fast():
    p = _paper_problem()
    judge("<" * 199_000 + p.training_text[:900], p)  # linear: would hang on a tag regex that spans "<"


def _digits(text: str, zero: str) -> str:
    return "".join(chr(ord(zero) + int(ch)) if ch.isdigit() else ch for ch in text)


@pytest.mark.parametrize("zero", ["\uff10", "\u0660", "\u06f0", "\u0966"])  # fullwidth, Arabic-Indic, Persian, Devanagari
@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_unicode_decimal_digits_are_read_as_numbers_as_the_official_reads_them(zero, mode):
    p = _paper_problem(mode)
    assert judge(_digits(p.training_text, zero), p).correct
    wrong = _digits(p.training_text.replace("<answer> ", f"<answer> {p.answer + 1}", 1), zero)
    assert not judge(wrong, p).correct


@pytest.mark.parametrize("invisible", ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u202e"])
def test_invisible_format_characters_inside_expressions_are_ignored(invisible):
    p = _paper_problem()
    text = p.training_text.replace(" + ", f" {invisible}+{invisible} ").replace(" = ", f" ={invisible} ")
    assert text != p.training_text and judge(text, p).correct


@pytest.mark.parametrize("symbol", ["\uff0b", "\u2795", "\u00e9"])  # fullwidth plus, heavy plus, a letter
def test_another_non_ascii_character_makes_the_expression_prose_and_the_step_is_rejected(symbol):
    p = next(p for seed in range(40) if " + " in (p := _paper_problem(seed=seed)).solution_text)
    text = p.training_text.replace(" + ", f" {symbol} ", 1)
    verdict = judge(text, p)
    assert not verdict.correct and verdict.n_dependency >= 1, verdict.reason


@pytest.mark.parametrize("filler", ["", "the letter ", "the variable that we will call ", "word " * 40])
def test_define_takes_up_to_40_filler_words_between_as_and_the_letter(filler):
    parsed = parse_solution(f"Define bees in Oak as {filler}q; so q = 2.")
    assert [(s.name, s.letter, s.value) for s in parsed.steps] == [("bees in oak", "q", 2)]


def test_define_with_more_than_40_filler_words_is_no_step():
    steps = parse_solution("Define bees in Oak as " + "word " * 41 + "q; so q = 2.").steps
    assert all(step.name != "bees in oak" for step in steps)  # read as a minimal-grammar sentence instead


@pytest.mark.parametrize("text", [("Define " + "a " * 200) * 480, "Define a as " * 16_000,
                                  "Define a as " + "a " * 99_000, ("Define a " + "as " * 200) * 240])
def test_define_grammar_is_fast_on_hostile_text(text):
    import time
    start = time.process_time()
    parse_solution(text)
    assert time.process_time() - start < 20  # a hang guard, not a speed claim (about 2 s on one shared core)


def test_the_blind_spots_shared_with_the_official_parser_are_still_blind():
    """Documented in chapter 02 and ``official_format.BLIND_SPOTS``: if the judge learns to catch these, say so there.

    Parents come from a step's first side and its value from its last, so what lies between is never checked.
    """
    gold = ("Define bees in Oak as a; so a = 2. Define ants in Oak as b; so b = 2. "
            "Define moths in Elm as c; t = a + b = 2 + 2 = 4; so c = 2 * t = 2 * 4 = 8. Answer: 8.")
    wrong_operand = gold.replace("t = a + b = 2 + 2 = 4", "t = a + b = 2 + 3 = 4")  # b is 2, not 3
    wrong_intermediate = gold.replace("t = a + b = 2 + 2 = 4", "t = a + b = 2 + 2 = 5")  # t's own value
    expected = parse_solution(gold).steps
    for text in (wrong_operand, wrong_intermediate):
        assert text != gold and parse_solution(text).steps == expected


def test_step_accuracy_is_the_share_of_gold_steps_written_with_their_parents_and_value() -> None:
    from cascadekit.verify.process import MAX_TEXT, step_accuracy
    gold = "tigers = 1. eagles = 10. sharks = tigers + eagles + 3 = 1 + 10 + 3 = 14."
    assert step_accuracy(gold, gold) == 1.0
    assert step_accuracy("eagles = 10. tigers = 1.", gold) == pytest.approx(2 / 3)
    assert step_accuracy("tigers = 1. eagles = 10. sharks = tigers + 3 = 14.", gold) == pytest.approx(2 / 3)
    assert step_accuracy("tigers = 2. tigers = 1.", gold) == pytest.approx(1 / 3)  # the later definition counts
    for hostile in ("", "garbage", None, 42, "x = " * 1000, "tigers = 1. " + "y" * MAX_TEXT):
        assert step_accuracy(hostile, gold) == 0.0
    assert step_accuracy(gold, "no steps here") == 0.0
