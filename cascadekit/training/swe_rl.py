"""SWE RL (chapter 13): the execution-free reward, execution truth beside it, and input-context extension.

The cascade's last RL stage, as the paper runs it:

* **prompts**: ``swe_rl.prompts`` SWE prompts over ``swe_rl.ops`` per stage, asked
  in ``/think``: a buggy ``calc.py``, the spec and the failing test, answered
  with a SEARCH/REPLACE patch (:mod:`cascadekit.domains.swe`);
* **the execution-free reward** (:func:`execution_free_reward`):
  ``swe_rl.lexical_weight`` x the lexical similarity of the patch to the gold
  patch (:func:`cascadekit.verify.patch.patch_similarity`, as SWE-RL) plus the
  rest x the semantic judge's P(YES) (:mod:`cascadekit.training.swe_judge`, the
  toy's Kimi-Dev-72B);
* **input-context extension**: one GRPO stage per entry of ``swe_rl.contexts``,
  each from the last, whose files hold the buggy function and 0 to that many
  other functions (the paper's 16K -> 24K input stages).

What the paper could not afford is done on every rollout here: the execution
truth (apply the patch, run the hidden tests in the sandbox) is a *watched*
reward of the GRPO stage (weight 0: logged per step as ``reward/swe_execution``,
never trained on), and the other arm trains on it directly
(:func:`execution_reward`).
"""
from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from cascadekit.domains import Domain, Task, chat_record, configured, draw_tasks
from cascadekit.stages import StageOutput
from cascadekit.training.pipeline import chat_grpo
from cascadekit.profiles import DomainsConfig, Profile, RLConfig
from cascadekit.rewards import RewardFn, completion_text
from cascadekit.training.swe_judge import SemanticJudge, executed, judge_stage
from cascadekit.verify.patch import patch_similarity

#: Seed offsets of the SWE RL prompts, the judge's prompts and its held-out prompts (apart from other stages').
PROMPT_SEED, JUDGE_SEED, JUDGE_EVAL_SEED = 13, 1300, 1301


@dataclass(frozen=True)
class ContextStage:
    """One SWE RL stage: the most other functions its files hold, and its GRPO run."""

    context: int
    grpo: StageOutput


def swe_domain(context: int, knobs: DomainsConfig = DomainsConfig()) -> Domain:
    """The SWE domain whose calc.py holds ``context`` other functions beside the buggy one (and ``knobs``' rewrites)."""
    domain = configured("swe", knobs)
    return dataclasses.replace(domain, make_task=functools.partial(domain.make_task, context=context))


def swe_tasks(profile: Profile, n: int, split: str, seed: int, contexts: Sequence[int]) -> list[Task]:
    """``n`` SWE tasks over ``swe_rl.ops``, spread evenly over ``contexts`` (each drawn from a seed of its own)."""
    lo, hi = profile.swe_rl.ops
    tasks: list[Task] = []
    for i, context in enumerate(contexts):
        share = n // len(contexts) + (i < n % len(contexts))
        if share:
            tasks += draw_tasks(swe_domain(context, profile.domains), share, seed + 100 * context, split,
                                range(lo, hi + 1))
    return tasks


def stage_records(profile: Profile, context: int) -> list[dict[str, Any]]:
    """One stage's prompts: ``swe_rl.prompts`` over files with 0 to ``context`` other functions, in ``/think``."""
    tasks = swe_tasks(profile, profile.swe_rl.prompts, "rl", profile.seeds.data + PROMPT_SEED, range(context + 1))
    return [chat_record(task, True) for task in tasks]


def judge_from(start: StageOutput, profile: Profile) -> StageOutput:
    """The semantic judge, trained from ``start`` (the SFT checkpoint) on prompts over every context SWE RL trains."""
    contexts = range(max(profile.swe_rl.contexts) + 1)
    train = swe_tasks(profile, profile.swe_rl.judge_tasks, "rl", profile.seeds.data + JUDGE_SEED, contexts)
    held_out = swe_tasks(profile, profile.swe_rl.judge_eval_tasks, "eval", profile.seeds.data + JUDGE_EVAL_SEED,
                         contexts)
    return judge_stage(start, train, held_out, profile)


def _golds(completions: list[Any], kwargs: dict[str, Any]) -> list[dict[str, Any]]:
    golds = kwargs.get("gold")
    if golds is None or len(golds) != len(completions):
        raise ValueError("an SWE reward needs a 'gold' dataset column, one entry per completion")
    return [json.loads(g) if isinstance(g, str) else g for g in golds]


def lexical_reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """The lexical half: the patch's sequence similarity to the gold patch (0 without a readable patch)."""
    golds = _golds(completions, kwargs)
    return [patch_similarity(completion_text(c), gold["patch"]) for c, gold in zip(completions, golds)]


lexical_reward.__name__ = "swe_lexical"


def applied_lexical_reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """The lexical half asking applicability too: 0 for a patch that does not apply to the task's file.

    A lever, not the paper's reward (``swe_rl.applicable``): over three training seeds it
    raised the execution-free reward's correlation with execution truth on the start
    policy's rollouts from 0.412 to 0.649, and SWE RL's resolve rate did not move
    (``data/results/second_world/levers/swe-applicable`` and the levers README).
    """
    golds = _golds(completions, kwargs)
    return [patch_similarity(completion_text(c), gold["patch"], files={gold["file"]: gold["source"]})
            for c, gold in zip(completions, golds)]


applied_lexical_reward.__name__ = "swe_lexical_applied"


def execution_reward(workers: int) -> RewardFn:
    """Execution truth as a reward: 1 when the patch applies and every hidden test passes in the sandbox."""
    def reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        return executed(_golds(completions, kwargs), [completion_text(c) for c in completions], workers)

    reward.__name__ = reward.__qualname__ = "swe_execution"  # the workers change the speed, never the value
    return reward


def execution_free_reward(semantic: SemanticJudge, lexical_weight: float, applicable: bool = False) -> RewardFn:
    """The paper's SWE RL reward: ``lexical_weight`` x lexical similarity + the rest x the judge's P(YES).

    With ``applicable`` the similarity is :func:`applied_lexical_reward`'s (a lever; the paper's reward keeps its name).
    """
    if not 0.0 <= lexical_weight <= 1.0:
        raise ValueError(f"lexical_weight must lie in [0, 1], got {lexical_weight!r}")
    similarity = applied_lexical_reward if applicable else lexical_reward

    def reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        lexical = similarity(prompts, completions, **kwargs)
        return [lexical_weight * x + (1 - lexical_weight) * y for x, y in zip(lexical, semantic(prompts, completions))]

    applied = "_applied" if applicable else ""
    reward.__name__ = reward.__qualname__ = f"swe_execution_free_{lexical_weight:g}{applied}_{semantic.__name__}"
    return reward


def arm_rewards(profile: Profile, semantic: SemanticJudge) -> dict[str, tuple[RewardFn, list[RewardFn]]]:
    """The two arms' rewards, each with the rewards watched beside it: execution-free, and execution."""
    free = execution_free_reward(semantic, profile.swe_rl.lexical_weight, profile.swe_rl.applicable)
    truth = execution_reward(profile.swe_rl.workers)
    return {"execution-free": (free, [lexical_reward, semantic, truth]),
            "execution": (truth, [lexical_reward, semantic, free])}


def swe_rl_settings(profile: Profile) -> RLConfig:
    """SWE RL's RL settings: RL's, with SWE RL's own learning rate and maximum completion length."""
    return dataclasses.replace(profile.rl, lr=profile.swe_rl.lr, max_completion_length=profile.swe_rl.length)


def swe_rl(start: StageOutput, profile: Profile, work_dir: Path, reward: RewardFn,
           watched: Sequence[RewardFn] = ()) -> list[ContextStage]:
    """SWE RL from ``start`` with ``reward``: one GRPO stage per ``swe_rl.contexts``, each from the last."""
    stages = []
    for context in profile.swe_rl.contexts:
        start = chat_grpo(start, stage_records(profile, context), profile, work_dir / f"context-{context}",
                          reward=reward, watched=watched, rl=swe_rl_settings(profile))
        stages.append(ContextStage(context, start))
    return stages

