"""Reward functions for GRPO on the DAG world, in TRL's reward-function shape.

TRL calls ``fn(prompts, completions, **kwargs)`` with one list entry per
completion and passes every extra dataset column as a keyword list; here the
column ``gold`` holds each prompt's problem (a dict or its JSON string).
Completions are plain strings, or conversations (lists of ``{"role", "content"}``)
whose last message is the model's answer.

Four rewards, from the paper's finding 4 (process supervision against reward hacking):

* ``outcome_reward``: 1 if the final answer is exact, else 0. Blind to the steps,
  so a lucky guess or a broken derivation earns full reward.
* ``process_reward``: ``max(0, 1 - penalty / |gold|)``, and 0 whenever the answer is
  wrong. The penalty counts value, dependency and missing-node mismatches,
  extra nodes (at most ``|gold|``) and 1 for a wrong answer.
* ``mixed_reward(alpha)``: ``alpha * outcome + (1 - alpha) * process``; the paper's
  best setting is ``alpha = 0.2``.
* ``strict_reward``: 1 only when the answer is right and the penalty is 0.

The answer is read as the judge reads it: the first ``<answer>`` tag's number, else
the first ``Answer:``, as a number (``7.0`` is 7). Here the kit departs from the
official Interplay reward, which compares the ``<answer>`` tag's text as a string
(``7.0`` or a missing tag scores 0 there) while its own process parser reads the
number as the kit does; the kit keeps that one reading for the verdict and the reward.

Part II's RL stages reward with the domain's own verifier instead
(:func:`verifier_reward`): the dataset's ``domain`` and ``gold`` columns say which
judge scores a completion and against what. Math RL subtracts a penalty for an
answer that switches format (:func:`math_rl_reward`).

A GRPO group often repeats itself (in the toy cascade only 27% of an SWE RL
group's rollouts and 66% of an RLHF group's are distinct), so every reward here
verifies each distinct completion of a batch once (:func:`once_per_completion`):
the DAG-world rewards directly, every Part II reward through
:func:`reading_markup`, which the chat GRPO stages wrap them in.
"""

from __future__ import annotations

import json
from functools import lru_cache, wraps
from typing import Any, Callable, Mapping

from cascadekit.chat import END_OF_TURN, parse_assistant
from cascadekit.domains import domains
from cascadekit.verify.format_switch import format_switches
from cascadekit.verify.process import ProcessVerdict, judge, step_accuracy
from cascadekit.world.render import Problem

RewardFn = Callable[..., list[float]]



def _plain(value: Any) -> Any:
    """A JSON stand-in for what ``json`` cannot write: a tensor's or array's values, else its ``str``."""
    return value.tolist() if hasattr(value, "tolist") else str(value)


def row_key(prompt: Any, completion: Any, row: Mapping[str, Any]) -> str:
    """What a per-completion reward reads of one rollout, as text: equal keys get equal scores."""
    return json.dumps([prompt, completion_text(completion), dict(row)], sort_keys=True, default=_plain)


def once_per_completion(reward: RewardFn) -> RewardFn:
    """``reward`` run once per distinct rollout of a batch, each score copied to the rollout's repeats.

    Rollouts are the same when their prompt, completion text and every per-row
    argument (dataset columns such as ``gold``, and ``completion_ids``) are: the
    reward is handed exactly what it would have been handed for each repeat, so a
    reward that scores each completion on its own (every reward of the kit does)
    gives the same list as verifying every rollout. Arguments that are not one
    entry per rollout (``trainer_state``, TRL's logging callbacks) pass through.
    The wrapper keeps ``reward``'s ``__name__`` (a GRPO stage's key names its reward by it).
    """
    @wraps(reward)
    def memo(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        n = len(completions)
        if len(prompts) != n:  # not TRL's shape: the reward's own checks answer
            return reward(prompts, completions, **kwargs)
        per_row = {k: v for k, v in kwargs.items() if isinstance(v, (list, tuple)) and len(v) == n}
        keys = [row_key(prompts[i], completions[i], {k: v[i] for k, v in per_row.items()}) for i in range(n)]
        first: dict[str, int] = {}
        for i, key in enumerate(keys):
            first.setdefault(key, i)
        if len(first) == n:
            return reward(prompts, completions, **kwargs)
        picked = list(first.values())
        scores = reward([prompts[i] for i in picked], [completions[i] for i in picked],
                        **{**kwargs, **{k: [v[i] for i in picked] for k, v in per_row.items()}})
        if len(scores) != len(picked):
            raise ValueError(f"{getattr(reward, '__name__', reward)!r} returned {len(scores)} scores "
                             f"for {len(picked)} completions")
        slot = {keys[i]: j for j, i in enumerate(picked)}
        return [scores[slot[key]] for key in keys]

    return memo


def penalty(verdict: ProcessVerdict) -> int:
    """Mistakes in a solution: wrong values, wrong parents, missing and extra nodes, a wrong answer."""
    return (verdict.n_value + verdict.n_dependency + verdict.n_missing
            + min(verdict.n_extra, verdict.n_gold) + int(verdict.answer_mismatch))


def outcome_score(verdict: ProcessVerdict) -> float:
    return 1.0 if verdict.answer_correct else 0.0


def process_score(verdict: ProcessVerdict) -> float:
    if not verdict.answer_correct:
        return 0.0
    return max(0.0, 1.0 - penalty(verdict) / verdict.n_gold)


def strict_score(verdict: ProcessVerdict) -> float:
    return 1.0 if verdict.answer_correct and penalty(verdict) == 0 else 0.0


def completion_text(completion: Any) -> str:
    """The model's text: a plain string, or the content of a conversation's last message.

    A message's content may itself be a list of parts such as ``{"type": "text", "text": ...}``.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        if "role" in completion or "content" in completion:
            return completion_text(completion.get("content"))
        return str(completion.get("text", ""))
    if isinstance(completion, (list, tuple)):
        if completion and all(isinstance(m, dict) and "role" in m for m in completion):
            return completion_text(completion[-1])
        return "".join(completion_text(part) for part in completion)
    return "" if completion is None else str(completion)


@lru_cache(maxsize=4096)
def _problem_from_json(text: str) -> Problem:
    return Problem.from_dict(json.loads(text))


def _as_problem(gold: Any) -> Problem:
    if isinstance(gold, Problem):
        return gold
    if isinstance(gold, str):
        return _problem_from_json(gold)
    return Problem.from_dict(gold)


def _verdicts(completions: list[Any], kwargs: dict[str, Any]) -> list[ProcessVerdict]:
    golds = kwargs.get("gold")
    if golds is None or len(golds) != len(completions):
        raise ValueError("DAG-world rewards need a 'gold' dataset column with one problem per completion")
    return [judge(completion_text(c), _as_problem(g)) for c, g in zip(completions, golds)]


@once_per_completion
def outcome_reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """1 for an exact final answer, whatever the steps."""
    return [outcome_score(v) for v in _verdicts(completions, kwargs)]


@once_per_completion
def process_reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """``max(0, 1 - penalty / |gold|)`` for a right answer, 0 for a wrong one."""
    return [process_score(v) for v in _verdicts(completions, kwargs)]


@once_per_completion
def strict_reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """1 only for a right answer reached with no mistake at all, extra steps included."""
    return [strict_score(v) for v in _verdicts(completions, kwargs)]


def mixed_reward(alpha: float = 0.2) -> RewardFn:
    """A reward ``alpha * outcome + (1 - alpha) * process`` (the paper's best: alpha 0.2)."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha!r}")

    def reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        return [alpha * outcome_score(v) + (1 - alpha) * process_score(v)
                for v in _verdicts(completions, kwargs)]

    reward.__name__ = reward.__qualname__ = f"mixed_reward_{alpha:g}"
    reward.__doc__ = f"{alpha:g} * outcome + {1 - alpha:g} * process."
    return once_per_completion(reward)


def verifier_reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """Part II: each completion scored by its domain's verifier (``domain`` and ``gold`` columns, gold as JSON).

    The verifiers never raise, so a garbage completion scores 0 with a reason
    rather than stopping a run.
    """
    names, golds = kwargs.get("domain"), kwargs.get("gold")
    if names is None or golds is None or not len(names) == len(golds) == len(completions):
        raise ValueError("the verifier reward needs 'domain' and 'gold' dataset columns, one entry per completion")
    return [domains()[name].judge(json.loads(gold) if isinstance(gold, str) else gold, completion_text(c)).score
            for c, name, gold in zip(completions, names, golds)]


def _thinking(text: str) -> str:
    """The think block's text; a block cut at the length limit (no ``</think>``) up to where it was cut."""
    thinking = parse_assistant(text).thinking
    if not thinking and text.count("<think>") == 1 and "</think>" not in text:
        return text.partition("<think>")[2]
    return thinking


def math_rl_reward(penalty: float = 0.5, step_credit: float = 0.0) -> RewardFn:
    """Math RL's reward: 1 for the right boxed answer, minus ``penalty`` if the answer switches format.

    The format switches are :func:`cascadekit.verify.format_switch.format_switches`
    (a second answer block, code, tool-call or patch markup, a second think block),
    the toy's stand-in for the paper's code-switching penalty. A right answer that
    switches scores ``1 - penalty``, a wrong one that switches ``-penalty``.

    With ``step_credit`` c > 0 the answer's share becomes ``(1 - c) * answer + c * steps``,
    ``steps`` the share of the gold solution's steps the think block writes with the
    gold's parents and value (:func:`cascadekit.verify.process.step_accuracy`, read
    against the dataset's ``reasoning`` column; a think block cut at the length limit
    counts up to the cut). A wrong or truncated answer with three of five steps right
    then earns credit, so a group the policy never solves still has rewards that
    differ. This departs from the paper, whose Math RL rewards the answer alone, and
    from Part I's process reward, which is 0 whenever the answer is wrong: it is the
    kit's lever for a denser signal (``math_rl.step_credit``; 0, the paper's reward,
    by default). Measured at toy scale it leaves math flat
    (``data/results/second_world/levers/mathrl-steps``).
    """
    if not 0.0 <= penalty <= 1.0:
        raise ValueError(f"penalty must lie in [0, 1], got {penalty!r}")
    if not 0.0 <= step_credit <= 1.0:
        raise ValueError(f"step_credit must lie in [0, 1], got {step_credit!r}")

    def reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        golds, reasonings = kwargs.get("gold"), kwargs.get("reasoning")
        if golds is None or len(golds) != len(completions):
            raise ValueError("the math RL reward needs a 'gold' dataset column, one entry per completion")
        if step_credit and (reasonings is None or len(reasonings) != len(completions)):
            raise ValueError("the math RL reward with step credit needs a 'reasoning' dataset column (the gold "
                             "thinking), one entry per completion")
        judge = domains()["math"].judge
        texts = [completion_text(c) for c in completions]
        answers = [judge(json.loads(g) if isinstance(g, str) else g, t).score for t, g in zip(texts, golds)]
        if step_credit:
            steps = [step_accuracy(_thinking(t), str(r)) for t, r in zip(texts, reasonings)]
            answers = [(1 - step_credit) * a + step_credit * s for a, s in zip(answers, steps)]
        return [a - penalty * bool(format_switches(t)) for a, t in zip(answers, texts)]

    credit = f"_steps{step_credit:g}" if step_credit else ""  # the paper's reward keeps its name (and its keys)
    reward.__name__ = reward.__qualname__ = f"math_rl_reward_{penalty:g}{credit}"
    return reward


def reading_markup(reward: RewardFn, tokenizer: Any, end: str = END_OF_TURN) -> RewardFn:
    """``reward`` handed completions decoded again from their token ids, chat markers kept.

    TRL decodes completions with ``skip_special_tokens=True``, and the Part II
    tokenizer holds the chat markers (``<think>``, ``</think>``, ``<tool_call>``) as
    special tokens, so the text TRL passes a reward has lost the edges of the think
    block: a verifier could not tell the reasoning from the answer, nor check the
    mode. TRL also passes the sampled ``completion_ids``; this decodes them keeping
    every marker, up to the end-of-turn marker ``end``. Each distinct rollout is
    scored once (:func:`once_per_completion`). The wrapped reward keeps its
    ``__name__`` (a GRPO stage's key names its reward by it).
    """
    scored = once_per_completion(reward)

    @wraps(reward)
    def read(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        ids = kwargs.get("completion_ids")
        if ids is None or len(ids) != len(completions):
            raise ValueError("reading_markup needs TRL's completion_ids, one per completion")
        texts = [tokenizer.decode(list(row), skip_special_tokens=False).split(end, 1)[0] for row in ids]
        return scored(prompts, texts, **kwargs)

    return read
