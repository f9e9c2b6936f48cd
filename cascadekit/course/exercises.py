"""The exercises at the end of every chapter, each with an automatic check.

``check("04.1", answer)`` says whether ``answer`` is right and, when it is not,
gives the exercise's hint: never the expected answer. It never raises and never
hangs on what a student types (a wrong type, a huge value, a function that
raises, loops or exits): every problem becomes one clear line. Answers that
depend on a committed run are computed from that run's ``metrics.json`` when
the check runs, so a re-committed run changes the expected answer with it.

Each chapter module lists its tasks in ``EXERCISES``; this registry reads them
from every chapter of ``cascadekit/chapters/chapters.yaml`` that has some.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from cascadekit.chapters import chapter_module, specs
from cascadekit.exercises import Exercise, Mark, Result


@lru_cache(maxsize=1)
def _registry() -> dict[str, Exercise]:
    found: dict[str, Exercise] = {}
    for module in (chapter_module(s.id) for s in specs().values()):
        for exercise in getattr(module, "EXERCISES", ()):
            if exercise.id in found:
                raise ValueError(f"exercise {exercise.id} is defined twice")
            found[exercise.id] = exercise
    return dict(sorted(found.items(), key=lambda item: tuple(int(part) for part in item[0].split("."))))


def exercises(chapter: str | None = None) -> list[Exercise]:
    """Every exercise in order, or one chapter's (``"04"``)."""
    return [e for e in _registry().values() if chapter is None or e.chapter == chapter]


def get(exercise_id: str) -> Exercise:
    """The exercise ``"CC.N"``; KeyError naming the known ones."""
    try:
        return _registry()[exercise_id]
    except KeyError:
        raise KeyError(f"no exercise {exercise_id!r}; known: {', '.join(_registry())}") from None


def check(exercise_id: Any, answer: Any) -> Result:
    """Right, or wrong with a hint (never the answer). Never raises or hangs on a student's answer.

    The answer is read in a contained child process (:mod:`cascadekit.exercises.child`);
    the expected value is computed here only afterwards.
    """
    if type(exercise_id) is not str or exercise_id not in _registry():  # a str subclass could hash forever
        shown = exercise_id[:20] if type(exercise_id) is str else "that"
        return Result(shown, None, f"no exercise {shown!r}; the exercises are {', '.join(_registry())}")
    exercise = _registry()[exercise_id]
    if answer is None:
        return Result(exercise_id, None, f"no answer yet: replace `None` with {exercise.answer.describe()}.")
    try:
        mark = exercise.answer.mark(answer)
    except FileNotFoundError as error:
        return Result(exercise_id, None, f"cannot check: a committed result is missing ({error})")
    except Exception as error:  # the answer itself is only touched in a child; this is the kit's own bug
        mark = Mark(False, f"this answer could not be checked ({type(error).__name__}: {str(error)[:120]})")
    if mark.correct:
        return Result(exercise_id, True, "right.")
    detail = f"{mark.message}. " if mark.message else ""
    return Result(exercise_id, False, f"not yet. {detail}Hint: {exercise.hint}")

