"""Helpers shared by the finding experiments: RL prompt sets, the RL step, per-op evaluation.

Every finding trains with GRPO on DAG problems and reports process-verified
pass@1 and pass@n per op (and per context or range) before and after. These
are the few steps they all share; each finding's module adds its own recipe.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from cascadekit.evaluation.report import evaluate, passk_table
from cascadekit.profiles import Profile
from cascadekit.rewards import mixed_reward
from cascadekit.world import MixtureComponent, Mixture, Problem, generate_problems, sample_mixture

#: The reward of the kit's finding experiments: 0.2 outcome + 0.8 process.
#: Where the kit departs from the paper: its sections 3-5 train with the outcome
#: reward alone. At toy scale a right answer is often a lucky guess (answers are
#: small numbers, chapter 02) and says nothing about the names in the steps, so
#: an outcome reward would not reward, for instance, writing context B's
#: quantities correctly. The paper's best process-aware reward (finding 4) keeps
#: the outcome term and makes the reward track what the judge checks.
RL_REWARD: Callable[..., list[float]] = mixed_reward(0.2)


def rl_dataset(problems: Sequence[Problem]) -> Dataset:
    """A GRPO prompt set: ``prompt`` (the problem up to ``<solution>``) and ``gold`` (the problem as JSON).

    ``gold`` is a JSON string because a problem's seed can exceed Arrow's int64.
    """
    return Dataset.from_dict({
        "prompt": [p.rl_prompt for p in problems],
        "gold": [json.dumps(p.to_dict()) for p in problems],
        "op": [p.op for p in problems],
        "context": [p.context for p in problems],
    })


def rl_problems(profile: Profile, components: Sequence[tuple[str, tuple[int, int], float]], n: int,
                seed_offset: int = 0) -> list[Problem]:
    """``n`` distinct problems of the ``rl`` split from ``(context, (lo, hi), share)`` components."""
    mixture = Mixture(tuple(MixtureComponent(c, ops, share) for c, ops, share in components))
    return sample_mixture(mixture, n, seed=profile.seed + seed_offset, split="rl", style=profile.world.rendering)


def eval_problems(profile: Profile, ops: Sequence[int], contexts: Sequence[str]) -> list[Problem]:
    """``evaluation.problems_per_op`` held-out ``eval`` problems per op, cycling through ``contexts``.

    Call it once per context to get that many problems per (op, context).
    """
    return [
        p
        for op in ops
        for p in generate_problems(ops=[op], contexts=tuple(contexts), n=profile.evaluation.problems_per_op,
                                   seed=profile.seed, split="eval", style=profile.world.rendering)
    ]


def passk_rows(records: Sequence[dict], n: int, by: Sequence[str] = ("context", "op")) -> list[dict]:
    """One row per group of ``by`` keys: process-verified pass@1 and pass@n (and answer-only pass@1).

    ``by`` may name several record keys (``("context", "op")``); rows are ordered by them.
    """
    keyed = [{**r, "_group": tuple(r[k] for k in by)} for r in records]
    rows: dict[tuple, dict[str, Any]] = {}
    for metric, label in (("correct", "pass"), ("answer_correct", "answer_pass")):
        for row in passk_table(keyed, (1, n), metric, by="_group"):
            entry = rows.setdefault(row["_group"], {**dict(zip(by, row["_group"])), "problems": row["problems"]})
            if label == "pass" or row["k"] == 1:
                entry[f"{label}@{row['k']}"] = row["pass@k"]
    return [rows[key] for key in sorted(rows)]


def evaluate_rows(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, problems: Sequence[Problem],
                  profile: Profile, by: Sequence[str] = ("context", "op")) -> tuple[list[dict], list[dict]]:
    """Sample and judge ``problems``; return (per-sample records, :func:`passk_rows` grouped ``by``)."""
    records = evaluate(model, tokenizer, problems, profile)
    return records, passk_rows(records, profile.evaluation.samples, by)


def load_model(checkpoint: str | Path) -> PreTrainedModel:
    """A checkpoint's model in float32 on the CPU (training continues from it)."""
    return AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32)


def run_rl(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, problems: Sequence[Problem],
           profile: Profile, output_dir: str | Path, **config_overrides: Any):
    """GRPO on ``problems`` with :data:`RL_REWARD`, one pass: ``len(problems) / prompts_per_step`` steps.

    Returns :class:`cascadekit.training.grpo.GRPOResult` (its ``curves`` hold reward per step).
    """
    from cascadekit.training.grpo import train_grpo

    steps = max(1, len(problems) // profile.rl.prompts_per_step)
    return train_grpo(model, tokenizer, rl_dataset(problems), RL_REWARD, profile, str(output_dir),
                      max_steps=steps, **config_overrides)


def add_out_argument(parser: argparse.ArgumentParser) -> None:
    """``--out``: the results folder (default: ``data/results`` at toy scale, ``runs/results-<scale>`` otherwise)."""
    parser.add_argument("--out", type=Path, default=None,
                        help="results folder (default: data/results at toy scale, runs/results-<scale> otherwise)")


def run_from_command_line(argv: Sequence[str] | None, module: str, description: str,
                          make_profile: Callable[[Profile, dict[str, str]], Profile],
                          run: Callable[[Profile, Path], dict[str, Any]],
                          write: Callable[[dict[str, Any], str, Path], None],
                          summary: Callable[[dict[str, Any]], dict[str, Any]], chapter: str) -> None:
    """The shared command line of an RL experiment: parse, run, write the results, print a summary.

    ``make_profile`` applies the chapter's own settings and the caller's overrides;
    the recorded command is ``python -m <module> <argv>``, so the results say how to regenerate them.
    Results go to ``--out``, by default the committed ``data/results`` at toy scale only.
    """
    import sys

    from cascadekit.profiles import add_scale_arguments, load_profile, parse_overrides, set_threads
    from cascadekit.results import default_root

    parser = argparse.ArgumentParser(description=description)
    add_scale_arguments(parser)
    parser.add_argument("--seed", type=int, default=0)
    add_out_argument(parser)
    args = parser.parse_args(argv)
    set_threads(args.threads)
    overrides = parse_overrides(args.overrides)
    profile = make_profile(load_profile(args.scale, {"seed": args.seed}), overrides)
    print(profile.summary(), file=sys.stderr, flush=True)
    result = run(profile, Path("runs") / chapter)
    result["settings"]["overrides"] = overrides  # with the chapter's own settings, what the slow test reruns
    command = " ".join([f"python -m {module}", *(argv if argv is not None else sys.argv[1:])])
    write(result, command, args.out or default_root(args.scale))
    print(json.dumps(summary(result), indent=1))
