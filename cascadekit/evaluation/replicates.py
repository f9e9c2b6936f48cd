"""Several training seeds' runs of one chapter as one result: what a chapter's ``combine`` returns.

``cascadekit experiment NN --train-seed 0,1,2`` runs the chapter once per seed, each into its own
``train-seed-N`` folder, then asks the chapter to ``combine`` them. A combined result is the lowest
seed's run (so the figures, the per-domain tables and the notebook read it as they read a one-seed
result) with every seed's ``fields`` under ``replicates``; the claims read :func:`replicates`, one
run per seed, and build their intervals over seeds, then prompts
(:func:`cascadekit.claims.seed_bootstrap`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from cascadekit.results import markdown_table


def combine_runs(per_seed: Mapping[int, Mapping[str, Any]], fields: Sequence[str],
                 shared: Sequence[str] = ()) -> dict[str, Any]:
    """The lowest seed's run with each seed's ``fields`` under ``replicates``, and ``train_seeds``.

    ``shared`` names what every seed must hold alike (the evaluation suite, a
    start no seed retrains): a ValueError names the first seed that differs, as
    pairing seeds that asked other prompts would be silently wrong.
    """
    if not per_seed:
        raise ValueError("no training seed's results to combine")
    runs = {int(seed): dict(m) for seed, m in per_seed.items()}
    first = runs[min(runs)]
    for seed, m in sorted(runs.items()):
        for name in shared:
            if m.get(name) != first.get(name):
                raise ValueError(f"training seed {seed}'s run has another {name} than the first seed's")
    kept = {str(seed): {k: m[k] for k in fields if k in m} for seed, m in sorted(runs.items())}
    return {**{k: v for k, v in first.items() if k != "produced_by"}, "train_seeds": sorted(runs), "replicates": kept}


def replicates(metrics: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Each training seed's run: the ``replicates`` of a combined result, else the one run."""
    return list(metrics["replicates"].values()) if "replicates" in metrics else [metrics]


def seeds_text(metrics: Mapping[str, Any]) -> str:
    """"training seeds 0, 1, 2" for a combined result, "one training seed" for one run."""
    seeds = metrics.get("train_seeds")
    return f"training seeds {', '.join(map(str, seeds))}" if seeds else "one training seed"


@dataclass(frozen=True)
class SeedNotes:
    """What a chapter's notes add over several training seeds (all empty for one run): ``table``, a section of
    each seed's headline numbers; ``first``, the label of a table that is the first seed's; ``over``, where an
    interval's prompts are said, the seeds it is over too."""

    table: str = ""
    first: str = ""
    over: str = ""


def seed_notes(metrics: Mapping[str, Any], rows: Callable[[Mapping[str, Any]], list[dict[str, Any]]],
               heading: str = "Each training seed") -> SeedNotes:
    """:class:`SeedNotes` of a combined result (``rows(metrics)``, one row per seed, under ``heading``), else empty."""
    if "train_seeds" not in metrics:
        return SeedNotes()
    return SeedNotes(f"### {heading}\n\n{markdown_table(rows(metrics))}\n\n", " (the first seed's run)",
                     f", over {seeds_text(metrics)}")
