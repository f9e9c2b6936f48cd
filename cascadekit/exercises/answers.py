"""How an answer is judged: a number, one of a few choices, or a function run on test inputs.

Answers come from students, so every kind turns a bad answer into a :class:`Mark`
instead of raising. Nothing here touches the student's object in the notebook's
process: reading it (``float()``, ``strip()``, calling a function on the test
inputs) happens in a contained child (:mod:`cascadekit.exercises.child`) that
sends back plain JSON values, and the comparison with the expected values,
computed here only after the child is gone, happens in the parent. So an answer
can neither hang the notebook nor see or forge the expected values.
"""
from __future__ import annotations

import json
import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from cascadekit.exercises.child import CHILD_MEMORY_BYTES, MAX_RESULT_BYTES, run_contained

#: One test case: positional arguments for the student's function.
Case = tuple[Any, ...]

MAX_TEXT = 200  # longest text answer read, in characters
FUNCTION_TIMEOUT_S = 10.0  # for reading an answer, or for every test case of a function together
MAX_MESSAGE = 300  # longest message a child's verdict may put in front of the student


@dataclass(frozen=True)
class Mark:
    """A verdict on one answer: ``correct`` is None when there was nothing to judge yet."""

    correct: bool | None
    message: str


def _shown(value: Any) -> str:
    """A short, safe description of an answer (never a huge repr)."""
    try:
        text = repr(value) if isinstance(value, (bool, numbers.Number)) else type(value).__name__
    except Exception:  # a hostile __repr__
        text = "an object"
    return text[:60]


def _stopped(reading: str, why: str, timeout: float) -> str:
    """The message for a child a limit stopped, or that ended without a result; ``reading`` names what it did."""
    return {
        "time": f"{reading} took longer than {timeout:g} s (an endless loop?)",
        "cpu": f"{reading} used more CPU time than the {timeout:g} s a check allows",
        "memory": f"{reading} ran out of memory: past the {CHILD_MEMORY_BYTES >> 30} GB a check allows (MemoryError)",
    }.get(why, f"{reading} ended its process before returning (sys.exit, os._exit or a crash)")


def _contained(job: Callable[[], dict[str, Any]], reading: str) -> dict[str, Any]:
    """``job`` run in the contained child: ``{"value": ...}`` or similar, or ``{"error": message}``."""
    timeout = FUNCTION_TIMEOUT_S
    outcome = run_contained(job, timeout)
    if "stopped" in outcome:
        return {"error": _stopped(reading, str(outcome["stopped"]), timeout)}
    if "error" in outcome:
        return {"error": str(outcome["error"])[:MAX_MESSAGE]}
    return outcome


def _read_number(answer: Any) -> dict[str, Any]:
    """In the child: ``answer`` as a plain float, or why it is not a number."""
    if isinstance(answer, bool) or not isinstance(answer, numbers.Real):
        return {"error": f"expected a number (int or float), got {_shown(answer)}"}
    try:
        return {"value": float(answer)}
    except (OverflowError, ValueError, TypeError):
        return {"error": "that number cannot be read as a float"}


@dataclass(frozen=True)
class Number:
    """A real number, right within ``rel`` relative or ``abs_`` absolute tolerance."""

    expected: Callable[[], float]
    rel: float = 1e-6
    abs_: float = 1e-9

    def describe(self) -> str:
        return "a number"

    def mark(self, answer: Any) -> Mark:
        read = _contained(lambda: _read_number(answer), "reading your number")
        if "error" in read:
            return Mark(False, read["error"])
        value = read.get("value")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return Mark(False, "that number cannot be read as a float")
        if not math.isfinite(value):
            return Mark(False, "expected a finite number")
        return Mark(math.isclose(value, float(self.expected()), rel_tol=self.rel, abs_tol=self.abs_), "")


def _read_choice(answer: Any, options: Sequence[str]) -> dict[str, Any]:
    """In the child: ``answer`` stripped and lower-cased, or why it is not one of ``options``."""
    if not isinstance(answer, str):
        return {"error": f"expected a string, one of {list(options)}; got {_shown(answer)}"}
    if len(answer) > MAX_TEXT:
        return {"error": f"that answer is {len(answer):,} characters long; expected one of {list(options)}"}
    picked = answer.strip().lower()
    if not isinstance(picked, str) or picked not in {o.lower() for o in options}:
        return {"error": f"{str.__str__(answer)[:40]!r} is not one of {list(options)}"}
    return {"value": str.__str__(picked)}


@dataclass(frozen=True)
class Choice:
    """One of a few named options (case and surrounding spaces ignored)."""

    options: Sequence[str]
    expected: Callable[[], str]

    def describe(self) -> str:
        return "one of " + ", ".join(repr(o) for o in self.options)

    def mark(self, answer: Any) -> Mark:
        options = [str(o) for o in self.options]
        read = _contained(lambda: _read_choice(answer, options), "reading your answer")
        if "error" in read:
            return Mark(False, read["error"])
        chosen = {o.lower(): o for o in options}.get(read.get("value"))  # type: ignore[arg-type]
        if chosen is None:
            return Mark(False, f"that answer is not one of {options}")
        return Mark(chosen == self.expected(), "")


MAX_VALUES = 100_000  # numbers and strings a student's function may return, over all test inputs


def _plain(value: Any, budget: list[int]) -> Any:
    """``value`` as JSON-able numbers, strings, booleans and lists; TypeError or ValueError otherwise.

    ``budget`` holds how many more values may be converted, so a flood of results
    stops early instead of filling the pipe.
    """
    budget[0] -= 1
    if budget[0] < 0:
        raise ValueError(f"returned more than {MAX_VALUES:,} values; far too much")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        if len(value) > MAX_RESULT_BYTES // 10:
            raise ValueError(f"returned a string of {len(value):,} characters; far too much")
        return str.__str__(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if hasattr(value, "tolist"):  # numpy arrays and torch tensors
        return _plain(value.tolist(), budget)
    if isinstance(value, (list, tuple)):
        return [_plain(v, budget) for v in value]
    raise TypeError(f"returned a value of type {type(value).__name__}; return numbers, strings, booleans or lists of them")


def _run_cases(function: Callable[..., Any], cases: Sequence[Case]) -> dict[str, Any]:
    """In the child: every case's result as plain values, or the first case's error; never raises."""
    if not callable(function):
        return {"error": f"expected a function (def ... or lambda), got {_shown(function)}"}
    results, budget = [], [MAX_VALUES]
    for i, case in enumerate(cases):
        try:
            value = function(*case)
        except MemoryError:
            return {"stopped": "memory"}
        except BaseException as error:  # SystemExit and KeyboardInterrupt from student code included
            return {"error": f"on test input {i + 1} your function raised {type(error).__name__}: {str(error)[:200]}"}
        try:
            results.append(_plain(value, budget))
        except MemoryError:
            return {"stopped": "memory"}
        except (TypeError, ValueError, RecursionError) as error:
            return {"error": f"on test input {i + 1} your function {str(error)[:200]}"}
    return {"results": results}


def _same(got: Any, want: Any, rel: float, abs_: float) -> bool:
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(_same(g, w, rel, abs_) for g, w in zip(got, want))
    if isinstance(want, bool) or isinstance(got, bool):
        return got is want
    if isinstance(want, (int, float)):
        return (isinstance(got, (int, float)) and math.isfinite(got)
                and math.isclose(got, want, rel_tol=rel, abs_tol=abs_))
    return got == want


@dataclass(frozen=True)
class Function:
    """A function the student writes, run on ``cases`` and compared with the kit's ``reference``."""

    cases: Callable[[], Sequence[Case]]
    reference: Callable[..., Any]
    describe_case: Callable[[Case], str] = lambda case: ", ".join(_shown(a) for a in case)
    rel: float = 1e-6
    abs_: float = 1e-9

    def describe(self) -> str:
        return "a function"

    def mark(self, answer: Any) -> Mark:
        cases = list(self.cases())
        outcome = _contained(lambda: _run_cases(answer, cases), "your function")
        if "error" in outcome:
            return Mark(False, outcome["error"])
        results = outcome.get("results")
        if not isinstance(results, list) or len(results) != len(cases):
            return Mark(False, f"your function's results cannot be read (expected one per test input, {len(cases)})")
        for case, got in zip(cases, results):
            want = _plain(self.reference(*case), [MAX_VALUES])
            if not _same(got, want, self.rel, self.abs_):
                shown = "None (a missing `return`?)" if got is None else json.dumps(got)[:80]
                return Mark(False, f"on input ({self.describe_case(case)}) your function returned {shown}, which is not right")
        return Mark(True, "")
