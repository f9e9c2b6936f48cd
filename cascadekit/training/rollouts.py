"""GRPO rollouts by the kit's decode loop, through TRL's own generation hook (``GRPOTrainer(rollout_func=...)``).

TRL 1.16 calls ``rollout_func(prompts, trainer)`` in place of its own ``generate``
and keeps everything else: prompt tokenisation (this function calls the trainer's
own), rewards, advantages, the loss and logging. TRL's sampler hands over each
prompt ``num_generations`` times in a row; the loop prefills each such run once and
decodes its completions as one group (:func:`cascadekit.engine.decode.decode`).

Chosen by ``engine.rollouts: kit`` for CPU toy runs only: on a GPU, vLLM (or
``generate``) rolls out, and a model the loop cannot run (a LoRA-wrapped one, any
architecture but plain Qwen2/Qwen3) is one clear error.
"""
from __future__ import annotations

from typing import Any, Callable

from cascadekit.engine.decode import Finished, Sampling, decode
from cascadekit.engine.runtime import choose_device
from cascadekit.profiles import Profile, RLConfig

RolloutFunc = Callable[[list, Any], dict[str, Any]]


def prompt_groups(prompt_ids: list[list[int]]) -> tuple[list[list[int]], int]:
    """The distinct prompts of TRL's batch and how many times each repeats in a row (1 if the runs are uneven)."""
    runs: list[list[int]] = []
    sizes: list[int] = []
    for ids in prompt_ids:
        if runs and ids == runs[-1]:
            sizes[-1] += 1
        else:
            runs.append(ids)
            sizes.append(1)
    if len(set(sizes)) == 1:
        return runs, sizes[0]
    return prompt_ids, 1


def _sampling(trainer: Any) -> Sampling:
    """The trainer's sampling settings, refusing those the loop does not implement."""
    args = trainer.args
    if args.min_p is not None or args.repetition_penalty != 1.0 or args.generation_kwargs:
        raise ValueError("engine.rollouts=kit samples with temperature, top_p and top_k only: unset min_p, "
                         "repetition_penalty and generation_kwargs, or use engine.rollouts=generate")
    return Sampling(temperature=trainer.temperature, top_p=trainer.top_p, top_k=trainer.top_k or 0)


def kit_rollouts(prompts: list, trainer: Any, on_finished: Finished | None = None) -> dict[str, Any]:
    """TRL's ``rollout_func``: each prompt's completion ids, up to and including the first end-of-turn id.

    ``on_finished(row, ids)`` hears each rollout as it ends, ``row`` in TRL's order
    (:class:`cascadekit.training.async_rewards.StreamingRewards` verifies it then).
    """
    model = trainer.accelerator.unwrap_model(trainer.model)
    prompt_ids, _, _ = trainer._tokenize_prompts(prompts)
    distinct, group = prompt_groups([list(ids) for ids in prompt_ids])
    completions = decode(model, distinct, trainer.max_completion_length, trainer.eos_token_ids, _sampling(trainer),
                         pad_id=trainer._tokenizer.pad_token_id, group=group, on_finished=on_finished)
    return {"prompt_ids": prompt_ids, "completion_ids": completions, "logprobs": None}


def choose_rollouts(profile: Profile, rl: RLConfig) -> RolloutFunc | None:
    """The ``rollout_func`` for ``GRPOTrainer``: :func:`kit_rollouts` under ``engine.rollouts: kit``, else None (TRL's)."""
    if profile.engine.rollouts == "generate":
        return None
    if choose_device(profile).on_gpu or rl.use_lora:
        raise ValueError("engine.rollouts=kit rolls out a plain model on the CPU: not on a GPU (vLLM generates "
                         "there) and not with rl.use_lora")
    return kit_rollouts


def kit_sampling(profile: Profile) -> bool:
    """Whether the stages that sample outside GRPO (policy samples, Math RL's screens) use the kit's loop too."""
    return profile.engine.rollouts == "kit"


def rollout_inputs(profile: Profile) -> dict[str, str]:
    """What a GRPO stage's key adds for ``engine.rollouts``: nothing at ``generate``, so no shipped key moves."""
    return {} if profile.engine.rollouts == "generate" else {"rollouts": profile.engine.rollouts}


def forward_inputs(profile: Profile) -> dict[str, str]:
    """What a GRPO stage's key adds for ``engine.training_forward``: nothing at ``trl``, so no shipped key moves."""
    return {} if profile.engine.training_forward == "trl" else {"training_forward": profile.engine.training_forward}
