"""Chapter 01: the DAG world, arithmetic word problems generated from dependency graphs.

Every Part I experiment runs on it. A problem's nodes are quantities, its edges
say which quantity is needed for which, and ``op`` counts the dependency edges;
the same graph can be told in three contexts (animals-zoo, teachers-school,
movies-festival) and in several renderings. The world itself is
:mod:`cascadekit.world`; the chapter has no experiment of its own (``experiment:
false`` in ``chapters.yaml``): its notebook is the whole chapter, and this module
holds its exercises.
"""
from __future__ import annotations

import statistics
from typing import Sequence

from cascadekit.exercises import Exercise
from cascadekit.exercises.answers import Case, Function, Number
from cascadekit.world import generate_problem


def _length_ratio() -> float:
    def mean_length(style: str) -> float:
        return statistics.mean(len(generate_problem(op=10, context="A", seed=s, style=style).problem_text)
                               for s in range(20))
    return mean_length("full") / mean_length("minimal")


def _chains() -> list[Case]:
    return [([(n.name, list(n.parents)) for n in generate_problem(op=op, context=c, seed=s, style="compact").nodes],)
            for op in range(2, 9) for c in "AB" for s in range(2)]


def longest_chain(nodes: Sequence[tuple[str, Sequence[str]]]) -> int:
    """Nodes on the longest dependency chain ending at the last (queried) node."""
    parents = dict((name, list(ps)) for name, ps in nodes)
    depth: dict[str, int] = {}
    for name, _ in nodes:  # solution order: parents come first
        depth[name] = 1 + max((depth.get(p, 1) for p in parents[name]), default=0)
    return depth[nodes[-1][0]]


EXERCISES = [
    Exercise("01.1", "How much shorter is the minimal rendering?",
             "Generate `generate_problem(op=10, context=\"A\", seed=s, style=...)` for seeds 0-19 in the `full` and "
             "the `minimal` style. How many times longer, on average, is the full `problem_text` than the minimal one "
             "(mean length of full / mean length of minimal, in characters)? Within 10%.",
             Number(_length_ratio, rel=0.1), "use `statistics.mean(len(p.problem_text) for p in ...)` for each style, "
             "then divide; the same 20 seeds for both.", "answer = None  # a number"),
    Exercise("01.2", "The longest chain of a problem",
             "Write `longest_chain(nodes)`: `nodes` is a problem's gold graph as a list of `(name, parents)` pairs "
             "in solution order (`[(n.name, list(n.parents)) for n in problem.nodes]`), the query last. Return the "
             "number of nodes on the longest dependency chain that ends at the query (a leaf alone counts 1).",
             Function(_chains, longest_chain, describe_case=lambda case: f"a graph of {len(case[0])} nodes"),
             "walk the nodes in order and keep, per name, 1 + the largest depth among its parents (0 when it has "
             "none); a parent always comes before its children.",
             "def longest_chain(nodes):\n    ...\n\nanswer = longest_chain", homework=True),
]
