"""The one world of Part II: a small DAG problem that every domain is a surface of.

Part I measured what a ~1M-parameter model learns on two CPU cores: the
``minimal`` rendering of a DAG problem at ops 2-5 ("Crickets equals 2 times
tortoises. Tortoises equals 2."). So at toy scale each Part II domain is the same
skill in another costume (a word problem to box, a Python function of the
leaves, calculator calls, a one-line bug to patch, a formatted answer, a request
about the quantities), and the base model's pretraining on all of them shares
one arithmetic core. Real-scale profiles swap the suites for the paper's data;
the surfaces are the toy stand-ins.

A :class:`Dag` keeps the sampled :class:`~cascadekit.world.graph.Graph` (kinds
and constants) beside its rendered :class:`~cascadekit.world.render.Problem`
(names, text, gold steps), so a surface can write the same node as an English
sentence, a solution step or a line of Python, with the same symbolic form
(``witch_films + 4`` in code is ``witch films + 4`` in the math steps).
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Sequence

from cascadekit.world.graph import Graph, compute, sample_graph
from cascadekit.world.render import Problem, render_problem

CONTEXTS = ("A", "B", "C")
STYLE = "minimal"


def identifier(name: str) -> str:
    """A quantity's name as a Python identifier: ``Greek teachers`` -> ``greek_teachers``."""
    return re.sub(r"\W+", "_", name.strip().lower()).strip("_")


@dataclass(frozen=True)
class Dag:
    """A sampled graph and its ``minimal`` rendering (node ``i`` of one is node ``i`` of the other)."""

    graph: Graph
    problem: Problem

    @property
    def names(self) -> tuple[str, ...]:
        """Each node's quantity name as the problem text writes it (lower case)."""
        return tuple(n.name for n in self.problem.nodes)

    @property
    def identifiers(self) -> tuple[str, ...]:
        return tuple(identifier(n) for n in self.names)

    @property
    def leaves(self) -> tuple[int, ...]:
        """Indices of the leaf nodes (the given numbers; a function's parameters)."""
        return tuple(i for i, n in enumerate(self.graph.nodes) if n.kind == "leaf")

    @property
    def computed(self) -> tuple[int, ...]:
        """Indices of the nodes computed from others, in solution order (the query last)."""
        return tuple(i for i, n in enumerate(self.graph.nodes) if n.kind != "leaf")

    @property
    def answer(self) -> int:
        return self.graph.answer

    def expression(self, index: int, names: Sequence[str]) -> str:
        """Node ``index``'s right-hand side over ``names`` (one per node), as the math steps write it."""
        node = self.graph.nodes[index]
        parents, c = [names[p] for p in node.parents], node.const
        plus = " + ".join(parents)
        return {
            "plus": lambda: f"{parents[0]} + {c}",
            "times": lambda: f"{c} * {parents[0]}",
            "difference": lambda: f"{parents[0]} - {parents[1]}",
            "product": lambda: f"{parents[0]} * {parents[1]}",
            "sum": lambda: plus,
            "total": lambda: plus,
            "scaled_sum": lambda: f"{c} * ({plus})",
            "shifted_sum": lambda: f"{plus} + {c}",
        }[node.kind]()

    def function_name(self) -> str:
        return f"count_{self.identifiers[-1]}"

    def source(self, lines: dict[int, str] | None = None) -> str:
        """The graph as a Python function of its leaves: one assignment per computed node, then ``return``.

        ``lines`` replaces the right-hand side of chosen nodes (how the SWE surface plants a bug).
        """
        ids = self.identifiers
        body = [f"    {ids[i]} = {(lines or {}).get(i, self.expression(i, ids))}" for i in self.computed]
        params = ", ".join(ids[i] for i in self.leaves)
        return f"def {self.function_name()}({params}):\n" + "\n".join(body) + f"\n    return {ids[-1]}\n"

    def run(self, leaf_values: Sequence[int]) -> int:
        """The function's value on ``leaf_values`` (one per leaf, in :attr:`leaves` order)."""
        given = dict(zip(self.leaves, leaf_values))
        values: list[int] = []
        for i, node in enumerate(self.graph.nodes):
            values.append(given[i] if node.kind == "leaf" else
                          compute(node.kind, [values[p] for p in node.parents], node.const))
        return values[-1]

    def values(self) -> tuple[int, ...]:
        return tuple(n.value for n in self.graph.nodes)

    def steps(self) -> list[str]:
        """The gold solution's steps (``name = ... = value.``), without the final ``Answer:``."""
        return re.split(r"(?<=\.) (?=\S)", self.problem.solution_text.removesuffix(f" Answer: {self.answer}."))


def draw_dag(rng: random.Random, ops: Sequence[int], contexts: Sequence[str] = CONTEXTS) -> Dag:
    """A fresh DAG with an op count from ``ops`` in one of ``contexts``, rendered ``minimal``."""
    ops = list(ops)
    if not ops:
        raise ValueError("ops must name at least one op count")
    graph = sample_graph(rng.choice(ops), rng)
    return Dag(graph, render_problem(graph, rng.choice(list(contexts)), STYLE, rng))


__all__ = ["CONTEXTS", "STYLE", "Dag", "draw_dag", "identifier"]
