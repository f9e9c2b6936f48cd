"""Verifiable instructions (IFEval-style) for the instructions domain and the IF-RL stage.

Each constraint is a small dataclass: ``describe()`` is the one fixed sentence a
prompt states it with, ``check(text)`` says whether a response obeys it. Like
IFEval, a response is judged *strictly* (as written) and *loosely* (it also
passes if some variant passes: first line removed, last line removed, both, each
with markdown ``*`` stripped), which forgives a "Sure, here it is:" preamble or a
sign-off; and, as in IFEval, an empty response follows no instruction.

Only the answer counts: a think block (and a trailing ``<|im_end|>``) is removed
first. The paper runs IF-RL on the unified model in non-thinking mode only.

Departures from IFEval: words are ``\\w+`` runs rather than NLTK tokens; every
instruction is one short fixed sentence ("Answer in lowercase.") instead of
IFEval's varied wordings; and the catalogue keeps sixteen kinds that shape a
one-line answer (case, wrapping, layout in lines, bullets or sections, opening
and closing phrases, forbidden characters, JSON, word-count bounds, a word to
use or avoid), with small parameters, where IFEval has twenty-five kinds, many
of which need essays (paragraph counts, hundreds of words, postscripts,
placeholders) that a ~1M-parameter model never writes.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import random
import re
from typing import Any, Callable, ClassVar

from cascadekit.verify.boxed import answer_part

__all__ = [
    "Constraint", "Lowercase", "Uppercase", "Quoted", "Bracketed", "LineCount", "BulletCount",
    "SectionCount", "StartsWith", "EndsWith", "NoCommas", "NoPeriods", "JsonFormat", "MinWords",
    "MaxWords", "IncludeWord", "ForbiddenWord", "CONSTRAINT_TYPES", "ConstraintResult", "Verdict",
    "verify_instructions", "loose_variants", "constraints_to_json", "constraints_from_json",
    "sample_constraints", "compatible", "OPENERS", "CLOSERS", "INCLUDE_WORDS", "FORBIDDEN_WORDS",
    "MAX_RESPONSE_CHARS",
]

_WORD = re.compile(r"\w+")


def _words(text: str) -> list[str]:
    """Lowercased ``\\w+`` words; found before lowering (``"İ".lower()`` would split a word in two)."""
    return [word.lower() for word in _WORD.findall(text)]


def _lines(text: str) -> list[str]:
    return [line for line in text.split("\n") if line.strip()]


class Constraint(abc.ABC):
    """Base of all constraints. ``kind`` names the type in JSON."""

    kind: ClassVar[str]

    @abc.abstractmethod
    def check(self, text: str) -> bool:
        """Whether ``text`` obeys the constraint."""

    @abc.abstractmethod
    def describe(self) -> str:
        """The instruction as the one fixed sentence of the prompt."""


@dataclasses.dataclass(frozen=True)
class Lowercase(Constraint):
    kind: ClassVar[str] = "lowercase"

    def check(self, text: str) -> bool:
        return text == text.lower()

    def describe(self) -> str:
        return "Answer in lowercase."


@dataclasses.dataclass(frozen=True)
class Uppercase(Constraint):
    kind: ClassVar[str] = "uppercase"

    def check(self, text: str) -> bool:
        return text == text.upper()

    def describe(self) -> str:
        return "Answer in uppercase."


@dataclasses.dataclass(frozen=True)
class Quoted(Constraint):
    kind: ClassVar[str] = "quoted"

    def check(self, text: str) -> bool:
        body = text.strip()
        return len(body) > 1 and body[0] == '"' and body[-1] == '"'

    def describe(self) -> str:
        return "Wrap the answer in double quotes."


@dataclasses.dataclass(frozen=True)
class Bracketed(Constraint):
    kind: ClassVar[str] = "bracketed"

    def check(self, text: str) -> bool:
        body = text.strip()
        return len(body) > 1 and body[0] == "[" and body[-1] == "]"

    def describe(self) -> str:
        return "Wrap the answer in square brackets."


@dataclasses.dataclass(frozen=True)
class LineCount(Constraint):
    n: int
    kind: ClassVar[str] = "line_count"

    def check(self, text: str) -> bool:
        return len(_lines(text)) == self.n

    def describe(self) -> str:
        return f"Answer in {self.n} lines."


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
        return f"Answer in {self.n} bullet points."


@dataclasses.dataclass(frozen=True)
class SectionCount(Constraint):
    n: int
    marker: str = "Section"
    kind: ClassVar[str] = "section_count"

    def check(self, text: str) -> bool:
        sections = re.split(r"\s?" + re.escape(self.marker) + r"\s?\d+\s?", text)
        return len(sections) - 1 >= self.n

    def describe(self) -> str:
        return f"Answer in {self.n} sections marked '{self.marker} X'."


@dataclasses.dataclass(frozen=True)
class StartsWith(Constraint):
    phrase: str
    kind: ClassVar[str] = "starts_with"

    def check(self, text: str) -> bool:
        return text.strip().lower().startswith(self.phrase.strip().lower())

    def describe(self) -> str:
        return f"Start with '{self.phrase}'."


@dataclasses.dataclass(frozen=True)
class EndsWith(Constraint):
    phrase: str
    kind: ClassVar[str] = "ends_with"

    def check(self, text: str) -> bool:
        return text.strip().lower().endswith(self.phrase.strip().lower())

    def describe(self) -> str:
        return f"End with '{self.phrase}'."


@dataclasses.dataclass(frozen=True)
class NoCommas(Constraint):
    kind: ClassVar[str] = "no_commas"

    def check(self, text: str) -> bool:
        return "," not in text

    def describe(self) -> str:
        return "Do not use commas."


@dataclasses.dataclass(frozen=True)
class NoPeriods(Constraint):
    kind: ClassVar[str] = "no_periods"

    def check(self, text: str) -> bool:
        return "." not in text

    def describe(self) -> str:
        return "Do not use periods."


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
        return "Answer in JSON."


@dataclasses.dataclass(frozen=True)
class MinWords(Constraint):
    n: int
    kind: ClassVar[str] = "min_words"

    def check(self, text: str) -> bool:
        return len(_words(text)) >= self.n

    def describe(self) -> str:
        return f"Use at least {self.n} words."


@dataclasses.dataclass(frozen=True)
class MaxWords(Constraint):
    n: int
    kind: ClassVar[str] = "max_words"

    def check(self, text: str) -> bool:
        return len(_words(text)) <= self.n

    def describe(self) -> str:
        return f"Use at most {self.n} words."


@dataclasses.dataclass(frozen=True)
class IncludeWord(Constraint):
    word: str
    kind: ClassVar[str] = "include_word"

    def check(self, text: str) -> bool:
        return self.word.lower() in set(_words(text))

    def describe(self) -> str:
        return f"Use the word '{self.word}'."


@dataclasses.dataclass(frozen=True)
class ForbiddenWord(Constraint):
    word: str
    kind: ClassVar[str] = "forbidden_word"

    def check(self, text: str) -> bool:
        return self.word.lower() not in set(_words(text))

    def describe(self) -> str:
        return f"Do not use the word '{self.word}'."


CONSTRAINT_TYPES: dict[str, type[Constraint]] = {
    cls.kind: cls for cls in (Lowercase, Uppercase, Quoted, Bracketed, LineCount, BulletCount,
                              SectionCount, StartsWith, EndsWith, NoCommas, NoPeriods, JsonFormat,
                              MinWords, MaxWords, IncludeWord, ForbiddenWord)
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
    """IFEval's rule: an empty response follows nothing; otherwise the check, which never raises here."""
    try:
        return bool(text.strip()) and bool(constraint.check(text))
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


# --- JSON --------------------------------------------------------------------------------

def constraints_to_json(constraints: list[Constraint]) -> str:
    """``[{"kind": ..., **fields}, ...]`` as a JSON string."""
    return json.dumps([{"kind": c.kind, **dataclasses.asdict(c)} for c in constraints])


_MAX_FIELD_INT = 10_000
_MAX_FIELD_CHARS = 200


def _shown(value: Any) -> str:
    """``value`` for an error message: short, and never the digits of a huge integer (too slow to print)."""
    if isinstance(value, int) and abs(value) >= 10**12:
        return "a huge integer"
    return repr(value)[:60]


def _field_value(kind: str, name: str, annotation: Any, value: Any) -> Any:
    """``value`` if it fits a constraint field annotated ``annotation`` (``int`` or ``str``), else ValueError."""
    if annotation in (int, "int"):
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_FIELD_INT:
            return value
        raise ValueError(f"constraint {kind!r} with field {name!r} not an integer from 0 to "
                         f"{_MAX_FIELD_INT} (got {_shown(value)})")
    if isinstance(value, str) and value.strip() and len(value) <= _MAX_FIELD_CHARS:
        return value
    raise ValueError(f"constraint {kind!r} with field {name!r} not a non-empty string of at most "
                     f"{_MAX_FIELD_CHARS} characters (got {_shown(value)})")


def constraints_from_json(data: str) -> list[Constraint]:
    """Inverse of :func:`constraints_to_json`; ValueError naming the unknown kind or the bad field.

    Messages are noun phrases ("unknown constraint kind 'shout' (known: ...)") that
    a caller can prefix with where the JSON came from.
    """
    if not isinstance(data, str):
        raise ValueError(f"a {type(data).__name__} where a JSON string belongs")
    try:
        items = json.loads(data)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    except ValueError as err:
        raise ValueError(f"invalid JSON ({err})") from None
    if not isinstance(items, list):
        raise ValueError(f"a JSON {type(items).__name__} where a list of constraints belongs")
    out = []
    for item in items:
        if not isinstance(item, dict):
            raise ValueError(f"a constraint that is not an object: {_shown(item)}")
        fields = dict(item)
        kind = fields.pop("kind", None)
        cls = CONSTRAINT_TYPES.get(kind) if isinstance(kind, str) else None
        if cls is None:
            raise ValueError(f"unknown constraint kind {_shown(kind)} (known: {', '.join(CONSTRAINT_TYPES)})")
        declared = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(fields) - set(declared), key=str)
        if unknown:
            raise ValueError(f"constraint {kind!r} with unknown field {_shown(unknown[0])}")
        missing = [name for name, f in declared.items()
                   if name not in fields and f.default is dataclasses.MISSING]
        if missing:
            raise ValueError(f"constraint {kind!r} without field {missing[0]!r}")
        out.append(cls(**{name: _field_value(kind, name, declared[name].type, value)
                          for name, value in fields.items()}))
    return out


# --- sampling -----------------------------------------------------------------------------

OPENERS = ("Sure", "Okay", "Hello")
CLOSERS = ("Hope this helps", "Thank you", "That is all")
INCLUDE_WORDS = ("result", "total", "count", "value")
FORBIDDEN_WORDS = ("answer",)  # the one word the base sentence "The answer is n." can do without

_FACTORIES: dict[str, Callable[[random.Random], Constraint]] = {
    "lowercase": lambda r: Lowercase(),
    "uppercase": lambda r: Uppercase(),
    "quoted": lambda r: Quoted(),
    "bracketed": lambda r: Bracketed(),
    "line_count": lambda r: LineCount(r.choice((2, 3))),
    "bullet_count": lambda r: BulletCount(r.choice((2, 3))),
    "section_count": lambda r: SectionCount(r.choice((2, 3))),
    "starts_with": lambda r: StartsWith(r.choice(OPENERS)),
    "ends_with": lambda r: EndsWith(r.choice(CLOSERS)),
    "no_commas": lambda r: NoCommas(),
    "no_periods": lambda r: NoPeriods(),
    "json_format": lambda r: JsonFormat(),
    "min_words": lambda r: MinWords(r.choice((6, 8, 10))),
    "max_words": lambda r: MaxWords(r.choice((15, 20))),
    "include_word": lambda r: IncludeWord(r.choice(INCLUDE_WORDS)),
    "forbidden_word": lambda r: ForbiddenWord(r.choice(FORBIDDEN_WORDS)),
}

_LAYOUTS = ("line_count", "bullet_count", "section_count")
# Pairs no short response satisfies together, or only by an odd layout (a wrapped
# answer cannot start with a phrase; a bulleted one cannot start with a quote;
# section markers spend the word budget).
_CONFLICTS = {
    frozenset(p) for p in [
        ("lowercase", "uppercase"), ("min_words", "max_words"), ("quoted", "bracketed"),
        ("line_count", "bullet_count"), ("line_count", "section_count"), ("bullet_count", "section_count"),
        *[("json_format", k) for k in ("quoted", "bracketed", "starts_with", "ends_with", *_LAYOUTS)],
        *[(w, k) for w in ("quoted", "bracketed") for k in ("starts_with", "ends_with", "bullet_count")],
        ("lowercase", "section_count"), ("uppercase", "section_count"),
        ("starts_with", "bullet_count"), ("starts_with", "section_count"), ("max_words", "section_count"),
    ]
}


def compatible(kinds: list[str]) -> bool:
    """Whether constraints of these kinds can be met together (distinct kinds, no conflicting pair)."""
    return len(set(kinds)) == len(kinds) and not any(
        frozenset((a, b)) in _CONFLICTS for i, a in enumerate(kinds) for b in kinds[i + 1:])


def sample_constraints(seed: int | random.Random, k: int = 2) -> list[Constraint]:
    """``k`` compatible constraints of different kinds, reproducible from ``seed``."""
    rng = seed if isinstance(seed, random.Random) else random.Random(seed)
    kinds: list[str] = []
    for kind in rng.sample(sorted(_FACTORIES), len(_FACTORIES)):
        if len(kinds) == k:
            break
        if compatible([*kinds, kind]):
            kinds.append(kind)
    return [_FACTORIES[kind](rng) for kind in kinds]
