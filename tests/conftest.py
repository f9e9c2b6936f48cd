"""Shared fixtures: one smoke-scale course run serves every notebook and book test."""
from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep the artifact cache of a test run out of the user's home."""
    os.environ.setdefault("CASCADEKIT_CACHE", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Execute every chapter at the smoke scale once; return the output folder."""
    from cascadekit.runner import run_course

    out = tmp_path_factory.mktemp("smoke_run")
    run_course("smoke", out)
    return out


@pytest.fixture(scope="session")
def solutions_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Execute every chapter's worked solutions (``notebooks/solutions/``) once; return the output folder."""
    from cascadekit.runner import NOTEBOOK_DIR, execute_chapter

    out = tmp_path_factory.mktemp("solutions_run")
    for notebook in sorted((NOTEBOOK_DIR / "solutions").glob("*.ipynb")):
        execute_chapter(notebook, out, "smoke")  # raises with the failing cell's traceback
    return out
