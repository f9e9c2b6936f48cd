"""Micro-batch and gradient accumulation of a supervised step (SFT, reward models), from the card and the processes.

A profile's ``sft.batch_size`` and ``reward_model.batch_size`` are the step's
batch, the paper's: rows per optimizer step over all processes. Each process
takes ``batch / processes`` of them, in micro-batches of as many rows as its card
holds at the stage's longest row, and accumulates the rest, so the step is the
same on one T4 as on 64 H100s. ``engine.accumulation`` (``cascadekit launch
--accumulation``) fixes the split instead, as on the CPU, where no card sizes it
(the CPU split is the one the toy and smoke keys were built with).

The memory of one row is an estimate by arithmetic, not a measurement
(:func:`row_bytes`), and so is the model's resident state (:func:`state_bytes`):
with gradient checkpointing each layer keeps its input (bf16), one layer at a
time is recomputed with its gradients, and a causal LM's logits are held in bf16
plus the float32 copy transformers' loss makes. Where the kit departs from a
measured plan: nothing here reads the allocator; ``cascadekit gpucheck`` is where
the estimate meets a measured peak.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

from cascadekit import distributed
from cascadekit.engine.runtime import choose_device
from cascadekit.profiles import EngineConfig, ModelConfig, Profile

__all__ = ["CARD_SHARE", "Split", "card_bytes", "profile_split", "row_bytes", "split_step", "state_bytes"]

#: The share of the card the training step may plan for (the allocator's fragmentation and CUDA's context take the rest).
CARD_SHARE = 0.9
_BF16 = 2
_GIB = 2**30


@dataclass(frozen=True)
class Split:
    """One process's part of a step: ``micro`` rows per forward/backward, ``accumulation`` of them per step."""

    micro: int
    accumulation: int
    processes: int

    @property
    def step_rows(self) -> int:
        """The step's batch, over every process."""
        return self.micro * self.accumulation * self.processes


def card_bytes() -> int | None:
    """The first CUDA card's memory in bytes, or None without one (tests replace this)."""
    import torch

    if not torch.cuda.is_available():
        return None
    return int(torch.cuda.get_device_properties(0).total_memory)


def parameters(model: ModelConfig, vocab: int) -> int:
    """The parameters of a Qwen3-shaped model of ``model``'s shape (head width 128, as Qwen3's), an estimate."""
    head = 128
    attention = model.hidden * head * (2 * model.heads + 2 * model.kv_heads)
    layer = attention + 3 * model.hidden * model.intermediate
    return model.layers * layer + vocab * model.hidden * (1 if model.tie_embeddings else 2)


def state_bytes(model: ModelConfig, vocab: int, engine: EngineConfig, processes: int, *, lora: bool) -> int:
    """What stays on each card while training, an estimate: NF4 weights (QLoRA), bf16 weights (LoRA), or for full
    fine-tuning 16 bytes a parameter (bf16 weights and gradients, float32 Adam moments, as ``profiles.yaml``'s
    ``full`` comment counts) split over the processes by ZeRO-3 or FSDP."""
    count = parameters(model, vocab)
    if engine.quantization == "4bit":
        return count // 2  # NF4 with double quantization: about half a byte a parameter; the adapter is < 1%
    if lora:
        return count * _BF16
    shards = processes if engine.distributed in ("zero3", "fsdp") else 1
    return count * 16 // shards


def row_bytes(model: ModelConfig, vocab: int, tokens: int, *, lm_head: bool) -> int:
    """One row's training activations at ``tokens`` with gradient checkpointing, an estimate by arithmetic.

    Per token: each layer's checkpointed input (bf16), one layer recomputed in the
    backward pass with its gradients (attention and MLP projections), and for a
    causal LM its logits in bf16 plus the float32 copy of the loss. A reward model
    scores from its last token: no vocabulary-wide logits.
    """
    per_token = model.layers * model.hidden * _BF16
    per_token += (4 * model.hidden + 3 * model.intermediate) * _BF16 * 2
    if lm_head:
        per_token += vocab * (_BF16 + 4)
    return per_token * tokens


def split_step(batch: int, processes: int, engine: EngineConfig, what: str, *, row: int,
               state: int, card: int | None) -> Split:
    """The micro-batch and accumulation of a step of ``batch`` rows over ``processes`` (one ValueError if uneven).

    ``engine.accumulation`` above 1 fixes the accumulation (``launch --accumulation``);
    without a card (``card`` None: the CPU) the whole share is one micro-batch, as
    before. Otherwise the micro-batch is the largest divisor of the share whose rows
    (``row`` bytes each, at the stage's longest) fit in :data:`CARD_SHARE` of the card
    beside ``state``; when not even one row does, it is 1 and a warning gives the estimate.
    """
    share, rest = divmod(batch, processes)
    if rest or not share:
        raise ValueError(f"{what}={batch} rows per step do not split evenly over {processes} training processes")
    if engine.accumulation > 1 or card is None:
        if share % engine.accumulation:
            raise ValueError(f"{what}={batch} over {processes} processes is {share} rows each, which do not split "
                             f"into engine.accumulation={engine.accumulation} micro-batches")
        return Split(share // engine.accumulation, engine.accumulation, processes)
    room = int(card * CARD_SHARE) - state
    fits = max(0, room) // row
    if fits < 1:
        warnings.warn(f"{what}: one row at the stage's longest is about {row / _GIB:.1f} GiB of activations and the "
                      f"card leaves about {room / _GIB:.1f} GiB beside the model (estimates, {card / _GIB:.0f} GiB "
                      f"card): it may not fit; a shorter sequence length or a larger card would", stacklevel=2)
    micro = max(d for d in range(1, share + 1) if share % d == 0 and d <= max(1, fits))
    return Split(micro, share // micro, processes)


def profile_split(profile: Profile, what: str, batch: int, tokens: int, *, lm_head: bool, lora: bool) -> Split:
    """:func:`split_step` of ``profile``'s step of ``batch`` rows of up to ``tokens``, over the launched processes,
    sized by this process's card when the profile trains on one (:func:`cascadekit.engine.runtime.choose_device`)."""
    processes = distributed.launched_world_size()
    vocab = profile.tokenizer.vocab_size
    card = card_bytes() if choose_device(profile).on_gpu else None
    return split_step(batch, processes, profile.engine, what,
                      row=row_bytes(profile.model, vocab, tokens, lm_head=lm_head),
                      state=state_bytes(profile.model, vocab, profile.engine, processes, lora=lora), card=card)
