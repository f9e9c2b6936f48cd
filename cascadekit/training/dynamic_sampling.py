"""Dynamic sampling: keep only prompts whose rollouts disagree, refilling from the pool.

A GRPO group whose ``G`` rollouts all get the same reward (all correct: too
easy; all wrong: too hard) has zero advantage everywhere and teaches nothing;
it only dilutes the batch (TRL logs its share as ``frac_reward_zero_std``).
DAPO drops such groups and samples more prompts until the batch is full again.
TRL 1.16 has no such option, so the kit adds it as a pre-screen:

1. walk the prompt pool in chunks (in a seeded random order);
2. sample ``G`` rollouts per prompt with the current model, at the RL
   temperature, and score them with the same reward functions as training;
3. keep the prompts whose group rewards are not all equal, drop the rest, and
   carry on to the next chunk until ``target`` prompts are kept (the refill) or
   the pool runs out.

Where the kit departs from DAPO: DAPO filters online, inside each training step,
and reuses the screened rollouts for the update. The pre-screen spends extra
rollouts instead and works on a snapshot of the model, which is what the
cascade's Math RL does ("dynamic filtering" once per epoch, re-screening as the
model improves). Like the cascade, it can re-admit a small random share of the
dropped prompts (``readmit_prob``) to keep the data mix stable.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import pandas as pd
import torch
from datasets import Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from cascadekit.chat import stop_token_ids, turn_ids
from cascadekit.engine.decode import Sampling, decode

RewardFunc = Callable[..., list[float | None]]

#: A group's verdict: the first keeps the prompt, the others drop it.
MIXED, TOO_EASY, TOO_HARD, NO_SIGNAL = "mixed", "too_easy", "too_hard", "no_signal"


def _is_conversational(prompt: Any) -> bool:
    return isinstance(prompt, list) and bool(prompt) and isinstance(prompt[0], dict)


@torch.no_grad()
def sample_groups(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Any],
    group_size: int,
    *,
    temperature: float = 1.0,
    max_completion_length: int = 256,
    keep_markup: bool = False,
    kit: bool = False,
) -> list[Any]:
    """``group_size`` sampled completions per prompt, group by group, shaped as TRL shapes them.

    Prompts are text or chat messages (rendered with the chat template and a
    generation prompt, as TRL does). Sampling is plain ancestral sampling at
    ``temperature`` (top-p 1, no top-k). Completions are decoded with
    ``skip_special_tokens=True`` and, for chat prompts, wrapped as one assistant
    message, so reward functions get the same input here as in training (TRL's
    tool-calling parse is not reproduced).

    ``keep_markup`` (Part II, prompts already rendered as text, as
    :func:`cascadekit.training.pipeline.chat_rl_dataset` makes them): nothing is added to a
    prompt, sampling also stops at ``<|im_end|>``, and each completion keeps its
    chat markers up to its end, as Part II's GRPO hands completions to its rewards
    (:func:`cascadekit.rewards.reading_markup`).

    ``kit`` samples with the kit's decode loop (:func:`cascadekit.engine.decode.decode`,
    each prompt prefilled once for its group; the same distribution, other draws) in
    place of ``model.generate``: ``engine.rollouts: kit`` on the CPU.
    """
    chat = _is_conversational(prompts[0])
    if chat:
        ids = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=False)
               for p in prompts]
    else:
        ids = tokenizer(list(prompts), add_special_tokens=not keep_markup)["input_ids"]
    stops = stop_token_ids(tokenizer) if keep_markup else [tokenizer.eos_token_id]
    rows = (decode(model, [list(x) for x in ids], max_completion_length, stops, Sampling(temperature),
                   pad_id=tokenizer.pad_token_id, group=group_size) if kit
            else _generated(model, tokenizer, ids, group_size, temperature, max_completion_length, stops))
    if keep_markup:
        texts = tokenizer.batch_decode([turn_ids(row, stops) for row in rows], skip_special_tokens=False)
    else:
        texts = tokenizer.batch_decode(rows, skip_special_tokens=True)
    return [[{"role": "assistant", "content": t}] for t in texts] if chat else texts


def _generated(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, ids: Sequence[Sequence[int]],
               group_size: int, temperature: float, max_completion_length: int, stops: list[int]) -> list[list[int]]:
    """``group_size`` sampled rows of new token ids per prompt by ``model.generate``, prompt-major."""
    width = max(len(x) for x in ids)
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(x)) + list(x) for x in ids], device=model.device)
    attention_mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids], device=model.device)
    was_training = model.training
    model.eval()
    out = model.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        do_sample=True,
        temperature=temperature,
        top_p=1.0,
        top_k=0,
        max_new_tokens=max_completion_length,
        num_return_sequences=group_size,
        pad_token_id=pad,
        eos_token_id=stops,
    )
    model.train(was_training)
    return out[:, width:].tolist()


def score_groups(
    reward_funcs: Sequence[RewardFunc],
    prompts: Sequence[Any],
    completions: Sequence[Any],
    columns: dict[str, Sequence[Any]],
    group_size: int,
    reward_weights: Sequence[float] | None = None,
) -> torch.Tensor:
    """Weighted sum of the reward functions, shape ``(n_prompts, group_size)``.

    Calls each function as TRL does: ``prompts=``, ``completions=`` and every
    other dataset column as a keyword, each repeated once per completion. A
    ``None`` reward counts as 0 here (TRL would leave that completion out).
    """
    weights = list(reward_weights) if reward_weights is not None else [1.0] * len(reward_funcs)
    repeat = lambda values: [v for v in values for _ in range(group_size)]  # noqa: E731
    kwargs = {name: repeat(values) for name, values in columns.items()}
    total = torch.zeros(len(completions))
    for weight, func in zip(weights, reward_funcs, strict=True):
        scores = func(prompts=repeat(prompts), completions=list(completions), **kwargs)
        total += weight * torch.tensor([0.0 if s is None else float(s) for s in scores])
    return total.view(-1, group_size)


def classify_groups(
    rewards: torch.Tensor, solved_at: float = 1.0, failed_at: float = 0.0, tol: float = 1e-6
) -> list[str]:
    """One verdict per group (row): ``mixed`` when rewards differ, else too easy / too hard / no signal.

    A constant group at or above ``solved_at`` is too easy, at or below
    ``failed_at`` too hard; any other constant group (say every rollout earning
    a partial process reward of 0.5) has no signal either.
    """
    verdicts = []
    for row in rewards:
        if float(row.max() - row.min()) > tol:
            verdicts.append(MIXED)
        elif float(row[0]) >= solved_at:
            verdicts.append(TOO_EASY)
        elif float(row[0]) <= failed_at:
            verdicts.append(TOO_HARD)
        else:
            verdicts.append(NO_SIGNAL)
    return verdicts


@dataclass
class ScreenResult:
    """The kept prompts, and a row per screened prompt (pool index, mean reward, verdict, kept)."""

    kept: Dataset
    report: pd.DataFrame

    def counts(self) -> dict[str, int]:
        """How many screened prompts got each verdict."""
        return self.report["verdict"].value_counts().to_dict()


def screen_prompts(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    pool: Dataset,
    reward_funcs: RewardFunc | Sequence[RewardFunc],
    *,
    target: int,
    group_size: int,
    temperature: float = 1.0,
    max_completion_length: int = 256,
    chunk_size: int = 16,
    reward_weights: Sequence[float] | None = None,
    solved_at: float = 1.0,
    readmit_prob: float = 0.0,
    seed: int = 0,
    keep_markup: bool = False,
    kit: bool = False,
) -> ScreenResult:
    """Dynamic sampling as a pre-screen: up to ``target`` prompts of ``pool`` whose rollouts disagree.

    ``pool`` needs a ``prompt`` column; its other columns reach the reward
    functions. Prompts are screened ``chunk_size`` at a time in a random order
    fixed by ``seed`` and screening stops as soon as ``target`` are kept.
    ``readmit_prob`` keeps each dropped prompt with that probability anyway.
    ``keep_markup`` screens Part II's rendered chat prompts, and ``kit`` samples with the
    kit's decode loop, as :func:`sample_groups` says.
    """
    funcs = list(reward_funcs) if isinstance(reward_funcs, Sequence) else [reward_funcs]
    rng = random.Random(seed)
    order = list(range(len(pool)))
    rng.shuffle(order)
    columns = [c for c in pool.column_names if c != "prompt"]
    kept: list[int] = []
    rows: list[dict[str, Any]] = []
    for start in range(0, len(order), chunk_size):
        if len(kept) >= target:
            break
        chunk = pool.select(order[start : start + chunk_size])
        completions = sample_groups(
            model, tokenizer, chunk["prompt"], group_size,
            temperature=temperature, max_completion_length=max_completion_length, keep_markup=keep_markup, kit=kit,
        )
        rewards = score_groups(
            funcs, chunk["prompt"], completions, {c: chunk[c] for c in columns}, group_size, reward_weights
        )
        verdicts = classify_groups(rewards, solved_at)
        for index, verdict, group in zip(order[start : start + chunk_size], verdicts, rewards):
            keep = len(kept) < target and (verdict == MIXED or rng.random() < readmit_prob)
            if keep:
                kept.append(index)
            rows.append({"index": index, "mean_reward": float(group.mean()), "verdict": verdict, "kept": keep})
    report = pd.DataFrame(rows, columns=["index", "mean_reward", "verdict", "kept"])
    return ScreenResult(kept=pool.select(kept), report=report)
