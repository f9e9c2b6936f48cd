"""Code answers: extract the Python program, run it against hidden tests in the sandbox.

Two kinds of hidden tests: calls of a named function,
``FunctionTests("solve", [((args...), expected), ...])``, all run in one sandbox;
or competitive-programming style ``IOTests([(stdin, expected_stdout), ...])``,
one sandbox per case, output compared line by line ignoring trailing spaces.
The verdict is the fraction of tests passed, with the first failure as the reason.
The paper's Code RL reward is all-or-nothing on hidden tests; use ``all_passed``
for that, ``pass_fraction`` for a denser signal.

How the harness resists cheap reward hacking (it runs the solution in its own
process, so a determined program could still forge results; a small model will
not): results are compared as canonical JSON, so an object whose ``__eq__`` says
yes to everything fails; the solution's own prints are swallowed and each result
line carries a nonce the harness reads from stdin before importing the solution.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import secrets
from typing import Any

from cascadekit.sandbox import Limits, run_python
from cascadekit.verify.boxed import answer_part

__all__ = ["FunctionTests", "IOTests", "CodeVerdict", "extract_code", "verify_code"]


@dataclasses.dataclass(frozen=True)
class FunctionTests:
    """Hidden tests: ``function(*args) == expected`` for each case (JSON-able values)."""

    function: str
    cases: list[tuple[list[Any] | tuple[Any, ...], Any]]


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


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)


def extract_code(text: str) -> str | None:
    """The program in a model answer: the last ```python block, else the last fenced
    block, else the whole answer if it parses as Python. None if there is none."""
    if not isinstance(text, str):
        return None
    answer = answer_part(text).split("<|im_end|>", 1)[0]
    blocks = _FENCE.findall(answer)
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


# Runs in the sandbox as main.py beside solution.py and cases.json.
_HARNESS = r"""
import io, json, math, sys
NONCE = sys.stdin.readline().strip()
out = sys.stdout
def report(**fields):
    out.write(NONCE + " " + json.dumps(fields) + "\n")
    out.flush()
cases = json.load(open("cases.json"))
def same(got, want):
    if isinstance(got, float) and isinstance(want, (int, float)) and not isinstance(want, bool):
        return math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9)
    return json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)
sys.stdout = io.StringIO()
try:
    import solution
    fn = getattr(solution, cases["function"])
except BaseException as e:
    report(setup=type(e).__name__ + ": " + str(e)[:200])
    raise SystemExit(0)
for i, (args, want) in enumerate(cases["cases"]):
    sys.stdout = io.StringIO()
    try:
        got = fn(*args)
        json.dumps(got)
    except BaseException as e:
        report(i=i, ok=False, error=type(e).__name__ + ": " + str(e)[:200])
        continue
    report(i=i, ok=same(got, want), got=repr(got)[:200])
"""


def _parse_reports(stdout: str, nonce: str) -> list[dict]:
    reports = []
    for line in stdout.splitlines():
        if line.startswith(nonce + " "):
            try:
                reports.append(json.loads(line[len(nonce) + 1:]))
            except ValueError:
                continue
    return reports


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
    return _run_function_tests(code, tests, limits)


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


def _run_function_tests(code: str, tests: FunctionTests, limits: Limits) -> CodeVerdict:
    total = len(tests.cases)
    nonce = secrets.token_hex(16)
    cases = {"function": tests.function, "cases": [[list(a), e] for a, e in tests.cases]}
    result = run_python(_HARNESS, stdin=nonce + "\n", limits=limits,
                        files={"solution.py": code, "cases.json": json.dumps(cases)})
    reports = _parse_reports(result.stdout, nonce)
    if reports and "setup" in reports[0]:
        return _verdict(0, total, f"could not load {tests.function!r}: {reports[0]['setup']}")
    by_index = {r["i"]: r for r in reports if isinstance(r.get("i"), int)}
    passed = sum(1 for r in by_index.values() if r.get("ok") is True)
    for i, (args, expected) in enumerate(tests.cases):
        r = by_index.get(i)
        if r is None:
            why = result.killed_reason or f"harness exited with {result.returncode}"
            return _verdict(passed, total, f"{why} before test {i} finished ({passed}/{total} passed)")
        if "error" in r:
            return _verdict(passed, total, f"error on test {i}: {r['error']}")
        if not r.get("ok"):
            call = f"{tests.function}({', '.join(map(repr, args))})"
            return _verdict(passed, total, f"wrong answer on test {i}: {call} returned "
                                           f"{r.get('got')}, expected {expected!r}")
    return _verdict(passed, total, f"all {total} tests passed" if total else "no tests")
