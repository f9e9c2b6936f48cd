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
* **kinds.** A copy (``equals the number of ...``, one edge), ``c plus`` / ``c
  times`` a quantity, the sum of two or three, the difference between two, ``c
  plus`` / ``c times`` the sum or the difference (with an intermediate letter),
  and totals of one to four quantities.
* **distractors.** Most problems state quantities the question does not need
  (about 70%, three on average when present, like the paper's data); they sit in
  places whose total the solution does not use, so no total silently covers them.
* **two modes, half each.** *Forward*: the solution defines every needed
  quantity in order, ``Define adult lions in Maple Zoo as q; so q = 3.``, with
  ``r = q = 3; so F = 2 * r = 2 * 3 = 6`` for a constant applied to a quantity.
  *Reverse*: one leaf is unknown (``... exists, and its number is greater than
  0``), a total's value is given, and the question asks for the unknown; the
  solution carries the unknown ``x`` through linear expressions to the given
  total and solves the equation.

The names and numbers are the kit's own (its three contexts' places and items);
the sentence and solution templates follow the paper's format. The gold graph
holds true values and true parents for both modes.
"""

from __future__ import annotations

import functools
import itertools
import random
import string
from dataclasses import dataclass

from cascadekit.world.contexts import Category, Context, get_context
from cascadekit.world.graph import MAX_VALUE
from cascadekit.world.render import GoldNode, Problem, normalize_name

STYLE = "paper"
MODES = ("forward", "reverse")
LEAF_VALUES = range(1, 5)
CONSTANTS = range(1, 5)
UNKNOWN = "x"
REVERSE_PREAMBLE = "The question is difficult, so we use equations to solve it."
_LETTERS = [c for c in string.ascii_letters if c != UNKNOWN]
_MAX_OPEN = 4
_ATTEMPTS = 400

# kind -> (quantity parents, has a constant); the op cost is parents + constant.
_KINDS: dict[str, tuple[tuple[int, ...], bool]] = {
    "copy": ((1,), False), "plus": ((1,), True), "times": ((1,), True),
    "sum": ((2, 3), False), "difference": ((2,), False),
    "plus_sum": ((2, 3), True), "times_sum": ((2, 3), True),
    "plus_difference": ((2,), True), "times_difference": ((2,), True),
    "total": ((1, 2, 3, 4), False),
}
_WEIGHTS = {"copy": 3, "plus": 3, "times": 3, "sum": 3, "difference": 2, "plus_sum": 1, "times_sum": 1,
            "plus_difference": 1, "times_difference": 1, "total": 4}
_LEAF_WEIGHT = 6
#: (kind, quantity parents, op cost, weight) for every derived node shape
_OPTIONS = tuple((kind, k, k + const, _WEIGHTS[kind]) for kind, (counts, const) in _KINDS.items() for k in counts)


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
    """The index of the gold node the question asks for: the unknown (first) in reverse mode, else the last."""
    return 0 if problem.solution_text.startswith(REVERSE_PREAMBLE) else len(problem.nodes) - 1


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
    open_: list[int] = []
    totalable: list[int] = []  # instance nodes no total holds yet: what a new total may sum
    remaining = op
    for _ in range(8 * op):  # a draw out of range is drawn again, a bounded number of times
        if not remaining:
            break
        m = len(open_)
        total_open = sum(i in open_ for i in totalable)
        choices, cumulative = _choices(remaining, m, min(len(nodes) - m, 4), total_open,
                                       min(len(totalable) - total_open, 4), final_total)
        if not choices:
            return None
        kind, k, used = rng.choices(choices, cum_weights=cumulative)[0]
        if kind == "leaf":
            nodes.append(_Node("leaf", (), None, rng.choice(LEAF_VALUES)))
            open_.append(len(nodes) - 1)
            totalable.append(len(nodes) - 1)
            remaining -= 1
            continue
        allowed = totalable if kind == "total" else range(len(nodes))
        pool_open = [i for i in allowed if i in open_]
        pool_used = [i for i in allowed if i not in open_]
        parents = tuple(rng.sample(pool_open, used) + rng.sample(pool_used, k - used))
        node = _make(kind, parents, rng.choice(CONSTANTS) if _KINDS[kind][1] else None, nodes)
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
             final_total: bool) -> tuple[tuple[tuple[str, int, int], ...], tuple[int, ...]]:
    """The steps a walk may take from its state, with cumulative weights: (kind, parents, open parents among them).

    ``reusable`` and ``total_free`` (nodes that are not open, for any node or for a
    total) are capped at 4, the most parents a node takes.
    """
    choices: list[tuple[str, int, int]] = []
    weights: list[int] = []
    if m < _MAX_OPEN and remaining - 1 >= m + 1:
        choices.append(("leaf", 0, 0))
        weights.append(_LEAF_WEIGHT)
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
                weights.append(weight)
    return tuple(choices), tuple(itertools.accumulate(weights))


def _make(kind: str, parents: tuple[int, ...], const: int | None, nodes: list[_Node]) -> _Node:
    values = [nodes[p].value for p in parents]
    if "difference" in kind and values[0] < values[1]:
        parents, values = parents[::-1], values[::-1]  # the larger first: no negative quantities
    return _Node(kind, parents, const, _value(kind, values, const))


def _in_range(node: _Node) -> bool:
    return 0 <= node.value <= MAX_VALUE


def _distractors(nodes: list[_Node], rng: random.Random) -> None:
    """Append quantities the question does not need: leaves, or derived from any earlier quantity."""
    if rng.random() >= 0.7:
        return
    for _ in range(rng.randint(1, 6)):
        kinds = ["leaf"] * 3 + [k for k in _KINDS if k != "total"]
        kind = rng.choice(kinds)
        if kind == "leaf":
            nodes.append(_Node("leaf", (), None, rng.choice(LEAF_VALUES)))
            continue
        k = rng.choice(_KINDS[kind][0])
        if k > len(nodes):
            continue
        node = _make(kind, tuple(rng.sample(range(len(nodes)), k)),
                     rng.choice(CONSTANTS) if _KINDS[kind][1] else None, nodes)
        if _in_range(node):
            nodes.append(node)


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


def _step(i: int, node: _Node, nodes: list[_Node], names: _Names, letters: dict[int, str], spare: str,
          forms: list[_Linear] | None) -> str:
    """One solution step; ``forms`` (reverse mode) writes the unknown's descendants in ``x``."""
    letter = letters[i]
    head = f"Define {names.name(node)} as {letter}; "
    form = (lambda j: str(forms[j])) if forms else (lambda j: str(nodes[j].value))
    if node.kind == "leaf":
        return f"{head}so {letter} = {node.value}."
    parents = [letters[p] for p in node.parents]
    shown = [form(p) for p in node.parents]
    c = node.const
    if node.kind in ("copy", "total", "sum", "difference"):
        if len(parents) == 1:
            return f"{head}so {letter} = {parents[0]} = {form(i)}."
        symbol = " - " if node.kind == "difference" else " + "
        return f"{head}so {letter} = {symbol.join(parents)} = {symbol.join(shown)} = {form(i)}."
    if node.kind in ("plus", "times"):
        inner = f"{spare} = {parents[0]} = {shown[0]}; "
        inner_value = shown[0]
    else:
        symbol = " - " if "difference" in node.kind else " + "
        inner_form = _inner_form(node, nodes, forms)
        inner = f"{spare} = {symbol.join(parents)} = {symbol.join(shown)} = {inner_form}; "
        inner_value = inner_form
    if node.kind.startswith("plus"):
        return f"{head}{inner}so {letter} = {c} + {spare} = {c} + {inner_value} = {form(i)}."
    if forms and forms[i].a:
        return f"{head}{inner}so {letter} = {c} * {spare} = ({c}) * ({inner_value}) = {form(i)}."
    return f"{head}{inner}so {letter} = {c} * {spare} = {c} * {inner_value} = {form(i)}."


def _inner_form(node: _Node, nodes: list[_Node], forms: list[_Linear] | None) -> str:
    """The sum or difference inside a ``c plus`` / ``c times`` node, as a number or in ``x``."""
    values = [nodes[p].value for p in node.parents]
    inner = values[0] - values[1] if "difference" in node.kind else sum(values)
    if not forms:
        return str(inner)
    parts = [forms[p] for p in node.parents]
    a = parts[0].a - parts[1].a if "difference" in node.kind else sum(f.a for f in parts)
    b = parts[0].b - parts[1].b if "difference" in node.kind else sum(f.b for f in parts)
    return str(_Linear(a, b))


def _ancestors(nodes: list[_Node], target: int) -> set[int]:
    seen, stack = {target}, [target]
    while stack:
        for p in nodes[stack.pop()].parents:
            if p not in seen:
                seen.add(p)
                stack.append(p)
    return seen


def _reverse_unknown(nodes: list[_Node], solution: int, rng: random.Random) -> tuple[int, list[_Linear]] | None:
    """A leaf to make unknown: every quantity depending on it rises with it, so the equation solves.

    A difference never subtracts a quantity that depends on the unknown, no
    quantity depending on it may lose it (``a = 0``), and the given total is
    positive: the solution writes each one in ``x`` until the equation is solved.
    """
    leaves = [i for i in range(solution) if nodes[i].kind == "leaf"]
    rng.shuffle(leaves)
    for leaf in leaves:
        forms = _forms(nodes[: solution + 1], leaf)
        depends = {leaf}
        for i in range(leaf + 1, solution + 1):
            if depends.intersection(nodes[i].parents):
                depends.add(i)
        if solution in depends and nodes[solution].value > 0 and all(forms[i].a > 0 for i in depends) and not any(
                "difference" in nodes[i].kind and nodes[i].parents[1] in depends for i in depends):
            return leaf, forms
    return None


def generate(op: int, context: str, rng: random.Random, seed: int | None = None, mode: str | None = None) -> Problem:
    """One ``paper`` problem of official op ``op``; ``mode`` forward or reverse (None: a coin flip)."""
    mode = mode or rng.choice(MODES)
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
    ctx = get_context(context)
    for _ in range(_ATTEMPTS):
        problem = _try(op, ctx, rng, seed, mode)
        if problem is not None:
            return problem
    raise RuntimeError(f"no paper problem with op={op} found in {_ATTEMPTS} attempts")  # pragma: no cover


def _try(op: int, ctx: Context, rng: random.Random, seed: int | None, mode: str) -> Problem | None:
    reverse = mode == "reverse"
    nodes = _structure(op, rng, final_total=reverse)
    if nodes is None:
        return None
    query = len(nodes) - 1
    unknown, forms = None, None
    if reverse:
        found = _reverse_unknown(nodes, query, rng)
        if found is None:
            return None
        unknown, forms = found
    _distractors(nodes, rng)
    category = rng.choice(ctx.categories)
    places = _place(nodes, ctx, category, rng)
    if places is None:
        return None
    names = _Names(category, places)
    order = list(range(query + 1))
    if reverse:
        order.remove(unknown)
        order.insert(0, unknown)
    spares = sum(nodes[i].kind not in ("leaf", "copy", "total", "sum", "difference") for i in order)
    if len(order) - reverse + spares > len(_LETTERS):
        return None
    drawn = rng.sample(_LETTERS if reverse else string.ascii_letters, len(order) - reverse + spares)
    letters = dict(zip([i for i in order if i != unknown], drawn))
    if reverse:
        letters[unknown] = UNKNOWN
    spare_letters = iter(drawn[len(order) - reverse:])
    statements = [_statement(n, names, nodes) for i, n in enumerate(nodes) if n.kind != "total" and i != unknown]
    steps = []
    for i in order:
        node = nodes[i]
        if i == unknown:
            steps.append(f"Define {names.name(node)} as {UNKNOWN}; we don't know its value yet but will find it out later.")
            statements.append(f"The number of {names.name(node)} exists, and its number is greater than 0.")
            continue
        spare = next(spare_letters) if node.kind not in ("leaf", "copy", "total", "sum", "difference") else ""
        steps.append(_step(i, node, nodes, names, letters, spare, forms if forms and forms[i].a else None))
    gold = tuple(GoldNode(normalize_name(names.name(nodes[i])),
                          tuple(normalize_name(names.name(nodes[p])) for p in nodes[i].parents), nodes[i].value)
                 for i in order)
    if reverse:
        given, form, a = nodes[query].value, forms[query], forms[query].a
        statements.append(f"The {names.name(nodes[query])} equals {given}.")
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
