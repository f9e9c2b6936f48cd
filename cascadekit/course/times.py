"""Measured chapter times, carried from a course run's ``summary.md`` into the README.

``cascadekit run`` writes ``summary.md`` with every chapter's wall time;
``cascadekit times runs/toy/summary.md`` puts those times into a column of the
README's chapter table (``` `toy` run ```, one per scale, with the course total)
and keeps the summary under ``data/results/timings/`` for the book and the
teacher's guide. The README's times are then a run's own, never typed.

It writes only where it is told: ``--readme OTHER`` rewrites OTHER alone, and
the summary is kept under a timings folder only when the target is the
repository's README or ``--timings DIR`` names one. A wall time above
:data:`MAX_CHAPTER_S` is refused: no chapter of the course runs for a week, so
such a number is a damaged or hand-edited summary, not a measurement.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from cascadekit.atomic import atomic_write_text, same_file
from cascadekit.codeversion import REPO_DIR

README = REPO_DIR / "README.md"
TIMINGS_DIR = REPO_DIR / "data" / "results" / "timings"
TOTAL_LABEL = "all"  # the first cell of the table's total row
#: The longest chapter time a summary may record: a week (the slowest toy chapter retrains in about an hour).
MAX_CHAPTER_S = 7 * 24 * 3600.0

_HEADER = re.compile(r"^# Course run at scale `(?P<scale>[\w-]+)` \(code (?P<code>[^)]+)\)", re.M)
_ROW = re.compile(r"^\|\s*(?P<chapter>\d\d)_[\w-]+\s*\|\s*(?P<status>\w+)\s*\|\s*(?P<wall>[^|]*?)\s*\|", re.M)
_SECONDS = re.compile(r"\d{1,12}(\.\d{1,6})?")


@dataclass(frozen=True)
class CourseTimes:
    """One run's scale, code version and wall seconds per chapter number (``"03"``), finished chapters only."""

    scale: str
    code_version: str
    seconds: dict[str, float]

    @property
    def total_s(self) -> float:
        return sum(self.seconds.values())


def parse_summary(text: str) -> CourseTimes:
    """Read ``summary.md`` as ``cascadekit.course.runner`` writes it; ValueError naming what is missing."""
    header = _HEADER.search(text)
    if header is None:
        raise ValueError("not a course summary: no '# Course run at scale `...` (code ...)' line")
    seconds = {m["chapter"]: _wall_seconds(m["chapter"], m["wall"])
               for m in _ROW.finditer(text) if m["status"] in {"ok", "skipped"}}
    if not seconds:
        raise ValueError("the summary has no finished chapter")
    return CourseTimes(header["scale"], header["code"], seconds)


def _wall_seconds(chapter: str, text: str) -> float:
    """A row's wall time; ValueError unless it is a plain number of seconds from 0 to :data:`MAX_CHAPTER_S`."""
    if not _SECONDS.fullmatch(text) or float(text) > MAX_CHAPTER_S:
        raise ValueError(f"chapter {chapter}: wall time {text[:30]!r} is not a number of seconds from 0 to "
                         f"{MAX_CHAPTER_S:.0f} (a week): not a measured run")
    return float(text)


def format_duration(seconds: float) -> str:
    """``"7 s"``, ``"4.2 min"`` or ``"1.3 h"``: the unit a reader compares at a glance."""
    if seconds < 100:
        return f"{seconds:.0f} s"
    if seconds < 6000:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _line(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def column_title(scale: str) -> str:
    return f"`{scale}` run, measured"


def update_chapter_table(readme: str, times: CourseTimes) -> str:
    """``readme`` with the chapter table's column for ``times.scale`` set (added if new), total row included.

    The total adds the chapters the table lists, so it matches the column above it.
    """
    listed = chapter_numbers(readme)
    cells = {n: format_duration(times.seconds[n]) if n in times.seconds else "not run" for n in listed}
    total = f"**{format_duration(sum(times.seconds.get(n, 0.0) for n in listed))}** (code {times.code_version})"
    return set_columns(readme, {column_title(times.scale): cells}, {column_title(times.scale): total})


def _table(readme: str) -> tuple[re.Match[str], list[str], int, int]:
    """The ``## Chapters`` section, its lines, and where its table starts and ends; ValueError if missing."""
    section = re.search(r"^## Chapters\n(.*?)(?=^## |\Z)", readme, re.S | re.M)
    if section is None:
        raise ValueError("the README has no '## Chapters' section")
    lines = section.group(1).split("\n")
    start = next((i for i, line in enumerate(lines) if line.startswith("| #")), None)
    if start is None:
        raise ValueError("the '## Chapters' section has no table starting with '| #'")
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return section, lines, start, end


def chapter_numbers(readme: str) -> list[str]:
    """The chapters the README's table lists (``"01"``...), without the total row."""
    _, lines, start, end = _table(readme)
    return [_cells(line)[0] for line in lines[start + 2:end] if _cells(line)[0] != TOTAL_LABEL]


def read_columns(readme: str) -> dict[str, dict[str, str]]:
    """Column title -> first cell (chapter number or ``all``) -> cell, as the README's chapter table has them."""
    _, lines, start, end = _table(readme)
    header, _, *rows = (_cells(line) for line in lines[start:end])
    return {title: {row[0]: row[i] for row in rows if i < len(row)} for i, title in enumerate(header)}


def set_columns(readme: str, columns: dict[str, dict[str, str]], totals: dict[str, str]) -> str:
    """``readme`` with each named column of the chapter table set (added at the end if new); other columns kept."""
    section, lines, start, end = _table(readme)
    header, rule, *rows = (_cells(line) for line in lines[start:end])
    old_total = next((r for r in rows if r[0] == TOTAL_LABEL), [TOTAL_LABEL, "the whole course"])
    rows = [r for r in rows if r[0] != TOTAL_LABEL]
    total = old_total + [""] * (len(header) - len(old_total))
    for title, cells in columns.items():
        if title not in header:
            header.append(title)
            rule.append("---")
            rows = [r + [""] for r in rows]
            total.append("")
        col = header.index(title)
        for row in rows:
            row[col] = cells.get(row[0], "")
        total[col] = totals.get(title, "")
    table = [_line(header), "|" + "|".join(rule) + "|"] + [_line(r) for r in rows] + [_line(total[:len(header)])]
    body = "\n".join(lines[:start] + table + lines[end:])
    return readme[:section.start(1)] + body + readme[section.end(1):]


def apply_summary(summary: Path, readme: Path, timings_dir: Path | None = None) -> CourseTimes:
    """Rewrite ``readme``'s column for the summary's scale; keep the summary as ``timings_dir/<scale>.md`` if given.

    Nothing else is written: the caller names every target (see :func:`default_timings_dir`).
    """
    text = Path(summary).read_text()
    times = parse_summary(text)
    atomic_write_text(readme, update_chapter_table(Path(readme).read_text(), times))
    if timings_dir is not None:
        Path(timings_dir).mkdir(parents=True, exist_ok=True)
        atomic_write_text(Path(timings_dir) / f"{times.scale}.md", text)
    return times


def default_timings_dir(readme: Path) -> Path | None:
    """The committed timings folder when ``readme`` is the repository's README, else None (keep no copy)."""
    return TIMINGS_DIR if same_file(readme, README) else None
