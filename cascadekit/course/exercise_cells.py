"""The exercise cells that end every chapter notebook, made from the exercise data.

One source for the notebooks and for the scripts that write them: a chapter's
notebook ends with exactly ``exercise_cells(chapter)`` (the tests compare them),
so editing an exercise means editing its ``EXERCISES`` (the chapter's module) and re-appending.
"""
from __future__ import annotations

from typing import Any

from cascadekit.course.exercises import exercises

TAG = "exercise"  # every exercise cell carries this tag


PART_I_LAST = 7  # chapters 01-07 are Part I


def solutions_path(chapter: str) -> str:
    """Where the chapter's worked solutions live, relative to ``notebooks/``: one notebook per part.

    One notebook per part rather than per chapter: each notebook costs a kernel start
    (several seconds) every time the tests execute the solutions.
    """
    return f"solutions/part{1 if int(chapter) <= PART_I_LAST else 2}.ipynb"


def _intro(chapter: str) -> str:
    return (f"## Exercises\n\n"
            f"Each exercise ends with `check(\"{chapter}.N\", answer)`: it says *right*, or *not yet* with a hint, "
            "never the answer. Replace `None` (or the `...` of a function) with your answer and run the cell; "
            "checking takes a second and never needs training. Exercises marked *homework* take longer. "
            f"Worked solutions: `notebooks/{solutions_path(chapter)}`.")


def exercise_cells(chapter: str) -> list[Any]:
    """nbformat cells: an introduction, then a task and an answer cell per exercise of ``chapter``."""
    import nbformat

    chosen = exercises(chapter)
    if not chosen:
        raise KeyError(f"chapter {chapter!r} has no exercises")
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    cells = [md(_intro(chapter), id=f"ex-{chapter}", metadata={"tags": [TAG]}),
             code("from cascadekit.course.exercises import check", id=f"ex-{chapter}-import", metadata={"tags": [TAG]})]
    for exercise in chosen:
        slug = exercise.id.replace(".", "-")
        level = " (homework)" if exercise.homework else ""
        cells.append(md(f"### {exercise.id} · {exercise.title}{level}\n\n{exercise.task}",
                        id=f"ex-{slug}-task", metadata={"tags": [TAG]}))
        cells.append(code(f"{exercise.starter}\n\ncheck(\"{exercise.id}\", answer)",
                          id=f"ex-{slug}", metadata={"tags": [TAG]}))
    return cells
