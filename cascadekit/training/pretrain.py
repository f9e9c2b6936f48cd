"""Pretraining and mid-training a small reasoner from scratch with the Hugging Face Trainer.

Both stages are next-token prediction on rendered DAG problems; they differ
only in the problem mixture and the starting point:

- pretraining: the ``pretrain`` split, in-distribution ops, from random init;
- mid-training: the ``midtrain`` split narrowed towards harder ops (by default
  20% in-distribution, 80% edge), continuing from a pretrained checkpoint, with
  its schedule starting where pretraining's ended (:func:`midtrain_config`).

The token budget in the profile fixes the number of optimizer steps
(``tokens // (batch_size * seq_len)``); the schedule is cosine with a floor
(``cosine_with_min_lr``), after a linear warmup. An interrupted run resumes
from its last Trainer checkpoint.

Run the toy measurement with::

    python -m cascadekit.training.pretrain --scale toy --out runs/pretrain

Chapter 03 shows the committed toy run under ``data/results/03_pretraining/``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import torch
from transformers import (
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    default_data_collator,
)
from transformers.trainer_utils import get_last_checkpoint

from cascadekit.artifacts import cache_root, get_or_build
from cascadekit.models import build_model, count_parameters
from cascadekit.profiles import PretrainConfig, Profile
from cascadekit.tokenizer import build_tokenizer, load_tokenizer

PRETRAIN_MIXTURE = {"in_distribution": 1.0}
MIDTRAIN_MIXTURE = {"in_distribution": 0.2, "edge": 0.8}
LOSS_LOG = "loss_log.json"


def pack(token_lists: Iterable[Sequence[int]], seq_len: int, eos_id: int) -> torch.Tensor:
    """Concatenate documents, each followed by EOS, and cut the stream into ``seq_len`` blocks.

    Every position is a training target (no padding is wasted); a block may
    start mid-document and hold several documents, which the model learns to
    separate at the EOS token. The incomplete tail block is dropped.
    """
    stream: list[int] = []
    for ids in token_lists:
        stream.extend(ids)
        stream.append(eos_id)
    n_blocks = len(stream) // seq_len
    return torch.tensor(stream[: n_blocks * seq_len], dtype=torch.long).view(n_blocks, seq_len)


class BlockDataset(torch.utils.data.Dataset):
    """Packed blocks as causal-LM examples (labels are the inputs; the model shifts them)."""

    def __init__(self, blocks: torch.Tensor):
        self.blocks = blocks

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.blocks[i], "labels": self.blocks[i]}


def mixture_texts(profile: Profile, mixture: Mapping[str, float], n: int, split: str,
                  contexts: Sequence[str] | None = None) -> list[str]:
    """``n`` training texts from ``split``, a ``mixture`` weight per op range, shuffled."""
    from cascadekit.world import generate_problems

    world = profile.world
    texts: list[str] = []
    for i, (range_name, weight) in enumerate(sorted(mixture.items())):
        count = round(n * weight)
        if count:
            problems = generate_problems(
                ops=world.ops(range_name), contexts=tuple(contexts or world.contexts), n=count,
                seed=profile.seed * 1000 + i, split=split, style=world.rendering,
            )
            texts.extend(p.training_text for p in problems)
    random.Random(profile.seed).shuffle(texts)
    return texts


def problems_for_budget(profile: Profile, tokenizer: PreTrainedTokenizerBase, mixture: Mapping[str, float],
                        tokens: int, split: str) -> int:
    """How many distinct problems fill ``tokens`` once (``pretrain.problems`` caps it when set)."""
    sample = mixture_texts(profile, mixture, 200, split)
    mean = sum(len(ids) + 1 for ids in tokenizer(sample)["input_ids"]) / len(sample)
    needed = math.ceil(tokens / mean)
    cap = profile.pretrain.problems
    return min(needed, cap) if cap else needed


def training_blocks(profile: Profile, tokenizer: PreTrainedTokenizerBase, mixture: Mapping[str, float],
                    split: str, tokens: int) -> torch.Tensor:
    """Tokenized, packed blocks for one stage (repeated by the Trainer if fewer than the budget)."""
    n = problems_for_budget(profile, tokenizer, mixture, tokens, split)
    texts = mixture_texts(profile, mixture, n, split)
    return pack(tokenizer(texts)["input_ids"], profile.pretrain.seq_len, tokenizer.eos_token_id)


def training_arguments(cfg: PretrainConfig, out_dir: Path, max_steps: int, profile: Profile) -> TrainingArguments:
    """Trainer settings: AdamW, warmup then cosine to ``min_lr_ratio * lr``, clip 1.0, bf16 if supported."""
    on_gpu = profile.device == "cuda" and torch.cuda.is_available()
    bf16 = profile.dtype == "bfloat16" and (torch.cuda.is_bf16_supported() if on_gpu else True)
    return TrainingArguments(
        output_dir=str(out_dir),
        max_steps=max_steps,
        per_device_train_batch_size=cfg.batch_size,
        learning_rate=cfg.lr,
        lr_scheduler_type="cosine_with_min_lr",
        lr_scheduler_kwargs={"min_lr_rate": cfg.min_lr_ratio},
        warmup_steps=cfg.warmup_ratio,  # a float below 1 is a fraction of max_steps
        weight_decay=cfg.weight_decay,
        max_grad_norm=cfg.max_grad_norm,
        bf16=bf16,
        use_cpu=not on_gpu,
        save_steps=cfg.save_steps,
        save_total_limit=2,
        logging_steps=max(1, max_steps // 200),
        report_to="none",
        seed=profile.seed,
        data_seed=profile.seed,
        dataloader_drop_last=True,
    )


class ProgressCallback(TrainerCallback):
    """One line per log event (step, tokens, loss, tokens/s) to a stream, for long background runs."""

    def __init__(self, tokens_per_step: int, stream=sys.stderr):
        self.tokens_per_step = tokens_per_step
        self.stream = stream
        self.start = time.perf_counter()
        self.first_step: int | None = None

    def on_step_end(self, args, state, control, **kwargs):
        if self.first_step is None:
            self.first_step, self.start = state.global_step, time.perf_counter()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs and self.first_step is not None:
            done = (state.global_step - self.first_step) * self.tokens_per_step
            rate = done / max(time.perf_counter() - self.start, 1e-9)
            print(f"step {state.global_step}/{state.max_steps} tokens {state.global_step * self.tokens_per_step:,} "
                  f"loss {logs['loss']:.4f} lr {logs.get('learning_rate', 0):.2e} {rate:,.0f} tok/s",
                  file=self.stream, flush=True)


def loss_log(log_history: list[dict], tokens_per_step: int) -> list[tuple[int, int, float]]:
    """``(step, tokens seen, loss)`` for every logged training loss (kept across resumes)."""
    return [(e["step"], e["step"] * tokens_per_step, e["loss"]) for e in log_history if "loss" in e]


def train_lm(model: PreTrainedModel, blocks: torch.Tensor, profile: Profile, run_dir: Path,
             tokens: int | None = None, callbacks: Sequence[TrainerCallback] = (),
             cfg: PretrainConfig | None = None) -> list[tuple[int, int, float]]:
    """Train ``model`` on packed ``blocks`` for a token budget; resume from ``run_dir``'s last checkpoint.

    Returns the loss log. ``tokens`` defaults to ``profile.pretrain.tokens``.
    """
    cfg = cfg or profile.pretrain
    tokens_per_step = cfg.batch_size * cfg.seq_len
    max_steps = max(1, (tokens or cfg.tokens) // tokens_per_step)
    run_dir.mkdir(parents=True, exist_ok=True)
    trainer = Trainer(
        model=model,
        args=training_arguments(cfg, run_dir, max_steps, profile),
        train_dataset=BlockDataset(blocks),
        data_collator=default_data_collator,
        callbacks=list(callbacks),
    )
    trainer.train(resume_from_checkpoint=get_last_checkpoint(str(run_dir)))
    return loss_log(trainer.state.log_history, tokens_per_step)


def _save_stage(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, log: list, dest: Path) -> None:
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    (dest / LOSS_LOG).write_text(json.dumps(log))


def run_stage(profile: Profile, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, dest: Path,
              mixture: Mapping[str, float], split: str, tokens: int, run_dir: Path,
              callbacks: Sequence[TrainerCallback] = (),
              cfg: PretrainConfig | None = None) -> list[tuple[int, int, float]]:
    """Build one stage's data, train (resuming if interrupted), save model + tokenizer + loss log to ``dest``."""
    blocks = training_blocks(profile, tokenizer, mixture, split, tokens)
    log = train_lm(model, blocks, profile, run_dir, tokens, callbacks=callbacks, cfg=cfg)
    _save_stage(model, tokenizer, log, dest)
    shutil.rmtree(run_dir, ignore_errors=True)
    return log


def pretrain(profile: Profile, tokenizer: PreTrainedTokenizerBase, dest: Path, run_dir: Path,
             callbacks: Sequence[TrainerCallback] = ()) -> list[tuple[int, int, float]]:
    """Pretrain a fresh model on the in-distribution ``pretrain`` split; save it to ``dest``."""
    model = build_model(profile.model, tokenizer, seed=profile.seed)
    return run_stage(profile, model, tokenizer, dest, PRETRAIN_MIXTURE, "pretrain",
                     profile.pretrain.tokens, run_dir, callbacks)


def midtrain_config(cfg: PretrainConfig) -> PretrainConfig:
    """Mid-training's optimizer settings: pretraining's, with the peak learning rate where its schedule ended.

    Mid-training continues a converged model, so its warmup climbs only to
    ``lr * min_lr_ratio`` (then decays by the same cosine to ``min_lr_ratio`` of that).
    Restarting at pretraining's peak, ten times higher, is a jolt: in chapter
    06's first toy run a short mid-training at the peak rate left every mixed arm
    below both pure arms (kept in ``data/results/06_fixed_budget/peak-lr/``).
    """
    return dataclasses.replace(cfg, lr=cfg.lr * cfg.min_lr_ratio)


def midtrain(profile: Profile, checkpoint: Path, dest: Path, run_dir: Path, tokens: int,
             mixture: Mapping[str, float] = MIDTRAIN_MIXTURE,
             callbacks: Sequence[TrainerCallback] = ()) -> list[tuple[int, int, float]]:
    """Continue ``checkpoint`` on the ``midtrain`` split with a narrowed ``mixture``; save to ``dest``."""
    from transformers import AutoModelForCausalLM

    tokenizer = load_tokenizer(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    return run_stage(profile, model, tokenizer, dest, mixture, "midtrain", tokens, run_dir, callbacks,
                     cfg=midtrain_config(profile.pretrain))


def tokenizer_key(profile: Profile) -> str:
    return profile.hash("world", "tokenizer", "seed")


def pretrain_key(profile: Profile) -> str:
    return profile.hash("world", "tokenizer", "model", "pretrain", "seed")


def cached_tokenizer(profile: Profile) -> PreTrainedTokenizerBase:
    """The profile's tokenizer from the artifact cache, trained on first use."""
    path = get_or_build("tokenizer", tokenizer_key(profile), lambda d: build_tokenizer(profile).save_pretrained(d))
    return load_tokenizer(path)


def cached_pretrained(profile: Profile, callbacks: Sequence[TrainerCallback] = ()) -> Path:
    """The folder of the profile's pretrained checkpoint (model, tokenizer, loss log), built on first use.

    An interrupted build resumes from the Trainer checkpoints kept under
    ``<cache>/runs/pretrain-<key>`` until it completes.
    """
    key = pretrain_key(profile)
    tokenizer = cached_tokenizer(profile)
    run_dir = cache_root() / "runs" / f"pretrain-{key}"
    return get_or_build("pretrain", key, lambda d: pretrain(profile, tokenizer, d, run_dir, callbacks))


def read_loss_log(checkpoint: Path) -> list[tuple[int, int, float]]:
    return [tuple(row) for row in json.loads((Path(checkpoint) / LOSS_LOG).read_text())]


def main(argv: Sequence[str] | None = None) -> None:
    """Train the profile's tokenizer and model (cached), evaluate the op ladder, write metrics and figures."""
    from cascadekit.results import provenance
    from cascadekit.evaluation.report import evaluate_ladder, write_results
    from cascadekit.profiles import add_scale_arguments, profile_from_arguments
    from transformers import AutoModelForCausalLM

    parser = argparse.ArgumentParser(description=main.__doc__)
    add_scale_arguments(parser)
    parser.add_argument("--out", type=Path, default=Path("runs/pretrain"))
    parser.add_argument("--checkpoint", type=Path, help="evaluate this checkpoint instead of the profile's own")
    parser.add_argument("--note", default="", help="how --checkpoint was made, kept in metrics.json")
    profile = profile_from_arguments(args := parser.parse_args(argv))
    print(profile.summary(), file=sys.stderr, flush=True)

    started = time.perf_counter()
    tokens_per_step = profile.pretrain.batch_size * profile.pretrain.seq_len
    checkpoint = args.checkpoint or cached_pretrained(profile, callbacks=[ProgressCallback(tokens_per_step)])
    train_s = time.perf_counter() - started
    tokenizer = load_tokenizer(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    started = time.perf_counter()
    results = evaluate_ladder(model, tokenizer, profile)
    eval_s = time.perf_counter() - started
    command = " ".join(["python -m cascadekit.training.pretrain", *(argv if argv is not None else sys.argv[1:])])
    results.update(
        produced_by=provenance(command), profile=profile.to_dict(), pretrain_tokens=profile.pretrain.tokens,
        checkpoint=str(args.checkpoint or pretrain_key(profile)), note=args.note, vocab_size=len(tokenizer),
        parameters=count_parameters(model), parameters_without_embeddings=count_parameters(model, embeddings=False),
        train_wall_s=round(train_s, 1), eval_wall_s=round(eval_s, 1),
    )
    write_results(results, read_loss_log(checkpoint), args.out)


if __name__ == "__main__":
    main()
