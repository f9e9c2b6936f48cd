"""The ``paper`` rendering: problems in the format of the Interplay paper's generator.

The toy renderings (``minimal``, ``compact``) and the kit's ``full`` one share a graph
sampler whose op count leaves out leaf values. This module draws its own graphs,
so that a problem looks, counts and reads as the paper's (GSM-Infinite's
"zero-context" problems) do:

* **op count.** ``op(G) = |E|`` where a given value is an edge too: every leaf
  costs 1, every parent and every constant 1. ``The number of adult lions in
  Maple Zoo equals 3. ... equals 2 times the number of adult lions in Maple Zoo``
  is op 3 (a leaf, a constant, a parent). :func:`official_op` gives the same
  count for a problem of any rendering.
* **quantities.** ``adult lions in Maple Zoo`` (an item in a place) and
  ``total number of adult mammals in Maple Zoo`` (every instance quantity of that
  place the problem mentions: the problem draws one category, so the total is
  the place's total). A total has no sentence of its own; its children are
  exactly the quantities of its place.
* **kinds.** A copy (``equals the number of ...``, one edge), ``c plus`` (c 1-4) /
  ``c times`` (c 2-4, as officially) a quantity, the sum of two to four, the
  difference between two, ``c plus`` / ``c times`` the sum (of two or three) or the
  difference (with an intermediate letter), and totals of one to four quantities.
  A step's parents come in random order, and a difference that would be negative
  is drawn again rather than turned around: turning it around made the kit's
  reverse differences subtract the unknown's (larger) descendants far more often
  than the official's (37% vs 20% of problems at ops 11-15). No quantity is 0
  (the official rejects a 0 unless the quantity is a total).
* **graph shape.** The walk weighs a leaf after the first one a third of the
  first (:data:`_EXTRA_LEAF_WEIGHT`): the official graphs grow from one given
  number 58-93% of the time and reuse quantities, not fresh numbers; at ops 2-5
  a shape that reuses a quantity weighs ten times more (:data:`_REUSE_FACTOR`,
  ``x; A = x; T = x + A``).
* **distractors.** Some problems state quantities the question does not need, as
  often as the official generator's do per mode and op band
  (:data:`DISTRACTOR_RATES`: 96% of forward and 78% of reverse problems at ops
  2-5, falling to 13% and 19% at ops 16-20), as many (:data:`DISTRACTOR_COUNTS`:
  long-tailed, up to 12; the official's reaches 17) and as often bare numbers
  (:data:`BARE_DISTRACTOR`); they sit in places whose total the solution does not
  use, so no total silently covers them.
* **two modes, half each.** *Forward*: the solution defines every needed
  quantity in order, ``Define adult lions in Maple Zoo as q; so q = 3.``, with
  ``r = q = 3; so F = 2 * r = 2 * 3 = 6`` for a constant applied to a quantity
  and a sum of three or more written as partial sums of two
  (``t = a + b = 2 + 3 = 5; so S = t + c = 5 + 4 = 9``); the question asks for a
  total as often as officially per op band (:data:`FORWARD_TOTAL_QUERY`). *Reverse*: one leaf is
  unknown (``... exists, and its number is greater than 0``), a later quantity's
  value is given (a total's, or in small problems sometimes an instance
  quantity's, whose relation sentence is stated beside its value, as officially:
  :data:`REVERSE_GIVEN_TOTAL`), and the question asks for the unknown, the last
  leaf in solution order (as in every official problem with several);
  the solution defines the quantities in order with the unknown where it falls,
  carries ``x`` through linear expressions (a difference may subtract one in
  ``x``, written ``(x + 2) - (x)``) to the given quantity and solves the
  equation. Letters are any ASCII letter in forward mode and exclude ``x`` and
  ``X`` in reverse mode, as officially.

Every problem is solvable from its own text: ``tests/test_paper_text.py`` rebuilds
each one's graph, values and op count from its sentences alone
(:func:`cascadekit.verify.paper_stats.rebuild`). These distributions are checked
per op band and mode against the official generator's, measured by running it
(``tests/test_paper_distributions.py``, ``data/fixtures/official_paper_stats.json``:
47 statistics in each of 4 bands, Holm over all 188, a difference counted when
significant and Cohen's h is at least 0.2). ``generate(...,
official_bug_compat=True)`` reproduces the official reverse-mode bug that leaves a
needed quantity unstated.

Where the kit still departs from the official generator, and why (measured for
issue 61, 40 problems per op and mode on each side; Cohen's h in brackets):

* **reuse at ops 6-10 reverse**, the two cells the test still finds: 93% of
  official reverse problems use a quantity in two or more steps, 78% of the kit's
  (h 0.42), and 17% of official reverse derived steps have three parents, 8% of
  the kit's (h 0.28). Weighting reuse up at ops 6-10 closes the first but brings
  back the excess of differences in x (4 cells differ instead of 2), so the kit
  leaves it; from op 11 both reuse in 99-100%.
* **not significant after Holm, but not yet shown small** (h 0.2-0.35 at 160-200
  problems a side, fewer for the distractor-count shares): reuse at ops 2-5
  reverse (26% vs 36%) and 6-10 forward (84% vs 93%); at ops 6-10 reverse one leaf
  more often (71% vs 58%, so the unknown is first as often) and twice the
  official's differences written ``(..) - (..)`` (17% vs 8.5%), at ops 11-15
  reverse more that subtract an expression in x (30% vs 20%); bare-number
  distractors at ops 2-5 reverse (39% vs 52%: one share, 45%, is drawn for every
  band and mode); the distractor count's shares at ops 11-20 (24-64 problems with
  distractors a side); a needed quantity of 0 at ops 16-20 reverse (0 vs 1%: the
  kit never draws one).
* **names and lengths**: the names and numbers are the kit's own three contexts',
  so problems and solutions are longer in the paper's tokenizer (issue 61 measured
  26-81% and 12-32%); the sentence and solution templates are the official's.
* **distractor count tail**: capped at 12 (the official's reaches 17).
* **the official bug** (a needed quantity unstated in 6-33% of official reverse
  problems from op 6) is off by default; ``official_bug_compat`` reproduces it
  (its rate matches the official's in every band).

The names and numbers are the kit's own (its three contexts' places and items);
the sentence and solution templates follow the paper's format. The gold graph
holds true values and true parents for both modes.
"""

from __future__ import annotations

import functools
import itertools
import random
import re
import string
from dataclasses import dataclass
from typing import TypeVar

from cascadekit.world.contexts import Category, Context, get_context
from cascadekit.world.graph import MAX_VALUE
from cascadekit.world.render import GoldNode, Problem, normalize_name

T = TypeVar("T")
STYLE = "paper"
#: The same rendering with the official generator's reverse-mode bug on (``generate(..., official_bug_compat=True)``):
#: ``--style paper-official-bug`` or ``world.style`` trains on data as the paper's was.
BUG_COMPAT_STYLE = "paper-official-bug"
MODES = ("forward", "reverse")
LEAF_VALUES = range(1, 5)
PLUS_CONSTANTS = range(1, 5)
TIMES_CONSTANTS = range(2, 5)  # the official never multiplies by 1
UNKNOWN = "x"
REVERSE_PREAMBLE = "The question is difficult, so we use equations to solve it."
#: The official generator's share of problems with distractors per mode and op band (lowest op -> share), as measured.
DISTRACTOR_RATES: dict[str, dict[int, float]] = {"forward": {2: 0.96, 6: 0.69, 11: 0.28, 16: 0.13},
                                                 "reverse": {2: 0.78, 6: 0.67, 11: 0.32, 16: 0.19}}
#: How many distractors a problem with some has, per mode and op band: the official shares of 1, 2-3, 4-6 and
#: 7-12 (uniform within each; the official's tail reaches 17).
DISTRACTOR_COUNTS: dict[str, dict[int, tuple[float, float, float, float]]] = {
    "forward": {2: (0.14, 0.44, 0.23, 0.19), 6: (0.06, 0.17, 0.47, 0.30), 11: (0.11, 0.23, 0.38, 0.28),
                16: (0.19, 0.35, 0.19, 0.27)},
    "reverse": {2: (0.16, 0.51, 0.33, 0.0), 6: (0.08, 0.19, 0.71, 0.02), 11: (0.09, 0.31, 0.33, 0.27),
                16: (0.13, 0.39, 0.26, 0.21)}}
_COUNT_RANGES = ((1, 1), (2, 3), (4, 6), (7, 12))
#: The official share of distractors that are bare numbers (42-52% per band and mode).
BARE_DISTRACTOR = 0.45
#: How often a reverse problem is drawn to give a total's value, not an instance quantity's, per op band: draws
#: whose last leaf cannot be the unknown are redrawn, more often without a total, so 0.65 gives the official's
#: 84% at ops 2-5 (96-99% above).
REVERSE_GIVEN_TOTAL: dict[int, float] = {2: 0.65, 6: 0.96, 11: 0.99}
#: How often a forward problem is drawn to end in a total per op band (the others may end in one too): this puts
#: the share of questions asking for a total near the official generator's (0.80, 0.72, 0.84, 0.88 by band).
FORWARD_TOTAL_QUERY: dict[int, float] = {2: 0.6, 6: 0.61, 11: 0.83, 16: 0.85}
_REVERSE_LETTERS = [c for c in string.ascii_letters if c not in (UNKNOWN, UNKNOWN.upper())]  # as officially
_UNKNOWN_STEP = re.compile(rf"Define ([^;]+?) as {UNKNOWN}; we don't know its value")
_MAX_OPEN = 4
_ATTEMPTS = 400

# kind -> (quantity parents, has a constant); the op cost is parents + constant.
_KINDS: dict[str, tuple[tuple[int, ...], bool]] = {
    "copy": ((1,), False), "plus": ((1,), True), "times": ((1,), True),
    "sum": ((2, 3, 4), False), "difference": ((2,), False),
    "plus_sum": ((2, 3), True), "times_sum": ((2, 3), True),
    "plus_difference": ((2,), True), "times_difference": ((2,), True),
    "total": ((1, 2, 3, 4), False),
}
_WEIGHTS = {"copy": 2, "plus": 2, "times": 2, "sum": 3, "difference": 4, "plus_sum": 1, "times_sum": 1,
            "plus_difference": 2, "times_difference": 2, "total": 4}
#: a shape with this many parents weighs this many times its kind's weight (the official data's parent counts)
_PARENT_FACTOR = {1: 1, 2: 1, 3: 2, 4: 1}
_LEAF_WEIGHT = 6
#: a leaf after the first weighs this (the official graphs grow from one given number 60-93% of the time)
_EXTRA_LEAF_WEIGHT = 2
#: per op band, how many times more a shape that reuses a quantity already used weighs: the official's small
#: graphs reuse their one given number (``x; A = x; T = x + A``) far more than the walk's weights alone give
_REUSE_FACTOR: dict[int, int] = {2: 10, 6: 1}
#: (kind, quantity parents, op cost, weight) for every derived node shape
_OPTIONS = tuple((kind, k, k + const, _WEIGHTS[kind] * _PARENT_FACTOR[k])
                 for kind, (counts, const) in _KINDS.items() for k in counts)


@dataclass
class _Node:
    kind: str  # "leaf" or a key of _KINDS
    parents: tuple[int, ...]
    const: int | None
    value: int
    place: int = -1
    item: int = -1  # index into the category's items; -1 for a total

    @property
    def cost(self) -> int:
        return 1 if self.kind == "leaf" else len(self.parents) + (self.const is not None)


def official_op(problem: Problem) -> int:
    """The paper's op count of a problem: its edges with one per leaf value.

    The ``paper`` rendering counts this way already. The other renderings leave
    the leaf values out of ``op``, and their leaves are exactly the gold nodes
    without parents, so their official count is ``op`` plus those.
    """
    if problem.style == STYLE:
        return problem.op
    return problem.op + sum(not node.parents for node in problem.nodes)


def asked_node(problem: Problem) -> int:
    """The index of the gold node the question asks for: the unknown in reverse mode, else the last."""
    unknown = _UNKNOWN_STEP.search(problem.solution_text)
    if not problem.solution_text.startswith(REVERSE_PREAMBLE) or unknown is None:
        return len(problem.nodes) - 1
    name = normalize_name(unknown.group(1))
    return next(i for i, node in enumerate(problem.nodes) if node.name == name)


def _value(kind: str, values: list[int], const: int | None) -> int:
    if kind in ("copy", "sum", "total"):
        return sum(values)
    if kind == "difference":
        return values[0] - values[1]
    inner = sum(values) if kind in ("plus", "times", "plus_sum", "times_sum") else values[0] - values[1]
    return inner + const if kind.startswith("plus") else inner * const


def _structure(op: int, rng: random.Random, final_total: bool) -> list[_Node] | None:
    """Nodes in topological order, every one feeding a later one, the last the query, costing exactly ``op``.

    A random walk over (remaining budget, open nodes): a step opens a leaf or adds
    a derived node over open and already used nodes, as long as the rest of the
    budget can still close every open node; the step that spends the last of it
    must close them all into the query (a total, in reverse mode). None on a dead end.
    """
    nodes: list[_Node] = []
    leaves = 0
    open_: list[int] = []
    totalable: list[int] = []  # instance nodes no total holds yet: what a new total may sum
    remaining = op
    for _ in range(8 * op):  # a draw out of range is drawn again, a bounded number of times
        if not remaining:
            break
        m = len(open_)
        total_open = sum(i in open_ for i in totalable)
        choices, cumulative = _choices(remaining, m, min(len(nodes) - m, 4), total_open,
                                       min(len(totalable) - total_open, 4), final_total,
                                       _EXTRA_LEAF_WEIGHT if leaves else _LEAF_WEIGHT,
                                       _band_value(_REUSE_FACTOR, op))
        if not choices:
            return None
        kind, k, used = rng.choices(choices, cum_weights=cumulative)[0]
        if kind == "leaf":
            nodes.append(_Node("leaf", (), None, rng.choice(LEAF_VALUES)))
            leaves += 1
            open_.append(len(nodes) - 1)
            totalable.append(len(nodes) - 1)
            remaining -= 1
            continue
        allowed = totalable if kind == "total" else range(len(nodes))
        pool_open = [i for i in allowed if i in open_]
        pool_used = [i for i in allowed if i not in open_]
        chosen = rng.sample(pool_open, used) + rng.sample(pool_used, k - used)
        parents = tuple(rng.sample(chosen, k))
        node = _make(kind, parents, _constant(kind, rng), nodes)
        if not _in_range(node):
            continue
        nodes.append(node)
        if kind == "total":
            totalable = [i for i in totalable if i not in parents]
        else:
            totalable.append(len(nodes) - 1)
        open_ = [i for i in open_ if i not in parents] + [len(nodes) - 1]
        remaining -= node.cost
    return nodes if not remaining and len(open_) == 1 and nodes[-1].kind != "leaf" else None


@functools.lru_cache(maxsize=None)
def _choices(remaining: int, m: int, reusable: int, total_open: int, total_free: int,
             final_total: bool, leaf_weight: int,
             reuse_factor: int) -> tuple[tuple[tuple[str, int, int], ...], tuple[int, ...]]:
    """The steps a walk may take from its state, with cumulative weights: (kind, parents, open parents among them).

    ``reusable`` and ``total_free`` (nodes that are not open, for any node or for a
    total) are capped at 4, the most parents a node takes.
    """
    choices: list[tuple[str, int, int]] = []
    weights: list[int] = []
    if m < _MAX_OPEN and remaining - 1 >= m + 1:
        choices.append(("leaf", 0, 0))
        weights.append(leaf_weight)
    for kind, k, cost, weight in _OPTIONS:
        for used in range(1 if m else 0, min(k, m) + 1):
            after_open, after = m - used + 1, remaining - cost
            if after == 0:
                if after_open != 1 or (final_total and kind != "total"):
                    continue
            elif after < 0 or after_open > after or after_open > _MAX_OPEN:
                continue
            if kind == "total" and (used > total_open or k - used > total_free):
                continue
            if k - used <= reusable:
                choices.append((kind, k, used))
                weights.append(weight * (reuse_factor if k > used else 1))
    return tuple(choices), tuple(itertools.accumulate(weights))


def _make(kind: str, parents: tuple[int, ...], const: int | None, nodes: list[_Node]) -> _Node:
    return _Node(kind, parents, const, _value(kind, [nodes[p].value for p in parents], const))


def _constant(kind: str, rng: random.Random) -> int | None:
    """A ``plus`` constant 1-4, a ``times`` one 2-4 (as officially), or None for a kind without one."""
    if not _KINDS[kind][1]:
        return None
    return rng.choice(PLUS_CONSTANTS if kind.startswith("plus") else TIMES_CONSTANTS)


def _in_range(node: _Node) -> bool:
    """Positive and bounded: the official rejects a quantity of 0 unless it is a total (never 0 here either)."""
    return 1 <= node.value <= MAX_VALUE


def _band_value(table: dict[int, T], op: int) -> T:
    """The value of the op band ``op`` falls in (its lowest op is the key); the last band's past it."""
    return next(value for low, value in sorted(table.items(), reverse=True) if op >= low or low == min(table))


def distractor_rate(op: int, mode: str = "forward") -> float:
    """How often a problem of official op ``op`` in ``mode`` states quantities the question does not need.

    The official generator's rate falls with op (its unneeded quantities come from
    a structure graph of bounded size that the needed ones fill up) and is lower in
    reverse mode at small ops: :data:`DISTRACTOR_RATES` holds it per mode and op
    band as measured (see ``data/fixtures/official_paper_stats.json``).
    """
    return _band_value(DISTRACTOR_RATES[mode], op)


def _distractors(nodes: list[_Node], rng: random.Random, op: int, mode: str) -> None:
    """Append quantities the question does not need: bare numbers, or derived from any earlier quantity.

    How many, and how many of them bare numbers, as officially (:data:`DISTRACTOR_COUNTS`,
    :data:`BARE_DISTRACTOR`); a derived one out of range is drawn again, a bounded number of times.
    """
    if rng.random() >= distractor_rate(op, mode):
        return
    low, high = rng.choices(_COUNT_RANGES, weights=_band_value(DISTRACTOR_COUNTS[mode], op))[0]
    derived = [k for k in _KINDS if k != "total"]
    for _ in range(rng.randint(low, high)):
        if rng.random() < BARE_DISTRACTOR:
            nodes.append(_Node("leaf", (), None, rng.choice(LEAF_VALUES)))
            continue
        for _ in range(8):
            kind = rng.choice(derived)
            k = min(rng.choice(_KINDS[kind][0]), len(nodes))
            node = _make(kind, tuple(rng.sample(range(len(nodes)), k)), _constant(kind, rng), nodes)
            if len(node.parents) in _KINDS[kind][0] and _in_range(node):
                nodes.append(node)
                break


def _place(nodes: list[_Node], context: Context, category: Category, rng: random.Random) -> list[str] | None:
    """Give every node a place and item; a total's place holds exactly its children. The place names, or None."""
    totals = [i for i, n in enumerate(nodes) if n.kind == "total"]
    items = len(category.items)
    free_nodes = [i for i, n in enumerate(nodes) if n.kind != "total" and not any(i in nodes[t].parents for t in totals)]
    free_places = max(2, -(-len(free_nodes) // items))
    count = len(totals) + free_places
    if count > len(context.places) or any(len(nodes[t].parents) > items for t in totals):
        return None
    places = rng.sample(range(len(context.places)), count)
    for t, place in zip(totals, places):
        nodes[t].place = place
        for child, item in zip(nodes[t].parents, rng.sample(range(items), len(nodes[t].parents))):
            nodes[child].place, nodes[child].item = place, item
    slots = [(p, i) for p in places[len(totals):] for i in range(items)]
    # the question's quantities first, so distractors never take a slot the solution needs
    for index, (place, item) in zip(free_nodes, rng.sample(slots, len(free_nodes))):
        nodes[index].place, nodes[index].item = place, item
    return [context.places[p].full for p in range(len(context.places))]


class _Names:
    def __init__(self, category: Category, places: list[str]):
        self.category, self.places = category, places

    def name(self, node: _Node) -> str:
        """The quantity as a ``Define`` step names it."""
        place = self.places[node.place]
        if node.kind == "total":
            return f"total number of {self.category.name.full} in {place}"
        return f"{self.category.items[node.item].full} in {place}"

    def ref(self, node: _Node) -> str:
        """The quantity as a problem sentence mentions it."""
        return f"the {self.name(node)}" if node.kind == "total" else f"the number of {self.name(node)}"

    def question(self, node: _Node) -> str:
        place = self.places[node.place]
        if node.kind == "total":
            return f"What is the total number of {self.category.name.full} in {place}?"
        return f"How many {self.category.items[node.item].full} does {place} have?"


def _listing(names: list[str]) -> str:
    return " and ".join(names) if len(names) <= 2 else f"{', '.join(names[:-1])}, and {names[-1]}"


def _statement(node: _Node, names: _Names, nodes: list[_Node]) -> str:
    refs = [names.ref(nodes[p]) for p in node.parents]
    c = node.const
    body = {
        "leaf": lambda: f"{node.value}",
        "copy": lambda: refs[0],
        "plus": lambda: f"{c} plus {refs[0]}",
        "times": lambda: f"{c} times {refs[0]}",
        "sum": lambda: f"the sum of {_listing(refs)}",
        "difference": lambda: f"the difference between {refs[0]} and {refs[1]}",
        "plus_sum": lambda: f"{c} plus the sum of {_listing(refs)}",
        "times_sum": lambda: f"{c} times the sum of {_listing(refs)}",
        "plus_difference": lambda: f"{c} plus the difference between {refs[0]} and {refs[1]}",
        "times_difference": lambda: f"{c} times the difference between {refs[0]} and {refs[1]}",
    }[node.kind]()
    return f"The number of {names.name(node)} equals {body}."


@dataclass(frozen=True)
class _Linear:
    """``a * x + b``: a quantity as the reverse-mode solution writes it, in the unknown ``x``."""

    a: int
    b: int

    def __str__(self) -> str:
        if self.a == 0:
            return str(self.b)
        head = UNKNOWN if self.a == 1 else f"{self.a}*{UNKNOWN}"
        return head if self.b == 0 else f"{head} {'+' if self.b > 0 else '-'} {abs(self.b)}"


def _forms(nodes: list[_Node], unknown: int | None) -> list[_Linear]:
    """Each node as ``a * x + b`` with ``x`` the unknown leaf (``a = 0`` for one that does not depend on it)."""
    forms: list[_Linear] = []
    for i, node in enumerate(nodes):
        if i == unknown:
            forms.append(_Linear(1, 0))
            continue
        parents = [forms[p] for p in node.parents]
        if node.kind == "leaf":
            a = 0
        elif node.kind in ("copy", "plus", "sum", "total", "plus_sum"):
            a = sum(f.a for f in parents)
        elif node.kind in ("times", "times_sum"):
            a = node.const * sum(f.a for f in parents)
        elif node.kind in ("difference", "plus_difference"):
            a = parents[0].a - parents[1].a
        else:
            a = node.const * (parents[0].a - parents[1].a)
        forms.append(_Linear(a, node.value - a * (nodes[unknown].value if unknown is not None else 0)))
    return forms


def _spares(node: _Node) -> int:
    """Intermediate letters a node's step needs: one per two-operand partial sum, one for a constant's operand."""
    k = len(node.parents)
    if node.kind in ("sum", "total"):
        return max(k - 2, 0)
    if node.kind in ("plus_sum", "times_sum"):
        return k - 1
    return 1 if node.kind != "leaf" and _KINDS[node.kind][1] else 0


def _sum_chain(letters: list[str], shown: list[str], partials: list[str], spares: list[str]) -> tuple[str, str, str]:
    """Partial sums of two operands each, as the official writes a sum of three or more.

    ``t = a + b = 2 + 3 = 5; u = t + c = 5 + 4 = 9; `` for ``len(spares)`` partial
    sums; returns that text and the letter and value of the last partial sum
    (the first operand's own when there are none).
    """
    text, letter, value = "", letters[0], shown[0]
    for j, spare in enumerate(spares, start=1):
        text += f"{spare} = {letter} + {letters[j]} = {value} + {shown[j]} = {partials[j]}; "
        letter, value = spare, partials[j]
    return text, letter, value


def _step(i: int, node: _Node, nodes: list[_Node], names: _Names, letters: dict[int, str], spares: list[str],
          forms: list[_Linear] | None) -> str:
    """One solution step; ``forms`` (reverse mode) writes the unknown's descendants in ``x``."""
    letter = letters[i]
    head = f"Define {names.name(node)} as {letter}; "
    form = (lambda j: str(forms[j])) if forms else (lambda j: str(nodes[j].value))
    if node.kind == "leaf":
        return f"{head}so {letter} = {node.value}."
    parents = [letters[p] for p in node.parents]
    shown = [form(p) for p in node.parents]
    partials = _partial_sums(node, nodes, forms)
    c = node.const
    if node.kind in ("copy", "total", "sum", "difference"):
        if len(parents) == 1:
            return f"{head}so {letter} = {parents[0]} = {form(i)}."
        if node.kind == "difference":
            return f"{head}so {letter} = {parents[0]} - {parents[1]} = {_difference_shown(shown, forms)} = {form(i)}."
        chain, last, value = _sum_chain(parents, shown, partials, spares)
        return f"{head}{chain}so {letter} = {last} + {parents[-1]} = {value} + {shown[-1]} = {form(i)}."
    if node.kind in ("plus", "times"):
        inner, operand, operand_value = f"{spares[0]} = {parents[0]} = {shown[0]}; ", spares[0], shown[0]
    elif "difference" in node.kind:
        inner_value = _inner_form(node, nodes, forms)
        inner = (f"{spares[0]} = {parents[0]} - {parents[1]} = {_difference_shown(shown, forms)} = {inner_value}; ")
        operand, operand_value = spares[0], inner_value
    else:
        inner, operand, operand_value = _sum_chain(parents, shown, partials, spares)
    if node.kind.startswith("plus"):
        return f"{head}{inner}so {letter} = {c} + {operand} = {c} + {operand_value} = {form(i)}."
    if forms and forms[i].a:
        return f"{head}{inner}so {letter} = {c} * {operand} = ({c}) * ({operand_value}) = {form(i)}."
    return f"{head}{inner}so {letter} = {c} * {operand} = {c} * {operand_value} = {form(i)}."


def _difference_shown(shown: list[str], forms: list[_Linear] | None) -> str:
    """``a - b`` with each side in parentheses in reverse mode, as officially: ``(x + 2) - (3)``."""
    return f"({shown[0]}) - ({shown[1]})" if forms else f"{shown[0]} - {shown[1]}"


def _partial_sums(node: _Node, nodes: list[_Node], forms: list[_Linear] | None) -> list[str]:
    """The running sums of a node's parents (the first one's alone first), as numbers or in ``x``."""
    running, partials = _Linear(0, 0), []
    for p in node.parents:
        part = forms[p] if forms else _Linear(0, nodes[p].value)
        running = _Linear(running.a + part.a, running.b + part.b)
        partials.append(str(running))
    return partials


def _inner_form(node: _Node, nodes: list[_Node], forms: list[_Linear] | None) -> str:
    """The difference inside a ``c plus`` / ``c times`` node, as a number or in ``x``."""
    if not forms:
        return str(nodes[node.parents[0]].value - nodes[node.parents[1]].value)
    first, second = (forms[p] for p in node.parents)
    return str(_Linear(first.a - second.a, first.b - second.b))


def _reverse_unknown(nodes: list[_Node], solution: int) -> tuple[int, list[_Linear], set[int]] | None:
    """The leaf to make unknown, its quantity's forms in ``x`` and the quantities depending on it; None if unfit.

    The unknown is the last leaf in solution order, as in every official reverse
    problem with several (233 of 233 measured for issue 61). As officially, a
    difference may subtract a quantity that depends on the unknown
    (``(x + 2) - (x) = 2``), so a dependent quantity may lose ``x`` or fall with
    it; only the given quantity must rise with it (``a > 0``), so the equation
    has one positive solution; a graph where it does not is drawn again.
    """
    leaf = max(i for i in range(solution) if nodes[i].kind == "leaf")
    forms = _forms(nodes[: solution + 1], leaf)
    depends = {leaf}
    for i in range(leaf + 1, solution + 1):
        if depends.intersection(nodes[i].parents):
            depends.add(i)
    if solution in depends and nodes[solution].value > 0 and forms[solution].a > 0:
        return leaf, forms, depends
    return None


def generate(op: int, context: str, rng: random.Random, seed: int | None = None, mode: str | None = None,
             official_bug_compat: bool = False) -> Problem:
    """One ``paper`` problem of official op ``op``; ``mode`` forward or reverse (None: a coin flip).

    ``official_bug_compat`` (off by default) reproduces a bug of the official
    ``reverse_generator.generate_sentence``: it rebinds its loop variable while
    listing a sum of three or more, so when the listing's second-to-last operand
    is the unknown, the sum's statement becomes a second "exists" statement of the
    unknown and the sum is never stated. The official reverse data has such
    unsolvable problems (15.8% of them, measured for issue 35); turn it on to
    train on data as the paper's was, leave it off for correct data. The gold
    graph is the true one either way.
    """
    mode = mode or rng.choice(MODES)
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
    ctx = get_context(context)
    for _ in range(_ATTEMPTS):
        problem = _try(op, ctx, rng, seed, mode, official_bug_compat)
        if problem is not None:
            return problem
    raise RuntimeError(f"no paper problem with op={op} found in {_ATTEMPTS} attempts")  # pragma: no cover


def _unknown_statement(node: _Node, names: _Names) -> str:
    return f"The number of {names.name(node)} exists, and its number is greater than 0."


def _statements(nodes: list[_Node], names: _Names, unknown: int | None, bug_compat: bool) -> list[str]:
    """A sentence for every quantity but totals; ``bug_compat``: the official's lost sums.

    A reverse problem's given instance quantity keeps its relation sentence beside
    its value (as officially), or the text would not say how it depends on the
    unknown. (See :func:`generate` for the official bug.)
    """
    statements = []
    for i, node in enumerate(nodes):
        if node.kind == "total":
            continue
        lost = (bug_compat and unknown is not None and node.kind in ("sum", "plus_sum", "times_sum")
                and len(node.parents) >= 3 and node.parents[-2] == unknown)
        statements.append(_unknown_statement(nodes[unknown], names) if i == unknown or lost
                          else _statement(node, names, nodes))
    return statements


def _try(op: int, ctx: Context, rng: random.Random, seed: int | None, mode: str,
         bug_compat: bool = False) -> Problem | None:
    reverse = mode == "reverse"
    total_share = _band_value(REVERSE_GIVEN_TOTAL if reverse else FORWARD_TOTAL_QUERY, op)
    nodes = _structure(op, rng, final_total=rng.random() < total_share)
    if nodes is None:
        return None
    query = len(nodes) - 1
    unknown, forms, depends = None, None, set()
    if reverse:
        found = _reverse_unknown(nodes, query)
        if found is None:
            return None
        unknown, forms, depends = found
    _distractors(nodes, rng, op, mode)
    category = rng.choice(ctx.categories)
    places = _place(nodes, ctx, category, rng)
    if places is None:
        return None
    names = _Names(category, places)
    order = list(range(query + 1))  # topological: the unknown where it falls, as officially
    named = [i for i in order if i != unknown]
    spare_counts = [_spares(nodes[i]) for i in named]
    pool = _REVERSE_LETTERS if reverse else string.ascii_letters
    if len(named) + sum(spare_counts) > len(pool):
        return None
    drawn = iter(rng.sample(pool, len(named) + sum(spare_counts)))
    letters = {i: next(drawn) for i in named}
    spares = {i: [next(drawn) for _ in range(count)] for i, count in zip(named, spare_counts)}
    if reverse:
        letters[unknown] = UNKNOWN
    statements = _statements(nodes, names, unknown, bug_compat)
    steps = []
    for i in order:
        node = nodes[i]
        if i == unknown:
            steps.append(f"Define {names.name(node)} as {UNKNOWN}; we don't know its value yet but will find it out later.")
            continue
        steps.append(_step(i, node, nodes, names, letters, spares[i], forms if i in depends else None))
    gold = tuple(GoldNode(normalize_name(names.name(nodes[i])),
                          tuple(normalize_name(names.name(nodes[p])) for p in nodes[i].parents), nodes[i].value)
                 for i in order)
    if reverse:
        given, form, a = nodes[query].value, forms[query], forms[query].a
        reference = names.ref(nodes[query])
        statements.append(f"{reference[0].upper()}{reference[1:]} equals {given}.")
        steps.insert(0, REVERSE_PREAMBLE)
        steps.append(
            f"We know {letters[query]} = {given}, so we have {form} = {given} and we solve it through the "
            f"following steps: Simplifying the equation: {form} = {given}. Move all terms to one side: "
            f"{_Linear(a, form.b - given)} = 0. Isolate the term with {UNKNOWN}: {a}*{UNKNOWN} = {given - form.b}. "
            f"Divide both sides by {a}: {UNKNOWN} = {given - form.b} / {a}. Solution: {UNKNOWN} = {nodes[unknown].value}.")
        asked, answer = nodes[unknown], nodes[unknown].value
    else:
        asked, answer = nodes[query], nodes[query].value
    rng.shuffle(statements)
    steps.append(f"Answer: {answer}.")
    return Problem(op=op, context=ctx.id, style=STYLE, problem_text=" ".join(statements),
                   question=names.question(asked), solution_text=" ".join(steps), answer=answer, nodes=gold,
                   seed=seed)
