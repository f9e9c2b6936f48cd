"""Code verifier: extraction, hidden tests in the sandbox, reasons, and cheap hacks."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from cascadekit.sandbox import Limits
from cascadekit.verify.code import FunctionTests, IOTests, extract_code, verify_code

TESTS = FunctionTests("add", [([1, 2], 3), ([0, 0], 0), ([-5, 5], 0), ([10, 20], 30)])
GOOD = "def add(a, b):\n    return a + b\n"


def answer(code: str, thinking: str = "Let me write it.") -> str:
    return f"<think>\n{thinking}\n</think>\n\nHere it is:\n```python\n{code}```\n<|im_end|>"


def test_extract_code_variants():
    assert extract_code(answer(GOOD)) == GOOD
    two = "```python\nx = 1\n```\nthen\n```python\nx = 2\n```"
    assert extract_code(two) == "x = 2\n"
    assert extract_code("```\ndef f(): pass\n```") == "def f(): pass\n"
    assert extract_code(GOOD) == GOOD.strip()  # bare code
    assert extract_code("I cannot solve this.") is None
    assert extract_code("<think>```python\nx=1\n```</think>no code here") is None
    assert extract_code(None) is None  # type: ignore[arg-type]
    assert extract_code("``` python3 main.py\nx = 1\n```\n```text\ny\n```") == "x = 1\n"  # info string read


def test_extraction_stays_linear_in_hostile_text():
    """Long runs of backticks or of an unterminated info string once took quadratic time."""
    for text in ("`" * 10**6, "```" + "a" * 10**6, "```python\n" + "x" * 10**6, "``` ```\n" * 10**5):
        start = time.perf_counter()
        extract_code(text)
        assert time.perf_counter() - start < 60  # a hang guard (quadratic would take hours), not a speed claim


def test_correct_solution_passes_all():
    v = verify_code(answer(GOOD), TESTS)
    assert v.all_passed and v.pass_fraction == 1.0 and v.passed == 4
    assert v.reason == "all 4 tests passed"


def test_wrong_answer_reports_the_first_failing_test():
    v = verify_code(answer("def add(a, b):\n    return a - b if a < 0 else a + b\n"), TESTS)
    assert not v.all_passed and v.passed == 3 and v.pass_fraction == 0.75
    assert v.reason.startswith("wrong answer on test 2: add(-5, 5) returned -10")


def test_reasons_for_broken_programs():
    assert verify_code("no code", TESTS).reason == "no code found"
    assert verify_code(answer("def add(a, b)\n    return a\n"), TESTS).reason.startswith("syntax error")
    missing = verify_code(answer("def plus(a, b):\n    return a + b\n"), TESTS)
    assert "could not load 'add'" in missing.reason and "AttributeError" in missing.reason
    crash = verify_code(answer("def add(a, b):\n    return a + b if b else 1 // b\n"), TESTS)
    assert crash.reason.startswith("error on test 1: ZeroDivisionError") and crash.passed == 3
    boom = verify_code(answer("raise SystemExit(3)\n"), TESTS)
    assert boom.passed == 0 and "SystemExit" in boom.reason


def test_timeout_counts_unfinished_tests_as_failed():
    slow = "def add(a, b):\n    while a == 0:\n        pass\n    return a + b\n"
    # The wall limit is far above the CPU limit, so the CPU limit fires first however loaded the machine is
    # (at wall_s=3 a busy machine once let the wall limit fire first: issue 58).
    v = verify_code(answer(slow), TESTS, limits=Limits(cpu_s=1, wall_s=120))
    assert v.passed == 1 and "cpu time before test 1" in v.reason


def test_cheap_hacks_fail():
    always_equal = ("class Yes:\n    def __eq__(self, other):\n        return True\n"
                    "def add(a, b):\n    return Yes()\n")
    assert not verify_code(answer(always_equal), TESTS).all_passed
    forged = ('import sys\nfor i in range(4):\n    print(\'{"i": %d, "ok": true}\' % i)\n'
              "def add(a, b):\n    return 0\n")
    assert verify_code(answer(forged), TESTS).passed == 2  # only the genuine zeros


def test_noisy_solution_still_judged():
    chatty = "def add(a, b):\n    print('debug', a, b)\n    return a + b\nprint('loaded')\n"
    assert verify_code(answer(chatty), TESTS).all_passed


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200))
def test_extract_never_raises(text):
    code = extract_code(text)
    assert code is None or isinstance(code, str)


IO = IOTests([("3 4\n", "7\n"), ("10 -2\n", "8"), ("0 0\n", "0\n")])


def test_io_tests():
    good = "a, b = map(int, input().split())\nprint(a + b)   \n"
    v = verify_code(answer(good), IO)
    assert v.all_passed and v.reason == "all 3 tests passed"
    wrong = "a, b = map(int, input().split())\nprint(a * b if a == 3 else a + b)\n"
    v = verify_code(answer(wrong), IO)
    assert v.passed == 2 and v.reason.startswith("wrong answer on test 0: printed '12\\n'")
    crash = verify_code(answer("input()\nraise ValueError('nope')\n"), IO)
    assert crash.passed == 0 and crash.reason == "error on test 0: ValueError: nope"
    slow = verify_code(answer("while True:\n    pass\n"), IOTests([("", "")]), Limits(cpu_s=1))
    assert slow.reason.startswith("cpu time on test 0")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400), st.integers(min_value=0, max_value=5))
def test_forged_or_garbled_harness_output_never_raises(stdout, calls):
    """Whatever the program prints, reading the reports gives plain values or nothing, never an exception."""
    from cascadekit.verify.code import read_reports, same_value

    lines = [stdout, "@@cascadekit " + stdout, '@@cascadekit {"i": 0, "value": ' + stdout + "}",
             "@@cascadekit " + "[" * 5000, '@@cascadekit {"i": 0, "value": NaN}', '@@cascadekit {"i": 1e400}']
    reports = read_reports("\n".join(lines), calls)
    for i, (kind, detail) in reports.items():
        assert 0 <= i < calls and kind in ("value", "error", "load")
        same_value(detail, 3)
