"""Finding 3: one compute budget, split between mid-training and RL.

The paper (section 5, appendix A.10) prices both stages in supervised-token
equivalents (:mod:`cascadekit.compute`): mid-training on ``T`` tokens costs
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
  the base, as in chapter 04 (:func:`arm_ranges`): the toy model's edge lies
  inside its pretraining range.
- Mid-training peaks at the learning rate where pretraining ended
  (:func:`cascadekit.training.pretrain.midtrain_config`), the kit's choice: at
  toy scale a restart at pretraining's peak left every mixed arm below both
  pure arms (``data/results/06_fixed_budget/peak-lr/``).

Run the toy reproduction (writes ``data/results/06_fixed_budget/``)::

    python -m cascadekit.experiments.budget --scale toy --threads 1
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence


from cascadekit.atomic import atomic_write_text
from cascadekit.compute import ARMS, BudgetSplit, budget_arms, rl_cost_per_prompt
from cascadekit.evaluation.report import RANGES
from cascadekit.experiments.common import (add_out_argument, eval_problems, evaluate_rows, load_model, passk_rows,
                                        rl_problems, run_rl)
from cascadekit.profiles import (Profile, add_scale_arguments, apply_overrides, load_profile, parse_overrides,
                                 set_threads)
from cascadekit.results import default_root, markdown_table
from cascadekit.world import Problem

CHAPTER = "06_fixed_budget"
EVAL_RANGES = ("edge", "hard")

#: Per-scale settings of this chapter (a user's overrides win). Toy: twice the profile's
#: RL learning rate, and 32 evaluation problems per op x 16 samples (pass@16 stands for
#: the paper's pass@128), as in chapters 04 and 07.
CHAPTER_OVERRIDES: dict[str, dict[str, Any]] = {
    "toy": {"rl.lr": 1e-4, "evaluation.problems_per_op": 32, "evaluation.samples": 16},
}
#: The budget in units of :func:`step_unit`. A multiple of 10 makes the 0.2/0.5/0.8
#: splits whole units. Toy: a unit is 16 mid-training steps = 3 RL steps of 8 prompts
#: (131,072 token-equivalents), so 10 units = 1,310,720: 160 mid-training steps or
#: 240 RL prompts x 8 rollouts.
BUDGET_UNITS = {"smoke": 10, "toy": 10, "paper": 1000, "full": 1000}

PAPER = {
    "full_midtrain": "strong OOD-edge (near-distribution) pass@1",
    "light_rl": "best OOD-edge pass@1 (Figure 6)",
    "medium_rl": "in between",
    "heavy_rl": "best OOD-hard pass@1 and pass@128 of the mixed arms",
    "full_rl": "mixed arms beat it by +10.8 points OOD-hard pass@128 on average (Figure 1); "
               "wins OOD-hard pass@128 at budgets >= 8.4B (A.10)",
}


def chapter_profile(profile: Profile, overrides: Mapping[str, Any] | None = None) -> Profile:
    """``profile`` with this chapter's per-scale settings, then the caller's ``overrides``, applied."""
    return apply_overrides(apply_overrides(profile, CHAPTER_OVERRIDES.get(profile.name, {})), overrides or {})


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


def plan_budget(profile: Profile, units: int | None = None) -> list[BudgetSplit]:
    """The five arms under ``units`` step units (default :data:`BUDGET_UNITS`), each spent exactly.

    Raises ``ValueError`` if an arm's split is not a whole number of steps of
    both trainers (choose ``units`` as a multiple of 10).
    """
    units = units or BUDGET_UNITS[profile.name]
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


def budget_rl_problems(profile: Profile, n: int) -> list[Problem]:
    """``n`` RL prompts on the edge range, contexts in equal shares (arms take a prefix)."""
    contexts = profile.world.contexts
    share = 1 / len(contexts)
    return rl_problems(profile, [(c, profile.world.ops_edge, share) for c in contexts], n)


def budget_eval_problems(profile: Profile) -> list[Problem]:
    """Held-out problems at every edge and hard op, contexts cycled."""
    ops = [op for name in EVAL_RANGES for op in profile.world.ops(name)]
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


def midtrain_arm(profile: Profile, base: Path, tokens: int, work_dir: Path) -> tuple[Path, int, float]:
    """Mid-train ``base`` on ``tokens`` (20% in-distribution, 80% edge); return (checkpoint, tokens, seconds).

    A finished mid-training already in ``work_dir`` (its wall time recorded
    last) is reused, so a cut-short run resumes without redoing it.
    """
    from cascadekit.training.pretrain import MIDTRAIN_MIXTURE, midtrain

    if not tokens:
        return base, 0, 0.0
    dest = work_dir / "midtrained"
    timing = work_dir / "midtrain_wall_s.json"
    if not timing.is_file():
        shutil.rmtree(dest, ignore_errors=True)
        started = time.perf_counter()
        midtrain(profile, base, dest, work_dir / "midtrain-run", tokens, MIDTRAIN_MIXTURE)
        atomic_write_text(timing, json.dumps(round(time.perf_counter() - started, 1)))
    return dest, tokens // midtrain_step_tokens(profile) * midtrain_step_tokens(profile), json.loads(timing.read_text())


def run_arm(profile: Profile, split: BudgetSplit, base: Path, prompts: Sequence[Problem],
            problems: Sequence[Problem], work_dir: Path) -> dict[str, Any]:
    """Mid-train, then RL, then evaluate one arm; its plan, its measured spend, pass@k and wall times."""
    from cascadekit.tokenizer import load_tokenizer

    work_dir.mkdir(parents=True, exist_ok=True)
    checkpoint, midtrain_tokens, midtrain_s = midtrain_arm(profile, base, split.midtrain_tokens, work_dir)
    tokenizer = load_tokenizer(checkpoint)
    model = load_model(checkpoint)
    curves: list[dict[str, Any]] = []
    rl_s = 0.0
    if split.rl_prompts:
        rl = run_rl(model, tokenizer, prompts[: split.rl_prompts], profile, work_dir / "rl")
        model, curves, rl_s = rl.model, rl.curves.to_dict(orient="records"), rl.train_seconds
    started = time.perf_counter()
    by_op_records, by_op = evaluate_rows(model, tokenizer, problems, profile, by=("op",))
    return {
        "arm": split.arm,
        "planned": planned_row(split),
        "actual": {"midtrain_tokens": midtrain_tokens,
                   **actual_rl_spend(profile, curves, prompts[: split.rl_prompts], tokenizer)},
        "by_op": by_op,
        "by_range": passk_rows(by_op_records, profile.evaluation.samples, by=("range",)),
        "rl_curves": curves,
        "midtrain_wall_s": round(midtrain_s, 1),
        "rl_wall_s": round(rl_s, 1),
        "eval_wall_s": round(time.perf_counter() - started, 1),
    }


def evaluate_base(profile: Profile, base: Path, problems: Sequence[Problem]) -> dict[str, Any]:
    """The shared starting point's pass@k on the same problems, for reference."""
    from cascadekit.tokenizer import load_tokenizer

    records, by_op = evaluate_rows(load_model(base), load_tokenizer(base), problems, profile, by=("op",))
    return {"by_op": by_op, "by_range": passk_rows(records, profile.evaluation.samples, by=("range",))}


def arm_ranges(profile: Profile, base: Path, work_dir: Path) -> tuple[Profile, str]:
    """The profile with the op ranges every arm uses, and where they came from.

    As in chapter 04: measured on the base at the CPU scales
    (:data:`cascadekit.experiments.edge_of_competence.RANGES_FROM`), so that
    mid-training and RL target this base's real edge. Measured once and kept in
    ``work_dir``, so arms run in separate processes share the same ranges.
    """
    from cascadekit.experiments.competence import with_bands
    from cascadekit.experiments.edge_of_competence import evaluate_base as evaluate_ladder

    def measure() -> dict[str, Any]:
        ranged, ladder = evaluate_ladder(profile, base)
        return {"ops": {name: list(getattr(ranged.world, f"ops_{name}")) for name in RANGES},
                "note": ladder["ranges"]}

    found = stored(work_dir / "ranges.json", measure)
    return with_bands(profile, found["ops"]), found["note"]


def stored(path: Path, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``compute()``'s result, kept as JSON at ``path``: read back instead of recomputed when present."""
    if path.is_file():
        return json.loads(path.read_text())
    result = compute()
    atomic_write_text(path, json.dumps(result, default=str))
    return result


def run(profile: Profile, work_dir: str | Path, units: int | None = None,
        arms: Sequence[str] | None = None) -> dict[str, Any]:
    """Every arm (or those named in ``arms``) from the profile's cached pretrained base; the chapter's metrics.

    Each arm's metrics and the base's evaluation are kept under ``work_dir``
    and reused, so arms can run in separate processes (``arms``) and a final
    call gathers them. The base is evaluated only when every arm is asked for.
    """
    from cascadekit.training.pretrain import cached_pretrained, pretrain_key

    work_dir = Path(work_dir)
    full_plan = plan_budget(profile, units)
    plan = [s for s in full_plan if arms is None or s.arm in arms]
    base, base_key = cached_pretrained(profile), pretrain_key(profile)
    profile, ranges_note = arm_ranges(profile, base, work_dir)  # new ranges, so keys come first
    prompts = budget_rl_problems(profile, max(s.rl_prompts for s in full_plan) or 1)
    problems = budget_eval_problems(profile)
    arm_metrics = [stored(work_dir / s.arm / "metrics.json",
                          lambda s=s: run_arm(profile, s, base, prompts, problems, work_dir / s.arm)) for s in plan]
    return {
        "profile": profile.to_dict(),
        "chapter_overrides": CHAPTER_OVERRIDES.get(profile.name, {}),
        "base_checkpoint_key": base_key,
        "samples_per_problem": profile.evaluation.samples,
        "step_unit": step_unit(profile),
        "budget_units": units or BUDGET_UNITS[profile.name],
        "ranges": ranges_note,
        "base": stored(work_dir / "base.json", lambda: evaluate_base(profile, base, problems)) if arms is None else None,
        "arms": arm_metrics,
        # the arms' own compute, so a call that only gathers stored arms reports the run, not itself
        "wall_s": round(sum(a["midtrain_wall_s"] + a["rl_wall_s"] + a["eval_wall_s"] for a in arm_metrics), 1),
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
    import matplotlib.pyplot as plt

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
    import matplotlib.pyplot as plt

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


def verdict(metrics: Mapping[str, Any]) -> str:
    """Did the direction reproduce? Mid-training-heavy arms ahead on edge pass@1, RL-heavy arms on hard pass@n.

    Compares the best arm of each group; stated from the numbers alone
    (including "cannot tell" when every score is 0).
    """
    n = metrics["samples_per_problem"]
    scores = {a["arm"]: a["by_range"] for a in metrics["arms"]}
    if not all(arm in scores for arm in MIDTRAIN_HEAVY + RL_HEAVY):
        return f"Incomplete: only the arms {', '.join(scores)} were run."
    lines = []
    for range_name, k, favoured, other in (("edge", 1, MIDTRAIN_HEAVY, RL_HEAVY), ("hard", n, RL_HEAVY, MIDTRAIN_HEAVY)):
        best = {group: max(_range_value(scores[a], range_name, f"pass@{k}") for a in group) for group in (favoured, other)}
        label = f"{range_name} pass@{k}"
        if best[favoured] == best[other] == 0:
            lines.append(f"{label}: cannot tell, every arm scores 0.")
        elif best[favoured] > best[other]:
            lines.append(f"{label}: reproduced, {'/'.join(favoured)} best {best[favoured]:.3f} "
                         f"against {best[other]:.3f}.")
        else:
            lines.append(f"{label}: not reproduced, {'/'.join(favoured)} best {best[favoured]:.3f} "
                         f"against {'/'.join(other)} {best[other]:.3f}.")
    return " ".join(lines)


# ---------------------------------------------------------------------------
# Command line: the committed toy run
# ---------------------------------------------------------------------------


def write_results(metrics: dict[str, Any], command: str, notes: str = "", root: Path | None = None) -> None:
    """Metrics, figures and the paper-vs-run table under ``data/results/06_fixed_budget/``."""
    from cascadekit.results import save_chapter_results

    spend = "### Budget spent per arm\n\n" + markdown_table(spend_rows(metrics))
    save_chapter_results(CHAPTER, metrics, {"scores": plot_scores(metrics), "spend": plot_spend(metrics)},
                         "Finding 3: one budget split between mid-training and RL", paper_vs_run_rows(metrics),
                         command, f"{verdict(metrics)} {metrics.get('ranges', '')}\n\n{spend}\n\n{notes}", root)


def main(argv: Sequence[str] | None = None) -> None:
    """Run every arm at a scale and write the chapter's results."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    add_scale_arguments(parser)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--units", type=int, default=0, help="budget in step units (a multiple of 10)")
    parser.add_argument("--work", type=Path, default=Path("runs/06_fixed_budget"))
    parser.add_argument("--notes", default="", help="text under the paper-vs-run table")
    add_out_argument(parser)
    parser.add_argument("--arms", nargs="+", choices=list(ARMS),
                        help="run only these arms, keeping their metrics in --work (a final call without it gathers them)")
    args = parser.parse_args(argv)
    set_threads(args.threads)
    profile = chapter_profile(load_profile(args.scale, {"seed": args.seed}), parse_overrides(args.overrides))
    print(profile.summary(), file=sys.stderr, flush=True)
    metrics = run(profile, args.work, args.units or None, args.arms)
    if args.arms:
        print(f"arms {args.arms} done; their metrics are under {args.work}", file=sys.stderr)
        return
    command = " ".join(["python -m cascadekit.experiments.budget", *(sys.argv[1:] if argv is None else argv)])
    write_results(metrics, command, args.notes, args.out or default_root(args.scale))
    print(markdown_table(score_rows(metrics)))
    print(markdown_table(spend_rows(metrics)))


if __name__ == "__main__":
    main()
