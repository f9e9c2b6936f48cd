"""How fast is the kit's GRPO step, and where does its time go?

``python -m cascadekit.training.grpo_benchmark [--profile toy] [--steps 8] [--repeats 3] [--threads 1]``

Two measurements in one process, on the same model shape, data and settings:

1. **Overhead.** The kit's path (:func:`~cascadekit.training.grpo.train_grpo`,
   with its phase timers and curve extraction) against a bare ``GRPOTrainer``
   given the very same ``GRPOConfig``. Both start from the same seeded model,
   so they sample the same rollouts and do the same work (the script checks
   that their reward curves agree). Runs alternate (bare, kit, kit, bare, ...)
   so that drift in a shared machine's load hits both alike. A step is timed
   from ``on_step_begin`` to ``on_step_end`` twice: in wall-clock seconds and
   in this process's CPU seconds. On a machine shared with other jobs the wall
   clock swings several-fold from step to step, so the overhead is judged on
   CPU time with one torch thread (``--threads 1``, the default), which counts
   the work done and not the waiting; both medians are printed, leaving out
   each run's first (warm-up) step. Target: the kit within 10%.
2. **Shares.** The kit's :class:`~cascadekit.training.grpo.PhaseTimer` splits
   each step into generating, scoring, updating and the rest (see its
   docstring for exactly what each covers).

The model is the profile's shape over a one-character-per-token vocabulary and
the reward is a cheap partial-credit answer check, so scoring is a lower bound on what
the process verifier costs; generation length is capped by
``--max-completion-length`` to keep the run short.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import tempfile
import time
from typing import Any

import pandas as pd
import torch
from datasets import Dataset
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM, TrainerCallback
from trl import GRPOTrainer

from cascadekit.profiles import Profile, load_profile
from cascadekit.training.grpo import build_grpo_config, phase_shares, train_grpo

_CHARS = list("0123456789+-=*/ ")


def _tokenizer() -> PreTrainedTokenizerFast:
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{c: i + 3 for i, c in enumerate(_CHARS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>", unk_token="<unk>")


def _model(profile: Profile, vocab_size: int) -> Qwen3ForCausalLM:
    m = profile.model
    torch.manual_seed(profile.seed)
    return Qwen3ForCausalLM(
        Qwen3Config(
            vocab_size=vocab_size, hidden_size=m.hidden, intermediate_size=m.intermediate,
            num_hidden_layers=m.layers, num_attention_heads=m.heads, num_key_value_heads=m.kv_heads,
            head_dim=m.hidden // m.heads, max_position_embeddings=m.max_positions,
            tie_word_embeddings=m.tie_embeddings, eos_token_id=1, pad_token_id=0, bos_token_id=None,
        )
    )


def _prompts(n: int) -> Dataset:
    pairs = [(i % 97, (7 * i) % 89) for i in range(n)]
    return Dataset.from_dict({"prompt": [f"{a}+{b}=" for a, b in pairs], "gold": [str(a + b) for a, b in pairs]})


def answer_prefix(completions: list[str], gold: list[str], **kwargs: Any) -> list[float]:
    """Share of the right sum's digits that the completion gets right from its start (partial credit)."""
    def score(text: str, answer: str) -> float:
        matched = 0
        for got, want in zip(text.strip(), answer):
            if got != want:
                break
            matched += 1
        return matched / len(answer)

    return [score(c, g) for c, g in zip(completions, gold)]


class StepClock(TrainerCallback):
    """Wall-clock and CPU seconds of each optimizer step (attached to both runs alike)."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self._start = (0.0, 0.0)

    def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001 - Trainer callback signature
        self._start = (time.perf_counter(), time.process_time())

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
        self.wall.append(time.perf_counter() - self._start[0])
        self.cpu.append(time.process_time() - self._start[1])


def _bare(profile: Profile, steps: int, workdir: str) -> tuple[StepClock, list[float]]:
    tokenizer = _tokenizer()
    config = build_grpo_config(profile, workdir, max_steps=steps)
    clock = StepClock()
    trainer = GRPOTrainer(
        model=_model(profile, len(tokenizer)), processing_class=tokenizer, reward_funcs=answer_prefix,
        args=config, train_dataset=_prompts(steps * profile.rl.prompts_per_step), callbacks=[clock],
    )
    trainer.train()
    return clock, [e["reward"] for e in trainer.state.log_history if "reward" in e]


def _kit(profile: Profile, steps: int, workdir: str) -> tuple[StepClock, list[float], pd.DataFrame]:
    tokenizer = _tokenizer()
    clock = StepClock()
    result = train_grpo(
        _model(profile, len(tokenizer)), tokenizer, _prompts(steps * profile.rl.prompts_per_step), answer_prefix,
        profile, workdir, max_steps=steps, callbacks=[clock],
    )
    return clock, list(result.curves["reward"]), result.timings


def run(profile: Profile, steps: int, repeats: int) -> dict[str, Any]:
    """Alternate bare and kit runs; return median step times, reward agreement and phase shares."""
    clocks: dict[str, list[StepClock]] = {"bare": [], "kit": []}
    timings = []
    same_rewards = True
    with tempfile.TemporaryDirectory() as workdir:
        for rep in range(repeats):
            rewards = {}
            for which in ("bare", "kit") if rep % 2 == 0 else ("kit", "bare"):
                with contextlib.redirect_stdout(io.StringIO()):  # the Trainer prints its logs
                    if which == "bare":
                        clock, rewards["bare"] = _bare(profile, steps, workdir)
                    else:
                        clock, rewards["kit"], table = _kit(profile, steps, workdir)
                        timings.append(table.iloc[1:])
                clocks[which].append(clock)
            same_rewards &= rewards["bare"] == rewards["kit"]
    out: dict[str, Any] = {
        "same_rewards": same_rewards,
        "shares": phase_shares(pd.concat(timings), skip=0),
        "steps_measured": sum(len(c.wall) - 1 for c in clocks["kit"]),
    }
    for which, runs in clocks.items():
        for kind in ("wall", "cpu"):
            out[f"{which}_{kind}_s"] = statistics.median(s for c in runs for s in getattr(c, kind)[1:])
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="toy")
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps per run (the first is warm-up)")
    parser.add_argument("--repeats", type=int, default=3, help="bare/kit run pairs")
    parser.add_argument("--max-completion-length", type=int, default=48)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: leave torch's default)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    profile = load_profile(args.profile, {"rl.max_completion_length": args.max_completion_length})
    rl = profile.rl
    print(f"profile {profile.name}: {profile.model.layers} layers x {profile.model.hidden} hidden, "
          f"{rl.prompts_per_step} prompts x {rl.group_size} rollouts per step, up to {rl.max_completion_length} "
          f"tokens each, {torch.get_num_threads()} threads")
    out = run(profile, args.steps, args.repeats)
    print(f"step time, median of {out['steps_measured']} steps each:   CPU s     wall s")
    print(f"  bare GRPOTrainer                     {out['bare_cpu_s']:7.3f}   {out['bare_wall_s']:7.3f}")
    print(f"  kit train_grpo                       {out['kit_cpu_s']:7.3f}   {out['kit_wall_s']:7.3f}")
    cpu, wall = (out[f"kit_{k}_s"] / out[f"bare_{k}_s"] - 1 for k in ("cpu", "wall"))
    print(f"  kit vs bare                          {cpu:+7.1%}   {wall:+7.1%}   (target: within 10%)")
    print(f"  same rollouts and rewards in both: {out['same_rewards']}")
    print("share of the kit's step time:")
    for phase, share in out["shares"].items():
        print(f"  {phase:<9} {share:6.1%}")


if __name__ == "__main__":
    main()
