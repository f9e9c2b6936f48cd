"""How fast is the kit's GRPO step, where does its time go, and how near the machine does it run?

``cascadekit bench grpo [--profile toy] [--steps 8] [--repeats 3] [--threads 1] [--rollouts kit]``
``cascadekit bench grpo --prompts 8,32,64 [--steps 3] [--repeats 3]``: the batch-shape mode, below.

Three measurements in one process, on the same model shape, data and settings:

1. **Overhead.** The kit's path (:func:`~cascadekit.training.grpo.train_grpo`,
   with its phase timers and curve extraction) against a bare ``GRPOTrainer``
   given the very same ``GRPOConfig``. Both start from the same seeded model,
   so they sample the same rollouts and do the same work (the script checks
   that their reward curves agree). With ``--rollouts kit`` both roll out by the
   kit's decode loop (TRL's ``rollout_func``, as ``engine.rollouts: kit`` does), so
   the overhead is measured on the rollout path the toy cascade uses. Runs alternate (bare, kit, kit, bare, ...)
   so that drift in a shared machine's load hits both alike. A step is timed
   from ``on_step_begin`` to ``on_step_end`` twice: in wall-clock seconds and
   in this process's CPU seconds. On a machine shared with other jobs the wall
   clock swings several-fold from step to step, so the overhead is judged on
   CPU time with one torch thread (``--threads 1``, the default), which counts
   the work done and not the waiting; medians leave out each run's first
   (warm-up) step. Target: the kit within 10%.
2. **Phases.** :class:`PhaseClock`, attached to both runs alike, splits each
   step's CPU seconds into ``generate`` (TRL's ``_generate``: tokenise, sample,
   decode), ``reward`` (``_calculate_rewards``), ``forward_backward`` (from the
   end of scoring to gradient clipping: the policy's forward and backward pass
   over the batch), ``optimizer`` (clipping and the optimizer step) and
   ``overhead`` (the rest: advantages, logging, TRL's and the kit's bookkeeping).
   The table gives each phase's median per step for the kit and for bare TRL,
   and their ratio.
3. **The machine's floor.** The same run measures one-thread fp32 matmul
   (``torch.mm`` of two 512 x 512 matrices, best of several) in GFLOP per CPU
   second, and reports what share of it generation and training reach: a
   generated token costs ``2 N`` FLOP and a trained one ``6 N`` (forward and
   backward), ``N`` the model's matmul weights (its parameters less the input
   embedding, plus the output head when tied), counting the useful tokens
   (the masks) and leaving attention out (small at toy length).

**Batch shape** (``--prompts``, issue 57): the kit's step alone (no bare run, rollouts by
the kit's loop) at each number of prompts per step, ``group_size`` rollouts each, twice:
with the kit's training forward (:mod:`cascadekit.training.trimmed`: each group's prompt
once, the completions in length-sorted chunks without the batch's padding) and with TRL's
own over the padded batch, all in alternating order (8, 32, 64, then back) so that load
drift hits every run alike. For each: the median CPU seconds of a step (each run's first
step left out), rollouts per CPU-second, the phases above, and the share of the run's
matmul peak that the whole step reaches (``2 N`` FLOP a generated token, ``6 N`` a trained
one, over the step's CPU seconds; a trained token is one of the masks, so a rollout's
prompt counts with each rollout: with the kit's forward, which runs a group's prompt once,
it is the share a step that did not share prompts would need). The baseline is the first
shape with the padded forward: every row's per-rollout cost is printed as a ratio against
it (above 1 when a rollout costs less), and the per-rollout cost of the last shape against
the first for each forward.

The model is the profile's shape over a one-character-per-token vocabulary and
the reward is a cheap partial-credit answer check, so the reward phase is a lower
bound on what the verifiers cost; generation length is capped by
``--max-completion-length`` to keep the run short.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import tempfile
import time
from functools import wraps
from typing import Any, Callable, Sequence

import pandas as pd
import torch
from datasets import Dataset
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM, TrainerCallback
from trl import GRPOTrainer

from cascadekit.profiles import Profile, apply_overrides, load_profile
from cascadekit.training.grpo import build_grpo_config, phase_shares, train_grpo
from cascadekit.training.rollouts import choose_rollouts
from cascadekit.training.trimmed import trim_padding

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


PHASES = ("generate", "reward", "forward_backward", "optimizer", "overhead")


class PhaseClock(TrainerCallback):
    """CPU seconds of each step's phases (see the module docstring), and its generated and trained tokens.

    It wraps the trainer's ``_generate``, ``_calculate_rewards``,
    ``_generate_and_score_completions`` and ``_clip_grad_norm`` (TRL 1.16 and
    transformers 5 private methods: :meth:`attach` fails loudly if they move)
    and stamps the Trainer's step and optimizer callbacks.
    """

    def __init__(self) -> None:
        self.rows: list[dict[str, float]] = []
        self._spent: dict[str, float] = {}
        self._marks: dict[str, float] = {}
        self._tokens = {"generated": 0, "trained": 0}

    def attach(self, trainer: GRPOTrainer) -> None:
        """Instrument ``trainer`` (call before ``train``)."""
        for name in ("_generate", "_calculate_rewards", "_generate_and_score_completions", "_clip_grad_norm"):
            if not callable(getattr(trainer, name, None)):
                raise RuntimeError(f"{type(trainer).__name__}.{name} moved: PhaseClock needs updating")
        trainer._generate = self._spending("generate", trainer._generate)
        trainer._calculate_rewards = self._spending("reward", trainer._calculate_rewards)
        score, clip = trainer._generate_and_score_completions, trainer._clip_grad_norm

        @wraps(score)
        def scored(*args: Any, **kwargs: Any) -> Any:
            batch = score(*args, **kwargs)
            self._marks["scored"] = time.process_time()
            generated = int(batch["completion_mask"].sum())
            self._tokens["generated"] += generated
            self._tokens["trained"] += generated + int(batch["prompt_mask"].sum())
            return batch

        @wraps(clip)
        def clipping(*args: Any, **kwargs: Any) -> Any:
            self._marks.setdefault("clip", time.process_time())
            return clip(*args, **kwargs)

        trainer._generate_and_score_completions, trainer._clip_grad_norm = scored, clipping
        trainer.add_callback(self)

    def _spending(self, phase: str, func: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(func)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.process_time()
            try:
                return func(*args, **kwargs)
            finally:
                self._spent[phase] = self._spent.get(phase, 0.0) + time.process_time() - start

        return timed

    def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001 - Trainer callback signature
        self._spent, self._tokens = {}, {"generated": 0, "trained": 0}
        self._marks = {"begin": time.process_time()}

    def on_pre_optimizer_step(self, args, state, control, **kwargs):  # noqa: ANN001
        self._marks.setdefault("clip", time.process_time())  # no clipping: the optimizer phase starts here

    def on_optimizer_step(self, args, state, control, **kwargs):  # noqa: ANN001
        self._marks["stepped"] = time.process_time()

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
        end, m = time.process_time(), self._marks
        scored = m.get("scored", m["begin"])
        clip = m.get("clip", scored)
        stepped = m.get("stepped", clip)
        row = {"step_s": end - m["begin"], "generate_s": self._spent.get("generate", 0.0),
               "reward_s": self._spent.get("reward", 0.0), "forward_backward_s": clip - scored,
               "optimizer_s": stepped - clip, **self._tokens}
        row["overhead_s"] = row["step_s"] - sum(row[f"{p}_s"] for p in PHASES[:-1])
        self.rows.append(row)


def matmul_flops_per_token(model: torch.nn.Module) -> int:
    """FLOP of one token's forward pass through the matmul weights: ``2 N`` (see the module docstring)."""
    embedding = model.get_input_embeddings().weight
    tied = model.get_output_embeddings().weight is embedding
    weights = sum(p.numel() for p in model.parameters()) - embedding.numel() + (embedding.numel() if tied else 0)
    return 2 * weights


def matmul_peak(size: int = 512, repeats: int = 20, rounds: int = 5) -> float:
    """One process's fp32 ``torch.mm`` speed at its torch threads, GFLOP per CPU second (best of ``rounds``)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    best = 0.0
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(repeats):
            torch.mm(a, b)
        best = max(best, 2 * size**3 * repeats / max(time.process_time() - start, 1e-9) / 1e9)
    return best


def _bare(profile: Profile, steps: int, workdir: str) -> tuple[StepClock, PhaseClock, list[float]]:
    tokenizer = _tokenizer()
    config = build_grpo_config(profile, workdir, max_steps=steps)
    clock, phases = StepClock(), PhaseClock()
    trainer = GRPOTrainer(
        model=_model(profile, len(tokenizer)), processing_class=tokenizer, reward_funcs=answer_prefix,
        args=config, train_dataset=_prompts(steps * profile.rl.prompts_per_step), callbacks=[clock],
        rollout_func=choose_rollouts(profile, profile.rl),  # the kit's rollout path too under --rollouts kit
    )
    if trainer.rollout_func is not None:  # the kit's CPU path trains without the batch's padding, as train_grpo does
        trim_padding(trainer)
    phases.attach(trainer)
    trainer.train()
    return clock, phases, [e["reward"] for e in trainer.state.log_history if "reward" in e]


def _kit(profile: Profile, steps: int, workdir: str, padded: bool = False,
         ) -> tuple[StepClock, PhaseClock, list[float], pd.DataFrame]:
    """The kit's run; ``padded``: with TRL's own training forward over the padded batch (the batch-shape baseline)."""
    tokenizer = _tokenizer()
    clock, phases = StepClock(), PhaseClock()
    untrim = [lambda trainer: vars(trainer).pop("_get_per_token_logps_and_entropies", None)] if padded else []
    result = train_grpo(
        _model(profile, len(tokenizer)), tokenizer, _prompts(steps * profile.rl.prompts_per_step), answer_prefix,
        profile, workdir, max_steps=steps, callbacks=[clock], hooks=[*untrim, phases.attach],
    )
    return clock, phases, list(result.curves["reward"]), result.timings


def run(profile: Profile, steps: int, repeats: int) -> dict[str, Any]:
    """Alternate bare and kit runs; return median step and phase times, reward agreement, shares and peak use."""
    clocks: dict[str, list[StepClock]] = {"bare": [], "kit": []}
    phases: dict[str, list[dict[str, float]]] = {"bare": [], "kit": []}
    timings, peaks = [], [matmul_peak()]
    same_rewards = True
    with tempfile.TemporaryDirectory() as workdir:
        for rep in range(repeats):
            rewards = {}
            for which in ("bare", "kit") if rep % 2 == 0 else ("kit", "bare"):
                with contextlib.redirect_stdout(io.StringIO()):  # the Trainer prints its logs
                    if which == "bare":
                        clock, phase, rewards["bare"] = _bare(profile, steps, workdir)
                    else:
                        clock, phase, rewards["kit"], table = _kit(profile, steps, workdir)
                        timings.append(table.iloc[1:])
                clocks[which].append(clock)
                phases[which] += phase.rows[1:]
            same_rewards &= rewards["bare"] == rewards["kit"]
            peaks.append(matmul_peak())
    flops = matmul_flops_per_token(_model(profile, len(_tokenizer())))
    out: dict[str, Any] = {
        "same_rewards": same_rewards,
        "shares": phase_shares(pd.concat(timings), skip=0),
        "steps_measured": sum(len(c.wall) - 1 for c in clocks["kit"]),
        "peak_gflops": max(peaks), "flops_per_token": flops,
    }
    for which, runs in clocks.items():
        for kind in ("wall", "cpu"):
            out[f"{which}_{kind}_s"] = statistics.median(s for c in runs for s in getattr(c, kind)[1:])
        rows = pd.DataFrame(phases[which])
        out[f"{which}_phases"] = {p: float(rows[f"{p}_s"].median()) for p in PHASES}
        peak = out["peak_gflops"] * 1e9
        out[f"{which}_generate_peak"] = float(rows["generated"].sum() * flops / (rows["generate_s"].sum() * peak))
        training_s = rows["forward_backward_s"].sum() + rows["optimizer_s"].sum()
        out[f"{which}_train_peak"] = float(rows["trained"].sum() * 3 * flops / (training_s * peak))
    return out


#: The batch-shape mode's two training forwards: TRL's over the padded batch (the baseline) and the kit's trimmed one.
FORWARDS = ("padded", "trimmed")


def scaling(profile: Profile, prompts: Sequence[int], steps: int,
            repeats: int) -> dict[tuple[int, str], dict[str, float]]:
    """The kit's step at each number of ``prompts`` per step with each of :data:`FORWARDS`: medians, peak shares."""
    rows: dict[tuple[int, str], list[dict[str, float]]] = {(n, f): [] for n in prompts for f in FORWARDS}
    peaks = [matmul_peak()]
    with tempfile.TemporaryDirectory() as workdir:
        for rep in range(repeats):
            for n, forward in list(rows) if rep % 2 == 0 else list(rows)[::-1]:
                shaped = apply_overrides(profile, {"rl.prompts_per_step": n})
                with contextlib.redirect_stdout(io.StringIO()):  # the Trainer prints its logs
                    _, phases, _, _ = _kit(shaped, steps, workdir, padded=forward == "padded")
                rows[n, forward] += phases.rows[1:]
            peaks.append(matmul_peak())
    flops, peak = matmul_flops_per_token(_model(profile, len(_tokenizer()))), max(peaks) * 1e9
    out = {}
    for (n, forward), measured in rows.items():
        table = pd.DataFrame(measured)
        step = float(table["step_s"].median())
        work = (table["generated"].sum() + 3 * table["trained"].sum()) * flops
        out[n, forward] = {"step_s": step, "rollout_s": step / (n * profile.rl.group_size),
                           "step_peak": float(work / (table["step_s"].sum() * peak)), "peak_gflops": peak / 1e9,
                           **{f"{p}_s": float(table[f"{p}_s"].median()) for p in PHASES}}
    return out


def _print_scaling(out: dict[tuple[int, str], dict[str, float]], group: int) -> None:
    base = next(iter(out))
    first, last = base[0], list(out)[-1][0]
    print(f"one-thread fp32 matmul peak in this run: {out[base]['peak_gflops']:.1f} GFLOP/s")
    print("prompts  rollouts  training forward  step CPU s  rollouts/CPU-s  share of peak  "
          f"per-rollout vs {first} padded   " + "  ".join(f"{p:>9}" for p in PHASES))
    for (n, forward), row in out.items():
        print(f"{n:7d}  {n * group:8d}  {forward:>16}  {row['step_s']:10.3f}  {1 / row['rollout_s']:14.1f}  "
              f"{row['step_peak']:13.1%}  {out[base]['rollout_s'] / row['rollout_s']:23.2f}x   "
              + "  ".join(f"{row[f'{p}_s']:9.3f}" for p in PHASES))
    for forward in FORWARDS:
        print(f"per-rollout cost, {first} vs {last} prompts a step, {forward} forward: "
              f"{out[first, forward]['rollout_s'] / out[last, forward]['rollout_s']:.2f}x (target: >= 1.5x)")
    print(f"{last} prompts a step, trimmed vs {first} padded (today's step against the old one), per rollout: "
          f"{out[first, 'padded']['rollout_s'] / out[last, 'trimmed']['rollout_s']:.2f}x")


def main(argv: Sequence[str] | None = None,
         parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser) -> None:
    """Run the benchmark; ``parser_class`` is the command line's own (one-line errors) under ``cascadekit bench``."""
    parser = parser_class(prog="cascadekit bench grpo", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="toy")
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps per run (the first is warm-up)")
    parser.add_argument("--repeats", type=int, default=3, help="bare/kit run pairs")
    parser.add_argument("--max-completion-length", type=int, default=48)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: leave torch's default)")
    parser.add_argument("--rollouts", choices=("generate", "kit"), default="generate",
                        help="engine.rollouts of both runs: TRL's generate, or the kit's decode loop "
                             "(cascadekit.training.rollouts) given to the bare GRPOTrainer as well")
    parser.add_argument("--prompts", default="",
                        help="comma-separated prompts per step (e.g. 8,32,64): the batch-shape mode, the first the "
                             "baseline, rollouts by the kit's loop")
    args = parser.parse_args(argv)
    try:
        prompts = [int(n) for n in args.prompts.split(",")] if args.prompts else []
    except ValueError:
        parser.error(f"--prompts is a comma-separated list of whole numbers, got {args.prompts!r}")
    if any(n < 1 for n in prompts):
        parser.error("--prompts must all be at least 1")
    if args.steps < 2 or args.repeats < 1 or args.max_completion_length < 1 or args.threads < 0:
        parser.error("--steps must be at least 2, --repeats and --max-completion-length at least 1, --threads >= 0")
    if args.threads:
        torch.set_num_threads(args.threads)
    profile = load_profile(args.profile, {"rl.max_completion_length": args.max_completion_length,
                                          "engine.rollouts": "kit" if prompts else args.rollouts})
    rl = profile.rl
    if prompts:
        print(f"profile {profile.name}: {profile.model.layers} layers x {profile.model.hidden} hidden, "
              f"{rl.group_size} rollouts a prompt, up to {rl.max_completion_length} tokens each, "
              f"{torch.get_num_threads()} threads, the kit's step and decode loop; CPU seconds, medians of "
              f"{args.repeats} x {args.steps - 1} steps")
        _print_scaling(scaling(profile, prompts, args.steps, args.repeats), rl.group_size)
        return
    print(f"profile {profile.name}: {profile.model.layers} layers x {profile.model.hidden} hidden, "
          f"{rl.prompts_per_step} prompts x {rl.group_size} rollouts per step, up to {rl.max_completion_length} "
          f"tokens each, {torch.get_num_threads()} threads, rollouts by {args.rollouts}")
    out = run(profile, args.steps, args.repeats)
    print(f"step time, median of {out['steps_measured']} steps each:   CPU s     wall s")
    print(f"  bare GRPOTrainer                     {out['bare_cpu_s']:7.3f}   {out['bare_wall_s']:7.3f}")
    print(f"  kit train_grpo                       {out['kit_cpu_s']:7.3f}   {out['kit_wall_s']:7.3f}")
    cpu, wall = (out[f"kit_{k}_s"] / out[f"bare_{k}_s"] - 1 for k in ("cpu", "wall"))
    print(f"  kit vs bare                          {cpu:+7.1%}   {wall:+7.1%}   (target: within 10%)")
    print(f"  same rollouts and rewards in both: {out['same_rewards']}")
    print("CPU seconds per step by phase (medians):   bare      kit   kit/bare")
    for phase in PHASES:
        bare, kit = out["bare_phases"][phase], out["kit_phases"][phase]
        ratio = f"{kit / bare:8.2f}" if bare > 0 else "       -"
        print(f"  {phase:<18}                    {bare:8.3f} {kit:8.3f} {ratio}")
    print(f"one-thread fp32 matmul peak in this run: {out['peak_gflops']:.1f} GFLOP/s; "
          f"{out['flops_per_token'] / 1e6:.2f} MFLOP per token forward")
    print("share of that peak reached:                bare      kit")
    for part in ("generate", "train"):
        print(f"  {part:<18}                    {out[f'bare_{part}_peak']:8.2%} {out[f'kit_{part}_peak']:8.2%}")
    print("share of the kit's step time (wall clock, PhaseTimer):")
    for phase, share in out["shares"].items():
        print(f"  {phase:<9} {share:6.1%}")

