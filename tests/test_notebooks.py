"""Every chapter is committed clean, starts with a papermill parameters cell, and
executes headlessly at the smoke scale into a compact notebook."""
from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

from cascadekit.course.runner import chapters

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
    assert f'ch = chapter("{path.stem[:2]}", scale, seed, out_dir, overrides)' in second.source, \
        f"{path.name}: the second cell opens its own chapter object"
    # a chapter with a committed run leads with its claims (issue 37), except the RL chapters that show them
    # once, after explaining them (issue 58: tests/test_notebook_teaching.py)
    if int(path.stem[:2]) >= 3 and path.stem[:2] not in ("09", "10", "11", "13"):
        third = [c for c in nb.cells if c.cell_type == "code"][2]
        assert third.source.strip() == "ch.at_a_glance()", f"{path.name}: the committed claims come first"


@pytest.mark.parametrize("path", CHAPTERS + sorted((CHAPTERS[0].parent / "solutions").glob("*.ipynb")),
                         ids=lambda p: p.stem)
def test_a_notebook_opens_on_the_course_scale_and_writes_where_git_ignores(path: Path) -> None:
    """Issue 37: Run All in JupyterLab gives the toy run (the committed one where there is one), not smoke,
    and running in place leaves nothing for git to pick up."""
    import subprocess

    first = next(c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
    defaults: dict = {}
    exec(first.source, defaults)
    assert defaults["scale"] == "toy"
    written = path.parent / defaults["out_dir"] / "figure.png"
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    ignored = subprocess.run(["git", "check-ignore", "-q", str(written.relative_to(root))], cwd=root)
    assert ignored.returncode == 0, f"{written.relative_to(root)} is not ignored by git"


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


_CHAPTER_RUN = re.compile(r"^\s*\w+ = ([\w.]*\brun)\(config, out_dir\)", re.M)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_a_committed_toy_run_is_read_unless_retrain(path: Path) -> None:
    """A chapter with a committed toy run gets its results from ``ch.results(retrain)``, with a ``retrain`` parameter.

    A toy chapter trains for minutes to an hour, so a course reads the committed run by
    default (issue 22); a chapter with nothing committed yet has nothing to read.
    """
    from cascadekit.chapters import specs
    from cascadekit.results import RESULTS_DIR

    nb = nbformat.read(path, as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    chapter = specs().get(path.stem[:2])
    if chapter is None or not (RESULTS_DIR / chapter.folder / "metrics.json").exists():
        pytest.skip(f"{path.stem} has no committed toy run")
    direct = [m.group(0).strip() for source in code for m in _CHAPTER_RUN.finditer(source)]
    assert not direct, f"{path.name} calls its run directly: {direct}"
    assert "committed_or_run(" not in "\n".join(code), f"{path.name}: read the results through ch.results(retrain)"
    uses = re.findall(r"\bch\.results\(([^)]*)\)", "\n".join(code))
    assert all(u == "retrain" for u in uses), uses
    if uses:
        assert re.search(r"^retrain = False\b", code[0], re.M), f"{path.name}: no `retrain = False` parameter"
