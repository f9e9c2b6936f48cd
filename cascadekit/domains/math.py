"""Math: DAG word problems answered with ``\\boxed{n}`` after the think block.

Stands in for AIME 2025. The thinking response reasons with the DAG's gold
solution steps, then boxes the answer; the non-thinking response is only the
boxed answer. Judged like the paper's Math RL reward: the final boxed integer
after ``</think>`` (:func:`cascadekit.verify.boxed.verify_boxed`).
"""
from __future__ import annotations

import random
from typing import Any, Sequence

from cascadekit.domains import Judgement, Task
from cascadekit.verify.boxed import verify_boxed
from cascadekit.world import generate_problem

CONTEXTS = ("A", "B", "C")


def make_task(rng: random.Random, ops: Sequence[int]) -> Task:
    """A compact DAG problem with an op count drawn from ``ops``."""
    problem = generate_problem(rng.choice(list(ops)), rng.choice(CONTEXTS), rng.randrange(2**31), "compact")
    return Task(
        domain="math",
        prompt=f"{problem.problem_text} {problem.question} Put the final answer in \\boxed{{}}.",
        thinking=problem.solution_text,
        answer=f"The answer is \\boxed{{{problem.answer}}}.",
        no_think_answer=f"\\boxed{{{problem.answer}}}",
        gold={"answer": problem.answer, "op": problem.op},
    )


def judge(gold: dict[str, Any], completion: str) -> Judgement:
    """1 for the right boxed integer after the think block, else 0; never raises."""
    verdict = verify_boxed(completion, gold["answer"])
    return Judgement(float(verdict.correct), verdict.reason)
