"""General chat: questions about a small generated world, judged by a rule-based oracle.

Stands in for ArenaHard. The paper judges general answers with a strong LLM
and trains a reward model on human-preference pairs; the kit has neither, so a
rule-based oracle plays both parts. It prefers answers that are

* correct: the gold value is named and no other candidate value is (no hedging),
* concise: every word past a short reference length costs a little,
* non-repetitive: repeated word trigrams cost a lot,

which is exactly the behaviour the paper says RLHF buys (less verbosity and
repetition). :func:`oracle_score` is the judge; :func:`preference_pair` labels
the chosen/rejected pairs the reward-model chapter trains on.
"""
from __future__ import annotations

import random
import re
from typing import Any, Sequence

from cascadekit.domains import Judgement, Task
from cascadekit.verify.boxed import answer_part

PEOPLE = ("Mira", "Oren", "Tavi", "Lune", "Bram", "Iska", "Pell", "Rhea", "Soren", "Vala", "Nico", "Edda")
ATTRIBUTES = {
    # attribute: (statement template, question template, values)
    "city": ("{p} lives in {v}.", "Where does {p} live?",
             ("Tarsk", "Vell", "Quorin", "Amble", "Dunmere", "Holt", "Kesh", "Oldry")),
    "pet": ("{p} keeps a {v}.", "What animal does {p} keep?",
            ("heron", "lynx", "otter", "gecko", "raven", "badger", "moth", "newt")),
    "job": ("{p} works as a {v}.", "What is {p}'s job?",
            ("baker", "weaver", "pilot", "miner", "scribe", "tailor", "smith", "diver")),
    "color": ("{p} likes the color {v}.", "Which color does {p} like?",
              ("amber", "teal", "crimson", "olive", "violet", "ochre", "silver", "indigo")),
}
ANSWERS = {
    "city": "{p} lives in {v}.", "pet": "{p} keeps a {v}.",
    "job": "{p} works as a {v}.", "color": "{p} likes {v}.",
}
CONCISE_WORDS = 8  # answers up to this many words pay no length cost
_WORD = re.compile(r"[A-Za-z']+")


def make_task(rng: random.Random, ops: Sequence[int] = ()) -> Task:
    """Facts about two or three people, then one question about one of them."""
    people = rng.sample(PEOPLE, rng.randint(2, 3))
    attrs = rng.sample(sorted(ATTRIBUTES), 2)
    facts, values = [], {}
    for person in people:
        for attr in attrs:
            value = rng.choice(ATTRIBUTES[attr][2])
            values[person, attr] = value
            facts.append(ATTRIBUTES[attr][0].format(p=person, v=value))
    rng.shuffle(facts)
    person, attr = rng.choice(people), rng.choice(attrs)
    gold = values[person, attr]
    distractors = sorted({v for (p, a), v in values.items() if a == attr and v != gold})
    statement = ATTRIBUTES[attr][0].format(p=person, v=gold)
    thinking = (f"The question asks about {person}. Among the facts, the one about {person} and "
                f"this is: {statement} So the answer is {gold}.")
    return Task(
        domain="general",
        prompt=" ".join(facts) + " " + ATTRIBUTES[attr][1].format(p=person),
        thinking=thinking,
        answer=ANSWERS[attr].format(p=person, v=gold),
        gold={"answer": gold, "distractors": distractors},
    )


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def repetition(words: list[str]) -> float:
    """Share of word trigrams that repeat an earlier one (0 for none)."""
    grams = [tuple(words[i:i + 3]) for i in range(len(words) - 2)]
    return 0.0 if not grams else 1 - len(set(grams)) / len(grams)


def oracle_score(prompt_record: dict[str, Any], answer: str) -> float:
    """The oracle's score in [0, 1] of an assistant answer to a general record (its visible part only).

    0 when the gold value is missing or another candidate value is named;
    otherwise 1, less up to 0.5 for length past :data:`CONCISE_WORDS` words and up
    to 0.5 for repeated trigrams.
    """
    if not isinstance(answer, str):
        return 0.0
    gold = prompt_record["gold"]
    words = _words(answer_part(answer).split("<|im_end|>", 1)[0])
    present = set(words)
    if gold["answer"].lower() not in present or any(d.lower() in present for d in gold["distractors"]):
        return 0.0
    verbosity = min(1.0, max(0, len(words) - CONCISE_WORDS) / (4 * CONCISE_WORDS))
    return (1 - 0.5 * verbosity) * (1 - 0.5 * min(1.0, 2 * repetition(words)))


def preference_pair(prompt_record: dict[str, Any], answer_a: str, answer_b: str) -> tuple[str, str] | None:
    """``(chosen, rejected)`` by the oracle, or None on a tie (a tie teaches a reward model nothing)."""
    a, b = oracle_score(prompt_record, answer_a), oracle_score(prompt_record, answer_b)
    if a == b:
        return None
    return (answer_a, answer_b) if a > b else (answer_b, answer_a)


def judge(gold: dict[str, Any], completion: str) -> Judgement:
    """The oracle as a verifier; never raises."""
    score = oracle_score({"gold": gold}, completion)
    if score == 0.0:
        reason = "wrong, missing or hedged answer"
    elif score < 1.0:
        reason = "correct but verbose or repetitive"
    else:
        reason = "correct and concise"
    return Judgement(score, reason)
