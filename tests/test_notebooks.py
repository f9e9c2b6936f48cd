"""Every chapter is committed clean, starts with a papermill parameters cell, and
executes headlessly at the smoke scale into a compact notebook."""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from cascadekit.runner import chapters

CHAPTERS = chapters()
MAX_EXECUTED_BYTES = 3_000_000  # figures included; a runaway progress bar or widget would blow this


def test_there_are_chapters() -> None:
    assert [p.name[:2] for p in CHAPTERS][:2] == ["01", "02"]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_committed_without_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name} has outputs committed"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_first_code_cell_is_parameters(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert "parameters" in first.metadata.get("tags", [])
    for name in ("scale", "seed", "out_dir"):
        assert f"{name} =" in first.source
    second = [c for c in nb.cells if c.cell_type == "code"][1]
    assert "start_chapter(" in second.source


@pytest.mark.notebook
def test_every_chapter_executes_at_smoke_scale(smoke_run: Path) -> None:
    summary = json.loads((smoke_run / "summary.json").read_text())
    statuses = {c["chapter"]: c["status"] for c in summary["chapters"]}
    assert statuses == {p.stem: "ok" for p in CHAPTERS}


@pytest.mark.notebook
@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_executed_notebook_is_compact(smoke_run: Path, path: Path) -> None:
    executed = smoke_run / path.name
    assert executed.stat().st_size < MAX_EXECUTED_BYTES
    nb = nbformat.read(executed, as_version=4)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
