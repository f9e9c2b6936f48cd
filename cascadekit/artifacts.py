"""A content-checked cache of built artifacts (tokenizers, checkpoints), keyed by stage and config hash.

A notebook that needs a pretrained checkpoint asks ``get_or_build("pretrain",
profile.hash(...), builder)``: it gets the cached folder, or the builder runs
once and its output is stored. The cache lives in ``$CASCADEKIT_CACHE`` or
``~/.cache/cascadekit``; entry ``stage/key`` is the folder ``<root>/<stage>/<key>``.

Writing is atomic: the builder fills a temporary folder ``.<key>.XXXXXXXX``
beside the target, a manifest listing every file's sha256 is written last (itself
to a temporary name, then renamed), and the folder is renamed into place. An
entry is used only if it passes :func:`verify`; anything else is reported with
a warning, deleted and rebuilt:

- no manifest, a listed file missing, or a sha256 mismatch (a truncated
  safetensors file, an edit by hand);
- a manifest that is not valid JSON, or valid JSON of the wrong shape: it must
  be an object with ``stage`` and ``key`` equal to the entry's, and ``files``
  mapping relative paths (no absolute path, no ``..``, nothing that leads out
  of the entry through a link) to 64-digit lowercase hex sha256s;
- a plain file or a symlink where the entry's folder should be;
- a file with more than one hard link (its content can change under another
  name after it was checked, and it may be a file from outside the cache).

A plain file or a symlink where a stage's folder (``<root>/<stage>``) should be
is removed (never what the link points to) with a warning, and the stage's
entries are built afresh in a real folder.

Concurrency: every ``get_or_build`` of an entry holds a lock on
``<root>/<stage>/.<key>.lock`` (:class:`filelock.FileLock`, an OS lock that a
killed process releases) from the first check to the final rename. Builders of
the same entry therefore run one at a time: the second waits, then finds the
finished entry and uses it, so the builder runs once. Different entries never
wait for each other.

Many processes (``torchrun``): the main process alone takes the lock and decides
whether the entry is cached, every process trains when it is not, the main
process alone writes it, and all then use it (see :func:`_get_or_build_together`).

Stale temporary folders: a build killed before its rename leaves
``.<key>.XXXXXXXX`` behind. With the entry's lock held, no live build of that
entry can own one, so every ``get_or_build`` of the entry deletes them first. Nothing that a resumed
build needs lives there: long trainings (pretraining, reward models) keep their Trainer
checkpoints in ``<root>/runs/<stage>-<key>`` (see
:func:`cascadekit.training.pretrain.cached_pretrained`), and the temporary folder
receives only the final save, written after training ends. So deleting them,
rather than reusing the newest, loses no progress.

Shipped entries: a stage committed under ``data/checkpoints/<stage>/<key>/`` (the
same files and manifest as a cache entry) is copied into the cache instead of
being built, after every file is checked against its manifest's sha256. The toy
base of Part I ships this way, so no chapter pretrains it again.

Aliases: ``data/checkpoints/aliases.json`` maps ``stage/key`` to ``stage/folder``, a
shipped entry committed under another key (the key it had before stage keys hashed
content, :mod:`cascadekit.stages`). The repository keeps its committed files where
they are (moving one is a deletion plus an addition), so the lookup follows the
alias instead; the folder is still verified against its own manifest, and the cache
entry it fills is written under the key asked for. :func:`write_aliases` writes the
file; nothing edits it by hand.

``stage`` and ``key`` must each be one safe path component (no slash, no
backslash, not empty, not starting with a dot, at most 200 characters):
anything else is a :class:`ValueError` before the disk is touched. Keys are not
computed here and their format is unchanged, so existing caches stay valid.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import warnings
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterator, Mapping, Sequence

from filelock import FileLock, Timeout

from cascadekit import distributed
from cascadekit.atomic import atomic_write_json, replace_folder

MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 64 << 20  # a manifest of a few thousand files is a few hundred kB
_SHA256 = re.compile(r"[0-9a-f]{64}")
_TEMP_SUFFIX = re.compile(r"[a-z0-9_]{8}")  # what tempfile.mkdtemp appends after the prefix
_MAX_COMPONENT = 200  # leaves room under the usual 255-byte name limit for ".<key>.lock" and ".<key>.XXXXXXXX"


class CorruptArtifact(RuntimeError):
    """A cache entry whose files do not match its manifest."""


def cache_root() -> Path:
    """``$CASCADEKIT_CACHE`` if set, else ``~/.cache/cascadekit``."""
    return Path(os.environ.get("CASCADEKIT_CACHE") or Path.home() / ".cache" / "cascadekit")


def shown(path: str | Path) -> str:
    """``path`` as a reader should see it: ``$CACHE/...`` under the artifact cache, else as given."""
    path = Path(path)
    return f"$CACHE/{path.relative_to(cache_root()).as_posix()}" if path.is_relative_to(cache_root()) else str(path)


def check_component(value: Any, what: str) -> str:
    """``value`` if it is a safe single path component for the cache, else a :class:`ValueError`."""
    if not isinstance(value, str):
        raise ValueError(f"cache {what} must be a string, not {type(value).__name__} {value!r}")
    problem = None
    if not value:
        problem = "is empty"
    elif value.startswith("."):
        problem = "starts with a dot (reserved for the cache's temporary and lock files)"
    elif "/" in value or "\\" in value or (os.sep in value) or (os.altsep and os.altsep in value):
        problem = "contains a path separator"
    elif any(ord(c) < 32 or ord(c) == 127 for c in value):
        problem = "contains a control character"
    elif len(value) > _MAX_COMPONENT:
        problem = f"is longer than {_MAX_COMPONENT} characters"
    if problem:
        raise ValueError(f"cache {what} {value!r} {problem}: it must be one plain folder name")
    return value


def artifact_path(stage: str, key: str, root: Path | None = None) -> Path:
    return (root or cache_root()) / check_component(stage, "stage") / check_component(key, "key")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _inside(path: Path, folder: Path) -> bool:
    """Whether ``path``, with every link resolved, is inside ``folder``."""
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


def _hard_linked(path: Path) -> bool:
    """Whether the file ``path`` has another name somewhere (another hard link to its data)."""
    return path.stat().st_nlink > 1


def write_manifest(folder: Path, stage: str, key: str) -> None:
    """Record the sha256 of every file under ``folder`` (the last write of a build), atomically."""
    files = {}
    for p in sorted(folder.rglob("*")):
        if not p.is_file() or p.name == MANIFEST:
            continue
        if not _inside(p, folder) or _hard_linked(p):
            raise ValueError(f"{p} links outside the artifact folder {folder} (a symlink or a hard link): "
                             f"a cache entry must hold its own files")
        files[p.relative_to(folder).as_posix()] = _sha256(p)
    atomic_write_json(folder / MANIFEST, {"stage": stage, "key": key, "files": files})


def _safe_relative(name: str) -> bool:
    if not name or "\\" in name or "\x00" in name:
        return False
    parts = PurePosixPath(name).parts
    return not PurePosixPath(name).is_absolute() and ".." not in parts and "." not in name.split("/")


def read_manifest(folder: Path, stage: str | None = None, key: str | None = None) -> dict[str, str]:
    """The ``files`` map of ``folder``'s manifest after a schema check; :class:`CorruptArtifact` if it fails.

    With ``stage``/``key`` given, the manifest must name that entry.
    """
    manifest = folder / MANIFEST
    if manifest.is_symlink() or not manifest.is_file():
        raise CorruptArtifact(f"{folder}: no manifest (an interrupted build?)")
    try:
        if manifest.stat().st_size > MAX_MANIFEST_BYTES:
            raise CorruptArtifact(f"{folder}: manifest is larger than {MAX_MANIFEST_BYTES} bytes")
        data = json.loads(manifest.read_bytes())
    except (ValueError, OSError) as err:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise CorruptArtifact(f"{folder}: unreadable manifest ({type(err).__name__}: {err})") from err
    if not isinstance(data, dict):
        raise CorruptArtifact(f"{folder}: manifest is a JSON {type(data).__name__}, not an object")
    for field, expected in (("stage", stage), ("key", key)):
        value = data.get(field)
        if not isinstance(value, str):
            raise CorruptArtifact(f"{folder}: manifest field {field!r} is missing or not a string")
        if expected is not None and value != expected:
            raise CorruptArtifact(f"{folder}: manifest is for {field} {value!r}, not {expected!r}")
    files = data.get("files")
    if not isinstance(files, dict):
        raise CorruptArtifact(f"{folder}: manifest field 'files' is missing or not an object")
    for name, digest in files.items():
        if not _safe_relative(name) or name == MANIFEST:
            raise CorruptArtifact(f"{folder}: manifest lists {name!r}, which is not a relative path inside the entry")
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            raise CorruptArtifact(f"{folder}: manifest sha256 of {name!r} is not 64 hex digits: {digest!r}")
    return files


def _check_listed(folder: Path, files: Mapping[str, str], stage: str | None, needs: Sequence[str]) -> None:
    """:class:`CorruptArtifact` if the manifest's ``files`` are none, or leave out a file in ``needs``."""
    if not files:
        raise CorruptArtifact(f"{folder}: manifest lists no files")
    for need in needs:
        if not any(name in files for name in need.split("|")):
            raise CorruptArtifact(f"{folder}: manifest does not list {need.replace('|', ' or ')}, which the "
                                  f"{stage or 'entry'} stage needs")


def verify(folder: Path, stage: str | None = None, key: str | None = None, needs: Sequence[str] = ()) -> None:
    """Raise :class:`CorruptArtifact` unless ``folder`` is an entry whose manifest is valid and whose files match it.

    A manifest checks only what it lists, so it must also list what the entry's stage
    needs: ``needs`` names those files (``"a|b"``: either one), and a manifest listing
    no file at all is refused whatever ``needs`` says (an entry emptied by a damaged
    or rewritten manifest would otherwise be served, and its consumer fail far away).
    """
    folder = Path(folder)
    if folder.is_symlink() or not folder.is_dir():
        raise CorruptArtifact(f"{folder}: not a folder (a plain file or a link where the entry should be)")
    files = read_manifest(folder, stage, key)
    _check_listed(folder, files, stage, needs)
    for name in (MANIFEST, *files):
        path = folder / name
        if not path.is_file():
            raise CorruptArtifact(f"{folder}: {name} is missing")
        if not _inside(path, folder):
            raise CorruptArtifact(f"{folder}: {name} links outside the entry")
        if _hard_linked(path):
            raise CorruptArtifact(f"{folder}: {name} is a hard link (the same file has another name elsewhere)")
    for name, expected in files.items():
        path = folder / name
        try:
            actual = _sha256(path)
        except OSError as err:
            raise CorruptArtifact(f"{folder}: {name} cannot be read ({err})") from err
        if actual != expected:
            raise CorruptArtifact(f"{folder}: {name} does not match its sha256 (truncated or modified)")


def _remove(path: Path) -> None:
    """Delete a file, a link (never what it points to) or a folder tree; already gone is fine."""
    try:
        if path.is_symlink() or not path.is_dir():
            path.unlink(missing_ok=True)
        else:
            shutil.rmtree(path)
    except FileNotFoundError:
        pass


def _stage_folder(root: Path, stage: str) -> Path:
    """``<root>/<stage>``, created; a plain file or a link in its place is removed (not followed) with a warning."""
    if root.exists() and not root.is_dir():
        raise NotADirectoryError(f"cache root {root} is not a folder (set $CASCADEKIT_CACHE to a folder)")
    folder = root / stage
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        what = "a link" if folder.is_symlink() else "a plain file"
        warnings.warn(f"removing {folder}: {what} where the cache's {stage!r} folder should be (links are not "
                      f"followed; its entries are built afresh)", stacklevel=3)
        _remove(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _lock(folder: Path, key: str) -> FileLock:
    path = folder / f".{key}.lock"
    if path.is_symlink() or (path.exists() and not path.is_file()):
        _remove(path)  # a lock file is ours: never follow a link planted in its place
    return FileLock(str(path))


def _remove_stale_temps(folder: Path, key: str) -> None:
    """Delete ``.<key>.XXXXXXXX`` temporaries left by killed builds (call with the entry's lock held)."""
    prefix = f".{key}."
    for path in folder.iterdir():
        if path.name.startswith(prefix) and _TEMP_SUFFIX.fullmatch(path.name[len(prefix):]):
            warnings.warn(f"removing {path}: left by a build of {folder.name}/{key} that was interrupted", stacklevel=4)
            _remove(path)


def shipped_root() -> Path:
    """``data/checkpoints`` of the repository: small finished stages committed so nobody retrains them."""
    return Path(__file__).resolve().parent.parent / "data" / "checkpoints"


#: Beside a shipped entry's files: who built it, how, and from which commit (not in its manifest).
PROVENANCE = "provenance.json"
#: The most a shipped entry may weigh: the repository carries it.
MAX_SHIPPED_BYTES = 10 << 20


def _copy_files(source: Path, dest: Path, names: list[str]) -> None:
    """Copy ``names`` (paths relative to ``source``) into ``dest``, a temporary folder that is renamed as a whole."""
    for name in names:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / name, dest / name)


def ship(stage: str, key: str, provenance: dict[str, Any], root: Path | None = None) -> Path:
    """Copy the verified cache entry ``stage/key`` to ``data/checkpoints/<stage>/<key>/`` with its provenance.

    The copy carries the entry's manifest, so :func:`get_or_build` checks every
    file's sha256 before it uses the shipped entry. Refuses an entry over
    :data:`MAX_SHIPPED_BYTES`.

    Atomic like a build: the files go to ``.<key>.XXXXXXXX`` beside the
    destination, are verified there, and the folder is renamed into place by
    :func:`cascadekit.atomic.replace_folder`, which keeps a shipped entry being
    replaced until the new one is complete. A ship killed midway leaves the old
    entry (or none) and a temporary folder that readers never look at and the
    next ship of the entry deletes. The cache entry's lock is held throughout, so
    the entry is not rebuilt while it is copied and two ships of it take turns.
    """
    source = artifact_path(stage, key, root)
    if not source.is_dir():
        raise ValueError(f"no cache entry {stage}/{key} under {source.parent.parent}: build it first")
    with _lock(source.parent, key):
        verify(source, stage, key)
        files = [*read_manifest(source, stage, key), MANIFEST]
        size = sum((source / name).stat().st_size for name in files)
        if size > MAX_SHIPPED_BYTES:
            raise ValueError(f"{stage}/{key} is {size / 2**20:.1f} MiB: over the {MAX_SHIPPED_BYTES >> 20} MiB a "
                             f"shipped checkpoint may weigh")
        dest = shipped_root() / stage / key
        dest.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_temps(dest.parent, key)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=dest.parent))
        try:
            _copy_files(source, tmp, files)
            atomic_write_json(tmp / PROVENANCE, {"stage": stage, "key": key, **provenance})
            verify(tmp, stage, key)
            os.chmod(tmp, 0o755)  # mkdtemp's folder is private; a committed entry is not
            replace_folder(tmp, dest)
        finally:
            _remove(tmp)
    return dest


#: In ``data/checkpoints/``: ``{"stage/key": "stage/folder"}``, shipped entries found under another key.
ALIASES = "aliases.json"


def _entry_name(value: Any, what: str) -> tuple[str, str]:
    """``"stage/key"`` as ``(stage, key)``, each a safe component; a :class:`ValueError` naming ``what`` else."""
    parts = value.split("/") if isinstance(value, str) else []
    if len(parts) != 2:
        raise ValueError(f"{what}: {value!r} is not 'stage/key'")
    return check_component(parts[0], "stage"), check_component(parts[1], "key")


def read_aliases() -> dict[tuple[str, str], str]:
    """The shipped aliases, ``(stage, key) -> folder key``; none without the file.

    A damaged file or entry is warned about (naming the file) and left out, never
    raised: an alias only saves a build, and every cache miss of every stage reads
    this file, so one bad line must not stop them all.
    """
    path = shipped_root() / ALIASES
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (ValueError, OSError, RecursionError) as err:
        warnings.warn(f"ignoring {path}: not readable JSON ({type(err).__name__}); rewrite it with write_aliases",
                      stacklevel=2)
        return {}
    if not isinstance(data, dict):
        warnings.warn(f"ignoring {path}: a JSON {type(data).__name__}, not an object of 'stage/key': 'stage/folder'",
                      stacklevel=2)
        return {}
    aliases = {}
    for name, target in data.items():
        try:
            aliases.update([_alias(name, target, path)])
        except ValueError as err:
            warnings.warn(f"ignoring an alias in {path}: {err}", stacklevel=2)
    return aliases


def _alias(name: Any, target: Any, path: Path) -> tuple[tuple[str, str], str]:
    """One line of the aliases file as ``((stage, key), folder key)``; a :class:`ValueError` naming it if malformed."""
    stage, key = _entry_name(name, str(path))
    target_stage, folder = _entry_name(target, f"{path} at {name!r}")
    if target_stage != stage:
        raise ValueError(f"{path}: {name!r} points at another stage's entry, {target!r}")
    return (stage, key), folder


def write_aliases(aliases: dict[tuple[str, str], str]) -> Path:
    """Write ``data/checkpoints/aliases.json`` (``(stage, key) -> folder key``), sorted; every folder must be shipped.

    Each target is verified against its own manifest first, so the file never names a
    folder the lookup would refuse.
    """
    for (stage, key), folder in aliases.items():
        if folder == key:
            raise ValueError(f"{stage}/{key} is shipped under its own key: it needs no alias")
        verify(shipped_root() / stage / folder, stage, folder)
    path = shipped_root() / ALIASES
    atomic_write_json(path, {f"{s}/{k}": f"{s}/{f}" for (s, k), f in sorted(aliases.items())})
    return path


def shipped_folder(stage: str, key: str) -> tuple[Path, str] | None:
    """The shipped folder of entry ``stage/key`` and the key its manifest names (its own, or an alias's target)."""
    if (shipped_root() / stage / key).is_dir():
        return shipped_root() / stage / key, key
    folder = read_aliases().get((stage, key))
    return (shipped_root() / stage / folder, folder) if folder else None


def _copy_shipped(stage: str, key: str, dest: Path, needs: Sequence[str] = ()) -> bool:
    """Fill ``dest`` from the shipped entry ``stage/key`` (or its alias) if every file matches its manifest.

    A shipped entry that fails its manifest is reported and ignored: the stage is built instead.
    """
    found = shipped_folder(stage, key)
    if found is None:
        return False
    shipped, folder_key = found
    try:
        verify(shipped, stage, folder_key, needs)
    except CorruptArtifact as err:
        warnings.warn(f"ignoring a damaged shipped checkpoint, building instead: {err}", stacklevel=4)
        return False
    _copy_files(shipped, dest, list(read_manifest(shipped, stage, folder_key)))
    return True


def move_entry(stage: str, old: str, new: str, root: Path | None = None) -> bool:
    """Rename the cache entry ``stage/old`` to ``stage/new`` (its manifest rewritten for the new key), verified.

    For re-keying an entry without rebuilding it. False (nothing moved) when there is
    no ``stage/old`` or there already is a ``stage/new``. Both entries' locks are held.
    """
    source, target = artifact_path(stage, old, root), artifact_path(stage, new, root)
    folder = source.parent
    if not source.is_dir():
        return False
    with _lock(folder, old), _lock(folder, new):
        if target.exists() or target.is_symlink() or not source.is_dir():
            return False
        verify(source, stage, old)
        atomic_write_json(source / MANIFEST, {"stage": stage, "key": new, "files": read_manifest(source)})
        source.rename(target)
        verify(target, stage, new)
    return True


def get_or_build(stage: str, key: str, builder: Callable[[Path], None], root: Path | None = None,
                 rebuild: bool = False, needs: Sequence[str] = ()) -> Path:
    """The folder of artifact ``stage/key``, building it with ``builder(folder)`` if absent or corrupt.

    ``rebuild`` discards a cached entry and ignores a shipped one: the builder runs.
    ``needs`` names the files the entry must hold (see :func:`verify`); a build that
    leaves one out fails, a cached or shipped entry whose manifest leaves one out is rebuilt.
    """
    target = artifact_path(stage, key, root)
    if distributed.world_size() > 1:
        return _get_or_build_together(stage, key, builder, target, rebuild, needs)
    return _get_or_build_alone(stage, key, builder, target, rebuild, needs)


def _acquired(folder: Path, stage: str, key: str) -> FileLock:
    """The entry's lock, taken (waiting, with one line on stderr, while another build holds it)."""
    lock = _lock(folder, key)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        lock_name = os.path.relpath(lock.lock_file, folder.parent)  # a notebook's output names no machine path
        print(f"cascadekit: waiting for another build of {stage}/{key} to finish (lock {lock_name} in the artifact cache)",
              file=sys.stderr, flush=True)
        lock.acquire()
    return lock


def _get_or_build_alone(stage: str, key: str, builder: Callable[[Path], None], target: Path, rebuild: bool,
                        needs: Sequence[str]) -> Path:
    """:func:`get_or_build` in one process: the entry's lock held from the first check to the final rename."""
    folder = _stage_folder(target.parent.parent, stage)
    lock = _acquired(folder, stage, key)
    try:
        if rebuild and (target.is_symlink() or target.exists()):
            _remove(target)
        return _get_or_build_locked(stage, key, builder, target, folder, use_shipped=not rebuild, needs=needs)
    finally:
        lock.release()


def _cached(stage: str, key: str, target: Path, folder: Path, needs: Sequence[str]) -> bool:
    """Whether ``target`` is a finished entry; a corrupt one is removed with a warning (call with the lock held)."""
    _remove_stale_temps(folder, key)
    if not (target.is_symlink() or target.exists()):
        return False
    try:
        verify(target, stage, key, needs)
        return True
    except CorruptArtifact as err:
        warnings.warn(f"rebuilding corrupt cache entry: {err}", stacklevel=4)
        try:
            _remove(target)
        except OSError as rm_err:
            raise CorruptArtifact(f"{target} is corrupt and cannot be removed: {rm_err}") from rm_err
    return False


@contextlib.contextmanager
def _temporary(folder: Path, key: str) -> Iterator[Path]:
    """A fresh ``.<key>.XXXXXXXX`` beside the entry, deleted afterwards unless it was renamed into place."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=folder))
    try:
        yield tmp
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _finish(tmp: Path, stage: str, key: str, target: Path, needs: Sequence[str]) -> None:
    """Write ``tmp``'s manifest (the build's last write), check it holds what the stage needs, rename it to ``target``."""
    write_manifest(tmp, stage, key)
    _check_listed(tmp, read_manifest(tmp), stage, needs)
    try:
        tmp.rename(target)
    except OSError:
        # Only a writer that bypassed the lock can have put something there; use it only if it verifies.
        verify(target, stage, key, needs)


def _get_or_build_locked(stage: str, key: str, builder: Callable[[Path], None], target: Path, folder: Path,
                         use_shipped: bool = True, needs: Sequence[str] = ()) -> Path:
    if _cached(stage, key, target, folder, needs):
        return target
    with _temporary(folder, key) as tmp:
        if not (use_shipped and _copy_shipped(stage, key, tmp, needs)):
            builder(tmp)
        _finish(tmp, stage, key, target, needs)
    return target


# ---------------------------------------------------------------------------
# Many processes (torchrun): decided once, trained by all, written once
# ---------------------------------------------------------------------------

_READY, _BUILD = "ready", "build"


def _get_or_build_together(stage: str, key: str, builder: Callable[[Path], None], target: Path,
                           rebuild: bool, needs: Sequence[str]) -> Path:
    """:func:`get_or_build` when several processes train together (``torchrun``, ``accelerate launch``).

    Every process calls the same stage, and the builder's Trainer waits for all of
    them. If each took the entry's lock as one process does, the first would wait
    in the Trainer for the others while they wait for the lock: a deadlock. So the
    main process (global rank 0) alone touches the cache: it takes the lock, checks
    the entry (or copies a shipped one) and broadcasts whether a build is needed.
    If it is, every process runs ``builder``: the main process into the entry's
    temporary folder, the others into a scratch folder of their own, deleted
    afterwards (the kit's savers write only on the main process, see
    :func:`cascadekit.engine.runtime.save_checkpoint`). The main process writes the
    manifest and renames the entry into place, then broadcasts that it is done,
    or its error, so no process waits forever on a failed main process. Every
    process then uses the finished entry, which must be on a filesystem they all see.
    """
    if distributed.is_main():
        return _main_decides_and_writes(stage, key, builder, target, rebuild, needs)
    if _heard(stage, key) == _BUILD:
        with tempfile.TemporaryDirectory(prefix=f"cascadekit-{stage}-{key}-rank{distributed.rank()}-") as scratch:
            builder(Path(scratch))
        _heard(stage, key)
    if not (target / MANIFEST).is_file():
        raise CorruptArtifact(f"{target}: the main process finished this entry but rank {distributed.rank()} cannot "
                              f"see it; every process must share the cache folder (set $CASCADEKIT_CACHE to a "
                              f"folder on a shared filesystem)")
    return target


def _main_decides_and_writes(stage: str, key: str, builder: Callable[[Path], None], target: Path,
                             rebuild: bool, needs: Sequence[str]) -> Path:
    folder = _stage_folder(target.parent.parent, stage)
    lock = _acquired(folder, stage, key)
    try:
        if _announced(lambda: _plan(stage, key, target, folder, rebuild, needs)) == _BUILD:
            _announced(lambda: _get_or_build_locked(stage, key, builder, target, folder, use_shipped=False, needs=needs))
    finally:
        lock.release()
    return target


def _plan(stage: str, key: str, target: Path, folder: Path, rebuild: bool, needs: Sequence[str]) -> str:
    """``_READY`` if the entry is cached (or was just copied from a shipped one), else ``_BUILD``."""
    if rebuild and (target.is_symlink() or target.exists()):
        _remove(target)
    if _cached(stage, key, target, folder, needs):
        return _READY
    if not rebuild:
        with _temporary(folder, key) as tmp:
            if _copy_shipped(stage, key, tmp, needs):
                _finish(tmp, stage, key, target, needs)
                return _READY
    return _BUILD


def _announced(step: Callable[[], Any]) -> Any:
    """``step()`` on the main process, its result (or its error) broadcast to the others."""
    try:
        result = step()
    except Exception as err:
        distributed.broadcast({"error": f"{type(err).__name__}: {err}"})
        raise
    distributed.broadcast({"result": result})
    return result


def _heard(stage: str, key: str) -> Any:
    """What the main process announced; its error is raised here too, naming the entry."""
    message = distributed.broadcast(None)
    if "error" in message:
        raise RuntimeError(f"the main process failed on cache entry {stage}/{key}: {message['error']}")
    return message["result"]
