"""Forward generation of a dependency DAG with an exact operation count.

A problem is a DAG of quantities. Leaves are given numbers; every other node is
computed from earlier nodes (its *parents*) and possibly one small constant:

======================  =======================  =====================
kind                    value                    edges (op count)
======================  =======================  =====================
``plus``                ``p + c``                2 (parent, constant)
``times``               ``c * p``                2
``difference``          ``p1 - p2``              2
``product``             ``p1 * p2``              2
``sum``                 ``p1 + ... + pk``        k
``total`` (abstract)    ``p1 + ... + pk``        k
``scaled_sum``          ``c * (p1 + ... + pk)``  k + 1
``shifted_sum``         ``(p1 + ... + pk) + c``  k + 1
======================  =======================  =====================

``op(G)`` is the number of edges, constants included, exactly as in the paper's
``op(G) = |E|``. A ``total`` is an *abstract* parameter: the sum over a category
(all mammals in a zoo) of the instance quantities the problem mentions; it has
no statement of its own, the reader must know which items belong to it.

Generation is forward: nodes are drawn in topological order, each one spending
part of the remaining edge budget, so the final op count is exact by
construction. Every node except the last must feed a later one, so the last
node (the question) depends on all of them: the *solution graph* is the whole
graph. To keep that reachable, at most a few nodes may be "open" (not yet used)
at a time, and the remaining budget must be able to close them.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

MIN_OP = 2
MAX_OP = 30
MAX_VALUE = 1000
CONSTANTS = range(1, 5)
LEAF_VALUES = range(1, 11)
MAX_PARENTS = 4

# Node kinds by the number of edges they spend: (kind, quantity parents, weight).
_KINDS_BY_EDGES: dict[int, tuple[tuple[str, int, int], ...]] = {
    2: (("plus", 1, 3), ("times", 1, 3), ("difference", 2, 3), ("product", 2, 1),
        ("sum", 2, 3), ("total", 2, 2)),
    3: (("sum", 3, 2), ("total", 3, 2), ("scaled_sum", 2, 2), ("shifted_sum", 2, 2)),
    4: (("sum", 4, 1), ("total", 4, 2), ("scaled_sum", 3, 1), ("shifted_sum", 3, 1)),
}
_EDGE_WEIGHTS = {2: 6, 3: 3, 4: 2}
_WITH_CONSTANT = frozenset({"plus", "times", "scaled_sum", "shifted_sum"})


@dataclass(frozen=True)
class Node:
    """One quantity: a leaf (no parents) or a value computed from earlier nodes."""

    kind: str
    parents: tuple[int, ...]
    value: int
    const: int | None = None

    @property
    def edges(self) -> int:
        return len(self.parents) + (self.const is not None)

    @property
    def is_abstract(self) -> bool:
        return self.kind == "total"


@dataclass(frozen=True)
class Graph:
    """Nodes in topological order; the last one is the queried quantity."""

    nodes: tuple[Node, ...]

    @property
    def op(self) -> int:
        return sum(node.edges for node in self.nodes)

    @property
    def answer(self) -> int:
        return self.nodes[-1].value


def compute(kind: str, values: list[int], const: int | None) -> int:
    """The value of a node of ``kind`` from its parents' values (in order)."""
    if kind == "leaf":
        return values[0]
    if kind == "plus":
        return values[0] + const
    if kind == "times":
        return const * values[0]
    if kind == "difference":
        return values[0] - values[1]
    if kind == "product":
        return values[0] * values[1]
    if kind in ("sum", "total"):
        return sum(values)
    if kind == "scaled_sum":
        return const * sum(values)
    if kind == "shifted_sum":
        return sum(values) + const
    raise ValueError(f"unknown node kind {kind!r}")


def check_op(op: int) -> None:
    if not isinstance(op, int) or isinstance(op, bool) or not MIN_OP <= op <= MAX_OP:
        raise ValueError(f"op must be an integer from {MIN_OP} to {MAX_OP}, got {op!r}")


def sample_graph(op: int, rng: random.Random, attempts: int = 200) -> Graph:
    """A random graph with exactly ``op`` edges and every value in 0..MAX_VALUE."""
    check_op(op)
    for _ in range(attempts):
        graph = _try_sample(op, rng)
        if graph is not None:
            return graph
    raise RuntimeError(f"no graph with op={op} found in {attempts} attempts")  # pragma: no cover


def _open_capacity(remaining: int) -> int:
    """How many open nodes a remaining edge budget can still close (leaving one: the answer).

    Each later node with ``e`` edges closes at most ``e - 1`` open nodes net
    (it consumes up to ``e`` and opens itself); capped at 3 to keep graphs legible.
    """
    if remaining == 0:
        return 1
    return min(3, 1 + remaining - math.ceil(remaining / MAX_PARENTS))


class _Builder:
    """Mutable state of one forward generation attempt."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.nodes: list[Node] = []
        self.open: list[int] = []      # nodes that no later node uses yet
        self.claimed: set[int] = set()  # instance nodes already summed by a total

    def add(self, edges: int, remaining_after: int) -> bool:
        """Add one derived node spending ``edges`` edges; False if no kind fits."""
        must_close = max(0, len(self.open) + 1 - _open_capacity(remaining_after))
        options = [(kind, k) for kind, k, weight in _KINDS_BY_EDGES[edges]
                   for _ in range(weight) if k >= must_close]
        self.rng.shuffle(options)  # a weighted random order, duplicates skipped below
        for kind, k in dict.fromkeys(options):
            if self._try_kind(kind, k, must_close):
                return True
        return False

    def _may_feed(self, index: int, abstract: bool) -> bool:
        """A total sums instance quantities only, each belonging to one total at most."""
        node = self.nodes[index]
        return not abstract or (not node.is_abstract and index not in self.claimed)

    def _try_kind(self, kind: str, k: int, must_close: int) -> bool:
        rng = self.rng
        abstract = kind == "total"
        open_ok = [i for i in self.open if self._may_feed(i, abstract)]
        if len(open_ok) < must_close:
            return False
        parents: list[int | None] = rng.sample(open_ok, must_close)  # None: a new leaf
        reusable = [i for i in range(len(self.nodes))
                    if i not in self.open and self._may_feed(i, abstract)]
        while len(parents) < k:
            draw = rng.random()
            spare = [i for i in open_ok if i not in parents]
            reused = [i for i in reusable if i not in parents]
            if draw < 0.4 and spare:
                parents.append(rng.choice(spare))
            elif draw < 0.7 and reused:
                parents.append(rng.choice(reused))
            else:
                parents.append(None)
        pairs = [(p, rng.choice(LEAF_VALUES) if p is None else self.nodes[p].value) for p in parents]
        if kind == "difference" and pairs[0][1] < pairs[1][1]:
            pairs.reverse()  # the larger first, so the difference is never negative
        const = rng.choice(CONSTANTS) if kind in _WITH_CONSTANT else None
        value = compute(kind, [v for _, v in pairs], const)
        if not 0 <= value <= MAX_VALUE:
            return False
        indices = []
        for p, v in pairs:
            if p is None:
                self.nodes.append(Node("leaf", (), v))
                p = len(self.nodes) - 1
            indices.append(p)
        self.open = [i for i in self.open if i not in indices]
        if abstract:
            self.claimed.update(indices)
        self.nodes.append(Node(kind, tuple(indices), value, const))
        self.open.append(len(self.nodes) - 1)
        return True


def _try_sample(op: int, rng: random.Random) -> Graph | None:
    builder = _Builder(rng)
    remaining = op
    while remaining:
        allowed = [e for e in _EDGE_WEIGHTS if e == remaining or remaining - e >= MIN_OP]
        edges = rng.choices(allowed, weights=[_EDGE_WEIGHTS[e] for e in allowed])[0]
        remaining -= edges
        if not builder.add(edges, remaining):
            return None
    return Graph(tuple(builder.nodes))
