"""Function-preserving growth of the kit's decoder: a larger model that starts as exactly the one it grew from.

Why: the paper's reward model is many times its policy (Qwen2.5-72B judging an 8B policy), and
chapter 09 asks whether a larger reward model is hacked less. A toy CPU cannot pretrain a second,
larger base (the chat base alone takes half an hour), and a larger model trained from scratch on a
few thousand preference pairs would know nothing of the language the pairs are written in. Growing
the SFT checkpoint keeps everything it knows and adds capacity the pairs can train: until its first
optimizer step the grown model computes what its source computes, to float rounding.

- **Deeper**: source layer ``i`` is followed by copies of itself whose output projections (attention's
  ``o_proj`` and the MLP's ``down_proj``) are zero, so each copy adds nothing to the residual stream;
  its other weights start as the layer it copies (LLaMA Pro's block expansion, Wu et al. 2024). The
  copies are spread evenly: 4 layers grown to 8 put one copy after each layer.
- **Wider**: every layer's MLP gets ``width`` times the intermediate units; the new units' gate and
  up rows are drawn as a freshly initialised model's are (seeded), their ``down_proj`` columns are zero.

The zero output weights still receive gradients (their inputs are not zero), so training moves them
first and the rest follows. Departures from the paper: its reward models are separately pretrained
models whose knowledge grows with their size; a grown toy model knows only what its SFT source knew,
so the family compares capacity on a shared base, not base-model knowledge. The hidden size and the
attention heads are kept: a wider residual stream changes every RMSNorm's statistics, and new heads
would have to be re-ordered within GQA's key-value groups.
"""
from __future__ import annotations

import copy

import torch
from transformers import PretrainedConfig, PreTrainedModel
from transformers.integrations import is_deepspeed_zero3_enabled

#: The projections that write into the residual stream: zero in a copied layer and in the new units.
OUTPUTS = ("self_attn.o_proj", "mlp.down_proj")


def grown_config(config: PretrainedConfig, layers: int, width: int) -> PretrainedConfig:
    """``config`` with ``layers`` decoder layers and ``width`` times its MLP's intermediate units."""
    old = config.num_hidden_layers
    if layers < old or width < 1:
        raise ValueError(f"growth keeps or adds layers and units: {old} layers can grow to {old} or more "
                         f"with a width multiplier >= 1, not {layers} layers at width {width}")
    grown = copy.deepcopy(config)
    grown.num_hidden_layers = layers
    grown.intermediate_size = config.intermediate_size * width
    if getattr(config, "layer_types", None) is not None:
        grown.layer_types = [config.layer_types[i] for i, _ in layer_sources(old, layers)]
    return grown


def layer_sources(old: int, new: int) -> list[tuple[int, bool]]:
    """For each of ``new`` layers, the source layer it starts from and whether it is a zeroed copy.

    >>> layer_sources(2, 5)
    [(0, False), (0, True), (0, True), (1, False), (1, True)]
    """
    counts = [new // old + (i < new % old) for i in range(old)]
    return [(i, n > 0) for i, count in enumerate(counts) for n in range(count)]


def grow(model: PreTrainedModel, layers: int, width: int = 1, seed: int = 0) -> PreTrainedModel:
    """A model of ``model``'s class with ``layers`` decoder layers and ``width`` times the MLP units,
    computing what ``model`` computes (see the module docstring); ``seed`` draws the new units.

    Works for any head over the Qwen-style base (a causal LM, a sequence classifier): every weight
    outside the decoder layers (embeddings, final norm, head) is copied as it is. Not under DeepSpeed
    ZeRO-3, whose partitioned weights cannot be sliced into a larger model.
    """
    if is_deepspeed_zero3_enabled():
        raise ValueError("growing a model needs its whole weights: not under DeepSpeed ZeRO-3 "
                         "(engine.distributed=zero3); use engine.distributed=fsdp or none")
    config = grown_config(model.config, layers, width)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        grown = type(model)(config).to(model.dtype)
    prefix = f"{model.base_model_prefix}.layers."
    outside = {k: v for k, v in model.state_dict().items() if not k.startswith(prefix)}
    missing, unexpected = grown.load_state_dict(outside, strict=False)
    if unexpected or any(not k.startswith(prefix) for k in missing):
        raise ValueError(f"cannot grow {type(model).__name__}: weights outside its layers differ "
                         f"({sorted(unexpected) or sorted(k for k in missing if not k.startswith(prefix))})")
    old_layers, new_layers = model.base_model.layers, grown.base_model.layers
    with torch.no_grad():
        for target, (source, copied) in zip(new_layers, layer_sources(len(old_layers), layers)):
            _paste_layer(old_layers[source], target, zero_outputs=copied)
    return grown


def _paste_layer(source: torch.nn.Module, target: torch.nn.Module, zero_outputs: bool) -> None:
    """``source``'s weights into the leading block of ``target``'s (same or larger) tensors.

    An output projection starts at zero, so its new columns (and, in a copy, all of it) add nothing.
    """
    weights = dict(source.named_parameters())
    for name, param in target.named_parameters():
        output = name.rsplit(".", 1)[0] in OUTPUTS
        if output:
            param.zero_()
        if not (output and zero_outputs):
            old = weights[name]
            param[tuple(slice(0, n) for n in old.shape)] = old
