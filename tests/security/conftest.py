"""The security suite imports its shared hostile programs by module name.

``kit_copy`` copies the kit and the hostile programs where another uid can read
them, for the runs that leave the test environment: as uid 65534, and inside a
user namespace the test makes.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


@pytest.fixture(scope="module")
def kit_copy() -> Iterator[Callable[[int | None], Path]]:
    """``kit_copy(owner)``: a fresh folder holding ``cascadekit/`` and ``hostile_programs.py``.

    Everything is readable by every uid; with ``owner`` it is also owned (writable)
    by that uid. The folders sit directly in /tmp, not in pytest's base folder,
    whose parent any pytest session starting meanwhile makes private to root again.
    """
    made: list[Path] = []

    def copy(owner: int | None = None) -> Path:
        home = Path(tempfile.mkdtemp(prefix="cascadekit-kit-", dir="/tmp"))
        made.append(home)
        shutil.copytree(HERE.parents[1] / "cascadekit", home / "cascadekit",
                        ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(HERE / "hostile_programs.py", home / "hostile_programs.py")
        for path in [home, *home.rglob("*")]:
            os.chmod(path, os.stat(path).st_mode | (0o005 if path.is_dir() else 0o004))
            if owner is not None:
                os.chown(path, owner, owner)
        return home

    yield copy
    for home in made:
        shutil.rmtree(home, ignore_errors=True)
