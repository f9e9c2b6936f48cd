"""Build the course book (Sphinx + MyST-NB) from notebooks papermill already executed.

The book never executes a notebook: it stages the pages in ``book/``, the
executed chapters and the committed toy-scale results into a scratch source
folder and runs Sphinx there, offline. ``broken_internal_links`` and
``pages_missing_figures`` are the checks the test suite applies to the result.
"""
from __future__ import annotations

import json
import re
import shutil
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urldefrag

from cascadekit.atomic import atomic_write_text, same_file
from cascadekit.codeversion import REPO_DIR
from cascadekit.guide import syllabus_page

BOOK_DIR = REPO_DIR / "book"
RESULTS_DIR = REPO_DIR / "data" / "results"


class BookBuildError(RuntimeError):
    """Sphinx failed; the message carries its log."""


def results_page(results_dir: Path = RESULTS_DIR) -> str:
    """Gather every chapter's committed "paper vs this run" table into one page."""
    parts = ["# Paper vs this kit", "",
             "Each chapter ends with a table comparing the paper's numbers with a toy-scale run on a",
             "2-core CPU. These are the committed tables, with the command and code version that produced them.", ""]
    tables = sorted(results_dir.glob("*/paper_vs_run.md"))
    for table in tables:
        parts += [table.read_text().strip(), ""]
    if not tables:
        parts.append("No toy-scale results are committed yet.")
    return "\n".join(parts) + "\n"


def toy_wall_minutes(metrics: dict) -> float | None:
    """A toy run's wall time in minutes, from whichever timing keys its chapter records."""
    if "wall_s" in metrics:
        return metrics["wall_s"] / 60
    parts = [v for k, v in metrics.items() if k.endswith("wall_s") and isinstance(v, (int, float))]
    return sum(parts) / 60 if parts else None


def timings_page(results_dir: Path = RESULTS_DIR) -> str:
    """Measured wall times: the committed smoke course run, and each committed toy run."""
    parts = [re.sub(r"^# ", "### ", s.read_text(), flags=re.M) for s in sorted((results_dir / "timings").glob("*.md"))]
    rows = ["### Toy-scale runs (`data/results/`)", "", "| results | wall time (min) | command |", "|---|---|---|"]
    for path in sorted(results_dir.glob("*/metrics.json")):
        try:
            metrics = json.loads(path.read_text())
        except ValueError:
            continue
        minutes = toy_wall_minutes(metrics)
        command = metrics.get("produced_by", {}).get("command") or metrics.get("command", "")
        if minutes is not None:
            rows.append(f"| {path.parent.name} | {minutes:.0f} | `{command}` |")
    parts.append("\n".join(rows) if len(rows) > 4 else "No toy-scale run has been committed yet.")
    return "\n\n".join(parts) + "\n"


def stage(executed_dir: Path, src: Path) -> list[Path]:
    """Copy the book pages, executed chapters and figures into ``src``; return the chapters."""
    for page in BOOK_DIR.iterdir():
        if page.suffix in {".md", ".py"}:
            shutil.copy(page, src / page.name)
    atomic_write_text(src / "results.md", results_page())
    atomic_write_text(src / "timings.md", timings_page())
    atomic_write_text(src / "syllabus.md", syllabus_page())
    chapters_dir = src / "chapters"
    chapters_dir.mkdir()
    executed = sorted(Path(executed_dir).glob("[0-9][0-9]_*.ipynb"))
    if not executed:
        raise BookBuildError(f"no executed chapters (NN_*.ipynb) in {executed_dir}; run `cascadekit run` first")
    for notebook in executed:
        stage_chapter(notebook, chapters_dir / notebook.name)
    return executed


def stage_chapter(notebook: Path, dest: Path) -> None:
    """Copy an executed chapter, hiding its default ``parameters`` cell where papermill injected the run's own.

    The default cell says ``scale = "smoke"``; the injected one below it holds what
    the run used, so a reader sees one parameters cell and the right one.
    """
    import nbformat

    chapter = nbformat.read(notebook, as_version=4)
    tags = [set(cell.metadata.get("tags", [])) for cell in chapter.cells]
    if any("injected-parameters" in t for t in tags):
        for cell, cell_tags in zip(chapter.cells, tags):
            if "parameters" in cell_tags:
                cell.metadata["tags"] = sorted(cell_tags | {"remove-cell"})
    nbformat.write(chapter, dest)


def build_book(executed_dir: Path, out: Path) -> Path:
    """Build the HTML book into ``out`` from the executed notebooks in ``executed_dir``."""
    from sphinx.cmd.build import build_main

    out = Path(out)
    for source in (Path(executed_dir), BOOK_DIR):
        if same_file(out, source):
            raise ValueError(f"--out {str(out)!r} is the input folder {str(source)!r}: refusing to build over it")
    with tempfile.TemporaryDirectory() as scratch:
        src = Path(scratch) / "src"
        src.mkdir()
        stage(Path(executed_dir), src)
        log = Path(scratch) / "sphinx.log"
        status = build_main(["-b", "html", "-q", "-w", str(log), "-E", str(src), str(out)])
        warnings = log.read_text() if log.exists() else ""
        if status != 0:
            raise BookBuildError(f"sphinx exited {status}:\n{warnings}")
    return out


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.images = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "a" and values.get("href"):
            self.hrefs.append(values["href"] or "")
        if tag == "img" and (values.get("src") or "").startswith(("data:image", "_images/", "../_images/")):
            self.images += 1


def _parse(page: Path) -> _Links:
    parser = _Links()
    parser.feed(page.read_text(errors="replace"))
    return parser


def broken_internal_links(html_dir: Path) -> list[str]:
    """``page -> href`` for every relative link whose target file does not exist."""
    broken = []
    for page in sorted(Path(html_dir).rglob("*.html")):
        for href in _parse(page).hrefs:
            target, _ = urldefrag(href)
            if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # same-page anchor, or an external / mailto link
            if not (page.parent / unquote(target)).resolve().exists():
                broken.append(f"{page.relative_to(html_dir)} -> {href}")
    return broken


def pages_missing_figures(html_dir: Path, chapter_stems: list[str]) -> list[str]:
    """Chapter pages that render no image at all."""
    return [stem for stem in chapter_stems
            if _parse(Path(html_dir) / "chapters" / f"{stem}.html").images == 0]
