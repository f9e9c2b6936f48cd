"""How much verification do streamed rewards hide behind generation? One run prints sync and async steps.

``cascadekit bench async-rewards [--scale toy] [--steps 6] [--repeats 2] [--delay-ms 0] [--workers N]``

Two GRPO runs per repeat from the same checkpoint, data and seed (the cascade's
Code RL start and chapter 12's code prompts, ``/think``), with the same pool of
``code_rl.workers`` verification threads and the pass-all-tests reward:

* **sync**: the pool starts when TRL asks for the rewards, and the step waits for
  all of them (``StreamingRewards(stream=False)``: parallel, but blocking);
* **async**: each rollout is verified as soon as it ends while the batch still
  generates (:class:`~cascadekit.training.async_rewards.StreamingRewards`).

Both sample the same rollouts (the script checks that their rewards agree). Per
step it reports the median step time, generation time and the time the step
waited for rewards (TRL's ``_calculate_rewards``, timed by
:class:`~cascadekit.training.grpo.PhaseTimer`). The verification time is the sync
run's wait; the share hidden is ``1 - async wait / sync wait``. ``--delay-ms`` adds
a sleep to every verification (a slower verifier: more tests, a remote sandbox)
so that verification can be made to take as long as generation; the script
prints the ratio. ``--workers`` sets the pool's size (default ``code_rl.workers``). Runs alternate (sync, async, async, sync, ...) so that a shared
machine's load drifts onto both alike; the first step of each run is warm-up and
left out.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import tempfile
import time
from functools import wraps
from pathlib import Path
from typing import Any, Sequence

import torch

from cascadekit.chapters import resolve
from cascadekit.chapters.cascade import code_rl_records, unified_if_rl
from cascadekit.chat import END_OF_TURN, stop_token_ids
from cascadekit.training.pipeline import chat_rl_dataset
from cascadekit.profiles import Profile
from cascadekit.rewards import RewardFn, verifier_reward
from cascadekit.engine.runtime import choose_device, load_model, load_tokenizer
from cascadekit.training.async_rewards import StreamingRewards
from cascadekit.training.grpo import train_grpo


def delayed(reward: RewardFn, seconds: float) -> RewardFn:
    """``reward`` that also sleeps ``seconds`` per completion (a slower verifier, same scores)."""
    @wraps(reward)
    def slow(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        time.sleep(seconds * len(completions))
        return reward(prompts, completions, **kwargs)

    return slow


def one_run(checkpoint: Any, profile: Profile, steps: int, stream: bool, delay_s: float,
            workdir: str) -> dict[str, Any]:
    """``steps`` GRPO steps; the median phase times (first step left out), the rewards and the streaming stats."""
    tokenizer = load_tokenizer(checkpoint)
    model = load_model(checkpoint, choose_device(profile))
    model.generation_config.eos_token_id = stop_token_ids(tokenizer)
    dataset = chat_rl_dataset(code_rl_records(profile)[: steps * profile.rl.prompts_per_step])
    rewards = StreamingRewards(delayed(verifier_reward, delay_s), tokenizer, profile.code_rl.workers, stream=stream,
                               end=END_OF_TURN)
    with contextlib.redirect_stdout(io.StringIO()):
        result = train_grpo(model, tokenizer, dataset, rewards, profile, workdir, max_steps=steps,
                            hooks=[rewards.attach], shuffle_dataset=False, disable_tqdm=True)
    table = result.timings.iloc[1:]
    return {**{k: statistics.median(table[f"{k}_s"]) for k in ("step", "generate", "score")},
            "rewards": list(result.curves["reward"]), "stats": rewards.summary()}


def run(profile: Profile, steps: int, repeats: int, delay_s: float) -> dict[str, Any]:
    """Alternate sync and async runs; the medians over runs of each kind, and whether the rewards agreed."""
    checkpoint = unified_if_rl(profile, Path(tempfile.gettempdir()) / "cascadekit-async-benchmark").checkpoint
    runs: dict[str, list[dict[str, Any]]] = {"sync": [], "async": []}
    with tempfile.TemporaryDirectory() as workdir:
        for rep in range(repeats):
            for kind in ("sync", "async") if rep % 2 == 0 else ("async", "sync"):
                runs[kind].append(one_run(checkpoint, profile, steps, kind == "async", delay_s, workdir))
    out: dict[str, Any] = {"same_rewards": all(a["rewards"] == s["rewards"] for a, s in zip(runs["async"], runs["sync"])),
                           "early": sum(r["stats"]["sent_while_generating"] for r in runs["async"]),
                           "completions": sum(r["stats"]["completions"] for r in runs["async"])}
    for kind, done in runs.items():
        for key in ("step", "generate", "score"):
            out[f"{kind}_{key}_s"] = statistics.median(r[key] for r in done)
    out["hidden"] = 1 - out["async_score_s"] / out["sync_score_s"] if out["sync_score_s"] > 0 else 0.0
    return out


def main(argv: Sequence[str] | None = None,
         parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser) -> None:
    """Run the benchmark; ``parser_class`` is the command line's own (one-line errors) under ``cascadekit bench``."""
    parser = parser_class(prog="cascadekit bench async-rewards", description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="toy")
    parser.add_argument("--steps", type=int, default=6, help="GRPO steps per run (the first is warm-up)")
    parser.add_argument("--repeats", type=int, default=2, help="sync/async run pairs")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="extra verification time per completion")
    parser.add_argument("--workers", type=int, default=0, help="verification workers (0: the profile's code_rl.workers)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: leave torch's default)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    profile = resolve("12", args.scale, {"code_rl.workers": args.workers} if args.workers else None).profile
    rl = profile.rl
    print(f"scale {args.scale}: {rl.prompts_per_step} code prompts x {rl.group_size} rollouts per step, up to "
          f"{rl.max_completion_length} tokens, {profile.code_rl.workers} verification workers, "
          f"{torch.get_num_threads()} torch thread(s), +{args.delay_ms:g} ms per verification")
    out = run(profile, args.steps, args.repeats, args.delay_ms / 1000)
    print(f"median per step over {args.repeats} run(s) of {args.steps - 1} steps each:   step s   generate s   "
          f"waiting for rewards s")
    for kind in ("sync", "async"):
        print(f"  {kind:<5} {out[f'{kind}_step_s']:9.2f} {out[f'{kind}_generate_s']:12.2f} "
              f"{out[f'{kind}_score_s']:12.2f}")
    print(f"verification time (sync wait) / generation time: {out['sync_score_s'] / out['sync_generate_s']:.2f}")
    print(f"share of verification hidden: {out['hidden']:.1%} (target 64%, the paper's 1172.4 s -> 416.2 s)")
    print(f"step time: sync {out['sync_step_s']:.2f} s -> async {out['async_step_s']:.2f} s; "
          f"{out['early']} of {out['completions']} rollouts verified while the batch was still generating")
    print(f"same rollouts and rewards in both: {out['same_rewards']}")

