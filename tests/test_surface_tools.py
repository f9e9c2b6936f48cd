"""The tools surface: the DAG's calculation as dependent calculator calls, judged by execution."""
from __future__ import annotations

import json
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadekit.chat import EMPTY_THINK, render
from cascadekit.domains import chat_record
from cascadekit.domains.dag import draw_dag
from cascadekit.domains.tools import (
    CALCULATOR_TOOL, check_gold, gold_transcript, judge, make_task, respond, transcript,
)

OPS = range(2, 5)


def draw(seed: int, n: int = 1) -> list:
    rng = random.Random(seed)
    return [make_task(rng, OPS) for _ in range(n)]


def test_task_is_the_dag_through_the_calculator():
    rng, again = random.Random(7), random.Random(7)
    task, dag = make_task(rng, OPS), draw_dag(again, OPS)
    assert task.prompt == f"{dag.problem.problem_text} {dag.problem.question} Use the calculator."
    assert task.tools == [CALCULATOR_TOOL]
    assert len(task.tool_calls) == len(task.tool_results) == len(dag.computed)
    assert task.tool_results[-1] == str(dag.answer) and task.gold == {
        "answer": dag.answer, "results": [dag.values()[i] for i in dag.computed]}
    assert task.answer == task.no_think_answer == f"\\boxed{{{dag.answer}}}"
    assert task.thinking.count(" = ") == len(dag.computed) and task.thinking.endswith(".")
    assert all(name in task.thinking for name in (dag.names[i] for i in dag.computed))


def test_gold_calls_give_the_gold_results():
    for task in draw(1, 200):
        assert [call["name"] for call in task.tool_calls] == ["calculator"] * len(task.tool_calls)
        assert [respond(call) for call in task.tool_calls] == task.tool_results
        assert all(re.fullmatch(r"[\d ()+*-]+", call["arguments"]["expression"]) for call in task.tool_calls)


def test_gold_transcript_scores_one_in_both_modes():
    for task in draw(2, 50):
        for think in (True, False):
            verdict = judge(task.gold, gold_transcript(task, think))
            assert verdict.score == 1.0, verdict
            assert verdict.details == {"calls": len(task.tool_calls), "malformed": 0,
                                       "answer_correct": True, "results_match": True}
        # /no_think without the pre-filled block: the model writes the empty think blocks itself
        assert judge(task.gold, gold_transcript(task, True).replace(task.thinking, "", 1)).score == 1.0


def test_wrong_or_malformed_conversations_score_zero():
    task = max(draw(3, 40), key=lambda t: len(t.tool_calls))
    gold = gold_transcript(task, False)
    first = json.dumps(task.tool_calls[0])

    def swap_first(call: str) -> str:
        return gold.replace(first, call, 1)

    wrong = {
        "final answer: wrong answer": gold.replace(task.answer, f"\\boxed{{{task.gold['answer'] + 1}}}"),
        "1 <tool_call> block(s) not a JSON object": swap_first(first[:-1]),
        "call 1: error: unknown tool": swap_first(first.replace('"calculator"', '"calc"')),
        "call 1: error: unexpected argument": swap_first(first.replace('{"expression"', '{"x": 1, "expression"')),
        "call 1: error: Call is not allowed": swap_first(json.dumps(
            {"name": "calculator", "arguments": {"expression": "__import__('os')"}})),
        "call 1: error: operator ** is not allowed": swap_first(json.dumps(
            {"name": "calculator", "arguments": {"expression": "2**99999"}})),
        "call 1: error: expression longer than 200": swap_first(json.dumps(
            {"name": "calculator", "arguments": {"expression": "1+" * 5000 + "1"}})),
        "no tool call": task.answer,
    }
    for reason, text in wrong.items():
        verdict = judge(task.gold, text)
        assert verdict.score == 0.0 and verdict.reason.startswith(reason), (reason, verdict)


@pytest.mark.parametrize("gold, field", [
    (None, "expected a dict"), ({"results": [1]}, "'answer'"), ({"answer": True, "results": [1]}, "'answer'"),
    ({"answer": 1}, "'results'"), ({"answer": 1, "results": []}, "'results'"),
    ({"answer": 1, "results": ["1"]}, "'results'"), ({"answer": 1, "results": [2]}, "'results'"),
])
def test_check_gold_names_the_field(gold, field):
    with pytest.raises(ValueError, match=f"tools gold: .*{re.escape(field)}"):
        check_gold(gold)
    verdict = judge(gold, "\\boxed{1}")
    assert verdict.score == 0.0 and field in verdict.reason


def test_check_gold_accepts_task_gold():
    for task in draw(4, 20):
        check_gold(task.gold)


def test_prompts_are_distinct():
    prompts = [task.prompt for task in draw(5, 300)]
    assert len(set(prompts)) == len(prompts)


@pytest.mark.parametrize("think", [True, False])
def test_gold_transcript_is_what_the_chat_template_renders(think):
    """The gold turns rendered with the chat template, cut into completions and tool results,
    give back the gold transcript: the evaluation loop and the judge see the same text."""
    task = max(draw(6, 40), key=lambda t: len(t.tool_calls))
    messages = [{"role": "user", "content": f"{task.prompt} {'/think' if think else '/no_think'}"}]
    for k, (call, result) in enumerate(zip(task.tool_calls, task.tool_results)):
        messages += [{"role": "assistant", "content": "", "tool_calls": [call],
                      "reasoning_content": task.thinking if think and k == 0 else ""},
                     {"role": "tool", "content": result}]
    messages.append({"role": "assistant", "content": task.response(think), "reasoning_content": ""})
    text = render(messages, task.tools)
    completions = [turn.split("<|im_end|>")[0] for turn in text.split("<|im_start|>assistant\n")[1:]]
    if not think:  # the generation prompt pre-fills the empty think block
        completions = [c.removeprefix(EMPTY_THINK) for c in completions]
    results = [[r] for r in re.findall(r"<tool_response>\n(.*?)\n</tool_response>", text)]
    assert transcript(completions, results) == gold_transcript(task, think)


@pytest.mark.parametrize("think", [True, False])
def test_chat_record_is_one_call_per_assistant_turn(think):
    task = max(draw(8, 40), key=lambda t: len(t.tool_calls))
    record = chat_record(task, think)
    text = render(record["messages"], json.loads(record["tools"]))
    turns = re.findall(r"<\|im_start\|>(assistant|user)\n(.*?)<\|im_end\|>", text, re.S)[1:]  # after the prompt
    roles = ["call" if "<tool_call>" in body else "response" if "<tool_response>" in body else role
             for role, body in turns]
    assert roles == ["call", "response"] * len(task.tool_calls) + ["assistant"]
    assert all(body.count("<tool_call>") == 1 for role, body in turns if "<tool_call>" in body)
    assert [re.findall(r"<tool_response>\n(.*?)\n</tool_response>", body) for _, body in turns[1::2]] == \
        [[r] for r in task.tool_results]
    assert judge(record["gold"], gold_transcript(task, think)).score == 1.0


@settings(max_examples=100, deadline=None)
@given(gold=st.one_of(st.none(), st.integers(), st.text(max_size=5), st.dictionaries(
           st.sampled_from(["answer", "results"]),
           st.one_of(st.integers(), st.lists(st.integers(), max_size=3), st.text(max_size=3)))),
       completion=st.one_of(st.none(), st.integers(), st.text(max_size=300)))
def test_judge_never_raises_on_garbage(gold, completion):
    verdict = judge(gold, completion)
    assert verdict.score in (0.0, 1.0) and isinstance(verdict.reason, str)
