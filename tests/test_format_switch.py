"""Math RL's format-switch penalty: what counts as a switch, the reward's values, and hostile completions."""
from __future__ import annotations

import json
import time

import pytest

from cascadekit.rewards import math_rl_reward
from cascadekit.verify.format_switch import format_switches

GOLD = json.dumps({"answer": 14, "op": 2})
THINK = "<think>\nsharks = 1 + 10 + 3 = 14.\n</think>\n\n"


@pytest.mark.parametrize("answer, expected", [
    ("\\boxed{14}", []),
    ("\\boxed{14} \\boxed{14}", ["second_answer"]),
    ("```python\nprint(14)\n```\n\\boxed{14}", ["code"]),
    ("def count_sharks(tigers, eagles):\n    return 14\n\\boxed{14}", ["code"]),
    ('<tool_call>{"name": "calculator"}</tool_call> \\boxed{14}', ["tool_call"]),
    ("<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n\\boxed{14}", ["patch"]),
    ("--- a/x.py\n+++ b/x.py\n\\boxed{14}", ["patch"]),
])
def test_switches_are_named_in_the_answer_part(answer, expected) -> None:
    assert format_switches(THINK + answer) == expected


def test_the_reasoning_may_hold_anything() -> None:
    think = "<think>\ndef f():\n    return 1\n\\boxed{3} \\boxed{4} <tool_call>\n</think>\n\n"
    assert format_switches(think + "\\boxed{14}") == []
    assert format_switches("<think>\n\n</think>\n\nok <think>again</think> \\boxed{14}") == ["think"]


def test_reward_values_and_name() -> None:
    reward = math_rl_reward(0.5)
    assert reward.__name__ == "math_rl_reward_0.5"
    completions = [THINK + "\\boxed{14}", THINK + "\\boxed{14} \\boxed{14}", THINK + "\\boxed{13}",
                   THINK + "```\\boxed{13}```"]
    assert reward(["p"] * 4, completions, gold=[GOLD] * 4) == [1.0, 0.5, 0.0, -0.5]
    assert math_rl_reward(0.0)(["p"], [completions[1]], gold=[GOLD]) == [1.0]
    with pytest.raises(ValueError, match="penalty"):
        math_rl_reward(2.0)
    with pytest.raises(ValueError, match="gold"):
        reward(["p"], ["x"])


def test_hostile_completions_score_without_raising_or_stalling() -> None:
    reward = math_rl_reward()
    started = time.perf_counter()
    hostile = [None, 42, "", "\\boxed{" * 200_000, "<think>" + "x" * 1_000_000, "```" * 100_000,
               [{"role": "assistant", "content": THINK + "\\boxed{14}"}]]
    scores = reward(["p"] * len(hostile), hostile, gold=[GOLD] * len(hostile))
    assert time.perf_counter() - started < 60  # a hang guard, not a speed claim
    assert scores[-1] == 1.0 and all(s <= 0.0 for s in scores[:-1])
    assert reward(["p"], [THINK + "\\boxed{14}"], gold=[json.dumps({"answer": "x"})]) == [0.0]


STEPS = "tigers = 1. eagles = 10. sharks = tigers + eagles + 3 = 1 + 10 + 3 = 14."


def test_step_credit_pays_for_the_gold_steps_a_wrong_answer_gets_right() -> None:
    reward = math_rl_reward(0.5, step_credit=0.8)
    assert reward.__name__ == "math_rl_reward_0.5_steps0.8"
    two_of_three = "<think>\ntigers = 1. eagles = 10. sharks = tigers + eagles + 3 = 15.\n</think>\n\n"
    completions = [f"<think>\n{STEPS}\n</think>\n\n\\boxed{{14}}", two_of_three + "\\boxed{15}",
                   two_of_three + "\\boxed{15} \\boxed{15}", "\\boxed{14}", None, "<think>" + "x" * 300_000,
                   "<think>\ntigers = 1. eagles = 10. sharks = tigers +"]  # cut at the length limit
    scores = reward(["p"] * 7, completions, gold=[GOLD] * 7, reasoning=[STEPS] * 7)
    assert scores == pytest.approx([1.0, 0.8 * 2 / 3, 0.8 * 2 / 3 - 0.5, 0.2, 0.0, 0.0, 0.8 * 2 / 3])
    with pytest.raises(ValueError, match="reasoning"):
        reward(["p"], [completions[0]], gold=[GOLD])
    with pytest.raises(ValueError, match="step_credit"):
        math_rl_reward(0.5, step_credit=1.5)
    assert math_rl_reward(0.5, step_credit=0.0).__name__ == "math_rl_reward_0.5"  # the paper's reward keeps its keys
