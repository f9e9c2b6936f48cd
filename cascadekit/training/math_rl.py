"""Math RL (chapter 11): response-length extension with dynamic filtering once per epoch.

The cascade's third RL stage, as the paper runs it:

* **prompts**: ``math_rl.pool`` math prompts over ``math_rl.ops``, asked in
  ``/think`` (:func:`cascadekit.chapters.cascade.math_records`, passed in); the
  toy's ops reach one past SFT's range, the "hard" band;
* **reward**: the boxed answer after the think block, verified exactly, minus a
  penalty for a format switch (:func:`cascadekit.rewards.math_rl_reward`);
* **length extension**: one GRPO stage per maximum completion length in
  ``math_rl.lengths`` (the paper's 24K -> 32K -> 40K), each starting from the
  last; a rollout cut at the limit has no boxed answer and scores 0;
* **dynamic filtering**: before each stage (one epoch over the pool), the
  current policy samples a group per prompt at that stage's length; prompts it
  always solves or never solves are dropped, each re-admitted with probability
  ``math_rl.readmit`` (:func:`cascadekit.training.dynamic_sampling.screen_prompts`).
  The screen is a cached stage of its own (``dynamic-filter``), so a chapter
  rerun and a later chapter reuse it.

Where the kit departs from the paper: the paper filters with the rollouts of the
previous epoch; the kit screens with fresh rollouts of the current policy, which
costs a group per pooled prompt and is counted in the chapter's compute.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from cascadekit.stages import Stage, StageOutput, content_id, run_stage

from cascadekit.training.pipeline import chat_grpo, chat_rl_dataset, records_digest
from cascadekit.profiles import Profile, RLConfig, seed_inputs
from cascadekit.rewards import RewardFn, math_rl_reward
from cascadekit.engine.runtime import choose_device, load_model, load_tokenizer
from cascadekit.training.dynamic_sampling import screen_prompts
from cascadekit.training.rollouts import kit_sampling, rollout_inputs
from cascadekit.training.released_rl import is_released, released_math_reward, released_math_workers

#: Bumped when the same inputs would build other bytes (enters every key this module makes: stages.py).
RECIPE = 1

#: Screen this many prompts per generate call.
SCREEN_CHUNK = 16


@dataclass(frozen=True)
class LengthStage:
    """One epoch of Math RL: its length limit, the screen before it (None without filtering) and its GRPO run.

    ``grpo`` is None when the screen kept no prompt: the stage trained nothing
    and the next epoch starts from the same checkpoint.
    """

    length: int
    screen: Mapping[str, Any] | None
    grpo: StageOutput | None
    checkpoint: StageOutput

    def rollouts(self, profile: Profile) -> int:
        """Rollouts this stage sampled: the screen's groups plus GRPO's (steps x prompts x group)."""
        screened = self.screen["rollouts"] if self.screen else 0
        trained = self.grpo.metrics["steps"] * profile.rl.prompts_per_step * profile.rl.group_size if self.grpo else 0
        return screened + trained


def math_reward(profile: Profile) -> RewardFn:
    """Strict boxed-answer correctness minus ``math_rl.penalty`` for a format switch, with ``math_rl.step_credit``
    for the gold's steps (on released data, the released answer checked by
    :func:`cascadekit.verify.released.verify_math`: its solutions are not in the toy's step format, so no step credit)."""
    if is_released(profile):
        if profile.math_rl.step_credit:
            raise ValueError("math_rl.step_credit reads the toy world's gold steps; released math has none (set it to 0)")
        return released_math_reward(profile.math_rl.penalty)
    return math_rl_reward(profile.math_rl.penalty, profile.math_rl.step_credit)


def math_rl_settings(profile: Profile, length: int) -> RLConfig:
    """A length stage's RL settings: RL's, with ``math_rl.lr`` as learning rate and ``length`` as completion limit."""
    return dataclasses.replace(profile.rl, lr=profile.math_rl.lr, max_completion_length=length)


def filter_stage(start: StageOutput, records: list[dict[str, Any]], profile: Profile, epoch: int,
                 rl: RLConfig | None = None) -> StageOutput:
    """Screen ``records`` with ``start``'s policy at ``rl.max_completion_length``: which prompts to keep.

    ``rl`` is the length stage's RL settings (:func:`math_rl_settings`; the
    profile's ``rl`` when not given): its group size, temperature and length
    limit sample the screen, and it enters the screen's key.
    Metrics: ``kept`` (indices into ``records``), ``verdicts`` (counts of mixed /
    too easy / too hard), ``rollouts`` sampled and ``screen_s``.
    """
    reward, rl = math_reward(profile), rl or profile.rl

    def build(folder: Path) -> Mapping[str, Any]:
        started = time.perf_counter()
        result = screen_prompts(
            load_model(start.checkpoint, choose_device(profile)), load_tokenizer(start.checkpoint),
            chat_rl_dataset(records), reward,
            target=len(records), group_size=rl.group_size, temperature=rl.temperature,
            max_completion_length=rl.max_completion_length, chunk_size=SCREEN_CHUNK,
            readmit_prob=profile.math_rl.readmit, seed=profile.seeds.train + epoch, keep_markup=True,
            kit=kit_sampling(profile),
        )
        report = result.report
        return {"kept": sorted(int(i) for i in report.loc[report["kept"], "index"]),
                "verdicts": {str(k): int(v) for k, v in result.counts().items()},
                "readmitted": int((report["kept"] & (report["verdict"] != "mixed")).sum()),
                "rollouts": len(report) * rl.group_size, "screen_s": round(time.perf_counter() - started, 1)}

    inputs = {"start": content_id(start), "prompts": records_digest(records), "n_prompts": len(records),
              "reward": reward.__name__, "rl": dataclasses.asdict(rl), "readmit": profile.math_rl.readmit,
              "epoch": epoch, "seed": profile.seed, **seed_inputs(profile, "train"), **rollout_inputs(profile)}
    return run_stage(Stage("dynamic-filter", inputs, build, recipe=RECIPE))


def length_extension(start: StageOutput, records: list[dict[str, Any]], profile: Profile, work_dir: Path,
                     filtering: bool = True) -> list[LengthStage]:
    """Math RL from ``start`` on ``records``: ``math_rl.epochs`` epochs per ``math_rl.lengths``, each filtered first
    when ``filtering``.

    One :class:`LengthStage` per epoch, in order.
    """
    reward = math_reward(profile)
    stages = []
    for length in profile.math_rl.lengths:
        rl = math_rl_settings(profile, length)
        for _ in range(profile.math_rl.epochs):
            epoch = len(stages)
            screen = filter_stage(start, records, profile, epoch, rl).metrics if filtering else None
            kept = [records[i] for i in screen["kept"]] if screen else records
            name = f"{'filtered' if filtering else 'unfiltered'}-{length}-{epoch}"
            trained = chat_grpo(start, kept, profile, work_dir / name, reward=reward, rl=rl,
                                workers=released_math_workers(profile)) if kept else None
            start = trained or start
            stages.append(LengthStage(length, screen, trained, start))
    return stages
