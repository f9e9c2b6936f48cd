"""The unified model's base: a tokenizer and a small LM pretrained on raw text of every domain.

The paper starts from Qwen3-8B/14B-Base, a model that has read plenty of
problems, code and diffs but was never taught the chat format or the
``/think``/``/no_think`` switch. The toy stand-in is built the same way with the
Part I machinery: domain tasks of the ``pretrain`` split rendered as plain text
(:func:`cascadekit.domains.raw_text`, no chat markup), a byte-level BPE trained
on that text with the chat markers added as special tokens (one id each, never
seen in pretraining: SFT teaches them), and next-token pretraining with packing
(:func:`cascadekit.training.pretrain.train_lm`). Both are cached by config hash.
"""
from __future__ import annotations

import dataclasses
import json
import math
import random
import shutil
from pathlib import Path
from typing import Sequence

from transformers import PreTrainedTokenizerBase, TrainerCallback

from cascadekit.artifacts import cache_root, get_or_build
from cascadekit.chat import MARKUP_TOKENS, install_chat_template
from cascadekit.domains import domains, draw_tasks, raw_text
from cascadekit.models import start_model
from cascadekit.profiles import Profile
from cascadekit.runtime import base_model_source, choose_device, download_allowed, save_checkpoint
from cascadekit.tokenizer import load_tokenizer, train_tokenizer
from cascadekit.training.pretrain import LOSS_LOG, pack, train_lm

TOKENIZER_TASKS_PER_DOMAIN = 200


def base_texts(profile: Profile, per_domain: int) -> list[str]:
    """``per_domain`` raw-text documents of every domain (``pretrain`` split, every op range), shuffled."""
    ops = range(profile.world.ops_in_distribution[0], profile.world.ops_hard[1] + 1)
    texts = [raw_text(t) for d in domains().values() for t in draw_tasks(d, per_domain, profile.seed, "pretrain", ops)]
    random.Random(profile.seed).shuffle(texts)
    return texts


def build_chat_tokenizer(profile: Profile) -> PreTrainedTokenizerBase:
    """BPE on the mixed raw corpus, plus the chat markers as special tokens and the chat template.

    A profile that names released weights (``model.pretrained``) starts from their tokenizer instead.
    """
    if source := base_model_source(profile):
        tokenizer = load_tokenizer(source, allow_download=download_allowed(profile))
    else:
        tokenizer = train_tokenizer(base_texts(profile, TOKENIZER_TASKS_PER_DOMAIN), profile.tokenizer.vocab_size)
    tokenizer.add_tokens(list(MARKUP_TOKENS), special_tokens=True)
    return install_chat_template(tokenizer)


def chat_tokenizer_key(profile: Profile) -> str:
    return profile.hash("world", "tokenizer", "seed")


def cached_chat_tokenizer(profile: Profile) -> PreTrainedTokenizerBase:
    """The unified model's tokenizer from the artifact cache, trained on first use."""
    path = get_or_build("chat-tokenizer", chat_tokenizer_key(profile),
                        lambda d: build_chat_tokenizer(profile).save_pretrained(d))
    return load_tokenizer(path)


def pretrain_base(profile: Profile, tokenizer: PreTrainedTokenizerBase, dest: Path, run_dir: Path,
                  callbacks: Sequence[TrainerCallback] = ()) -> list[tuple[int, int, float]]:
    """Pretrain a fresh model on ``sft.base_tokens`` of raw domain text; save model, tokenizer, loss log.

    A profile that names released weights (``model.pretrained``) starts from them;
    with ``sft.base_tokens`` 0 they are the base as they are.
    """
    if base_model_source(profile) and not profile.sft.base_tokens:
        model = start_model(profile, tokenizer, placement=choose_device(profile))
        save_checkpoint(model, tokenizer, dest, files={LOSS_LOG: json.dumps([])})
        return []
    sample = base_texts(profile, 20)
    mean_tokens = sum(len(ids) + 1 for ids in tokenizer(sample)["input_ids"]) / len(sample)
    per_domain = math.ceil(profile.sft.base_tokens / mean_tokens / len(domains()))
    texts = base_texts(profile, per_domain)
    cfg = dataclasses.replace(profile.pretrain, tokens=profile.sft.base_tokens)
    blocks = pack(tokenizer(texts)["input_ids"], cfg.seq_len, tokenizer.eos_token_id)
    model = start_model(profile, tokenizer, placement=choose_device(profile))
    log = train_lm(model, blocks, profile, run_dir, cfg.tokens, callbacks=callbacks, cfg=cfg)
    save_checkpoint(model, tokenizer, dest, files={LOSS_LOG: json.dumps(log)})
    return log


def base_key(profile: Profile) -> str:
    return f"{profile.hash('world', 'tokenizer', 'model', 'pretrain', 'seed')}-{profile.sft.base_tokens}"


def cached_base(profile: Profile, callbacks: Sequence[TrainerCallback] = ()) -> Path:
    """The folder of the unified model's base checkpoint, pretrained on first use."""
    key = base_key(profile)
    tokenizer = cached_chat_tokenizer(profile)
    run_dir = cache_root() / "runs" / f"chat-base-{key}"

    def build(dest: Path) -> None:
        pretrain_base(profile, tokenizer, dest, run_dir, callbacks)
        shutil.rmtree(run_dir, ignore_errors=True)

    return get_or_build("chat-base", key, build)
