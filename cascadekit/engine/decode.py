"""A batched KV-cache decode loop for the kit's own toy decoders (plain Qwen2/Qwen3 causal LMs on the CPU).

Why not ``model.generate``: at toy size (about 1M parameters) ``generate`` spends
most of a step on per-step framework work (input preparation, mask building, the
cache object, logits processors, stopping criteria) and keeps stepping rows that
have finished. This loop keeps the arithmetic and drops the wrapping:

1. each distinct prompt is prefilled once by the model's own forward (so the
   prompt's keys, values and first logits are exactly ``generate``'s), in runs of
   similar length (:data:`PREFILL_ROWS`) so that little of it is padding; a GRPO
   group of ``group`` completions of one prompt shares that prefill;
2. in a GRPO group the prompt's keys and values stay in one buffer per prompt, not
   per row: each step a prompt's rows attend to them as one matrix product (the
   group's queries side by side), and to their own completion's keys and values,
   preallocated; distinct prompts (``group`` 1) keep prompt and completion in one
   buffer per row, keys transposed, so a step attends with one product each for the
   scores and the values;
3. each step runs the decoder layers as plain tensor operations on one new token
   per row, with the query/key/value and the gate/up projections each fused into
   one matrix product and the rotary tables computed once;
4. a row stops at its first stop token, and finished rows leave the batch (in
   groups: see :data:`COMPACT_EVERY`), a prompt's buffer once all its rows are done.

Positions follow ``generate``'s (the count of real tokens before each one), and
sampling is ``generate``'s temperature, top-k and top-p in its order, so greedy
outputs are ``generate``'s token for token (up to float rounding near exact ties)
and a sampled row follows the same distribution (the random draws differ).

Only for plain CPU models that :func:`supports` (no adapter, no GPU): at
``small``/``full`` scale generation is vLLM's.

Measured (``cascadekit bench decode --scale toy --threads 1 --repeats 5``, toy chat
base, shared 2-core machine, paired medians of CPU seconds): at the GRPO shape
(8 prompts x 8 completions, T=1, 128 new tokens) 4.0x ``generate``'s tokens per
CPU-second; on 64 distinct greedy stage-table prompts 2.65x, tokens identical (one
buffer per row took it from 2.05x to 2.33x, length-sorted prefill runs to 2.63x); on
the whole toy stage table (``--shape table``: long prompts, short answers) 2.1x, half
of the loop's time there being the prefill, the same work as ``generate``'s.
What is left at that shape: the prefill is about 15% of the time; in a step,
attention about 45% (64 rows' keys and values, about 20 MB a step, read by 128
small batched products each), the fixed cost of about 150 tensor operations about
20% (a one-row step costs 1.6 ms); rolling instead of concatenating in the rotary
step, compacting at every finished row and prefill runs of 8 measured nothing;
``torch.compile`` of the step did not finish its first call within four
CPU-minutes, more than a toy GRPO stage's whole generation.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from transformers import DynamicCache, PreTrainedModel, Qwen2ForCausalLM, Qwen3ForCausalLM


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen: greedy (``temperature`` 0) or sampled, as ``generate`` samples."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0

    def __post_init__(self) -> None:
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise ValueError(f"need temperature >= 0, top_p in (0, 1] and top_k >= 0, got {self}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


GREEDY = Sampling()
#: Finished rows leave the batch once they are at least 1/COMPACT_EVERY of it (each compaction copies the cache).
COMPACT_EVERY = 8

#: ``on_finished(row, ids)``: a row's completion as soon as it has emitted its stop id.
Finished = Callable[[int, list[int]], None]


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
    projections another), so a step makes four matrix products per layer, not seven.
    """

    def __init__(self, layer: torch.nn.Module) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        self.qkv_weight, self.qkv_bias = _fused(attn.q_proj, attn.k_proj, attn.v_proj)
        self.o_proj, self.down_proj = attn.o_proj, mlp.down_proj
        self.gate_up_weight, self.gate_up_bias = _fused(mlp.gate_proj, mlp.up_proj)
        self.input_norm, self.post_norm = layer.input_layernorm, layer.post_attention_layernorm
        self.head_dim = dim = attn.head_dim
        self.heads, self.kv_heads = attn.q_proj.out_features // dim, attn.k_proj.out_features // dim
        # Queries and keys are normalised (Qwen3) and rotated as one tensor of heads + kv_heads rows, the
        # attention scale folded into the queries' factor, so each step does that once, not three times.
        q_norm, k_norm = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
        self.qk_eps = q_norm.variance_epsilon if q_norm is not None else None
        q_weight = q_norm.weight if q_norm is not None else torch.ones(dim)
        k_weight = k_norm.weight if k_norm is not None else torch.ones(dim)
        self.qk_weight = torch.cat((q_weight.expand(self.heads, dim) * attn.scaling, k_weight.expand(self.kv_heads, dim)))


def _fused(*projections: torch.nn.Linear) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The weight and bias of one linear map computing every projection's output side by side."""
    weight = torch.cat([p.weight for p in projections])
    bias = torch.cat([p.bias for p in projections]) if projections[0].bias is not None else None
    return weight, bias


def _rms_norm(norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, x.shape[-1:], norm.weight, norm.variance_epsilon)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class _Rope:
    """The model's rotary cos/sin for every position a decode can reach, computed once by its own module."""

    def __init__(self, model: PreTrainedModel, positions: int) -> None:
        probe = torch.zeros(1, 1, 1, dtype=model.dtype)
        cos, sin = model.model.rotary_emb(probe, torch.arange(positions)[None])
        self.cos, self.sin = cos[0], sin[0]  # [positions, head_dim]

    def at(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of one position per row, shaped ``[rows, 1, head_dim]`` for ``[rows, heads, head_dim]``."""
        return self.cos[positions][:, None], self.sin[positions][:, None]


#: Prompts are prefilled in runs of at most this many, sorted by length, so that little of it is padding.
PREFILL_ROWS = 16


@dataclass
class _Prefill:
    """The prompts through the model's own forward: keys and values per layer, left-padded to one width.

    ``keys``/``values`` are ``[prompts, kv_heads, width, head_dim]`` (zeros at the padding),
    ``mask`` is 1 at real tokens, ``logits`` the next token's, ``position`` the next token's position.
    """

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    mask: torch.Tensor
    logits: torch.Tensor
    position: torch.Tensor


def _prefill(model: PreTrainedModel, prompts: Sequence[Sequence[int]], pad_id: int) -> _Prefill:
    """Prefill ``prompts`` in runs of similar length (:data:`PREFILL_ROWS`), each padded only to its own longest.

    One left-padded batch of distinct prompts spends a quarter of the stage table's
    prefill on padding; sorted runs spend little. Each run's keys and values are put
    back at the right end of the common width, so they are what one batch would hold.
    """
    width = max(map(len, prompts))
    _, mask = _left_pad(prompts, pad_id)
    order = sorted(range(len(prompts)), key=lambda p: len(prompts[p]))
    keys: list[torch.Tensor] = []
    values: list[torch.Tensor] = []
    logits = position = None
    for start in range(0, len(order), PREFILL_ROWS):
        run = order[start:start + PREFILL_ROWS]
        ids, run_mask = _left_pad([prompts[p] for p in run], pad_id)
        positions = (run_mask.cumsum(-1) - 1).masked_fill(run_mask == 0, 0)
        cache = DynamicCache(config=model.config)
        out = model(input_ids=ids, attention_mask=run_mask, position_ids=positions, past_key_values=cache,
                    use_cache=True, logits_to_keep=1).logits[:, -1].float()
        if logits is None:
            logits = out.new_empty(len(prompts), out.shape[-1])
            position = torch.empty(len(prompts), dtype=torch.long)
            for layer in cache.layers:
                keys.append(layer.keys.new_zeros(len(prompts), layer.keys.shape[1], width, layer.keys.shape[3]))
                values.append(layer.values.new_zeros(len(prompts), layer.values.shape[1], width, layer.values.shape[3]))
        rows, at = torch.tensor(run), width - ids.shape[1]
        logits[rows], position[rows] = out, positions[:, -1] + 1
        for layer, k, v in zip(cache.layers, keys, values):
            k[rows, :, at:], v[rows, :, at:] = layer.keys, layer.values
    return _Prefill(keys, values, mask, logits, position)


class _GroupCache:
    """The prompts' keys and values, once per prompt, and the rows' own completion keys and values (GRPO groups).

    Prompt buffers are ``[prompts, kv_heads, prompt_length, head_dim]`` with an additive
    mask (0 where a token is real, ``-inf`` at the left padding); completion buffers are
    ``[rows, kv_heads, max_new_tokens, head_dim]``. Rows are prompt-major: ``slot`` is each
    row's place in the full ``[prompts, group]`` grid of the prompts still held, so the
    attention to a prompt is one matrix product over its group's queries.
    """

    def __init__(self, prefill: _Prefill, group: int, capacity: int) -> None:
        prompts, self.prompt_length = prefill.mask.shape
        self.group, self.length = group, 0
        self.prompt_keys, self.prompt_values = prefill.keys, prefill.values
        self.prompt_bias = torch.zeros(prompts, 1, 1, self.prompt_length).masked_fill_(
            (prefill.mask == 0)[:, None, None, :], float("-inf"))
        kv_heads, dim = self.prompt_keys[0].shape[1], self.prompt_keys[0].shape[3]
        rows = prompts * group
        self.keys = [torch.empty(rows, kv_heads, capacity, dim) for _ in prefill.keys]
        self.values = [torch.empty(rows, kv_heads, capacity, dim) for _ in prefill.keys]
        self.slot = torch.arange(rows)
        self.row_bias = self.prompt_bias.repeat_interleave(group, 0)
        self.full = True  # every slot of the grid holds a row: no scatter or gather needed

    def advance(self) -> None:
        """Make room for one more token per row (written by :meth:`write`, attended from then on)."""
        self.length += 1

    def write(self, i: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Layer ``i``'s key and value ``[rows, kv_heads, head_dim]`` of the newest token."""
        self.keys[i][:, :, self.length - 1] = keys
        self.values[i][:, :, self.length - 1] = values

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only ``rows`` (drop the finished ones), and only the prompts that still have a row."""
        slot = self.slot[rows]
        prompt = slot // self.group
        held = torch.unique(prompt)
        if len(held) < self.prompt_bias.shape[0]:
            renumber = torch.full((self.prompt_bias.shape[0],), -1, dtype=torch.long)
            renumber[held] = torch.arange(len(held))
            slot = renumber[prompt] * self.group + slot % self.group
            for buffers in (self.prompt_keys, self.prompt_values):
                for i, buffer in enumerate(buffers):
                    buffers[i] = buffer.index_select(0, held)
            self.prompt_bias = self.prompt_bias.index_select(0, held)
        for buffers in (self.keys, self.values):
            for i, buffer in enumerate(buffers):
                buffers[i] = _kept(buffer, rows, 2, self.length)
        self.slot, self.row_bias = slot, self.row_bias.index_select(0, rows)
        self.full = len(slot) == self.prompt_bias.shape[0] * self.group

    def to_grid(self, x: torch.Tensor) -> torch.Tensor:
        """Row tensors ``[rows, kv_heads, groups, n]`` as ``[prompts, kv_heads, group * groups, n]`` (absent rows 0)."""
        prompts, rows, (kv_heads, groups, n) = self.prompt_bias.shape[0], x.shape[0], x.shape[1:]
        if not self.full:
            x = x.new_zeros(prompts * self.group, kv_heads, groups, n).index_copy_(0, self.slot, x)
        return x.view(prompts, self.group, kv_heads, groups, n).transpose(1, 2).reshape(
            prompts, kv_heads, self.group * groups, n)

    def from_grid(self, x: torch.Tensor, groups: int) -> torch.Tensor:
        """The inverse of :meth:`to_grid`: each held row's part of ``[prompts, kv_heads, group * groups, n]``."""
        prompts, kv_heads, _, n = x.shape
        x = x.view(prompts, kv_heads, self.group, groups, n).transpose(1, 2).reshape(
            prompts * self.group, kv_heads, groups, n)
        return x if self.full else x.index_select(0, self.slot)

    def attend(self, i: int, q: torch.Tensor) -> torch.Tensor:
        """One (scaled) query per row against its prompt's keys (shared by the group) and its own, one softmax."""
        groups, end = q.shape[2], self.length
        prompt_scores = self.from_grid(torch.matmul(self.to_grid(q), self.prompt_keys[i].transpose(-1, -2)), groups)
        own_scores = torch.matmul(q, self.keys[i][:, :, :end].transpose(-1, -2))
        scores = torch.cat((prompt_scores + self.row_bias, own_scores), dim=-1).softmax(-1)
        to_prompt, to_own = scores.split((self.prompt_length, end), dim=-1)
        from_prompt = self.from_grid(torch.matmul(self.to_grid(to_prompt), self.prompt_values[i]), groups)
        return from_prompt + torch.matmul(to_own, self.values[i][:, :, :end])  # [rows, kv_heads, groups, dim]


class _RowCache:
    """Each row's prompt and completion keys and values in one buffer: distinct prompts (``group`` 1).

    With nothing shared between rows, a row's prompt and completion are one sequence:
    each step attends with one product for the scores and one for the values (the
    group cache needs two of each, a concatenation and a split). Keys are kept
    transposed, ``[rows, kv_heads, head_dim, prompt_length + capacity]``, so the scores
    are a plain product ``q @ K``; values are ``[rows, kv_heads, positions, head_dim]``;
    the additive mask is ``-inf`` at each row's left padding.
    """

    def __init__(self, prefill: _Prefill, capacity: int) -> None:
        rows, self.length = prefill.mask.shape
        total = self.length + capacity
        self.keys, self.values = [], []
        for keys, values in zip(prefill.keys, prefill.values):
            self.keys.append(keys.new_empty(rows, keys.shape[1], keys.shape[3], total))
            self.keys[-1][..., :self.length] = keys.transpose(-1, -2)
            self.values.append(values.new_empty(rows, values.shape[1], total, values.shape[3]))
            self.values[-1][:, :, :self.length] = values
        self.bias = torch.zeros(rows, 1, 1, total)
        self.bias[..., :self.length].masked_fill_((prefill.mask == 0)[:, None, None, :], float("-inf"))

    def advance(self) -> None:
        """Make room for one more token per row (written by :meth:`write`, attended from then on)."""
        self.length += 1

    def write(self, i: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Layer ``i``'s key and value ``[rows, kv_heads, head_dim]`` of the newest token."""
        self.keys[i][..., self.length - 1] = keys
        self.values[i][:, :, self.length - 1] = values

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only ``rows`` (drop the finished ones)."""
        self.keys = [_kept(buffer, rows, 3, self.length) for buffer in self.keys]
        self.values = [_kept(buffer, rows, 2, self.length) for buffer in self.values]
        self.bias = self.bias.index_select(0, rows)

    def attend(self, i: int, q: torch.Tensor) -> torch.Tensor:
        """One (scaled) query per row against its prompt's and its completion's keys: ``[rows, kv_heads, groups, dim]``."""
        end = self.length
        scores = torch.matmul(q, self.keys[i][..., :end]) + self.bias[..., :end]
        return torch.matmul(scores.softmax(-1), self.values[i][:, :, :end])


def _kept(buffer: torch.Tensor, rows: torch.Tensor, axis: int, filled: int) -> torch.Tensor:
    """A new buffer of ``buffer``'s ``rows``, copying only the ``filled`` positions along ``axis``."""
    kept = buffer.new_empty(len(rows), *buffer.shape[1:])
    kept.narrow(axis, 0, filled).copy_(buffer.narrow(axis, 0, filled)[rows])
    return kept


def _step(model: PreTrainedModel, layers: list[_Layer], rope: _Rope, cache: _GroupCache | _RowCache,
          tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """One new token per row through every layer, its keys and values added to ``cache``; the logits."""
    inner = model.model
    hidden = F.embedding(tokens, inner.embed_tokens.weight)  # [rows, hidden]
    cos, sin = rope.at(positions)
    rows = hidden.shape[0]
    cache.advance()
    for i, layer in enumerate(layers):
        qkv = F.linear(_rms_norm(layer.input_norm, hidden), layer.qkv_weight, layer.qkv_bias)
        heads, kv_heads, dim = layer.heads, layer.kv_heads, layer.head_dim
        qk = qkv[:, :(heads + kv_heads) * dim].view(rows, heads + kv_heads, dim)
        if layer.qk_eps is not None:
            qk = F.rms_norm(qk, (dim,), None, layer.qk_eps)
        qk = _rotate(qk * layer.qk_weight, cos, sin)
        cache.write(i, qk[:, heads:], qkv[:, (heads + kv_heads) * dim:].view(rows, kv_heads, dim))
        attended = cache.attend(i, qk[:, :heads].view(rows, kv_heads, heads // kv_heads, dim))
        hidden = hidden + F.linear(attended.reshape(rows, -1), layer.o_proj.weight, layer.o_proj.bias)
        gate, up = F.linear(_rms_norm(layer.post_norm, hidden), layer.gate_up_weight, layer.gate_up_bias).chunk(
            2, dim=-1)
        hidden = hidden + F.linear(F.silu(gate) * up, layer.down_proj.weight, layer.down_proj.bias)
    return F.linear(_rms_norm(inner.norm, hidden), model.lm_head.weight, model.lm_head.bias).float()


def _choose(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None) -> torch.Tensor:
    """The next token of each row: the argmax, or a draw as ``generate`` samples (temperature, top-k, top-p)."""
    if sampling.greedy:
        return logits.argmax(-1)
    if sampling.temperature != 1.0:
        logits = logits / sampling.temperature
    if sampling.top_k and sampling.top_k < logits.shape[-1]:
        kth = logits.topk(sampling.top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if sampling.top_p < 1.0:
        # transformers' TopPLogitsWarper: drop the least likely tokens whose total is at most 1 - top_p
        ascending, order = logits.sort(dim=-1)
        drop = ascending.softmax(-1).cumsum(-1) <= 1 - sampling.top_p
        drop[:, -1] = False
        logits = logits.masked_fill(drop.scatter(1, order, drop), float("-inf"))
    return _draw(logits.softmax(-1), generator)


def _draw(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One index per row with the given probabilities, by the inverse of its cumulative distribution.

    ``torch.multinomial`` draws one exponential variate per vocabulary entry (about a
    fifth of a toy decoding step); this draws one uniform per row.
    """
    cumulative = probs.cumsum(-1)
    u = torch.rand(probs.shape[0], 1, generator=generator) * cumulative[:, -1:]
    return torch.searchsorted(cumulative, u, right=True)[:, 0].clamp_(max=probs.shape[-1] - 1)


def _left_pad(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
        mask[row, width - len(prompt):] = 1
    return ids, mask


def _check(model: torch.nn.Module, prompts: Sequence[Sequence[int]], group: int) -> None:
    if not supports(model):
        raise ValueError(f"decode runs plain Qwen2/Qwen3 models on the CPU, not a {type(model).__name__} "
                         f"on {getattr(model, 'device', 'this device')}: use model.generate")
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("decode needs at least one prompt, and no empty prompt")
    if group < 1:
        raise ValueError(f"decode needs group >= 1 completions per prompt, got {group}")
    vocab = model.get_input_embeddings().num_embeddings
    if any(not 0 <= t < vocab for p in prompts for t in p):
        raise ValueError(f"decode got a prompt token outside the model's vocabulary [0, {vocab})")


@torch.inference_mode()
def decode(model: PreTrainedModel, prompts: Sequence[Sequence[int]], max_new_tokens: int,
           stop_ids: Sequence[int], sampling: Sampling = GREEDY, pad_id: int = 0,
           generator: torch.Generator | None = None, group: int = 1,
           on_finished: Finished | None = None) -> list[list[int]]:
    """``group`` completions of each prompt, prompt-major (each up to and including its first stop id).

    ``prompts`` are token ids, unpadded, each decoded ``group`` times (a GRPO group:
    prefilled once); the result's row ``p * group + j`` is prompt ``p``'s ``j``-th
    completion, at most ``max_new_tokens`` ids. ``generator`` seeds the draws when
    sampling (default: torch's global one). ``on_finished(row, ids)`` is called for
    each row at the step it emits its stop id, while the others still decode (a row
    cut at ``max_new_tokens`` is not reported: it is in the result).
    """
    _check(model, prompts, group)
    rows = len(prompts) * group
    if max_new_tokens < 1:
        return [[] for _ in range(rows)]
    training = model.training
    try:
        model.eval()
        return _decode(model, prompts, max_new_tokens, stop_ids, sampling, pad_id, generator, group, on_finished)
    finally:
        model.train(training)  # a trainer's policy goes back to training mode (TRL reads it)


def _decode(model: PreTrainedModel, prompts: Sequence[Sequence[int]], max_new_tokens: int, stop_ids: Sequence[int],
            sampling: Sampling, pad_id: int, generator: torch.Generator | None, group: int,
            on_finished: Finished | None) -> list[list[int]]:
    """The loop itself, on checked input (prefill, then one token per live row per step)."""
    rows = len(prompts) * group
    prefill = _prefill(model, prompts, pad_id)
    logits = prefill.logits.repeat_interleave(group, 0)
    cache = _RowCache(prefill, max_new_tokens) if group == 1 else _GroupCache(prefill, group, max_new_tokens)
    layers = [_Layer(layer) for layer in model.model.layers]
    rope = _Rope(model, prefill.mask.shape[1] + max_new_tokens)
    stops = torch.tensor(list(stop_ids), dtype=torch.long)
    out = torch.full((rows, max_new_tokens), stops[0].item(), dtype=torch.long)
    length = torch.full((rows,), max_new_tokens, dtype=torch.long)
    live = torch.arange(rows)  # the output row of each row of the batch
    done = torch.zeros(rows, dtype=torch.bool)  # rows that stopped but are still in the batch
    position = prefill.position.repeat_interleave(group, 0)
    for step in range(max_new_tokens):
        tokens = _choose(logits, sampling, generator)
        fresh = ~done
        out[live[fresh], step] = tokens[fresh]
        stopped = fresh & torch.isin(tokens, stops)
        length[live[stopped]] = step + 1
        if on_finished is not None:
            for row in live[stopped].tolist():
                on_finished(row, out[row, :step + 1].tolist())
        done |= stopped
        if step == max_new_tokens - 1 or done.all():
            break
        if done.sum() * COMPACT_EVERY >= len(live):
            keep = (~done).nonzero()[:, 0]
            live, tokens, position, done = live[keep], tokens[keep], position[keep], done[keep]
            cache.keep(keep)
        logits = _step(model, layers, rope, cache, tokens, position)
        position = position + 1
    return [row[:n] for row, n in zip(out.tolist(), length.tolist())]
