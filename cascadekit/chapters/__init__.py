"""The chapters: one module per chapter, each described by its entry in ``chapters.yaml``.

A chapter is a unit. Its module ``cascadekit/chapters/chNN_<folder>.py`` holds
what the chapter runs and says, in these slots (the protocol every chapter
module follows; :func:`run`, :func:`combine` and :func:`write` are the only callers):

* ``run(config, work_dir) -> metrics``: the experiment, every training step a
  cached stage (:mod:`cascadekit.stages`);
* ``claims(metrics) -> rows``: the paper's claims beside this run's, each with
  its interval and verdict (:mod:`cascadekit.claims`);
* ``figures(metrics) -> {name: Figure}`` and ``notes(metrics) -> str``: what the
  results folder and the book show beside the claims;
* ``committed(metrics, folder) -> metrics`` (optional): what ``metrics.json``
  keeps (a chapter with many samples thins them and writes a spread beside it);
* ``combine(per_seed) -> metrics`` (optional): one result of several training
  seeds' runs (``cascadekit experiment NN --train-seed 0,1,2``), whose claims are
  over seeds, then prompts (:func:`combine`);
* ``RESULTS_TITLE``: the heading of ``paper_vs_run.md``; ``EXERCISES``: its tasks;
* ``Options`` (optional): a dataclass of the chapter's own settings, which no
  other chapter reads and no scale profile holds. ``chapters.yaml`` and the
  caller set them as ``chapter.<field>`` (``--set chapter.steps=30``); the
  resolved instance is ``config.options``.

A Part II chapter's entry also names its world per scale (``world: {toy: second}``,
:data:`cascadekit.profiles.WORLDS`): every Part II chapter at a scale names the same one,
since each starts from the stages the chapter before it built.

A chapter module imports the core and at most one shared wing
(:mod:`cascadekit.chapters.interplay` for Part I, :mod:`cascadekit.chapters.cascade`
for Part II), never another chapter. ``chapters.yaml`` lists, per chapter, its
results folder (which names its module), title and settings per scale. :func:`resolve`
applies, in this order and nowhere else: the scale profile, the chapter's world
(the caller's ``world`` override, else the entry's for that scale), the chapter's
settings for that scale, the caller's overrides. The notebook and
``cascadekit experiment NN`` both call it, so they run the same configuration.
Measured op bands are not part of it: they are measured on the base and passed
to the arms as a separate value (:class:`cascadekit.bands.Bands`).
"""
from __future__ import annotations

import dataclasses
import importlib
import time
import typing
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Any, Mapping

import yaml

from cascadekit.profiles import (
    CHAPTER_PREFIX, SEED_ROLES, WORLD_KEY, Profile, ProfileError, check_typed, load_profile, overrides_mapping,
    seed_inputs, world_name, world_overrides,
)
from cascadekit.results import ResultsWriter


#: The chapters whose experiment builds a base model (Part I's and Part II's).
REBUILDS_BASE = ("03", "08")


@dataclass(frozen=True)
class ChapterSpec:
    """One chapter's entry in ``chapters.yaml``."""

    id: str
    folder: str
    title: str
    experiment: bool = True  # False: a chapter of teaching cells only, with no run of its own
    settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    ranges: Mapping[str, str] = field(default_factory=dict)
    budget_units: Mapping[str, int] = field(default_factory=dict)
    world: Mapping[str, str] = field(default_factory=dict)  # the Part II world per scale (absent: "first")
    # The syllabus (the teacher's guide, cascadekit.course.guide): learning goals, what to know first, and the
    # metrics paths whose sum is the committed run's time with the shipped checkpoints and to rebuild them.
    goals: tuple[str, ...] = ()
    prerequisites: str = ""
    shipped: tuple[str | tuple[str, ...], ...] = ()  # a lookup path, or a list of plain keys where a key holds a dot
    retrain: tuple[str | tuple[str, ...], ...] = ()

    @property
    def results(self) -> str | None:
        """The folder of the committed run (``data/results/<folder>/``), or None for a chapter without an experiment."""
        return self.folder if self.experiment else None


@dataclass(frozen=True)
class ChapterConfig:
    """What a chapter runs with: the resolved profile and the chapter's options at this scale."""

    spec: ChapterSpec
    profile: Profile
    overrides: Mapping[str, Any]  # the caller's, recorded with the results
    rebuild_base: bool = False  # pretrain the chapter's base again even if it is cached or shipped
    options: Any = None  # the chapter's own settings (its module's ``Options``), or None when it has none
    world: str = "first"  # the Part II world beneath the chapter's settings (profiles.WORLDS)

    @property
    def scale(self) -> str:
        return self.profile.name

    @property
    def settings(self) -> Mapping[str, Any]:
        """The chapter's own settings at this scale (before the caller's overrides)."""
        return self.spec.settings.get(self.scale, {})

    def record(self) -> dict[str, Any]:
        """What a result keeps of its config: scale, seeds (a role's only where it is not ``seed``), the chapter's
        settings and the caller's overrides."""
        record = {"chapter": self.spec.id, "scale": self.scale, "seed": self.profile.seed,
                  **seed_inputs(self.profile, *SEED_ROLES), **({"world": self.world} if self.world != "first" else {}),
                  "chapter_settings": dict(self.settings), "overrides": dict(self.overrides)}
        if self.options is not None:
            record["options"] = dataclasses.asdict(self.options)
        return record

    @property
    def range_source(self) -> str:
        """Where the RL arms' op bands come from: ``measured`` on the base, or the ``profile``'s."""
        return self.spec.ranges.get(self.scale, "profile")


@cache
def specs() -> dict[str, ChapterSpec]:
    """Every chapter spec in ``chapters.yaml``, by chapter id (``"04"``); a chapter without goals is an error."""
    raw = yaml.safe_load(resources.files("cascadekit.chapters").joinpath("chapters.yaml").read_text())
    found = {}
    for key, value in raw.items():
        if not value.get("goals") or not value.get("prerequisites"):
            raise ProfileError(f"chapters.yaml: chapter {key} needs goals and prerequisites")
        lists = {name: tuple(p if isinstance(p, str) else tuple(p) for p in value.get(name) or ())
                 for name in ("goals", "shipped", "retrain")}  # a spec is frozen
        found[str(key)] = ChapterSpec(id=str(key), **{**value, **lists})
    return found


def spec(chapter: str) -> ChapterSpec:
    """The spec of ``chapter`` (``"04"``, ``"4"`` or ``"04_edge_of_competence"``); a clear error if unknown."""
    key = str(chapter).split("_", 1)[0].zfill(2)
    if key not in specs():
        raise ProfileError(f"unknown chapter {chapter!r}; the chapters are {', '.join(specs())}")
    return specs()[key]


def chapter_module(chapter: str) -> ModuleType:
    """The module of ``chapter``: ``cascadekit.chapters.ch<folder>``, named by its results folder."""
    return importlib.import_module(f"{__name__}.ch{spec(chapter).folder}")


def run(config: ChapterConfig, work_dir: str | Path) -> dict[str, Any]:
    """The chapter's experiment, with the envelope every result carries: its ``config`` and ``wall_s``.

    A chapter that records its own (finer) timings or settings keeps them; the
    envelope only adds what is missing.
    """
    if not config.spec.experiment:
        raise ProfileError(f"chapter {config.spec.id} has no experiment to run: its notebook is the whole chapter")
    started = time.perf_counter()
    metrics = chapter_module(config.spec.id).run(config, Path(work_dir))
    metrics.setdefault("config", config.record())
    metrics.setdefault("wall_s", round(time.perf_counter() - started, 1))
    return metrics


def combine(chapter: str, per_seed: Mapping[int, Mapping[str, Any]]) -> dict[str, Any] | None:
    """One result of several training seeds' runs, for a chapter whose claims read replicates (its ``combine``).

    None for a chapter without one: its seeds' results stay in their own folders.
    """
    module = chapter_module(chapter)
    return module.combine(per_seed) if hasattr(module, "combine") else None


def write(chapter: str, metrics: dict[str, Any], writer: ResultsWriter) -> None:
    """``metrics.json``, the figures and ``paper_vs_run.md`` of a finished (or committed) run, through ``writer``."""
    module = chapter_module(chapter)
    kept = module.committed(metrics, writer.folder) if hasattr(module, "committed") else metrics
    rows = module.claims(metrics)
    writer.save(kept, module.figures(metrics), module.RESULTS_TITLE, rows, module.notes(metrics))


def resolve(chapter: str, scale: str, overrides: Mapping[str, Any] | None = None, seed: int = 0,
            rebuild_base: bool = False) -> ChapterConfig:
    """The one config of ``chapter`` at ``scale``: profile, world, the chapter's settings, then ``overrides``.

    The world is ``overrides``' ``world`` if it names one, else the chapter's entry's at
    ``scale`` (:func:`chapter_world`). ``rebuild_base`` asks a chapter that builds a base model (03 for Part I, 08 for
    Part II) to pretrain it again; other chapters reject it.
    """
    found = spec(chapter)
    if rebuild_base and found.id not in REBUILDS_BASE:
        raise ValueError(f"--rebuild-base applies to the chapters that build a base ({', '.join(REBUILDS_BASE)}), "
                         f"not {found.id}")
    overrides = overrides_mapping(overrides)
    world = world_name(overrides, chapter_world(found.id, scale))
    settings = {"seed": seed, **world_overrides(world), **found.settings.get(scale, {}),
                **{k: v for k, v in overrides.items() if k != WORLD_KEY}}
    own = {k.removeprefix(CHAPTER_PREFIX): v for k, v in settings.items() if k.startswith(CHAPTER_PREFIX)}
    profile = load_profile(scale, {k: v for k, v in settings.items() if not k.startswith(CHAPTER_PREFIX)})
    return ChapterConfig(found, profile, overrides, rebuild_base, chapter_options(found, own), world)


def chapter_world(chapter: str, scale: str) -> str:
    """The Part II world ``chapter``'s entry names at ``scale`` (``"first"`` where it names none)."""
    return spec(chapter).world.get(scale, "first")


def chapter_options(found: ChapterSpec, values: Mapping[str, Any]) -> Any:
    """The chapter's ``Options`` with ``values`` applied (each checked against its field's type), or None.

    A chapter without ``Options`` takes no ``chapter.*`` setting: one clear error names it.
    """
    module = chapter_module(found.id) if found.experiment else None
    options = getattr(module, "Options", None)
    if options is None:
        if values:
            raise ProfileError(f"chapter {found.id} has no settings of its own; {CHAPTER_PREFIX}{next(iter(values))} "
                               f"is unknown")
        return None
    hints = typing.get_type_hints(options)
    unknown = sorted(set(values) - set(hints))
    if unknown:
        raise ProfileError(f"unknown chapter {found.id} setting {CHAPTER_PREFIX}{unknown[0]}; known: "
                           f"{', '.join(CHAPTER_PREFIX + name for name in hints)}")
    return options(**{k: check_typed(CHAPTER_PREFIX + k, v, hints[k]) for k, v in values.items()})
