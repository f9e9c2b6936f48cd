"""Chapter specs: each chapter's per-scale settings as data, resolved once into one config.

``chapters.yaml`` beside this file lists, per chapter, its results folder, the
module that runs its experiment, and its settings per scale. :func:`resolve`
applies, in this order and nowhere else: the scale profile, the chapter's
settings for that scale, the caller's overrides. The notebook and
``cascadekit experiment NN`` both call it, so they run the same configuration.
Measured op bands are not part of it: they are measured on the base and passed
to the arms as a separate value (:class:`cascadekit.evaluation.bands.Bands`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, Mapping

import yaml

from cascadekit.profiles import Profile, ProfileError, load_profile, overrides_mapping


#: The chapters whose experiment builds a base model (Part I's and Part II's).
REBUILDS_BASE = ("03", "08")


@dataclass(frozen=True)
class ChapterSpec:
    """One chapter's entry in ``chapters.yaml``."""

    id: str
    folder: str
    title: str
    experiment: str
    settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    ranges: Mapping[str, str] = field(default_factory=dict)
    budget_units: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ChapterConfig:
    """What a chapter runs with: the resolved profile and the chapter's options at this scale."""

    spec: ChapterSpec
    profile: Profile
    overrides: Mapping[str, Any]  # the caller's, recorded with the results
    rebuild_base: bool = False  # pretrain the chapter's base again even if it is cached or shipped

    @property
    def scale(self) -> str:
        return self.profile.name

    @property
    def settings(self) -> Mapping[str, Any]:
        """The chapter's own settings at this scale (before the caller's overrides)."""
        return self.spec.settings.get(self.scale, {})

    @property
    def range_source(self) -> str:
        """Where the RL arms' op bands come from: ``measured`` on the base, or the ``profile``'s."""
        return self.spec.ranges.get(self.scale, "profile")


@cache
def specs() -> dict[str, ChapterSpec]:
    """Every chapter spec in ``chapters.yaml``, by chapter id (``"04"``)."""
    raw = yaml.safe_load(resources.files("cascadekit").joinpath("chapters.yaml").read_text())
    return {str(key): ChapterSpec(id=str(key), **value) for key, value in raw.items()}


def spec(chapter: str) -> ChapterSpec:
    """The spec of ``chapter`` (``"04"``, ``"4"`` or ``"04_edge_of_competence"``); a clear error if unknown."""
    key = str(chapter).split("_", 1)[0].zfill(2)
    if key not in specs():
        raise ProfileError(f"unknown chapter {chapter!r}; chapters with an experiment: {', '.join(specs())}")
    return specs()[key]


def resolve(chapter: str, scale: str, overrides: Mapping[str, Any] | None = None, seed: int = 0,
            rebuild_base: bool = False) -> ChapterConfig:
    """The one config of ``chapter`` at ``scale``: profile, then the chapter's settings, then ``overrides``.

    ``rebuild_base`` asks a chapter that builds a base model (03 for Part I, 08 for
    Part II) to pretrain it again; other chapters reject it.
    """
    found = spec(chapter)
    if rebuild_base and found.id not in REBUILDS_BASE:
        raise ValueError(f"--rebuild-base applies to the chapters that build a base ({', '.join(REBUILDS_BASE)}), "
                         f"not {found.id}")
    overrides = overrides_mapping(overrides)
    settings = {"seed": seed, **found.settings.get(scale, {}), **overrides}
    return ChapterConfig(found, load_profile(scale, settings), overrides, rebuild_base)
