"""Chapter 08: the unified thinking model's base, its two SFT stages, and the stage table after each.

Regenerate the committed toy results (``data/results/08_unified_thinking_model``) with::

    cascadekit experiment 08 --scale toy --train-seed 0,1,2 --jobs 2

The base comes from ``data/checkpoints/chat-base/`` (add ``--rebuild-base`` to pretrain it again).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from cascadekit.training.chat_base import chat_base
from cascadekit.chapters import ChapterConfig
from cascadekit.claims import problem_outcomes, seed_bootstrap
from cascadekit.evaluation.replicates import combine_runs, replicates, seeds_text
from cascadekit.exercises.committed import committed_metrics, stage_row
from cascadekit.evaluation.stage_table import stage_markdown, paper_vs_run, stage_table, suite_records
from cascadekit.exercises import Exercise
from cascadekit.exercises.answers import Choice, Number
from cascadekit.results import write_sample_spread
from cascadekit.training.pretrain import ProgressCallback
from cascadekit.training.sft import STAGES, sft_stages

#: How many per-sample records the results keep (an even spread over all of them).
KEPT_SAMPLES = 96
#: The issue's targets after SFT stage 2, at toy scale (reported beside the measured values, never tuned to).
TARGETS = {"think": 0.2, "no_think": 0.1, "mode_following": 0.95}


def stage_name(stage: int) -> str:
    return f"SFT stage {stage}"


#: The stage the targets and the paper's numbers are compared after: the last SFT stage.
LAST_STAGE = stage_name(STAGES[-1])


def run(config: ChapterConfig, work_dir: str | Path) -> dict[str, Any]:
    """The base (shipped or built), both SFT stages (cached), and the stage table after each."""
    profile = config.profile
    callbacks = [ProgressCallback(profile.pretrain.batch_size * profile.pretrain.seq_len)]
    timings: dict[str, float] = {}
    started = time.perf_counter()
    base = chat_base(profile, callbacks, rebuild=config.rebuild_base)
    timings["base_s"] = round(time.perf_counter() - started, 1)
    started = time.perf_counter()
    stages = sft_stages(base, profile, callbacks)
    timings["sft_s"] = round(time.perf_counter() - started, 1)
    records = suite_records(profile)
    rows, samples = [], []
    for number, stage in zip(STAGES, stages):
        table = stage_table(stage.checkpoint, profile, stage_name(number), records)
        timings[f"table{number}_s"] = table["wall_s"]
        rows += table["rows"]
        samples += table["samples"]
    return {"rows": rows, "samples": samples, "timings": timings,
            "base": {"key": base.key, **{k: v for k, v in base.metrics.items() if k != "loss_log"},
                     "loss_log": base.metrics.get("loss_log", [])[-20:]},
            "stages": [{"key": s.key, **s.metrics} for s in stages],
            "targets": TARGETS, "profile": profile.to_dict()}


def target_rows(rows: Sequence[dict[str, Any]], stage: str) -> list[dict[str, Any]]:
    """Per domain after ``stage``: each target beside the measured value and whether it is met."""
    out = []
    for r in (r for r in rows if r["stage"] == stage):
        goal = TARGETS[r["mode"]]
        out.append({"domain": r["domain"], "mode": r["mode"], "score": round(r["score"], 3),
                    "score target": goal, "score met": r["score"] >= goal,
                    "mode following": round(r["mode_following"], 3),
                    "mode following met": r["mode_following"] >= TARGETS["mode_following"]})
    return out


def plot_stage_table(rows: Sequence[dict[str, Any]]) -> Figure:
    """Score (with its 95% interval) and mode following per domain, bars per (stage, mode)."""
    names = list(dict.fromkeys(r["domain"] for r in rows))
    cells = list(dict.fromkeys((r["stage"], r["mode"]) for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.6))
    width = 0.8 / max(1, len(cells))
    for ax, metric in zip(axes, ("score", "mode_following")):
        for k, (stage, mode) in enumerate(cells):
            picked = [next((r for r in rows if r["domain"] == n and r["stage"] == stage and r["mode"] == mode), None)
                      for n in names]
            values = [0 if r is None else r[metric] for r in picked]
            errors = None
            if metric == "score":
                errors = [[0 if r is None else r["score"] - r["score_low"] for r in picked],
                          [0 if r is None else r["score_high"] - r["score"] for r in picked]]
            ax.bar([i + k * width for i in range(len(names))], values, width, yerr=errors, capsize=2,
                   label=f"{stage}, {mode}")
        ax.set_xticks([i + width * (len(cells) - 1) / 2 for i in range(len(names))], names)
        ax.set_ylim(0, 1.05)
        ax.set_title(metric.replace("_", " ") + (" (95% CI)" if metric == "score" else ""))
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


RESULTS_TITLE = f"Chapter 08: a unified thinking model, targets after {LAST_STAGE}"


def claims(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets after the last SFT stage beside the measured values (:func:`target_rows`); over
    several training seeds (a result of :func:`combine`) the mean over seeds (:func:`seed_target_rows`)."""
    if "replicates" in metrics:
        return seed_target_rows(metrics)
    return target_rows(metrics["rows"], LAST_STAGE)


#: What each training seed's run keeps in a combined result (:func:`combine`): what the claims read.
REPLICATE_FIELDS = ("rows", "stages")


def combine(per_seed: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """One result of several training seeds' runs (:func:`cascadekit.evaluation.replicates.combine_runs`):
    each seed's SFT from the one shared chat base (a ValueError if the bases differ)."""
    return combine_runs(per_seed, REPLICATE_FIELDS, shared=("base",))


def seed_target_rows(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per domain and mode after the last stage: the mean score over seeds with its interval (seeds, then
    prompts, each seed's prompts resampled within it from its 0/1 outcomes), each seed's score, the targets."""
    runs = replicates(metrics)
    out = []
    for first in (r for r in runs[0]["rows"] if r["stage"] == LAST_STAGE):
        cells = [next(r for r in m["rows"] if (r["stage"], r["domain"], r["mode"]) == (LAST_STAGE, first["domain"],
                                                                                      first["mode"])) for m in runs]
        score, low, high = seed_bootstrap([problem_outcomes(c["score"], c["n"]) for c in cells], shared_prompts=False)
        following = float(np.mean([c["mode_following"] for c in cells]))
        goal = TARGETS[first["mode"]]
        seeds = ", ".join(f"{c['score']:.3f}" for c in cells)
        out.append({"domain": first["domain"], "mode": first["mode"], "score": round(score, 3),
                    "95% interval": f"[{low:.3f}, {high:.3f}] (seeds: {seeds})",
                    "score target": goal, "score met": score >= goal, "mode following": round(following, 3),
                    "mode following met": following >= TARGETS["mode_following"]})
    return out


def notes(metrics: dict[str, Any]) -> str:
    """The paper's numbers beside this run's after the last stage, the stage table after each, the timings."""
    first = f" (the first of {seeds_text(metrics)})" if "train_seeds" in metrics else ""
    return (f"### Paper (Nemotron-Cascade-8B unified) vs this run after {LAST_STAGE}{first}\n\n"
            f"{paper_vs_run(metrics['rows'], LAST_STAGE)}\n\n"
            f"Paper numbers are percent on the real benchmarks; this run's are percent of the toy suite that "
            f"stands in for each ({metrics['profile']['sft']['eval_tasks']} prompts per domain and mode, greedy, "
            f"no pre-filled think block), with exact 95% intervals.\n\n"
            f"### Stage table after each SFT stage{first}\n\n{stage_markdown(metrics['rows'])}\n\n"
            f"Timings (s){first}: {json.dumps(metrics['timings'])}")


def figures(metrics: dict[str, Any]) -> dict[str, Figure]:
    """Score and mode following per domain after each SFT stage."""
    return {"sft_stages": plot_stage_table(metrics["rows"])}


def committed(metrics: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The metrics without the per-sample records, of which ``samples.jsonl`` in ``folder`` keeps a spread.

    A combined result (:func:`combine`) has no records of its own: each seed's folder keeps its spread.
    """
    if "samples" in metrics:
        write_sample_spread(folder, metrics["samples"], KEPT_SAMPLES)
    return {k: v for k, v in metrics.items() if k != "samples"}


# Exercises ------------------------------------------------------------------

DOMAINS = ("math", "code", "tools", "swe", "instructions", "general")


def _weakest_think_domain() -> str:
    rows = [r for r in committed_metrics("08_unified_thinking_model")["rows"]
            if r["stage"] == "SFT stage 2" and r["mode"] == "think"]
    return min(rows, key=lambda r: r["score"])["domain"]


def _math_length_ratio() -> float:
    think = stage_row("08_unified_thinking_model", "SFT stage 2", "math", "think")
    no_think = stage_row("08_unified_thinking_model", "SFT stage 2", "math", "no_think")
    return think["mean_tokens"] / no_think["mean_tokens"]


EXERCISES = [
    Exercise("08.1", "The weakest domain after SFT",
             "In the committed stage table (`load_metrics(\"08_unified_thinking_model\")[\"rows\"]`), which domain "
             "has the lowest think-mode score after SFT stage 2? One of " + ", ".join(repr(d) for d in DOMAINS) + ".",
             Choice(DOMAINS, _weakest_think_domain), "keep the rows with `stage == \"SFT stage 2\"` and "
             "`mode == \"think\"`, then compare `score`.", "answer = None  # a domain"),
    Exercise("08.2", "How much longer is thinking?",
             "In the same table, how many times longer (mean tokens) are math answers after `/think` than after "
             "`/no_think`, after SFT stage 2? Within 2%. Is that the gap you expected from the chat format?",
             Number(_math_length_ratio, rel=0.02), "divide the think row's `mean_tokens` by the no_think row's, "
             "both for math after SFT stage 2.", "answer = None  # a ratio"),
]
