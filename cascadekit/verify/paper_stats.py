"""What a ``paper`` problem looks like, measured from its text alone, so kit and official problems compare.

The official Interplay generator's problems and the kit's ``paper`` rendering share
one format (``The number of ... equals``, ``Define ... as X; so X = ...``). Every
feature here is read off the three texts of a problem (statements, question,
solution), never off a generator's internals, so the same code measures both:
``data/fixtures/official_paper_stats.json`` holds the official generator's
statistics measured this way (its provenance says how), and
``tests/test_paper_distributions.py`` compares the kit's with them per op band and mode;
:func:`rebuild` reads a problem's graph off its text alone (``tests/test_paper_text.py``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

from cascadekit.verify.process import parse_solution
from cascadekit.world.render import normalize_name

#: Op bands the statistics are kept per (the official distractor rate falls steeply across them).
BANDS: tuple[tuple[int, int], ...] = ((2, 5), (6, 10), (11, 15), (16, 20))
REVERSE_PREAMBLE = "The question is difficult"

_DEFINE = re.compile(r"Define (.+?) as ([A-Za-z]);")
_TIMES = re.compile(r"equals ([0-9]+) times ")
_WIDE_SUM = re.compile(r"(?<![A-Za-z])[A-Za-z] \+ [A-Za-z] \+ [A-Za-z](?![A-Za-z])")
_PAREN_DIFFERENCE = re.compile(r"\) - \(")
_X_SUBTRACTED = re.compile(r" - \([^()]*x[^()]*\)")
_STATEMENT = re.compile(r"The (total number|number) of (.+?) (?:equals (.+)|exists, and its number is greater than 0)")
_REFERENCE = re.compile(r"the (?:total number|number) of ")
_SEPARATOR = re.compile(r"(?:,? and|,)$")
_CONSTANT = re.compile(r"([0-9]+) (plus|times) (.+)")


@dataclass(frozen=True)
class Relation:
    """One problem sentence about a quantity: a bare ``value``, the ``unknown``, or a relation to others.

    A relation is ``copy`` (one reference), ``sum`` or ``difference`` of ``refs``,
    with ``const`` applied by ``op`` (``plus`` / ``times``) when the sentence
    starts with one; a bare value keeps its number in ``const``.
    """

    kind: str
    refs: tuple[str, ...] = ()
    const: int | None = None
    op: str | None = None


def _relation(body: str | None) -> Relation:
    """What a sentence's right side says: None for ``exists, and ...``, else ``equals <body>``."""
    if body is None:
        return Relation("unknown")
    if body.isdigit():
        return Relation("value", const=int(body))
    constant = _CONSTANT.fullmatch(body)
    inner = constant.group(3) if constant else body
    starts = [m.start() for m in _REFERENCE.finditer(inner)]
    refs = tuple(normalize_name(_SEPARATOR.sub("", inner[a:b].strip()).removeprefix("the number of "))
                 for a, b in zip(starts, [*starts[1:], len(inner)]))
    kind = "sum" if inner.startswith("the sum of") else "difference" if inner.startswith("the difference") else "copy"
    return Relation(kind, refs, int(constant.group(1)) if constant else None,
                    constant.group(2) if constant else None)


def statements(problem_text: str) -> dict[str, list[Relation]]:
    """Every quantity the problem's sentences are about, with what each sentence says of it, in order."""
    said: dict[str, list[Relation]] = {}
    for sentence in re.split(r"(?<=\.)\s+", problem_text.strip()):
        match = _STATEMENT.fullmatch(sentence.rstrip(". "))
        if match:
            name = normalize_name(("total number of " if match.group(1) == "total number" else "") + match.group(2))
            said.setdefault(name, []).append(_relation(match.group(3)))
    return said


def _is_total(name: str) -> bool:
    return name.startswith("total number of ")


def _place(name: str) -> str:
    return name.rsplit(" in ", 1)[-1]


@dataclass(frozen=True)
class RebuiltNode:
    """A quantity as the problem text alone defines it: parents, its value (None if the text cannot tell), op cost."""

    parents: frozenset[str]
    value: Fraction | None
    cost: int


def rebuild(problem_text: str, question: str) -> dict[str, RebuiltNode]:
    """The problem's graph read off its sentences and question alone, every value solved where the text allows.

    A total's parents are every instance quantity of its place the text mentions.
    A quantity is defined by its relation sentence (else its bare value, else it is
    the unknown ``x``); a bare value stated beside a relation or of a total is the
    given quantity of a reverse problem: its equation solves ``x``. A quantity
    with no defining sentence (or one that refers to such) has value None.
    """
    said = statements(problem_text)
    mentioned = set(said) | {r for relations in said.values() for rel in relations for r in rel.refs}
    mentioned |= {asked(question)} - {""}
    places: dict[str, list[str]] = {}
    for name in sorted(mentioned):
        if not _is_total(name):
            places.setdefault(_place(name), []).append(name)
    forms: dict[str, tuple[Fraction, Fraction] | None] = {}

    def defining(name: str) -> Relation | None:
        relations = [r for r in said.get(name, []) if r.kind != "value"]
        values = [r for r in said.get(name, []) if r.kind == "value"]
        return relations[0] if relations else (values[0] if values and not _is_total(name) else None)

    def form(name: str, seen: frozenset[str] = frozenset()) -> tuple[Fraction, Fraction] | None:
        if name in forms:
            return forms[name]
        if name in seen:
            return None
        seen = seen | {name}
        relation = defining(name)
        if _is_total(name):
            parts = [form(child, seen) for child in places.get(_place(name), [])]
            result = None if not parts or None in parts else (sum(p[0] for p in parts), sum(p[1] for p in parts))
        else:
            result = None if relation is None else _form(relation, [form(r, seen) for r in relation.refs])
        forms[name] = result
        return result

    for name in mentioned:
        form(name)
    x = _solve(said, forms)

    def node(name: str) -> RebuiltNode:
        relation, found = defining(name), forms[name]
        parents = places.get(_place(name), []) if _is_total(name) else (relation.refs if relation else ())
        value = None if found is None or (found[0] and x is None) else found[0] * (x or 0) + found[1]
        return RebuiltNode(frozenset(parents), value, _cost(name, relation, places))

    return {name: node(name) for name in mentioned}


def _form(relation: Relation, parts: list[tuple[Fraction, Fraction] | None]) -> tuple[Fraction, Fraction] | None:
    """``a * x + b`` of a relation given its references' forms."""
    if relation.kind == "unknown":
        return Fraction(1), Fraction(0)
    if relation.kind == "value":
        return Fraction(0), Fraction(relation.const)
    if not parts or None in parts:
        return None
    if relation.kind == "difference":
        a, b = parts[0][0] - parts[1][0], parts[0][1] - parts[1][1]
    else:
        a, b = sum(p[0] for p in parts), sum(p[1] for p in parts)
    if relation.op == "plus":
        return a, b + relation.const
    return (a * relation.const, b * relation.const) if relation.op == "times" else (a, b)


def _solve(said: dict[str, list[Relation]], forms: dict[str, tuple[Fraction, Fraction] | None]) -> Fraction | None:
    """``x`` from the first stated value of a quantity whose form depends on it, else None."""
    for name, relations in said.items():
        for relation in relations:
            found = forms.get(name)
            if relation.kind == "value" and found is not None and found[0]:
                return (relation.const - found[1]) / found[0]
    return None


def _cost(name: str, relation: Relation | None, places: dict[str, list[str]]) -> int:
    """Op cost in the paper's count: a leaf or the unknown 1, else its parents plus a constant."""
    if _is_total(name):
        return len(places.get(_place(name), []))
    if relation is None or relation.kind in ("value", "unknown"):
        return 1
    return len(relation.refs) + (relation.const is not None)


def asked(question: str) -> str:
    """The quantity a question asks for, as a normalized name."""
    total = re.fullmatch(r"What is the (total number of .+)\?", question.strip())
    if total:
        return normalize_name(total.group(1))
    instance = re.fullmatch(r"How many (.+) does (.+) have\?", question.strip())
    return normalize_name(f"{instance.group(1)} in {instance.group(2)}") if instance else ""


@dataclass(frozen=True)
class Features:
    """One problem's measurable traits (None where a trait does not apply to its mode)."""

    op: int
    reverse: bool
    query_total: bool | None  # forward: the question asks for a total
    given_total: bool | None  # reverse: the quantity whose value is given is a total
    unknown_first: bool | None  # reverse: the unknown is the solution's first step
    zero_needed: bool  # some quantity the solution defines is 0
    answer_zero: bool
    times_constants: tuple[int, ...]  # c of every "equals c times" statement
    distractors: int  # quantities the statements are about that the solution does not define
    bare_distractors: int  # those among them whose statement is a bare number
    missing_statement: bool  # an instance quantity the solution needs has no sentence defining it
    parent_counts: tuple[int, ...]  # parents of every derived step
    leaves: int  # steps without parents: given numbers (and the unknown in reverse mode)
    reused: bool  # some quantity is a parent of two or more steps
    wide_sum: bool  # a sum of three or more letters in one expression
    paren_difference: bool  # a difference written ``(...) - (...)``
    x_subtracted: bool  # a difference subtracts an expression in x
    capital_x: bool  # a quantity's letter is X


def features(op: int, problem_text: str, question: str, solution: str) -> Features:
    """The traits of one problem, read off its statements, question and solution.

    A needed instance quantity has a statement when a sentence defines it; in a
    reverse problem the given quantity's value sentence does not count, since
    only a relation sentence says how the given quantity depends on the unknown
    (a given total needs none: its place's quantities define it).
    """
    reverse = solution.startswith(REVERSE_PREAMBLE)
    defines = _DEFINE.findall(solution)
    names = {normalize_name(name) for name, _ in defines}
    said = statements(problem_text)
    letter_name = {letter: normalize_name(name) for name, letter in defines}
    known = re.search(r"We know ([A-Za-z]) = ", solution)
    given = letter_name.get(known.group(1), "") if reverse and known else None
    steps = parse_solution(solution).steps
    parents = [parent for step in steps for parent in step.parents]
    answer = re.search(r"Answer: (-?[0-9]+)", solution)
    distractors = [name for name in said if name not in names]
    return Features(
        op=op, reverse=reverse,
        query_total=None if reverse else question.startswith("What is the total number"),
        given_total=_is_total(given) if given is not None else None,
        unknown_first=(bool(defines) and defines[0][1] == "x") if reverse else None,
        zero_needed=any(step.value == 0 for step in steps),
        answer_zero=bool(answer) and int(answer.group(1)) == 0,
        times_constants=tuple(int(c) for c in _TIMES.findall(problem_text)),
        distractors=len(distractors),
        bare_distractors=sum(all(r.kind == "value" for r in said[name]) for name in distractors),
        missing_statement=any(not _is_total(name) and not any(r.kind != "value" or name != given
                                                               for r in said.get(name, []))
                              for name in names),
        parent_counts=tuple(len(step.parents) for step in steps if step.parents),
        leaves=sum(not step.parents for step in steps),
        reused=any(parents.count(parent) >= 2 for parent in set(parents)),
        wide_sum=bool(_WIDE_SUM.search(solution)),
        paren_difference=bool(_PAREN_DIFFERENCE.search(solution)),
        x_subtracted=bool(_X_SUBTRACTED.search(solution)),
        capital_x=any(letter == "X" for _, letter in defines),
    )


def _share(flags: list[bool]) -> dict[str, float | int]:
    return {"share": sum(flags) / len(flags) if flags else 0.0, "n": len(flags)}


def _mode_statistics(problems: list[Features], reverse: bool) -> dict[str, dict[str, float | int]]:
    constants = [c for f in problems for c in f.times_constants]
    parents = [k for f in problems for k in f.parent_counts]
    some = [f.distractors for f in problems if f.distractors]
    table = {
        "a needed quantity is 0": _share([f.zero_needed for f in problems]),
        "the answer is 0": _share([f.answer_zero for f in problems]),
        "a times constant is 1": _share([c == 1 for c in constants]),
        "a times constant is 2-4": _share([2 <= c <= 4 for c in constants]),
        "has a distractor": _share([f.distractors > 0 for f in problems]),
        "distractors, when any, are 1": _share([k == 1 for k in some]),
        "distractors, when any, are 2-3": _share([2 <= k <= 3 for k in some]),
        "distractors, when any, are 4-6": _share([4 <= k <= 6 for k in some]),
        "distractors, when any, are 7 or more": _share([k >= 7 for k in some]),
        "a distractor is a bare number": _share([i < f.bare_distractors for f in problems
                                                 for i in range(f.distractors)]),
        "a needed quantity has no statement": _share([f.missing_statement for f in problems]),
        "one leaf": _share([f.leaves == 1 for f in problems]),
        "two leaves": _share([f.leaves == 2 for f in problems]),
        "three or more leaves": _share([f.leaves >= 3 for f in problems]),
        "a quantity feeds two or more steps": _share([f.reused for f in problems]),
        "a derived step has 1 parent": _share([k == 1 for k in parents]),
        "a derived step has 2 parents": _share([k == 2 for k in parents]),
        "a derived step has 3 parents": _share([k == 3 for k in parents]),
        "a derived step has 4 or more parents": _share([k >= 4 for k in parents]),
        "a sum of 3+ letters in one expression": _share([f.wide_sum for f in problems]),
        "a quantity's letter is X": _share([f.capital_x for f in problems]),
    }
    if reverse:
        table |= {
            "the given quantity is a total": _share([f.given_total for f in problems]),
            "the unknown is the first step": _share([f.unknown_first for f in problems]),
            "a difference written (..) - (..)": _share([f.paren_difference for f in problems]),
            "a difference subtracts an expression in x": _share([f.x_subtracted for f in problems]),
        }
    else:
        table["the query is a total"] = _share([f.query_total for f in problems])
    return table


def band_statistics(problems: Iterable[Features]) -> dict[str, dict[str, dict[str, dict[str, float | int]]]]:
    """Per op band and mode, each statistic as ``{"share": fraction, "n": problems (or items) it is over}``.

    A leaf is a solution step without parents: a given number, or a reverse problem's unknown.
    """
    problems = list(problems)
    return {f"{low}-{high}": {mode: _mode_statistics([f for f in problems if low <= f.op <= high
                                                      and f.reverse == (mode == "reverse")], mode == "reverse")
                              for mode in ("forward", "reverse")}
            for low, high in BANDS}
