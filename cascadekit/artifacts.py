"""A content-checked cache of built artifacts (tokenizers, checkpoints), keyed by stage and config hash.

A notebook that needs a pretrained checkpoint asks ``get_or_build("pretrain",
profile.hash(...), builder)``: it gets the cached folder, or the builder runs
once and its output is stored. The cache lives in ``$CASCADEKIT_CACHE`` or
``~/.cache/cascadekit``.

Writing is atomic: the builder fills a temporary folder beside the target, a
manifest listing every file's sha256 is written last, and the folder is renamed
into place. An entry without a manifest, with a missing file or with a hash
mismatch (a truncated safetensors file, an edit by hand) is never used: it is
reported with a warning, deleted and rebuilt.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Callable

MANIFEST = "manifest.json"


class CorruptArtifact(RuntimeError):
    """A cache entry whose files do not match its manifest."""


def cache_root() -> Path:
    """``$CASCADEKIT_CACHE`` if set, else ``~/.cache/cascadekit``."""
    return Path(os.environ.get("CASCADEKIT_CACHE") or Path.home() / ".cache" / "cascadekit")


def artifact_path(stage: str, key: str, root: Path | None = None) -> Path:
    return (root or cache_root()) / stage / key


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(folder: Path, stage: str, key: str) -> None:
    """Record the sha256 of every file under ``folder`` (the last write of a build)."""
    files = {
        str(p.relative_to(folder)): _sha256(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }
    (folder / MANIFEST).write_text(json.dumps({"stage": stage, "key": key, "files": files}, indent=1))


def verify(folder: Path) -> None:
    """Raise :class:`CorruptArtifact` unless every file in the manifest is present and intact."""
    manifest = folder / MANIFEST
    if not manifest.is_file():
        raise CorruptArtifact(f"{folder}: no manifest (an interrupted build?)")
    try:
        files = json.loads(manifest.read_text())["files"]
    except (ValueError, KeyError) as err:
        raise CorruptArtifact(f"{folder}: unreadable manifest") from err
    for name, expected in files.items():
        path = folder / name
        if not path.is_file():
            raise CorruptArtifact(f"{folder}: {name} is missing")
        if _sha256(path) != expected:
            raise CorruptArtifact(f"{folder}: {name} does not match its sha256 (truncated or modified)")


def get_or_build(stage: str, key: str, builder: Callable[[Path], None], root: Path | None = None) -> Path:
    """The folder of artifact ``stage/key``, building it with ``builder(folder)`` if absent or corrupt."""
    target = artifact_path(stage, key, root)
    if target.exists():
        try:
            verify(target)
            return target
        except CorruptArtifact as err:
            warnings.warn(f"rebuilding corrupt cache entry: {err}", stacklevel=2)
            shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=target.parent))
    try:
        builder(tmp)
        write_manifest(tmp, stage, key)
        try:
            tmp.rename(target)
        except OSError:
            verify(target)  # another process finished the same build first; use its copy
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return target
