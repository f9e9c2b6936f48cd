"""Naming a graph's quantities in a context and writing it out as text.

The same graph gives the same arithmetic in every context and style; only the
words change. A rendered problem has three parts, as in the paper:

* the problem: one statement per non-abstract node, shuffled
  ("The number of adult lions in Maple Zoo equals 3 more than ...");
* the question about the last node ("How many adult lions are in Maple Zoo?");
* the solution: one step per node in topological order,
  ``Define <quantity> as <letter>; so <letter> = <expr> = <value>.``, with an
  intermediate letter for a scaled or shifted sum, then ``Answer: <n>.``

Three styles here spell the names: ``full`` as the paper does ("the number of adult
lions in Maple Zoo"), ``compact`` with shorter words ("lions in Maple"), and
``minimal`` for the CPU-sized toy profile: one place per problem, left unnamed
("lions"), and steps that name their quantities instead of going through letters:
``lions = 3 * tigers = 3 * 4 = 12.``

The kit departs from the paper here on purpose, after measuring. A 1M-parameter
model pretrained on 16M compact tokens copied items, numbers and letters but bound
items to the wrong one of a problem's three places; with one unnamed place it
named every quantity right and got the answers right (answer-only pass@1 0.98 at
op 2 and 0.44 at op 5) but never copied a letter from ``as F`` to ``so F``, so no
step's dependencies could be read. The letters are only handles; naming the
parents directly keeps what the findings are about, the dependency graph and
each context's categories, and drops a copying skill the toy model lacks.

The gold graph (each node's normalized name, parents and value) travels with the
problem, so the judge can check any solution from a JSONL record alone.
"""

from __future__ import annotations

import hashlib
import random
import re
import string
from dataclasses import dataclass
from typing import Any, Mapping

from cascadekit.world.contexts import Context, Name, get_context
from cascadekit.world.graph import Graph, Node

#: Renderings of the one graph :func:`cascadekit.world.graph.sample_graph` draws for a seed.
SHARED_GRAPH_STYLES = ("full", "compact", "minimal")
#: Every rendering; ``paper`` draws its own graphs (:mod:`cascadekit.world.paper`).
STYLES = (*SHARED_GRAPH_STYLES, "paper", "paper-official-bug")  # the paper renderings: cascadekit.world.paper
#: Places a problem spreads over: three in the paper-like styles; one in ``minimal``,
#: where the single place goes unnamed (more only when a huge graph needs them).
PLACES_PER_PROBLEM = {"full": 3, "compact": 3, "minimal": 1}
_LETTERS = string.ascii_lowercase + string.ascii_uppercase


def check_style(style: str) -> None:
    if style not in STYLES:
        raise ValueError(f"unknown style {style!r}: use one of {', '.join(STYLES)}")


def normalize_name(text: str) -> str:
    """The canonical form of a quantity name: lower case, single spaces, no leading "the"."""
    words = re.sub(r"[^0-9a-z]+", " ", text.lower()).split()
    if words and words[0] == "the":
        words = words[1:]
    return " ".join(words)


def normalize_text(text: str) -> str:
    """Lower case with single spaces: the form hashed for deduplication."""
    return " ".join(text.lower().split())


@dataclass(frozen=True)
class GoldNode:
    """One gold solution step: the quantity, the quantities it uses, its value."""

    name: str
    parents: tuple[str, ...]
    value: int


@dataclass(frozen=True)
class Problem:
    """A rendered problem with its gold graph (``nodes`` in solution order, query last)."""

    op: int
    context: str
    style: str
    problem_text: str
    question: str
    solution_text: str
    answer: int
    nodes: tuple[GoldNode, ...]
    seed: int | None = None

    @property
    def rl_prompt(self) -> str:
        """The training text up to and including ``<solution>``: what a policy continues."""
        return f"<question> {self.problem_text} {self.question} </question> <solution>"

    @property
    def training_text(self) -> str:
        return f"{self.rl_prompt} {self.solution_text} </solution> <answer> {self.answer} </answer>"

    @property
    def key(self) -> str:
        """Hash of the normalized (problem, question, solution): equal keys are duplicates."""
        parts = (self.problem_text, self.question, self.solution_text)
        return _digest("\x1f".join(normalize_text(p) for p in parts))

    @property
    def graph_key(self) -> str:
        """Like ``key`` but blind to the order of the statements: one per graph and naming."""
        statements = sorted(normalize_text(s) for s in re.split(r"(?<=\.)\s+", self.problem_text))
        return _digest("\x1f".join([*statements, normalize_text(self.question),
                                    normalize_text(self.solution_text)]))

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op, "context": self.context, "style": self.style,
            "problem_text": self.problem_text, "question": self.question,
            "solution_text": self.solution_text, "answer": self.answer,
            "nodes": [{"name": n.name, "parents": list(n.parents), "value": n.value} for n in self.nodes],
            "seed": self.seed,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Problem:
        """The inverse of :meth:`to_dict`; ValueError naming the field for a malformed record.

        Types are checked, not coerced: a record is data from a file, possibly
        hostile, and a gold value of ``"12"`` or ``12.5`` is a broken record.
        """
        if not isinstance(d, Mapping):
            raise ValueError(f"a problem record is a JSON object, not {type(d).__name__}")
        try:
            nodes = d["nodes"]
            if not isinstance(nodes, list) or not all(isinstance(n, Mapping) for n in nodes):
                raise ValueError("'nodes' must be a list of objects")
            gold = tuple(GoldNode(_field(n, "name", str), tuple(_strings(n["parents"], "parents")),
                                  _field(n, "value", int)) for n in nodes)
            seed = d.get("seed")
            return cls(op=_field(d, "op", int), context=_field(d, "context", str), style=_field(d, "style", str),
                       problem_text=_field(d, "problem_text", str), question=_field(d, "question", str),
                       solution_text=_field(d, "solution_text", str), answer=_field(d, "answer", int),
                       nodes=gold, seed=None if seed is None else _field(d, "seed", int))
        except KeyError as err:
            raise ValueError(f"missing field {err}") from None


def _field(d: Mapping[str, Any], key: str, kind: type) -> Any:
    value = d[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"field {key!r} must be {'an integer' if kind is int else 'a string'}, "
                         f"got {type(value).__name__}")
    return value


def _strings(values: Any, key: str) -> list[str]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ValueError(f"field {key!r} must be a list of strings")
    return values


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


@dataclass(frozen=True)
class Quantity:
    """What a node counts: an item in a place, or (abstract) a whole category in a place."""

    place: Name
    thing: Name
    abstract: bool

    def name(self, style: str, with_place: bool = True) -> str:
        place, thing = self.place.spelled(style), self.thing.spelled(style)
        if style == "full":
            prefix = "the total number of" if self.abstract else "the number of"
            return f"{prefix} {thing} in {place}"
        where = f" in {place}" if with_place else ""
        return f"{'all ' if self.abstract else ''}{thing}{where}"

    def question(self, style: str, with_place: bool = True) -> str:
        place, thing = self.place.spelled(style), self.thing.spelled(style)
        if style == "full":
            return f"How many {thing} are in {place}{' in total' if self.abstract else ''}?"
        where = f" in {place}" if with_place else ""
        return f"How many {thing}{where}{' in all' if self.abstract else ''}?"


def assign_quantities(graph: Graph, context: Context, rng: random.Random,
                      min_places: int = 3) -> list[Quantity]:
    """Name every node so that each total sums exactly the instances of its category and place.

    A total gets its own (place, category) pair and its children distinct items of
    that category there; every other instance gets an item whose (place, category)
    belongs to no total, so no total silently covers a quantity it does not sum.
    """
    places = rng.sample(context.places, _places_needed(graph, context, min_places))
    pairs = [(p, c) for p in places for c in context.categories]
    rng.shuffle(pairs)
    quantities: dict[int, Quantity] = {}
    for index, node in enumerate(graph.nodes):
        if node.is_abstract:
            place, category = pairs.pop()
            quantities[index] = Quantity(place, category.name, True)
            for child, item in zip(node.parents, rng.sample(category.items, len(node.parents))):
                quantities[child] = Quantity(place, item, False)
    free = [(p, item) for p, c in pairs for item in c.items]
    rest = [i for i in range(len(graph.nodes)) if i not in quantities]
    for index, (place, item) in zip(rest, rng.sample(free, len(rest))):
        quantities[index] = Quantity(place, item, False)
    return [quantities[i] for i in range(len(graph.nodes))]


def _places_needed(graph: Graph, context: Context, min_places: int) -> int:
    """``min_places``, or more when a huge graph needs more (place, category) pairs or items."""
    totals = sum(node.is_abstract for node in graph.nodes)
    claimed = sum(len(node.parents) for node in graph.nodes if node.is_abstract)
    unclaimed = len(graph.nodes) - totals - claimed
    n_categories, n_items = len(context.categories), min(len(c.items) for c in context.categories)
    places = min_places
    while places * n_categories < totals or (places * n_categories - totals) * n_items < unclaimed:
        places += 1
    return places


def _listing(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _statement(node: Node, name: str, parent_names: list[str]) -> str | None:
    """The problem sentence defining a node; None for a total (its meaning is the category)."""
    c = node.const
    body = {
        "leaf": lambda: f"{node.value}",
        "plus": lambda: f"{c} more than {parent_names[0]}",
        "times": lambda: f"{c} times {parent_names[0]}",
        "difference": lambda: f"the difference of {parent_names[0]} and {parent_names[1]}",
        "product": lambda: f"the product of {parent_names[0]} and {parent_names[1]}",
        "sum": lambda: f"the sum of {_listing(parent_names)}",
        "scaled_sum": lambda: f"{c} times the sum of {_listing(parent_names)}",
        "shifted_sum": lambda: f"{c} more than the sum of {_listing(parent_names)}",
        "total": lambda: None,
    }[node.kind]()
    if body is None:
        return None
    return f"{name[0].upper()}{name[1:]} equals {body}."


def _expressions(node: Node, letters: list[str], values: list[str]) -> tuple[str, str]:
    """A node's right-hand side with letters, then with the letters' values."""
    c = node.const
    if node.kind == "plus":
        return f"{letters[0]} + {c}", f"{values[0]} + {c}"
    if node.kind == "times":
        return f"{c} * {letters[0]}", f"{c} * {values[0]}"
    symbol = {"difference": " - ", "product": " * "}.get(node.kind, " + ")
    return symbol.join(letters), symbol.join(values)


def _step(node: Node, name: str, letter: str, parents: list[tuple[str, int]], spare: str) -> str:
    """One solution step; ``spare`` is the intermediate letter a scaled or shifted sum uses."""
    head = f"Define {name} as {letter}; "
    if node.kind == "leaf":
        return f"{head}so {letter} = {node.value}."
    letters = [p for p, _ in parents]
    values = [str(v) for _, v in parents]
    c = node.const
    if node.kind in ("scaled_sum", "shifted_sum"):
        s = sum(v for _, v in parents)
        inner = f"{spare} = {' + '.join(letters)} = {' + '.join(values)} = {s}; "
        outer = f"{c} * {spare} = {c} * {s}" if node.kind == "scaled_sum" else f"{spare} + {c} = {s} + {c}"
        return f"{head}{inner}so {letter} = {outer} = {node.value}."
    symbolic, numeric = _expressions(node, letters, values)
    return f"{head}so {letter} = {symbolic} = {numeric} = {node.value}."


def _named_step(node: Node, name: str, parents: list[tuple[str, int]]) -> str:
    """One ``minimal`` solution step: the quantity, its parents by name, then numbers."""
    if node.kind == "leaf":
        return f"{name} = {node.value}."
    names = [p for p, _ in parents]
    values = [str(v) for _, v in parents]
    c = node.const
    if node.kind in ("scaled_sum", "shifted_sum"):
        s = sum(v for _, v in parents)
        if node.kind == "scaled_sum":
            return (f"{name} = {c} * ({' + '.join(names)}) = {c} * ({' + '.join(values)}) "
                    f"= {c} * {s} = {node.value}.")
        return f"{name} = {' + '.join(names)} + {c} = {' + '.join(values)} + {c} = {s} + {c} = {node.value}."
    symbolic, numeric = _expressions(node, names, values)
    return f"{name} = {symbolic} = {numeric} = {node.value}."


def _letters(count: int, rng: random.Random) -> list[str]:
    """Distinct variable names: single letters, then letter+digit if a graph is huge."""
    pool = list(_LETTERS)
    if count > len(pool):
        pool += [f"{a}{d}" for d in range(1, 10) for a in _LETTERS]
    return rng.sample(pool, count)


def render_problem(graph: Graph, context: str, style: str, rng: random.Random,
                   seed: int | None = None) -> Problem:
    """Name, phrase and shuffle a graph into a Problem (deterministic given ``rng``).

    The ``paper`` rendering draws its own graphs (:mod:`cascadekit.world.paper`):
    ask :func:`cascadekit.world.generate_problem` for it.
    """
    check_style(style)
    if style not in PLACES_PER_PROBLEM:
        raise ValueError(f"the {style!r} rendering draws its own graphs: use generate_problem(..., style={style!r})")
    ctx = get_context(context)
    quantities = assign_quantities(graph, ctx, rng, PLACES_PER_PROBLEM[style])
    with_place = style != "minimal" or len({q.place for q in quantities}) > 1
    names = [q.name(style, with_place) for q in quantities]
    spares = sum(n.kind in ("scaled_sum", "shifted_sum") for n in graph.nodes)
    letters = _letters(len(graph.nodes) + spares, rng) if style != "minimal" else []  # minimal names parents
    spare_letters = iter(letters[len(graph.nodes):])
    statements, steps, gold = [], [], []
    for index, node in enumerate(graph.nodes):
        parent_names = [names[p] for p in node.parents]
        sentence = _statement(node, names[index], parent_names)
        if sentence is not None:
            statements.append(sentence)
        if style == "minimal":
            steps.append(_named_step(node, names[index], [(names[p], graph.nodes[p].value) for p in node.parents]))
        else:
            spare = next(spare_letters) if node.kind in ("scaled_sum", "shifted_sum") else ""
            parents = [(letters[p], graph.nodes[p].value) for p in node.parents]
            steps.append(_step(node, names[index], letters[index], parents, spare))
        gold.append(GoldNode(normalize_name(names[index]),
                             tuple(normalize_name(n) for n in parent_names), node.value))
    rng.shuffle(statements)
    steps.append(f"Answer: {graph.answer}.")
    return Problem(op=graph.op, context=ctx.id, style=style, problem_text=" ".join(statements),
                   question=quantities[-1].question(style, with_place), solution_text=" ".join(steps),
                   answer=graph.answer, nodes=tuple(gold), seed=seed)
