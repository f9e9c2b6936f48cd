"""Build the course book (Sphinx + MyST-NB) from notebooks papermill already executed.

The book never executes a notebook: it stages the pages in ``book/``, the
executed chapters and the committed toy-scale results into a scratch source
folder and runs Sphinx there, offline, into a scratch output folder that then
replaces ``--out`` whole (MyST-NB writes ``jupyter_execute/`` beside its output
folder, so nothing of a build lands beside ``--out``). The course's book is the
toy run's; a book of the untrained smoke run says so at the top of every page.
``broken_internal_links``, ``pages_missing_figures`` and ``machine_paths`` are the
checks the test suite applies to the result.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urldefrag

from cascadekit.atomic import atomic_write_text, replace_folder, same_file
from cascadekit.codeversion import REPO_DIR
from cascadekit.course.guide import syllabus_page
from cascadekit.course.notebook import without_scratch

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
        parts += [without_scratch(table.read_text().strip()), ""]
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
            rows.append(f"| {path.parent.name} | {minutes:.0f} | `{without_scratch(command)}` |")
    parts.append("\n".join(rows) if len(rows) > 4 else "No toy-scale run has been committed yet.")
    return "\n\n".join(parts) + "\n"


SMOKE_NOTICE = ("**This is the untrained smoke run**: tiny models trained for seconds, to prove every code path "
                "runs, so its scores are zeros and noise. The course's results are the toy run's: "
                "`cascadekit run --scale toy --out runs/toy`, then `cascadekit book --executed runs/toy`.")
_SCALE = re.compile(r"^scale = [\"'](\w+)[\"']", re.M)


def run_scale(notebook: Path) -> str | None:
    """The scale an executed chapter ran at: its injected parameters, else its default ones."""
    import nbformat

    cells = nbformat.read(notebook, as_version=4).cells
    for tag in ("injected-parameters", "parameters"):
        for cell in cells:
            found = _SCALE.search(cell.source) if tag in cell.metadata.get("tags", []) else None
            if found:
                return found.group(1)
    return None


def stage(executed_dir: Path, src: Path) -> list[Path]:
    """Copy the book pages, executed chapters and figures into ``src``; return the chapters."""
    executed = sorted(Path(executed_dir).glob("[0-9][0-9]_*.ipynb"))
    if not executed:
        raise ValueError(f"no executed chapters (NN_*.ipynb) in {executed_dir}; run `cascadekit run` first")
    smoke = run_scale(executed[0]) == "smoke"
    for page in BOOK_DIR.iterdir():
        if page.suffix in {".md", ".py"}:
            shutil.copy(page, src / page.name)
    if smoke:
        index = (src / "index.md").read_text()
        heading, _, rest = index.partition("\n")
        atomic_write_text(src / "index.md", f"{heading}\n\n{SMOKE_NOTICE}\n{rest}")
    atomic_write_text(src / "results.md", results_page())
    atomic_write_text(src / "timings.md", timings_page())
    atomic_write_text(src / "syllabus.md", syllabus_page())
    chapters_dir = src / "chapters"
    chapters_dir.mkdir()
    for notebook in executed:
        stage_chapter(notebook, chapters_dir / notebook.name)
    return executed


def stage_chapter(notebook: Path, dest: Path) -> None:
    """Copy an executed chapter, hiding its default ``parameters`` cell where papermill injected the run's own.

    The default cell holds the notebook's defaults; the injected one below it holds what
    the run used, so a reader sees one parameters cell and the right one. A smoke
    chapter gets :data:`SMOKE_NOTICE` under its title, and a committed run's recorded command
    its scratch folder as ``DIR`` (:func:`~cascadekit.course.notebook.without_scratch`).
    """
    import nbformat

    chapter = nbformat.read(notebook, as_version=4)
    tags = [set(cell.metadata.get("tags", [])) for cell in chapter.cells]
    if any("injected-parameters" in t for t in tags):
        for cell, cell_tags in zip(chapter.cells, tags):
            if "parameters" in cell_tags:
                cell.metadata["tags"] = sorted(cell_tags | {"remove-cell"})
    for cell in chapter.cells:  # a committed run's recorded command, as the chapter prints it
        for output in cell.get("outputs", []):
            if isinstance(output.get("text"), str):
                output["text"] = without_scratch(output["text"])
            for kind in ("text/plain", "text/markdown", "text/html"):
                if isinstance(output.get("data", {}).get(kind), str):
                    output["data"][kind] = without_scratch(output["data"][kind])
    if run_scale(notebook) == "smoke":
        at = 1 if chapter.cells and chapter.cells[0].cell_type == "markdown" else 0
        chapter.cells.insert(at, nbformat.v4.new_markdown_cell(SMOKE_NOTICE))
    nbformat.write(chapter, dest)


def check_book_arguments(executed_dir: Path, out: Path) -> None:
    """ValueError (one line) for an ``--executed`` that is not a folder or an ``--out`` that cannot be the book."""
    if not Path(executed_dir).is_dir():
        raise ValueError(f"--executed {str(executed_dir)!r} is not a folder of executed notebooks; "
                         "run `cascadekit run` first")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {str(out)!r} is a file, not a folder: refusing to replace it with the book")
    for source in (Path(executed_dir), BOOK_DIR):
        if same_file(out, source) or Path(os.path.realpath(out)) in Path(os.path.realpath(source)).parents:
            raise ValueError(f"--out {str(out)!r} holds the input folder {str(source)!r}: refusing to build over it")
    if out.is_dir() and any(out.iterdir()) and not (out / ".buildinfo").exists():
        raise ValueError(f"--out {str(out)!r} holds files that are not a book built by Sphinx: "
                         "choose a new or empty folder")


def _replace_folder(built: Path, out: Path) -> None:
    """Copy ``built`` beside ``out``, then swap it in (an older book is kept until the new one is whole)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        shutil.copytree(built, partial, dirs_exist_ok=True)
        replace_folder(partial, out)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def build_book(executed_dir: Path, out: Path) -> Path:
    """Build the HTML book into ``out`` from the executed notebooks in ``executed_dir``."""
    from sphinx.cmd.build import build_main

    out = Path(out)
    check_book_arguments(Path(executed_dir), out)
    with tempfile.TemporaryDirectory() as scratch:
        src, built = Path(scratch) / "src", Path(scratch) / "build" / "html"
        src.mkdir()
        stage(Path(executed_dir), src)
        log = Path(scratch) / "sphinx.log"
        status = build_main(["-b", "html", "-q", "-w", str(log), "-E", str(src), str(built)])
        warnings = log.read_text() if log.exists() else ""
        if status != 0:
            raise BookBuildError(f"sphinx exited {status}:\n{warnings}")
        _replace_folder(built, out)
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


def _machine_path_pattern() -> re.Pattern[str]:
    """Absolute paths that name this machine: home folders, temporary folders, and the checkout's own parent."""
    parent = re.escape(str(REPO_DIR.parent))
    return re.compile(rf"(?<![\w.~-])(?:/root|/home/[\w.-]+|/tmp|/var/tmp|/private/var|{parent})/[\w.-]+")


def machine_paths(folder: Path, suffixes: tuple[str, ...] = (".html", ".ipynb")) -> list[str]:
    """``file: path`` for every absolute path of this machine in the pages or notebooks under ``folder``.

    A reader's copy of the book (or of an executed chapter) shows paths relative to
    the repository or the run folder; an absolute one is where the build ran, not
    something the reader has.
    """
    pattern = _machine_path_pattern()
    found = []
    for page in sorted(p for p in Path(folder).rglob("*") if p.suffix in suffixes and p.is_file()):
        for match in sorted(set(pattern.findall(page.read_text(errors="replace")))):
            found.append(f"{page.relative_to(folder)}: {match}")
    return found
