"""Instruction following: a DAG question whose answer must take a given form.

Stands in for IFEval. The prompt is the world's DAG problem and question, then
one to three verifiable instructions on the answer's *form* (a profile may ask for
other counts: ``domains.instruction_constraints``), each stated by its
one fixed sentence (:mod:`cascadekit.verify.instructions`): "Sharks equals 3
more than the sum of tigers and eagles. Tigers equals 1. Eagles equals 10. How
many sharks? Answer in lowercase. Use the word 'total'."

The gold response is the base sentence ``The answer is n.`` transformed to meet
every instruction ("the total is 14."), built in a fixed order (word choice,
filler lines, opening and closing phrases, forbidden characters, layout, JSON,
wrapping, case) so the same instruction always changes the answer the same way.
The thinking response is the DAG's gold steps and a note of the rules; the
non-thinking response is the same formatted answer. Every gold response is
checked by the judge that scores the model (a task whose response fails is
dropped).

Scored like IFEval: :attr:`Judgement.score` is the prompt-level *strict*
accuracy (every instruction followed by the answer after the think block);
``details`` holds the *loose* one, each instruction's result, and whether the
answer names the right number (``correct``), reported but not scored, since
IFEval does not check content either. Departures from IFEval: the instructions
shape a one-sentence answer to a question with a known result rather than an
essay on an open topic, and each is one fixed sentence rather than free wording.
"""
from __future__ import annotations

import json
import random
import re
from typing import Any, Sequence

from cascadekit.domains.task import Judgement, Task
from cascadekit.domains.dag import draw_dag
from cascadekit.verify.boxed import answer_part
from cascadekit.verify.instructions import (
    MAX_RESPONSE_CHARS, Constraint, MinWords, constraints_from_json, constraints_to_json, sample_constraints,
    verify_instructions,
)

FILLERS = ("I checked each step.", "I am sure.")  # extra lines and words, in this order
#: How many constraints a prompt carries unless the profile asks otherwise (``domains.instruction_constraints``).
CONSTRAINTS = (1, 3)
#: The most constraints a prompt may ask for.
MAX_CONSTRAINTS = 5
MAX_ANSWER = 10**6  # DAG values stay within 0..1000


def _layout(sentences: list[str], lines: int, kinds: dict[str, Constraint]) -> str:
    """The sentences with the opening and closing phrases, without forbidden characters, in ``lines`` lines."""
    sentences = list(sentences)
    if "starts_with" in kinds:
        sentences[0] = f"{kinds['starts_with'].phrase}! {sentences[0]}"
    if "ends_with" in kinds:
        sentences[-1] = f"{sentences[-1]} {kinds['ends_with'].phrase}"
    if "no_periods" in kinds:
        sentences = [s.replace(".", "") for s in sentences]
    while len(sentences) > lines:  # words past the layout's lines join its first line
        sentences[:2] = [f"{sentences[0]} {sentences[1]}"]
    if "bullet_count" in kinds:
        text = "\n".join(f"* {s}" for s in sentences)
    elif "section_count" in kinds:
        marker = kinds["section_count"].marker
        text = "\n".join(f"{marker} {i}: {s}" for i, s in enumerate(sentences, 1))
    else:
        text = "\n".join(sentences)
    if "json_format" in kinds:
        text = json.dumps({"response": text})
    if "quoted" in kinds:
        text = f'"{text}"'
    if "bracketed" in kinds:
        text = f"[{text}]"
    if "lowercase" in kinds:
        text = text.lower()
    if "uppercase" in kinds:
        text = text.upper()
    return text


def respond(answer: int, constraints: list[Constraint]) -> str:
    """``The answer is {answer}.`` transformed to meet ``constraints`` (checked by the caller).

    The fewest :data:`FILLERS` sentences go before the answer sentence that give
    the lines a layout asks for and the words ``min_words`` asks for; sentences
    beyond the layout's lines join its first line.
    """
    kinds = {c.kind: c for c in constraints}
    word = kinds["include_word"].word if "include_word" in kinds else (
        "result" if "forbidden_word" in kinds else "answer")
    lines = max([getattr(kinds.get(k), "n", 1) for k in ("line_count", "bullet_count", "section_count")])
    min_words = getattr(kinds.get("min_words"), "n", 0)
    for n_fillers in range(len(FILLERS) + 1):
        text = _layout([*FILLERS[:n_fillers], f"The {word} is {answer}."], lines, kinds)
        if n_fillers + 1 >= lines and MinWords(min_words).check(text):
            break
    return text


def make_task(rng: random.Random, ops: Sequence[int], constraints: tuple[int, int] = CONSTRAINTS) -> Task | None:
    """A DAG question with ``constraints`` (least, most) form instructions and a response meeting them (None if it cannot)."""
    lo, hi = constraints
    if not 1 <= lo <= hi <= MAX_CONSTRAINTS:
        raise ValueError(f"constraints per prompt: need 1 <= least <= most <= {MAX_CONSTRAINTS}, got {constraints}")
    dag = draw_dag(rng, ops)
    constraints = sample_constraints(rng, k=rng.randint(lo, hi))
    response = respond(dag.answer, constraints)
    if not verify_instructions(response, constraints).strict_all:
        return None
    rules = " ".join(c.describe() for c in constraints)
    kinds = ", ".join(c.kind.replace("_", " ") for c in constraints)
    return Task(
        domain="instructions",
        prompt=f"{dag.problem.problem_text} {dag.problem.question} {rules}",
        thinking=f"{' '.join(dag.steps())} Rules: {kinds}.",
        answer=response,
        no_think_answer=response,
        gold={"constraints": constraints_to_json(constraints), "answer": dag.answer},
    )


def check_gold(gold: Any) -> None:
    """ValueError naming the domain and the field if ``gold`` is not a well-formed instructions record."""
    if not isinstance(gold, dict):
        raise ValueError(f"instructions gold: must be a dict, got {type(gold).__name__}")
    for field in ("constraints", "answer"):
        if field not in gold:
            raise ValueError(f"instructions gold: field {field!r} is missing")
    try:
        constraints_from_json(gold["constraints"])
    except ValueError as err:
        raise ValueError(f"instructions gold: field 'constraints' has {err}") from None
    answer = gold["answer"]
    if not isinstance(answer, int) or isinstance(answer, bool) or not 0 <= answer <= MAX_ANSWER:
        shown = repr(answer) if isinstance(answer, int) and abs(answer) < 10**12 else type(answer).__name__
        raise ValueError(f"instructions gold: field 'answer' must be an integer from 0 to {MAX_ANSWER}, got {shown}")


def _names_number(completion: str, number: int) -> bool:
    """Whether the answer after the think block contains ``number`` as a whole number."""
    answer = answer_part(completion).split("<|im_end|>", 1)[0]
    return re.search(rf"(?<!\d){number}(?!\d)", answer) is not None


def judge(gold: Any, completion: Any) -> Judgement:
    """IFEval strict score (every instruction met); loose, per-instruction and ``correct`` details; never raises."""
    try:
        check_gold(gold)
    except ValueError as err:
        return Judgement(0.0, str(err), {"loose": 0.0, "constraints": [], "correct": False})
    constraints = constraints_from_json(gold["constraints"])
    verdict = verify_instructions(completion, constraints)
    correct = (isinstance(completion, str) and len(completion) <= MAX_RESPONSE_CHARS
               and _names_number(completion, gold["answer"]))
    return Judgement(float(verdict.strict_all), verdict.reason, {
        "loose": float(verdict.loose_all),
        "constraints": [{"kind": r.kind, "strict": r.strict, "loose": r.loose} for r in verdict.per_constraint],
        "strict_fraction": verdict.strict_fraction,
        "correct": correct,
    })
