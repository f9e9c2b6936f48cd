"""Code: the DAG problem as a Python function to write, judged by hidden tests.

Stands in for LiveCodeBench v6. The world's DAG (:mod:`cascadekit.domains.dag`)
becomes a function of its leaves: the prompt keeps the problem's own sentences
for the computed quantities and drops the leaf values, which become parameters::

    Write count_sharks(tigers, eagles). Sharks equals 3 more than the sum of tigers and eagles.

The thinking is one symbolic step per computed node (``sharks = tigers + eagles + 3.``),
the same steps the math surface writes with numbers; the answer (in both modes)
is :meth:`~cascadekit.domains.dag.Dag.source` in a ```python block. Hidden tests
call the function on fresh leaf values in the sandbox
(:func:`cascadekit.verify.code.verify_code`); the reward is all-or-nothing as in
the paper, with the pass fraction in the details.

Departures from the paper: one short function of a few arithmetic lines instead
of a competitive-programming problem read from stdin, and a spec that is the DAG's
own English (a total, like the math problem's, is left for the solver to know:
"all horror movies" sums the horror movies). A ~1M-parameter model can learn this
surface because it copies few names and always reads the same way.
"""
from __future__ import annotations

import keyword
import random
import re
from typing import Any, Callable, Sequence

from cascadekit.domains.task import Judgement, Task
from cascadekit.domains.dag import Dag, draw_dag
from cascadekit.verify.code import FunctionTests, verify_code

TEST_CASES = 4
LEAF_VALUES = (1, 20)
_LEAF_SENTENCE = re.compile(r".+ equals \d+\.")


def _short(value: Any, limit: int = 60) -> str:
    try:
        shown = repr(value)
    except Exception:  # a hostile object's __repr__
        shown = f"<{type(value).__name__}>"
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def gold_field(gold: Any, domain: str, name: str, valid: Callable[[Any], bool], want: str) -> Any:
    """``gold[name]`` when ``valid`` accepts it, else :class:`ValueError` naming the domain and the field."""
    if not isinstance(gold, dict):
        raise ValueError(f"{domain} gold: must be a dict of fields, got {_short(gold)}")
    if name not in gold:
        raise ValueError(f"{domain} gold: field {name!r} is missing")
    value = gold[name]
    if not valid(value):
        raise ValueError(f"{domain} gold: field {name!r} must be {want}, got {_short(value)}")
    return value


def is_identifier(value: Any) -> bool:
    """A usable Python name: an identifier that is not a keyword."""
    return isinstance(value, str) and value.isidentifier() and not keyword.iskeyword(value)


def is_cases(value: Any) -> bool:
    """A non-empty list of ``[arguments, expected]`` pairs, the arguments a list."""
    return (isinstance(value, list) and bool(value)
            and all(isinstance(c, (list, tuple)) and len(c) == 2 and isinstance(c[0], (list, tuple)) for c in value))


CASES_WANT = "a non-empty list of [arguments, expected] pairs"


def writable(dag: Dag) -> bool:
    """Whether every quantity's identifier is a distinct, usable Python name."""
    ids = dag.identifiers
    return len(set(ids)) == len(ids) and all(map(is_identifier, ids))


def signature(dag: Dag) -> str:
    """``count_sharks(tigers, eagles)``: the function and its parameters (the leaves)."""
    return f"{dag.function_name()}({', '.join(dag.identifiers[i] for i in dag.leaves)})"


def spec(dag: Dag) -> str | None:
    """The problem's sentences without the leaf values, in the problem's order; None if they do not split cleanly."""
    sentences = re.split(r"(?<=\.) (?=\S)", dag.problem.problem_text)
    kept = [s for s in sentences if not _LEAF_SENTENCE.fullmatch(s)]
    if len(sentences) - len(kept) != len(dag.leaves):
        return None
    return " ".join(kept)


def symbolic_steps(dag: Dag) -> str:
    """One ``name = expression.`` per computed node, over the Python identifiers, in solution order."""
    ids = dag.identifiers
    return " ".join(f"{ids[i]} = {dag.expression(i, ids)}." for i in dag.computed)


def hidden_cases(dag: Dag, rng: random.Random, n: int = TEST_CASES) -> list[list]:
    """``[[arguments, expected], ...]`` on fresh leaf values."""
    cases = []
    for _ in range(n):
        args = [rng.randint(*LEAF_VALUES) for _ in dag.leaves]
        cases.append([args, dag.run(args)])
    return cases


def make_task(rng: random.Random, ops: Sequence[int]) -> Task | None:
    """Write the DAG's function from its sentences; None when its names are no Python names."""
    dag = draw_dag(rng, ops)
    text = spec(dag)
    if text is None or not writable(dag):
        return None
    block = f"```python\n{dag.source()}```"
    return Task(
        domain="code",
        prompt=f"Write {signature(dag)}. {text}".strip(),
        thinking=symbolic_steps(dag),
        answer=block,
        no_think_answer=block,
        gold={"function": dag.function_name(), "cases": hidden_cases(dag, rng)},
    )


def check_gold(gold: Any) -> None:
    """Raise :class:`ValueError` naming the field when ``gold`` is no code gold record."""
    gold_field(gold, "code", "function", is_identifier, "a Python function name")
    gold_field(gold, "code", "cases", is_cases, CASES_WANT)


def judge(gold: dict[str, Any], completion: str) -> Judgement:
    """1 when every hidden test passes (the pass fraction in the details); never raises."""
    try:
        check_gold(gold)
    except ValueError as err:
        return Judgement(0.0, str(err), {"pass_fraction": 0.0})
    tests = FunctionTests(gold["function"], [(list(args), want) for args, want in gold["cases"]])
    verdict = verify_code(completion, tests)
    return Judgement(float(verdict.all_passed), verdict.reason, {"pass_fraction": verdict.pass_fraction})
