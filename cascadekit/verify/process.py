"""The process-verified judge: a solution counts only if every gold step is right.

Answer-only grading is worthless in this world (answers are small numbers, so
guessing from the answer distribution already "solves" easy problems). Following
the paper (appendix A.4), the judge parses a solution into a dependency graph and
checks it node by node against the gold graph:

1. **Parse.** Each ``Define <quantity> as <letter>; ...`` starts a step. The step's
   node is the normalized quantity name (the letter is only a handle). Its
   parents are the quantities its expressions mention, following letters back
   to the quantities they stand for, through intermediate letters such as
   ``l = P + J`` inside a step. Its value is the last arithmetic expression in
   the step that can be computed (digits, ``+ - * /`` and parentheses, never
   ``eval``), falling back to the last number written. A solution without any
   ``Define`` is read in the toy ``minimal`` rendering's grammar, one sentence
   per step that names its parents: ``<quantity> = <expression over quantities>
   = ... = <value>.``
2. **Compare.** For each gold node: is it present, are its parents right, is its
   value right? Extra nodes cost nothing here.
3. **Decide.** Correct only when every gold node passes *and* the final answer
   (from ``<answer>`` or ``Answer:``) matches. Process accuracy is the fraction of
   gold nodes that pass.

The judge never raises on malformed text; anything it cannot read counts as
missing or wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from cascadekit.world.render import Problem, normalize_name

_MAX_DIGITS = 30
_MAX_MAGNITUDE = 10**30
_MAX_DEPTH = 50
_NOT_ARITHMETIC = re.compile(r"[^0-9\s()+\-*/]")
_TOKEN = re.compile(r"[0-9]+|[-+*/()]")


class _Unreadable(Exception):
    """Raised inside the evaluator; ``evaluate`` turns it into None."""


def parse_number(text: str) -> Fraction | None:
    """A decimal literal as an exact fraction; None for absurdly long ones."""
    return Fraction(text) if len(text) <= _MAX_DIGITS else None


def evaluate(expression: str) -> Fraction | None:
    """The exact value of ``expression`` if it is pure arithmetic, else None.

    A tiny recursive-descent parser over digits, ``+ - * /`` and parentheses:
    ``expr := term (("+"|"-") term)*``, ``term := factor (("*"|"/") factor)*``,
    ``factor := "-" factor | "(" expr ")" | number``. Numbers longer than 30
    digits, results beyond 10**30, nesting deeper than 50 and division by zero
    all make the expression unreadable instead of raising or hanging.
    """
    if _NOT_ARITHMETIC.search(expression) or not any(ch.isdigit() for ch in expression):
        return None
    tokens = _TOKEN.findall(expression)
    try:
        value, pos = _expr(tokens, 0, 0)
    except _Unreadable:
        return None
    return value if pos == len(tokens) else None


def _checked(value: Fraction) -> Fraction:
    if abs(value.numerator) > _MAX_MAGNITUDE or value.denominator > _MAX_MAGNITUDE:
        raise _Unreadable
    return value


def _expr(tokens: list[str], pos: int, depth: int) -> tuple[Fraction, int]:
    value, pos = _term(tokens, pos, depth)
    while pos < len(tokens) and tokens[pos] in ("+", "-"):
        op = tokens[pos]
        right, pos = _term(tokens, pos + 1, depth)
        value = _checked(value + right if op == "+" else value - right)
    return value, pos


def _term(tokens: list[str], pos: int, depth: int) -> tuple[Fraction, int]:
    value, pos = _factor(tokens, pos, depth)
    while pos < len(tokens) and tokens[pos] in ("*", "/"):
        op = tokens[pos]
        right, pos = _factor(tokens, pos + 1, depth)
        if op == "/" and right == 0:
            raise _Unreadable
        value = _checked(value * right if op == "*" else value / right)
    return value, pos


def _factor(tokens: list[str], pos: int, depth: int) -> tuple[Fraction, int]:
    if depth > _MAX_DEPTH or pos >= len(tokens):
        raise _Unreadable
    token = tokens[pos]
    if token == "-":
        value, pos = _factor(tokens, pos + 1, depth + 1)
        return -value, pos
    if token == "(":
        value, pos = _expr(tokens, pos + 1, depth + 1)
        if pos >= len(tokens) or tokens[pos] != ")":
            raise _Unreadable
        return value, pos + 1
    if token.isdigit() and len(token) <= _MAX_DIGITS:
        return Fraction(int(token)), pos + 1
    raise _Unreadable


@dataclass(frozen=True)
class ParsedStep:
    name: str
    letter: str
    parents: frozenset[str]
    value: Fraction | None


@dataclass(frozen=True)
class ParsedSolution:
    steps: tuple[ParsedStep, ...]
    answer: Fraction | None

    def by_name(self) -> dict[str, ParsedStep]:
        """Steps by quantity; when a quantity is defined twice, the later definition counts."""
        return {step.name: step for step in self.steps}


@dataclass(frozen=True)
class ProcessVerdict:
    correct: bool
    answer_correct: bool
    process_accuracy: float
    n_gold: int
    n_missing: int
    n_dependency: int
    n_value: int
    n_extra: int
    answer_mismatch: bool
    reason: str


_DEFINE = re.compile(r"Define\s+([^;]{1,200}?)\s+as\s+([A-Za-z]\w*)")
_STEP_END = re.compile(r"Define\s|Answer\s*:")
_IDENTIFIER = re.compile(r"[A-Za-z]\w*")
_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
_SENTENCE_END = re.compile(r"\.(?:\s+|$)")
_OPERATOR = re.compile(r"[-+*/()]")
_MAX_TEXT = 200_000


def _solution_body(text: str) -> str:
    """The text between ``<solution>`` (if any) and the first closing or answer tag."""
    start = text.find("<solution>")
    body = text[start + len("<solution>"):] if start >= 0 else text
    ends = [i for tag in ("</solution>", "<answer>", "<question>") if (i := body.find(tag)) >= 0]
    return body[: min(ends)] if ends else body


def _parse_answer(text: str) -> Fraction | None:
    """The number after the last ``<answer>``, else after the last ``Answer:``."""
    for marker in (r"<answer>", r"Answer\s*:"):
        hits = list(re.finditer(marker, text))
        if hits:
            match = _NUMBER.search(text, hits[-1].end(), hits[-1].end() + 64)
            return parse_number(match.group()) if match else None
    return None


def _step_value(clauses: list[str], rest: str) -> Fraction | None:
    """The last computable expression among the clauses' ``=``-separated parts, else the last number."""
    for clause in reversed(clauses):
        for part in reversed(clause.split("=")):
            value = evaluate(part.strip().rstrip("."))
            if value is not None:
                return value
    numbers = _NUMBER.findall(rest)
    return parse_number(numbers[-1]) if numbers else None


def parse_solution(text: str) -> ParsedSolution:
    """Read a solution into steps (quantity, parents, value) and a final answer."""
    text = str(text)[:_MAX_TEXT]
    body = _solution_body(text)
    steps = _lettered_steps(body) if _DEFINE.search(body) else _named_steps(body)
    return ParsedSolution(steps, _parse_answer(text))


def _lettered_steps(body: str) -> tuple[ParsedStep, ...]:
    """Steps of the paper's grammar: ``Define <quantity> as <letter>; so <letter> = ...``."""
    letters: dict[str, frozenset[str]] = {}  # letter -> the quantities it stands for
    steps = []
    for match in _DEFINE.finditer(body):
        end = _STEP_END.search(body, match.end())
        rest = body[match.end(): end.start() if end else len(body)]
        name, letter = normalize_name(match.group(1)), match.group(2)
        parents: set[str] = set()
        clauses = [c for c in rest.split(";") if c.strip()]
        for clause in clauses:
            target, *sides = clause.split("=")
            mentioned = frozenset().union(*(letters.get(word, frozenset())
                                            for side in sides for word in _IDENTIFIER.findall(side)
                                            if word != letter))
            target_word = target.strip().removeprefix("so ").strip()
            if sides and target_word != letter and _IDENTIFIER.fullmatch(target_word):
                letters[target_word] = mentioned  # an intermediate letter, e.g. l = P + J
            parents |= mentioned
        steps.append(ParsedStep(name, letter, frozenset(parents), _step_value(clauses, rest)))
        letters[letter] = frozenset({name})
    return tuple(steps)


def _named_steps(body: str) -> tuple[ParsedStep, ...]:
    """Steps of the ``minimal`` grammar: ``<quantity> = <expression over quantities> = ... = <value>.``

    Every operand of the symbolic side that is not a number is a parent, by name.
    A sentence without ``=`` (``Answer: 12.``, stray words) is not a step.
    """
    steps = []
    for sentence in _SENTENCE_END.split(body):
        target, *sides = sentence.split("=")
        name = normalize_name(target)
        if not sides or not _IDENTIFIER.search(name):
            continue
        parents = {operand for side in sides for chunk in _OPERATOR.split(side)
                   if _IDENTIFIER.search(operand := normalize_name(chunk))}
        steps.append(ParsedStep(name, name, frozenset(parents), _step_value(["=".join(sides)], sentence)))
    return tuple(steps)


def judge(text: str, problem: Problem) -> ProcessVerdict:
    """Check a solution against the problem's gold graph, node by node, then the answer.

    Never raises on any ``text``: only the first 200,000 characters are read, every
    number and expression is bounded (see :func:`evaluate`), and whatever cannot be
    read counts as a missing or wrong step, named in the verdict's reason.
    """
    parsed = parse_solution(text)
    steps = parsed.by_name()
    gold_names = {node.name for node in problem.nodes}
    missing, dependency, value = [], [], []
    passed = 0
    for node in problem.nodes:
        step = steps.get(node.name)
        if step is None:
            missing.append(node.name)
            continue
        parents_ok = step.parents == frozenset(node.parents)
        value_ok = step.value == node.value
        if not parents_ok:
            dependency.append(node.name)
        if not value_ok:
            value.append(node.name)
        passed += parents_ok and value_ok
    n_extra = sum(name not in gold_names for name in steps)
    answer_correct = parsed.answer is not None and parsed.answer == problem.answer
    n_gold = len(problem.nodes)
    correct = passed == n_gold and answer_correct
    return ProcessVerdict(
        correct=correct, answer_correct=answer_correct,
        process_accuracy=passed / n_gold if n_gold else 0.0,
        n_gold=n_gold, n_missing=len(missing), n_dependency=len(dependency), n_value=len(value),
        n_extra=n_extra, answer_mismatch=not answer_correct,
        reason=_reason(correct, missing, dependency, value, parsed.answer, problem.answer))


def _reason(correct: bool, missing: list[str], dependency: list[str], value: list[str],
            answer: Fraction | None, gold_answer: int) -> str:
    if correct:
        return "correct"
    parts = [f"{label}: {', '.join(names[:3])}{' ...' if len(names) > 3 else ''}"
             for label, names in (("missing", missing), ("dependency mismatch", dependency),
                                  ("value mismatch", value)) if names]
    if answer != gold_answer:
        parts.append(f"answer {'missing' if answer is None else answer} != {_number_text(gold_answer)}")
    return "; ".join(parts)


def _number_text(value: int) -> str:
    """``str(value)``, or a short form past Python's 4300-digit limit on printing integers."""
    try:
        return str(value)
    except ValueError:
        return f"<an integer of about {int(value.bit_length() * 0.30103)} digits>"
