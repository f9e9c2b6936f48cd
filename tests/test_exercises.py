"""Every exercise accepts its worked solution, rejects a wrong answer with a hint that
does not give the answer away, and turns hostile answers into one clear line."""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import sys
import time
from pathlib import Path

import nbformat
import pytest

from cascadekit.course.exercises import check, exercises, get
from cascadekit.exercises import Choice, Function, Number
from cascadekit.exercises import answers
from cascadekit.course.exercise_cells import TAG, exercise_cells, solutions_path
from cascadekit.course.runner import NOTEBOOK_DIR, chapters

CHAPTERS_WITH_EXERCISES = sorted({e.chapter for e in exercises()})
IDS = [e.id for e in exercises()]

#: A plausible mistake for every function exercise: the check must catch it.
WRONG_FUNCTIONS = {
    "01.2": lambda nodes: len(nodes),
    "02.1": lambda n, c, k: 1 - (1 - c / n) ** k,  # the biased plug-in estimate
    "04.1": lambda rewards, g: [(r - sum(rewards[i - i % g:i - i % g + g]) / g) for i, r in enumerate(rewards)],
    "06.1": lambda prompts, rollouts, tokens, reference_model: 8 / 6 * prompts * rollouts * tokens,
    "07.2": lambda g, m, d, v, e, ok: 1 - (m + d + v + min(e, g)) / g if ok else 0.0,  # no floor at 0
    "09.1": lambda chosen, rejected: -math.log(1 / (1 + math.exp(rejected - chosen))),  # overflows
    "10.1": lambda text, n: len(text.split()) <= n,
    "11.1": lambda rewards: "mixed" if len(set(rewards)) > 1 else "too_easy" if rewards[0] >= 1 else "too_hard",
    "12.1": lambda verify_s, wait_s, workers: 1 - wait_s / verify_s if verify_s else 0.0,  # forgets the workers
    "13.1": lambda rewards, executed: sum(r >= 0.8 and e == 0 for r, e in zip(rewards, executed)) / len(rewards),
    "14.1": lambda domain, batch, scores: [scores[i] if d == domain else None  # indexes the batch, not the domain
                                           for i, d in enumerate(batch) if i < len(scores)],
    "15.1": lambda p_student, p_teacher: sum(t * math.log(t / s) for s, t in zip(p_student, p_teacher)  # forward
                                             if t > 0 and s > 0),
    "15.2": lambda kl, tokens: sum(kl.values()) / len(kl),  # the domains' means, unweighted
}


def _id(value: object) -> str:
    """A short test id (pytest would print a 5000-digit integer whole)."""
    return value[:20] if isinstance(value, str) else getattr(value, "__name__", type(value).__name__)


def solution_cells(chapter: str) -> dict[str, str]:
    nb = nbformat.read(NOTEBOOK_DIR / solutions_path(chapter), as_version=4)
    return {c.metadata["exercise"]: c.source for c in nb.cells
            if c.metadata.get("exercise", "").startswith(chapter + ".")}


def solution_answer(exercise_id: str) -> object:
    """Run the worked solution's cell (it asserts its own check) and return its ``answer``."""
    namespace: dict = {"check": check}  # the notebook imports it in an earlier cell
    exec(compile(solution_cells(exercise_id.split(".")[0])[exercise_id], exercise_id, "exec"), namespace)
    return namespace["answer"]


def wrong_answer(exercise_id: str) -> object:
    spec = get(exercise_id).answer
    if isinstance(spec, Number):
        right = float(spec.expected())
        return right + max(1.0, abs(right))
    if isinstance(spec, Choice):
        return next(o for o in spec.options if o != spec.expected())
    return WRONG_FUNCTIONS[exercise_id]


def shown_forms(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, float) and not value.is_integer():
        return [f"{value:.3g}", f"{value:.4f}", repr(value)]
    return [str(int(value))]  # an integer answer: no digit string of it anywhere in the message


def test_every_chapter_on_main_has_two_exercises() -> None:
    assert CHAPTERS_WITH_EXERCISES == [f"{i:02d}" for i in range(1, 16)]
    for chapter in CHAPTERS_WITH_EXERCISES:
        assert len(exercises(chapter)) >= 2, chapter
    assert all(re.fullmatch(r"\d\d\.\d+", i) for i in IDS) and len(set(IDS)) == len(IDS)
    assert any(e.homework for e in exercises())


@pytest.mark.parametrize("chapter", CHAPTERS_WITH_EXERCISES)
def test_notebook_ends_with_its_exercise_cells(chapter: str) -> None:
    notebook = next(p for p in chapters() if p.name.startswith(chapter + "_"))
    cells = nbformat.read(notebook, as_version=4).cells
    wanted = exercise_cells(chapter)
    tail = cells[-len(wanted):]
    assert [(c.cell_type, c.source) for c in tail] == [(c.cell_type, c.source) for c in wanted], \
        f"{notebook.name}: re-append the exercise cells (they changed in cascadekit/exercises)"
    assert sum(TAG in c.metadata.get("tags", []) for c in cells) == len(wanted)


@pytest.mark.parametrize("chapter", CHAPTERS_WITH_EXERCISES)
def test_every_exercise_has_a_worked_solution(chapter: str) -> None:
    assert set(solution_cells(chapter)) == {e.id for e in exercises(chapter)}


@pytest.mark.parametrize("exercise_id", IDS)
def test_check_accepts_the_solution_and_rejects_a_wrong_answer(exercise_id: str) -> None:
    assert check(exercise_id, solution_answer(exercise_id)).correct is True
    verdict = check(exercise_id, wrong_answer(exercise_id))
    assert verdict.correct is False and "Hint:" in verdict.message
    spec = get(exercise_id).answer
    if not isinstance(spec, Function):
        for form in shown_forms(spec.expected()):
            assert form not in verdict.message, f"{exercise_id}'s message gives the answer away: {verdict.message}"


def test_no_answer_yet_and_unknown_exercise() -> None:
    assert check("04.2", None).correct is None and "no answer yet" in check("04.2", None).message
    for bad in ("99.9", 4.1, None, "x" * 10_000):
        verdict = check(bad, 1.0)
        assert verdict.correct is None and "no exercise" in verdict.message and len(verdict.message) < 500


class Hostile(float):
    def __float__(self) -> float:
        raise RuntimeError("no float for you")


@pytest.mark.parametrize("answer, says", [
    ("3.1", "expected a number"), ([1, 2], "expected a number"), (True, "expected a number"),
    (float("nan"), "finite"), (float("inf"), "finite"), (10 ** 5000, "cannot be read as a float"),
    (Hostile(1.0), "could not be checked"),
], ids=_id)
def test_hostile_numbers(answer: object, says: str) -> None:
    verdict = check("04.2", answer)
    assert verdict.correct is False and says in verdict.message and len(verdict.message) < 500


@pytest.mark.parametrize("answer, says", [
    (7, "expected a string"), ("x" * 10 ** 7, "characters long"), ("tomato", "is not one of"),
], ids=_id)
def test_hostile_choices(answer: object, says: str) -> None:
    verdict = check("06.2", answer)
    assert verdict.correct is False and says in verdict.message and len(verdict.message) < 500


def _raises(n, c, k):
    raise ZeroDivisionError("oops")


def _exits(n, c, k):
    sys.exit(3)


def _kills(n, c, k):
    os._exit(9)


def _floods(n, c, k):
    return [0.5] * 10 ** 6


def _odd_type(n, c, k):
    return object()


def _hogs_memory(n, c, k):
    return len(bytearray(1 << 31))


@pytest.mark.parametrize("answer, says", [
    (3.0, "expected a function"), (_raises, "raised ZeroDivisionError: oops"), (_exits, "raised SystemExit"),
    (_kills, "ended its process"), (_floods, "far too much"), (_odd_type, "of type object"),
    (lambda: 1, "raised TypeError"),
], ids=_id)
def test_hostile_functions(answer: object, says: str) -> None:
    verdict = check("02.1", answer)
    assert verdict.correct is False and says in verdict.message and len(verdict.message) < 600


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the memory ceiling is set through /proc and rlimit")
def test_a_memory_hog_hits_the_ceiling() -> None:
    verdict = check("02.1", _hogs_memory)
    assert verdict.correct is False and "MemoryError" in verdict.message


def test_an_endless_function_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(answers, "FUNCTION_TIMEOUT_S", 1.0)

    def spins(n, c, k):
        while True:
            pass

    start = time.perf_counter()
    verdict = check("02.1", spins)
    assert verdict.correct is False and "longer than 1 s" in verdict.message
    assert time.perf_counter() - start < 60  # a hang guard (the check stops it after 1 s), not a speed claim


def test_answers_follow_the_committed_metrics(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import cascadekit.results as results

    answer = solution_answer("09.2")
    shutil.copytree(results.RESULTS_DIR / "09_rlhf", tmp_path / "09_rlhf", ignore=shutil.ignore_patterns("*.png"))
    metrics_path = tmp_path / "09_rlhf" / "metrics.json"
    metrics = json.loads(metrics_path.read_text())
    metrics["reward_models"]["4"]["held_out"]["accuracy"] += 0.05
    metrics_path.write_text(json.dumps(metrics))
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    assert check("09.2", answer).correct is False
    assert check("09.2", answer + 0.05).correct is True
    shutil.rmtree(tmp_path / "09_rlhf")
    verdict = check("09.2", answer)
    assert verdict.correct is None and "committed result is missing" in verdict.message


@pytest.mark.notebook
def test_solution_notebooks_execute(solutions_run: Path) -> None:
    executed = {p.name for p in solutions_run.glob("*.ipynb")}
    assert executed == {Path(solutions_path(c)).name for c in CHAPTERS_WITH_EXERCISES}
    for name in executed:
        nb = nbformat.read(solutions_run / name, as_version=4)
        checks = [o for c in nb.cells if "exercise" in c.metadata for o in c.outputs if "data" in o]
        assert len(checks) == sum(1 for c in nb.cells if "exercise" in c.metadata)
        assert all("right." in o["data"]["text/plain"] for o in checks)
