"""Exercises as data: what a task asks, the kind of answer it takes, and what a check says.

Each chapter module lists its own tasks in ``EXERCISES`` (one :class:`Exercise`
each); :mod:`cascadekit.course.exercises` gathers them and checks a student's
answer. An answer is read in a contained child process
(:mod:`cascadekit.exercises.child`), so nothing a student types can crash, hang
or escape the notebook. Solutions live in ``notebooks/solutions/``, outside the library.
"""
from __future__ import annotations

from dataclasses import dataclass

from cascadekit.exercises.answers import Choice, Function, Mark, Number

@dataclass(frozen=True)
class Exercise:
    """One task: ``id`` is ``"CC.N"`` (chapter, number); ``homework`` marks the longer ones."""

    id: str
    title: str
    task: str  # markdown, shown in the notebook above the answer cell
    answer: Number | Choice | Function
    hint: str
    starter: str  # the answer cell's code before the check, e.g. "answer = None  # a number"
    homework: bool = False

    @property
    def chapter(self) -> str:
        return self.id.split(".")[0]


@dataclass(frozen=True)
class Result:
    """What :func:`check` says; shown as one line in a notebook, true when right."""

    exercise: str
    correct: bool | None
    message: str

    def __bool__(self) -> bool:
        return bool(self.correct)

    def __str__(self) -> str:
        return f"{self.exercise}: {self.message}"

    __repr__ = __str__

    def _repr_markdown_(self) -> str:
        return f"**{self.exercise}**: {self.message}"


__all__ = ["Choice", "Exercise", "Function", "Mark", "Number", "Result"]
