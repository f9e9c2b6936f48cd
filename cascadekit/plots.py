"""Matplotlib figures for the course: loss curves, the pass@k ladder over ops, pass@k curves.

Each function returns a ``Figure`` (display it in a notebook, or ``savefig``).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Mapping, Sequence


import matplotlib.pyplot as plt
from matplotlib.figure import Figure

RANGE_COLOURS = {"in_distribution": "#d9f0d3", "edge": "#fee8c8", "hard": "#f4cccc"}


def loss_curve(log: Sequence[Sequence[float]], title: str = "training loss") -> Figure:
    """Loss against tokens seen, from ``(step, tokens, loss)`` rows."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([row[1] for row in log], [row[2] for row in log])
    ax.set_xlabel("tokens seen")
    ax.set_ylabel("loss")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return fig


def ladder(rows: Sequence[dict], n: int, title: str = "pass@k by number of operations") -> Figure:
    """pass@1 and pass@n per op (process-verified, answer-only, chance), ranges shaded."""
    fig, ax = plt.subplots(figsize=(7, 4))
    ops = [r["op"] for r in rows]
    for r in rows:
        ax.axvspan(r["op"] - 0.5, r["op"] + 0.5, color=RANGE_COLOURS.get(r["range"], "white"), lw=0)
    styles = {"process": ("C0", "-"), "answer": ("C1", "--"), "chance": ("0.5", ":")}
    for label, (colour, line) in styles.items():
        for k, marker in ((1, "o"), (n, "s")):
            key = f"{label}_pass@{k}"
            if all(key in r for r in rows):
                ax.plot(ops, [r[key] for r in rows], line, color=colour, marker=marker, label=f"{label} pass@{k}")
    ax.set_xticks(ops)
    ax.set_xlabel("operations (green: trained range, orange: edge, red: hard)")
    ax.set_ylabel("pass@k")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=3, loc="upper right")
    return fig


def passk_curves(rows: Sequence[dict], metric: str = "correct", title: str = "process-verified pass@k") -> Figure:
    """pass@k against k (log scale), one line per op, from tidy ``passk_table`` rows."""
    curves = defaultdict(list)
    for r in rows:
        if r["metric"] == metric:
            curves[r["op"]].append((r["k"], r["pass@k"]))
    fig, ax = plt.subplots(figsize=(6, 4))
    cmap = plt.get_cmap("viridis", max(len(curves), 2))
    for i, (op, points) in enumerate(sorted(curves.items())):
        points.sort()
        ax.plot([k for k, _ in points], [v for _, v in points], color=cmap(i), label=f"op {op}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k")
    ax.set_ylabel("pass@k")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2)
    return fig


def back_to_back(stages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Chained GRPO stages as one run for :func:`rl_curves`: their curves back to back, steps numbered through."""
    curves, offset = [], 0
    for s in stages:
        curves += [{**c, "step": offset + c["step"]} for c in s["curves"]]
        offset += s["steps"]
    return {"curves": curves}


def rl_curves(runs: Mapping[str, Mapping[str, Any]], panels: Mapping[str, str]) -> Figure:
    """One panel per training-curve column (``panels``: column -> title), one line per GRPO run.

    ``runs`` maps a run's name to its stage metrics, whose ``curves`` hold one row per step.
    """
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels) + 1, 3.4), squeeze=False)
    for name, run in runs.items():
        steps = [c["step"] for c in run["curves"]]
        for ax, column in zip(axes[0], panels):
            ax.plot(steps, [c[column] for c in run["curves"]], label=name)
    for ax, title in zip(axes[0], panels.values()):
        ax.set(title=title, xlabel="GRPO step")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return fig
