"""Finding 4: a process-aware reward beats the outcome-only reward on hard problems.

An outcome reward pays for the right final answer however it was reached:
a guess, a skipped step, a wrong parent that happens to give the same number.
GRPO then reinforces whatever produced the answer (reward hacking). The paper
trains on the edge range (op 11-14) with three rewards and evaluates on the
hard range (op 15-20):

- outcome only: ``R = R_out``;
- mixed: ``R = 0.2 R_out + 0.8 R_pv`` (``R_pv`` the process score);
- strict: ``R = R_out`` only when every step is right (``R_pv = 1``), else 0.

The mixed reward lifts hard pass@1 from 5.6% to 9.9% and pass@128 from 23.2%
to 27.7% over outcome-only, and cuts the base model's 92.3% dependency-mismatch
rate by 10.5 points (outcome-only: 1.9). This module runs the same comparison
with :func:`cascadekit.experiments.edge_of_competence.rl_run` and reports
pass@k and the error taxonomy against the base. Regenerate the committed toy
results with::

    python -m cascadekit.experiments.process_rewards --scale toy --threads 1

Where the kit departs from the paper: the process score is the kit's
``process_reward`` (``max(0, 1 - penalty / |gold|)`` for a right answer, else 0;
see :mod:`cascadekit.rewards`), which also zeroes the process term for a wrong
answer; the toy profile runs far fewer RL and evaluation samples; and at the
CPU scales the edge and hard ranges are measured on the base, as in chapter 04
(:mod:`cascadekit.experiments.competence`).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Sequence

from matplotlib.figure import Figure

from cascadekit.experiments.common import run_from_command_line
from cascadekit.experiments.edge_of_competence import (
    base_caveat,
    base_checkpoint,
    chapter_profile,
    deltas,
    edge_caveat,
    run_sizes,
    evaluate_base,
    pass_rows,
    rl_run,
)
from cascadekit.profiles import Profile
from cascadekit.rewards import mixed_reward, outcome_reward, strict_reward

CHAPTER = "07_process_rewards"
RL_RANGE = "edge"
#: The error kinds the paper's Discussion 4 tracks, as :func:`error_taxonomy` names them.
STRUCTURAL_ERRORS = {"n_dependency": "dependency mismatch", "n_missing": "missing node"}

RewardFunc = Callable[..., list[float]]


def rewards() -> dict[str, RewardFunc]:
    """The three rewards compared, by the chapter's names for them."""
    return {"outcome": outcome_reward, "mixed": mixed_reward(0.2), "strict": strict_reward}


def hacking_probe(problems: Sequence, completions: dict[str, Callable]) -> list[dict[str, Any]]:
    """Mean reward of each kind of completion under each reward: the reward-hacking probe.

    ``completions`` maps a label to a function ``problem -> text`` (for example
    :func:`cascadekit.verify.mutations.answer_only`; one returning None for a
    problem skips it). An answer-only completion
    scores 1 under the outcome reward and less under the process-aware ones:
    that gap is what an outcome-trained policy can exploit.
    """
    rows = []
    for label, write in completions.items():
        pairs = [(text, p.to_dict()) for p in problems if (text := write(p)) is not None]
        texts, golds = [t for t, _ in pairs], [g for _, g in pairs]
        row: dict[str, Any] = {"completion": label}
        for name, fn in rewards().items():
            scores = fn(prompts=[""] * len(texts), completions=texts, gold=golds)
            row[name] = sum(scores) / len(scores)
        rows.append(row)
    return rows


def error_rows(evaluations: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (model, eval range): the share of samples with a dependency mismatch / a missing node."""
    return [{"model": label, "range": r["range"], **{name: r[key] for key, name in STRUCTURAL_ERRORS.items()},
             "process_accuracy": r["process_accuracy"]}
            for label, ev in evaluations.items() for r in ev["errors_by_range"]]


def run_process_rewards(profile: Profile, out_dir: str | Path) -> dict[str, Any]:
    """Finding 4: evaluate the base, then RL on the edge range once per reward in :func:`rewards`.

    Every run starts from the same cached base with the same prompts and seed;
    only the reward differs. Returns the runs, the pass@k table per (model,
    range), the changes against the base and the structural-error table.
    """
    out_dir = Path(out_dir)
    started = time.perf_counter()
    checkpoint = base_checkpoint(profile)
    profile, base = evaluate_base(profile, checkpoint)
    runs = {name: rl_run(profile, checkpoint, RL_RANGE, fn, out_dir / name) for name, fn in rewards().items()}
    evaluations = {"base": base["evaluation"], **{name: run["evaluation"] for name, run in runs.items()}}
    table = pass_rows(evaluations)
    rl = profile.rl
    return {
        "settings": {"profile": profile.name, "seed": profile.seed, "rl_range": RL_RANGE,
                     "base_checkpoint": checkpoint.name, "ranges": base["ranges"],
                     "ops": {name: list(profile.world.ops(name)) for name in ("in_distribution", "edge", "hard")},
                     "rl": {"prompts_per_run": rl.samples, "group_size": rl.group_size, "lr": rl.lr,
                            "steps": max(1, rl.samples // rl.prompts_per_step)},
                     "evaluation": {"problems_per_op": profile.evaluation.problems_per_op,
                                    "samples": profile.evaluation.samples}},
        "base": base, "runs": runs, "table": table, "deltas": deltas(table), "errors": error_rows(evaluations),
        "wall_s": round(time.perf_counter() - started, 1),
    }


# ---------------------------------------------------------------------------
# Figures and the paper-vs-run table
# ---------------------------------------------------------------------------


def plot_errors(errors: Sequence[dict[str, Any]], range_name: str = "hard") -> Figure:
    """Bars: the dependency-mismatch and missing-node rates on one eval range, one bar per model."""
    import matplotlib.pyplot as plt
    import numpy as np

    rows = [r for r in errors if r["range"] == range_name]
    fig, ax = plt.subplots(figsize=(6, 3.4))
    width = 0.8 / len(STRUCTURAL_ERRORS)
    for i, name in enumerate(STRUCTURAL_ERRORS.values()):
        ax.bar(np.arange(len(rows)) + (i - 0.5) * width, [r[name] for r in rows], width, label=name)
    ax.set_xticks(range(len(rows)), [r["model"] for r in rows])
    ax.set_ylabel("share of samples")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"structural errors on the {range_name} range")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def paper_vs_run(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The paper's section 6 numbers (op 15-20) beside this run's hard range, and the RL's own (edge) range.

    Absolute numbers are not comparable (a 100M model on op 15-20 against a
    toy model on the toy hard range); the comparison is the direction of each
    difference, which ``direction as paper`` states by sign.
    """
    n = result["base"]["evaluation"]["samples_per_problem"]
    value = {(r["model"], r["range"]): r for r in result["table"]}
    err = {(r["model"], r["range"]): r for r in result["errors"]}

    def gap(metric: str, model: str, other: str = "outcome", rng: str = "hard") -> float:
        return value[model, rng][metric] - value[other, rng][metric]

    def row(quantity: str, paper: str, this_run: str, diff: float | None, want_positive: bool = True) -> dict[str, Any]:
        ok = "" if diff is None else "yes" if (diff > 0 if want_positive else diff < 0) else "no"
        return {"quantity": quantity, "paper": paper, "this run": this_run, "direction as paper": ok}

    def pair(metric: str, model: str) -> str:
        a, b = value["outcome", "hard"][metric], value[model, "hard"][metric]
        return f"{a:.3f} -> {b:.3f} ({b - a:+.3f})"

    dep = STRUCTURAL_ERRORS["n_dependency"]
    dep_base = err["base", "hard"][dep]

    def dep_drop(model: str) -> float:
        return err[model, "hard"][dep] - dep_base

    def edge_errors(kind: str) -> dict[str, Any]:
        """The structural-error rate on the RL's own range, outcome -> mixed (strict and base beside them)."""
        rate = {m: err[m, "edge"][STRUCTURAL_ERRORS[kind]] for m in ("base", "outcome", "mixed", "strict")}
        return row(f"edge {STRUCTURAL_ERRORS[kind]} rate: outcome -> mixed (the RL's own range)",
                   "process reward cuts it (paper: on hard)",
                   f"{rate['outcome']:.3f} -> {rate['mixed']:.3f} (base {rate['base']:.3f}, strict {rate['strict']:.3f})",
                   rate["mixed"] - rate["outcome"], want_positive=False)

    return [
        row("hard pass@1: outcome -> mixed", "5.6% -> 9.9% (+4.3)", pair("pass@1", "mixed"), gap("pass@1", "mixed")),
        row(f"hard pass@{n} (paper @128): outcome -> mixed", "23.2% -> 27.7% (+4.5)", pair("pass@n", "mixed"),
            gap("pass@n", "mixed")),
        row("hard pass@1: outcome -> strict", "+4.1", pair("pass@1", "strict"), gap("pass@1", "strict")),
        row(f"hard pass@{n}: outcome -> strict", "+2.6", pair("pass@n", "strict"), gap("pass@n", "strict")),
        row("hard dependency-mismatch rate, base", "92.3%", f"{dep_base:.3f}", None),
        row("its change with the mixed reward", "-10.5", f"{dep_drop('mixed'):+.3f}", dep_drop("mixed"),
            want_positive=False),
        row("mixed cuts it more than outcome", "-10.5 vs -1.9",
            f"{dep_drop('mixed'):+.3f} vs {dep_drop('outcome'):+.3f}", dep_drop("mixed") - dep_drop("outcome"),
            want_positive=False),
        row("edge pass@1: outcome -> mixed (paper: op 2-14)", "+4.6 to +5.2",
            f"{gap('pass@1', 'mixed', rng='edge'):+.3f}",
            gap("pass@1", "mixed", rng="edge")),
        edge_errors("n_dependency"),
        edge_errors("n_missing"),
    ]


def mixed_caveat(result: dict[str, Any]) -> str:
    """A note when the mixed run's rewards were exactly 0.2 x the outcome run's at every step.

    Then no rollout earned any process credit, the process term was 0, and
    GRPO's group standardisation ``(r - mean) / std`` cancels the factor 0.2:
    both runs took the same steps, and "mixed vs outcome" compares a run with itself.
    """
    outcome, mixed = (result["runs"][name]["curves"] for name in ("outcome", "mixed"))
    if len(outcome) != len(mixed) or any(abs(m["reward"] - 0.2 * o["reward"]) > 1e-9 for o, m in zip(outcome, mixed)):
        return ""
    return (" At every step the mixed reward was exactly 0.2 x the outcome reward: no rollout earned process "
            "credit, and the group-standardised advantages of the two runs were the same, so they trained alike.")


def run_notes(result: dict[str, Any]) -> str:
    """The settings behind the numbers."""
    s = result["settings"]
    return (f"{s['profile'].capitalize()} run: RL on the edge range (ops {s['ops']['edge']}), hard range ops "
            f"{s['ops']['hard']}; {run_sizes(s, 'reward')} (paper: ~200K RL prompts, pass@128 on op 15-20); "
            f"base: cached pretrained checkpoint {s['base_checkpoint']}. {s.get('ranges', '')} "
            f"A change of a few points is within sampling noise at this evaluation size."
            + base_caveat(result["table"]) + edge_caveat(result["table"]) + mixed_caveat(result))


def write_results(result: dict[str, Any], command: str, root: Path | None = None) -> None:
    """Metrics JSON, figures and ``paper_vs_run.md`` under ``data/results/07_process_rewards``."""
    from cascadekit.experiments.edge_of_competence import plot_curves, plot_passk
    from cascadekit.results import save_chapter_results

    n = result["base"]["evaluation"]["samples_per_problem"]
    figures = {"passk": plot_passk(result["table"], n, "pass@k after RL on the edge range, by reward"),
               "errors": plot_errors(result["errors"]), "errors_edge": plot_errors(result["errors"], "edge"),
               "curves": plot_curves(result["runs"], "GRPO training curves, by reward")}
    save_chapter_results(CHAPTER, {**result, "paper_vs_run": paper_vs_run(result)}, figures,
                         "Process rewards: paper vs this run", paper_vs_run(result), command, run_notes(result), root)


def main(argv: Sequence[str] | None = None) -> None:
    """Run finding 4 at a scale and write the committed results."""
    run_from_command_line(argv, "cascadekit.experiments.process_rewards", main.__doc__, chapter_profile, run_process_rewards,
                          write_results, lambda r: {"table": r["table"], "errors": r["errors"], "paper_vs_run": paper_vs_run(r), "wall_s": r["wall_s"]}, CHAPTER)

if __name__ == "__main__":
    main()
