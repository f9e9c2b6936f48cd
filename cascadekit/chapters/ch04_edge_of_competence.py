"""Finding 1: RL helps beyond the base model only when its data sits at the edge of competence.

The paper pretrains on op 2-10, then runs GRPO with the same number of samples
on three data ranges, all from the same base:

- **too easy** (in-distribution ops): the base already solves them, most groups
  score all-correct, the advantage is zero, and what little signal remains
  sharpens pass@1 without adding new solutions (pass@128 stays put);
- **edge** (just beyond pretraining, solvable at pass@k but failing at pass@1):
  groups are mixed, every step carries signal, and pass@128 rises on the edge
  *and* on the harder range beyond it;
- **too hard**: every rollout fails, every group has zero reward variance
  (``frac_reward_zero_std`` = 1), and nothing is learned.

The pieces every Part I RL chapter shares are in :mod:`cascadekit.chapters.interplay`;
this module is the experiment itself (:func:`run`). Regenerate the committed toy
results with::

    cascadekit experiment 04 --scale toy --threads 1

Where the kit departs from the paper:

- the reward is the process verifier's verdict (``strict_reward``: right answer
  *and* every step right), not the final answer alone. On this small world
  answers are small numbers that a guesser often hits (chapter 02's chance
  baseline), so an outcome reward would pay guesses even on "too hard" data and
  blur the very signal this chapter is about. Chapter 07 compares the rewards.
- the toy profile maps the paper's op ranges 2-10 / 11-14 / 15-20 onto smaller
  ones, and runs far fewer RL samples and evaluation samples (``rl.samples``,
  ``evaluation.samples``), with a larger learning rate than the paper's 1e-6.
- at the CPU scales the three arms' op ranges are measured on the base
  (``ranges`` in ``cascadekit/chapters/chapters.yaml``, :mod:`cascadekit.bands`):
  the toy model's edge lies inside its pretraining range, not beyond it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from cascadekit.chapters import ChapterConfig
from cascadekit.claims import FLAT_TOLERANCE
from cascadekit.exercises import Exercise
from cascadekit.exercises.answers import Case, Function, Number
from cascadekit.exercises.committed import committed_metrics
from cascadekit.chapters.interplay import (base_bands, base_caveat, change_row, curve_summary, deltas, edge_caveat,
                                           pass_rows, plot_curves, plot_passk, rl_arm, run_sizes, settings,
                                           signal_row)
from cascadekit.training.grpo import grpo_advantages
from cascadekit.training.pipeline import pretrained
from cascadekit.rewards import strict_reward

#: RL data ranges, keyed by the chapter's names for them.
RL_RANGES = {"too_easy": "in_distribution", "edge": "edge", "too_hard": "hard"}


def run(config: ChapterConfig, work_dir: str | Path) -> dict[str, Any]:
    """Finding 1: evaluate the base, then RL on each of :data:`RL_RANGES` with ``rl.samples`` prompts each.

    Returns ``{"base", "runs": {name: rl_arm(...)}, "table", "deltas", "settings"}``
    where ``table`` has pass@1/pass@n per (model, band) and ``deltas`` the change
    against the base. Every GRPO run is a cached stage: a rerun with the same
    settings only evaluates.
    """
    profile, work_dir = config.profile, Path(work_dir)
    base = pretrained(profile)
    bands, base_eval = base_bands(profile, base, config.range_source)
    runs = {name: rl_arm(profile, base, bands, band, strict_reward, work_dir / name)
            for name, band in RL_RANGES.items()}
    table = pass_rows({"base": base_eval["evaluation"], **{name: r["evaluation"] for name, r in runs.items()}})
    return {
        "settings": {**settings(profile, bands, strict_reward), "base_checkpoint": base.key,
                     "ranges": base_eval["ranges"], "chapter_settings": dict(config.settings),
                     "overrides": dict(config.overrides)},
        "base": base_eval, "runs": runs, "table": table, "deltas": deltas(table),
    }


RESULTS_TITLE = "Edge of competence: paper vs this run"


def claims(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The paper's claims (Observation 1, appendix A.5) beside this run's changes, each with a 95% interval.

    Changes are paired over the same evaluation problems (bootstrap over problems);
    the verdict comes from the interval, never from the sign alone.
    """
    base, runs = result["base"]["evaluation"], result["runs"]
    n = base["samples_per_problem"]

    def change(claim: str, paper: str, arm: str, band: str, k: int, direction: str) -> dict[str, Any]:
        return change_row(claim, paper, base, runs[arm]["evaluation"], band, k, direction)

    return [
        change(f"edge RL: pass@{n} on edge", "rises", "edge", "edge", n, "up"),
        change(f"edge RL: pass@{n} on hard", "rises", "edge", "hard", n, "up"),
        change("too-easy RL: pass@1 in-distribution", "rises", "too_easy", "in_distribution", 1, "up"),
        change(f"too-easy RL: pass@{n} in-distribution (flat: within +-{FLAT_TOLERANCE})", "flat (saturated)",
               "too_easy", "in_distribution", n, "flat"),
        change(f"too-hard RL: pass@{n} on hard (flat: within +-{FLAT_TOLERANCE})", "stays near 0",
               "too_hard", "hard", n, "flat"),
        signal_row("too-hard RL: share of groups with any reward signal (flat: within +-"
                   f"{FLAT_TOLERANCE} of 0)", "reward stays 0 (A.5)", runs["too_hard"]["curves"]),
    ]


def notes(result: dict[str, Any]) -> str:
    """The settings behind the numbers, in a sentence a reader can check against the paper's."""
    s = result["settings"]
    return (f"{s['profile'].capitalize()} run: RL on ops {s['ops']['in_distribution']} (too easy), "
            f"{s['ops']['edge']} (edge), "
            f"{s['ops']['hard']} (too hard); {run_sizes(s, 'run', ', reward ' + s['reward'])} "
            f"(paper: ~200K RL prompts, pass@128); base: cached pretrained checkpoint "
            f"{s['base_checkpoint']}. {s.get('ranges', '')} 'this run' is the change against the base, with a 95% "
            f"interval from a paired bootstrap over the evaluation problems."
            + base_caveat(result["table"]) + edge_caveat(result["table"]))


def figures(result: dict[str, Any]) -> dict[str, Any]:
    """pass@k per evaluation range, and the GRPO training curves of every arm."""
    n = result["base"]["evaluation"]["samples_per_problem"]
    return {"passk": plot_passk(result["table"], n), "curves": plot_curves(result["runs"])}


def committed(result: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The metrics with the claims and a summary of each arm's curves beside them."""
    return {**result, "paper_vs_run": claims(result), "curve_summary": curve_summary(result["runs"])}


# ---------------------------------------------------------------------------
# Exercises
# ---------------------------------------------------------------------------


def _groups() -> list[Case]:
    return [([0.0, 0.0, 0.0, 0.0], 4), ([1.0, 1.0, 1.0, 1.0], 4), ([0.0, 1.0, 0.0, 0.0], 4),
            ([0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0], 4), ([0.2, 0.84, 1.0, 0.0, 0.5, 0.5], 3),
            ([0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0], 8)]


def _advantages(rewards: list[float], group_size: int) -> list[float]:
    return grpo_advantages(torch.tensor(rewards, dtype=torch.float64), group_size).tolist()


def _scaled_advantage_factor() -> float:
    group = [0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    before = _advantages(group, 8)
    after = _advantages([10 * r for r in group], 8)
    return after[1] / before[1]


def _hard_signal() -> float:
    summary = committed_metrics("04_edge_of_competence")["curve_summary"]
    return 1 - next(r for r in summary if r["run"] == "too_hard")["mean_frac_reward_zero_std"]


EXERCISES = [
    Exercise("04.1", "Implement the GRPO group advantage",
             "Write `advantages(rewards, group_size)`: `rewards` is a flat list, the rollouts of one prompt adjacent. "
             "Return each rollout's group-relative advantage as TRL computes it (ε = 1e-4).",
             Function(_groups, _advantages, rel=1e-4, abs_=1e-4),
             "per group: (r - mean) / (std + 1e-4), with the sample standard deviation (divide by G - 1, not G). "
             "A group where every reward is equal gets all zeros.",
             "def advantages(rewards, group_size):\n    ...\n\nanswer = advantages", homework=True),
    Exercise("04.2", "Scale the reward, predict the update",
             "Multiply every reward of a group by 10 (say, a reward of 0/10 instead of 0/1). By what factor do the "
             "group-relative advantages change? Predict, then check with `grpo_advantages`.",
             Number(_scaled_advantage_factor, rel=1e-3), "the mean and the standard deviation of the group both "
             "scale with the rewards; only ε does not.", "answer = None  # a number"),
    Exercise("04.3", "How much signal did the too-hard arm get?",
             "In the committed run (`curve_summary`), what fraction of the too-hard arm's groups carried any "
             "learning signal (1 - `mean_frac_reward_zero_std`)?",
             Number(_hard_signal, abs_=0.002), "find the row whose `run` is `too_hard` in "
             "`load_metrics(\"04_edge_of_competence\")[\"curve_summary\"]`.", "answer = None  # a fraction"),
]
