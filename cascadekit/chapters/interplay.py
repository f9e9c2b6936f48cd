"""What the Part I RL chapters (04-07) share: prompt sets, the base's bands, an RL arm, its tables and figures.

Every finding starts from a cached base (:func:`cascadekit.training.pipeline.pretrained`),
measures or takes the op bands (:func:`base_bands`), trains GRPO arms as cached
stages (:func:`rl_arm`) and reports process-verified pass@1 and pass@n per band
and per op, before and after. Chapter modules import from here and from the
pipeline, never from each other.
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from cascadekit.claims import bootstrap_interval, claim_row
from cascadekit.bands import RANGES, Bands
from cascadekit.passk import pass_at_k
from cascadekit.evaluation.report import error_taxonomy, eval_problems, op_range, passk_table
from cascadekit.bands import measure_bands
from cascadekit.stages import StageOutput
from cascadekit.evaluation.report import evaluate_checkpoint
from cascadekit.training.pipeline import grpo
from cascadekit.profiles import SEED_ROLES, Profile, seed_inputs
from cascadekit.rewards import RewardFn, mixed_reward
from cascadekit.world import Mixture, MixtureComponent, Problem, sample_mixture

#: The reward of the kit's finding experiments 05 and 06: 0.2 outcome + 0.8 process.
#: Where the kit departs from the paper: its sections 3-5 train with the outcome
#: reward alone. At toy scale a right answer is often a lucky guess (answers are
#: small numbers, chapter 02) and says nothing about the names in the steps, so
#: an outcome reward would not reward, for instance, writing context B's
#: quantities correctly. The paper's best process-aware reward (finding 4) keeps
#: the outcome term and makes the reward track what the judge checks.
RL_REWARD: RewardFn = mixed_reward(0.2)


# ---------------------------------------------------------------------------
# Prompt sets
# ---------------------------------------------------------------------------


def rl_problems(profile: Profile, components: Sequence[tuple[str, tuple[int, int], float]], n: int,
                seed_offset: int = 0) -> list[Problem]:
    """``n`` distinct problems of the ``rl`` split from ``(context, (lo, hi), share)`` components (the data seed's)."""
    mixture = Mixture(tuple(MixtureComponent(c, ops, share) for c, ops, share in components))
    return sample_mixture(mixture, n, seed=profile.seeds.data + seed_offset, split="rl", style=profile.world.rendering)


def band_problems(profile: Profile, bands: Bands, band: str, n: int | None = None) -> list[Problem]:
    """``n`` (default ``rl.samples``) distinct ``rl``-split problems of one band, contexts in equal shares.

    The ``rl`` split is disjoint from pretraining and evaluation problems, and
    every band is drawn with the same seed, so arms differ only in difficulty; a
    shorter prompt list is a prefix of a longer one.
    """
    contexts = profile.world.contexts
    return rl_problems(profile, [(c, getattr(bands, band), 1 / len(contexts)) for c in contexts],
                       n or profile.rl.samples)


def ladder(profile: Profile) -> list[Problem]:
    """The evaluation ladder: ``problems_per_op`` held-out problems at every op of the profile's bands."""
    return eval_problems(profile, Bands.of_world(profile.world).ladder(), profile.world.contexts)


# ---------------------------------------------------------------------------
# Evaluation summaries
# ---------------------------------------------------------------------------


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


#: Per-sample flags counted per problem, so that paper-vs-run rows can resample whole problems.
COUNTED = ("correct", "n_dependency", "n_missing")


def per_problem(records: Sequence[dict]) -> list[dict[str, Any]]:
    """Per evaluated problem: op, band, samples ``n`` and how many samples were correct / had each error."""
    counts: dict[int, dict[str, Any]] = {}
    for r in records:
        row = counts.setdefault(r["problem"], {"problem": r["problem"], "op": r["op"], "range": r["range"],
                                               "context": r["context"], "n": 0, **dict.fromkeys(COUNTED, 0)})
        row["n"] += 1
        for key in COUNTED:
            row[key] += int(r[key] > 0)
    return [counts[k] for k in sorted(counts)]


def summarize(records: Sequence[dict[str, Any]], bands: Bands, n: int) -> dict[str, Any]:
    """Pass@1 and pass@n per band and per op, the error taxonomy per band, per-problem counts."""
    records = [{**r, "range": op_range(r["op"], bands)} for r in records]
    return {
        "samples_per_problem": n,
        "by_range": passk_rows(records, n, by=("range",)),
        "by_op": passk_rows(records, n, by=("op",)),
        "errors_by_range": error_taxonomy(records, by="range"),
        "per_problem": per_problem(records),
    }


def base_bands(profile: Profile, base: StageOutput, source: str) -> tuple[Bands, dict[str, Any]]:
    """Evaluate the base on the ladder, then fix the bands the arms use (``measured`` or the ``profile``'s).

    Returns the bands and the base's summary under them, with the wall time and
    a sentence on where the bands came from.
    """
    started = time.perf_counter()
    records = evaluate_checkpoint(base, ladder(profile), profile)
    n = profile.evaluation.samples
    bands, note = measure_bands(profile, passk_rows(records, n, by=("op",)), n, source)
    return bands, {"evaluation": summarize(records, bands, n), "eval_s": round(time.perf_counter() - started, 1),
                   "ranges": note, "bands": bands.to_dict()}


# ---------------------------------------------------------------------------
# One RL arm
# ---------------------------------------------------------------------------


def rl_arm(profile: Profile, base: StageOutput, bands: Bands, band: str, reward: RewardFn,
           work_dir: Path) -> dict[str, Any]:
    """GRPO from ``base`` on ``rl.samples`` prompts of one band with ``reward`` (a cached stage), then the ladder.

    Returns the training curves (one row per step), the wall times and the
    :func:`summarize` tables of the trained model.
    """
    problems = band_problems(profile, bands, band)
    trained = grpo(base, problems, reward, profile, work_dir)
    started = time.perf_counter()
    evaluation = summarize(evaluate_checkpoint(trained, ladder(profile), profile), bands, profile.evaluation.samples)
    return {
        "range": band, "ops": list(bands.ops(band)), "reward": reward.__name__, "prompts": len(problems),
        "steps": trained.metrics["steps"], "curves": trained.metrics["curves"],
        "train_s": trained.metrics["train_s"], "eval_s": round(time.perf_counter() - started, 1),
        "stage": trained.key, "evaluation": evaluation,
    }


def settings(profile: Profile, bands: Bands, reward: RewardFn) -> dict[str, Any]:
    """What a reader needs to compare runs: bands, RL and evaluation settings, the reward."""
    rl, ev = profile.rl, profile.evaluation
    return {
        "profile": profile.name, "seed": profile.seed, **seed_inputs(profile, *SEED_ROLES), "reward": reward.__name__,
        "ops": {name: list(bands.ops(name)) for name in RANGES},
        "rl": {"prompts_per_run": rl.samples, "group_size": rl.group_size, "prompts_per_step": rl.prompts_per_step,
               "steps": max(1, rl.samples // rl.prompts_per_step), "lr": rl.lr, "temperature": rl.temperature,
               "max_completion_length": rl.max_completion_length, "kl_beta": rl.kl_beta},
        "evaluation": {"problems_per_op": ev.problems_per_op, "samples": ev.samples,
                       "temperature": ev.temperature, "max_new_tokens": ev.max_new_tokens},
    }


def run_sizes(s: Mapping[str, Any], per: str, extra: str = "") -> str:
    """The RL and evaluation sizes of a run's :func:`settings`: "N prompts x G rollouts per <per> (...)"."""
    rl, ev = s["rl"], s["evaluation"]
    return (f"{rl['prompts_per_run']} prompts x {rl['group_size']} rollouts per {per} ({rl['steps']} steps, "
            f"lr {rl['lr']:g}{extra}); evaluation {ev['problems_per_op']} problems per op x {ev['samples']} samples")


# ---------------------------------------------------------------------------
# Tables across arms
# ---------------------------------------------------------------------------


def pass_rows(evaluations: Mapping[str, Mapping[str, Any]], by: str = "range") -> list[dict[str, Any]]:
    """One row per (model, group): ``pass@1`` and ``pass@n``, from ``{model label: evaluation}``."""
    rows = []
    for label, ev in evaluations.items():
        n = ev["samples_per_problem"]
        rows.extend({"model": label, by: r[by], "pass@1": r["pass@1"], "pass@n": r[f"pass@{n}"]}
                    for r in ev[f"by_{by}"])
    return rows


def wide_table(rows: Sequence[dict[str, Any]], values: Sequence[str] = ("pass@1", "pass@n")) -> pd.DataFrame:
    """A table for display: one row per model, one column per (value, band)."""
    frame = pd.DataFrame(rows).pivot(index="model", columns="range", values=list(values))
    models = list(dict.fromkeys(r["model"] for r in rows))
    return frame.reindex(models).reindex(columns=list(RANGES), level=1).round(3)


def deltas(rows: Sequence[dict[str, Any]], base: str = "base") -> list[dict[str, Any]]:
    """Each model's pass@1 and pass@n minus the base model's, per band (the chapters' headline)."""
    ref = {r["range"]: r for r in rows if r["model"] == base}
    return [{"model": r["model"], "range": r["range"],
             "d_pass@1": r["pass@1"] - ref[r["range"]]["pass@1"], "d_pass@n": r["pass@n"] - ref[r["range"]]["pass@n"]}
            for r in rows if r["model"] != base and r["range"] in ref]


def curve_summary(runs: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
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


def base_caveat(table: Sequence[dict[str, Any]]) -> str:
    """A warning when the base solves nothing at pass@n on any band: then no data range is at the edge."""
    if any(r["pass@n"] > 0 for r in table if r["model"] == "base"):
        return ""
    return (" The base model solves no evaluation problem (process-verified pass@n = 0 on every range): "
            "at this scale there is no edge of competence yet, every RL group scores all-zero under a "
            "process-verified reward, so rows that expect no change hold trivially and rows that expect a rise "
            "cannot be tested.")


def edge_caveat(table: Sequence[dict[str, Any]]) -> str:
    """A warning when the base solves nothing on the edge band but something in distribution.

    Then the edge band is beyond this base's competence: RL there has (almost)
    no signal, like the too-hard band, and the base's real edge of competence
    (pass@1 low, pass@n above 0) is in the in-distribution band.
    """
    base = {r["range"]: r for r in table if r["model"] == "base"}
    if "edge" not in base or base["edge"]["pass@n"] > 0 or not base.get("in_distribution", {}).get("pass@n"):
        return ""
    ind = base["in_distribution"]
    return (f" The base solves no edge problem (pass@n = 0 on the edge range) while in distribution it has "
            f"pass@1 {ind['pass@1']:.2f} and pass@n {ind['pass@n']:.2f}: the profile's edge range lies beyond this "
            "base's competence, so RL there had (almost) no signal, as on the too-hard range, and this base's "
            "edge of competence is the in-distribution range.")


# ---------------------------------------------------------------------------
# Paper-vs-run rows with intervals
# ---------------------------------------------------------------------------


def band_values(evaluation: Mapping[str, Any], band: str, k: int | None = None,
                key: str = "correct") -> dict[int, float]:
    """Per problem of one band: its process-verified pass@``k``, or (``k`` None) the share of samples with ``key``."""
    return {p["problem"]: float(pass_at_k(p["n"], p[key], k)) if k else p[key] / p["n"]
            for p in evaluation["per_problem"] if p["range"] == band}


def change_row(claim: str, paper: str, before: Mapping[str, Any], after: Mapping[str, Any], band: str,
               k: int | None, direction: str, key: str = "correct", **extra: Any) -> dict[str, Any]:
    """A claim on the change of pass@k (or of a per-sample rate) on one band between two models.

    Both models were scored on the same problems, so the interval is a paired
    bootstrap over the band's problems (:func:`cascadekit.claims.bootstrap_interval`);
    the verdict comes from it.
    """
    if "per_problem" not in before or "per_problem" not in after:  # metrics written before the counts were kept
        return {"claim": claim, "paper": paper, "this run": "no per-problem counts in these metrics",
                "95% interval": "", "verdict": "cannot tell", **extra}
    a, b = band_values(after, band, k, key), band_values(before, band, k, key)
    problems = sorted(set(a) & set(b))
    if not problems:
        return {"claim": claim, "paper": paper, "this run": "no problems in this band", "95% interval": "",
                "verdict": "cannot tell", **extra}
    estimate, low, high = bootstrap_interval([a[p] for p in problems], [b[p] for p in problems])
    return claim_row(claim, paper, estimate, low, high, direction, **extra)


def signal_row(claim: str, paper: str, curves: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A claim that RL got no signal: the per-step share of groups whose rewards differ, bootstrapped over steps."""
    shares = [1 - c["frac_reward_zero_std"] for c in curves
              if isinstance(c.get("frac_reward_zero_std"), (int, float)) and math.isfinite(c["frac_reward_zero_std"])]
    if not shares:
        return {"claim": claim, "paper": paper, "this run": "not logged", "95% interval": "", "verdict": "cannot tell"}
    estimate, low, high = bootstrap_interval(shares)
    return claim_row(claim, paper, estimate, low, high, "flat")


# ---------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------


def plot_passk(table: Sequence[dict[str, Any]], n: int, title: str = "pass@k per evaluation range") -> Figure:
    """Grouped bars: pass@1 (left panel) and pass@n (right) per band, one bar per model."""
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


def plot_curves(runs: Mapping[str, Mapping[str, Any]], title: str = "GRPO training curves") -> Figure:
    """Reward, ``frac_reward_zero_std``, completion length and entropy per step, one line per run."""
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
