"""GRPO's training forward without the batch's padding: rows sorted by length, run in chunks trimmed to their own.

TRL 1.16 pads a step's rollouts into one ``[rollouts, prompt + completion]`` batch
(prompts to the left, completions to the right, to the longest of the step) and runs
the policy's forward and backward over all of it. At the toy shape about half of
that batch is padding (completions stop early, a few run to the length limit), and
the forward and backward are most of a step's CPU time; a batch of hundreds of rows
also runs each layer's elementwise work over tensors far bigger than the CPU's
caches. :func:`trim_padding` wraps the trainer's
``_get_per_token_logps_and_entropies`` so that the rows are sorted by their real
length and run in chunks of about :data:`CHUNK_TOKENS` tokens, each cut to the
columns its own rows use; the per-token log-probabilities and entropies are put back
in TRL's layout (zeros at the padding, as TRL's own are), so the loss, the
advantages and the logs are TRL's. The bigger the step, the closer the chunks fit
their rows (more rows of each length), so this is what lets a rollout cost less in a
bigger batch.

Measured (``cascadekit bench grpo --prompts 8,32,64 --steps 3 --repeats 3 --threads 1``, toy shape,
48-token completions, shared 2-core machine, CPU seconds, medians): the step's forward and backward
fall from 3.90 to 1.64 s at 64 prompts x 8 rollouts (0.37 to 0.25 s at 8 prompts); a rollout costs
1.40x less at 64 prompts a step than at 8 (0.90x with the padded forward), and the whole step reaches
44% of the one-thread matmul peak at 64 prompts (21% padded). What is left is mostly matrix products
(about two thirds of a chunk's time, near the peak) and the model's elementwise work; chunk budgets of
512 to 2048 tokens measured within 10% of each other at both shapes.

Where it departs from TRL: a chunk's tokens sit at other absolute positions than in
the padded batch (less left padding). Rotary attention depends only on relative
positions, so the values are TRL's up to float rounding, not bit for bit.
Used on the kit's CPU rollout path (``engine.rollouts: kit``); multimodal inputs and
MoE auxiliary losses go through TRL's own method unchanged.
"""
from __future__ import annotations

from functools import wraps
from typing import Any

import torch
import torch.nn.functional as F

#: Tokens (rows x columns) per chunk of the training forward: measured at the toy shape (one thread) as the
#: size where a chunk's activations stay in cache and its matrix products are still large.
CHUNK_TOKENS = 1024


def length_chunks(start: torch.Tensor, end: torch.Tensor, tokens: int = CHUNK_TOKENS) -> list[torch.Tensor]:
    """Row indices in chunks of similar length, each at most ``tokens`` once padded to its own span (one row at least).

    Row ``i`` uses columns ``start[i]:end[i]``; rows are taken shortest first, and a
    chunk's padded size is its row count times its widest span.
    """
    order = torch.argsort(end - start, stable=True).tolist()
    chunks: list[list[int]] = []
    low = high = 0
    for row in order:
        s, e = int(start[row]), int(end[row])
        if chunks and (len(chunks[-1]) + 1) * (max(high, e) - min(low, s)) <= tokens:
            chunks[-1].append(row)
            low, high = min(low, s), max(high, e)
        else:
            chunks.append([row])
            low, high = s, e
    return [torch.tensor(chunk) for chunk in chunks]


def trim_padding(trainer: Any, tokens: int = CHUNK_TOKENS) -> None:
    """Make ``trainer`` (a ``GRPOTrainer``) score its batches in length-sorted, padding-trimmed chunks."""
    full = trainer._get_per_token_logps_and_entropies

    @wraps(full)
    def trimmed(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int,
                batch_size: int | None = None, compute_entropy: bool = False, compute_aux_loss: bool = False,
                **extra: Any) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        if compute_aux_loss or any(value is not None for value in extra.values()):
            return full(model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy,
                        compute_aux_loss, **extra)
        prompt = input_ids.shape[1] - logits_to_keep
        real = attention_mask.bool()
        start = real.int().argmax(1)  # the first real column (prompts are left-padded)
        # one past the last real column, at least one completion column (TRL scores the last logits_to_keep)
        end = (input_ids.shape[1] - real.flip(1).int().argmax(1)).clamp(min=prompt + 1)
        pieces: dict[str, list[torch.Tensor]] = {"logps": [], "entropies": []}
        chunks = length_chunks(start, end, tokens)
        for rows in chunks:
            low, high = int(start[rows].min()), int(end[rows].max())
            logps, entropies, _ = full(model, input_ids[rows, low:high], attention_mask[rows, low:high],
                                       high - prompt, None, compute_entropy, False)
            pieces["logps"].append(F.pad(logps, (0, logits_to_keep - logps.shape[1])))
            if entropies is not None:
                pieces["entropies"].append(F.pad(entropies, (0, logits_to_keep - entropies.shape[1])))
        back = torch.argsort(torch.cat(chunks))  # sorted order back to the batch's
        logps = torch.cat(pieces["logps"]).index_select(0, back)
        entropies = torch.cat(pieces["entropies"]).index_select(0, back) if pieces["entropies"] else None
        return logps, entropies, None

    trainer._get_per_token_logps_and_entropies = trimmed
