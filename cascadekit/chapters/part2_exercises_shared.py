"""What the exercises of several Part II chapters share: a committed run's metrics and one stage-table row.

A chapter's answers are computed from its committed toy run when a check runs
(:func:`cascadekit.course.exercises.check`), so a re-committed run changes the
expected answer with it; a missing run is a :class:`FileNotFoundError`, which
the check reports as such.
"""
from __future__ import annotations

from typing import Any

from cascadekit.results import load_metrics


def committed_run(folder: str) -> dict[str, Any]:
    """The committed toy-run metrics of results ``folder``; FileNotFoundError (reported by ``check``) when absent."""
    metrics = load_metrics(folder)
    if metrics is None:
        raise FileNotFoundError(f"data/results/{folder}/metrics.json")
    return metrics


def stage_row(folder: str, stage: str, domain: str, mode: str) -> dict[str, Any]:
    """The committed stage-table row of one stage, domain and mode (stage names may hold commas)."""
    return next(r for r in committed_run(folder)["rows"]
                if (r["stage"], r["domain"], r["mode"]) == (stage, domain, mode))
