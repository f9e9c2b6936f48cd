"""Chapter 08: the unified thinking model's base, its two SFT stages, and the stage table after each.

Regenerate the committed toy results (``data/results/08_unified_thinking_model``) with::

    cascadekit experiment 08 --scale toy --threads 2

The base comes from ``data/checkpoints/chat-base/`` (add ``--rebuild-base`` to pretrain it again).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from cascadekit.training.chat_base import chat_base
from cascadekit.chapters import ChapterConfig
from cascadekit.evaluation.stage_table import stage_markdown, paper_vs_run, stage_table, suite_records
from cascadekit.results import ResultsWriter, write_sample_spread
from cascadekit.training.pretrain import ProgressCallback
from cascadekit.training.sft import STAGES, sft_stages

#: How many per-sample records the results keep (an even spread over all of them).
KEPT_SAMPLES = 96
#: The issue's targets after SFT stage 2, at toy scale (reported beside the measured values, never tuned to).
TARGETS = {"think": 0.2, "no_think": 0.1, "mode_following": 0.95}


def stage_name(stage: int) -> str:
    return f"SFT stage {stage}"


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
            "targets": TARGETS, "profile": profile.to_dict(), "chapter_settings": dict(config.settings),
            "overrides": dict(config.overrides)}


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


def write(metrics: dict[str, Any], writer: ResultsWriter) -> None:
    """``metrics.json``, a spread of per-sample records, the stage figure and the paper-vs-run tables."""
    write_sample_spread(writer.folder, metrics["samples"], KEPT_SAMPLES)
    last = stage_name(STAGES[-1])
    profile = metrics["profile"]
    notes = (f"### Paper (Nemotron-Cascade-8B unified) vs this run after {last}\n\n"
             f"{paper_vs_run(metrics['rows'], last)}\n\n"
             f"Paper numbers are percent on the real benchmarks; this run's are percent of the toy suite that "
             f"stands in for each ({profile['sft']['eval_tasks']} prompts per domain and mode, greedy, "
             f"no pre-filled think block), with exact 95% intervals.\n\n"
             f"### Stage table after each SFT stage\n\n{stage_markdown(metrics['rows'])}\n\n"
             f"Timings (s): {json.dumps(metrics['timings'])}")
    writer.save({k: v for k, v in metrics.items() if k != "samples"}, {"sft_stages": plot_stage_table(metrics["rows"])},
                f"Chapter 08: a unified thinking model, targets after {last}", target_rows(metrics["rows"], last), notes)
