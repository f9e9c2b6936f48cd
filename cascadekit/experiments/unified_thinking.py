"""Chapter 08: the unified thinking model's base, its two SFT stages, and the stage table after each.

Regenerate the committed toy results (``data/results/08_unified_thinking_model``) with::

    cascadekit experiment 08 --scale toy --threads 2
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from cascadekit.atomic import atomic_open
from cascadekit.chapters import ChapterConfig
from cascadekit.domains.suites import markdown_table, paper_vs_run
from cascadekit.results import ResultsWriter
from cascadekit.training.pretrain import ProgressCallback
from cascadekit.training.sft import STAGES, run_chapter

#: How many per-sample records the results keep (an even spread over all of them).
KEPT_SAMPLES = 96


def run(config: ChapterConfig, work_dir: str | Path) -> dict[str, Any]:
    """Base model, both SFT stages (cached) and the evaluation table after each."""
    profile = config.profile
    tokens_per_step = profile.pretrain.batch_size * profile.pretrain.seq_len
    results = run_chapter(profile, callbacks=[ProgressCallback(tokens_per_step)])
    return {**results, "profile": profile.to_dict(), "chapter_settings": dict(config.settings),
            "overrides": dict(config.overrides)}


def plot_stage_table(rows: Sequence[dict[str, Any]]) -> Figure:
    """Score and mode following per domain, bars per (stage, mode)."""
    names = list(dict.fromkeys(r["domain"] for r in rows))
    cells = list(dict.fromkeys((r["stage"], r["mode"]) for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.6))
    width = 0.8 / max(1, len(cells))
    for ax, metric in zip(axes, ("score", "mode_following")):
        for k, (stage, mode) in enumerate(cells):
            values = [next((r[metric] for r in rows if r["domain"] == n and r["stage"] == stage and r["mode"] == mode), 0)
                      for n in names]
            ax.bar([i + k * width for i in range(len(names))], values, width, label=f"{stage}, {mode}")
        ax.set_xticks([i + width * (len(cells) - 1) / 2 for i in range(len(names))], names)
        ax.set_ylim(0, 1.05)
        ax.set_title(metric.replace("_", " "))
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def write(metrics: dict[str, Any], writer: ResultsWriter) -> None:
    """``metrics.json``, a spread of per-sample records, the stage figure and the paper-vs-run tables."""
    samples = metrics["samples"]
    with atomic_open(writer.folder / "samples.jsonl") as fh:
        for s in samples[:: max(1, len(samples) // KEPT_SAMPLES)]:
            fh.write(json.dumps(s) + "\n")
    last = f"SFT stage {STAGES[-1]}"
    profile = metrics["profile"]
    notes = (f"### Paper (Nemotron-Cascade-8B unified) vs this run after {last}\n\n"
             f"{paper_vs_run(metrics['rows'], last)}\n\n"
             f"Paper numbers are percent on the real benchmarks; this run's are percent of the toy suite that "
             f"stands in for each ({profile['sft']['eval_tasks']} prompts per domain and mode, greedy).\n\n"
             f"### Evaluation table after each SFT stage\n\n{markdown_table(metrics['rows'])}\n\n"
             f"Timings (s): {json.dumps(metrics['timings'])}")
    writer.save({k: v for k, v in metrics.items() if k != "samples"}, {"sft_stages": plot_stage_table(metrics["rows"])},
                "Chapter 08: a unified thinking model, paper vs this run", [], notes)
