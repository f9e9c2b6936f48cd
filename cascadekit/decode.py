"""A batched KV-cache decode loop for the kit's own toy decoders (Qwen2/Qwen3 from :mod:`cascadekit.models`).

Why not ``model.generate``: at toy size (about 1M parameters) a decoding step is
a few milliseconds of arithmetic wrapped in per-step framework work (input
preparation, mask building, the cache object, logits processors, stopping
criteria), so ``generate`` runs at about a tenth of the CPU's matmul speed.
This loop keeps the arithmetic and drops the wrapping:

1. the left-padded batch is prefilled once by the model's own forward (so the
   prompt's keys, values and first logits are exactly ``generate``'s);
2. its cache is copied into one preallocated key and value buffer per layer;
3. each step runs the decoder layers as plain tensor operations on one new token
   per row: the transformers layers' computation, with the query/key/value and the
   gate/up projections each fused into one matrix product and attention written as
   two batched matrix products over the buffers;
4. a row stops at its first stop token (end of turn, end of text), and finished
   rows leave the batch and the buffers (in groups: see :data:`COMPACT_EVERY`).

Positions follow ``generate``'s (the count of real tokens before each one), and
sampling uses transformers' own temperature, top-k and top-p warpers in
``generate``'s order, so greedy outputs are ``generate``'s token for token and a
sampled row follows the same distribution (the random draws differ: ``generate``
draws for finished rows too). The returned ids of a row end at its stop token,
included, as ``generate``'s rows do before padding.

Only for plain CPU models that :func:`supports` (no adapter, no GPU): at
``small``/``full`` scale generation is vLLM's.

**Status: measured, not wired in.** Issue 36 keeps this loop only at 3x
``generate``'s tokens per CPU-second at batch 64;
``python -m cascadekit.decode_benchmark`` measured about 2x (greedy and sampled,
toy chat base, on a shared 2-core machine), greedy tokens identical. What is left
at batch 64 is what ``generate`` pays too: the prefill (the model's own forward),
reading every row's cached keys and values each step (attention took as long as
copying the cache), and the weights' matrix products. So the stage table, the
sampler and GRPO still call ``generate``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F
from transformers import DynamicCache, PreTrainedModel, Qwen2ForCausalLM, Qwen3ForCausalLM
from transformers.generation.logits_process import (
    LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper,
)


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen: greedy (``temperature`` 0) or sampled, as ``generate`` would sample."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0

    def __post_init__(self) -> None:
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise ValueError(f"need temperature >= 0, top_p in (0, 1] and top_k >= 0, got {self}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def warpers(self) -> LogitsProcessorList:
        """transformers' warpers for these settings, in ``generate``'s order (temperature, top-k, top-p)."""
        out = LogitsProcessorList()
        if self.greedy:
            return out
        if self.temperature != 1.0:
            out.append(TemperatureLogitsWarper(self.temperature))
        if self.top_k:
            out.append(TopKLogitsWarper(top_k=self.top_k))
        if self.top_p < 1.0:
            out.append(TopPLogitsWarper(top_p=self.top_p))
        return out


GREEDY = Sampling()
#: Finished rows leave the batch once they are at least 1/COMPACT_EVERY of it (each compaction copies the cache).
COMPACT_EVERY = 8


def supports(model: torch.nn.Module) -> bool:
    """Whether :func:`decode` can run ``model``: a plain Qwen2/Qwen3 causal LM on the CPU, full attention."""
    if type(model) not in (Qwen2ForCausalLM, Qwen3ForCausalLM) or model.device.type != "cpu":
        return False
    config = model.config
    rope = getattr(config, "rope_parameters", None) or {}
    return (not getattr(config, "use_sliding_window", False) and rope.get("rope_type", "default") == "default"
            and config._attn_implementation in ("sdpa", "eager"))


class _Layer:
    """One decoder layer's weights, read once per :func:`decode` call, projections fused.

    The query, key and value projections are one matrix (and the MLP's gate and up
    projections another), so a step makes three matrix products per layer, not seven.
    """

    def __init__(self, layer: torch.nn.Module) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        self.qkv = _fused(attn.q_proj, attn.k_proj, attn.v_proj)
        self.splits = (attn.q_proj.out_features, attn.k_proj.out_features, attn.v_proj.out_features)
        self.o_proj, self.down_proj = attn.o_proj, mlp.down_proj
        self.gate_up = _fused(mlp.gate_proj, mlp.up_proj)
        self.input_norm, self.post_norm = layer.input_layernorm, layer.post_attention_layernorm
        self.q_norm, self.k_norm = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
        self.head_dim, self.scaling = attn.head_dim, attn.scaling


def _fused(*projections: torch.nn.Linear) -> torch.nn.Linear:
    """One linear layer computing every projection's output side by side."""
    fused = torch.nn.Linear(projections[0].in_features, sum(p.out_features for p in projections),
                            bias=projections[0].bias is not None)
    fused.weight = torch.nn.Parameter(torch.cat([p.weight for p in projections]), requires_grad=False)
    if fused.bias is not None:
        fused.bias = torch.nn.Parameter(torch.cat([p.bias for p in projections]), requires_grad=False)
    return fused


def _rms_norm(norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """transformers' RMSNorm, operation for operation (float32 statistics, weight applied last)."""
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return norm.weight * h.to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def _linear(module: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return F.linear(x, module.weight, module.bias)


class _Cache:
    """Per-layer key and value buffers ``[rows, kv_heads, capacity, head_dim]`` and an additive padding mask.

    The mask is 0 where a row may attend and ``-inf`` at its left padding, added to
    the attention scores (as ``generate``'s masking does).
    """

    def __init__(self, prefill: DynamicCache, mask: torch.Tensor, capacity: int) -> None:
        rows, length = mask.shape
        self.length = length
        self.keys, self.values = [], []
        for layer in prefill.layers:
            for source, dest in ((layer.keys, self.keys), (layer.values, self.values)):
                buffer = source.new_empty(rows, source.shape[1], capacity, source.shape[3])
                buffer[:, :, :length] = source
                dest.append(buffer)
        self.bias = torch.zeros(rows, 1, 1, capacity)
        self.bias[:, 0, 0, :length].masked_fill_(mask == 0, float("-inf"))

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only ``rows`` (drop the finished ones), copying only the filled part of each buffer."""
        for buffers in (self.keys, self.values):
            for i, buffer in enumerate(buffers):
                kept = buffer.new_empty(len(rows), *buffer.shape[1:])
                kept[:, :, :self.length] = buffer[rows, :, :self.length]
                buffers[i] = kept
        self.bias = self.bias[rows]


def _attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor,
            scale: float) -> torch.Tensor:
    """One query per row against its cached keys, as batched matmuls (query heads grouped per key head)."""
    rows, kv_heads, length, dim = keys.shape
    q = q.reshape(rows, kv_heads, -1, dim)  # [rows, kv_heads, groups, dim]: head h uses key head h // groups
    scores = torch.matmul(q, keys.transpose(-1, -2)) * scale + bias
    return torch.matmul(scores.softmax(-1), values)  # [rows, kv_heads, groups, dim]


class _Rope:
    """The model's rotary cos/sin for every position a decode can reach, computed once by its own module."""

    def __init__(self, model: PreTrainedModel, positions: int) -> None:
        probe = torch.zeros(1, 1, 1, dtype=model.dtype)
        cos, sin = model.model.rotary_emb(probe, torch.arange(positions)[None])
        self.cos, self.sin = cos[0], sin[0]  # [positions, head_dim]

    def at(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of one position per row, shaped ``[rows, 1, 1, head_dim]`` for ``[rows, heads, 1, dim]``."""
        return self.cos[positions][:, None, None], self.sin[positions][:, None, None]


def _step(model: PreTrainedModel, layers: list[_Layer], rope: _Rope, cache: _Cache, tokens: torch.Tensor,
          positions: torch.Tensor) -> torch.Tensor:
    """One new token per row through every layer, its keys and values written at ``cache.length``; the logits."""
    inner = model.model
    hidden = F.embedding(tokens, inner.embed_tokens.weight)[:, None, :]  # [rows, 1, hidden]
    cos, sin = rope.at(positions)
    at, end = cache.length, cache.length + 1
    bias = cache.bias[:, :, :, :end]
    rows = hidden.shape[0]
    for i, layer in enumerate(layers):
        residual = hidden
        q, k, v = _linear(layer.qkv, _rms_norm(layer.input_norm, hidden)).split(layer.splits, dim=-1)
        q, k = q.view(rows, 1, -1, layer.head_dim), k.view(rows, 1, -1, layer.head_dim)
        if layer.q_norm is not None:
            q, k = _rms_norm(layer.q_norm, q), _rms_norm(layer.k_norm, k)
        q, k = _rotate(q.transpose(1, 2), cos, sin), _rotate(k.transpose(1, 2), cos, sin)
        cache.keys[i][:, :, at] = k[:, :, 0]
        cache.values[i][:, :, at] = v.view(rows, -1, layer.head_dim)
        attended = _attend(q, cache.keys[i][:, :, :end], cache.values[i][:, :, :end], bias, layer.scaling)
        hidden = residual + _linear(layer.o_proj, attended.reshape(rows, 1, -1))
        gate, up = _linear(layer.gate_up, _rms_norm(layer.post_norm, hidden)).chunk(2, dim=-1)
        hidden = hidden + _linear(layer.down_proj, F.silu(gate) * up)
    cache.length = end
    hidden = _rms_norm(inner.norm, hidden)
    return _linear(model.lm_head, hidden[:, 0]).float()


def _choose(logits: torch.Tensor, sampling: Sampling, warpers: LogitsProcessorList,
            generator: torch.Generator | None) -> torch.Tensor:
    """The next token of each row: the argmax, or a draw from the warped distribution."""
    if sampling.greedy:
        return logits.argmax(-1)
    scores = warpers(None, logits)
    return torch.multinomial(F.softmax(scores, dim=-1), 1, generator=generator)[:, 0]


def _left_pad(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        if prompt:
            ids[row, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
            mask[row, width - len(prompt):] = 1
    return ids, mask


@torch.inference_mode()
def decode(model: PreTrainedModel, prompts: Sequence[Sequence[int]], max_new_tokens: int,
           stop_ids: Sequence[int], sampling: Sampling = GREEDY, pad_id: int = 0,
           generator: torch.Generator | None = None) -> list[list[int]]:
    """Each prompt's completion ids (up to and including its first stop id, at most ``max_new_tokens``).

    ``prompts`` are token ids, unpadded; they are left-padded with ``pad_id`` into one
    batch. ``generator`` seeds the draws when sampling (default: torch's global one).
    """
    if not supports(model):
        raise ValueError(f"decode runs plain Qwen2/Qwen3 models on the CPU, not a {type(model).__name__} "
                         f"on {model.device}: use model.generate")
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("decode needs at least one prompt, and no empty prompt")
    vocab = model.get_input_embeddings().num_embeddings
    if any(not 0 <= t < vocab for p in prompts for t in p):
        raise ValueError(f"decode got a prompt token outside the model's vocabulary [0, {vocab})")
    if max_new_tokens < 1:
        return [[] for _ in prompts]
    model.eval()
    ids, mask = _left_pad(prompts, pad_id)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    prefill = DynamicCache(config=model.config)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=prefill,
                   use_cache=True, logits_to_keep=1).logits[:, -1].float()
    cache = _Cache(prefill, mask, ids.shape[1] + max_new_tokens)
    layers = [_Layer(layer) for layer in model.model.layers]
    rope = _Rope(model, ids.shape[1] + max_new_tokens)
    warpers, stops = sampling.warpers(), torch.tensor(list(stop_ids), dtype=torch.long)
    out: list[list[int]] = [[] for _ in prompts]
    live = torch.arange(len(prompts))  # the prompt of each row of the batch
    done = torch.zeros(len(prompts), dtype=torch.bool)  # rows that stopped but are still in the batch
    position = positions[:, -1] + 1
    for step in range(max_new_tokens):
        tokens = _choose(logits, sampling, warpers, generator)
        for row, token, finished in zip(live.tolist(), tokens.tolist(), done.tolist()):
            if not finished:
                out[row].append(token)
        done |= torch.isin(tokens, stops)
        if step == max_new_tokens - 1 or done.all():
            break
        if done.sum() * COMPACT_EVERY >= len(live):
            keep = (~done).nonzero()[:, 0]
            live, tokens, position, done = live[keep], tokens[keep], position[keep], done[keep]
            cache.keep(keep)
        logits = _step(model, layers, rope, cache, tokens, position)
        position = position + 1
    return out
