"""GRPO's training forward without the batch's padding, each group's prompt run once: rows sorted by length, in chunks.

TRL 1.16 pads a step's rollouts into one ``[rollouts, prompt + completion]`` batch
(prompts to the left, completions to the right, to the longest of the step) and runs
the policy's forward and backward over all of it: at the toy shape about half of that
batch is padding (completions stop early, a few run to the length limit), each
prompt's tokens are run once per rollout of its group, and a batch of hundreds of rows
runs each layer's elementwise work over tensors far bigger than the CPU's caches; the
forward and backward are most of a step's CPU time. :func:`trim_padding` wraps the
trainer's ``_get_per_token_logps_and_entropies`` so that

1. each distinct prompt goes through the model once (a GRPO group's rollouts share it),
   from the first real column of any prompt, keeping its keys and values;
2. the completions, sorted by length, go through in chunks of about :data:`CHUNK_TOKENS`
   tokens, each cut to its longest completion and attending to its rows' prompt keys
   and values (gathered per row, so their gradients add up in the prompt's pass);
3. each completion token's log-probability and entropy come from the hidden state
   before it (the first token's from the prompt's last), through the output head at
   the sampling temperature, as TRL's fused head computes them, and are put back in
   TRL's layout (zeros at the padding, as TRL's own are).

The loss, the advantages and the logs are TRL's. The bigger the step, the closer the
chunks fit their rows (more rows of each length), so a rollout costs less in a bigger batch.

Measured (``cascadekit bench grpo --prompts 8,32,64 --steps 3 --repeats 3 --threads 1``, toy shape,
48-token completions, shared 2-core machine, CPU seconds, medians): at 64 prompts x 8 rollouts the
step's forward and backward fall from 3.81 s (TRL's padded batch) to 1.45 s, at 8 prompts from 0.40 to
0.23 s; a rollout then costs 1.42x less at 64 prompts a step than at 8 (0.97x with the padded forward),
2.04x less than at 8 with the padded forward, and the whole step at 64 prompts reaches 49% of the
one-thread matmul peak (22% padded). Each group's prompt once is about a fifth of that forward and
backward at 64 prompts (the bench's prompts are short: 4-6 of a rollout's ~27 tokens); what is left is
mostly matrix products near the peak and the model's elementwise work. Generation (the decode loop) is
the rest of the step, already cheaper per rollout in bigger batches (its per-step cost is shared).

Where it departs from TRL: the tokens sit at other absolute positions than in the
padded batch (less left padding), and a completion attends to its prompt's keys and
values from the prompt's own pass. Rotary attention depends only on relative
positions, so the values are TRL's up to float rounding, not bit for bit (1e-5 in the
tests, gradients too). Used on the kit's CPU rollout path (``engine.rollouts: kit``),
for the plain Qwen2/Qwen3 models the kit's decode loop runs; any other model,
multimodal inputs and MoE auxiliary losses go through TRL's own method unchanged.
"""
from __future__ import annotations

from functools import wraps
from typing import Any

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from cascadekit.engine.decode import supports

#: Tokens (rows x columns) per chunk of completions: at the toy shape (one thread) budgets of 512 to 2048 measured
#: within 10% of each other at 8 and 64 prompts a step; 4096 was slower at both (activations out of cache).
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


def _completion_logps(model: Any, hidden: torch.Tensor, labels: torch.Tensor, temperature: float,
                      entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probabilities of ``labels`` (and the entropies) from the hidden states that predict them, as TRL's head."""
    head = model.get_output_embeddings()
    logps = F.linear(hidden, head.weight, head.bias).div(temperature).log_softmax(-1)
    chosen = logps.gather(-1, labels[..., None])[..., 0]
    return chosen, -(logps.exp() * logps).sum(-1) if entropy else None


def trim_padding(trainer: Any, tokens: int = CHUNK_TOKENS) -> None:
    """Make ``trainer`` (a ``GRPOTrainer``) score its batches as the module describes (plain CPU Qwen models only)."""
    full = trainer._get_per_token_logps_and_entropies

    @wraps(full)
    def trimmed(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int,
                batch_size: int | None = None, compute_entropy: bool = False, compute_aux_loss: bool = False,
                **extra: Any) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        if compute_aux_loss or any(value is not None for value in extra.values()) or not supports(model):
            return full(model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy,
                        compute_aux_loss, **extra)
        prompt = input_ids.shape[1] - logits_to_keep
        # each distinct prompt once (a GRPO group's rollouts share theirs), from its first real column on
        distinct, which = torch.unique(torch.cat((input_ids[:, :prompt], attention_mask[:, :prompt]), 1), dim=0,
                                       return_inverse=True)
        prompt_mask = distinct[:, prompt:]
        low = int(prompt_mask.argmax(1).min())
        cache = DynamicCache(config=model.config)
        last = model.base_model(input_ids=distinct[:, low:prompt], attention_mask=prompt_mask[:, low:],
                                past_key_values=cache, use_cache=True).last_hidden_state[:, -1]
        completion_mask = attention_mask[:, prompt:].bool()
        lengths = completion_mask.sum(1).clamp(min=1)
        chunks = length_chunks(torch.zeros_like(lengths), lengths, tokens)
        pieces: dict[str, list[torch.Tensor]] = {"logps": [], "entropies": []}
        for rows in chunks:
            width, held = int(lengths[rows].max()), which[rows]
            chunk_cache = DynamicCache(config=model.config)
            for i, layer in enumerate(cache.layers):
                chunk_cache.update(layer.keys.index_select(0, held), layer.values.index_select(0, held), i)
            hidden = model.base_model(
                input_ids=input_ids[rows, prompt:prompt + width], past_key_values=chunk_cache, use_cache=True,
                attention_mask=torch.cat((prompt_mask[held, low:], attention_mask[rows, prompt:prompt + width]), 1),
            ).last_hidden_state
            # token j is predicted at column j - 1: the first one by the prompt's last column
            predicting = torch.cat((last.index_select(0, held)[:, None], hidden[:, :-1]), 1)
            logps, entropies = _completion_logps(model, predicting, input_ids[rows, prompt:prompt + width],
                                                 trainer.temperature, compute_entropy)
            real = completion_mask[rows, :width]
            pieces["logps"].append(F.pad(logps.masked_fill(~real, 0), (0, logits_to_keep - width)))
            if entropies is not None:
                pieces["entropies"].append(F.pad(entropies.masked_fill(~real, 0), (0, logits_to_keep - width)))
        back = torch.argsort(torch.cat(chunks))  # sorted order back to the batch's
        logps = torch.cat(pieces["logps"]).index_select(0, back)
        entropies = torch.cat(pieces["entropies"]).index_select(0, back) if pieces["entropies"] else None
        return logps, entropies, None

    trainer._get_per_token_logps_and_entropies = trimmed
