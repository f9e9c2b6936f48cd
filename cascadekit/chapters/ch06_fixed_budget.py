"""Finding 3: one compute budget, split between mid-training and RL.

The paper (section 5, appendix A.10) prices both stages in supervised-token
equivalents (:mod:`cascadekit.engine.compute`): mid-training on ``T`` tokens costs
``T``; RL on ``N`` prompts with ``r`` rollouts of ``L`` tokens costs
``(8 + 2 g) / 6 * N r L``. It then gives a fraction ``beta`` of one budget to
RL and the rest to mid-training: full mid-training (``beta = 0``), light RL
(0.2), medium (0.5), heavy (0.8) and full RL (1), all from one base model,
mid-training on 20% in-distribution + 80% edge problems and RL on the edge
range. More mid-training favours near-distribution pass@1; more RL favours the
hardest extrapolation; at larger budgets full RL can win.

Where the kit departs from the paper:

- **Every arm spends exactly the same budget.** The paper's end points do not
  (1B supervised tokens against about 2.10B token-equivalents of RL). Here the
  budget is a whole number of *units*, the smallest amount that is both a
  whole number of mid-training optimizer steps and of RL steps
  (:func:`step_unit`), so every arm's planned split is also what the trainers
  actually run, to the token.
- ``L`` is the rollout's length cap, prompt cap plus response cap, as the
  paper's ``L_total = 1024 + 1024``; the kit caps prompts at the response cap,
  ``L = 2 * rl.max_completion_length``. Real rollouts are shorter: the results
  report the measured spend beside the plan.
- No reference model at toy scale (KL off), so ``g = 0``: RL costs
  ``4/3 N r L`` rather than the paper's ``5/3 N r L``.
- At the CPU scales the in-distribution, edge and hard ranges are measured on
  the base, as in chapter 04 (``ranges`` in ``cascadekit/chapters/chapters.yaml``): the
  toy model's edge lies inside its pretraining range.
- Mid-training peaks at the learning rate where pretraining ended
  (:func:`cascadekit.training.pretrain.midtrain_config`), the kit's choice: at
  toy scale a restart at pretraining's peak left every mixed arm below both
  pure arms (``data/results/06_fixed_budget/peak-lr/``).

Every arm's mid-training and GRPO are cached stages (:mod:`cascadekit.stages`),
so a rerun, or a second process, reuses the arms already trained. Run the toy
reproduction (writes ``data/results/06_fixed_budget/``)::

    cascadekit experiment 06 --scale toy --threads 1
"""
from __future__ import annotations

import math
import time
from fractions import Fraction
from pathlib import Path
from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt

from cascadekit.chapters import ChapterConfig
from cascadekit.engine.compute import ARMS, BudgetSplit, budget_arms, rl_cost_per_prompt, rl_token_equivalent
from cascadekit.exercises import Exercise
from cascadekit.exercises.answers import Choice, Function
from cascadekit.exercises.committed import committed_metrics
from cascadekit.bands import Bands
from cascadekit.evaluation.report import eval_problems
from cascadekit.chapters.interplay import RL_REWARD, band_problems, base_bands, change_row, summarize
from cascadekit.stages import StageOutput
from cascadekit.evaluation.report import evaluate_checkpoint
from cascadekit.training.pipeline import grpo, midtrained, pretrained
from cascadekit.profiles import Profile
from cascadekit.results import markdown_table
from cascadekit.engine.tokenizer import load_tokenizer
from cascadekit.world import Problem

EVAL_RANGES = ("edge", "hard")

PAPER = {
    "full_midtrain": "strong OOD-edge (near-distribution) pass@1",
    "light_rl": "best OOD-edge pass@1 (Figure 6)",
    "medium_rl": "in between",
    "heavy_rl": "best OOD-hard pass@1 and pass@128 of the mixed arms",
    "full_rl": "mixed arms beat it by +10.8 points OOD-hard pass@128 on average (Figure 1); "
               "wins OOD-hard pass@128 at budgets >= 8.4B (A.10)",
}


# ---------------------------------------------------------------------------
# The plan: one budget, five arms, every one step-exact
# ---------------------------------------------------------------------------


def rollout_tokens(profile: Profile) -> int:
    """``L``: the length cap of one rollout, prompt cap (= response cap) plus response cap."""
    return 2 * profile.rl.max_completion_length


def uses_reference_model(profile: Profile) -> bool:
    """``g``: a KL penalty runs a reference model's forward pass on every rollout."""
    return profile.rl.kl_beta > 0


def midtrain_step_tokens(profile: Profile) -> int:
    """Tokens of one mid-training optimizer step (a batch of packed blocks)."""
    return profile.pretrain.batch_size * profile.pretrain.seq_len


def rl_step_cost(profile: Profile) -> Fraction:
    """Token-equivalents of one RL optimizer step: ``prompts_per_step`` prompts, ``r`` rollouts each."""
    rl = profile.rl
    per_prompt = rl_cost_per_prompt(rl.group_size, rollout_tokens(profile),
                                    reference_model=uses_reference_model(profile))
    return per_prompt * rl.prompts_per_step


def step_unit(profile: Profile) -> int:
    """The smallest budget that is a whole number of mid-training steps *and* of RL steps.

    The least common multiple of the integer ``m`` (tokens per mid-training step)
    and the fraction ``p/q`` (token-equivalents per RL step) is ``lcm(m, p)``:
    a multiple of ``m``, and ``q`` times ``lcm(m, p)/p`` RL steps.
    """
    rl = rl_step_cost(profile)
    return math.lcm(midtrain_step_tokens(profile), rl.numerator)


def plan_budget(profile: Profile, units: int) -> list[BudgetSplit]:
    """The five arms under ``units`` step units (``budget_units`` in the chapter spec), each spent exactly.

    Raises ``ValueError`` if an arm's split is not a whole number of steps of
    both trainers (choose ``units`` as a multiple of 10).
    """
    arms = budget_arms(units * step_unit(profile), profile.rl.group_size, rollout_tokens(profile),
                       reference_model=uses_reference_model(profile), arms=ARMS)
    for arm in arms:
        if arm.rl_prompts % profile.rl.prompts_per_step or arm.midtrain_tokens % midtrain_step_tokens(profile):
            raise ValueError(f"{units} units do not split into whole steps for arm {arm.arm}: "
                             f"{arm.rl_prompts} RL prompts, {arm.midtrain_tokens} mid-training tokens")
    return arms


def planned_row(split: BudgetSplit) -> dict[str, Any]:
    """An arm's plan as plain numbers (token-equivalents as exact ints where they are ints)."""
    return {
        "arm": split.arm, "rl_fraction": split.rl_fraction, "midtrain_tokens": split.midtrain_tokens,
        "rl_prompts": split.rl_prompts, "rollouts": split.rl_prompts * split.rollouts,
        "tokens_per_rollout": split.tokens_per_rollout, "rl_token_equivalents": float(split.rl_tokens),
        "total": float(split.total),
    }


# ---------------------------------------------------------------------------
# Running one arm and measuring what it spent
# ---------------------------------------------------------------------------


def budget_eval_problems(profile: Profile, bands: Bands) -> list[Problem]:
    """Held-out problems at every edge and hard op, contexts cycled."""
    ops = [op for name in EVAL_RANGES for op in bands.ops(name)]
    return eval_problems(profile, ops, profile.world.contexts)


def actual_rl_spend(profile: Profile, curves: Sequence[Mapping[str, Any]], prompts: Sequence[Problem],
                    tokenizer) -> dict[str, Any]:
    """What RL really cost: rollouts, and token-equivalents from measured prompt and completion lengths.

    Each prompt is used once with ``r`` rollouts; a rollout's length is its
    prompt plus its completion (TRL's per-step mean completion length).
    """
    rl = profile.rl
    prompt_tokens = sum(len(ids) for ids in tokenizer([p.rl_prompt for p in prompts])["input_ids"]) if prompts else 0
    completion_tokens = sum(c["completion_length"] for c in curves) * rl.prompts_per_step * rl.group_size
    rollout_tokens_seen = rl.group_size * prompt_tokens + completion_tokens
    factor = Fraction(8 + 2 * int(uses_reference_model(profile)), 6)
    return {
        "rl_steps": len(curves), "rl_prompts": len(curves) * rl.prompts_per_step,
        "rollouts": len(curves) * rl.prompts_per_step * rl.group_size,
        "mean_rollout_tokens": rollout_tokens_seen / max(1, len(curves) * rl.prompts_per_step * rl.group_size),
        "rl_token_equivalents_measured": float(factor * Fraction(rollout_tokens_seen).limit_denominator()),
    }


def run_arm(profile: Profile, split: BudgetSplit, base: StageOutput, bands: Bands, prompts: Sequence[Problem],
            problems: Sequence[Problem], work_dir: Path) -> dict[str, Any]:
    """Mid-train, then RL (each a cached stage), then evaluate one arm; its plan, measured spend, pass@k, times."""
    stage = midtrained(base, profile, bands, split.midtrain_tokens)
    midtrain_s = stage.metrics.get("wall_s", 0.0) if split.midtrain_tokens else 0.0
    curves: list[dict[str, Any]] = []
    rl_s = 0.0
    if split.rl_prompts:
        stage = grpo(stage, prompts[: split.rl_prompts], RL_REWARD, profile, work_dir / split.arm)
        curves, rl_s = stage.metrics["curves"], stage.metrics["train_s"]
    started = time.perf_counter()
    summary = summarize(evaluate_checkpoint(stage, problems, profile), bands, profile.evaluation.samples)
    return {
        "arm": split.arm,
        "planned": planned_row(split),
        "actual": {"midtrain_tokens": split.midtrain_tokens // midtrain_step_tokens(profile)
                   * midtrain_step_tokens(profile),
                   **actual_rl_spend(profile, curves, prompts[: split.rl_prompts], load_tokenizer(stage.checkpoint))},
        "by_op": summary["by_op"],
        "by_range": summary["by_range"],
        "per_problem": summary["per_problem"],
        "rl_curves": curves,
        "stage": stage.key,
        "midtrain_wall_s": midtrain_s,
        "rl_wall_s": rl_s,
        "eval_wall_s": round(time.perf_counter() - started, 1),
    }


def run(config: ChapterConfig, work_dir: str | Path, units: int | None = None) -> dict[str, Any]:
    """Every arm from the profile's cached pretrained base under one budget; the chapter's metrics."""
    profile, work_dir = config.profile, Path(work_dir)
    units = units or config.spec.budget_units.get(config.scale, 10)
    plan = plan_budget(profile, units)
    base = pretrained(profile)
    bands, base_eval = base_bands(profile, base, config.range_source)
    prompts = band_problems(profile, bands, "edge", max(s.rl_prompts for s in plan) or 1)
    problems = budget_eval_problems(profile, bands)
    started = time.perf_counter()
    base_summary = summarize(evaluate_checkpoint(base, problems, profile), bands, profile.evaluation.samples)
    base_summary["eval_wall_s"] = round(time.perf_counter() - started, 1)
    arms = [run_arm(profile, split, base, bands, prompts, problems, work_dir) for split in plan]
    return {
        "profile": profile.to_dict(),
        "base_checkpoint_key": base.key,
        "samples_per_problem": profile.evaluation.samples,
        "step_unit": step_unit(profile),
        "budget_units": units,
        "ranges": base_eval["ranges"],
        "bands": bands.to_dict(),
        "base": base_summary,
        "arms": arms,
    }


# ---------------------------------------------------------------------------
# Tables and figures
# ---------------------------------------------------------------------------


def _range_value(rows: Sequence[Mapping[str, Any]], name: str, key: str) -> float:
    return next((r[key] for r in rows if r["range"] == name), float("nan"))


def spend_rows(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Planned against actual spend per arm: mid-training tokens, RL prompts and rollouts, token-equivalents."""
    return [{
        "arm": a["arm"],
        "midtrain tokens planned / actual": f"{a['planned']['midtrain_tokens']:,} / {a['actual']['midtrain_tokens']:,}",
        "RL prompts planned / actual": f"{a['planned']['rl_prompts']} / {a['actual']['rl_prompts']}",
        "rollouts": a["actual"]["rollouts"],
        "RL token-eq. planned (L cap)": round(a["planned"]["rl_token_equivalents"]),
        "RL token-eq. measured (real L)": round(a["actual"]["rl_token_equivalents_measured"]),
        "total planned": round(a["planned"]["total"]),
    } for a in metrics["arms"]]


def score_rows(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """pass@1 and pass@n on the edge and hard ranges, for the base and every arm."""
    n = metrics["samples_per_problem"]
    entries = [("base (no extra budget)", metrics["base"])] + [(a["arm"], a) for a in metrics["arms"]]
    return [{
        "arm": name,
        **{f"{r} pass@{k}": _range_value(e["by_range"], r, f"pass@{k}") for r in EVAL_RANGES for k in (1, n)},
    } for name, e in entries]


def plot_scores(metrics: Mapping[str, Any]):
    """Edge and hard pass@1 and pass@n per arm (the base as a dashed line)."""
    n = metrics["samples_per_problem"]
    arms = metrics["arms"]
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.4))
    for ax, (r, k) in zip(axes, [(r, k) for r in EVAL_RANGES for k in (1, n)]):
        values = [_range_value(a["by_range"], r, f"pass@{k}") for a in arms]
        ax.bar(range(len(arms)), values, color=[f"C{i}" for i in range(len(arms))])
        ax.axhline(_range_value(metrics["base"]["by_range"], r, f"pass@{k}"), color="k", ls="--", lw=1,
                   label="base")
        ax.set_xticks(range(len(arms)), [a["arm"].replace("_", "\n") for a in arms], fontsize=7)
        ax.set_title(f"{r} pass@{k}")
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("one budget, five splits (RL share grows left to right)", y=1.03)
    return fig


def plot_spend(metrics: Mapping[str, Any]):
    """Stacked token-equivalents per arm: mid-training and RL as planned (and RL as measured)."""
    arms = metrics["arms"]
    x = range(len(arms))
    mid = [a["actual"]["midtrain_tokens"] for a in arms]
    rl = [a["planned"]["rl_token_equivalents"] for a in arms]
    measured = [a["actual"]["rl_token_equivalents_measured"] for a in arms]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar(x, mid, label="mid-training tokens")
    ax.bar(x, rl, bottom=mid, label="RL (planned, L = cap)")
    ax.scatter(x, [m + r for m, r in zip(mid, measured)], color="k", marker="_", s=400, zorder=3,
               label="mid-training + RL measured")
    ax.set_xticks(list(x), [a["arm"] for a in arms], fontsize=8)
    ax.set_ylabel("token-equivalents")
    ax.set_title("the budget each arm spent")
    ax.legend(fontsize=7)
    return fig


def paper_vs_run_rows(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per arm: the paper's outcome beside this run's edge and hard pass@1 and pass@n."""
    n = metrics["samples_per_problem"]
    return [{
        "arm": a["arm"], "RL share": a["planned"]["rl_fraction"], "paper": PAPER.get(a["arm"], ""),
        **{f"{r} pass@{k}": _range_value(a["by_range"], r, f"pass@{k}") for r in EVAL_RANGES for k in (1, n)},
    } for a in metrics["arms"]]


MIDTRAIN_HEAVY = ("full_midtrain", "light_rl")
RL_HEAVY = ("heavy_rl", "full_rl")


def claims(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The finding's two claims, each the best arm of the favoured group against the best of the other.

    The arms are scored on the same problems, so each interval is a paired
    bootstrap over problems. "Best" is chosen by this run's point estimate, which
    favours finding a difference; the intervals are read with that in mind.
    """
    n = metrics["samples_per_problem"]
    arms = {a["arm"]: a for a in metrics["arms"]}
    if not all(arm in arms for arm in MIDTRAIN_HEAVY + RL_HEAVY):
        return []
    rows = []
    for band, k, favoured, other, paper in (
            ("edge", 1, MIDTRAIN_HEAVY, RL_HEAVY, "mid-training-heavy arms lead near distribution (Figure 6)"),
            ("hard", n, RL_HEAVY, MIDTRAIN_HEAVY, "RL-heavy arms lead on the hardest problems (Figure 6)")):
        best = {group: max(group, key=lambda a: _range_value(arms[a]["by_range"], band, f"pass@{k}"))
                for group in (favoured, other)}
        rows.append(change_row(f"{band} pass@{k}: best of {'/'.join(favoured)} ({best[favoured]}) minus best of "
                               f"{'/'.join(other)} ({best[other]})", paper, arms[best[other]], arms[best[favoured]],
                               band, k, "up"))
    return rows


# ---------------------------------------------------------------------------
# The chapter's results
# ---------------------------------------------------------------------------


RESULTS_TITLE = "Finding 3: one budget split between mid-training and RL"


def notes(metrics: Mapping[str, Any]) -> str:
    """How the claims compare arms, then every arm against the paper and the budget each spent."""
    return (f"{metrics.get('ranges', '')} Each claim compares two arms on the same {metrics['samples_per_problem']}"
            f"-sample evaluation problems (paired bootstrap over problems).\n\n"
            f"### Every arm against the paper\n\n{markdown_table(paper_vs_run_rows(metrics))}\n\n"
            f"### Budget spent per arm\n\n{markdown_table(spend_rows(metrics))}")


def figures(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Edge and hard pass@k per arm, and the budget each arm spent."""
    return {"scores": plot_scores(metrics), "spend": plot_spend(metrics)}


def committed(metrics: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The metrics with the claims beside them."""
    return {**metrics, "paper_vs_run": claims(metrics)}


# ---------------------------------------------------------------------------
# Exercises
# ---------------------------------------------------------------------------


def _rl_cost(prompts: int, rollouts: int, tokens: int, reference_model: bool) -> float:
    return float(rl_token_equivalent(prompts, rollouts, tokens, reference_model=reference_model))


ARM_NAMES = tuple(ARMS)  #: the five arms, mid-training-heavy first


def _best_edge_arm() -> str:
    arms = committed_metrics("06_fixed_budget")["arms"]
    return max(arms, key=lambda a: _range_value(a["by_range"], "edge", "pass@1"))["arm"]


EXERCISES = [
    Exercise("06.1", "Price an RL run in tokens",
             "Write `rl_cost(prompts, rollouts, tokens, reference_model)`: the supervised tokens that cost as much "
             "as this GRPO run (the chapter's T_RL), with or without a reference model.",
             Function(lambda: [(1, 1, 1, True), (1, 1, 1, False), (64, 8, 512, True), (64, 8, 512, False),
                               (100 * 1024, 6, 2048, True)], _rl_cost, rel=1e-9),
             "T_RL = (8 + 2γ)/6 · N · r · L, with γ = 1 when a reference model runs its forward pass and 0 otherwise.",
             "def rl_cost(prompts, rollouts, tokens, reference_model):\n    ...\n\nanswer = rl_cost"),
    Exercise("06.2", "Which arm won the edge?",
             "In the committed run, which arm has the highest process-verified pass@1 on the edge range? One of "
             + ", ".join(repr(a) for a in ARM_NAMES) + ".",
             Choice(ARM_NAMES, _best_edge_arm), "each arm's `by_range` holds a row with `range` edge.",
             "answer = None  # an arm's name"),
]
