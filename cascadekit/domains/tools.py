"""Tool calling: the DAG's calculation done through calculator calls, one call per assistant turn.

Stands in for BFCL v3. The prompt is the DAG problem; the one tool offered is a
``calculator`` (its JSON schema in the system turn, as the chat template lays
tools out). The gold trajectory makes one call per computed node in solution
order, each expression that node's right-hand side over the numbers found so far
(``{"expression": "1 + 10 + 3"}``), reads the result from the tool turn, and
ends with ``\\boxed{n}``. The thinking response plans the calls symbolically in
its first turn (``sharks = tigers + eagles + 3.``).

Judged by execution (:func:`cascadekit.verify.tools.verify_trajectory`): every
call in the conversation is run again with the safe calculator, and it scores 1
iff all calls are well-formed calculator calls that evaluate and the boxed
answer after the last call is right; whether the calls' results are the gold
step values is reported, not scored.

Departures from the paper: BFCL v3 offers many tools and has single-turn
(simple, multiple, parallel, irrelevance) and multi-turn categories, judged by
AST match or by executing against a stateful API. The toy has one calculator
tool and dependent multi-turn calls: each call needs the numbers the earlier
calls returned, so the model must read its tool responses.
"""
from __future__ import annotations

import json
import random
from typing import Any, Sequence

from cascadekit.domains.task import Judgement, Task
from cascadekit.domains.dag import draw_dag
from cascadekit.verify.tools import CALCULATOR, respond, transcript, verify_trajectory

__all__ = ["CALCULATOR_TOOL", "SUFFIX", "make_task", "gold_transcript", "judge", "check_gold", "respond",
           "transcript"]

CALCULATOR_TOOL = {"type": "function", "function": {
    "name": CALCULATOR, "description": "Evaluate an arithmetic expression",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                   "required": ["expression"]}}}
SUFFIX = " Use the calculator."


def make_task(rng: random.Random, ops: Sequence[int]) -> Task:
    """A DAG problem solved by one calculator call per computed node, then the boxed answer."""
    dag = draw_dag(rng, ops)
    values = dag.values()
    numbers = [str(v) for v in values]
    answer = f"\\boxed{{{dag.answer}}}"
    return Task(
        domain="tools",
        prompt=f"{dag.problem.problem_text} {dag.problem.question}{SUFFIX}",
        thinking=" ".join(f"{dag.names[i]} = {dag.expression(i, dag.names)}." for i in dag.computed),
        answer=answer,
        no_think_answer=answer,
        gold={"answer": dag.answer, "results": [values[i] for i in dag.computed]},
        tools=[CALCULATOR_TOOL],
        tool_calls=[{"name": CALCULATOR, "arguments": {"expression": dag.expression(i, numbers)}}
                    for i in dag.computed],
        tool_results=[numbers[i] for i in dag.computed],
    )


def gold_transcript(task: Task, think: bool) -> str:
    """The gold conversation as :func:`transcript` of the completions the evaluation loop would collect.

    Completions follow the generation prompt: in ``/think`` mode each opens a
    think block (the plan in the first, empty after), in ``/no_think`` mode the
    empty block is pre-filled so a completion is only the call or the answer.
    """
    turns = [f"<tool_call>\n{json.dumps(call)}\n</tool_call>" for call in task.tool_calls or []]
    turns.append(task.response(think))
    if think:
        turns = [f"<think>\n{task.thinking if k == 0 else ''}\n</think>\n\n{turn}" for k, turn in enumerate(turns)]
    return transcript(turns, [[result] for result in task.tool_results or []])


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_gold(gold: Any) -> None:
    """Raise ``ValueError`` naming the field when ``gold`` is not a tools gold record."""
    if not isinstance(gold, dict):
        raise ValueError(f"tools gold: expected a dict, got {type(gold).__name__}")
    answer, results = gold.get("answer"), gold.get("results")
    if not _is_int(answer):
        raise ValueError(f"tools gold: field 'answer' must be an integer, got {type(answer).__name__}")
    if not isinstance(results, list) or not results or not all(_is_int(r) for r in results):
        raise ValueError("tools gold: field 'results' must be a non-empty list of integers")
    if results[-1] != answer:
        raise ValueError("tools gold: field 'results' must end with the answer")


def judge(gold: dict[str, Any], completion: str) -> Judgement:
    """Score a tool conversation (a :func:`transcript`): 1 for well-formed calls and the right answer.

    Never raises, whatever ``gold`` and ``completion`` are; details count the calls
    and malformed calls and say whether the answer and the step results were right.
    """
    try:
        check_gold(gold)
    except ValueError as error:
        return Judgement(0.0, str(error))
    verdict = verify_trajectory(completion, gold["answer"], gold["results"])
    return Judgement(float(verdict.correct), verdict.reason, {
        "calls": verdict.calls, "malformed": verdict.malformed, "answer_correct": verdict.answer_correct,
        "results_match": verdict.results_match})
