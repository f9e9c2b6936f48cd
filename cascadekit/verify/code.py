"""Code answers: extract the Python program, run it against hidden tests in the sandbox.

Two kinds of hidden tests: calls of a named function,
``FunctionTests("solve", [((args...), expected), ...])``, all run in one sandbox;
or competitive-programming style ``IOTests([(stdin, expected_stdout), ...])``,
one sandbox per case, output compared line by line ignoring trailing spaces.
The verdict is the fraction of tests passed, with the first failure as the reason.
The paper's Code RL reward is all-or-nothing on hidden tests; use ``all_passed``
for that, ``pass_fraction`` for a denser signal.

Why a wrong solution cannot collect the reward: the candidate's process never
holds the expected outputs, the comparison or the verdict. The verifier sends
only the arguments (on stdin), the harness sends back each return value as plain
JSON, and the verifier compares it with :func:`same_value` in its own process.
So an object whose ``__eq__`` says yes to everything, a patched ``json.dumps``, a
forged result line, a monkeypatched harness or a peek into the caller's frame
can only ever report *a value*, which is right only if it is the right answer.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import math
from typing import Any, Sequence

from cascadekit.sandbox import Limits, run_python
from cascadekit.verify.boxed import answer_part

__all__ = ["FunctionTests", "IOTests", "CodeVerdict", "extract_code", "verify_code", "run_hidden_tests",
           "same_value"]


@dataclasses.dataclass(frozen=True)
class FunctionTests:
    """Hidden tests: ``module.function(*args) == expected`` for each case (JSON values).

    The candidate's code is saved as ``{module}.py``; only the arguments enter the
    sandbox, the expected values never do.
    """

    function: str
    cases: list[tuple[list[Any] | tuple[Any, ...], Any]]
    module: str = "solution"


@dataclasses.dataclass(frozen=True)
class IOTests:
    """Hidden tests: the program, fed ``stdin``, prints ``expected_stdout``."""

    cases: list[tuple[str, str]]


@dataclasses.dataclass(frozen=True)
class CodeVerdict:
    pass_fraction: float
    all_passed: bool
    passed: int
    total: int
    reason: str


# A fence's info string holds no backtick (as in CommonMark) and is read apart from
# the pattern: overlapping classes in one pattern would backtrack quadratically on
# a long line of backticks or letters, and a verifier must stay linear in hostile text.
_FENCE = re.compile(r"```([^`\n]*)\n(.*?)```", re.DOTALL)
_LANG = re.compile(r"[ \t]*([A-Za-z0-9_+-]*)")


def extract_code(text: str) -> str | None:
    """The program in a model answer: the last ```python block, else the last fenced
    block, else the whole answer if it parses as Python. None if there is none."""
    if not isinstance(text, str):
        return None
    answer = answer_part(text)
    blocks = [(_LANG.match(info).group(1), body) for info, body in _FENCE.findall(answer)]
    python = [body for lang, body in blocks if lang.lower() in ("python", "py", "python3")]
    if python or blocks:
        return (python or [body for _, body in blocks])[-1]
    bare = answer.strip()
    if bare and _syntax_error(bare) is None and re.search(r"^(def|class|import|from)\s", bare, re.M):
        return bare
    return None


def _syntax_error(code: str) -> str | None:
    try:
        ast.parse(code)
    except SyntaxError as e:
        return f"syntax error: line {e.lineno}: {e.msg}"
    except (ValueError, RecursionError, MemoryError) as e:  # null bytes, absurd nesting
        return f"syntax error: {type(e).__name__}"
    return None


# Runs in the sandbox as main.py beside the candidate's files. It holds only the
# calls to make: the expected values and the comparison stay in the verifier.
_HARNESS = r"""
import sys
here = sys.path.pop(0)  # the harness's own imports come from the standard library, never the tree
import importlib, io, json
sys.path.insert(0, here)
calls = json.loads(sys.stdin.readline())
out = sys.stdout
def report(i, key, value):
    out.write("@@cascadekit " + json.dumps({"i": i, key: value}) + "\n")
    out.flush()
for i, (module, function, args) in enumerate(calls):
    sys.stdout = io.StringIO()
    try:
        fn = getattr(importlib.import_module(module), function)
    except BaseException as e:
        report(i, "load", type(e).__name__ + ": " + str(e)[:200])
        continue
    try:
        value = json.dumps(fn(*args), allow_nan=False)
    except BaseException as e:
        report(i, "error", type(e).__name__ + ": " + str(e)[:200])
        continue
    out.write('@@cascadekit {"i": %d, "value": %s}\n' % (i, value))
    out.flush()
"""
_PREFIX = "@@cascadekit "


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a test value")


def read_reports(stdout: str, n_calls: int) -> dict[int, tuple[str, Any]]:
    """Per call index, ``("value", v)``, ``("error", why)`` or ``("load", why)`` from the harness's lines.

    The program can print anything, including lines that look like reports: a
    report only carries a value, which the verifier then compares, so forging one
    is no easier than computing the answer. Two reports for one call make it fail.
    """
    reports: dict[int, tuple[str, Any]] = {}
    for line in stdout.splitlines():
        if not line.startswith(_PREFIX):
            continue
        try:
            record = json.loads(line[len(_PREFIX):], parse_constant=_reject_constant)
        except (ValueError, RecursionError):
            continue
        if not isinstance(record, dict) or len(record) != 2 or type(record.get("i")) is not int:
            continue
        i = record["i"]
        kind = next((k for k in ("value", "error", "load") if k in record), None)
        if kind is None or not 0 <= i < n_calls or (kind != "value" and not isinstance(record[kind], str)):
            continue
        reports[i] = ("error", "two reports for one call") if i in reports else (kind, record[kind])
    return reports


def same_value(got: Any, want: Any) -> bool:
    """Equality of plain JSON values, decided here, never by the candidate's objects.

    Booleans are not numbers; a float on either side compares with a relative
    tolerance of 1e-6; lists and dicts compare element by element.
    """
    if isinstance(got, bool) or isinstance(want, bool):
        return type(got) is type(want) and got == want
    if isinstance(got, (int, float)) and isinstance(want, (int, float)):
        if isinstance(got, float) or isinstance(want, float):
            return math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9)
        return got == want
    if isinstance(want, (list, tuple)):
        return isinstance(got, list) and len(got) == len(want) and all(map(same_value, got, want))
    if isinstance(want, dict):
        return (isinstance(got, dict) and got.keys() == want.keys()
                and all(same_value(got[k], want[k]) for k in want))
    return type(got) is type(want) and got == want


def _show(value: Any) -> str:
    try:
        return json.dumps(value)[:200]
    except (TypeError, ValueError, RecursionError):
        return "<unprintable>"


def run_hidden_tests(tests: Sequence[FunctionTests], files: dict[str, str],
                     limits: Limits) -> tuple[int, int, str]:
    """Run every case of ``tests`` against ``files`` in one sandbox: (passed, total, reason)."""
    cases = [(t, args, want) for t in tests for args, want in t.cases]
    total = len(cases)
    if total == 0:
        return 0, 0, "no tests"
    calls = [[t.module, t.function, list(args)] for t, args, _ in cases]
    result = run_python(_HARNESS, stdin=json.dumps(calls) + "\n", files=files, limits=limits)
    reports = read_reports(result.stdout, total)
    passed, failure = 0, None
    for i, (t, args, want) in enumerate(cases):
        kind, detail = reports.get(i, (None, None))
        ok = kind == "value" and same_value(detail, want)
        passed += ok
        if ok or failure is not None:
            continue
        call = f"{t.function}({', '.join(map(_show, args))})"
        if kind is None:
            why = result.killed_reason or f"harness exited with {result.returncode}"
            failure = f"{why} before test {i} finished"
        elif kind == "load":
            failure = f"could not load {t.function!r} from {t.module}: {detail}"
        elif kind == "error":
            failure = f"error on test {i}: {detail}"
        else:
            failure = f"wrong answer on test {i}: {call} returned {_show(detail)}, expected {_show(want)}"
    return passed, total, failure or f"all {total} tests passed"


def verify_code(text: str, tests: FunctionTests | IOTests, limits: Limits = Limits()) -> CodeVerdict:
    """Extract the program from ``text`` and run the hidden tests in the sandbox; never raises."""
    total = len(tests.cases)
    code = extract_code(text)
    if code is None:
        return _verdict(0, total, "no code found")
    if (error := _syntax_error(code)) is not None:
        return _verdict(0, total, error)
    if isinstance(tests, IOTests):
        return _run_io_tests(code, tests, limits)
    passed, total, reason = run_hidden_tests([tests], {f"{tests.module}.py": code}, limits)
    if reason.startswith("harness exited") or " before test " in reason:
        reason = f"{reason} ({passed}/{total} passed)"
    return _verdict(passed, total, reason)


def _verdict(passed: int, total: int, reason: str) -> CodeVerdict:
    return CodeVerdict(passed / total if total else 0.0, total > 0 and passed == total,
                       passed, total, reason)


def _lines(output: str) -> list[str]:
    lines = [line.rstrip() for line in output.strip("\n").split("\n")]
    return lines if lines != [""] else []


def _run_io_tests(code: str, tests: IOTests, limits: Limits) -> CodeVerdict:
    total, passed, first_failure = len(tests.cases), 0, None
    for i, (stdin, expected) in enumerate(tests.cases):
        result = run_python(code, stdin=stdin, limits=limits)
        if result.ok and _lines(result.stdout) == _lines(expected):
            passed += 1
        elif first_failure is None:
            if not result.ok:
                tail = result.stderr.strip().splitlines()[-1:] or [""]
                first_failure = f"{result.killed_reason or 'error'} on test {i}: {tail[0][:200]}"
            else:
                first_failure = f"wrong answer on test {i}: printed {result.stdout[:100]!r}, " \
                                f"expected {expected[:100]!r}"
    return _verdict(passed, total, first_failure or f"all {total} tests passed" if total else "no tests")


