"""Is the kit's decode loop faster than ``generate``? One run prints tokens per CPU-second for both, paired.

``python -m cascadekit.decode_benchmark [--scale toy] [--batch 64] [--max-new-tokens 160] [--repeats 2] [--setting both]``

Both decoders get the same batch of prompts from the shipped Part II chat base
(the toy stage table's prompts, ``/think`` and ``/no_think``) on one thread, in
two settings: greedy (the stage table) and sampled at temperature 1.0 (a GRPO
rollout). Runs alternate (generate, loop, loop, generate, ...) so that a shared
machine's load drifts onto both alike; the first pair is warm-up and left out.
Tokens are the completions' own (up to and including the stop token), so a
decoder that keeps stepping finished rows gets no credit for it; time is the
process's CPU time (a loaded machine's waiting is not counted). The greedy run
also checks that both produce the same tokens.
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from cascadekit.base_model import chat_base
from cascadekit.chat import render, stop_token_ids, turn_ids
from cascadekit.decode import GREEDY, Sampling, decode
from cascadekit.domains import prompt_of
from cascadekit.evaluation.stage_table import suite_records
from cascadekit.profiles import load_profile
from cascadekit.runtime import load_model, load_tokenizer


#: greedy as the stage table decodes, sampled as a GRPO rollout (the toy profile's rl.temperature).
SETTINGS = {"greedy": GREEDY, "sampled": Sampling(temperature=1.0)}


def _prompts(scale: str, batch: int) -> list[str]:
    records = suite_records(load_profile(scale))
    records = (records * (batch // len(records) + 1))[:batch]
    return [render(*prompt_of(r), add_generation_prompt=True, prefill_empty_think=False) for r in records]


def with_generate(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: list[str],
                  max_new_tokens: int, sampling: Sampling) -> list[list[int]]:
    """``model.generate`` on the left-padded batch, each row cut after its first stop token."""
    tokenizer.padding_side = "left"
    stop = stop_token_ids(tokenizer)
    batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    options = ({"do_sample": False} if sampling.greedy else
               {"do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k})
    with torch.inference_mode():
        generated = model.generate(**batch, **options, max_new_tokens=max_new_tokens, eos_token_id=stop,
                                   pad_token_id=tokenizer.pad_token_id)
    return [row[:len(turn_ids(row, stop)) + 1] for row in generated[:, batch["input_ids"].shape[1]:].tolist()]


def with_loop(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: list[str],
              max_new_tokens: int, sampling: Sampling) -> list[list[int]]:
    """:func:`cascadekit.decode.decode` on the same prompts."""
    ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    return decode(model, ids, max_new_tokens, stop_token_ids(tokenizer), sampling, pad_id=tokenizer.pad_token_id)


def _timed(run: Callable[[], list[list[int]]]) -> tuple[float, list[list[int]]]:
    started = time.process_time()
    rows = run()
    return time.process_time() - started, rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="toy")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--setting", choices=[*SETTINGS, "both"], default="both")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    profile = load_profile(args.scale)
    folder = chat_base(profile).checkpoint
    model, tokenizer = load_model(folder), load_tokenizer(folder)
    prompts = _prompts(args.scale, args.batch)
    print(f"{type(model).__name__}, {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, "
          f"batch {args.batch}, max {args.max_new_tokens} new tokens, {args.repeats} timed pairs, 1 thread")
    print("| setting | generate tok/CPU-s | loop tok/CPU-s | ratio (median of pairs) | ratios | same tokens |")
    print("|---|---|---|---|---|---|")
    for name, sampling in SETTINGS.items():
        if args.setting not in (name, "both"):
            continue
        speeds: dict[str, list[float]] = {"generate": [], "loop": []}
        same = True
        for repeat in range(args.repeats + 1):
            order = ("generate", "loop") if repeat % 2 == 0 else ("loop", "generate")
            rows = {}
            for which in order:
                fn = with_generate if which == "generate" else with_loop
                torch.manual_seed(repeat)
                seconds, rows[which] = _timed(lambda: fn(model, tokenizer, prompts, args.max_new_tokens, sampling))
                if repeat:
                    speeds[which].append(sum(map(len, rows[which])) / seconds)
            same = same and rows["generate"] == rows["loop"]
        ratios = [loop / gen for loop, gen in zip(speeds["loop"], speeds["generate"])]
        print(f"| {name} | {statistics.median(speeds['generate']):.0f} | {statistics.median(speeds['loop']):.0f} "
              f"| {statistics.median(ratios):.2f}x | {', '.join(f'{r:.2f}' for r in ratios)} "
              f"| {same if sampling.greedy else 'n/a (sampled)'} |")


if __name__ == "__main__":
    main()
