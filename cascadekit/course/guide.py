"""The teacher's guide's tables, generated from data: the syllabus, the exercises, the times.

Each chapter's entry in ``cascadekit/chapters/chapters.yaml`` (its
:class:`~cascadekit.chapters.ChapterSpec`) holds what is written by hand (learning
goals, prerequisites) and where its committed run recorded its time; the times themselves
come from ``data/results/*/metrics.json`` and from course-run summaries kept in
``data/results/timings/`` (``cascadekit times``), so the guide is never typed twice.
:func:`time_columns` is the one time table: the guide shows it, and
:func:`readme_with_times` writes the same columns into the README's chapter table.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from cascadekit.chapters import ChapterSpec, specs
from cascadekit.codeversion import REPO_DIR
from cascadekit.course.times import CourseTimes, column_title, format_duration, parse_summary, set_columns
from cascadekit.course.exercises import exercises
from cascadekit.course.notebook import lookup

NOTEBOOK_DIR = REPO_DIR / "notebooks"
RESULTS_DIR = REPO_DIR / "data" / "results"


def chapter_title(number: str, notebook_dir: Path = NOTEBOOK_DIR) -> str:
    """The notebook's own heading, ``"04 · The edge of competence"``."""
    notebook = next(notebook_dir.glob(f"{number}_*.ipynb"))
    first = json.loads(notebook.read_text())["cells"][0]["source"]
    return "".join(first).splitlines()[0].lstrip("# ").strip()


def _seconds(metrics: dict[str, Any], path: str | tuple[str, ...]) -> float:
    """One recorded time: a :func:`~cascadekit.course.notebook.lookup` path, or a list of plain keys.

    The list is for keys that hold a dot, which a path would split: chapter 12's
    arms are named by their temperature (``timings`` / ``Code RL T=0.6_s``).
    """
    if isinstance(path, str):
        return float(lookup(metrics, path))
    value: Any = metrics
    for key in path:
        value = value[key]
    return float(value)


def _committed(spec: ChapterSpec, results_dir: Path) -> dict[str, Any] | None:
    """The chapter's committed metrics; None for a chapter without an experiment or not yet committed."""
    path = None if spec.results is None else results_dir / spec.results / "metrics.json"
    return json.loads(path.read_text()) if path is not None and path.exists() else None


def recorded_seconds(spec: ChapterSpec, which: str, results_dir: Path = RESULTS_DIR) -> float | None:
    """The sum of the chapter's ``which`` paths (``shipped`` or ``retrain``) in its committed metrics.

    None for a chapter without an experiment, or whose run is not committed yet.
    """
    metrics = _committed(spec, results_dir)
    return None if metrics is None else float(sum(_seconds(metrics, path) for path in getattr(spec, which)))


def committed_threads(spec: ChapterSpec, results_dir: Path = RESULTS_DIR) -> str:
    """The CPU threads the committed run used, from the command that produced it.

    A run over several training seeds ran each seed in a single-thread child process; one combined afterwards
    (``--combine``) names no seed's command, so its README says how each seed ran.
    """
    metrics = _committed(spec, results_dir)
    if metrics is None:
        return ""
    command = metrics.get("produced_by", {}).get("command", "")
    if "train_seeds" in metrics:
        return "see its README" if "--combine" in command else "1 per seed"
    found = re.search(r"--threads (\d+)", command)
    return found.group(1) if found else "all"


def course_runs(timings_dir: Path = RESULTS_DIR / "timings") -> dict[str, CourseTimes]:
    """Scale -> its course run's times, from every course summary kept under ``timings/``."""
    runs = {}
    for summary in sorted(timings_dir.glob("*.md")):
        times = parse_summary(summary.read_text())
        runs[times.scale] = times
    return runs


#: The time columns besides the course runs': what ``retrain = True`` costs at toy scale with the shipped
#: checkpoints (the committed experiment's own time), what rebuilding the shipped checkpoints adds, and
#: the CPU threads the committed experiment used.
RETRAIN_TITLE = "toy, `retrain = True` (the committed run)"
REBUILD_TITLE = "rebuilding what is shipped adds"
THREADS_TITLE = "threads (committed run)"


def time_columns(results_dir: Path = RESULTS_DIR) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """The chapter time table as columns (title -> chapter -> cell) and their totals, from committed data only.

    One meaning per column: a course run's wall time per chapter (``smoke``, ``toy``: the toy
    chapters read their committed runs), then what training a toy chapter again costs.
    """
    chapters = specs()
    columns: dict[str, dict[str, str]] = {}
    totals: dict[str, str] = {}
    for scale, run in sorted(course_runs(results_dir / "timings").items(), key=lambda kv: kv[0] != "smoke"):
        columns[column_title(scale)] = {n: format_duration(run.seconds[n]) if n in run.seconds else "not run"
                                        for n in chapters}
        listed = sum(run.seconds.get(n, 0.0) for n in chapters)
        totals[column_title(scale)] = f"**{format_duration(listed)}** (code {run.code_version})"
    shipped = {n: recorded_seconds(e, "shipped", results_dir) for n, e in chapters.items()}
    rebuild = {n: recorded_seconds(e, "retrain", results_dir) for n, e in chapters.items()}
    columns[RETRAIN_TITLE] = {n: format_duration(s) if s is not None else "nothing to train" if e.results is None
                              else "not committed yet" for (n, s), e in zip(shipped.items(), chapters.values())}
    columns[REBUILD_TITLE] = {n: format_duration(r) if r else "nothing shipped" if shipped[n] is not None else ""
                              for n, r in rebuild.items()}
    columns[THREADS_TITLE] = {n: committed_threads(e, results_dir) for n, e in chapters.items()}
    totals[RETRAIN_TITLE] = f"**{format_duration(sum(s or 0.0 for s in shipped.values()))}**"
    totals[REBUILD_TITLE] = format_duration(sum(r or 0.0 for r in rebuild.values()))
    return columns, totals


def readme_with_times(readme: str, results_dir: Path | None = None) -> str:
    """``readme`` with its chapter table's time columns set from :func:`time_columns` (default: the committed data)."""
    return set_columns(readme, *time_columns(results_dir or RESULTS_DIR))


def _homework(number: str) -> str:
    chosen = exercises(number)
    return ", ".join(f"**{e.id}**" if e.homework else e.id for e in chosen)


def syllabus_page(results_dir: Path = RESULTS_DIR, notebook_dir: Path = NOTEBOOK_DIR) -> str:
    """Markdown: the week-by-week syllabus, then the measured-time table."""
    chapters = specs()
    runs = course_runs(results_dir / "timings")
    parts = ["## Syllabus: one chapter a week", "",
             "| week | chapter | learning goals | before it | exercises (**homework**) |", "|---|---|---|---|---|"]
    for week, (number, spec) in enumerate(sorted(chapters.items()), start=1):
        goals = "; ".join(spec.goals)
        parts.append(f"| {week} | {chapter_title(number, notebook_dir)} | {goals} | {spec.prerequisites} "
                     f"| {_homework(number)} |")
    columns, totals = time_columns(results_dir)
    parts += ["", "## Measured time per chapter", "",
              "| chapter | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for number in sorted(chapters):
        parts.append(f"| {number} | " + " | ".join(cells[number] for cells in columns.values()) + " |")
    parts.append("| all | " + " | ".join(totals.get(title, "") for title in columns) + " |")
    parts += ["", "The `run, measured` columns are course runs (`cascadekit run`, one kernel per chapter, on "
              "2 cores): what a class waits for. At toy scale a chapter reads its committed run unless its "
              "`retrain` parameter is `True`; the next column is what that costs with the shipped checkpoints "
              "(the committed experiment's own time), and the one after it what rebuilding the shipped "
              "checkpoints adds. The README's chapter table has the same columns from the same data."]
    if "toy" not in runs:
        parts += ["", "No toy course run has been recorded yet: record one with "
                  "`cascadekit run --scale toy --out runs/toy` and `cascadekit times runs/toy/summary.md`."]
    return "\n".join(parts) + "\n"
