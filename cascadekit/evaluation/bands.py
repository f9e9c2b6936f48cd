"""Op bands: which ops count as in distribution (too easy), edge and hard.

A profile fixes the paper's bands in ``world.ops_*``; the CPU chapters measure
them on the base instead (:mod:`cascadekit.experiments.competence`). Either way
the bands travel as this separate value, passed to whatever draws RL prompts or
labels evaluation samples, and never written back into the profile: the profile's
``world`` also shapes pretraining, so a profile carrying measured bands would give
"the base" a new cache key after every calibration.
"""
from __future__ import annotations

from dataclasses import dataclass

from cascadekit.profiles import WorldConfig

RANGES = ("in_distribution", "edge", "hard")


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
