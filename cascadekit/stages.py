"""Stages: every training step a chapter takes is a cached stage.

A stage is (input checkpoint, data, trainer settings) -> output checkpoint +
metrics. Its cache key hashes exactly those inputs, so a chapter rerun with the
same settings reuses every stage it already ran (minutes of GRPO, hours of
pretraining), and changing one setting rebuilds only the stages downstream of it.
This module knows no trainer: the trainers build stages
(:mod:`cascadekit.training.pipeline`, :mod:`cascadekit.training.sft`, ...), the
chapters chain them.

Keys hash content, not names. A stage that starts from another stage's output puts
that output's :func:`content_id` (a digest of its checkpoint files' sha256s, from the
manifest the cache already writes) into its inputs, never the upstream stage's key:
a key names what a stage was *asked* to build, not what it built, so other weights
under the same upstream key (a retrain under the same settings, a code change that
trains differently) would otherwise be handed every downstream entry built from
the old weights (a cached stage table once reported tools 0.984 for a model that
scored 0.000). With content in the key, new upstream bytes rebuild everything below.
The other half is the code: each builder module declares a ``RECIPE`` number that
:class:`Stage` carries into its key, bumped when the same inputs would build other
bytes (a refactor that builds the same bytes keeps it, and so every key).

A stage is built on one CPU thread (:func:`one_cpu_thread`), whatever ``--threads`` says:
its bytes depend on the thread count (a matmul sums in another order on two threads),
which its key cannot hold without every reader on another core count missing every
shipped entry. Measured (the second world's IF-RL, training seed 0, rebuilt from the
shipped RLHF in a process on two threads): built on two threads its content differs
from the shipped entry's (and 7 of its 12 stage-table cells moved, by up to 0.023); built
here on one it is the shipped entry, byte for byte (140 s against 99 s on two threads).
Two cores are kept busy by running two builds side by side (``--train-seed 0,1 --jobs 2``),
which also measured faster than one build on two threads.

Stages live in the artifact cache (:mod:`cascadekit.artifacts`): a builder fills a
temporary folder, the folder's manifest is written last, and it is renamed into
place, so an interrupted stage is rebuilt, never half-used.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from cascadekit.artifacts import MANIFEST, PROVENANCE, cache_root, get_or_build, move_entry, read_manifest
from cascadekit.atomic import atomic_write_json
from cascadekit.distributed import launched_world_size

STAGE_FILE = "stage.json"  # the stage's inputs and metrics, beside its checkpoint
#: An entry's records, not its checkpoint: left out of its :func:`content_id` (the same weights built by
#: another chain, at another time, are the same content).
RECORDS = frozenset({STAGE_FILE, PROVENANCE, "loss_log.json"})


#: What a stage that trains a model must hold (checked at every cache hit, see
#: :func:`cascadekit.artifacts.verify`): a config and weights, whole, sharded or a LoRA adapter.
CHECKPOINT = ("config.json|adapter_config.json",
              "model.safetensors|model.safetensors.index.json|adapter_model.safetensors")


@dataclass(frozen=True)
class StageOutput:
    """A finished stage: its checkpoint folder, cache key and metrics."""

    checkpoint: Path
    key: str
    metrics: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Stage:
    """One step of training, cached by a key of exactly its ``inputs`` and its builder's ``recipe``.

    ``build(folder)`` writes the output checkpoint into ``folder`` and returns the
    stage's metrics (JSON values). ``recipe`` is the ``RECIPE`` of the module that
    builds it (see the module docstring). ``fixed_key`` keeps the key a stage had before
    this runner existed (the Part I tokenizer and pretrained bases hash their
    profile sections), so the entries already built or shipped under it stay valid.
    ``holds`` names the files its output must hold (e.g. :data:`CHECKPOINT`).
    """

    kind: str
    inputs: Mapping[str, Any]
    build: Callable[[Path], Mapping[str, Any]]
    fixed_key: str | None = None
    recipe: int = field(kw_only=True)
    holds: tuple[str, ...] = field(default=(), kw_only=True)

    @property
    def key(self) -> str:
        return self.fixed_key or stage_key(self.kind, self.inputs, self.recipe)

    @property
    def needs(self) -> tuple[str, ...]:
        """What the cache must find listed in the entry: its files, and the record every build writes.

        An entry under a fixed key may have been built before this runner wrote records.
        """
        return self.holds if self.fixed_key else (*self.holds, STAGE_FILE)


def stage_key(kind: str, inputs: Mapping[str, Any], recipe: int) -> str:
    """12 hex digits of the sha256 of a stage's kind, inputs and recipe (as sorted JSON).

    In a launch of several processes the key also holds their number: each
    process trains on its own batch, so the global batch (and the model) differ
    from a one-process run's. One process adds nothing.
    """
    if not isinstance(recipe, int) or isinstance(recipe, bool) or recipe < 1:
        raise ValueError(f"a stage's recipe is a positive int (its module's RECIPE), not {recipe!r}")
    return _hashed({"kind": kind, "inputs": _launched(inputs), "recipe": recipe})


def _launched(inputs: Mapping[str, Any]) -> Mapping[str, Any]:
    processes = launched_world_size()
    return {**inputs, "world_size": processes} if processes > 1 else inputs


def _hashed(payload: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:12]


def content_id(output: StageOutput) -> str:
    """16 hex digits naming what ``output``'s entry holds: its checkpoint files and their sha256s.

    Read from the entry's manifest (the cache verified every sha256 before handing
    the entry out), leaving out the records (:data:`RECORDS`: the stage's inputs and
    metrics, a shipped entry's provenance, a loss log), which change with who built
    it and how long it took, not with what it is. This, not ``output.key``, is what a
    downstream stage puts in its inputs.
    """
    folder = Path(output.checkpoint)
    if not (folder / MANIFEST).is_file():
        raise ValueError(f"{folder} is not a built cache entry (no {MANIFEST}): the content of stage {output.key} "
                         f"cannot be named until it is built or shipped")
    files = read_manifest(folder)
    content = sorted((name, sha) for name, sha in files.items() if name not in RECORDS)
    if not content:
        raise ValueError(f"{output.checkpoint}: the entry holds only records ({', '.join(sorted(files))}), "
                         f"no checkpoint to name by content")
    return hashlib.sha256(json.dumps(content).encode()).hexdigest()[:16]


def legacy_key(stage: Stage, upstream: Mapping[str, str]) -> str:
    """The key ``stage`` had before keys hashed content (and recipes): for re-keying entries built then.

    ``upstream`` maps each upstream entry's :func:`content_id` to that entry's old key;
    every occurrence in ``stage.inputs`` (a value, or inside one: a reward's name) is
    written back as the old key, and the recipe is left out, as the old keys were made.
    """
    def back(value: Any) -> Any:
        if isinstance(value, str):
            for content, old in upstream.items():
                value = value.replace(content, old)
            return value
        if isinstance(value, Mapping):
            return {k: back(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [back(v) for v in value]
        return value

    return stage.fixed_key or _hashed({"kind": stage.kind, "inputs": _launched(back(dict(stage.inputs)))})


def rekey_cached(stage: Stage, upstream: Mapping[str, str]) -> tuple[str, str, bool]:
    """Move the cache entry built for ``stage`` under its :func:`legacy_key` to its key now, without rebuilding.

    Returns ``(old key, new key, moved)``; nothing moves when there is no entry under
    the old key or one already under the new key.
    """
    old, new = legacy_key(stage, upstream), stage.key
    return old, new, old != new and move_entry(stage.kind, old, new)


def run_stage(stage: Stage, rebuild: bool = False) -> StageOutput:
    """The stage's output, built once per key (concurrent callers wait for one build).

    ``rebuild`` builds it again even if it is cached or shipped under ``data/checkpoints/``.
    """
    def build(folder: Path) -> None:
        with one_cpu_thread(), _disk_full_is_one_line(stage, folder):
            metrics = dict(stage.build(folder))
        atomic_write_json(folder / STAGE_FILE, {"kind": stage.kind, "inputs": stage.inputs, "recipe": stage.recipe,
                                                "metrics": metrics})

    path = get_or_build(stage.kind, stage.key, build, rebuild=rebuild, needs=stage.needs)
    recorded = path / STAGE_FILE  # an entry built before this runner (a fixed key) has none
    return StageOutput(path, stage.key, json.loads(recorded.read_text())["metrics"] if recorded.exists() else {})


class DiskFull(OSError):
    """A build whose device filled up: one line naming the folder and the space the build had used."""


#: How a full device reads in errors that are not an ``OSError`` (safetensors' serializer reports Rust's io error).
_FULL = re.compile(r"No space left on device|StorageFull|Disk quota exceeded|os error 28\b")


def storage_full(err: BaseException | None) -> bool:
    """Whether ``err``, or an error it was raised from, says the device is full."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if _FULL.search(str(err)):
            return True
        err = err.__cause__ or err.__context__
    return False


@contextlib.contextmanager
def _disk_full_is_one_line(stage: Stage, folder: Path) -> Iterator[None]:
    """A full device during ``stage``'s build becomes one :class:`DiskFull` line, its half-written files removed.

    The cache removes the build's temporary entry itself; here the Trainer checkpoint
    the save was writing in the stage's run folder (a ``checkpoint-N`` begun during
    this build without the ``trainer_state.json`` the Trainer writes last) goes too,
    while finished checkpoints stay for the rerun to resume from.
    """
    started = time.time()
    try:
        yield
    except Exception as err:
        if not storage_full(err):
            raise
        written = _bytes(folder) + _remove_half_written(cache_root() / "runs" / f"{stage.kind}-{stage.key}", started)
        free = shutil.disk_usage(folder.parent).free
        raise DiskFull(f"no space left on the device of {folder.parent}: building {stage.kind}/{stage.key} had "
                       f"written {written / 1e6:.1f} MB when it filled up ({free / 1e6:.1f} MB free); free at least "
                       f"that much more and run again (half-written files removed)") from None


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file() and not p.is_symlink())


def _remove_half_written(runs: Path, since: float) -> int:
    """Remove each Trainer checkpoint in ``runs`` begun since ``since`` and never finished; the bytes they held."""
    removed = 0
    for checkpoint in runs.glob("checkpoint-*") if runs.is_dir() else ():
        if checkpoint.is_dir() and checkpoint.stat().st_mtime >= since - 1 and \
                not (checkpoint / "trainer_state.json").is_file():
            removed += _bytes(checkpoint)
            shutil.rmtree(checkpoint, ignore_errors=True)
    return removed


@contextlib.contextmanager
def one_cpu_thread() -> Iterator[None]:
    """Torch runs on one CPU thread inside and on as many as before after (no change where a GPU is present).

    Why: see the module docstring; a GPU build is not bit-reproducible anyway, and its CPU threads feed it.
    """
    import torch

    if torch.cuda.is_available():
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_folder(kind: str, inputs: Mapping[str, Any], recipe: int) -> Path:
    """Where a stage of ``kind`` with ``inputs`` keeps its Trainer checkpoints (to resume an interrupted build)."""
    return cache_root() / "runs" / f"{kind}-{stage_key(kind, inputs, recipe)}"


def digest(items: Iterable[Any]) -> str:
    """16 hex digits of the sha256 of ``items``, each as sorted JSON, in order (a prompt set's identity)."""
    hashed = hashlib.sha256()
    for item in items:
        hashed.update(json.dumps(item, sort_keys=True, default=str).encode())
    return hashed.hexdigest()[:16]

