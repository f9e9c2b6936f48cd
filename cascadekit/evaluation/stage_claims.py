"""Claims between two stage tables: paired changes over the same prompts, with intervals.

Every Part II stage table asks the same suite (:func:`cascadekit.evaluation.stage_table.suite_records`)
in the same order, so two tables' per-sample results pair up prompt by prompt.
A change between two stages is then the mean per-prompt difference, with a paired
bootstrap interval over prompts (:func:`cascadekit.claims.bootstrap_interval`):
what the two models share about a prompt's difficulty cancels.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from cascadekit.claims import bootstrap_interval

Sample = Mapping[str, Any]
#: What a chapter's metrics keep of every stage-table sample: enough for every paired claim.
PER_SAMPLE_FIELDS = ("domain", "think", "score", "tokens", "repetition")


def compact(tables: Mapping[str, Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each stage table's samples, by stage name, cut to :data:`PER_SAMPLE_FIELDS`."""
    return {name: [{k: s[k] for k in PER_SAMPLE_FIELDS} for s in table["samples"]] for name, table in tables.items()}


def picked(samples: Iterable[Sample], names: Sequence[str] | None = None, think: bool | None = None) -> list[Sample]:
    """The samples of the domains ``names`` (all when None) in mode ``think`` (both when None), in order."""
    return [s for s in samples if (names is None or s["domain"] in names) and (think is None or s["think"] == think)]


def paired_change(before: Iterable[Sample], after: Iterable[Sample], field: str = "score",
                  names: Sequence[str] | None = None, think: bool | None = None,
                  seed: int = 0) -> tuple[float, float, float]:
    """(estimate, low, high) of the mean change of ``field`` from ``before`` to ``after`` on the same prompts.

    A ValueError if the two tables did not ask the same prompts (different
    lengths, or a domain or mode out of step).
    """
    a, b = picked(before, names, think), picked(after, names, think)
    if len(a) != len(b) or any((x["domain"], x["think"]) != (y["domain"], y["think"]) for x, y in zip(a, b)):
        raise ValueError("the two stage tables did not ask the same prompts in the same order")
    if not a:
        raise ValueError(f"no samples for domains {names} and mode {think}")
    return bootstrap_interval([float(y[field]) for y in b], [float(x[field]) for x in a], seed=seed)


def mean_of(samples: Iterable[Sample], field: str = "score", names: Sequence[str] | None = None,
            think: bool | None = None, seed: int = 0) -> tuple[float, float, float]:
    """(mean, low, high) of ``field`` over the picked samples, a bootstrap interval over prompts."""
    values = [float(s[field]) for s in picked(samples, names, think)]
    if not values:
        raise ValueError(f"no samples for domains {names} and mode {think}")
    return bootstrap_interval(values, seed=seed)
