"""Claims between two stage tables: paired changes over the same prompts, with intervals.

Every Part II stage table asks the same suite (:func:`cascadekit.evaluation.stage_table.suite_records`)
in the same order, so two tables' per-sample results pair up prompt by prompt.
A change between two stages is then the mean per-prompt difference, with a paired
bootstrap interval over prompts (:func:`cascadekit.claims.bootstrap_interval`):
what the two models share about a prompt's difficulty cancels.

Over training seeds (:func:`seed_change`) each seed's stage tables pair up the same
way, and the interval is the two-level bootstrap of :func:`cascadekit.claims.seed_bootstrap`
(seeds, then prompts). Forgetting is read per domain and mode (:func:`forgetting_matrix`):
a cell that starts at its ceiling can only fall, so pooling it with the others dilutes
a real drop elsewhere toward 0; :func:`kept_domains_row` judges "keeps the other
domains" over the cells below the ceiling and names the ones it left out.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, NamedTuple, Sequence

import numpy as np

from cascadekit.claims import FLAT_TOLERANCE, Direction, bootstrap_interval, bootstrap_p_value, seed_bootstrap, seed_row

Sample = Mapping[str, Any]
#: What a chapter's metrics keep of every stage-table sample: enough for every paired claim.
PER_SAMPLE_FIELDS = ("domain", "think", "score", "tokens", "repetition")
#: The unit a claim names for a per-sample field counted in something other than a share.
UNITS = {"tokens": "tokens"}
#: A cell whose score before the stage is at least this is at its ceiling: it can only fall.
CEILING = 0.95


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
    prior, later = _paired(before, after, field, names, think)
    return bootstrap_interval(later, prior, seed=seed)


def _paired(before: Iterable[Sample], after: Iterable[Sample], field: str, names: Sequence[str] | None,
            think: bool | None) -> tuple[list[float], list[float]]:
    """``field`` of the picked samples of two tables, checked to be the same prompts in the same order."""
    a, b = picked(before, names, think), picked(after, names, think)
    if len(a) != len(b) or any((x["domain"], x["think"]) != (y["domain"], y["think"]) for x, y in zip(a, b)):
        raise ValueError("the two stage tables did not ask the same prompts in the same order")
    if not a:
        raise ValueError(f"no samples for domains {names} and mode {think}")
    return [float(x[field]) for x in a], [float(y[field]) for y in b]


class SeedChange(NamedTuple):
    """A change over training seeds and prompts: the interval, its p-value, and each seed's estimate."""

    estimate: float
    low: float
    high: float
    p_value: float
    seeds: tuple[float, ...]


def seed_differences(before: Sequence[Iterable[Sample]], after: Sequence[Iterable[Sample]], field: str = "score",
                     names: Sequence[str] | None = None, think: bool | None = None) -> list[np.ndarray]:
    """Per training seed, the per-prompt change of ``field`` (after minus before) on the picked samples.

    ``before[i]`` and ``after[i]`` are seed i's stage tables, on the same prompts.
    """
    if len(before) != len(after) or not before:
        raise ValueError(f"need one before and one after table per seed, got {len(before)} and {len(after)}")
    differences = []
    for b, a in zip(before, after):
        prior, later = _paired(b, a, field, names, think)
        differences.append(np.subtract(later, prior))
    return differences


def seed_change(before: Sequence[Iterable[Sample]], after: Sequence[Iterable[Sample]], field: str = "score",
                names: Sequence[str] | None = None, think: bool | None = None, *, direction: Direction = "up",
                tolerance: float = FLAT_TOLERANCE, seed: int = 0) -> SeedChange:
    """A stage's change of ``field`` on ``names`` in mode ``think``, over seeds (one stage table each) and prompts.

    The interval is :func:`cascadekit.claims.seed_bootstrap` of
    :func:`seed_differences`; the p-value (for ``direction``) comes from the same
    resamples. With one seed, the interval is :func:`paired_change`'s.
    """
    differences = seed_differences(before, after, field, names, think)
    estimate, low, high = seed_bootstrap(differences, seed=seed)
    p = bootstrap_p_value(differences, direction, tolerance=tolerance, seed=seed)
    return SeedChange(estimate, low, high, p, tuple(float(d.mean()) for d in differences))


def change_row(claim: str, paper: str, before: Sequence[Iterable[Sample]], after: Sequence[Iterable[Sample]],
               direction: Direction, field: str = "score", names: Sequence[str] | None = None,
               think: bool | None = None, *, primary: bool = False, tolerance: float = FLAT_TOLERANCE,
               digits: int = 3) -> dict[str, Any]:
    """A claim row of a stage's change over seeds and prompts (:func:`cascadekit.claims.seed_row`).

    A change of a field that is not a score names its unit in the claim (:data:`UNITS`):
    a tokens row sits among accuracy changes in every Part II table.
    """
    return seed_row(claim, paper, seed_differences(before, after, field, names, think), direction, primary=primary,
                    tolerance=tolerance, digits=digits, unit=UNITS.get(field, ""))


def _modes(samples: Iterable[Sample], domain: str) -> list[bool]:
    present = {s["think"] for s in samples if s["domain"] == domain}
    return [think for think in (True, False) if think in present]


def _scores(samples: Iterable[Sample], domain: str, think: bool) -> list[float]:
    return [float(s["score"]) for s in picked(samples, [domain], think)]


def forgetting_matrix(before: Sequence[Iterable[Sample]], after: Sequence[Iterable[Sample]], domains: Sequence[str],
                      *, ceiling: float = CEILING, tolerance: float = FLAT_TOLERANCE,
                      seed: int = 0) -> list[dict[str, Any]]:
    """One cell per domain and mode: the score before (over seeds), the change with its interval, the ceiling mark.

    ``before`` and ``after`` are one stage table per training seed. A cell is
    ``at_ceiling`` when its mean score before the stage is at least ``ceiling``.
    Each cell's p-value is for "flat" (kept within +-``tolerance``).
    """
    before, after = [list(t) for t in before], [list(t) for t in after]
    cells = []
    for domain in domains:
        for think in _modes(before[0], domain):
            start = float(np.mean([x for table in before for x in _scores(table, domain, think)]))
            change = seed_change(before, after, names=[domain], think=think, direction="flat", tolerance=tolerance,
                                 seed=seed)
            cells.append({"domain": domain, "mode": "think" if think else "no_think", "before": start,
                          "change": change.estimate, "low": change.low, "high": change.high, "p": change.p_value,
                          "seeds": change.seeds, "at_ceiling": start >= ceiling})
    return cells


def kept_domains_row(claim: str, paper: str, before: Sequence[Iterable[Sample]], after: Sequence[Iterable[Sample]],
                     domains: Sequence[str], *, ceiling: float = CEILING,
                     tolerance: float = FLAT_TOLERANCE) -> dict[str, Any]:
    """"Keeps the other domains": a flat claim over the prompts of the cells below ``ceiling``, pooled.

    The claim text gains which cells were left out at the ceiling. Where every
    cell is at its ceiling nothing can be judged: the row says so and cannot tell.
    """
    before, after = [list(t) for t in before], [list(t) for t in after]
    cells = forgetting_matrix(before, after, domains, ceiling=ceiling, tolerance=tolerance)
    kept = {(c["domain"], c["mode"] == "think") for c in cells if not c["at_ceiling"]}
    left_out = [f"{c['domain']} {c['mode']}" for c in cells if c["at_ceiling"]]
    claim = (f"{claim} (cells below {ceiling:g} before; flat within {tolerance:g}; at the ceiling, left out: "
             f"{', '.join(left_out) or 'none'})")
    if not kept:
        return {"claim": claim, "paper": paper, "this run": "n/a", "95% interval": "n/a", "verdict": "cannot tell"}
    below = [[s for s in table if (s["domain"], s["think"]) in kept] for table in before]
    then = [[s for s in table if (s["domain"], s["think"]) in kept] for table in after]
    return change_row(claim, paper, below, then, "flat", tolerance=tolerance)


def mean_of(samples: Iterable[Sample], field: str = "score", names: Sequence[str] | None = None,
            think: bool | None = None, seed: int = 0) -> tuple[float, float, float]:
    """(mean, low, high) of ``field`` over the picked samples, a bootstrap interval over prompts."""
    values = [float(s[field]) for s in picked(samples, names, think)]
    if not values:
        raise ValueError(f"no samples for domains {names} and mode {think}")
    return bootstrap_interval(values, seed=seed)
