"""The teacher's guide's tables, generated from data: the syllabus, the exercises, the times.

``book/syllabus.yaml`` holds what is written by hand (learning goals, prerequisites)
and where each chapter's committed run recorded its time; the times themselves
come from ``data/results/*/metrics.json`` and from course-run summaries kept in
``data/results/timings/`` (``cascadekit times``), so the guide is never typed twice.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from cascadekit.codeversion import REPO_DIR
from cascadekit.course_times import format_duration, parse_summary
from cascadekit.exercises import exercises
from cascadekit.notebook import lookup

SYLLABUS = REPO_DIR / "book" / "syllabus.yaml"
NOTEBOOK_DIR = REPO_DIR / "notebooks"
RESULTS_DIR = REPO_DIR / "data" / "results"


def load_syllabus(path: Path = SYLLABUS) -> dict[str, dict[str, Any]]:
    """Chapter number -> its entry; ValueError naming a chapter without goals."""
    chapters = yaml.safe_load(path.read_text())["chapters"]
    for number, entry in chapters.items():
        if not entry.get("goals") or not entry.get("prerequisites"):
            raise ValueError(f"{path.name}: chapter {number} needs goals and prerequisites")
    return chapters


def chapter_title(number: str, notebook_dir: Path = NOTEBOOK_DIR) -> str:
    """The notebook's own heading, ``"04 · The edge of competence"``."""
    notebook = next(notebook_dir.glob(f"{number}_*.ipynb"))
    first = json.loads(notebook.read_text())["cells"][0]["source"]
    return "".join(first).splitlines()[0].lstrip("# ").strip()


def _seconds(metrics: dict[str, Any], path: str | list[str]) -> float:
    """One recorded time: a :func:`~cascadekit.notebook.lookup` path, or a list of plain keys.

    The list is for keys that hold a dot, which a path would split: chapter 12's
    arms are named by their temperature (``timings`` / ``Code RL T=0.6_s``).
    """
    if isinstance(path, str):
        return float(lookup(metrics, path))
    value: Any = metrics
    for key in path:
        value = value[key]
    return float(value)


def recorded_seconds(entry: dict[str, Any], which: str, results_dir: Path = RESULTS_DIR) -> float | None:
    """The sum of the entry's ``which`` paths (``shipped`` or ``retrain``) in its committed metrics."""
    if "results" not in entry:
        return None
    metrics = json.loads((results_dir / entry["results"] / "metrics.json").read_text())
    return float(sum(_seconds(metrics, path) for path in entry[which]))


def committed_threads(entry: dict[str, Any], results_dir: Path = RESULTS_DIR) -> str:
    """The CPU threads the committed run used, from the command that produced it."""
    if "results" not in entry:
        return ""
    metrics = json.loads((results_dir / entry["results"] / "metrics.json").read_text())
    found = re.search(r"--threads (\d+)", metrics.get("produced_by", {}).get("command", ""))
    return found.group(1) if found else "all"


def course_runs(timings_dir: Path = RESULTS_DIR / "timings") -> dict[str, dict[str, float]]:
    """Scale -> chapter -> seconds, from every course summary kept under ``timings/``."""
    runs = {}
    for summary in sorted(timings_dir.glob("*.md")):
        times = parse_summary(summary.read_text())
        runs[times.scale] = times.seconds
    return runs


def _homework(number: str) -> str:
    chosen = exercises(number)
    return ", ".join(f"**{e.id}**" if e.homework else e.id for e in chosen)


def syllabus_page(syllabus: Path = SYLLABUS, results_dir: Path = RESULTS_DIR,
                  notebook_dir: Path = NOTEBOOK_DIR) -> str:
    """Markdown: the week-by-week syllabus, then the measured-time table."""
    chapters = load_syllabus(syllabus)
    runs = course_runs(results_dir / "timings")
    parts = ["## Syllabus: one chapter a week", "",
             "| week | chapter | learning goals | before it | exercises (**homework**) |", "|---|---|---|---|---|"]
    for week, (number, entry) in enumerate(sorted(chapters.items()), start=1):
        goals = "; ".join(entry["goals"])
        parts.append(f"| {week} | {chapter_title(number, notebook_dir)} | {goals} | {entry['prerequisites']} "
                     f"| {_homework(number)} |")
    scales = [s for s in ("smoke", "toy") if s in runs]
    parts += ["", "## Measured time per chapter", "",
              "| chapter | " + "".join(f"`{s}` course run | " for s in scales)
              + "toy, shipped checkpoints (committed run) | retraining what is shipped adds | threads |",
              "|---|" + "---|" * (len(scales) + 3)]
    for number, entry in sorted(chapters.items()):
        shipped = recorded_seconds(entry, "shipped", results_dir)
        retrain = recorded_seconds(entry, "retrain", results_dir)
        cells = [runs[s].get(number) for s in scales]
        shown = [format_duration(c) if c is not None else "not run" for c in cells]
        parts.append(f"| {number} | " + "".join(f"{c} | " for c in shown)
                     + (f"{format_duration(shipped)} | " if shipped is not None else "seconds | ")
                     + (f"{format_duration(retrain)} | " if retrain else "nothing shipped | " if shipped else " | ")
                     + f"{committed_threads(entry, results_dir)} |")
    totals = [sum(runs[s].get(n, 0.0) for n in chapters) for s in scales]
    shipped_total = sum(recorded_seconds(e, "shipped", results_dir) or 0.0 for e in chapters.values())
    retrain_total = sum(recorded_seconds(e, "retrain", results_dir) or 0.0 for e in chapters.values())
    parts.append("| all | " + "".join(f"**{format_duration(t)}** | " for t in totals)
                 + f"**{format_duration(shipped_total)}** | {format_duration(retrain_total)} | |")
    if "toy" not in runs:
        parts += ["", "No toy course run has been recorded yet: the toy column above adds the committed "
                  "experiments' own times, without kernel starts and the chapters' demonstration cells. "
                  "Record one with `cascadekit run --scale toy --out runs/toy` and "
                  "`cascadekit times runs/toy/summary.md`."]
    return "\n".join(parts) + "\n"
