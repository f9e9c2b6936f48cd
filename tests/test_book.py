"""The book builds offline from the smoke-scale executions, with no broken
internal links and a figure on every chapter page."""
from __future__ import annotations

from pathlib import Path

import pytest

from cascadekit.book import BookBuildError, broken_internal_links, build_book, pages_missing_figures, stage
from cascadekit.runner import chapters


@pytest.mark.notebook
def test_book_builds_from_smoke_run(smoke_run: Path, tmp_path: Path) -> None:
    html = build_book(smoke_run, tmp_path / "html")
    stems = [p.stem for p in chapters()]
    for page in ["index", "setup", "teaching", "results", "glossary"] + [f"chapters/{s}" for s in stems]:
        assert (html / f"{page}.html").exists(), page
    assert broken_internal_links(html) == []
    assert pages_missing_figures(html, stems) == []
    guide = (html / "teaching.html").read_text()
    assert "Syllabus" in guide and "Measured time per chapter" in guide and "04.1" in guide


def test_book_refuses_an_empty_run(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    with pytest.raises(BookBuildError, match="no executed chapters"):
        stage(tmp_path / "nothing", src)


def test_link_checker_finds_a_broken_link(tmp_path: Path) -> None:
    (tmp_path / "a.html").write_text('<a href="b.html#x">b</a> <a href="missing.html">m</a> <a href="https://x.org">e</a>')
    (tmp_path / "b.html").write_text("<p>b</p>")
    assert broken_internal_links(tmp_path) == ["a.html -> missing.html"]
