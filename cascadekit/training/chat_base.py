"""The unified model's base: a tokenizer and a small LM pretrained on raw text of every surface.

The paper starts from Qwen3-8B/14B-Base, a model that has read plenty of
problems, code, tool schemas and diffs but was never taught the chat format or
the ``/think``/``/no_think`` switch. The toy stand-in is built the same way with
the Part I machinery: tasks of every domain's ``pretrain`` split rendered as plain
text (:func:`cascadekit.domains.raw_text`, no chat markup), an equal share of the
tokens per domain, a byte-level BPE trained on that text with the chat markers
added as special tokens (one id each, never seen in pretraining: SFT teaches
them), and next-token pretraining with packing (:func:`cascadekit.training.pretrain.train_lm`).

Both are stages of the stage runner (:mod:`cascadekit.stages`). The base's key
covers the surfaces' text (:func:`cascadekit.domains.surfaces_fingerprint`), so
a change to any domain's wording rebuilds it, and the tokenizer's content, so the
tokenizer is built (seconds; the toy one is shipped) before the base's key is known.
The toy base ships under ``data/checkpoints/chat-base/`` (its folder through
``data/checkpoints/aliases.json``): every Part II chapter starts from it in seconds,
and ``cascadekit experiment 08 --scale toy --rebuild-base`` builds it again.
"""
from __future__ import annotations

import dataclasses
import math
import random
import shutil
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from transformers import PreTrainedTokenizerBase, TrainerCallback

from cascadekit.chat import MARKUP_TOKENS, install_chat_template
from cascadekit.domains import domains, draw_tasks, raw_text, surfaces_fingerprint
from cascadekit.engine.models import start_model
from cascadekit.stages import CHECKPOINT, Stage, StageOutput, content_id, rekey_cached, run_folder, run_stage
from cascadekit.profiles import Profile, seed_inputs
from cascadekit.engine.runtime import (
    base_model_source, choose_device, download_allowed, load_chat_tokenizer, load_tokenizer, save_checkpoint,
)
from cascadekit.engine.tokenizer import train_tokenizer
from cascadekit.training.pretrain import pack, train_lm

#: Bumped when the same inputs would build other bytes (enters every key this module makes: stages.py).
RECIPE = 1

TOKENIZER_TASKS_PER_DOMAIN = 200
#: Tasks per domain drawn to measure each surface's mean length in tokens.
LENGTH_PROBES = 50


def surface_ops(profile: Profile) -> range:
    """The op counts every Part II surface is drawn from (``sft.ops``)."""
    return range(profile.sft.ops[0], profile.sft.ops[1] + 1)


def domain_texts(profile: Profile, name: str, n: int) -> list[str]:
    """``n`` raw-text documents of one domain from its ``pretrain`` split (never through the ``domains`` knobs)."""
    return [raw_text(t) for t in draw_tasks(domains()[name], n, profile.seeds.data, "pretrain", surface_ops(profile))]


def base_texts(profile: Profile, tokenizer: PreTrainedTokenizerBase, tokens: int) -> list[str]:
    """Raw documents filling ``tokens`` with an equal share of tokens per domain, shuffled by the base's ``seed``."""
    texts = []
    for name in domains():
        probe = domain_texts(profile, name, LENGTH_PROBES)
        mean = sum(len(ids) + 1 for ids in tokenizer(probe)["input_ids"]) / len(probe)
        texts += domain_texts(profile, name, math.ceil(tokens / len(domains()) / mean))
    random.Random(profile.seed).shuffle(texts)
    return texts


def build_chat_tokenizer(profile: Profile) -> PreTrainedTokenizerBase:
    """BPE on the mixed raw corpus, plus the chat markers as special tokens and the chat template.

    A profile that names released weights (``model.pretrained``) starts from their tokenizer instead.
    """
    if source := base_model_source(profile):
        return load_chat_tokenizer(source, allow_download=download_allowed(profile))
    texts = [t for name in domains() for t in domain_texts(profile, name, TOKENIZER_TASKS_PER_DOMAIN)]
    tokenizer = train_tokenizer(texts, profile.tokenizer.vocab_size)
    tokenizer.add_tokens(list(MARKUP_TOKENS), special_tokens=True)
    return install_chat_template(tokenizer)


def _surfaces(profile: Profile) -> dict[str, Any]:
    """What the tokenizer's and the base's keys share: the surfaces, ``seed`` and the data seed (never the
    training seed: every training seed starts from the one base)."""
    return {"ops": list(profile.sft.ops), "surfaces": surfaces_fingerprint(surface_ops(profile)), "seed": profile.seed,
            **seed_inputs(profile, "data")}


def _tokenizer_stage(profile: Profile) -> Stage:
    inputs = {**_surfaces(profile), "tokenizer": dataclasses.asdict(profile.tokenizer),
              "pretrained": base_model_source(profile)}

    def build(folder: Path) -> Mapping[str, Any]:
        tokenizer = build_chat_tokenizer(profile)
        tokenizer.save_pretrained(folder)
        return {"vocab_size": len(tokenizer)}

    return Stage("chat-tokenizer", inputs, build, recipe=RECIPE)


def chat_tokenizer(profile: Profile) -> StageOutput:
    """The unified model's tokenizer (a stage: trained once per tokenizer settings and surfaces)."""
    return run_stage(_tokenizer_stage(profile))


def _pretrain_settings(profile: Profile) -> dict[str, Any]:
    """The pretraining section minus Part I's token and problem budgets (``sft.base_tokens`` sets this one)."""
    return {k: v for k, v in dataclasses.asdict(profile.pretrain).items() if k not in ("tokens", "problems")}


def _base_stage(profile: Profile, callbacks: Sequence[TrainerCallback] = ()) -> Stage:
    inputs = {**_surfaces(profile), "tokenizer": content_id(chat_tokenizer(profile)),
              "model": dataclasses.asdict(profile.model), "pretrain": _pretrain_settings(profile),
              "base_tokens": profile.sft.base_tokens}
    run_dir = run_folder("chat-base", inputs, RECIPE)  # Trainer checkpoints

    def build(dest: Path) -> Mapping[str, Any]:
        started = time.perf_counter()
        tokenizer = load_tokenizer(chat_tokenizer(profile).checkpoint)
        model = start_model(profile, tokenizer, placement=choose_device(profile))
        log: list = []
        if profile.sft.base_tokens or not base_model_source(profile):
            texts = base_texts(profile, tokenizer, profile.sft.base_tokens)
            cfg = dataclasses.replace(profile.pretrain, tokens=profile.sft.base_tokens)
            blocks = pack(tokenizer(texts)["input_ids"], cfg.seq_len, tokenizer.eos_token_id)
            log = train_lm(model, blocks, profile, run_dir, cfg.tokens, callbacks=callbacks, cfg=cfg)
        save_checkpoint(model, tokenizer, dest)
        shutil.rmtree(run_dir, ignore_errors=True)
        return {"tokens": profile.sft.base_tokens, "loss_log": log, "wall_s": round(time.perf_counter() - started, 1)}

    return Stage("chat-base", inputs, build, recipe=RECIPE, holds=CHECKPOINT)


def chat_base_key(profile: Profile) -> str:
    """The cache key of the profile's base without building the base (its tokenizer is built or copied)."""
    return _base_stage(profile).key


def rekey_chat_base(profile: Profile) -> list[tuple[str, str, str, bool]]:
    """Move the profile's tokenizer and base, cached under the keys they had before keys hashed content, to their
    content keys, without training: ``(kind, old key, new key, moved)`` for each.

    The tokenizer first (its key gains only the recipe), then the base, whose old key
    named the tokenizer's old key where its new one names the tokenizer's content.
    """
    tokenizer = _tokenizer_stage(profile)
    moves = [(tokenizer.kind, *rekey_cached(tokenizer, {}))]
    upstream = {content_id(chat_tokenizer(profile)): moves[0][1]}  # built only if neither key is cached
    base = _base_stage(profile)
    return [*moves, (base.kind, *rekey_cached(base, upstream))]


def chat_base(profile: Profile, callbacks: Sequence[TrainerCallback] = (), rebuild: bool = False) -> StageOutput:
    """The unified model's base checkpoint: ``sft.base_tokens`` of raw surface text (a cached, shippable stage).

    With released weights (``model.pretrained``) and ``sft.base_tokens`` 0 the base
    is those weights as they are.
    """
    return run_stage(_base_stage(profile, callbacks), rebuild=rebuild)
