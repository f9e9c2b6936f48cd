"""Every ``paper`` problem can be solved from its own text: its graph, values and op count rebuilt from the sentences.

The reader (:func:`cascadekit.verify.paper_stats.rebuild`) knows nothing of the
generator: it parses the statements and the question, takes a total's parents
to be the quantities of its place the text mentions, and solves a reverse
problem's unknown from the given quantity's value. A problem whose gold graph it
cannot rebuild asks for something its text does not say.
"""

from __future__ import annotations

import random

import pytest

from cascadekit.verify.official_format import fixture_problems
from cascadekit.verify.paper_stats import asked, features, rebuild
from cascadekit.world import CONTEXTS, Problem
from cascadekit.world.paper import MODES, asked_node, generate


def rebuilt_differences(problem: Problem) -> list[str]:
    """How the graph rebuilt from the problem's text differs from its gold graph (empty when it does not)."""
    graph = rebuild(problem.problem_text, problem.question)
    wrong = []
    for node in problem.nodes:
        got = graph.get(node.name)
        if got is None:
            wrong.append(f"{node.name}: not in the text")
        elif got.parents != frozenset(node.parents) or got.value != node.value:
            wrong.append(f"{node.name}: parents {sorted(got.parents)} value {got.value}, gold {sorted(node.parents)} "
                         f"{node.value}")
    if asked(problem.question) != problem.nodes[asked_node(problem)].name:
        wrong.append(f"the question asks for {asked(problem.question)!r}")
    if not wrong and sum(graph[node.name].cost for node in problem.nodes) != problem.op:
        wrong.append(f"op {sum(graph[node.name].cost for node in problem.nodes)} read, {problem.op} stated")
    return wrong


@pytest.mark.parametrize("mode", MODES)
def test_every_problem_is_rebuilt_from_its_text(mode: str) -> None:
    contexts = sorted(CONTEXTS)
    for op in range(2, 21):
        for seed in range(12):
            problem = generate(op, contexts[seed % 3], random.Random(7919 * seed + op), seed, mode)
            assert not rebuilt_differences(problem), (rebuilt_differences(problem), problem.problem_text,
                                                      problem.solution_text)
            assert not features(op, problem.problem_text, problem.question, problem.solution_text).missing_statement


def test_a_reverse_problem_given_an_instance_quantity_states_its_relation_and_value() -> None:
    contexts = sorted(CONTEXTS)
    given_instance = [p for op in range(2, 8) for seed in range(60)
                      for p in [generate(op, contexts[seed % 3], random.Random(seed * 31 + op), seed, "reverse")]
                      if not p.nodes[-1].name.startswith("total number of")]
    assert len(given_instance) >= 10
    for problem in given_instance:
        sentences = [s for s in problem.problem_text.split(". ")
                     if s.lower().startswith(f"the number of {problem.nodes[-1].name}")]
        assert len(sentences) == 2, problem.problem_text  # its relation and its value


def test_the_reader_sees_a_problem_its_text_does_not_solve() -> None:
    """The official bug's lost sums, and a given quantity's relation sentence taken out, are both caught."""
    contexts = sorted(CONTEXTS)
    compat = [generate(op, contexts[seed % 3], random.Random(seed), seed, "reverse", official_bug_compat=True)
              for op in range(10, 21) for seed in range(30)]
    lost = [p for p in compat if features(p.op, p.problem_text, p.question, p.solution_text).missing_statement]
    assert lost and all(rebuilt_differences(p) for p in lost)
    problem = next(p for seed in range(400) for op in (3, 4, 5)
                   for p in [generate(op, "A", random.Random(seed), seed, "reverse")]
                   if not p.nodes[-1].name.startswith("total number of"))
    relation = next(s for s in problem.problem_text.split(". ")
                    if s.lower().startswith(f"the number of {problem.nodes[-1].name} equals") and "the number" in s[5:])
    cut = problem.problem_text.replace(relation, "").replace("  ", " ")
    stripped = Problem.from_dict({**problem.to_dict(), "problem_text": cut})
    assert rebuilt_differences(stripped)
    assert features(problem.op, cut, problem.question, problem.solution_text).missing_statement


def test_the_reader_reads_the_hand_written_problems_in_the_papers_format() -> None:
    for problem, _ in fixture_problems():
        assert not rebuilt_differences(problem), problem.problem_text
