"""Math: the DAG word problem, answered with ``\\boxed{n}`` after the think block.

Stands in for AIME 2025. The prompt is the world's problem exactly as Part I
renders it (``minimal`` style, :mod:`cascadekit.domains.dag`), with no added
instruction: "Sharks equals 3 more than the sum of tigers and eagles. Tigers
equals 1. Eagles equals 10. How many sharks?". The thinking is the gold solution
steps (``sharks = tigers + eagles + 3 = 1 + 10 + 3 = 14.``); both modes answer
``\\boxed{n}`` alone, so the box format is what SFT teaches, not what the prompt asks.
Judged like the paper's Math RL reward: the final boxed answer after ``</think>``
(:func:`cascadekit.verify.boxed.verify_boxed`).

Departures from the paper: toy arithmetic over a small DAG instead of
competition problems, and a strict integer comparison instead of the AceMath
verifier's symbolic equivalence (every answer here is an integer).
"""
from __future__ import annotations

import random
from typing import Any, Sequence

from cascadekit.domains.task import Judgement, Task
from cascadekit.domains.code import gold_field
from cascadekit.domains.dag import draw_dag
from cascadekit.verify.boxed import verify_boxed


def _is_int(value: Any) -> bool:
    return type(value) is int


def make_task(rng: random.Random, ops: Sequence[int]) -> Task:
    """The DAG problem with an op count drawn from ``ops``."""
    dag = draw_dag(rng, ops)
    boxed = f"\\boxed{{{dag.answer}}}"
    return Task(
        domain="math",
        prompt=f"{dag.problem.problem_text} {dag.problem.question}",
        thinking=" ".join(dag.steps()),
        answer=boxed,
        no_think_answer=boxed,
        gold={"answer": dag.answer, "op": dag.graph.op},
    )


def check_gold(gold: Any) -> None:
    """Raise :class:`ValueError` naming the field when ``gold`` is no math gold record."""
    gold_field(gold, "math", "answer", _is_int, "an integer")
    gold_field(gold, "math", "op", _is_int, "an integer")


def judge(gold: dict[str, Any], completion: str) -> Judgement:
    """1 for the right boxed integer after the think block, else 0; never raises."""
    try:
        check_gold(gold)
    except ValueError as err:
        return Judgement(0.0, str(err))
    verdict = verify_boxed(completion, gold["answer"])
    return Judgement(float(verdict.correct), verdict.reason)
