"""Qwen-style decoder-only language models: built from a config, or released weights named by the profile.

At the smoke, toy and paper scales the model is initialised from scratch from
the profile's shape (:func:`build_model`), never downloaded; a GPU profile whose
``model.pretrained`` names released weights (the full scale's Qwen3-8B-Base)
starts from them instead (:func:`start_model`, through :mod:`cascadekit.engine.runtime`).
"""
from __future__ import annotations

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

from cascadekit.profiles import ModelConfig, Profile
from cascadekit.engine.runtime import Placement, base_model_source, download_allowed, load_model

_ARCHITECTURES = {"qwen2": (Qwen2Config, Qwen2ForCausalLM), "qwen3": (Qwen3Config, Qwen3ForCausalLM)}


def model_config(cfg: ModelConfig, tokenizer: PreTrainedTokenizerBase) -> Qwen2Config | Qwen3Config:
    """The transformers config for a decoder of shape ``cfg`` over ``tokenizer``'s vocabulary."""
    if cfg.architecture not in _ARCHITECTURES:
        raise ValueError(f"unknown architecture {cfg.architecture!r}; choose one of {sorted(_ARCHITECTURES)}")
    config_cls, _ = _ARCHITECTURES[cfg.architecture]
    return config_cls(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden,
        intermediate_size=cfg.intermediate,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        num_key_value_heads=cfg.kv_heads,
        head_dim=cfg.hidden // cfg.heads,
        max_position_embeddings=cfg.max_positions,
        rope_theta=cfg.rope_theta,
        tie_word_embeddings=cfg.tie_embeddings,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        use_cache=True,
    )


def build_model(cfg: ModelConfig, tokenizer: PreTrainedTokenizerBase, seed: int = 0) -> PreTrainedModel:
    """A freshly initialised causal LM (deterministic for a given ``seed``)."""
    config = model_config(cfg, tokenizer)
    _, model_cls = _ARCHITECTURES[cfg.architecture]
    torch.manual_seed(seed)
    return model_cls(config)


def start_model(profile: Profile, tokenizer: PreTrainedTokenizerBase, seed: int | None = None,
                placement: Placement | None = None) -> PreTrainedModel:
    """The model a profile's first training stage starts from.

    From scratch (:func:`build_model` with ``seed``, default ``profile.seed``) unless
    ``model.pretrained`` names released weights: then those, loaded by
    :func:`cascadekit.engine.runtime.load_model` on ``placement`` (downloaded only when
    :func:`cascadekit.engine.runtime.download_allowed`), with the embeddings grown to
    ``tokenizer``'s size if it added tokens.
    """
    source = base_model_source(profile)
    if source is None:
        return build_model(profile.model, tokenizer, seed=profile.seed if seed is None else seed)
    model = load_model(source, placement, allow_download=download_allowed(profile))
    if len(tokenizer) > model.get_input_embeddings().num_embeddings:
        model.resize_token_embeddings(len(tokenizer))
    return model


def count_parameters(model: torch.nn.Module, embeddings: bool = True) -> int:
    """Number of distinct parameters; ``embeddings=False`` leaves out token embeddings and an untied head.

    Tied input/output embeddings are counted once (``parameters()`` already
    deduplicates shared tensors).
    """
    params = {id(p): p for p in model.parameters()}
    if not embeddings:
        for module in (model.get_input_embeddings(), model.get_output_embeddings()):
            if module is not None:
                for p in module.parameters():
                    params.pop(id(p), None)
    return sum(p.numel() for p in params.values())
