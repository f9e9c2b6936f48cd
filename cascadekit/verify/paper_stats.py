"""What a ``paper`` problem looks like, measured from its text alone, so kit and official problems compare.

The official Interplay generator's problems and the kit's ``paper`` rendering share
one format (``The number of ... equals``, ``Define ... as X; so X = ...``). Every
feature here is read off the three texts of a problem (statements, question,
solution), never off a generator's internals, so the same code measures both:
``data/fixtures/official_paper_stats.json`` holds the official generator's
statistics measured this way (its provenance says how), and
``tests/test_paper_distributions.py`` compares the kit's with them per op band.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from cascadekit.verify.process import parse_solution

#: Op bands the statistics are kept per (the official distractor rate falls steeply across them).
BANDS: tuple[tuple[int, int], ...] = ((2, 5), (6, 10), (11, 15), (16, 20))
REVERSE_PREAMBLE = "The question is difficult"

_SUBJECT = re.compile(r"The (total number|number) of (.+?) (?:equals|exists)")
_DEFINE = re.compile(r"Define (.+?) as ([A-Za-z]);")
_TIMES = re.compile(r"equals ([0-9]+) times ")
_WIDE_SUM = re.compile(r"(?<![A-Za-z])[A-Za-z] \+ [A-Za-z] \+ [A-Za-z](?![A-Za-z])")
_PAREN_DIFFERENCE = re.compile(r"\) - \(")
_X_SUBTRACTED = re.compile(r" - \([^()]*x[^()]*\)")


def _key(name: str) -> str:
    return " ".join(name.lower().split())


@dataclass(frozen=True)
class Features:
    """One problem's measurable traits (None where a trait does not apply to its mode)."""

    op: int
    reverse: bool
    query_total: bool | None  # forward: the question asks for a total
    given_total: bool | None  # reverse: the quantity whose value is given is a total
    unknown_first: bool | None  # reverse: the unknown is the solution's first step
    zero_needed: bool  # some quantity the solution defines is 0
    answer_zero: bool
    times_constants: tuple[int, ...]  # c of every "equals c times" statement
    distractors: int  # statements about quantities the solution does not define
    missing_statement: bool  # an instance quantity the solution needs has no statement
    parent_counts: tuple[int, ...]  # parents of every derived step
    wide_sum: bool  # a sum of three or more letters in one expression
    paren_difference: bool  # a difference written ``(...) - (...)``
    x_subtracted: bool  # a difference subtracts an expression in x
    capital_x: bool  # a quantity's letter is X


def features(op: int, problem_text: str, question: str, solution: str) -> Features:
    """The traits of one problem, read off its statements, question and solution."""
    reverse = solution.startswith(REVERSE_PREAMBLE)
    defines = _DEFINE.findall(solution)
    names = {_key(name) for name, _ in defines}
    subjects = [(kind, _key(s)) for kind, s in _SUBJECT.findall(problem_text)]
    stated = {s if kind == "number" else f"total number of {s}" for kind, s in subjects}
    letter_name = {letter: _key(name) for name, letter in defines}
    known = re.search(r"We know ([A-Za-z]) = ", solution)
    steps = parse_solution(solution).steps
    answer = re.search(r"Answer: (-?[0-9]+)", solution)
    return Features(
        op=op, reverse=reverse,
        query_total=None if reverse else question.startswith("What is the total number"),
        given_total=(letter_name.get(known.group(1), "").startswith("total number of") if known else None)
        if reverse else None,
        unknown_first=(bool(defines) and defines[0][1] == "x") if reverse else None,
        zero_needed=any(step.value == 0 for step in steps),
        answer_zero=bool(answer) and int(answer.group(1)) == 0,
        times_constants=tuple(int(c) for c in _TIMES.findall(problem_text)),
        distractors=sum(name not in names for name in stated),
        missing_statement=any(not name.startswith("total number of") and name not in stated for name in names),
        parent_counts=tuple(len(step.parents) for step in steps if step.parents),
        wide_sum=bool(_WIDE_SUM.search(solution)),
        paren_difference=bool(_PAREN_DIFFERENCE.search(solution)),
        x_subtracted=bool(_X_SUBTRACTED.search(solution)),
        capital_x=any(letter == "X" for _, letter in defines),
    )


def _share(flags: list[bool]) -> dict[str, float | int]:
    return {"share": sum(flags) / len(flags) if flags else 0.0, "n": len(flags)}


def band_statistics(problems: Iterable[Features]) -> dict[str, dict[str, dict[str, float | int]]]:
    """Per op band, each statistic as ``{"share": fraction, "n": problems (or items) it is over}``."""
    table: dict[str, dict[str, dict[str, float | int]]] = {}
    problems = list(problems)
    for low, high in BANDS:
        band = [f for f in problems if low <= f.op <= high]
        forward = [f for f in band if not f.reverse]
        reverse = [f for f in band if f.reverse]
        constants = [c for f in band for c in f.times_constants]
        parents = [k for f in band for k in f.parent_counts]
        table[f"{low}-{high}"] = {
            "forward query is a total": _share([f.query_total for f in forward]),
            "reverse given quantity is a total": _share([f.given_total for f in reverse]),
            "reverse unknown is the first step": _share([f.unknown_first for f in reverse]),
            "a needed quantity is 0": _share([f.zero_needed for f in band]),
            "the answer is 0": _share([f.answer_zero for f in band]),
            "a times constant is 1": _share([c == 1 for c in constants]),
            "a times constant is 2-4": _share([2 <= c <= 4 for c in constants]),
            "has a distractor": _share([f.distractors > 0 for f in band]),
            "reverse: a needed quantity has no statement": _share([f.missing_statement for f in reverse]),
            "forward: a needed quantity has no statement": _share([f.missing_statement for f in forward]),
            "a derived step has 1 parent": _share([k == 1 for k in parents]),
            "a derived step has 2 parents": _share([k == 2 for k in parents]),
            "a derived step has 3 parents": _share([k == 3 for k in parents]),
            "a derived step has 4 or more parents": _share([k >= 4 for k in parents]),
            "a sum of 3+ letters in one expression": _share([f.wide_sum for f in band]),
            "reverse: a difference written (..) - (..)": _share([f.paren_difference for f in reverse]),
            "reverse: a difference subtracts an expression in x": _share([f.x_subtracted for f in reverse]),
            "a quantity's letter is X": _share([f.capital_x for f in band]),
        }
    return table
