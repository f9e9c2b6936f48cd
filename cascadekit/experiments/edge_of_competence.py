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

This module holds the pieces every Part I RL chapter shares (:func:`rl_dataset`,
:func:`evaluate_ranges`, :func:`rl_run`) and the experiment itself
(:func:`run_edge_of_competence`). Regenerate the committed toy results with::

    python -m cascadekit.experiments.edge_of_competence --scale toy --threads 1

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
  (:data:`RANGES_FROM`, :mod:`cascadekit.experiments.competence`): the toy
  model's edge lies inside its pretraining range, not beyond it.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from matplotlib.figure import Figure

from cascadekit.evaluation.report import RANGES, error_taxonomy, evaluate, ladder_problems, op_range
from cascadekit.experiments.competence import calibrate
from cascadekit.experiments.common import (load_model, passk_rows, rl_dataset, rl_problems,
                                        run_from_command_line)
from cascadekit.profiles import Profile, apply_overrides
from cascadekit.rewards import strict_reward
from cascadekit.tokenizer import load_tokenizer

CHAPTER = "04_edge_of_competence"
#: RL data ranges, keyed by the chapter's names for them.
RL_RANGES = {"too_easy": "in_distribution", "edge": "edge", "too_hard": "hard"}

#: Per-scale settings of the Part I RL chapters 04 and 07 (a user's overrides win). Smoke:
#: 4 steps per run, so each notebook stays quick. Toy: 384 prompts per run (48 steps of
#: 8 prompts x 8 rollouts) at twice the profile's learning rate, and 32 evaluation
#: problems per op x 16 samples (pass@16 stands for the paper's pass@128), to fit about
#: 20 minutes per chapter on a 2-core CPU. Many problems, few samples: with 8 problems
#: per op, which problems were drawn moved an op's pass@1 by 0.1 (chapter 04's probe).
CHAPTER_OVERRIDES: dict[str, dict[str, Any]] = {
    "smoke": {"rl.samples": 8},
    "toy": {"rl.samples": 384, "rl.lr": 1e-4, "evaluation.problems_per_op": 32, "evaluation.samples": 16},
}

#: Where each scale's RL arms get their op ranges (:mod:`cascadekit.experiments.competence`):
#: measured on the base at the CPU scales, whose model does not reach past its pretraining
#: range; the profile's fixed ranges (the paper's) otherwise.
RANGES_FROM: dict[str, str] = {"smoke": "measured", "toy": "measured"}

RewardFunc = Callable[..., list[float]]


def chapter_profile(profile: Profile, overrides: Mapping[str, Any] | None = None) -> Profile:
    """``profile`` with :data:`CHAPTER_OVERRIDES` for its scale, then the caller's ``overrides``, applied."""
    return apply_overrides(apply_overrides(profile, CHAPTER_OVERRIDES.get(profile.name, {})), overrides or {})


# ---------------------------------------------------------------------------
# The steps (chapter 07 reuses them with other rewards)
# ---------------------------------------------------------------------------


def range_problems(profile: Profile, range_name: str, n: int | None = None) -> list:
    """``n`` (default ``rl.samples``) distinct ``rl``-split problems of one op range, contexts in equal shares.

    The ``rl`` split is disjoint from pretraining and evaluation problems, and
    every range is drawn with the same seed, so the runs differ only in difficulty.
    """
    lo, hi = getattr(profile.world, f"ops_{range_name}")
    contexts = profile.world.contexts
    return rl_problems(profile, [(c, (lo, hi), 1 / len(contexts)) for c in contexts], n or profile.rl.samples)


def evaluate_ranges(model, tokenizer, profile: Profile) -> dict[str, Any]:
    """Process-verified pass@1 and pass@n per op range and per op, and the error taxonomy per range.

    ``n = evaluation.samples`` completions for ``problems_per_op`` held-out
    ``eval`` problems at every op; the sampling seed is the profile's, so every
    model is scored on the same problems with the same random stream.
    """
    return summarize(evaluate(model, tokenizer, ladder_problems(profile), profile), profile)


def summarize(records: Sequence[dict[str, Any]], profile: Profile) -> dict[str, Any]:
    """:func:`evaluate_ranges`'s tables from judged samples, each sample in its op's range under ``profile``."""
    records = [{**r, "range": op_range(r["op"], profile.world)} for r in records]
    n = profile.evaluation.samples
    return {
        "samples_per_problem": n,
        "by_range": passk_rows(records, n, by=("range",)),
        "by_op": passk_rows(records, n, by=("op",)),
        "errors_by_range": error_taxonomy(records, by="range"),
    }


def base_checkpoint(profile: Profile) -> Path:
    """The profile's cached pretrained checkpoint (built on first use: seconds at smoke scale).

    A longer-trained base is a profile override away (``pretrain.tokens=...``): its
    checkpoint has its own cache key, so every chapter run with that override shares it.
    """
    from cascadekit.training.pretrain import cached_pretrained

    return cached_pretrained(profile)


def evaluate_base(profile: Profile, checkpoint: Path, ranges: str | None = None) -> tuple[Profile, dict[str, Any]]:
    """Evaluate the base at ``checkpoint`` on the ladder, then fix the op ranges the RL arms use.

    ``ranges`` is ``"measured"`` (the base's competence bands, see
    :mod:`cascadekit.experiments.competence`) or ``"profile"``; by default
    :data:`RANGES_FROM` for the profile's scale. Returns the profile with those
    ranges and the base's :func:`evaluate_ranges` tables under them, with the
    wall time and a sentence on where the ranges came from.
    """
    started = time.perf_counter()
    records = evaluate(load_model(checkpoint), load_tokenizer(checkpoint), ladder_problems(profile), profile)
    n = profile.evaluation.samples
    source = ranges or RANGES_FROM.get(profile.name, "profile")
    ranged, note = calibrate(profile, passk_rows(records, n, by=("op",)), n, source)
    return ranged, {"evaluation": summarize(records, ranged), "eval_s": round(time.perf_counter() - started, 1),
                    "ranges": note}


def rl_run(profile: Profile, checkpoint: Path, range_name: str, reward: RewardFunc,
           output_dir: str | Path) -> dict[str, Any]:
    """GRPO from the base at ``checkpoint`` on ``rl.samples`` prompts of one op range with ``reward``, then evaluate.

    One pass over the prompts (``rl.samples / rl.prompts_per_step`` steps).
    Returns the training curves (one row per step), the wall times and the
    :func:`evaluate_ranges` result. The base is reloaded for every run, so
    runs never share weights.
    """
    from cascadekit.training.grpo import train_grpo

    tokenizer = load_tokenizer(checkpoint)
    problems = range_problems(profile, range_name)
    steps = max(1, len(problems) // profile.rl.prompts_per_step)
    result = train_grpo(load_model(checkpoint), tokenizer, rl_dataset(problems), reward, profile, str(output_dir),
                        max_steps=steps)
    started = time.perf_counter()
    evaluation = evaluate_ranges(result.model, tokenizer, profile)
    return {
        "range": range_name, "ops": list(profile.world.ops(range_name)), "reward": reward.__name__,
        "prompts": len(problems), "steps": len(result.curves),
        "curves": result.curves.to_dict(orient="records"),
        "train_s": round(result.train_seconds, 1), "eval_s": round(time.perf_counter() - started, 1),
        "evaluation": evaluation,
    }


def pass_rows(evaluations: dict[str, dict[str, Any]], by: str = "range") -> list[dict[str, Any]]:
    """One row per (model, group): ``pass@1`` and ``pass@n``, from ``{model label: evaluation}``."""
    rows = []
    for label, ev in evaluations.items():
        n = ev["samples_per_problem"]
        rows.extend({"model": label, by: r[by], "pass@1": r["pass@1"], "pass@n": r[f"pass@{n}"]}
                    for r in ev[f"by_{by}"])
    return rows


def wide_table(rows: Sequence[dict[str, Any]], values: Sequence[str] = ("pass@1", "pass@n")):
    """A ``pandas`` table for display: one row per model, one column per (value, eval range)."""
    import pandas as pd

    frame = pd.DataFrame(rows).pivot(index="model", columns="range", values=list(values))
    models = list(dict.fromkeys(r["model"] for r in rows))
    return frame.reindex(models).reindex(columns=list(RANGES), level=1).round(3)


def deltas(rows: Sequence[dict[str, Any]], base: str = "base") -> list[dict[str, Any]]:
    """Each model's pass@1 and pass@n minus the base model's, per range (the chapter's headline)."""
    ref = {r["range"]: r for r in rows if r["model"] == base}
    return [{"model": r["model"], "range": r["range"],
             "d_pass@1": r["pass@1"] - ref[r["range"]]["pass@1"], "d_pass@n": r["pass@n"] - ref[r["range"]]["pass@n"]}
            for r in rows if r["model"] != base and r["range"] in ref]


# ---------------------------------------------------------------------------
# The experiment
# ---------------------------------------------------------------------------


def run_edge_of_competence(profile: Profile, out_dir: str | Path, *, reward: RewardFunc = strict_reward,
                           ranges: str | None = None) -> dict[str, Any]:
    """Finding 1: evaluate the base, then RL on each of :data:`RL_RANGES` with ``rl.samples`` prompts each.

    ``ranges`` says where the arms' op ranges come from (:func:`evaluate_base`).
    Returns ``{"base", "runs": {name: rl_run(...)}, "table", "deltas", "settings"}``
    where ``table`` has pass@1/pass@n per (model, eval range) and ``deltas`` the
    change against the base.
    """
    out_dir = Path(out_dir)
    started = time.perf_counter()
    checkpoint = base_checkpoint(profile)
    profile, base = evaluate_base(profile, checkpoint, ranges)
    runs = {name: rl_run(profile, checkpoint, range_name, reward, out_dir / name)
            for name, range_name in RL_RANGES.items()}
    table = pass_rows({"base": base["evaluation"], **{name: run["evaluation"] for name, run in runs.items()}})
    return {
        "settings": {**settings(profile, reward), "base_checkpoint": checkpoint.name, "ranges": base["ranges"]},
        "base": base, "runs": runs, "table": table, "deltas": deltas(table),
        "wall_s": round(time.perf_counter() - started, 1),
    }


def settings(profile: Profile, reward: RewardFunc) -> dict[str, Any]:
    """What a reader needs to compare runs: ranges, RL and evaluation settings, the reward."""
    rl, ev = profile.rl, profile.evaluation
    return {
        "profile": profile.name, "seed": profile.seed, "reward": reward.__name__,
        "ops": {name: list(profile.world.ops(name)) for name in RANGES},
        "rl": {"prompts_per_run": rl.samples, "group_size": rl.group_size, "prompts_per_step": rl.prompts_per_step,
               "steps": max(1, rl.samples // rl.prompts_per_step), "lr": rl.lr, "temperature": rl.temperature,
               "max_completion_length": rl.max_completion_length, "kl_beta": rl.kl_beta},
        "evaluation": {"problems_per_op": ev.problems_per_op, "samples": ev.samples,
                       "temperature": ev.temperature, "max_new_tokens": ev.max_new_tokens},
    }


# ---------------------------------------------------------------------------
# Figures and the paper-vs-run table
# ---------------------------------------------------------------------------


def plot_passk(table: Sequence[dict[str, Any]], n: int, title: str = "pass@k per evaluation range") -> Figure:
    """Grouped bars: pass@1 (left panel) and pass@n (right) per eval range, one bar per model."""
    import matplotlib.pyplot as plt
    import numpy as np

    models = list(dict.fromkeys(r["model"] for r in table))
    ranges = [g for g in RANGES if any(r["range"] == g for r in table)]
    value = {(r["model"], r["range"]): r for r in table}
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    width = 0.8 / len(models)
    for ax, key, label in ((axes[0], "pass@1", "pass@1"), (axes[1], "pass@n", f"pass@{n}")):
        for i, m in enumerate(models):
            ys = [value.get((m, g), {}).get(key, np.nan) for g in ranges]
            ax.bar(np.arange(len(ranges)) + (i - (len(models) - 1) / 2) * width, ys, width, label=m)
        ax.set_xticks(range(len(ranges)), [g.replace("_", "-") for g in ranges])
        ax.set_title(label)
        ax.grid(axis="y", alpha=0.3)
    top = max([r[key] for r in table for key in ("pass@1", "pass@n")], default=0.0)
    axes[0].set_ylim(0, max(0.05, 1.1 * top))  # an all-zero run shows as empty bars on a zero floor
    axes[0].set_ylabel("process-verified pass@k")
    axes[1].legend(fontsize=8, title="model")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


#: The GRPO curves the chapters plot: logged column, axis label.
CURVE_PANELS = {
    "reward": "mean reward",
    "frac_reward_zero_std": "frac_reward_zero_std (no signal)",
    "completion_length": "mean completion length (tokens)",
    "entropy": "mean token entropy",
}


def plot_curves(runs: dict[str, dict[str, Any]], title: str = "GRPO training curves") -> Figure:
    """Reward, ``frac_reward_zero_std``, completion length and entropy per step, one line per run."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 6))
    for ax, (column, label) in zip(axes.flat, CURVE_PANELS.items()):
        for name, run in runs.items():
            ax.plot([c["step"] for c in run["curves"]], [c.get(column, float("nan")) for c in run["curves"]],
                    marker=".", label=name)
        ax.set(xlabel="optimizer step", ylabel=label)
        ax.grid(alpha=0.3)
    axes[0, 1].set_ylim(-0.05, 1.05)
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def curve_summary(runs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per run: mean reward over the first and last quarter of steps, and the mean zero-std share."""
    rows = []
    for name, run in runs.items():
        rewards = [c["reward"] for c in run["curves"]]
        quarter = max(1, len(rewards) // 4)
        zero = [c.get("frac_reward_zero_std", float("nan")) for c in run["curves"]]
        rows.append({"run": name, "steps": len(rewards), "reward_first_quarter": sum(rewards[:quarter]) / quarter,
                     "reward_last_quarter": sum(rewards[-quarter:]) / quarter,
                     "mean_frac_reward_zero_std": sum(zero) / len(zero), "train_s": run["train_s"]})
    return rows


def paper_vs_run(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The paper's claims (Observation 1, appendix A.5) beside this run's measured changes.

    ``direction`` compares signs only; with few evaluation problems a small
    change is within noise, which the chapter's notes discuss.
    """
    d = {(r["model"], r["range"]): r for r in result["deltas"]}
    curves = {r["run"]: r for r in curve_summary(result["runs"])}
    n = result["base"]["evaluation"]["samples_per_problem"]

    def row(claim: str, paper: str, value: float, want: str) -> dict[str, Any]:
        ok = {"up": value > 0, "flat": abs(value) <= 0.02, "down": value < 0}[want]
        return {"claim": claim, "paper": paper, "this run": round(value, 3),
                "direction as paper": "yes" if ok else "no"}

    return [
        row(f"edge RL: pass@{n} on edge", "rises", d["edge", "edge"]["d_pass@n"], "up"),
        row(f"edge RL: pass@{n} on hard", "rises", d["edge", "hard"]["d_pass@n"], "up"),
        row("too-easy RL: pass@1 in-distribution", "rises", d["too_easy", "in_distribution"]["d_pass@1"], "up"),
        row(f"too-easy RL: pass@{n} in-distribution", "flat (saturated)",
            d["too_easy", "in_distribution"]["d_pass@n"], "flat"),
        row(f"too-hard RL: pass@{n} on hard", "stays near 0", d["too_hard", "hard"]["d_pass@n"], "flat"),
        row("too-hard RL: mean frac_reward_zero_std", "reward stays 0 (A.5)",
            curves["too_hard"]["mean_frac_reward_zero_std"], "up"),
    ]


def base_caveat(table: Sequence[dict[str, Any]]) -> str:
    """A warning when the base solves nothing at pass@n on any range: then no data range is at the edge."""
    if any(r["pass@n"] > 0 for r in table if r["model"] == "base"):
        return ""
    return (" The base model solves no evaluation problem (process-verified pass@n = 0 on every range): "
            "at this scale there is no edge of competence yet, every RL group scores all-zero under a "
            "process-verified reward, so rows that expect no change hold trivially and rows that expect a rise "
            "cannot be tested.")


def edge_caveat(table: Sequence[dict[str, Any]]) -> str:
    """A warning when the base solves nothing on the profile's edge range but something in distribution.

    Then the edge range is beyond this base's competence: RL there has (almost)
    no signal, like the too-hard range, and the base's real edge of competence
    (pass@1 low, pass@n above 0) is in the in-distribution range.
    """
    base = {r["range"]: r for r in table if r["model"] == "base"}
    if "edge" not in base or base["edge"]["pass@n"] > 0 or not base.get("in_distribution", {}).get("pass@n"):
        return ""
    ind = base["in_distribution"]
    return (f" The base solves no edge problem (pass@n = 0 on the edge range) while in distribution it has "
            f"pass@1 {ind['pass@1']:.2f} and pass@n {ind['pass@n']:.2f}: the profile's edge range lies beyond this "
            "base's competence, so RL there had (almost) no signal, as on the too-hard range, and this base's "
            "edge of competence is the in-distribution range.")


def run_sizes(s: Mapping[str, Any], per: str, extra: str = "") -> str:
    """The RL and evaluation sizes of a run's :func:`settings`: "N prompts x G rollouts per <per> (...)"."""
    rl, ev = s["rl"], s["evaluation"]
    return (f"{rl['prompts_per_run']} prompts x {rl['group_size']} rollouts per {per} ({rl['steps']} steps, "
            f"lr {rl['lr']:g}{extra}); evaluation {ev['problems_per_op']} problems per op x {ev['samples']} samples")


def run_notes(result: dict[str, Any]) -> str:
    """The settings behind the numbers, in a sentence a reader can check against the paper's."""
    s = result["settings"]
    return (f"{s['profile'].capitalize()} run: RL on ops {s['ops']['in_distribution']} (too easy), "
            f"{s['ops']['edge']} (edge), "
            f"{s['ops']['hard']} (too hard); {run_sizes(s, 'run', ', reward ' + s['reward'])} "
            f"(paper: ~200K RL prompts, pass@128); base: cached pretrained checkpoint "
            f"{result['settings']['base_checkpoint']}. {s.get('ranges', '')} 'this run' is the change against the base. "
            f"A change of a few points is within sampling noise at this evaluation size."
            + base_caveat(result["table"]) + edge_caveat(result["table"]))


def write_results(result: dict[str, Any], command: str, root: Path | None = None) -> None:
    """Metrics JSON, the two figures and ``paper_vs_run.md`` under ``data/results/04_edge_of_competence``."""
    from cascadekit.results import save_chapter_results

    n = result["base"]["evaluation"]["samples_per_problem"]
    save_chapter_results(
        CHAPTER, {**result, "paper_vs_run": paper_vs_run(result), "curve_summary": curve_summary(result["runs"])},
        {"passk": plot_passk(result["table"], n), "curves": plot_curves(result["runs"])},
        "Edge of competence: paper vs this run", paper_vs_run(result), command, run_notes(result), root)


def main(argv: Sequence[str] | None = None) -> None:
    """Run finding 1 at a scale and write the committed results."""
    run_from_command_line(argv, "cascadekit.experiments.edge_of_competence", main.__doc__, chapter_profile, run_edge_of_competence,
                          write_results, lambda r: {"table": r["table"], "paper_vs_run": paper_vs_run(r), "curves": curve_summary(r["runs"]), "wall_s": r["wall_s"]}, CHAPTER)

if __name__ == "__main__":
    main()
