"""Tool-call verifier: names, type-normalized arguments, parallel calls, reasons."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cascadekit.chat import render
from cascadekit.verify.tools import judge_tool_call, normalize_value, verify_tool_calls

GOLD = {"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "units": ["C"]}}


def turn(*calls: dict, think: bool = False) -> str:
    msgs = [{"role": "user", "content": "weather? " + ("/think" if think else "/no_think")},
            {"role": "assistant", "content": "", "tool_calls": list(calls)}]
    return render(msgs).rsplit("<|im_start|>assistant\n", 1)[1]


def test_normalize_value():
    assert normalize_value("5") == normalize_value(5) == normalize_value(5.0) == 5
    assert normalize_value(" Paris ") == normalize_value("paris")
    assert normalize_value(True) is True and normalize_value("true") == "true"
    assert normalize_value({"a": ["1.50"]}) == {"a": [1.5]}


def test_judge_single_call():
    same = {"name": "get_weather", "arguments": '{"city": "paris", "days": "3", "units": ["c"]}'}
    assert judge_tool_call(same, GOLD).correct
    cases = {
        "wrong function": {"name": "get_forecast", "arguments": GOLD["arguments"]},
        "missing argument(s): units": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}},
        "unexpected argument(s): lang": {"name": "get_weather",
                                         "arguments": {**GOLD["arguments"], "lang": "fr"}},
        "argument 'days': got 4": {"name": "get_weather", "arguments": {**GOLD["arguments"], "days": 4}},
        "not a JSON object": {"name": "get_weather", "arguments": "{oops"},
        "not an object with a name": ["get_weather"],
    }
    for reason, call in cases.items():
        verdict = judge_tool_call(call, GOLD)
        assert not verdict.correct and reason in verdict.reason, (reason, verdict)


def test_verify_tool_calls_in_a_turn():
    assert verify_tool_calls(turn(GOLD), [GOLD]).correct
    other = {"name": "get_time", "arguments": {"zone": "CET"}}
    assert verify_tool_calls(turn(other, GOLD), [GOLD, other]).correct  # any order
    assert "expected 2 call(s), got 1" in verify_tool_calls(turn(GOLD), [GOLD, other]).reason
    assert verify_tool_calls("<think>\n\n</think>\n\nIt is sunny.", [GOLD]).reason == "no tool call"
    assert verify_tool_calls("<think>\n\n</think>\n\nNo tool needed.", []).correct
    bad = verify_tool_calls("<tool_call>{broken</tool_call>", [GOLD])
    assert not bad.correct and bad.reason.startswith("malformed turn")
    wrong = {"name": "get_weather", "arguments": {**GOLD["arguments"], "city": "Lyon"}}
    assert "argument 'city'" in verify_tool_calls(turn(wrong), [GOLD]).reason


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200))
def test_never_raises(text):
    verdict = verify_tool_calls(text, [GOLD])
    assert isinstance(verdict.correct, bool) and verdict.reason


@settings(max_examples=100, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(), kids, max_size=3),
                    max_leaves=10))
def test_arguments_match_themselves(value):
    call = {"name": "f", "arguments": {"x": value}}
    assert judge_tool_call(call, call).correct


def test_absurd_nesting_is_a_verdict_not_a_crash():
    deep = "[" * 900 + "]" * 900
    text = '<tool_call>{"name": "f", "arguments": {"x": ' + deep + "}}</tool_call>"
    verdict = verify_tool_calls(text, [{"name": "f", "arguments": {"x": []}}])
    assert not verdict.correct and "nested too deeply" in verdict.reason
    deeper = text.replace(deep, "[" * 100_000 + "]" * 100_000)
    assert not verify_tool_calls(deeper, [{"name": "f", "arguments": {"x": []}}]).correct
