"""The process-verified judge: a solution counts only if every gold step is right.

Answer-only grading is worthless in this world (answers are small numbers, so
guessing from the answer distribution already "solves" easy problems). Following
the paper (appendix A.4), the judge parses a solution into a dependency graph and
checks it node by node against the gold graph:

1. **Parse.** ``Define <quantity> as <letter>;`` steps are read as the official
   parser (``SolutionParser`` of the Interplay code) reads them: the letter is one
   ASCII letter; a step's node is the normalized quantity name; its parents are
   the quantities named by its assignment to its own letter, through the step's
   intermediate letters (``l = P + J; so W = 2 * l``); its value is that
   assignment's last side with the letters' known values put in (digits,
   ``+ - * /`` and parentheses, never ``eval``), falling back to the last number.
   A reverse-mode side in the unknown ``x`` waits until the solution has solved
   for it, and then gives the step's value even where a later side states one
   (the given quantity's ``We know T = 12``), so a wrong expression in x there
   is caught. The differences the kit keeps, each with its reason, are
   :data:`cascadekit.verify.official_format.DIFFERENCES`. A solution without any
   ``Define`` is read in the toy ``minimal`` rendering's grammar, one sentence
   per step that names its parents: ``<quantity> = <expression over quantities>
   = ... = <value>.``
2. **Compare.** For each gold node: is it present, are its parents right, is its
   value right? Extra nodes cost nothing here.
3. **Decide.** Correct only when every gold node passes *and* the final answer
   (the first ``<answer>``, else the first ``Answer:``, as officially) matches. Process accuracy is the fraction of
   gold nodes that pass.

The judge never raises on malformed text; anything it cannot read counts as
missing or wrong. It reads the whole output, Unicode digits as numbers and
invisible format characters dropped (:func:`readable`); an output over
:data:`MAX_TEXT` characters is rejected whole, never judged on a prefix.
"""

from __future__ import annotations

import re
import unicodedata
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


#: ``Define <name> as <up to 40 filler words> <letter>;``; a filler word is never ``Define`` and is matched
#: possessively, so hostile text costs linear time (the official allows any number of filler words).
_DEFINE = re.compile(r"Define\s+(.{1,400}?)\s+(?:as|a)\s+(?:(?!define\b)[A-Za-z]++\s++){0,40}+([A-Za-z]);",
                     re.IGNORECASE | re.DOTALL)
_LAST_DEFINE = re.compile(r"\bDefine\s+", re.IGNORECASE)
_ASSIGNMENT = re.compile(r"(?<![A-Za-z0-9_])([A-Za-z])\s*=\s*([^.;]+)")
_LETTER = re.compile(r"(?<![A-Za-z0-9_])[A-Za-z](?![A-Za-z0-9_])")
_EXPRESSION = re.compile(r"[0-9A-Za-z\s()+\-*/.]*")
_IDENTIFIER = re.compile(r"[A-Za-z]\w*")
_IDENTIFIER_GLUED = re.compile(r"[A-Za-z][A-Za-z0-9_]|[0-9][A-Za-z]")
_TAG = re.compile(r"<[^<>]*>")  # any length; never spans a "<", so linear
_NUMBER = re.compile(r"[-+]?[0-9]+(?:\.[0-9]+)?")
_ANSWER_TAG = re.compile(r"<answer>\s*([-+]?[0-9]+(?:\.[0-9]+)?)", re.IGNORECASE)
_ANSWER_LINE = re.compile(r"Answer:\s*([-+]?[0-9]+(?:\.[0-9]+)?)")
_SENTENCE_END = re.compile(r"\.(?:\s+|$)")
_OPERATOR = re.compile(r"[-+*/()]")
#: The longest output the judge reads; a longer one is rejected whole, never judged on a prefix.
MAX_TEXT = 200_000
#: A Unicode decimal digit that is not ASCII (fullwidth, Arabic-Indic, ...): the official ``\d`` reads them.
_UNICODE_DIGIT = re.compile(r"(?![0-9])\d")


def _solution_body(text: str) -> str:
    """The text between ``<solution>`` (if any) and the first closing or answer tag."""
    start = text.find("<solution>")
    body = text[start + len("<solution>"):] if start >= 0 else text
    ends = [i for tag in ("</solution>", "<answer>", "<question>") if (i := body.find(tag)) >= 0]
    return body[: min(ends)] if ends else body


def _lettered_text(text: str) -> str:
    """Where ``Define`` steps are read: after ``<solution>`` up to a runaway ``<question>``, tags removed.

    As in the official parser, steps after the answer tag still count; the kit
    only stops at a new ``<question>`` (a policy that ran on into another problem).
    """
    start = text.find("<solution>")
    body = text[start + len("<solution>"):] if start >= 0 else text
    end = body.find("<question>")
    return _TAG.sub(" ", body if end < 0 else body[:end])


def _parse_answer(text: str) -> Fraction | None:
    """The number right after the first ``<answer>``, else after the first ``Answer:`` (the official order)."""
    for pattern in (_ANSWER_TAG, _ANSWER_LINE):
        match = pattern.search(text)
        if match:
            return parse_number(match.group(1).lstrip("+"))
    return None


def _step_value(clauses: list[str], rest: str) -> Fraction | None:
    """The last computable expression among the clauses' ``=``-separated parts, else the last number."""
    for clause in reversed(clauses):
        for part in reversed(clause.split("=")):
            value = evaluate(part.strip().rstrip("."))
            if value is not None:
                return value
    numbers = _NUMBER.findall(rest)
    return parse_number(numbers[-1].lstrip("+")) if numbers else None


def readable(text: str) -> str:
    """``text`` as the judge reads it: Unicode decimal digits as ASCII ones, invisible format characters gone.

    A zero-width space, joiner, soft hyphen, byte-order mark or bidi control
    (Unicode category Cf) shows nothing, so it must neither split an expression
    into prose nor hide a letter; every other non-ASCII character stays, and an
    expression holding one is prose (see ``DIFFERENCES``).
    """
    if text.isascii():
        return text
    text = _UNICODE_DIGIT.sub(lambda digit: str(unicodedata.decimal(digit.group())), text)
    return "".join(ch for ch in text if ch.isascii() or unicodedata.category(ch) != "Cf")


def parse_solution(text: str) -> ParsedSolution:
    """Read a solution into steps (quantity, parents, value) and a final answer.

    The whole text is read; :func:`judge` rejects one over :data:`MAX_TEXT` before it gets here.
    """
    text = readable(str(text))
    lettered = _lettered_text(text)
    if _DEFINE.search(lettered):
        return ParsedSolution(_lettered_steps(lettered), _parse_answer(text))
    return ParsedSolution(_named_steps(_solution_body(text)), _parse_answer(text))


def _last_number(text: str) -> Fraction | None:
    numbers = _NUMBER.findall(text)
    return parse_number(numbers[-1].lstrip("+")) if numbers else None


def _substituted(side: str, values: dict[str, Fraction]) -> Fraction | None:
    """The value of an expression side over letters, with every letter's known value put in; else None."""
    if _EXPRESSION.fullmatch(side) is None or _IDENTIFIER_GLUED.search(side):
        return None
    missing = False

    def put(match: re.Match) -> str:
        nonlocal missing
        value = values.get(match.group())
        if value is None:
            missing = True
            return "0"
        return f"({value.numerator}/{value.denominator})"

    text = _LETTER.sub(put, side)
    return None if missing else evaluate(text)


def _mentions(side: str) -> list[str]:
    """The letters an expression side names; none when the side is prose, not an expression."""
    if _EXPRESSION.fullmatch(side) is None or _IDENTIFIER_GLUED.search(side):
        return []
    return _LETTER.findall(side)


class _Step:
    """A ``Define`` step while the solution is read."""

    def __init__(self, name: str, letter: str):
        self.name, self.letter = name, letter
        self.parents: set[str] = set()
        self.value: Fraction | None = None
        self.pending: list[str] = []  # own-letter right-hand sides still waiting for an unknown letter
        self.in_x: str | None = None  # the last own-letter side that waited, checked once x is known


def _lettered_steps(body: str) -> tuple[ParsedStep, ...]:
    """Steps of the paper's grammar, read as the official ``SolutionParser`` reads them.

    A step is ``Define <quantity> as <letter>;`` up to the next ``Define`` (and
    before ``Answer:``); the letter is one ASCII letter. Its assignments are
    ``<letter> = <expression> = ...`` up to the next ``.`` or ``;``. An assignment
    to the step's own letter gives its parents (the quantities its letters stand
    for, through the step's intermediate letters) and its value (the last side,
    letters' known values put in, else the assignment's last number). An
    assignment to another letter is an intermediate, local to its step. A step
    with no assignment to its own letter has no parents and the step's last
    number as its value. Later definitions of a letter replace earlier ones.

    Where the kit departs from the official parser, and why:
    :data:`cascadekit.verify.official_format.DIFFERENCES`.
    """
    quantity_of: dict[str, str] = {}  # letter -> the quantity it was last defined for
    values: dict[str, Fraction] = {}  # letter -> its last computed value
    steps: list[_Step] = []
    matches = list(_DEFINE.finditer(body))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(body)
        rest = body[match.end():end]
        answer_at = rest.find("Answer:")
        rest = rest if answer_at < 0 else rest[:answer_at]
        raw = match.group(1)
        inner = list(_LAST_DEFINE.finditer(raw))
        step = _Step(normalize_name(raw[inner[-1].end():] if inner else raw), match.group(2))
        local: dict[str, set[str]] = {}
        found_own = False
        for assignment in _ASSIGNMENT.finditer(rest):
            target, sides = assignment.group(1), assignment.group(2).split("=")
            parents: set[str] = set()
            for letter in _mentions(sides[0].strip()):
                if letter in local:
                    parents |= local[letter]
                elif letter in quantity_of:
                    parents.add(quantity_of[letter])
            last = sides[-1].strip()
            value = _substituted(last, values)
            waits = value is None and bool(_mentions(last))
            if value is None and not waits:
                value = _last_number(assignment.group(0))
            if target == step.letter:
                step.parents |= parents
                if value is not None:
                    found_own, step.value, step.pending = True, value, []
                elif waits:
                    found_own, step.pending = True, [last]
                if waits:
                    step.in_x = last
            else:
                local[target] = parents
            if value is not None:
                values[target] = value
        if not found_own:
            step.value = _last_number(rest)
        if step.value is not None:
            values[step.letter] = step.value
        quantity_of[step.letter] = step.name
        steps.append(step)
    for step in steps:  # reverse mode: sides in the unknown, once the solution has found it
        if step.value is None:
            step.value = next((v for side in step.pending if (v := _substituted(side, values)) is not None),
                              values.get(step.letter))
        elif step.in_x is not None and (stated := _substituted(step.in_x, values)) is not None:
            step.value = stated  # the given quantity: its expression in x must agree with its stated value
    return tuple(ParsedStep(s.name, s.letter, frozenset(s.parents), s.value) for s in steps)


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

    Never raises on any ``text``: an output over :data:`MAX_TEXT` characters is
    rejected whole (every step missing, the reason says why), never judged on a
    prefix; every number and expression is bounded (see :func:`evaluate`), and
    whatever cannot be read counts as a missing or wrong step, named in the
    verdict's reason.
    """
    text = str(text)
    if len(text) > MAX_TEXT:
        return _over_cap(len(text), problem)
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


def step_accuracy(text: str, gold_text: str) -> float:
    """The share of ``gold_text``'s steps that ``text`` writes with the gold's parents and value; never raises.

    The reference is a gold solution in the same step format rather than a
    problem's graph (Part II's math records carry their gold thinking, not the
    graph); a quantity counts once however often it is written (the later
    definition counts, as in :func:`judge`), and an output over :data:`MAX_TEXT`
    characters scores 0. A gold text with no readable step scores every ``text`` 0.
    """
    text = str(text)
    gold = parse_solution(str(gold_text)).by_name()
    if len(text) > MAX_TEXT or not gold:
        return 0.0
    steps = parse_solution(text).by_name()
    return sum(name in steps and steps[name].parents == step.parents and steps[name].value == step.value
               for name, step in gold.items()) / len(gold)


def _over_cap(length: int, problem: Problem) -> ProcessVerdict:
    """The verdict on an output too long to read: nothing in it counts, so every gold step is missing."""
    n_gold = len(problem.nodes)
    return ProcessVerdict(
        correct=False, answer_correct=False, process_accuracy=0.0, n_gold=n_gold, n_missing=n_gold,
        n_dependency=0, n_value=0, n_extra=0, answer_mismatch=True,
        reason=(f"missing: every step (the output's {length:,} characters are over the judge's {MAX_TEXT:,}-character "
                f"cap, so none was read); answer missing != {_number_text(problem.answer)}"))


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
