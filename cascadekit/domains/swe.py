"""SWE: fix one wrong line of the code surface's function with a SEARCH/REPLACE patch.

Stands in for SWE-bench Verified. ``calc.py`` holds the code surface's function
(:mod:`cascadekit.domains.code`) with one computed node's right-hand side made
wrong (an operator swapped, or a constant moved by one); the prompt shows the
file, the problem's sentences as the spec, and the failing test, which calls the
function on the problem's own leaf values::

    calc.py
    ```python
    def count_sharks(tigers, eagles):
        sharks = tigers + eagles + 4
        return sharks
    ```
    Sharks equals 3 more than the sum of tigers and eagles.
    Test failed: count_sharks(1, 10) returned 15, expected 14. Fix calc.py with a search/replace patch.

The thinking names the wrong line and its fix in two short sentences; the answer
(in both modes) is the patch alone, in the SEARCH/REPLACE format of Aider and the
agentless setups the paper's SWE data follows. Draws whose bug leaves the failing
test's result unchanged are rejected.

Two rewards (:mod:`cascadekit.verify.patch`): the judge's score is execution,
1 when the patch applies and every hidden test passes (the failing call and
fresh ones, run in the sandbox); ``details["similarity"]`` is the paper's
execution-free SWE RL reward, the SWE-RL sequence similarity of the patch to the
gold one. Departures from the paper: a one-line bug in a one-function file
instead of a real repository, and the spec in the prompt, so that the one right
fix is determined by the prompt (one failing call alone would admit many).

With ``domains.swe_rewrites`` that fix has several correct forms (``sharks = 3 + tigers +
eagles`` fixes the file above as well as ``sharks = tigers + eagles + 3``): the reference
patch is written in one, the SFT answer in one drawn apart, so lexical similarity to
the reference stops being the same as passing the tests, as in SWE-bench, where a
correct fix rarely reads like the developer's.
"""
from __future__ import annotations

import random
import re
from typing import Any, Sequence

from cascadekit.domains.task import Judgement, Task
from cascadekit.domains.code import (
    CASES_WANT, gold_field, hidden_cases, is_cases, is_identifier, spec, writable,
)
from cascadekit.domains.dag import Dag, draw_dag
from cascadekit.verify.code import FunctionTests
from cascadekit.verify.patch import apply_patch, parse_patch, patch_similarity, verify_patch

MODULE = "calc"
FILE = f"{MODULE}.py"
_SWAPS = {"+": "-", "-": "+", "*": "+"}


def wrong_expressions(right: str) -> list[str]:
    """Every one-step corruption of an expression: one operator swapped, or one constant moved by one (kept >= 1)."""
    wrong = [right[:m.start(1)] + _SWAPS[m.group(1)] + right[m.end(1):] for m in re.finditer(r" ([+\-*]) ", right)]
    for m in re.finditer(r"(?<!\w)\d+(?!\w)", right):
        c = int(m.group())
        wrong += [right[:m.start()] + str(v) + right[m.end():] for v in (c - 1, c + 1) if v >= 1]
    return wrong


def equivalent_forms(dag: Dag, index: int, names: Sequence[str]) -> list[str]:
    """Node ``index``'s right-hand side written other ways with the same value on every input (operands
    reordered, a constant factored out), without :meth:`Dag.expression`'s own form."""
    node = dag.graph.nodes[index]
    p, c = [names[i] for i in node.parents], node.const
    plus, backwards = " + ".join(p), " + ".join(reversed(p))
    forms = {
        "plus": [f"{c} + {p[0]}"],
        "times": [f"{p[0]} * {c}"],
        "difference": [f"-{p[-1]} + {p[0]}"],
        "product": [f"{p[-1]} * {p[0]}"],
        "sum": [backwards],
        "total": [backwards],
        "scaled_sum": [f"({plus}) * {c}", " + ".join(f"{c} * {name}" for name in p)],
        "shifted_sum": [f"{c} + {plus}", f"{backwards} + {c}"],
    }[node.kind]
    right = dag.expression(index, names)
    return list(dict.fromkeys(f for f in forms if f != right))


def _call(source: str, function: str, args: Sequence[int]) -> Any:
    """Our own generated function's value (never model text: that only runs in the sandbox)."""
    namespace: dict[str, Any] = {}
    exec(compile(source, FILE, "exec"), {"__builtins__": {}}, namespace)
    return namespace[function](*args)


def _with_neighbours(rng: random.Random, ops: Sequence[int], dag: Dag, buggy: str, context: int) -> str | None:
    """``buggy`` among ``context`` correct functions of fresh DAGs, in a random order; None on a name clash."""
    functions, names = [buggy], {dag.function_name()}
    for _ in range(context):
        other = draw_dag(rng, ops)
        if not writable(other) or other.function_name() in names:
            return None
        names.add(other.function_name())
        functions.append(other.source())
    rng.shuffle(functions)
    return "\n".join(functions)


def patch_text(line: str, fixed: str) -> str:
    """The SEARCH/REPLACE patch that turns ``line`` of calc.py into ``fixed``."""
    return f"{FILE}\n<<<<<<< SEARCH\n{line}\n=======\n{fixed}\n>>>>>>> REPLACE"


def make_task(rng: random.Random, ops: Sequence[int], context: int = 0, rewrites: bool = False) -> Task | None:
    """A buggy calc.py, its spec and failing test, and the gold patch; None when the bug would not show.

    ``context`` more correct functions (other DAGs of the same ops) share calc.py
    with the buggy one, in a random order: the toy's input context, which chapter 13
    lengthens as the paper extends SWE RL's input from 16K to 24K tokens. With
    ``context`` 0 nothing more is drawn, so the SFT and stage-table records stay as
    they were.

    ``rewrites`` (``domains.swe_rewrites``) writes the fixed line of the reference
    patch (``gold["patch"]``) and of the answer each in one of its correct forms
    (:func:`equivalent_forms`), drawn apart from a generator of the prompt's own, so the
    prompts (and the main generator) stay as they are.
    """
    dag = draw_dag(rng, ops)
    text = spec(dag)
    if text is None or not writable(dag):
        return None
    ids = dag.identifiers
    node = rng.choice(dag.computed)
    right = dag.expression(node, ids)
    wrong = wrong_expressions(right)
    if not wrong:  # a lone parent ("sum" of one quantity) has nothing to corrupt
        return None
    bad = rng.choice(wrong)
    buggy = dag.source(lines={node: bad})
    if context:
        buggy = _with_neighbours(rng, ops, dag, buggy, context)
        if buggy is None:
            return None
    args = [dag.graph.nodes[i].value for i in dag.leaves]
    got, want = _call(buggy, dag.function_name(), args), dag.answer
    if got == want:
        return None
    call = f"{dag.function_name()}({', '.join(map(str, args))})"
    if context and buggy.count(f"\n    {ids[node]} = {bad}\n") != 1:  # the SEARCH line must be unique in the file
        return None
    prompt = "\n".join(part for part in (
        f"{FILE}\n```python\n{buggy}```", text,
        f"Test failed: {call} returned {got}, expected {want}. Fix {FILE} with a search/replace patch.") if part)
    reference = fix = right
    if rewrites:
        forms = [right, *equivalent_forms(dag, node, ids)]
        draw = random.Random(f"swe-fix/{prompt}")
        reference, fix = draw.choice(forms), draw.choice(forms)
    line = f"    {ids[node]} = {bad}"
    patch = patch_text(line, f"    {ids[node]} = {fix}")
    return Task(
        domain="swe",
        prompt=prompt,
        thinking=f"The wrong line is {ids[node]} = {bad}. It should be {ids[node]} = {fix}.",
        answer=patch,
        no_think_answer=patch,
        gold={"file": FILE, "source": buggy, "patch": patch_text(line, f"    {ids[node]} = {reference}"),
              "tests": {"module": MODULE, "function": dag.function_name(),
                        "cases": [[args, want]] + hidden_cases(dag, rng)}},
    )


def _is_tests(value: Any) -> bool:
    return (isinstance(value, dict) and is_identifier(value.get("module")) and is_identifier(value.get("function"))
            and is_cases(value.get("cases")))


def check_gold(gold: Any) -> None:
    """Raise :class:`ValueError` naming the field when ``gold`` is no swe gold record.

    The gold patch must apply to the source, and the tests must import the patched file.
    """
    file = gold_field(gold, "swe", "file", lambda v: isinstance(v, str) and v.endswith(".py")
                      and is_identifier(v.removesuffix(".py")), "a module file name like 'calc.py'")
    source = gold_field(gold, "swe", "source", lambda v: isinstance(v, str), "the buggy file's text")
    patch = gold_field(gold, "swe", "patch", lambda v: isinstance(v, str), "a SEARCH/REPLACE patch")
    gold_field(gold, "swe", "tests", _is_tests,
               f"a dict of 'module', 'function' (Python names) and 'cases' ({CASES_WANT})")
    if gold["tests"]["module"] != file.removesuffix(".py"):
        raise ValueError(f"swe gold: field 'tests' must test module {file.removesuffix('.py')!r} of {file!r}, "
                         f"got {gold['tests']['module']!r}")
    try:
        apply_patch({file: source}, parse_patch(patch))
    except Exception as err:  # PatchError, or whatever else a malformed record provokes
        raise ValueError(f"swe gold: field 'patch' does not apply to 'source': {err}") from None


def judge(gold: dict[str, Any], completion: str) -> Judgement:
    """1 when the patch applies and every hidden test passes; the patch similarity in the details; never raises."""
    try:
        check_gold(gold)
    except ValueError as err:
        return Judgement(0.0, str(err), {"similarity": 0.0, "applied": False, "pass_fraction": 0.0})
    hidden = gold["tests"]
    tests = FunctionTests(hidden["function"], [(list(args), want) for args, want in hidden["cases"]],
                          module=hidden["module"])
    verdict = verify_patch(completion, {gold["file"]: gold["source"]}, tests)
    return Judgement(float(verdict.all_passed), verdict.reason,
                     {"similarity": patch_similarity(completion, gold["patch"]), "applied": verdict.applied,
                      "pass_fraction": verdict.pass_fraction})
