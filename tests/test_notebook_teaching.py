"""Notebooks that teach before they tabulate (issue 58), read from the committed notebook JSON.

* An RL chapter shows its claims table once, in the section that explains how to read it, explanation
  first: the committed run's table; the notebook's own run's table only when it trained one (guarded by
  ``trained_here``). Chapters 10 and 11 showed the same eight-column table three times before any
  explanation (at a glance, this run, the committed run).
* Prose is rendered by the chapter's library, not by a long notebook cell: no code cell that renders prose
  (``render(``) runs longer than :data:`MAX_PROSE_CELL_LINES` lines (chapters 04 and 07 had 78 and 79).
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
#: The RL chapters whose claims table is shown once, where it is explained.
TEACH_FIRST = ("09", "10", "11", "13")
#: A code cell that renders prose may be this long; longer rendering belongs in the chapter's module.
MAX_PROSE_CELL_LINES = 25

_CLAIMS = re.compile(r"ch\.claims\((\w+)\)|at_a_glance\(")


def _notebook(number: str) -> list:
    return nbformat.read(next(NOTEBOOKS.glob(f"{number}_*.ipynb")), as_version=4).cells


def _claims_cells(cells: list) -> list[tuple[int, str]]:
    """(index, what it renders) of every code cell that shows a claims table."""
    shown = []
    for i, cell in enumerate(cells):
        if cell.cell_type == "code":
            for match in _CLAIMS.finditer(cell.source):
                shown.append((i, match.group(1) or "at a glance"))
    return shown


@pytest.mark.parametrize("number", TEACH_FIRST)
def test_the_claims_table_is_shown_once_after_its_explanation(number: str) -> None:
    cells = _notebook(number)
    shown = _claims_cells(cells)
    committed = [i for i, what in shown if what == "toy"]
    assert len(committed) == 1, f"chapter {number}: the committed run's claims shown {len(committed)} times: {shown}"
    assert all(what in ("toy", "metrics") for _, what in shown), f"chapter {number}: another claims table: {shown}"
    for i, what in shown:
        if what == "metrics":  # this notebook's own run: only when it trained one
            guarded = re.search(r"^if trained_here:.*\n(?:    .*\n)*?    .*ch\.claims\(metrics\)", cells[i].source, re.M)
            assert guarded, f"chapter {number}: this run's claims shown even when it is the committed run"
    explained = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and "How to read the claims" in c.source]
    assert explained and explained[0] < committed[0], f"chapter {number}: the claims come before their explanation"


@pytest.mark.parametrize("number", ("04", "07", *TEACH_FIRST))
def test_no_long_cell_renders_prose(number: str) -> None:
    long = [(i, len(c.source.splitlines())) for i, c in enumerate(_notebook(number))
            if c.cell_type == "code" and "render(" in c.source and len(c.source.splitlines()) > MAX_PROSE_CELL_LINES]
    assert not long, f"chapter {number}: prose rendered by long cells (index, lines): {long}"


@pytest.mark.parametrize("number", ("04", "07"))
def test_the_story_is_rendered_by_the_chapter_from_its_committed_metrics(number: str) -> None:
    from cascadekit import chapters
    from cascadekit.results import load_metrics

    spec = chapters.specs()[number]
    metrics, longer = load_metrics(spec.folder), load_metrics(f"{spec.folder}/base-32M")
    module = chapters.chapter_module(number)
    text = module.story(metrics, longer)
    assert "{" not in text and "}" not in text, "a field was left unfilled"
    edge = metrics["settings"]["ops"]["edge"]
    assert f"{min(edge)}-{max(edge)}" in text  # the bands the run measured, read from its settings
    assert text.startswith(module.story(metrics).rstrip())  # the longer base only adds its section
    cells = [c.source for c in _notebook(number) if c.cell_type == "code"]
    assert any(f"ch{number}.story(" in source for source in cells), f"chapter {number} does not show the story"


def test_chapter_04_draws_its_arms_on_the_bands_the_run_measured() -> None:
    from cascadekit.bands import Bands
    from cascadekit.chapters import resolve
    from cascadekit.chapters.ch04_edge_of_competence import run_bands
    from cascadekit.results import load_metrics

    metrics = load_metrics("04_edge_of_competence")
    bands = run_bands(metrics)
    assert {name: list(bands.ops(name)) for name in metrics["settings"]["ops"]} == metrics["settings"]["ops"]
    assert bands != Bands.of_world(resolve("04", "toy").profile.world)  # the profile's edge is not the run's
    drawing = [c.source for c in _notebook("04") if c.cell_type == "code" and "band_problems(" in c.source]
    assert drawing and all("run_bands(" in source for source in drawing), "the arms are drawn on the profile's bands"
