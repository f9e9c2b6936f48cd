"""Verifiable instructions (IFEval-style) for the IF-RL stage.

Each constraint is a small dataclass: ``describe()`` is the sentence appended to a
prompt, ``check(text)`` says whether a response obeys it. Like IFEval, a response
is judged *strictly* (as written) and *loosely* (it also passes if some variant
passes: first line removed, last line removed, both, each with markdown ``*``
stripped), which forgives a "Sure, here it is:" preamble or a sign-off.

Only the answer counts: a think block (and a trailing ``<|im_end|>``) is removed
first. The paper runs IF-RL on the unified model in non-thinking mode only.

Departures from IFEval: words are ``\\w+`` runs rather than NLTK tokens, and the
kit keeps thirteen constraint types of IFEval's twenty-five, those a small model
can learn and a reader can check by eye.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import random
import re
from typing import Callable, ClassVar

from cascadekit.verify.boxed import answer_part

__all__ = [
    "Constraint", "MinWords", "MaxWords", "Lowercase", "Uppercase", "IncludeWords",
    "ForbiddenWords", "StartsWith", "EndsWith", "BulletCount", "JsonFormat", "SectionCount",
    "NoCommas", "Quoted", "ConstraintResult", "Verdict", "verify_instructions",
    "loose_variants", "constraints_to_json", "constraints_from_json", "sample_constraints",
    "CONSTRAINT_TYPES",
]

_WORD = re.compile(r"\w+")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


class Constraint(abc.ABC):
    """Base of all constraints. ``kind`` names the type in JSON."""

    kind: ClassVar[str]

    @abc.abstractmethod
    def check(self, text: str) -> bool:
        """Whether ``text`` obeys the constraint."""

    @abc.abstractmethod
    def describe(self) -> str:
        """The instruction as a sentence for the prompt."""


@dataclasses.dataclass(frozen=True)
class MinWords(Constraint):
    n: int
    kind: ClassVar[str] = "min_words"

    def check(self, text: str) -> bool:
        return len(_words(text)) >= self.n

    def describe(self) -> str:
        return f"Answer with at least {self.n} words."


@dataclasses.dataclass(frozen=True)
class MaxWords(Constraint):
    n: int
    kind: ClassVar[str] = "max_words"

    def check(self, text: str) -> bool:
        return len(_words(text)) <= self.n

    def describe(self) -> str:
        return f"Answer with at most {self.n} words."


@dataclasses.dataclass(frozen=True)
class Lowercase(Constraint):
    kind: ClassVar[str] = "lowercase"

    def check(self, text: str) -> bool:
        return text == text.lower()

    def describe(self) -> str:
        return "Your entire response must be in lowercase letters; no capital letters are allowed."


@dataclasses.dataclass(frozen=True)
class Uppercase(Constraint):
    kind: ClassVar[str] = "uppercase"

    def check(self, text: str) -> bool:
        return text == text.upper()

    def describe(self) -> str:
        return "Your entire response must be in English, capital letters only."


@dataclasses.dataclass(frozen=True)
class IncludeWords(Constraint):
    words: tuple[str, ...]
    kind: ClassVar[str] = "include_words"

    def check(self, text: str) -> bool:
        present = set(_words(text))
        return all(w.lower() in present for w in self.words)

    def describe(self) -> str:
        return f"Include the keywords {', '.join(repr(w) for w in self.words)} in the response."


@dataclasses.dataclass(frozen=True)
class ForbiddenWords(Constraint):
    words: tuple[str, ...]
    kind: ClassVar[str] = "forbidden_words"

    def check(self, text: str) -> bool:
        present = set(_words(text))
        return not any(w.lower() in present for w in self.words)

    def describe(self) -> str:
        return f"Do not include the keywords {', '.join(repr(w) for w in self.words)} in the response."


@dataclasses.dataclass(frozen=True)
class StartsWith(Constraint):
    phrase: str
    kind: ClassVar[str] = "starts_with"

    def check(self, text: str) -> bool:
        return text.strip().lower().startswith(self.phrase.strip().lower())

    def describe(self) -> str:
        return f"Start your response with the exact phrase {self.phrase!r}."


@dataclasses.dataclass(frozen=True)
class EndsWith(Constraint):
    phrase: str
    kind: ClassVar[str] = "ends_with"

    def check(self, text: str) -> bool:
        return text.strip().lower().endswith(self.phrase.strip().lower())

    def describe(self) -> str:
        return (f"Finish your response with the exact phrase {self.phrase!r}. "
                "No other words should follow it.")


# ``[^\S\n]*``: spaces within the line; ``\s*`` would span newlines and make a
# million blank lines quadratic.
_BULLET = re.compile(r"^[^\S\n]*(\*[^*]|-)", re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class BulletCount(Constraint):
    n: int
    kind: ClassVar[str] = "bullet_count"

    def check(self, text: str) -> bool:
        return len(_BULLET.findall(text)) == self.n

    def describe(self) -> str:
        return (f"Your answer must contain exactly {self.n} bullet points. "
                "Use markdown bullet points such as:\n* This is point 1.\n* This is point 2")


@dataclasses.dataclass(frozen=True)
class JsonFormat(Constraint):
    kind: ClassVar[str] = "json_format"

    def check(self, text: str) -> bool:
        body = text.strip()
        body = re.sub(r"^```(?:json|JSON|Json)?\s*", "", body)
        if body.endswith("```"):  # not re.sub(r"\s*```$"): quadratic on long runs of spaces
            body = body[:-3].rstrip()
        try:
            json.loads(body)
        except (ValueError, RecursionError):  # RecursionError: absurd nesting
            return False
        return True

    def describe(self) -> str:
        return "Entire output should be wrapped in JSON format. You can use markdown ticks such as ```."


@dataclasses.dataclass(frozen=True)
class SectionCount(Constraint):
    n: int
    marker: str = "Section"
    kind: ClassVar[str] = "section_count"

    def check(self, text: str) -> bool:
        sections = re.split(r"\s?" + re.escape(self.marker) + r"\s?\d+\s?", text)
        return len(sections) - 1 >= self.n

    def describe(self) -> str:
        return (f"Your response must have {self.n} sections. Mark the beginning of each section "
                f"with {self.marker} X, such as:\n{self.marker} 1\n[content of section 1]")


@dataclasses.dataclass(frozen=True)
class NoCommas(Constraint):
    kind: ClassVar[str] = "no_commas"

    def check(self, text: str) -> bool:
        return "," not in text

    def describe(self) -> str:
        return "In your entire response, refrain from the use of any commas."


@dataclasses.dataclass(frozen=True)
class Quoted(Constraint):
    kind: ClassVar[str] = "quoted"

    def check(self, text: str) -> bool:
        body = text.strip()
        return len(body) > 1 and body[0] == '"' and body[-1] == '"'

    def describe(self) -> str:
        return "Wrap your entire response with double quotation marks."


CONSTRAINT_TYPES: dict[str, type[Constraint]] = {
    cls.kind: cls for cls in (MinWords, MaxWords, Lowercase, Uppercase, IncludeWords,
                              ForbiddenWords, StartsWith, EndsWith, BulletCount, JsonFormat,
                              SectionCount, NoCommas, Quoted)
}


# --- judging ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ConstraintResult:
    kind: str
    description: str
    strict: bool
    loose: bool


@dataclasses.dataclass(frozen=True)
class Verdict:
    strict_all: bool
    loose_all: bool
    per_constraint: list[ConstraintResult]
    reason: str

    @property
    def strict_fraction(self) -> float:
        """Share of constraints met strictly (1.0 when there are none)."""
        if not self.per_constraint:
            return 1.0
        return sum(r.strict for r in self.per_constraint) / len(self.per_constraint)


def loose_variants(text: str) -> list[str]:
    """IFEval's loose variants: first/last line removed, markdown ``*`` stripped."""
    lines = text.split("\n")
    cut = [text, "\n".join(lines[1:]).strip(), "\n".join(lines[:-1]).strip(),
           "\n".join(lines[1:-1]).strip()]
    variants = cut + [v.replace("*", "") for v in cut]
    return [text] + [v for v in variants[1:] if v.strip()]  # the text itself: strict => loose


def _safe_check(constraint: Constraint, text: str) -> bool:
    try:
        return bool(constraint.check(text))
    except Exception:  # a verifier never raises on model text
        return False


def _safe_describe(constraint: Constraint) -> str:
    try:
        return constraint.describe()
    except Exception:  # a malformed constraint (from a dataset) is a failed check, not a crash
        return f"malformed {type(constraint).__name__} constraint"


#: Responses longer than this are not judged (every constraint fails): IF-RL completions are
#: bounded by ``max_new_tokens`` far below it, and judging eight loose variants of a huge
#: text would cost seconds per response.
MAX_RESPONSE_CHARS = 1_000_000


def verify_instructions(text: str, constraints: list[Constraint]) -> Verdict:
    """Judge a response against every constraint, strictly and loosely; never raises."""
    if not isinstance(text, str):
        return Verdict(False, False, [], "not a string")
    if len(text) > MAX_RESPONSE_CHARS:
        results = [ConstraintResult(c.kind, _safe_describe(c), False, False) for c in constraints]
        return Verdict(False, False, results, f"response longer than {MAX_RESPONSE_CHARS:,} characters: not judged")
    if "<think>" in text and "</think>" not in text:
        results = [ConstraintResult(c.kind, _safe_describe(c), False, False) for c in constraints]
        return Verdict(False, False, results, "think block never closed: no answer")
    answer = answer_part(text).split("<|im_end|>", 1)[0].strip()
    variants = loose_variants(answer)
    results = [
        ConstraintResult(c.kind, _safe_describe(c), _safe_check(c, answer),
                         any(_safe_check(c, v) for v in variants))
        for c in constraints
    ]
    failed = [r.kind for r in results if not r.strict]
    loose_failed = [r.kind for r in results if not r.loose]
    if not failed:
        reason = "all constraints met"
    elif not loose_failed:
        reason = f"met only loosely: {', '.join(failed)}"
    else:
        reason = f"failed: {', '.join(loose_failed)}"
    return Verdict(not failed, not loose_failed, results, reason)


# --- JSON and sampling -----------------------------------------------------------------

def constraints_to_json(constraints: list[Constraint]) -> str:
    """``[{"kind": ..., **fields}, ...]`` as a JSON string."""
    return json.dumps([{"kind": c.kind, **dataclasses.asdict(c)} for c in constraints])


def constraints_from_json(data: str) -> list[Constraint]:
    """Inverse of :func:`constraints_to_json`; raises ValueError on unknown kinds."""
    out = []
    for item in json.loads(data):
        fields = dict(item)
        cls = CONSTRAINT_TYPES.get(fields.pop("kind", None))
        if cls is None:
            raise ValueError(f"unknown constraint kind in {item!r}")
        out.append(cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}))
    return out


_VOCAB = ("river", "garden", "lantern", "orbit", "harvest", "copper", "signal", "meadow",
          "puzzle", "winter", "compass", "ladder", "festival", "engine", "whisper", "anchor")
_OPENERS = ("My answer is", "Here is", "In short", "Dear reader")
_CLOSERS = ("Is there anything else I can help with?", "Any other questions?", "That is all.")

_FACTORIES: dict[str, Callable[[random.Random], Constraint]] = {
    "min_words": lambda r: MinWords(r.choice((20, 40, 80, 120))),
    "max_words": lambda r: MaxWords(r.choice((30, 50, 100, 200))),
    "lowercase": lambda r: Lowercase(),
    "uppercase": lambda r: Uppercase(),
    "include_words": lambda r: IncludeWords(tuple(r.sample(_VOCAB[:8], r.randint(1, 2)))),
    "forbidden_words": lambda r: ForbiddenWords(tuple(r.sample(_VOCAB[8:], r.randint(1, 2)))),
    "starts_with": lambda r: StartsWith(r.choice(_OPENERS)),
    "ends_with": lambda r: EndsWith(r.choice(_CLOSERS)),
    "bullet_count": lambda r: BulletCount(r.randint(2, 5)),
    "json_format": lambda r: JsonFormat(),
    "section_count": lambda r: SectionCount(r.randint(2, 4), r.choice(("Section", "SECTION"))),
    "no_commas": lambda r: NoCommas(),
    "quoted": lambda r: Quoted(),
}

# Pairs no response can satisfy together (or only absurdly).
_CONFLICTS = {
    frozenset(p) for p in [
        ("lowercase", "uppercase"), ("min_words", "max_words"), ("json_format", "bullet_count"),
        ("json_format", "section_count"), ("json_format", "starts_with"),
        ("json_format", "ends_with"), ("json_format", "quoted"), ("json_format", "no_commas"),
        ("quoted", "starts_with"), ("quoted", "ends_with"), ("uppercase", "starts_with"),
        ("uppercase", "ends_with"), ("lowercase", "starts_with"), ("lowercase", "ends_with"),
        ("lowercase", "section_count"), ("uppercase", "section_count"),
    ]
}


def sample_constraints(seed: int | random.Random, k: int = 2) -> list[Constraint]:
    """``k`` compatible constraints of different kinds, reproducible from ``seed``."""
    rng = seed if isinstance(seed, random.Random) else random.Random(seed)
    kinds: list[str] = []
    for kind in rng.sample(sorted(_FACTORIES), len(_FACTORIES)):
        if len(kinds) == k:
            break
        if all(frozenset((kind, other)) not in _CONFLICTS for other in kinds):
            kinds.append(kind)
    return [_FACTORIES[kind](rng) for kind in kinds]
