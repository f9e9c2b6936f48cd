"""The cascade's RL stages after SFT: RLHF (chapter 09), IF-RL (chapter 10) and Code RL (chapter 12).

Math RL (chapter 11) has a module of its own, :mod:`cascadekit.training.math_rl`.

Each stage is the kit's strict on-policy GRPO (:func:`cascadekit.training.pipeline.chat_grpo`)
on one domain's RL-split prompts, from the previous stage's checkpoint, with that
stage's reward. Every chapter that needs a stage calls the function here, so a
later chapter starts from exactly the checkpoint an earlier one built (same
cache key, shipped under ``data/checkpoints/``), and no chapter imports another.

* **RLHF**: general prompts only (math and code stay out, as in the paper),
  rewarded by the reward model's predicted quality. Arms differ in the mode each
  prompt is asked in: *half-half* (every batch half ``/think``, half ``/no_think``,
  the paper's choice for the unified model), *think only*, *no_think only*.
* **Code RL** (:func:`code_rl_stage`): code prompts over ``code_rl.ops`` in
  ``/think``, the pass-all-tests reward (the code verifier's 0/1), one arm per
  sampling temperature, rollouts verified while the batch still generates
  (:class:`cascadekit.training.async_rewards.StreamingRewards`, ``code_rl.workers``).
* **IF-RL**: instruction-following prompts, rewarded by the strict instruction
  verifier. The unified model runs it in ``/no_think`` only (the paper's choice,
  because the verifier alone can cost human alignment); the paper's dedicated
  thinking model adds the reward model's score to the verifier's
  (:func:`verifier_plus_reward_model`).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from cascadekit.training.chat_base import chat_base
from cascadekit.domains import chat_record, domains, draw_tasks
from cascadekit.stages import StageOutput
from cascadekit.training.pipeline import chat_grpo
from cascadekit.profiles import Profile
from cascadekit.rewards import RewardFn, verifier_reward
from cascadekit.training.reward_model import RewardModelScore, reward_model_stage
from cascadekit.training.sft import sft_stages

#: The RLHF arms: which mode each prompt is asked in (None: alternate, half-half).
RLHF_ARMS = {"half-half": None, "think only": True, "no_think only": False}
#: The reward model's weight beside the 0/1 instruction verifier in the combined IF-RL reward.
IF_RM_WEIGHT = 0.5


def sft_checkpoint(profile: Profile) -> StageOutput:
    """Chapter 08's last SFT stage, where the cascade's RL starts (shipped at toy scale)."""
    return sft_stages(chat_base(profile), profile)[-1]


def reward_models(profile: Profile) -> dict[int, StageOutput]:
    """Chapter 09's reward models, by size (decoder layers), trained from the SFT checkpoint."""
    sft = sft_checkpoint(profile)
    return {layers: reward_model_stage(sft, profile, layers) for layers in profile.reward_model.layers}


def largest_reward_model(profile: Profile) -> StageOutput:
    """The reward model RLHF and IF-RL use: the largest of ``reward_model.layers``."""
    return reward_model_stage(sft_checkpoint(profile), profile, max(profile.reward_model.layers))


def rl_records(profile: Profile, domain: str, think: bool | None, seed_offset: int, n: int | None = None,
               ops: tuple[int, int] | None = None) -> list[dict[str, Any]]:
    """``n`` RL-split prompts of ``domain`` over ``ops``, in mode ``think`` (defaults: ``rl.samples``, ``sft.ops``).

    ``think`` None alternates, starting with ``/think``; fed in order
    (``chat_grpo(in_order=True)``), every batch of an even ``prompts_per_step`` is
    exactly half each mode.
    """
    lo, hi = ops or profile.sft.ops
    tasks = draw_tasks(domains()[domain], n or profile.rl.samples, profile.seed + seed_offset, "rl", range(lo, hi + 1))
    return [chat_record(t, i % 2 == 0 if think is None else think) for i, t in enumerate(tasks)]


def rlhf_records(profile: Profile, arm: str) -> list[dict[str, Any]]:
    """The general prompts of one RLHF arm (the same prompts in every arm, only the modes differ)."""
    if arm not in RLHF_ARMS:
        raise ValueError(f"unknown RLHF arm {arm!r}: use one of {', '.join(RLHF_ARMS)}")
    return rl_records(profile, "general", RLHF_ARMS[arm], 1)


def rlhf_stage(profile: Profile, arm: str, reward_model: StageOutput, work_dir: Path,
               start: StageOutput | None = None) -> StageOutput:
    """RLHF from ``start`` (default: the SFT checkpoint) against ``reward_model``, in one arm's modes.

    Chapter 14's order ablation runs it last, from the SWE RL checkpoint.
    """
    return chat_grpo(start or sft_checkpoint(profile), rlhf_records(profile, arm), profile, work_dir,
                     reward=RewardModelScore(reward_model), in_order=True)


def unified_rlhf(profile: Profile, work_dir: Path) -> StageOutput:
    """The cascade's RLHF checkpoint: half-half, against the largest reward model."""
    return rlhf_stage(profile, "half-half", largest_reward_model(profile), work_dir)


def verifier_plus_reward_model(scorer: RewardModelScore, weight: float = IF_RM_WEIGHT) -> RewardFn:
    """The dedicated thinking model's IF-RL reward: the verifier's score plus ``weight`` x predicted quality."""
    def reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        checked = verifier_reward(prompts, completions, **kwargs)
        return [v + weight * q for v, q in zip(checked, scorer(prompts, completions))]

    reward.__name__ = f"verifier_plus_{weight:g}_{scorer.__name__}"
    return reward


def if_rl_stage(start: StageOutput, profile: Profile, think: bool, reward: RewardFn, work_dir: Path) -> StageOutput:
    """IF-RL from ``start`` on instruction prompts in one mode, with ``reward``."""
    return chat_grpo(start, rl_records(profile, "instructions", think, 2), profile, work_dir, reward=reward,
                     in_order=True)


def unified_if_rl(profile: Profile, work_dir: Path) -> StageOutput:
    """The cascade's IF-RL checkpoint: ``/no_think`` instruction prompts, the verifier alone, from :func:`unified_rlhf`."""
    return if_rl_stage(unified_rlhf(profile, work_dir / "rlhf"), profile, False, verifier_reward, work_dir / "if-rl")


def code_rl_records(profile: Profile) -> list[dict[str, Any]]:
    """``code_rl.prompts`` RL-split code prompts over ``code_rl.ops``, all asked with ``/think``.

    Think only: the paper's Code RL trains long reasoning, and at toy scale the
    think mode is the one that sometimes solves op 4 (the no_think answer is the
    same code block written without its steps).
    """
    return rl_records(profile, "code", True, 4, profile.code_rl.prompts, profile.code_rl.ops)


def code_rl_stage(start: StageOutput, profile: Profile, temperature: float, work_dir: Path) -> StageOutput:
    """Code RL from ``start`` at one sampling ``temperature``: pass-all-tests reward, streamed verification.

    The reward is the code verifier's all-or-nothing score (every hidden test
    passes, else 0, never raising), through :func:`verifier_reward`; ``code_rl.workers``
    threads verify each rollout as soon as it ends.
    """
    staged = dataclasses.replace(profile, rl=dataclasses.replace(profile.rl, temperature=temperature))
    return chat_grpo(start, code_rl_records(profile), staged, work_dir, reward=verifier_reward,
                     workers=profile.code_rl.workers)
