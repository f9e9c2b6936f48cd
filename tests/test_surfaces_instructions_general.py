"""The instructions and general surfaces of the DAG world: tasks, gold responses, judges, the hidden
quality function and its preference pairs."""
from __future__ import annotations

import dataclasses
import itertools
import json
import random

import pytest

from cascadekit.domains import general, instructions
from cascadekit.domains.dag import draw_dag
from cascadekit.verify.instructions import _FACTORIES, CONSTRAINT_TYPES, compatible, verify_instructions

OPS = (2, 3, 4)
GARBAGE = ["", " ", "\x00\xff\ud800" * 50, "<think>", "</think>", "<think>\nx\n</think>\n\n", "x" * 1_000_000,
           "9" * 1_000_000, "\n" * 1_000_000, "[" * 100_000, bytes(range(256)).decode("latin-1"), None, 14, [1]]
BAD_GOLDS = [None, 5, "gold", [], {}, {"constraints": 5}, {"request": ["describe"]}, {"names": "x" * 1000}]


def tasks(module, n: int, seed: int = 0, ops=OPS) -> list:
    rng = random.Random(seed)
    drawn = [module.make_task(rng, ops) for _ in range(n)]
    return [t for t in drawn if t is not None]


def with_think(task) -> str:
    return f"<think>\n{task.thinking}\n</think>\n\n{task.answer}"


# --- instructions -------------------------------------------------------------------------------

def test_instruction_gold_responses_score_one_in_both_modes() -> None:
    drawn = tasks(instructions, 200)
    assert len(drawn) >= 198  # a task is dropped only if its gold response fails
    for task in drawn:
        assert task.no_think_answer == task.answer
        for completion in (task.answer, task.no_think_answer, with_think(task), task.answer + "<|im_end|>"):
            verdict = instructions.judge(task.gold, completion)
            assert verdict.score == 1.0, (task.prompt, completion, verdict.reason)
            assert verdict.details["loose"] == 1.0 and verdict.details["correct"]
        instructions.check_gold(task.gold)
        json.dumps(task.gold)


def test_instruction_prompt_is_the_dag_question_then_one_sentence_per_constraint() -> None:
    rng = random.Random(3)
    task = instructions.make_task(rng, [3])
    constraints = json.loads(task.gold["constraints"])
    assert 1 <= len(constraints) <= 3
    dag = draw_dag(random.Random(3), [3])
    assert task.prompt.startswith(f"{dag.problem.problem_text} {dag.problem.question} ")
    assert task.thinking.startswith(" ".join(dag.steps()))
    assert task.gold["answer"] == dag.answer and str(dag.answer) in task.answer


def test_every_compatible_set_of_kinds_has_a_gold_response_that_passes() -> None:
    rng = random.Random(0)
    kinds = sorted(CONSTRAINT_TYPES)
    checked = 0
    for k in (1, 2, 3):
        for combo in itertools.combinations(kinds, k):
            if not compatible(list(combo)):
                continue
            for _ in range(3):  # parameters drawn as the sampler draws them
                constraints = [_FACTORIES[kind](rng) for kind in combo]
                response = instructions.respond(rng.randint(0, 1000), constraints)
                assert verify_instructions(response, constraints).strict_all, (constraints, response)
                checked += 1
    assert checked > 500


@pytest.mark.parametrize("kind", sorted(CONSTRAINT_TYPES))
def test_each_kind_passes_its_gold_and_fails_the_plain_answer(kind: str) -> None:
    constraint = _FACTORIES[kind](random.Random(1))
    gold = {"constraints": json.dumps([{"kind": kind, **dataclasses.asdict(constraint)}]), "answer": 14}
    formatted = instructions.respond(14, [constraint])
    assert instructions.judge(gold, formatted).score == 1.0
    plain = "The answer is 14." if kind not in ("no_commas", "max_words") else "Well, the answer is 14. " * 9
    verdict = instructions.judge(gold, plain)
    assert verdict.score == 0.0 and verdict.details["constraints"] == [
        {"kind": kind, "strict": False, "loose": verdict.details["loose"] == 1.0}]


def test_loose_forgives_a_preamble_that_strict_does_not() -> None:
    gold = {"constraints": '[{"kind": "lowercase"}, {"kind": "max_words", "n": 15}]', "answer": 14}
    verdict = instructions.judge(gold, "Sure! Here it is:\nthe answer is 14.")
    assert verdict.score == 0.0 and verdict.details["loose"] == 1.0
    assert verdict.details["constraints"][0] == {"kind": "lowercase", "strict": False, "loose": True}
    assert instructions.judge(gold, "**the answer is 14.**").details["loose"] == 1.0


def test_the_right_number_is_reported_not_scored() -> None:
    gold = {"constraints": '[{"kind": "quoted"}]', "answer": 14}
    wrong = instructions.judge(gold, '"The answer is 41."')
    assert wrong.score == 1.0 and wrong.details["correct"] is False
    assert instructions.judge(gold, '"The answer is 14."').details["correct"] is True
    assert instructions.judge(gold, '"The answer is 140."').details["correct"] is False
    thought = instructions.judge(gold, '<think>\nThe answer is 14.\n</think>\n\n"The answer is 4."')
    assert thought.details["correct"] is False


@pytest.mark.parametrize("gold, field", [
    ({"constraints": '[{"kind": "shout"}]', "answer": 1}, "field 'constraints' has unknown constraint kind 'shout'"),
    ({"constraints": '[{"kind": "line_count", "n": -1}]', "answer": 1}, "field 'constraints'.*'n'"),
    ({"constraints": "not json", "answer": 1}, "field 'constraints'"),
    ({"constraints": [], "answer": 1}, "field 'constraints'"),
    ({"answer": 1}, "field 'constraints' is missing"),
    ({"constraints": "[]"}, "field 'answer' is missing"),
    ({"constraints": "[]", "answer": "14"}, "field 'answer'"),
    ({"constraints": "[]", "answer": True}, "field 'answer'"),
    ({"constraints": "[]", "answer": 10**5000}, "field 'answer'"),
    ([], "must be a dict"),
])
def test_instruction_check_gold_names_the_field(gold, field: str) -> None:
    with pytest.raises(ValueError, match=f"^instructions gold: .*{field}"):
        instructions.check_gold(gold)
    assert instructions.judge(gold, "the answer is 1.").score == 0.0


def test_an_unknown_constraint_kind_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown constraint kind 'shout' \(known: lowercase, "):
        instructions.check_gold({"constraints": '[{"kind": "shout"}]', "answer": 1})


def test_instruction_judge_never_raises() -> None:
    gold = tasks(instructions, 1)[0].gold
    for completion in GARBAGE:
        verdict = instructions.judge(gold, completion)
        assert 0.0 <= verdict.score <= 1.0 and verdict.reason
    for bad in BAD_GOLDS:
        assert instructions.judge(bad, "The answer is 14.").score == 0.0
    assert instructions.judge(gold, "").score == 0.0  # IFEval: an empty answer follows nothing


# --- general --------------------------------------------------------------------------------------

def test_general_gold_responses_score_one_in_both_modes() -> None:
    drawn = tasks(general, 300)
    assert {t.gold["request"] for t in drawn} == set(general.REQUESTS)
    for task in drawn:
        assert task.no_think_answer == task.answer and task.answer.endswith(general.CLOSES)
        for completion in (task.answer, with_think(task), task.answer + "<|im_end|>"):
            verdict = general.judge(task.gold, completion)
            assert verdict.score == pytest.approx(1.0), (task.prompt, completion, verdict)
            assert general.quality(task.gold, completion) == verdict.score
        general.check_gold(task.gold)
        json.dumps(task.gold)


def first_of(request: str, strays: bool = False):
    """The first general task of a request kind (with a quantity the answer must not name, if ``strays``)."""
    return next(t for t in tasks(general, 200) if t.gold["request"] == request
                and (not strays or set(t.gold["names"]) - set(t.gold["mentions"])))


def test_general_requests_have_fixed_phrasings() -> None:
    rng = random.Random(11)
    dag = draw_dag(random.Random(11), [3])
    task = general.make_task(rng, [3])
    assert task.prompt.startswith(dag.problem.problem_text + " ")
    request = task.prompt[len(dag.problem.problem_text) + 1:]
    assert (request.startswith(("Describe ", "List what ", "Which is larger, ")) or
            request == "Summarise the problem.")
    describe = first_of("describe")
    assert describe.answer.split(".")[0] + "." in describe.prompt  # the problem's own sentence
    listing = first_of("list")
    assert " depends on " in listing.answer and listing.prompt.split(". ")[-1].startswith("List what ")
    compare = first_of("compare")
    assert " is larger: " in compare.answer and " against " in compare.answer
    summary = first_of("summarise")
    assert summary.answer.startswith(f"It has {len(summary.gold['names'])} quantities; the question asks for ")


def test_each_quality_part_lowers_the_score_when_broken() -> None:
    task = first_of("describe", strays=True)
    gold, answer = task.gold, task.answer
    close = next(c for c in general.CLOSES if answer.endswith(c))
    body = answer[:-len(close)].rstrip()
    stray = next(n for n in gold["names"] if n not in gold["mentions"])
    cases = {
        "correctness": f"{body} Also {stray}. {close}",
        "concision": f"{body} {general.PADDING} {close}",
        "close": body,
    }
    for part, response in cases.items():
        parts = general.quality_parts(gold, response)
        assert parts[part] < 1.0 and general.quality(gold, response) < 1.0, part
    roomy = {**gold, "length": 1000}  # no concision cost, so only repetition counts
    repeated = f"{body} {body} {close}"
    assert general.quality_parts(roomy, repeated)["no_repetition"] < 1.0
    assert general.quality(roomy, repeated) < general.quality(roomy, answer) == pytest.approx(1.0)


def test_wrong_facts_score_zero_or_partly() -> None:
    compare = first_of("compare")
    big, small = compare.gold["order"][0]
    vb, vs = compare.gold["order"][1]
    assert general.quality(compare.gold, f"{small} is larger: {vs} against {vb}. Hope this helps.") == 0.0
    assert general.quality(compare.gold, f"{big} is larger: {vs} against {vb}. Hope this helps.") == 0.0
    assert general.quality(compare.gold, f"{big}. Hope this helps.") == 0.0  # the larger value unsaid
    assert general.quality(compare.gold, f"{big} is larger: {vb}. Hope this helps.") == pytest.approx(2 / 3)
    summary = first_of("summarise")
    count = len(summary.gold["names"])
    half = general.quality(summary.gold, summary.answer.replace(f"has {count} ", f"has {count + 1} "))
    assert half == pytest.approx(0.5)
    for wrong in ("", "I do not know.", "<think>\nhmm\n</think>\n\n\\boxed{-999}", "Hope this helps."):
        assert general.judge(summary.gold, wrong).score == 0.0
    unclosed = "<think>\n" + summary.answer
    assert general.judge(summary.gold, unclosed).score == 0.0


def test_preference_pairs_are_ordered_by_the_hidden_quality() -> None:
    seen = set()
    for task in tasks(general, 60, seed=4):
        rng = random.Random(task.key)
        pairs = general.preference_pairs(task, rng, 6)
        assert pairs and pairs == general.preference_pairs(task, random.Random(task.key), 6)
        assert len(set(pairs)) == len(pairs)
        for chosen, rejected in pairs:
            assert chosen != rejected
            assert general.quality(task.gold, chosen) > general.quality(task.gold, rejected)
        seen |= set(general.perturbations(task, random.Random(0)))
    assert seen == {"wrong_fact", "verbose", "repeated", "no_close", "truncated"}


@pytest.mark.parametrize("gold, field", [
    ({"request": "chat"}, "field 'request' must be one of describe, list, compare, summarise"),
    ({"names": []}, "field 'names'"),
    ({"names": "sharks"}, "field 'names'"),
    ({"subject": "whales"}, "field 'subject'"),
    ({"mentions": ["whales"]}, "field 'mentions'"),
    ({"facts": [3]}, "field 'facts'"),
    ({"order": [["a"]]}, "field 'order'"),
    ({"length": 0}, "field 'length'"),
    ({"length": 10**5000}, "field 'length'"),
    ({"length": None}, "field 'length'"),
])
def test_general_check_gold_names_the_field(gold, field: str) -> None:
    good = tasks(general, 1)[0].gold
    broken = {**good, **gold}
    with pytest.raises(ValueError, match=f"^general gold: {field}"):
        general.check_gold(broken)
    missing = {k: v for k, v in good.items() if k != "facts"}
    with pytest.raises(ValueError, match="^general gold: field 'facts' is missing"):
        general.check_gold(missing)
    assert general.judge(broken, tasks(general, 1)[0].answer).score == 0.0


def test_general_judge_never_raises() -> None:
    task = tasks(general, 1)[0]
    for completion in GARBAGE:
        verdict = general.judge(task.gold, completion)
        assert 0.0 <= verdict.score <= 1.0 and verdict.reason
    for bad in BAD_GOLDS:
        assert general.judge(bad, task.answer).score == 0.0
        with pytest.raises(ValueError, match="^general gold: "):
            general.quality(bad, task.answer)


# --- both -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("module", [instructions, general], ids=["instructions", "general"])
def test_draws_are_distinct_and_short(module) -> None:
    drawn = tasks(module, 300)
    assert len({t.prompt for t in drawn}) == len(drawn) >= 295
    assert all("/think" not in t.prompt and "/no_think" not in t.prompt for t in drawn)
    at_four = tasks(module, 100, seed=1, ops=(4,))
    assert max(len(t.prompt + t.thinking + t.answer) for t in at_four) < 700
