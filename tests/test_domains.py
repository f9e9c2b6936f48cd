"""Toy domains: deterministic tasks, parallel /think and /no_think records, verifiers that
accept the gold answers, reject wrong ones and never raise, disjoint splits."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadekit.chat import render, thinking_mode
from cascadekit.domains import chat_records, domains, draw_tasks, prompt_of, raw_text, split_of, stage_domains
from cascadekit.domains import general
from cascadekit.domains.instructions import judge as if_judge
from cascadekit.domains.suites import follows_mode, generation_prompt

OPS = range(2, 6)
NAMES = list(domains())


def gold_completion(record: dict) -> str:
    """The gold assistant turn as a completion after the generation prompt."""
    messages, tools = prompt_of(record)
    full = render(record["messages"], tools)
    return full[len(render(messages, tools, add_generation_prompt=True)):]


def test_domains_cover_the_cascade() -> None:
    assert NAMES == ["general", "instructions", "math", "code", "tools", "swe"]
    assert stage_domains(1) == ["general", "instructions", "math", "code"]
    assert stage_domains(2) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_tasks_are_deterministic_and_in_their_split(name: str) -> None:
    a = draw_tasks(domains()[name], 5, 3, "sft", OPS)
    b = draw_tasks(domains()[name], 5, 3, "sft", OPS)
    assert a == b
    assert all(split_of(t) == "sft" for t in a)
    assert len({t.key for t in a}) == 5


@pytest.mark.parametrize("name", NAMES)
def test_splits_are_disjoint(name: str) -> None:
    sft = {t.key for t in draw_tasks(domains()[name], 20, 0, "sft", OPS)}
    evaluation = {t.key for t in draw_tasks(domains()[name], 20, 0, "eval", OPS)}
    assert not sft & evaluation


@pytest.mark.parametrize("name", NAMES)
def test_parallel_records_and_gold_answers_pass(name: str) -> None:
    task = draw_tasks(domains()[name], 1, 0, "sft", OPS)[0]
    think, no_think = chat_records(task)
    assert thinking_mode(think["messages"][-2]["content"]) and not thinking_mode(no_think["messages"][-2]["content"])
    assert think["messages"][-2]["content"].endswith("/think")
    assert think["messages"][-1]["reasoning_content"] and no_think["messages"][-1]["reasoning_content"] == ""
    for record in (think, no_think):
        completion = gold_completion(record)
        assert follows_mode(completion, record["think"])
        verdict = domains()[name].judge(record["gold"], completion)
        assert verdict.score == 1.0, verdict.reason
    assert "<|im_start|>" not in raw_text(task) and "<think>" not in raw_text(task)


@pytest.mark.parametrize("name", NAMES)
def test_wrong_answers_fail(name: str) -> None:
    task = draw_tasks(domains()[name], 1, 1, "eval", OPS)[0]
    record = chat_records(task)[1]
    for wrong in ("", "I do not know.", "<think>\nhmm\n</think>\n\n\\boxed{-999}", "```python\nx = 1\n```"):
        assert domains()[name].judge(record["gold"], wrong).score == 0.0


@settings(max_examples=25, deadline=None)
@given(text=st.text(max_size=200))
def test_cheap_verifiers_never_raise(text: str) -> None:
    for name in ("general", "instructions", "math", "tools"):
        task = draw_tasks(domains()[name], 1, 0, "eval", OPS)[0]
        verdict = domains()[name].judge(task.gold, text)
        assert 0.0 <= verdict.score <= 1.0 and isinstance(verdict.reason, str)


def test_oracle_prefers_correct_concise_non_repetitive() -> None:
    record = chat_records(draw_tasks(domains()["general"], 1, 0, "eval", OPS)[0])[0]
    gold, wrong = record["gold"]["answer"], record["gold"]["distractors"][0] if record["gold"]["distractors"] else "nobody"
    concise = f"It is {gold}."
    verbose = f"It is {gold}. " + "Let me add some more words about many different unrelated things here now. " * 2
    repetitive = f"It is {gold}. " + "the answer is the answer is the answer is " * 3
    hedged = f"It is {gold} or {wrong}." if wrong != "nobody" else "It is nobody."
    scores = [general.oracle_score(record, a) for a in (concise, verbose, repetitive, hedged)]
    assert scores[0] == 1.0 and 0 < scores[1] < 1 and 0 < scores[2] < scores[1] and scores[3] == 0.0
    assert general.preference_pair(record, verbose, concise) == (concise, verbose)
    assert general.preference_pair(record, concise, concise) is None
    assert general.oracle_score(record, f"<think>\n{wrong} {wrong}\n</think>\n\n{gold}") == 1.0


def test_instruction_judge_reports_strict_and_loose() -> None:
    gold = {"constraints": '[{"kind": "starts_with", "phrase": "Here is"}]'}
    assert if_judge(gold, "Here is the harbor.").score == 1.0
    loose = if_judge(gold, "Sure!\nHere is the harbor.")
    assert loose.score == 0.0 and loose.details["loose"] == 1.0
    assert if_judge({"constraints": "not json"}, "x").score == 0.0


def test_mode_following() -> None:
    assert follows_mode("<think>\nsteps\n</think>\n\nanswer", True)
    assert not follows_mode("<think>\n\n</think>\n\nanswer", True)
    assert not follows_mode("answer", True)
    assert follows_mode("answer", False)
    assert not follows_mode("<think>\nsteps\n</think>\n\nanswer", False)


def test_no_think_generation_prompt_prefills_empty_think_block() -> None:
    task = draw_tasks(domains()["math"], 1, 0, "eval", OPS)[0]
    think, no_think = chat_records(task)
    assert generation_prompt(think).endswith("<|im_start|>assistant\n")
    assert generation_prompt(no_think).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_tool_tasks_offer_the_gold_tool() -> None:
    for task in draw_tasks(domains()["tools"], 10, 0, "sft", OPS):
        offered = [t["function"]["name"] for t in task.tools]
        assert task.gold["calls"][0]["name"] in offered and len(offered) == 2


def test_swe_bug_is_visible_and_gold_diff_fixes_it() -> None:
    task = draw_tasks(domains()["swe"], 1, 2, "sft", OPS)[0]
    assert domains()["swe"].judge(task.gold, f"```diff\n{task.gold['gold_diff']}```").score == 1.0
    empty_fix = "```diff\n--- a/calc.py\n+++ b/calc.py\n```"
    assert domains()["swe"].judge(task.gold, empty_fix).score == 0.0
