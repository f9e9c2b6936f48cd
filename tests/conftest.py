"""Shared fixtures: one smoke-scale course run serves every notebook and book test.

The README's test command runs two pytest-xdist workers (``-n 2``), and each
worker is a pytest session of its own. They share the run's common temporary
folder: one artifact cache and one smoke run, whose chapters they split between
them (:func:`cascadekit.course.runner.run_notebooks` locks each chapter, so nothing is
executed twice). The tests that need the executed notebooks are collected first,
so both workers start on them while the cores are free, and each notebook
executed prints a line to the terminal, since a notebook takes seconds to minutes.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable

import pytest

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if WORKER:  # two workers share two cores: one thread each, kernels included (they inherit it)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")

#: The fixtures of the tests that read the executed notebooks.
EXECUTED = ("smoke_run", "solutions_run")


def _shared(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A folder every worker of this test run sees (the workers' common temporary folder)."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if WORKER else base) / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _terminal(config: pytest.Config) -> Callable[[str], None]:
    """A function printing one line to the terminal, past pytest's (and a worker's) output capture."""
    capture = config.pluginmanager.getplugin("capturemanager")
    prefix = f"[{WORKER}] " if WORKER else ""

    def say(line: str) -> None:
        with capture.global_and_fixture_disabled():
            sys.stderr.write(f"\n{prefix}{line}")
            sys.stderr.flush()

    return say


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that need executed notebooks first (a stable sort: the same order on every worker)."""
    items.sort(key=lambda item: next((i for i, name in enumerate(EXECUTED) if name in getattr(item, "fixturenames", ())),
                                     len(EXECUTED)))


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep the artifact cache of a test run out of the user's home; one cache for all workers."""
    os.environ.setdefault("CASCADEKIT_CACHE", str(_shared(tmp_path_factory, "cache")))


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Path:
    """Every chapter executed at the smoke scale once per test run, shared by the workers; the output folder."""
    from cascadekit.course.runner import run_course

    out = _shared(tmp_path_factory, "smoke_run")
    run_course("smoke", out, log=_terminal(pytestconfig))
    return out


@pytest.fixture(scope="session")
def solutions_run(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Path:
    """Every chapter's worked solutions (``notebooks/solutions/``) executed once per test run; the output folder."""
    from cascadekit.course.runner import NOTEBOOK_DIR, run_notebooks

    out = _shared(tmp_path_factory, "solutions_run")
    run_notebooks(sorted((NOTEBOOK_DIR / "solutions").glob("*.ipynb")), out, "smoke", log=_terminal(pytestconfig))
    return out  # run_notebooks raises with the failing cell's traceback
