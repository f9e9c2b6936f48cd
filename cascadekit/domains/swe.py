"""SWE: fix an injected bug in a small module by writing a unified diff.

Stands in for SWE-bench Verified. The module is a code-domain function with one
line mutated (an operator swapped or a constant changed); the issue reports a
call whose result is wrong. The gold fix is a unified diff
(:func:`cascadekit.verify.patch.make_diff`); the verdict applies the model's
diff and runs the hidden tests in the sandbox (:func:`cascadekit.verify.patch.verify_patch`).

Departure from the paper: its SWE RL reward is execution-free (similarity to the
gold patch); executing the tests is the stricter judge the kit can afford here.
The gold diff is kept in the gold fields for the execution-free reward of chapter 13.
"""
from __future__ import annotations

import random
import re
from typing import Any, Sequence

from cascadekit.domains import Judgement, Task
from cascadekit.domains.code import program, hidden_cases
from cascadekit.verify.code import FunctionTests
from cascadekit.verify.patch import make_diff, verify_patch

MODULE = "calc.py"
_SWAPS = {"+": "-", "-": "+", "*": "+"}


def _mutate(line: str, rng: random.Random) -> str:
    """The line with one operator swapped or one constant shifted."""
    ops = [m for m in re.finditer(r" ([+\-*]) ", line)]
    consts = [m for m in re.finditer(r"\b\d+\b", line)]
    if consts and (not ops or rng.random() < 0.3):
        m = rng.choice(consts)
        return line[:m.start()] + str(int(m.group()) + 1) + line[m.end():]
    m = rng.choice(ops)
    return line[:m.start(1)] + _SWAPS[m.group(1)] + line[m.end(1):]


def _hidden_tests(function: str, cases: list[list]) -> dict[str, Any]:
    """Calls of the fixed function with their expected values; they never enter the sandbox's files."""
    return {"module": MODULE.removesuffix(".py"), "function": function, "cases": cases}


def make_task(rng: random.Random, ops: Sequence[int]) -> Task | None:
    """A buggy ``calc.py``, an issue naming a wrong result, and the gold diff; None if the bug is invisible."""
    prog = program(rng.choice(list(ops)), rng)
    if not prog.steps:
        return None
    good = prog.source()
    lines = good.splitlines(keepends=True)
    index = rng.randrange(1, len(lines))
    bad_line = _mutate(lines[index], rng)
    buggy = "".join(lines[:index] + [bad_line] + lines[index + 1:])
    cases = hidden_cases(prog, rng)
    args, want = cases[0]
    namespace: dict[str, Any] = {}
    exec(buggy, namespace)  # our own generated source, never model text
    got = namespace[prog.function](*args)
    if got == want:
        return None
    call = f"{prog.function}({', '.join(map(str, args))})"
    diff = make_diff({MODULE: buggy}, {MODULE: good}, context=1)
    return Task(
        domain="swe",
        prompt=(f"File {MODULE}:\n```python\n{buggy}```\nIssue: {call} returns {got} but should return {want}. "
                f"Reply with a unified diff that fixes the bug."),
        thinking=f"The line `{bad_line.strip()}` is wrong. It should be `{lines[index].strip()}`.",
        answer=f"```diff\n{diff}```",
        gold={"files": {MODULE: buggy}, "tests": _hidden_tests(prog.function, cases), "gold_diff": diff},
    )


def judge(gold: dict[str, Any], completion: str) -> Judgement:
    """1 when the diff applies and every hidden test passes; never raises."""
    try:
        files, spec = dict(gold["files"]), gold["tests"]
        tests = FunctionTests(str(spec["function"]), [(list(args), want) for args, want in spec["cases"]],
                              module=str(spec["module"]))
    except (KeyError, TypeError, ValueError) as err:
        return Judgement(0.0, f"unreadable gold fields: {err!r}", {"applied": 0.0})
    verdict = verify_patch(completion, files, tests)
    return Judgement(float(verdict.all_passed), verdict.reason,
                     {"applied": float(verdict.applied), "pass_fraction": verdict.pass_fraction})
