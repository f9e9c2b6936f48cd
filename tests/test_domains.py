"""Part II's domains as surfaces of one world: deterministic tasks in disjoint splits, parallel
/think and /no_think records whose gold answers pass their verifiers, multi-turn tool records,
and task records checked field by field."""
from __future__ import annotations

import copy
import json

import pytest

from cascadekit.chat import render, thinking_mode
from cascadekit.domains import (check_record, chat_records, gold_answer, domains, draw_tasks, prompt_of, raw_text, split_of,
                                stage_domains, surfaces_fingerprint)
from cascadekit.evaluation.stage_table import follows_mode

OPS = range(2, 5)
NAMES = list(domains())


def test_domains_cover_the_cascade() -> None:
    assert NAMES == ["general", "instructions", "math", "code", "tools", "swe"]
    assert stage_domains(1) == ["general", "instructions", "math", "code"]
    assert stage_domains(2) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_tasks_are_deterministic_and_in_their_split(name: str) -> None:
    a = draw_tasks(domains()[name], 5, 3, "sft", OPS)
    assert a == draw_tasks(domains()[name], 5, 3, "sft", OPS)
    assert all(split_of(t) == "sft" for t in a)
    assert len({t.key for t in a}) == 5


@pytest.mark.parametrize("name", NAMES)
def test_splits_are_disjoint(name: str) -> None:
    sft = {t.key for t in draw_tasks(domains()[name], 20, 0, "sft", OPS)}
    assert not sft & {t.key for t in draw_tasks(domains()[name], 20, 0, "eval", OPS)}


@pytest.mark.parametrize("name", NAMES)
def test_parallel_records_and_gold_answers_pass(name: str) -> None:
    task = draw_tasks(domains()[name], 1, 0, "sft", OPS)[0]
    think, no_think = chat_records(task)
    user = [m for m in think["messages"] if m["role"] == "user"][-1]["content"]
    assert user.endswith("/think") and thinking_mode(user)
    assert not thinking_mode([m for m in no_think["messages"] if m["role"] == "user"][-1]["content"])
    assert all(check_record(r) is r for r in (think, no_think))
    for record in (think, no_think):
        first_turn = gold_answer(record).split("\n<tool_response>")[0]
        assert follows_mode(first_turn, record["think"])
        verdict = domains()[name].judge(record["gold"], gold_answer(record))
        assert verdict.score == 1.0, verdict.reason
    text = raw_text(task)
    assert "<|im_start|>" not in text and "<think>" not in text


def test_tool_records_take_one_assistant_turn_per_call() -> None:
    task = draw_tasks(domains()["tools"], 1, 0, "sft", OPS)[0]
    record = chat_records(task)[0]
    roles = [m["role"] for m in record["messages"]]
    calls = len(task.tool_calls)
    assert roles == ["user"] + ["assistant", "tool"] * calls + ["assistant"]
    assert record["messages"][1]["reasoning_content"] == task.thinking
    assert all(m.get("reasoning_content") == "" for m in record["messages"][3::2])
    rendered = render(record["messages"], prompt_of(record)[1])
    turns = rendered.split("<|im_end|>", 1)[1]  # after the system turn that lists the tools
    assert turns.count("<tool_call>") == calls and turns.count("<tool_response>") == calls
    assert prompt_of(record)[0] == record["messages"][:1]


@pytest.mark.parametrize("name", NAMES)
def test_wrong_answers_fail(name: str) -> None:
    record = chat_records(draw_tasks(domains()[name], 1, 1, "eval", OPS)[0])[1]
    for wrong in ("", "I do not know.", "<think>\nhmm\n</think>\n\n\\boxed{-999}", "```python\nx = 1\n```"):
        verdict = domains()[name].judge(record["gold"], wrong)
        assert verdict.score < 0.5, (wrong, verdict)


def _broken(field: str, value) -> dict:
    record = copy.deepcopy(chat_records(draw_tasks(domains()["math"], 1, 0, "eval", OPS)[0])[0])
    if value is KeyError:
        del record[field]
    else:
        record[field] = value
    return record


@pytest.mark.parametrize("field,value,needle", [
    ("domain", "poetry", "'domain'"), ("domain", KeyError, "'domain'"), ("think", "yes", "'think'"),
    ("messages", [], "'messages'"), ("messages", [{"role": "wizard", "content": "x"}], "messages[0]"),
    ("messages", [{"role": "assistant", "content": "x"}], "no user turn"), ("tools", "{not json", "'tools'"),
    ("gold", None, "gold"), ("gold", {"answer": "many"}, "answer"),
])
def test_malformed_records_name_the_field(field: str, value, needle: str) -> None:
    with pytest.raises(ValueError, match=None) as err:
        check_record(_broken(field, value))
    assert needle in str(err.value)


def test_a_record_that_is_not_an_object_is_refused() -> None:
    for bad in (None, [], "record", 3):
        with pytest.raises(ValueError, match="JSON object"):
            check_record(bad)


def test_surfaces_fingerprint_is_stable_and_follows_ops() -> None:
    assert surfaces_fingerprint(OPS) == surfaces_fingerprint(OPS)
    assert surfaces_fingerprint(OPS) != surfaces_fingerprint(range(2, 4))


def test_records_are_json() -> None:
    for name in NAMES:
        for record in chat_records(draw_tasks(domains()[name], 1, 0, "eval", OPS)[0]):
            assert json.loads(json.dumps(record)) == record
