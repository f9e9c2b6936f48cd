"""Stages: every training step a chapter takes is a cached stage.

A stage is (input checkpoint, data, trainer settings) -> output checkpoint +
metrics. Its cache key hashes exactly those inputs, so a chapter rerun with the
same settings reuses every stage it already ran (minutes of GRPO, hours of
pretraining), and changing one setting rebuilds only the stages downstream of it.
This module knows no trainer: the trainers build stages
(:mod:`cascadekit.training.pipeline`, :mod:`cascadekit.training.sft`, ...), the
chapters chain them.

Stages live in the artifact cache (:mod:`cascadekit.artifacts`): a builder fills a
temporary folder, the folder's manifest is written last, and it is renamed into
place, so an interrupted stage is rebuilt, never half-used.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from cascadekit.artifacts import cache_root, get_or_build
from cascadekit.atomic import atomic_write_json
from cascadekit.distributed import launched_world_size

STAGE_FILE = "stage.json"  # the stage's inputs and metrics, beside its checkpoint


@dataclass(frozen=True)
class StageOutput:
    """A finished stage: its checkpoint folder, cache key and metrics."""

    checkpoint: Path
    key: str
    metrics: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Stage:
    """One step of training, cached by a key of exactly its ``inputs``.

    ``build(folder)`` writes the output checkpoint into ``folder`` and returns the
    stage's metrics (JSON values). ``fixed_key`` keeps the key a stage had before
    this runner existed (the Part I tokenizer and pretrained bases hash their
    profile sections), so the entries already built or shipped under it stay valid.
    """

    kind: str
    inputs: Mapping[str, Any]
    build: Callable[[Path], Mapping[str, Any]]
    fixed_key: str | None = None

    @property
    def key(self) -> str:
        return self.fixed_key or stage_key(self.kind, self.inputs)


def stage_key(kind: str, inputs: Mapping[str, Any]) -> str:
    """12 hex digits of the sha256 of a stage's kind and inputs (as sorted JSON).

    In a launch of several processes the key also holds their number: each
    process trains on its own batch, so the global batch (and the model) differ
    from a one-process run's. One process adds nothing, so no key moves.
    """
    if (processes := launched_world_size()) > 1:
        inputs = {**inputs, "world_size": processes}
    text = json.dumps({"kind": kind, "inputs": inputs}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def run_stage(stage: Stage, rebuild: bool = False) -> StageOutput:
    """The stage's output, built once per key (concurrent callers wait for one build).

    ``rebuild`` builds it again even if it is cached or shipped under ``data/checkpoints/``.
    """
    def build(folder: Path) -> None:
        metrics = dict(stage.build(folder))
        atomic_write_json(folder / STAGE_FILE, {"kind": stage.kind, "inputs": stage.inputs, "metrics": metrics})

    path = get_or_build(stage.kind, stage.key, build, rebuild=rebuild)
    recorded = path / STAGE_FILE  # an entry built before this runner (a fixed key) has none
    return StageOutput(path, stage.key, json.loads(recorded.read_text())["metrics"] if recorded.exists() else {})


def run_folder(kind: str, inputs: Mapping[str, Any]) -> Path:
    """Where a stage of ``kind`` with ``inputs`` keeps its Trainer checkpoints (to resume an interrupted build)."""
    return cache_root() / "runs" / f"{kind}-{stage_key(kind, inputs)}"


def digest(items: Iterable[Any]) -> str:
    """16 hex digits of the sha256 of ``items``, each as sorted JSON, in order (a prompt set's identity)."""
    hashed = hashlib.sha256()
    for item in items:
        hashed.update(json.dumps(item, sort_keys=True, default=str).encode())
    return hashed.hexdigest()[:16]

