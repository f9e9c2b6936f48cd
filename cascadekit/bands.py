"""Op bands: which ops count as in distribution (too easy), edge and hard.

A profile fixes the paper's bands in ``world.ops_*``; the CPU chapters measure
them on the base instead (:func:`measure_bands`). Either way
the bands travel as this separate value, passed to whatever draws RL prompts or
labels evaluation samples, and never written back into the profile: the profile's
``world`` also shapes pretraining, so a profile carrying measured bands would give
"the base" a new cache key after every calibration.

## Measuring them on a base

Finding 1 is about RL data at the base's *edge of competence*: problems it
solves at pass@k but fails at pass@1. The paper places the edge by
construction. It pretrains on op 2-10, and its 100M model still solves ops
11-14 at pass@128, so "beyond pretraining" and "at the edge" coincide.

Where the kit departs from the paper: the toy model does not reach past its
pretraining range (chapter 03: with ops 2-5 in pretraining, pass@16 is 0 from
op 6 on), but its competence falls off *inside* it (pass@1 0.68 at op 2,
0.16-0.18 at ops 3-5). Running the "edge" arm on ops 6-7 then gives RL no
signal at all, which tests nothing. So the kit can measure the three bands on
the base before any RL and run the arms there:

- **too easy**: the leading ops where the base's pass@1 is at least :data:`EASY_PASS1`;
- **edge**: the ops after them, up to the last op where some sample is right (pass@n > 0);
- **too hard**: the ops beyond, where no sample of the base is right.

The bands reuse the profile's range names (``in_distribution``, ``edge``,
``hard``), so every table, figure and reward path reads them unchanged. The
per-scale choice between measured and fixed ranges lives in each chapter's spec
(``cascadekit/chapters/chapters.yaml``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from cascadekit.profiles import Profile, WorldConfig

RANGES = ("in_distribution", "edge", "hard")
#: What pretraining and mid-training draw from, as shares of each band (the paper's setup).
PRETRAIN_MIXTURE = {"in_distribution": 1.0}
MIDTRAIN_MIXTURE = {"in_distribution": 0.2, "edge": 0.8}
#: pass@1 at or above which an op counts as already solved ("too easy").
EASY_PASS1 = 0.5
#: Where the op ranges of a run come from: measured on the base, or the profile's fixed ones.
RANGE_SOURCES = ("measured", "profile")


@dataclass(frozen=True)
class Bands:
    """Three contiguous inclusive op ranges (lo, hi)."""

    in_distribution: tuple[int, int]
    edge: tuple[int, int]
    hard: tuple[int, int]

    @classmethod
    def of_world(cls, world: WorldConfig) -> Bands:
        """The profile's fixed bands."""
        return cls(tuple(world.ops_in_distribution), tuple(world.ops_edge), tuple(world.ops_hard))

    def ops(self, name: str) -> range:
        """The inclusive op range named ``in_distribution``, ``edge`` or ``hard``."""
        if name not in RANGES:
            raise ValueError(f"unknown op band {name!r}; choose one of {RANGES}")
        lo, hi = getattr(self, name)
        return range(lo, hi + 1)

    def name_of(self, op: int) -> str:
        """The band an op falls in, or ``outside``."""
        return next((name for name in RANGES if op in self.ops(name)), "outside")

    def ladder(self) -> range:
        """Every op from the lowest in-distribution op to the highest hard one."""
        return range(self.in_distribution[0], self.hard[1] + 1)

    def to_dict(self) -> dict[str, list[int]]:
        return {name: list(getattr(self, name)) for name in RANGES}


def competence_bands(by_op: Sequence[Mapping[str, Any]], n: int) -> dict[str, tuple[int, int]] | None:
    """The too-easy, edge and too-hard op ranges of a base, from its per-op ``pass@1`` and ``pass@n`` rows.

    Returns ``{"in_distribution": (lo, hi), "edge": ..., "hard": ...}``, three
    contiguous ranges that together cover the evaluated ops, or None when one
    of them would be empty (a base that solves nothing, or everything).
    """
    rows = sorted(by_op, key=lambda r: r["op"])
    ops = [r["op"] for r in rows]
    easy = 0
    while easy < len(rows) and rows[easy]["pass@1"] >= EASY_PASS1:
        easy += 1
    solved = [i for i, r in enumerate(rows) if r[f"pass@{n}"] > 0]
    last_solved = solved[-1] if solved else -1
    if easy == 0 or last_solved < easy or last_solved == len(rows) - 1:
        return None
    return {"in_distribution": (ops[0], ops[easy - 1]), "edge": (ops[easy], ops[last_solved]),
            "hard": (ops[last_solved + 1], ops[-1])}


def measure_bands(profile: Profile, by_op: Sequence[Mapping[str, Any]], n: int, source: str) -> tuple[Bands, str]:
    """The op bands the RL arms use, and a sentence saying where they came from.

    ``source`` is ``"measured"`` (the base's :func:`competence_bands`, or the
    profile's bands with the reason when the base has no three bands) or
    ``"profile"`` (the profile's bands as they are). The profile itself is left
    alone: the bands are a separate value (:class:`Bands`).
    """
    if source not in RANGE_SOURCES:
        raise ValueError(f"unknown range source {source!r}; choose one of {RANGE_SOURCES}")
    fixed_bands = Bands.of_world(profile.world)
    fixed = ", ".join(f"{name} {lo}-{hi}" for name in RANGES for lo, hi in [getattr(fixed_bands, name)])
    if source == "profile":
        return fixed_bands, f"Op ranges: the profile's ({fixed})."
    bands = competence_bands(by_op, n)
    if bands is None:
        return fixed_bands, (f"Op ranges: the profile's ({fixed}), because the base has no edge band to measure "
                             f"(no op with pass@1 >= {EASY_PASS1} followed by ops with pass@{n} > 0 and ops without).")
    (e0, e1), (g0, g1), (h0, h1) = bands["in_distribution"], bands["edge"], bands["hard"]
    return Bands(**bands), (
        f"Op ranges measured on the base: too easy {e0}-{e1} (pass@1 >= {EASY_PASS1}), edge {g0}-{g1} "
        f"(pass@1 below that, pass@{n} > 0), too hard {h0}-{h1} (pass@{n} = 0); the profile's fixed ranges "
        f"were {fixed}.")
