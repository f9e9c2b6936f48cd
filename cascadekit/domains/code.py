"""Code: a DAG rendered as a Python function to write, judged by hidden tests.

Stands in for LiveCodeBench. A graph from the DAG world becomes a function:
its leaves are the arguments, every other node one line of arithmetic, the
query node the return value. The prompt states the steps in words; hidden tests
call the function on fresh argument values in the sandbox
(:func:`cascadekit.verify.code.verify_code`), all-or-nothing as in the paper.
"""
from __future__ import annotations

import random
import string
from dataclasses import dataclass
from typing import Any, Sequence

from cascadekit.domains import Judgement, Task
from cascadekit.verify.code import FunctionTests, verify_code
from cascadekit.world.graph import Node, compute, sample_graph

FUNCTIONS = ("solve", "compute", "combine", "measure", "score", "tally")
TEST_CASES = 4
_WORDS = {
    "plus": "{0} plus {c}", "times": "{c} times {0}", "difference": "{0} minus {1}",
    "product": "{0} times {1}", "sum": "the sum of {all}", "total": "the sum of {all}",
    "scaled_sum": "{c} times the sum of {all}", "shifted_sum": "the sum of {all} plus {c}",
}
_PYTHON = {
    "plus": "{0} + {c}", "times": "{c} * {0}", "difference": "{0} - {1}", "product": "{0} * {1}",
    "sum": "{plus}", "total": "{plus}", "scaled_sum": "{c} * ({plus})", "shifted_sum": "{plus} + {c}",
}


@dataclass(frozen=True)
class Program:
    """A graph as a function: argument names, one ``(name, expression, words)`` per computed node."""

    function: str
    nodes: tuple[Node, ...]
    args: tuple[str, ...]
    steps: tuple[tuple[str, str, str], ...]

    def source(self) -> str:
        body = [f"    {name} = {expr}" for name, expr, _ in self.steps[:-1]]
        body.append(f"    return {self.steps[-1][1]}")
        return f"def {self.function}({', '.join(self.args)}):\n" + "\n".join(body) + "\n"

    def spec(self) -> str:
        lines = [f"{name} is {words}" for name, _, words in self.steps[:-1]]
        lines.append(f"return {self.steps[-1][2]}")
        return "; ".join(lines)

    def run(self, leaf_values: Sequence[int]) -> int:
        """The function's value on ``leaf_values`` (the arguments, in order)."""
        values: list[int] = []
        leaves = iter(leaf_values)
        for node in self.nodes:
            parents = [values[p] for p in node.parents]
            values.append(next(leaves) if node.kind == "leaf" else compute(node.kind, parents, node.const))
        return values[-1]


def _fill(template: str, names: list[str], const: int | None, joiner: str) -> str:
    return template.format(*names, c=const, all=joiner.join(names), plus=" + ".join(names))


def program(op: int, rng: random.Random) -> Program:
    """A DAG with ``op`` edges as a :class:`Program` (leaves ``a, b, ...``; other nodes ``p, q, ...``)."""
    function = rng.choice(FUNCTIONS)
    graph = sample_graph(op, rng)
    leaf_names = iter(string.ascii_lowercase[:8])
    inner_names = iter("pqrstuvwxyz")
    names, args, steps = [], [], []
    for node in graph.nodes:
        if node.kind == "leaf":
            names.append(next(leaf_names))
            args.append(names[-1])
            continue
        parents = [names[p] for p in node.parents]
        names.append(next(inner_names))
        steps.append((names[-1], _fill(_PYTHON[node.kind], parents, node.const, " + "),
                      _fill(_WORDS[node.kind], parents, node.const, " and ")))
    return Program(function, graph.nodes, tuple(args), tuple(steps))


def hidden_cases(prog: Program, rng: random.Random, n: int = TEST_CASES) -> list[list]:
    """``[[args, expected], ...]`` on fresh argument values."""
    cases = []
    for _ in range(n):
        args = [rng.randint(1, 20) for _ in prog.args]
        cases.append([args, prog.run(args)])
    return cases


def make_task(rng: random.Random, ops: Sequence[int]) -> Task | None:
    """Write the function from a spoken spec; None for a graph with no computed node."""
    prog = program(rng.choice(list(ops)), rng)
    if not prog.steps or len(prog.args) > 8:
        return None
    plan = " ".join(f"{name} = {expr}." for name, expr, _ in prog.steps[:-1])
    code = f"```python\n{prog.source()}```"
    return Task(
        domain="code",
        prompt=f"Write a Python function {prog.function}({', '.join(prog.args)}) where {prog.spec()}.",
        thinking=f"{plan} The function returns {prog.steps[-1][1]}.".strip(),
        answer=code,
        gold={"function": prog.function, "cases": hidden_cases(prog, rng)},
    )


def judge(gold: dict[str, Any], completion: str) -> Judgement:
    """1 when every hidden test passes (the pass fraction in the details); never raises."""
    try:
        tests = FunctionTests(gold["function"], [(args, want) for args, want in gold["cases"]])
    except (KeyError, TypeError, ValueError) as err:
        return Judgement(0.0, f"unreadable gold tests: {err}", {"pass_fraction": 0.0})
    verdict = verify_code(completion, tests)
    return Judgement(float(verdict.all_passed), verdict.reason, {"pass_fraction": verdict.pass_fraction})
