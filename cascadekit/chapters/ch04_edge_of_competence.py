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
from typing import Any, Mapping, Sequence

import torch

from cascadekit.chapters import ChapterConfig
from cascadekit.bands import Bands
from cascadekit.claims import FLAT_TOLERANCE, binomial_interval, claim_row
from cascadekit.exercises import Exercise
from cascadekit.exercises.answers import Case, Function, Number
from cascadekit.exercises.committed import committed_metrics
from cascadekit.formatting import fill
from cascadekit.chapters.interplay import (base_bands, base_caveat, change_row, curve_summary, deltas, edge_caveat,
                                           pass_rows, plot_curves, plot_passk, rl_arm, run_sizes, settings,
                                           signal_row)
from cascadekit.results import markdown_table
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
# The committed run in prose (the notebook shows the result, not the code)
# ---------------------------------------------------------------------------

#: The bands in the order the prose names them, with their names there.
BAND_NAMES = {"in_distribution": "too easy", "edge": "edge", "hard": "too hard"}


def _evaluation(metrics: Mapping[str, Any], model: str) -> dict[str, Any]:
    return (metrics["base"] if model == "base" else metrics["runs"][model])["evaluation"]


def _row(metrics: Mapping[str, Any], model: str, band: str) -> dict[str, Any]:
    """One committed by-range row of a model: its problems and rates."""
    return next(r for r in _evaluation(metrics, model)["by_range"] if r["range"] == band)


def _ops(metrics: Mapping[str, Any], band: str) -> str:
    """A band's ops as the run measured them (``settings.ops``), in prose: 2, or 3-5."""
    low, high = min(metrics["settings"]["ops"][band]), max(metrics["settings"]["ops"][band])
    return str(low) if low == high else f"{low}-{high}"


def run_bands(metrics: Mapping[str, Any]) -> Bands:
    """The bands a run used (measured on its base at the CPU scales), not the profile's fixed ones."""
    return Bands(**{band: (min(ops), max(ops)) for band, ops in metrics["settings"]["ops"].items()})


def _pass_table(metrics: Mapping[str, Any], models: Sequence[str]) -> str:
    """pass@1 / pass@n per band, one row per model."""
    k = metrics["base"]["evaluation"]["samples_per_problem"]
    return markdown_table([{"model": m.replace("_", " "), **{
        f"{name} ({_ops(metrics, band)})": f"{_row(metrics, m, band)['pass@1']:.2f} / {_row(metrics, m, band)[f'pass@{k}']:.2f}"
        for band, name in BAND_NAMES.items()}} for m in models])


def story_claims(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The changes the chapter's prose quotes, each paired over the same problems; the too-hard arm's level
    with an exact binomial interval (its hard pass@n is a level, not a change)."""
    k = metrics["base"]["evaluation"]["samples_per_problem"]
    base, edge, easy = (_evaluation(metrics, m) for m in ("base", "edge", "too_easy"))
    hard = _row(metrics, "too_hard", "hard")
    return [
        change_row("edge RL: edge pass@1", "rises", base, edge, "edge", 1, "up"),
        change_row(f"edge RL: edge pass@{k}", "rises", base, edge, "edge", k, "up"),
        change_row(f"edge RL: hard pass@{k}", "rises", base, edge, "hard", k, "up"),
        change_row("too-easy RL: in-distribution pass@1", "rises", base, easy, "in_distribution", 1, "up"),
        change_row(f"too-easy RL: in-distribution pass@{k} (within 5 points)", "flat (saturated)", base, easy,
                   "in_distribution", k, "flat"),
        claim_row(f"too-hard RL: hard pass@{k}, a level (below 5 points)", "stays near 0", hard[f"pass@{k}"],
                  *binomial_interval(round(hard[f"pass@{k}"] * hard["problems"]), hard["problems"]), "flat"),
    ]


def _facts(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The committed metrics with the derived values the prose quotes."""
    k = metrics["base"]["evaluation"]["samples_per_problem"]
    signal = {r["run"]: 1 - r["mean_frac_reward_zero_std"] for r in metrics["curve_summary"]}
    errors = {m: {r["range"]: r for r in _evaluation(metrics, m)["errors_by_range"]} for m in ("base", "edge")}
    entropy = [c["entropy"] for c in metrics["runs"]["too_easy"]["curves"]]
    return {
        **metrics, "k": k, "minutes": metrics["wall_s"] / 60, "edge_ops": _ops(metrics, "edge"),
        "signal_easy": signal["too_easy"], "signal_edge": signal["edge"], "signal_hard": signal["too_hard"],
        "entropy_first": entropy[0], "entropy_last": entropy[-1],
        "dep_base": errors["base"]["in_distribution"]["n_dependency"],
        "dep_edge": errors["edge"]["in_distribution"]["n_dependency"],
        **dict(zip(("edge_p1", "edge_pk", "edge_hard", "easy_p1", "easy_pk", "hard_level"), story_claims(metrics))),
    }


_STORY = """
**The committed run.** It measured the three bands on chapter 03's base, then trained each
arm on {{runs.edge.prompts}} prompts x {{settings.rl.group_size}} rollouts ({{runs.edge.steps}} GRPO steps,
strict reward, lr {{settings.rl.lr}}). Evaluation used {{settings.evaluation.problems_per_op}} problems per op x
{{settings.evaluation.samples}} samples. It took {{minutes:.0f}} minutes on one of 2 shared cores. The bands:

{bands}

Chapter 03's ladder (other problems) gives the same bands. After RL, pass@1 / pass@{{k}} per band
(groups with signal: too easy {{signal_easy:.0%}}, edge {{signal_edge:.0%}}, too hard {{signal_hard:.1%}}):

{arms}

**What moved as the paper says, and what the intervals can confirm.** Each bullet gives
the interval's verdict: at {{settings.evaluation.problems_per_op}} problems per op most single changes cannot be
told from noise.
* **Only data the base can sometimes solve teaches.** The too-hard arm's groups had signal in
  {{signal_hard:.1%}} of them; its reward stayed 0 and its hard pass@{{k}} stayed at
  {{runs.too_hard.evaluation.by_range[range=hard].pass@16:.2f}} ({{hard_level.verdict}},
  interval {{hard_level.95% interval}}).
* **RL sharpens where it trains.** Too-easy RL lifted op 2 pass@1 from
  {{base.evaluation.by_op[op=2].pass@1:.2f}} to {{runs.too_easy.evaluation.by_op[op=2].pass@1:.2f}} (token entropy
  {{entropy_first:.2f}} -> {{entropy_last:.2f}}); on its band the change is
  {{easy_p1.this run:+.3f}}, interval {{easy_p1.95% interval}}:
  **{{easy_p1.verdict}}**. Edge RL lifted edge pass@1 from
  {{base.evaluation.by_range[range=edge].pass@1:.2f}} to {{runs.edge.evaluation.by_range[range=edge].pass@1:.2f}}
  (interval {{edge_p1.95% interval}}: **{{edge_p1.verdict}}**).
* **Too-easy RL narrows the edge.** Edge pass@{{k}} went {{base.evaluation.by_range[range=edge].pass@16:.2f}} ->
  {{runs.too_easy.evaluation.by_range[range=edge].pass@16:.2f}}: the paper's in-distribution pattern, where pass@1
  rises and pass@k does not. Its own band's pass@{{k}} moved {{easy_pk.this run:+.3f}}
  (interval {{easy_pk.95% interval}}: the "flat" claim is
  **{{easy_pk.verdict}}** at {{settings.evaluation.problems_per_op}} problems).

**What did not: the headline.** Edge RL did not *expand* what the base can solve.
* Edge pass@{{k}} went {{base.evaluation.by_range[range=edge].pass@16:.2f}} -> {{runs.edge.evaluation.by_range[range=edge].pass@16:.2f}}
  (interval {{edge_pk.95% interval}}: **{{edge_pk.verdict}}**), where the
  paper has pass@128 rising.
* The hard range stayed at 0 for every arm (**{{edge_hard.verdict}}**: nothing moved, so
  nothing can be said).
* Edge RL cost op 2 pass@1 ({{base.evaluation.by_op[op=2].pass@1:.2f}} -> {{runs.edge.evaluation.by_op[op=2].pass@1:.2f}}).
  Dependency mismatches there rose from {{dep_base:.0%}} to {{dep_edge:.0%}}: the model now writes op 2
  problems with the longer structure of ops {{edge_ops}}.

**Why answers and process diverge.** After edge RL the model gives the right *answer* at op 3
almost always (answer-only pass@1 {{base.evaluation.by_op[op=3].answer_pass@1:.2f}} ->
{{runs.edge.evaluation.by_op[op=3].answer_pass@1:.2f}}), yet most of those solutions fail the judge.
`probe/` in the results folder shows the commonest way: it swaps the values of two leaves, and
the sum hides the swap (an example below). This is the reward-hacking shape chapter 07 is about.
An outcome reward would pay it.
"""

_LONGER_BASE = """
**The lever tried: a base trained twice as long.** Chapter 03's 32M-token base (`toy-32M`)
has the same bands and a much easier edge. The whole chapter, rerun on it unchanged
(`base-32M/` in the results folder, {{minutes32:.0f}} min), pass@1 / pass@{{k}}:

{arms32}

It did not bring the expansion closer. The longer base still solves nothing beyond op 5, and
edge RL only narrowed the edge (pass@{{k}} {{b32_base:.2f}} -> {{b32_edge:.2f}}).
"""


def story(metrics: Mapping[str, Any], longer_base: Mapping[str, Any] | None = None) -> str:
    """The committed run told in Markdown, every number read from ``metrics`` (and from ``longer_base``, the
    same chapter rerun on chapter 03's 32M-token base, when given): the notebook shows only the text."""
    facts = _facts(metrics)
    k = facts["k"]
    bands = markdown_table([{"band": name, "ops": _ops(metrics, band), f"base pass@1 / pass@{k}":
                             f"{_row(metrics, 'base', band)['pass@1']:.2f} / {_row(metrics, 'base', band)[f'pass@{k}']:.2f}"}
                            for band, name in BAND_NAMES.items()])
    text = fill(_STORY.format(bands=bands, arms=_pass_table(metrics, ("too_easy", "edge", "too_hard"))), facts)
    if longer_base is None:
        return text
    longer = {**facts, "minutes32": longer_base["wall_s"] / 60,
              **{f"b32_{m}": _row(longer_base, m, "edge")[f"pass@{k}"] for m in ("base", "edge")}}
    return text + fill(_LONGER_BASE.format(arms32=_pass_table(longer_base, ("base", "too_easy", "edge", "too_hard"))),
                         longer)


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
