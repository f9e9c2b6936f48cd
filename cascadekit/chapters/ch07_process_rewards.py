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
with :func:`cascadekit.chapters.interplay.rl_arm` and reports pass@k and the
error taxonomy against the base. Regenerate the committed toy results with::

    cascadekit experiment 07 --scale toy --threads 1

Where the kit departs from the paper: the process score is the kit's
``process_reward`` (``max(0, 1 - penalty / |gold|)`` for a right answer, else 0;
see :mod:`cascadekit.rewards`), which also zeroes the process term for a wrong
answer; the toy profile runs far fewer RL and evaluation samples; and at the
CPU scales the edge and hard ranges are measured on the base, as in chapter 04
(:mod:`cascadekit.bands`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from cascadekit.chapters import ChapterConfig
from cascadekit.exercises import Exercise
from cascadekit.exercises.answers import Case, Choice, Function, Number
from cascadekit.exercises.committed import committed_metrics
from cascadekit.chapters.interplay import (base_bands, base_caveat, change_row, deltas, edge_caveat, pass_rows,
                                           plot_curves, plot_passk, rl_arm, run_sizes, settings)
from cascadekit.formatting import fill, op_span
from cascadekit.results import markdown_table
from cascadekit.training.pipeline import pretrained
from cascadekit.rewards import RewardFn, mixed_reward, outcome_reward, outcome_score, process_score, strict_reward
from cascadekit.verify.process import ProcessVerdict

RL_RANGE = "edge"
#: Structural errors the chapter tracks: per-sample flag, name in tables.
STRUCTURAL_ERRORS = {"n_dependency": "dependency mismatch", "n_missing": "missing node"}


def rewards() -> dict[str, RewardFn]:
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


def run(config: ChapterConfig, work_dir: str | Path) -> dict[str, Any]:
    """Finding 4: evaluate the base, then RL on the edge band once per reward in :func:`rewards`.

    Every run starts from the same cached base with the same prompts and seed;
    only the reward differs. Returns the runs, the pass@k table per (model,
    band), the changes against the base and the structural-error table.
    """
    profile, work_dir = config.profile, Path(work_dir)
    base = pretrained(profile)
    bands, base_eval = base_bands(profile, base, config.range_source)
    runs = {name: rl_arm(profile, base, bands, RL_RANGE, fn, work_dir / name) for name, fn in rewards().items()}
    evaluations = {"base": base_eval["evaluation"], **{name: r["evaluation"] for name, r in runs.items()}}
    table = pass_rows(evaluations)
    return {
        "settings": {**settings(profile, bands, strict_reward), "reward": "per run", "rl_range": RL_RANGE,
                     "base_checkpoint": base.key, "ranges": base_eval["ranges"],
                     "chapter_settings": dict(config.settings), "overrides": dict(config.overrides)},
        "base": base_eval, "runs": runs, "table": table, "deltas": deltas(table), "errors": error_rows(evaluations),
    }


def plot_errors(errors: Sequence[dict[str, Any]], range_name: str = "hard") -> Figure:
    """Bars: the dependency-mismatch and missing-node rates on one eval range, one bar per model."""
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


RESULTS_TITLE = "Process rewards: paper vs this run"


def claims(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The paper's section 6 numbers (op 15-20) beside this run's hard band, and the RL's own (edge) band.

    Absolute numbers are not comparable (a 100M model on op 15-20 against a toy
    model on the toy hard band); each row is the change between two models scored
    on the same problems, with a paired-bootstrap 95% interval and its verdict.
    """
    ev = {"base": result["base"]["evaluation"], **{m: r["evaluation"] for m, r in result["runs"].items()}}
    n = ev["base"]["samples_per_problem"]
    dep = "n_dependency"

    def gap(claim: str, paper: str, before: str, after: str, band: str, k: int | None, direction: str,
            key: str = "correct") -> dict[str, Any]:
        return change_row(claim, paper, ev[before], ev[after], band, k, direction, key)

    return [
        gap("hard pass@1: outcome -> mixed", "5.6% -> 9.9% (+4.3)", "outcome", "mixed", "hard", 1, "up"),
        gap(f"hard pass@{n} (paper @128): outcome -> mixed", "23.2% -> 27.7% (+4.5)", "outcome", "mixed", "hard", n,
            "up"),
        gap("hard pass@1: outcome -> strict", "+4.1", "outcome", "strict", "hard", 1, "up"),
        gap(f"hard pass@{n}: outcome -> strict", "+2.6", "outcome", "strict", "hard", n, "up"),
        gap("hard dependency-mismatch rate: base -> mixed", "92.3% at the base, -10.5", "base", "mixed", "hard", None,
            "down", dep),
        gap("hard dependency-mismatch rate: outcome -> mixed", "-10.5 vs -1.9 against the base", "outcome", "mixed",
            "hard", None, "down", dep),
        gap("edge pass@1: outcome -> mixed (paper: op 2-14)", "+4.6 to +5.2", "outcome", "mixed", "edge", 1, "up"),
        gap("edge dependency-mismatch rate: outcome -> mixed (the RL's own band)", "process reward cuts it",
            "outcome", "mixed", "edge", None, "down", dep),
        gap("edge missing-node rate: outcome -> mixed (the RL's own band)", "process reward cuts it",
            "outcome", "mixed", "edge", None, "down", "n_missing"),
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


def notes(result: dict[str, Any]) -> str:
    """The settings behind the numbers."""
    s = result["settings"]
    return (f"{s['profile'].capitalize()} run: RL on the edge range (ops {s['ops']['edge']}), hard range ops "
            f"{s['ops']['hard']}; {run_sizes(s, 'reward')} (paper: ~200K RL prompts, pass@128 on op 15-20); "
            f"base: cached pretrained checkpoint {s['base_checkpoint']}. {s.get('ranges', '')} "
            f"Each row compares two models on the same evaluation problems, with a 95% interval from a paired "
            f"bootstrap over problems." + base_caveat(result["table"]) + edge_caveat(result["table"])
            + mixed_caveat(result))


def figures(result: dict[str, Any]) -> dict[str, Figure]:
    """pass@k by reward, the structural errors on the hard and the edge range, and the GRPO curves."""
    n = result["base"]["evaluation"]["samples_per_problem"]
    return {"passk": plot_passk(result["table"], n, "pass@k after RL on the edge range, by reward"),
            "errors": plot_errors(result["errors"]), "errors_edge": plot_errors(result["errors"], "edge"),
            "curves": plot_curves(result["runs"], "GRPO training curves, by reward")}


def committed(result: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The metrics with the claims beside them."""
    return {**result, "paper_vs_run": claims(result)}


# ---------------------------------------------------------------------------
# The committed run in prose (the notebook shows the result, not the code)
# ---------------------------------------------------------------------------


def _row(metrics: Mapping[str, Any], model: str, band: str) -> dict[str, Any]:
    """A model's committed by-range row, with its error rates over the band's problems beside it."""
    evaluation = (metrics["base"] if model == "base" else metrics["runs"][model])["evaluation"]
    row = next(r for r in evaluation["by_range"] if r["range"] == band)
    return {**row, **next(e for e in metrics["errors"] if e["model"] == model and e["range"] == band)}


def _op_row(metrics: Mapping[str, Any], model: str, op: int) -> dict[str, Any]:
    evaluation = (metrics["base"] if model == "base" else metrics["runs"][model])["evaluation"]
    return next(r for r in evaluation["by_op"] if r["op"] == op)


def _ops(metrics: Mapping[str, Any], band: str) -> str:
    """A band's ops as the run measured them (``settings.ops``), in prose: ops 3-5, or op 2."""
    ops = metrics["settings"]["ops"][band]
    return op_span(min(ops), max(ops))


def story_claims(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Mixed against outcome on the same problems, the rows the chapter's prose quotes (paired bootstrap)."""
    k = metrics["base"]["evaluation"]["samples_per_problem"]
    outcome, mixed = (metrics["runs"][m]["evaluation"] for m in ("outcome", "mixed"))
    return [
        change_row("hard pass@1: outcome -> mixed", "+4.3 points", outcome, mixed, "hard", 1, "up"),
        change_row(f"hard pass@{k} (paper @128): outcome -> mixed", "+4.5 points", outcome, mixed, "hard", k, "up"),
        change_row("edge pass@1: outcome -> mixed (paper: op 2-14)", "+4.6 to +5.2 points", outcome, mixed, "edge",
                   1, "up"),
        change_row("edge dependency mismatch: outcome -> mixed", "process reward cuts it (paper: on hard)", outcome,
                   mixed, "edge", None, "down", "n_dependency"),
        change_row("edge missing node: outcome -> mixed", "process reward cuts it (paper: on hard)", outcome, mixed,
                   "edge", None, "down", "n_missing"),
    ]


def _signal_table(metrics: Mapping[str, Any]) -> str:
    """Per reward: the share of groups with signal, and the mean reward over the first and the last quarter."""
    rows = []
    for model in MODELS[1:]:
        curves = metrics["runs"][model]["curves"]
        quarter = max(1, len(curves) // 4)
        first, last = curves[:quarter], curves[-quarter:]
        rows.append({"reward": model,
                     "groups with signal": f"{1 - sum(c['frac_reward_zero_std'] for c in curves) / len(curves):.0%}",
                     "mean reward, first -> last quarter": f"{np.mean([c['reward'] for c in first]):.2f} -> "
                                                           f"{np.mean([c['reward'] for c in last]):.2f}"})
    return markdown_table(rows)


def _edge_table(metrics: Mapping[str, Any]) -> str:
    """Edge pass@1 / pass@k, error rates and op 2 pass@1 per model."""
    k = metrics["base"]["evaluation"]["samples_per_problem"]
    return markdown_table([{
        "model": m,
        f"edge pass@1 / pass@{k}": f"{_row(metrics, m, 'edge')['pass@1']:.2f} / {_row(metrics, m, 'edge')[f'pass@{k}']:.2f}",
        "edge dependency mismatch": f"{_row(metrics, m, 'edge')['dependency mismatch']:.3f}",
        "edge missing node": f"{_row(metrics, m, 'edge')['missing node']:.3f}",
        "op 2 pass@1": f"{_op_row(metrics, m, 2)['pass@1']:.2f}",
    } for m in MODELS])


_STORY = """
**The committed run.** It trained on the base's measured edge ({edge_ops}; chapter 04 shows how
the bands are found), with {{runs.outcome.prompts}} prompts x {{settings.rl.group_size}} rollouts per
reward and {{runs.outcome.steps}} GRPO steps. Evaluation used {{settings.evaluation.problems_per_op}}
problems per op x {{settings.evaluation.samples}} samples. It took {{minutes:.0f}} minutes on one of 2 shared cores.

**The hard range cannot answer.** Hard ({hard_ops}) stayed at pass@{{k}} = 0 for the base and for
every reward, so the paper's hard-range rows read 0 -> 0: *cannot tell*, not a failure to reproduce.

**The training range (edge, {edge_ops}) can.** All three rewards had signal:

{signal}

{edge_table}

* **Every reward cut dependency mismatches on the edge, the process-aware ones more.** Against
  the base, the rate moved {{dep_outcome:+.0f}} points under outcome, {{dep_mixed:+.0f}} under mixed and
  {{dep_strict:+.0f}} under strict: the paper's direction (-1.9 under outcome against -10.5 under
  mixed, on its hard range). Mixed against outcome: {{edge_dep.this run:+.3f}}, interval
  {{edge_dep.95% interval}}: **{{edge_dep.verdict}}**.
* **Outcome reward hacks.** Answer-only pass@1 at op 3 rose from
  {{base.evaluation.by_op[op=3].answer_pass@1:.2f}} to {{runs.outcome.evaluation.by_op[op=3].answer_pass@1:.2f}} under
  outcome, far more than process-verified pass@1 did. Under outcome, the share of edge samples that
  skip a node rose from {{base.evaluation.errors_by_range[range=edge].n_missing:.2f}} to
  {{runs.outcome.evaluation.errors_by_range[range=edge].n_missing:.2f}}. Chapter 04's probe shows another shortcut:
  two leaf values swapped where a sum hides the swap. Outcome reward pays both.
* **Mixed skips fewer nodes than outcome.** Its missing-node rate on the edge was {{mixed_missing:.2f}}
  against outcome's {{outcome_missing:.2f}} (mixed against outcome {{edge_missing.this run:+.3f}}, interval
  {{edge_missing.95% interval}}: **{{edge_missing.verdict}}**). The kit's process term, `1 - P/|V|`, takes off
  one penalty point per skipped node, so a solution that skips one node still keeps most of its credit;
  strict pays nothing for it. (The run before this one, on a base built with 2 threads instead of 1,
  had mixed's rate rising almost as much as outcome's: this effect is not robust to the base.)
* **Mixed against outcome on edge pass@1: {{edge_p1.verdict}}.** Mixed's edge over outcome is
  {{edge_p1.this run:+.3f}} with a 95% interval of {{edge_p1.95% interval}}: the interval spans changes
  of either sign many times larger than the estimate, so this run cannot tell whether mixed beats
  outcome, against the paper's +4.6 to +5.2 points. Edge pass@{{k}} fell a little under every reward
  ({{base.evaluation.by_range[range=edge].pass@16:.2f}} -> {{runs.outcome.evaluation.by_range[range=edge].pass@16:.2f}} under outcome).
* **Strict lost op 2.** pass@1 there fell from {{base.evaluation.by_op[op=2].pass@1:.2f}} to
  {{runs.strict.evaluation.by_op[op=2].pass@1:.2f}}. It is the same run as chapter 04's edge arm. Outcome and
  mixed kept op 2.
"""

_LONGER_BASE = """
**The lever tried: a base trained twice as long** (chapter 03's `toy-32M`; `base-32M/` in the
results folder, {{minutes32:.0f}} min). Same bands; hard still 0 for every model. On the edge:

{edge_table32}

The stronger base makes far fewer dependency mismatches on the edge, so there is less to cut;
the differences between rewards are a point or two, within noise.
"""


def story(metrics: Mapping[str, Any], longer_base: Mapping[str, Any] | None = None) -> str:
    """The committed run told in Markdown, every number read from ``metrics`` (and from ``longer_base``, the
    same chapter rerun on chapter 03's 32M-token base, when given): the notebook shows only the text."""
    dep = {m: _row(metrics, m, "edge")["dependency mismatch"] for m in MODELS}
    facts = {
        **metrics, "k": metrics["base"]["evaluation"]["samples_per_problem"], "minutes": metrics["wall_s"] / 60,
        **{f"dep_{m}": (dep[m] - dep["base"]) * 100 for m in MODELS[1:]},
        **dict(zip(("edge_p1", "edge_dep", "edge_missing"), story_claims(metrics)[2:])),
        "mixed_missing": _row(metrics, "mixed", "edge")["missing node"],
        "outcome_missing": _row(metrics, "outcome", "edge")["missing node"],
    }
    text = fill(_STORY.format(edge_ops=_ops(metrics, "edge"), hard_ops=_ops(metrics, "hard"),
                                signal=_signal_table(metrics), edge_table=_edge_table(metrics)), facts)
    if longer_base is None:
        return text
    return text + fill(_LONGER_BASE.format(edge_table32=_edge_table(longer_base)),
                         {"minutes32": longer_base["wall_s"] / 60})


# ---------------------------------------------------------------------------
# Exercises
# ---------------------------------------------------------------------------


def _verdict(n_gold: int, n_missing: int, n_dependency: int, n_value: int, n_extra: int,
             answer_correct: bool) -> ProcessVerdict:
    return ProcessVerdict(correct=False, answer_correct=answer_correct, process_accuracy=0.0, n_gold=n_gold,
                          n_missing=n_missing, n_dependency=n_dependency, n_value=n_value, n_extra=n_extra,
                          answer_mismatch=not answer_correct, reason="")


def _mixed_one_mistake() -> float:
    verdict = _verdict(5, 0, 1, 0, 0, True)
    return 0.2 * outcome_score(verdict) + 0.8 * process_score(verdict)


def _process_score(n_gold: int, n_missing: int, n_dependency: int, n_value: int, n_extra: int,
                   answer_correct: bool) -> float:
    return process_score(_verdict(n_gold, n_missing, n_dependency, n_value, n_extra, answer_correct))


def _verdict_cases() -> list[Case]:
    return [(5, 0, 0, 0, 0, True), (5, 0, 1, 0, 0, True), (5, 1, 1, 0, 0, True), (4, 0, 0, 0, 2, True),
            (3, 0, 0, 0, 9, True), (6, 2, 2, 3, 0, True), (5, 0, 0, 0, 0, False), (2, 0, 0, 1, 0, True)]


MODELS = ("base", *rewards())  #: the models the chapter compares: the base and one RL run per reward


def _fewest_dependency_errors() -> str:
    errors = committed_metrics("07_process_rewards")["errors"]
    return min((r for r in errors if r["range"] == "edge"), key=lambda r: r["dependency mismatch"])["model"]


EXERCISES = [
    Exercise("07.1", "Change the reward, predict the score",
             "A solution has the right answer and one dependency mismatch, on a gold graph of 5 nodes. What does "
             "the mixed reward with α = 0.2 (0.2 outcome + 0.8 process) give it? Predict before computing.",
             Number(_mixed_one_mistake), "outcome is 1 (the answer is right); process is 1 - penalty / |gold|.",
             "answer = None  # a number"),
    Exercise("07.2", "Implement the process score",
             "Write `process_score(n_gold, n_missing, n_dependency, n_value, n_extra, answer_correct)` as the kit "
             "defines it (see `penalty` and `process_score` above).",
             Function(_verdict_cases, _process_score),
             "a wrong answer scores 0; otherwise 1 - penalty / n_gold, floored at 0, where extra nodes count at most "
             "n_gold.", "def process_score(n_gold, n_missing, n_dependency, n_value, n_extra, answer_correct):\n"
             "    ...\n\nanswer = process_score", homework=True),
    Exercise("07.3", "Which reward cut dependency mistakes?",
             "In the committed run (`errors`), which model has the lowest dependency-mismatch rate on the edge "
             "range? One of " + ", ".join(repr(m) for m in MODELS) + ".",
             Choice(MODELS, _fewest_dependency_errors), "filter `errors` to `range == \"edge\"` and compare "
             "`dependency mismatch`.", "answer = None  # a model's name"),
]
