"""Instruction following: a short writing request with IFEval-style constraints.

Stands in for IFEval. Constraints come from :func:`cascadekit.verify.instructions.sample_constraints`;
the gold response is built to satisfy them and checked with the same verifier
(tasks whose constructed response fails are dropped, so every gold response is
correct by the judge that scores the model). Long ``min_words`` constraints are
left out: a toy model's sequences are short.
"""
from __future__ import annotations

import random
from typing import Any, Sequence

from cascadekit.domains import Judgement, Task
from cascadekit.verify.instructions import (
    Constraint, constraints_from_json, constraints_to_json, sample_constraints, verify_instructions,
)

TOPICS = ("harbor", "bakery", "forest", "library", "mountain", "market", "bridge", "island")
_SENTENCES = ("the {t} is quiet in the morning", "people visit the {t} every day",
              "the {t} looks calm and bright", "a small path leads to the {t}",
              "the old {t} has a long story", "birds fly over the {t}")
MAX_MIN_WORDS = 40


def _body(topic: str, constraints: list[Constraint], rng: random.Random) -> list[str]:
    """Plain sentences about the topic, long enough for every length and layout constraint."""
    kinds = {c.kind: c for c in constraints}
    sentences = [s.format(t=topic) for s in rng.sample(_SENTENCES, 2)]
    if "include_words" in kinds:
        sentences.append("it brings to mind " + " and ".join(kinds["include_words"].words))
    need = max([getattr(kinds.get(k), "n", 0) for k in ("bullet_count", "section_count")] + [0])
    min_words = getattr(kinds.get("min_words"), "n", 0)
    pool = [s.format(t=topic) for s in _SENTENCES]
    while len(sentences) < need or sum(len(s.split()) for s in sentences) < min_words + 5:
        sentences.append(pool[len(sentences) % len(pool)] + " again")
    return [s[0].upper() + s[1:] + "." for s in sentences]


def _layout(sentences: list[str], kinds: dict[str, Constraint]) -> str:
    if "bullet_count" in kinds:
        n = kinds["bullet_count"].n
        return "\n".join(f"* {' '.join(sentences[i::n])}" for i in range(n))
    if "section_count" in kinds:
        c = kinds["section_count"]
        return "\n\n".join(f"{c.marker} {i + 1}\n{' '.join(sentences[i::c.n])}" for i in range(c.n))
    if "json_format" in kinds:
        return '{"answer": "' + " ".join(sentences) + '"}'
    return " ".join(sentences)


def respond(topic: str, constraints: list[Constraint], rng: random.Random) -> str:
    """A response about ``topic`` built to meet ``constraints`` (checked by the caller)."""
    kinds = {c.kind: c for c in constraints}
    text = _layout(_body(topic, constraints, rng), kinds)
    if "starts_with" in kinds:
        text = f"{kinds['starts_with'].phrase} {text}"
    if "ends_with" in kinds:
        text = f"{text} {kinds['ends_with'].phrase}"
    if "quoted" in kinds:
        text = f'"{text}"'
    if "lowercase" in kinds:
        text = text.lower()
    if "uppercase" in kinds:
        text = text.upper()
    return text


def make_task(rng: random.Random, ops: Sequence[int] = ()) -> Task | None:
    """A request with one or two constraints and a response that meets them (None if it cannot)."""
    topic = rng.choice(TOPICS)
    constraints = sample_constraints(rng, k=rng.randint(1, 2))
    if any(c.kind == "min_words" and c.n > MAX_MIN_WORDS for c in constraints):
        return None
    response = respond(topic, constraints, rng)
    if not verify_instructions(response, constraints).strict_all:
        return None
    rules = " ".join(c.describe() for c in constraints)
    kinds = ", ".join(c.kind.replace("_", " ") for c in constraints)
    return Task(
        domain="instructions",
        prompt=f"Write a few sentences about the {topic}. {rules}",
        thinking=f"The topic is the {topic}. The rules are: {kinds}. I write simple sentences and apply each rule.",
        answer=response,
        gold={"constraints": constraints_to_json(constraints)},
    )


def judge(gold: dict[str, Any], completion: str) -> Judgement:
    """Strict IFEval-style score (all constraints met), with the loose score in the details; never raises."""
    try:
        constraints = constraints_from_json(gold["constraints"])
    except (ValueError, KeyError, TypeError) as err:
        return Judgement(0.0, f"unreadable gold constraints: {err}", {"loose": 0.0})
    verdict = verify_instructions(completion, constraints)
    return Judgement(float(verdict.strict_all), verdict.reason,
                     {"loose": float(verdict.loose_all), "strict_fraction": verdict.strict_fraction})
