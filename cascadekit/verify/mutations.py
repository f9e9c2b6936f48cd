"""Controlled corruptions of a gold solution, one per error category of the judge.

Chapter 02 uses them to show what process verification catches that an
answer check misses, and the tests use them to prove each mistake lands in the
right category. Each returns a full completion text (``<solution> ... </answer>``),
or None when the problem has no place for that mutation.
"""
from __future__ import annotations

import re

from cascadekit.world.render import Problem

_STEP = re.compile(r"Define .*?(?= Define | Answer:)")
_DEFINED = re.compile(r"Define .+? as (\w+);")


def solution_steps(problem: Problem) -> list[str]:
    """The gold solution's steps: ``Define ...`` ones (a reverse-mode preamble left out), or ``minimal`` sentences."""
    if "Define " in problem.solution_text:
        return _STEP.findall(problem.solution_text)
    return re.split(r"(?<=\.)\s+", problem.solution_text.split("Answer:")[0].strip())


def _handle(step: str) -> str:
    """The word later steps use for a step's quantity: its letter, or (``minimal``) its name."""
    defined = _DEFINED.match(step)
    return defined.group(1) if defined else step.split(" = ", 1)[0]


def _operands(text: str) -> list[str]:
    """The words and numbers an expression combines (split at operators, ``=`` and ``;``)."""
    return [part.strip() for part in re.split(r"[-+*/()=;]", text) if part.strip()]


def with_steps(problem: Problem, steps: list[str], answer: int | None = None) -> str:
    """A completion made of ``steps`` and an answer (the gold one by default)."""
    answer = problem.answer if answer is None else answer
    return f"<solution> {' '.join(steps)} Answer: {answer}. </solution> <answer> {answer} </answer>"


def drop_step(problem: Problem) -> str:
    """Leave out the middle step: a missing node."""
    steps = solution_steps(problem)
    middle = len(steps) // 2
    return with_steps(problem, steps[:middle] + steps[middle + 1:])


def change_value(problem: Problem) -> str | None:
    """Add one to the first given value a step states: a value mismatch (the answer stays right).

    None when no step states a given value (a small reverse-mode problem whose only leaf is the unknown).
    """
    steps = solution_steps(problem)
    given = re.compile(r"(?:so \w+ |^[^=;]+ )= (\d+)\.$")
    index = next((i for i, step in enumerate(steps) if given.search(step) and "We know" not in step), None)
    if index is None:
        return None
    steps[index] = re.sub(r"= (\d+)\.$", lambda m: f"= {int(m.group(1)) + 1}.", steps[index])
    return with_steps(problem, steps)


def swap_parent(problem: Problem) -> str | None:
    """In the last step, use an unrelated earlier quantity in place of a real parent,
    keeping the numbers: a dependency mismatch. None when every earlier quantity is used."""
    steps = solution_steps(problem)
    handles = [_handle(step) for step in steps]
    last = steps[-1]
    symbolic = last.split("=")[1]  # "so X = <letters> = <numbers> = value", or "name = <names> = ..."
    used = [h for h in handles if h in _operands(symbolic)]
    mentioned = set(_operands(last.split(";", 1)[1] if ";" in last else last.split("=", 1)[1]))
    strangers = [h for h in handles[:-1] if h not in mentioned]
    if not used or not strangers:
        return None
    parts = re.split(r"(\s*[-+*/()]\s*)", symbolic)
    first = next(i for i, part in enumerate(parts) if part.strip() == used[0])
    parts[first] = parts[first].replace(used[0], strangers[0])
    return with_steps(problem, steps[:-1] + [last.replace(symbolic, "".join(parts), 1)])


def wrong_answer(problem: Problem) -> str:
    """Every step right, the final answer off by one: an answer mismatch."""
    return with_steps(problem, solution_steps(problem), answer=problem.answer + 1)


def answer_only(problem: Problem) -> str:
    """The reward-hacking probe: the right answer and no derivation at all."""
    return f"<answer> {problem.answer} </answer>"


MUTATIONS = {
    "gold": lambda p: with_steps(p, solution_steps(p)),
    "dropped step": drop_step,
    "changed value": change_value,
    "swapped parent": swap_parent,
    "wrong answer": wrong_answer,
    "answer only": answer_only,
}
