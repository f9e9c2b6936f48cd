"""Atomic file writes: a finished file is either the old one or the whole new one.

Every file the kit writes (JSONL, metrics, results, manifests, summaries) goes
through :func:`atomic_open`: the data is written to a hidden temporary file in the
same folder, flushed to disk, and renamed over the target. A run killed mid-write
(``kill -9``, a full disk) leaves the previous file intact and at worst a stray
``.NAME.*.tmp`` beside it, never half a file under the real name.
"""
from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

__all__ = ["atomic_open", "atomic_write_text", "atomic_write_json", "atomic_write_jsonl_gz", "replace_folder",
           "same_file"]


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8",
                replace: bool = True) -> Iterator[IO]:
    """Open a temporary file beside ``path``; on a clean exit it replaces ``path``.

    ``mode`` is ``"w"`` (text) or ``"wb"`` (bytes). The parent folder is created.
    If the block raises, the temporary file is removed and ``path`` is untouched.
    With ``replace=False`` an existing ``path`` is kept and :class:`FileExistsError`
    raised instead; the finished file is hard-linked into place, so the check and
    the write are one step (no other writer can slip in between).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files: mode must be 'w' or 'wb', not {mode!r}")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with open(fd, mode, encoding=None if "b" in mode else encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        if replace:
            os.replace(tmp, target)
        else:
            os.link(tmp, target)  # FileExistsError if anything is there, a link included
            os.unlink(tmp)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str, replace: bool = True) -> None:
    """Write ``text`` to ``path`` atomically (``replace=False``: :class:`FileExistsError` if ``path`` exists)."""
    with atomic_open(path, replace=replace) as fh:
        fh.write(text)


def atomic_write_json(path: str | os.PathLike, data: Any, indent: int | None = 1) -> None:
    """Write ``data`` as JSON to ``path`` atomically."""
    atomic_write_text(path, json.dumps(data, indent=indent) + "\n")


def atomic_write_jsonl_gz(path: str | os.PathLike, records: Iterable[Any]) -> None:
    """Write one JSON line per record, gzip-compressed (``.jsonl.gz``), atomically."""
    with atomic_open(path, "wb") as raw, \
            gzip.GzipFile(filename=Path(path).name.removesuffix(".gz"), mode="wb", fileobj=raw) as packed, \
            io.TextIOWrapper(packed, encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in records)


def replace_folder(new: str | os.PathLike, dest: str | os.PathLike) -> None:
    """Rename the finished folder ``new`` to ``dest``; an existing ``dest`` is kept until ``new`` is in place.

    A folder cannot be renamed over another, so an old ``dest`` is first renamed
    aside (into ``.<name>.XXXXXXXX`` beside it), then ``new`` is renamed in, then
    the old one is deleted. A crash before the first rename leaves the old
    ``dest``, after the second the new one; between the two (two system calls)
    ``dest`` is missing while both whole folders sit under temporary names, and
    the next writer of ``dest`` deletes those. Never a half-written ``dest``.
    """
    new, dest = Path(new), Path(dest)
    if not (dest.exists() or dest.is_symlink()):
        os.replace(new, dest)
        return
    aside = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    os.replace(dest, aside / "old")
    os.replace(new, dest)
    shutil.rmtree(aside)


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two paths name the same file (through links and ``..``); False if either is missing."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)
