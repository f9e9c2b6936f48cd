"""Which version of the kit's code produced an artifact.

Results and executed notebooks record a code version so that a reader can tell
which code produced a number, and the course runner can skip a chapter only
when nothing it depends on has changed. It is the package version plus a hash
of the library's source files and the notebooks, so it works without git too.
"""
from __future__ import annotations

import hashlib
import subprocess
from functools import lru_cache
from pathlib import Path

from cascadekit import __version__

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_DIR = PACKAGE_DIR.parent


@lru_cache(maxsize=1)
def source_hash() -> str:
    """sha256 (12 hex digits) over the package's .py/.yaml/.jinja files, in path order."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE_DIR.rglob("*")):
        if path.suffix in {".py", ".yaml", ".jinja", ".json"} and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(PACKAGE_DIR)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def git_commit() -> str:
    """The checkout's commit (with ``-dirty`` when files changed), or ``unknown``."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(REPO_DIR), "rev-parse", "--short=12", "HEAD"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO_DIR), "status", "--porcelain", "--", "cascadekit", "notebooks"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{commit}-dirty" if dirty else commit


def code_version() -> str:
    """``<package version>+<source hash>``: stable for the same library code."""
    return f"{__version__}+{source_hash()}"
