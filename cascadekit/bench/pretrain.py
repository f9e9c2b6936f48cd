"""Training throughput: the kit's pretraining path (HF Trainer) in fp32 and in bf16 autocast, and a plain loop.

All three train the same freshly initialised model on the same packed blocks with
the same optimizer settings (AdamW, cosine-with-floor schedule, gradient
clipping); the first steps are excluded from the timing. Run::

    cascadekit bench train --scale toy --steps 40 --threads 1

It prints tokens per CPU second for each (one torch thread: ``--threads 1``), and each one's ratio
to the fp32 Trainer (the kit's path today), measured in the same run: the paths
alternate round by round, so background load hits them alike. The bf16-autocast
path is the same Trainer with ``engine.precision: bf16-autocast``
(:func:`cascadekit.engine.runtime.training_precision`); the target is 1.5x.
"""
from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Sequence

import torch
from transformers import TrainerCallback, get_scheduler

from cascadekit.engine.models import build_model, count_parameters
from cascadekit.profiles import Profile, add_scale_arguments, profile_from_arguments
from cascadekit.bands import PRETRAIN_MIXTURE
from cascadekit.training.pretrain import train_lm, training_blocks
from cascadekit.engine.tokenizer import build_tokenizer


class _StepClock(TrainerCallback):
    def __init__(self):
        self.times: list[float] = []

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.process_time())


def _tokens_per_second(times: Sequence[float], warmup: int, tokens_per_step: int) -> float:
    """Tokens per CPU second of this process, from the CPU clock at each step's end (steps after ``warmup``).

    CPU time, not wall time: on a machine shared with other jobs the wall clock
    counts their work too; with one torch thread the CPU clock counts this run's.
    """
    return (len(times) - 1 - warmup) * tokens_per_step / (times[-1] - times[warmup])


def trainer_throughput(profile: Profile, tokenizer, blocks: torch.Tensor, steps: int, warmup: int) -> float:
    """Tokens/s of :func:`train_lm` (the kit's pretraining path)."""
    clock = _StepClock()
    with TemporaryDirectory() as run_dir:
        train_lm(build_model(profile.model, tokenizer, profile.seed), blocks, profile, Path(run_dir),
                 tokens=steps * _tokens_per_step(profile), callbacks=[clock])
    return _tokens_per_second(clock.times, warmup, _tokens_per_step(profile))


def plain_throughput(profile: Profile, tokenizer, blocks: torch.Tensor, steps: int, warmup: int) -> float:
    """Tokens/s of a bare loop: forward, backward, clip, AdamW step, scheduler step."""
    cfg = profile.pretrain
    torch.manual_seed(profile.seed)
    model = build_model(profile.model, tokenizer, profile.seed).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = get_scheduler("cosine_with_min_lr", optimizer, num_warmup_steps=int(cfg.warmup_ratio * steps),
                              num_training_steps=steps, scheduler_specific_kwargs={"min_lr_rate": cfg.min_lr_ratio})
    loader = torch.utils.data.DataLoader(blocks, batch_size=cfg.batch_size, shuffle=True, drop_last=True)
    times, batches = [], iter(())
    for _ in range(steps):
        batch = next(batches, None)
        if batch is None:
            batches = iter(loader)
            batch = next(batches)
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.process_time())
    return _tokens_per_second(times, warmup, _tokens_per_step(profile))


def _tokens_per_step(profile: Profile) -> int:
    return profile.pretrain.batch_size * profile.pretrain.seq_len


def main(argv: Sequence[str] | None = None,
         parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser) -> None:
    """Run the benchmark; ``parser_class`` is the command line's own (one-line errors) under ``cascadekit bench``."""
    parser = parser_class(prog="cascadekit bench train", description=__doc__.splitlines()[0])
    add_scale_arguments(parser)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5, help="steps left out of the timing")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of each path")
    profile = profile_from_arguments(args := parser.parse_args(argv))
    if args.steps <= args.warmup + 1 or args.rounds < 1:
        parser.error("--steps must exceed --warmup + 1, and --rounds be at least 1")
    tokenizer = build_tokenizer(profile)
    blocks = training_blocks(profile, tokenizer, PRETRAIN_MIXTURE, "pretrain", args.steps * _tokens_per_step(profile))
    model = build_model(profile.model, tokenizer)
    print(f"{profile.name}: {count_parameters(model):,} parameters, {_tokens_per_step(profile):,} tokens/step, "
          f"{args.steps} steps ({args.warmup} untimed), {torch.get_num_threads()} threads")
    at = {p: dataclasses.replace(profile, engine=dataclasses.replace(profile.engine, precision=p))
          for p in ("fp32", "bf16-autocast")}
    paths = {"HF Trainer fp32": lambda: trainer_throughput(at["fp32"], tokenizer, blocks, args.steps, args.warmup),
             "HF Trainer bf16-autocast": lambda: trainer_throughput(at["bf16-autocast"], tokenizer, blocks, args.steps,
                                                                    args.warmup),
             "plain loop fp32": lambda: plain_throughput(at["fp32"], tokenizer, blocks, args.steps, args.warmup)}
    runs: dict[str, list[float]] = {name: [] for name in paths}
    for r in range(args.rounds):
        order = list(paths) if r % 2 == 0 else list(paths)[::-1]
        for name in order:
            runs[name].append(paths[name]())
        print(f"round {r + 1}: " + ", ".join(f"{name} {runs[name][-1]:,.0f} tok/s" for name in paths))
    base = max(runs["HF Trainer fp32"])
    print("best of each (tokens per CPU second), and its ratio to the fp32 Trainer:")
    for name, values in runs.items():
        print(f"  {name:<26} {max(values):>10,.0f} tok/s   {max(values) / base:5.2f}x")
    print(f"ratio Trainer/plain = {base / max(runs['plain loop fp32']):.3f} (fp32), "
          f"bf16-autocast/fp32 = {max(runs['HF Trainer bf16-autocast']) / base:.3f} (target: at least 1.5)")

