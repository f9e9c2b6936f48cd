"""How an answer is judged: a number, one of a few choices, or a function run on test inputs.

Answers come from students, so every kind validates the answer at the edge and
returns a :class:`Mark` instead of raising. A student's function runs in a forked
child process with a time limit and a memory ceiling; the child sends back plain
JSON values only, and the comparison happens here, in the parent, so a function
can neither hang the notebook nor see or forge the expected values.
"""
from __future__ import annotations

import json
import math
import multiprocessing
import numbers
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

#: One test case: positional arguments for the student's function.
Case = tuple[Any, ...]

MAX_TEXT = 200  # longest text answer read, in characters
MAX_RESULT_BYTES = 1_000_000  # largest JSON a student's function may send back
FUNCTION_TIMEOUT_S = 10.0  # for every test case together
CHILD_MEMORY_BYTES = 1 << 30  # extra address space a student's function may take


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


@dataclass(frozen=True)
class Number:
    """A real number, right within ``rel`` relative or ``abs_`` absolute tolerance."""

    expected: Callable[[], float]
    rel: float = 1e-6
    abs_: float = 1e-9

    def describe(self) -> str:
        return "a number"

    def mark(self, answer: Any) -> Mark:
        if isinstance(answer, bool) or not isinstance(answer, numbers.Real):
            return Mark(False, f"expected a number (int or float), got {_shown(answer)}")
        try:
            value = float(answer)
        except (OverflowError, ValueError, TypeError):
            return Mark(False, "that number cannot be read as a float")
        if not math.isfinite(value):
            return Mark(False, "expected a finite number")
        ok = math.isclose(value, float(self.expected()), rel_tol=self.rel, abs_tol=self.abs_)
        return Mark(ok, "")


@dataclass(frozen=True)
class Choice:
    """One of a few named options (case and surrounding spaces ignored)."""

    options: Sequence[str]
    expected: Callable[[], str]

    def describe(self) -> str:
        return "one of " + ", ".join(repr(o) for o in self.options)

    def mark(self, answer: Any) -> Mark:
        if not isinstance(answer, str):
            return Mark(False, f"expected a string, one of {list(self.options)}; got {_shown(answer)}")
        if len(answer) > MAX_TEXT:
            return Mark(False, f"that answer is {len(answer):,} characters long; expected one of {list(self.options)}")
        picked = answer.strip().lower()
        options = {o.lower(): o for o in self.options}
        if picked not in options:
            return Mark(False, f"{answer[:40]!r} is not one of {list(self.options)}")
        return Mark(options[picked] == self.expected(), "")


MAX_VALUES = 100_000  # numbers and strings a student's function may return, over all test inputs


def _plain(value: Any, budget: list[int]) -> Any:
    """``value`` as JSON-able numbers, strings, booleans and lists; TypeError or ValueError otherwise.

    ``budget`` holds how many more values may be converted, so a flood of results
    stops early instead of filling the pipe.
    """
    budget[0] -= 1
    if budget[0] < 0:
        raise ValueError(f"returned more than {MAX_VALUES:,} values; far too much")
    if value is None or isinstance(value, (bool, str)):
        if isinstance(value, str) and len(value) > MAX_RESULT_BYTES // 10:
            raise ValueError(f"returned a string of {len(value):,} characters; far too much")
        return value
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
    """Every case's result as plain values, or the first case's error; never raises."""
    results, budget = [], [MAX_VALUES]
    for i, case in enumerate(cases):
        try:
            value = function(*case)
        except BaseException as error:  # SystemExit and KeyboardInterrupt from student code included
            return {"error": f"on test input {i + 1} your function raised {type(error).__name__}: {str(error)[:200]}"}
        try:
            results.append(_plain(value, budget))
        except (TypeError, ValueError, RecursionError) as error:
            return {"error": f"on test input {i + 1} your function {str(error)[:200]}"}
    return {"results": results}


def _child(function: Callable[..., Any], cases: Sequence[Case], conn: Any) -> None:
    try:
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        with open("/proc/self/statm") as statm:
            used = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        ceiling = used + CHILD_MEMORY_BYTES
        if hard == resource.RLIM_INFINITY or ceiling < hard:
            resource.setrlimit(resource.RLIMIT_AS, (ceiling, hard))
    except (ImportError, OSError, ValueError):
        pass  # no memory ceiling on this platform; the time limit still holds
    try:
        payload = json.dumps(_run_cases(function, cases))
    except (TypeError, ValueError, RecursionError) as error:
        payload = json.dumps({"error": f"your function's results cannot be read: {str(error)[:200]}"})
    if len(payload) > MAX_RESULT_BYTES:
        payload = json.dumps({"error": f"your function returned {len(payload):,} bytes of results; far too much"})
    conn.send_bytes(payload.encode())
    conn.close()
    os._exit(0)


def _in_fork(function: Callable[..., Any], cases: Sequence[Case], timeout: float) -> dict[str, Any]:
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(function, cases, send), daemon=True)
    process.start()
    send.close()
    try:
        if not receive.poll(timeout):
            alive = process.is_alive()
            return {"error": f"your function took longer than {timeout:g} s on the test inputs (an endless loop?)"
                    if alive else "your function ended its process before returning (sys.exit, os._exit or a crash)"}
        try:
            data = receive.recv_bytes(MAX_RESULT_BYTES + 1024)
        except (EOFError, OSError):
            return {"error": "your function ended its process before returning (sys.exit, os._exit, a crash or out of memory)"}
        return json.loads(data)
    finally:
        receive.close()
        if process.is_alive():
            process.kill()
        process.join(1)


def _in_thread(function: Callable[..., Any], cases: Sequence[Case], timeout: float) -> dict[str, Any]:
    """Where fork is missing (Windows): a daemon thread; a hung function is reported, not stopped."""
    box: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: box.update(_run_cases(function, cases)), daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        return {"error": f"your function took longer than {timeout:g} s (it keeps running: restart the kernel)"}
    return box


def run_function(function: Callable[..., Any], cases: Sequence[Case], timeout: float) -> dict[str, Any]:
    """``{"results": [...]}`` or ``{"error": "..."}`` for ``function`` on every case, isolated and time-limited."""
    forkable = "fork" in multiprocessing.get_all_start_methods() and sys.platform != "win32"
    return (_in_fork if forkable else _in_thread)(function, cases, timeout)


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
        if not callable(answer):
            return Mark(False, f"expected a function (def ... or lambda), got {_shown(answer)}")
        cases = list(self.cases())
        outcome = run_function(answer, cases, FUNCTION_TIMEOUT_S)
        if "error" in outcome:
            return Mark(False, str(outcome["error"]))
        for case, got in zip(cases, outcome["results"]):
            want = _plain(self.reference(*case), [MAX_VALUES])
            if not _same(got, want, self.rel, self.abs_):
                shown = "None (a missing `return`?)" if got is None else json.dumps(got)[:80]
                return Mark(False, f"on input ({self.describe_case(case)}) your function returned {shown}, which is not right")
        return Mark(True, "")
