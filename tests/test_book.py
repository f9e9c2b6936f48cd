"""The book builds offline from the smoke-scale executions, with no broken
internal links and a figure on every chapter page."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from cascadekit.course.book import SMOKE_NOTICE, broken_internal_links, build_book, machine_paths, pages_missing_figures, stage
from cascadekit.cli import main
from cascadekit.course.runner import chapters


@pytest.mark.notebook
def test_book_builds_from_smoke_run(smoke_run: Path, tmp_path: Path) -> None:
    html = build_book(smoke_run, tmp_path / "html")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["html"]  # no jupyter_execute/ beside --out (issue 30)
    assert machine_paths(html) == []  # issue 37
    assert _beyond_recorded_scratch(machine_paths(smoke_run)) == []
    stems = [p.stem for p in chapters()]
    for page in ["index", "setup", "teaching", "results", "glossary"] + [f"chapters/{s}" for s in stems]:
        assert (html / f"{page}.html").exists(), page
    assert broken_internal_links(html) == []
    assert pages_missing_figures(html, stems) == []
    guide = (html / "teaching.html").read_text()
    assert "Syllabus" in guide and "Measured time per chapter" in guide and "04.1" in guide
    for stem in stems:
        page = (html / "chapters" / f"{stem}.html").read_text()
        assert not re.search(r"src=\"https?://|<link[^>]*href=\"https?://", page), f"{stem}: loads something from the network"
        assert "|---|" not in page and "|—|" not in page, f"{stem}: a Markdown table shown as text"
        if int(stem[:2]) >= 3:  # every chapter that trains shows the paper beside this run, as a table
            assert re.search(r"<th[^>]*>(<p>)?(paper|verdict)", page), f"{stem}: no paper-vs-run table"
    chapter = (html / "chapters" / "13_swe_rl.html").read_text()
    assert (html / "_static" / "mathjax" / "tex-chtml.js").exists() and "_static/mathjax/tex-chtml.js" in chapter
    assert "tag_injected-parameters" in chapter and "tag_parameters" not in chapter  # only the run's own parameters
    notice = "This is the untrained smoke run"
    assert notice in SMOKE_NOTICE and all(notice in (html / f"{page}.html").read_text()
                                          for page in ["index"] + [f"chapters/{s}" for s in stems])


def _beyond_recorded_scratch(found: list[str]) -> list[str]:
    """Machine paths in the executed notebooks other than the scratch folders the committed runs' commands record.

    Chapters 09 and 10 print their committed run's command as recorded (``--work /tmp/work09c``); the
    book shows it as ``--work DIR``, but the executed notebook keeps what the chapter printed.
    """
    import json

    from cascadekit.results import RESULTS_DIR

    recorded = set()
    for metrics in RESULTS_DIR.glob("*/metrics.json"):
        command = json.loads(metrics.read_text()).get("produced_by", {}).get("command", "")
        recorded.update(re.findall(r"--work[= ](/\S+)", command))
    return [f for f in found if not any(r.startswith(f.split(": ", 1)[1]) for r in recorded)]


def test_staging_hides_the_default_parameters_only_under_injected_ones(tmp_path: Path) -> None:
    import nbformat

    from cascadekit.course.book import stage_chapter

    cells = [nbformat.v4.new_code_cell('scale = "toy"', metadata={"tags": ["parameters"]}),
             nbformat.v4.new_code_cell('scale = "paper"', metadata={"tags": ["injected-parameters"]})]
    for name, chapter_cells in (("injected", cells), ("plain", cells[:1])):
        nbformat.write(nbformat.v4.new_notebook(cells=chapter_cells), tmp_path / f"{name}.ipynb")
        stage_chapter(tmp_path / f"{name}.ipynb", tmp_path / f"{name}-staged.ipynb")
    injected = nbformat.read(tmp_path / "injected-staged.ipynb", as_version=4).cells
    assert injected[0].metadata["tags"] == ["parameters", "remove-cell"]
    assert injected[1].metadata["tags"] == ["injected-parameters"]
    plain = nbformat.read(tmp_path / "plain-staged.ipynb", as_version=4).cells
    assert plain[0].metadata["tags"] == ["parameters"] and len(plain) == 1
    title = nbformat.v4.new_markdown_cell("# 01 · A chapter")
    smoke = [title, nbformat.v4.new_code_cell('scale = "smoke"', metadata={"tags": ["injected-parameters"]})]
    nbformat.write(nbformat.v4.new_notebook(cells=smoke), tmp_path / "smoke.ipynb")
    stage_chapter(tmp_path / "smoke.ipynb", tmp_path / "smoke-staged.ipynb")
    staged = nbformat.read(tmp_path / "smoke-staged.ipynb", as_version=4).cells
    assert [c.source for c in staged[:2]] == ["# 01 · A chapter", SMOKE_NOTICE]  # the notice under the title


def test_book_refuses_an_empty_run(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    with pytest.raises(ValueError, match="no executed chapters"):
        stage(tmp_path / "nothing", src)


@pytest.mark.parametrize("case", ["out is a file", "executed is missing", "executed is empty", "out holds the input",
                                  "out holds other files"])
def test_bad_book_arguments_are_one_line_and_exit_2(case: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 30: no Sphinx traceback, no exit 1, and nothing written, before any build starts."""
    executed, out = tmp_path / "run", tmp_path / "html"
    executed.mkdir()
    (executed / "01_x.ipynb").write_text("{}")
    if case == "out is a file":
        out.write_text("keep me")
    elif case == "executed is missing":
        executed = tmp_path / "nonexistent"
    elif case == "executed is empty":
        (executed / "01_x.ipynb").unlink()
    elif case == "out holds the input":
        out = tmp_path
    else:
        out.mkdir()
        (out / "notes.txt").write_text("keep me")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert main(["book", "--executed", str(executed), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cascadekit book: error: ") and err.count("\n") == 1, err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_link_checker_finds_a_broken_link(tmp_path: Path) -> None:
    (tmp_path / "a.html").write_text('<a href="b.html#x">b</a> <a href="missing.html">m</a> <a href="https://x.org">e</a>')
    (tmp_path / "b.html").write_text("<p>b</p>")
    assert broken_internal_links(tmp_path) == ["a.html -> missing.html"]
