"""The kit's decode loop (:mod:`cascadekit.engine.decode`) against ``model.generate``: tokens per CPU second, paired.

Both decode the same prompts with the shipped Part II chat base on one thread, in two shapes:

- ``stage-table``: ``--batch`` distinct prompts of the toy stage table (``/think`` and
  ``/no_think``), greedy; the run also checks that the loop's tokens are ``generate``'s;
- ``grpo``: a GRPO rollout batch, ``rl.prompts_per_step`` prompts x ``rl.group_size``
  completions, sampled at ``rl.temperature``; the loop runs twice, each row prefilled
  on its own (``group=1`` on the repeated prompts, as ``generate`` gets them) and each
  prompt prefilled once for its group (``group=rl.group_size``);
- ``table`` (not in ``both``: it takes minutes): the whole stage table of the shipped
  SFT checkpoint (every suite record, tool turns included) by ``evaluate_checkpoint``
  under ``engine.evaluation_decoder`` ``generate`` and ``kit``: what a chapter's stage
  table costs, prefill and verifiers included (tokens: each sample's transcript,
  tool responses included, the same for both); the run checks that the samples agree.

Runs rotate their order repeat by repeat so that a shared machine's load drifts onto
all alike; the first repeat is warm-up. Tokens are the completions' own (up to and
including the stop token), so a decoder that keeps stepping finished rows gets no
credit for it; time is the process's CPU time. Each ratio is the median of the
per-repeat ratios to ``generate``. Run::

    cascadekit bench decode --scale toy --threads 1 --repeats 5
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable, Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from cascadekit.chat import render, stop_token_ids, turn_ids
from cascadekit.domains import prompt_of
from cascadekit.chapters import resolve
from cascadekit.chapters.cascade import sft_checkpoint
from cascadekit.engine.decode import GREEDY, Sampling, decode
from cascadekit.engine.runtime import load_model, load_tokenizer
from cascadekit.evaluation.stage_table import evaluate_checkpoint, suite_records
from cascadekit.profiles import Profile, add_scale_arguments, apply_overrides, parse_overrides, set_threads
from cascadekit.training.chat_base import chat_base

Decoder = Callable[[], list[list[int]]]


def suite_prompts(profile: Profile, tokenizer: PreTrainedTokenizerBase, n: int) -> list[list[int]]:
    """The first ``n`` stage-table prompts' token ids (cycled when the suite is smaller)."""
    records = suite_records(profile)
    records = (records * (n // len(records) + 1))[:n]
    texts = [render(*prompt_of(r), add_generation_prompt=True, prefill_empty_think=False) for r in records]
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def with_generate(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: list[list[int]],
                  max_new_tokens: int, sampling: Sampling) -> list[list[int]]:
    """``model.generate`` on the left-padded batch, each row cut after its first stop token."""
    stop, pad = stop_token_ids(tokenizer), tokenizer.pad_token_id
    width = max(map(len, prompts))
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    options = ({"do_sample": False} if sampling.greedy else
               {"do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k})
    with torch.inference_mode():
        generated = model.generate(input_ids=ids, attention_mask=mask, **options, max_new_tokens=max_new_tokens,
                                   eos_token_id=stop, pad_token_id=pad)
    return [row[:len(turn_ids(row, stop)) + 1] for row in generated[:, width:].tolist()]


def measure(decoders: dict[str, Decoder], repeats: int) -> tuple[dict[str, list[float]], dict[str, list[list[int]]]]:
    """Tokens per CPU second of each decoder per timed repeat (order rotated), and each one's last output."""
    speeds: dict[str, list[float]] = {name: [] for name in decoders}
    last: dict[str, list[list[int]]] = {}
    names = list(decoders)
    for repeat in range(repeats + 1):
        for name in names[repeat % len(names):] + names[:repeat % len(names)]:
            torch.manual_seed(repeat)
            started = time.process_time()
            last[name] = decoders[name]()
            seconds = time.process_time() - started
            if repeat:
                speeds[name].append(sum(map(len, last[name])) / seconds)
    return speeds, last


def whole_table(profile: Profile) -> dict[str, Decoder]:
    """The stage table of the shipped SFT under each evaluation decoder, as decoders of its samples' token ids."""
    checkpoint, records = sft_checkpoint(profile).checkpoint, suite_records(profile)
    tokenizer = load_tokenizer(checkpoint)

    def table(decoder: str) -> Decoder:
        settings = apply_overrides(profile, {"engine.evaluation_decoder": decoder})
        return lambda: [tokenizer(s["completion"], add_special_tokens=False)["input_ids"]
                        for s in evaluate_checkpoint(checkpoint, settings, "SFT", records)["samples"]]

    return {"generate": table("generate"), "loop": table("kit")}


def report(shape: str, speeds: dict[str, list[float]], same: str) -> None:
    base = speeds["generate"]
    for name, values in speeds.items():
        ratios = [v / b for v, b in zip(values, base)]
        print(f"| {shape} | {name} | {statistics.median(values):,.0f} | {statistics.median(ratios):.2f}x "
              f"| {', '.join(f'{r:.2f}' for r in ratios)} | {same if name != 'generate' else ''} |")


def main(argv: Sequence[str] | None = None,
         parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser) -> None:
    """Run the benchmark; ``parser_class`` is the command line's own (one-line errors) under ``cascadekit bench``."""
    parser = parser_class(prog="cascadekit bench decode", description=__doc__.splitlines()[0])
    add_scale_arguments(parser)
    parser.add_argument("--batch", type=int, default=64, help="stage-table prompts (distinct, greedy)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats (after one warm-up)")
    parser.add_argument("--shape", choices=["stage-table", "grpo", "both", "table"], default="both")
    args = parser.parse_args(argv)
    set_threads(args.threads)  # the shipped Part II base and SFT are the Part II world's (chapter 08's at this scale)
    profile = resolve("08", args.scale, parse_overrides(args.overrides)).profile
    if args.batch < 1 or args.max_new_tokens < 1 or args.repeats < 1:
        parser.error("--batch, --max-new-tokens and --repeats must be at least 1")
    folder = chat_base(profile).checkpoint
    model, tokenizer = load_model(folder), load_tokenizer(folder)
    stop, pad, n = stop_token_ids(tokenizer), tokenizer.pad_token_id, args.max_new_tokens
    rl = profile.rl
    print(f"{type(model).__name__}, {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, max {n} new "
          f"tokens, {args.repeats} timed repeats, {torch.get_num_threads()} threads")
    print("| shape | decoder | tok/CPU-s (median) | ratio to generate (median) | ratios | same tokens |")
    print("|---|---|---|---|---|---|")
    if args.shape in ("stage-table", "both"):
        prompts = suite_prompts(profile, tokenizer, args.batch)
        speeds, last = measure({
            "generate": lambda: with_generate(model, tokenizer, prompts, n, GREEDY),
            "loop": lambda: decode(model, prompts, n, stop, GREEDY, pad_id=pad)}, args.repeats)
        report(f"stage-table {args.batch}, greedy", speeds, str(last["loop"] == last["generate"]))
    if args.shape in ("grpo", "both"):
        unique = suite_prompts(profile, tokenizer, rl.prompts_per_step)
        repeated = [p for p in unique for _ in range(rl.group_size)]
        sampling = Sampling(temperature=rl.temperature)
        speeds, _ = measure({
            "generate": lambda: with_generate(model, tokenizer, repeated, n, sampling),
            "loop, each row prefilled": lambda: decode(model, repeated, n, stop, sampling, pad_id=pad),
            "loop, each prompt prefilled once": lambda: decode(model, unique, n, stop, sampling, pad_id=pad,
                                                               group=rl.group_size)}, args.repeats)
        report(f"grpo {rl.prompts_per_step}x{rl.group_size}, T={rl.temperature}", speeds, "n/a (sampled)")
    if args.shape == "table":
        speeds, last = measure(whole_table(profile), args.repeats)
        report(f"whole stage table, {len(suite_records(profile))} records", speeds,
               str(last["loop"] == last["generate"]))
