"""Rewards in TRL's shape: outcome, process, mixed and strict, with the reward-hacking probe."""

from __future__ import annotations

import json
import re

import pytest

from cascadekit.rewards import (
    completion_text,
    mixed_reward,
    outcome_reward,
    process_reward,
    strict_reward,
)
from cascadekit.world import generate_problem

REWARDS = (outcome_reward, process_reward, strict_reward, mixed_reward())


@pytest.fixture(scope="module")
def problem():
    return generate_problem(6, "A", seed=1, style="compact")


def _call(fn, problem, completions, as_json=False):
    gold = json.dumps(problem.to_dict()) if as_json else problem.to_dict()
    return fn([problem.rl_prompt] * len(completions), completions, gold=[gold] * len(completions))


def _gold_completion(problem):
    return problem.training_text.removeprefix(problem.rl_prompt)


def test_gold_scores_one_everywhere(problem):
    for fn in REWARDS:
        assert _call(fn, problem, [_gold_completion(problem)]) == [1.0]
        assert _call(fn, problem, [_gold_completion(problem)], as_json=True) == [1.0]


def test_hacking_probe_answer_only(problem):
    """Stating only the right answer fools the outcome reward, not the process-aware ones."""
    hack = [f"</solution> <answer> {problem.answer} </answer>"]
    assert _call(outcome_reward, problem, hack) == [1.0]
    assert _call(process_reward, problem, hack)[0] < 1.0
    assert _call(strict_reward, problem, hack) == [0.0]
    assert _call(mixed_reward(0.2), problem, hack) == [pytest.approx(0.2)]


def test_wrong_answer_zeroes_process(problem):
    text = _gold_completion(problem).replace(f"<answer> {problem.answer} </answer>",
                                             f"<answer> {problem.answer + 1} </answer>")
    assert [_call(fn, problem, [text])[0] for fn in REWARDS] == [0.0, 0.0, 0.0, 0.0]


def test_one_wrong_value_costs_one_over_gold(problem):
    text = re.sub(r"so (\w+) = (\d+)\.", lambda m: f"so {m.group(1)} = {int(m.group(2)) + 1}.",
                  _gold_completion(problem), count=1)
    n = len(problem.nodes)
    assert _call(outcome_reward, problem, [text]) == [1.0]
    assert _call(process_reward, problem, [text]) == [pytest.approx(1 - 1 / n)]
    assert _call(strict_reward, problem, [text]) == [0.0]
    assert _call(mixed_reward(0.5), problem, [text]) == [pytest.approx(0.5 + 0.5 * (1 - 1 / n))]


def test_extra_nodes_cost_process_and_strict(problem):
    free = next(c for c in "QZYXW" if f" {c};" not in problem.solution_text and f" {c} " not in problem.solution_text)
    text = f"Define owls in Nowhere as {free}; so {free} = 3. " + _gold_completion(problem)
    assert _call(process_reward, problem, [text]) == [pytest.approx(1 - 1 / len(problem.nodes))]
    assert _call(strict_reward, problem, [text]) == [0.0]


def test_conversational_completions(problem):
    conversation = [{"role": "assistant", "content": _gold_completion(problem)}]
    assert _call(outcome_reward, problem, [conversation]) == [1.0]
    parts = [{"role": "assistant", "content": [{"type": "text", "text": _gold_completion(problem)}]}]
    assert _call(strict_reward, problem, [parts]) == [1.0]
    assert completion_text(None) == "" and completion_text([]) == ""


def test_names_and_batches(problem):
    assert [fn.__name__ for fn in REWARDS] == ["outcome_reward", "process_reward", "strict_reward",
                                              "mixed_reward_0.2"]
    other = generate_problem(3, "C", seed=9)
    scores = outcome_reward(["p", "q"], [_gold_completion(problem), _gold_completion(other)],
                            gold=[problem.to_dict(), other.to_dict()])
    assert scores == [1.0, 1.0]
    assert outcome_reward(["p"], [_gold_completion(problem)], gold=[other.to_dict()]) == [0.0]


def test_bad_arguments(problem):
    with pytest.raises(ValueError, match="gold"):
        outcome_reward(["p"], ["x"])
    with pytest.raises(ValueError):
        mixed_reward(1.5)
    assert _call(process_reward, problem, ["", "\x00<answer>", None]) == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("tail", ["Answer: {n}.", "Answer: {n}. </solution> <answer> {n}.0 </answer>"])
def test_the_answer_is_read_as_the_judge_reads_it_not_as_the_official_reward_does(problem, tail):
    """A kept difference (chapter 02): the official reward compares the ``<answer>`` tag's text as a string, so a
    missing tag or ``7.0`` scores 0 there; its own process parser, like the kit's judge, reads ``Answer: 7`` and ``7.0``
    as the number 7. The kit's rewards use that one reading."""
    steps = problem.solution_text.rsplit("Answer:", 1)[0]
    completion = f"<solution> {steps}{tail.format(n=problem.answer)}"
    scores = {fn.__name__: fn(prompts=[""], completions=[completion], gold=[problem.to_dict()])[0]
              for fn in (outcome_reward, process_reward, strict_reward, mixed_reward(0.2))}
    assert scores == {"outcome_reward": 1.0, "process_reward": 1.0, "strict_reward": 1.0, "mixed_reward_0.2": 1.0}
