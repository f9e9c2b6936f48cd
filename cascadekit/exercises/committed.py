"""The committed runs that exercise answers are computed from, read when a check runs.

Apart from the package (whose answer types and child process must import with the
standard library alone), because reading results imports matplotlib.
"""
from __future__ import annotations

from typing import Any

from cascadekit.results import load_metrics


def committed_metrics(folder: str) -> dict[str, Any]:
    """A chapter's committed toy-run metrics (``data/results/<folder>``); FileNotFoundError (which ``check``
    reports as a missing result) when there are none."""
    metrics = load_metrics(folder)
    if metrics is None:
        raise FileNotFoundError(f"data/results/{folder}/metrics.json")
    return metrics


def stage_row(folder: str, stage: str, domain: str, mode: str) -> dict[str, Any]:
    """The committed stage-table row of one stage, domain and mode (stage names may hold commas)."""
    return next(r for r in committed_metrics(folder)["rows"]
                if (r["stage"], r["domain"], r["mode"]) == (stage, domain, mode))
