"""Generation throughput of the evaluation sampler (``sample_completions``).

Samples the profile's evaluation settings on held-out problems of one op and
prints generated tokens/s. With ``--checkpoint`` it uses a trained model
(realistic lengths: samples stop at ``</answer>``); without, an untrained model
of the profile's shape, which never stops early (every sample runs to
``max_new_tokens``). Tokens are counted by re-tokenizing the completions:
exact for well-formed text, an overcount for an untrained model's byte soup.
Run::

    cascadekit bench sampler --scale toy --threads 1
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Sequence

import torch
from transformers import AutoModelForCausalLM

from cascadekit.evaluation.sampler import sample_completions
from cascadekit.engine.generation import backend
from cascadekit.engine.models import build_model
from cascadekit.profiles import add_scale_arguments, profile_from_arguments
from cascadekit.engine.tokenizer import build_tokenizer, load_tokenizer
from cascadekit.world import generate_problems


def main(argv: Sequence[str] | None = None,
         parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser) -> None:
    """Run the benchmark; ``parser_class`` is the command line's own (one-line errors) under ``cascadekit bench``."""
    parser = parser_class(prog="cascadekit bench sampler", description=__doc__.splitlines()[0])
    add_scale_arguments(parser)
    parser.add_argument("--checkpoint", type=Path, help="a trained checkpoint folder (default: untrained model)")
    parser.add_argument("--op", type=int, default=0, help="op of the prompts (default: the last in-distribution op)")
    parser.add_argument("--prompts", type=int, default=8)
    profile = profile_from_arguments(args := parser.parse_args(argv))
    cfg = profile.evaluation
    if args.checkpoint:
        tokenizer = load_tokenizer(args.checkpoint)
        model = AutoModelForCausalLM.from_pretrained(args.checkpoint)
    else:
        tokenizer = build_tokenizer(profile)
        model = build_model(profile.model, tokenizer, profile.seed)
    op = args.op or profile.world.ops_in_distribution[1]
    problems = generate_problems(ops=[op], contexts=tuple(profile.world.contexts), n=args.prompts,
                                 seed=profile.seed, split="eval", style=profile.world.rendering)
    start = time.perf_counter()
    completions = sample_completions(model, tokenizer, [p.rl_prompt for p in problems], cfg, seed=profile.seed,
                                     backend=backend(profile), engine=profile.engine)
    seconds = time.perf_counter() - start
    texts = [t for samples in completions for t in samples]
    tokens = sum(len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"])
    print(f"{profile.name}: {len(texts)} samples ({args.prompts} prompts x {cfg.samples}) at op {op}, "
          f"batch {cfg.batch_size}, {torch.get_num_threads()} threads, {'trained' if args.checkpoint else 'untrained'} model")
    print(f"{tokens:,} generated tokens in {seconds:.1f} s: {tokens / seconds:,.0f} tokens/s, "
          f"{len(texts) / seconds:.1f} samples/s, {tokens / len(texts):.0f} tokens/sample")

