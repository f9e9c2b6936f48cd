"""Draw a problem's gold dependency graph with matplotlib (no graph library needed).

Nodes sit in layers by depth (a node's layer is one more than its deepest
parent), the queried quantity highlighted; arrows run from parent to child.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from cascadekit.world.paper import asked_node
from cascadekit.world.render import Problem

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def layers(problem: Problem) -> dict[str, int]:
    """Depth of every gold node: 0 for nodes without parents."""
    depth: dict[str, int] = {}
    for node in problem.nodes:  # solution order is topological
        depth[node.name] = 1 + max((depth[p] for p in node.parents if p in depth), default=-1)
    return depth


def draw_graph(problem: Problem, ax=None, max_label: int = 30) -> Figure:
    """A layered drawing of the gold graph, values in the labels."""
    import matplotlib.pyplot as plt

    depth = layers(problem)
    by_layer: dict[int, list[str]] = {}
    for name, d in depth.items():
        by_layer.setdefault(d, []).append(name)
    pos = {name: (d, i - (len(names) - 1) / 2) for d, names in by_layer.items() for i, name in enumerate(names)}
    if ax is None:
        width = 2.6 * (max(by_layer) + 1) + 1
        height = 1.1 * max(len(v) for v in by_layer.values()) + 1
        _, ax = plt.subplots(figsize=(min(width, 14), min(height, 9)))
    values = {node.name: node.value for node in problem.nodes}
    for node in problem.nodes:
        for parent in node.parents:
            ax.annotate("", xy=pos[node.name], xytext=pos[parent],
                        arrowprops={"arrowstyle": "-|>", "color": "0.3", "lw": 1.2, "shrinkA": 28, "shrinkB": 28}, zorder=3)
    query = problem.nodes[asked_node(problem)].name  # a reverse-mode problem asks for its unknown
    for name, (x, y) in pos.items():
        label = name if len(name) <= max_label else name[: max_label - 1] + "…"
        ax.text(x, y, f"{label}\n= {values[name]}", ha="center", va="center", fontsize=8,
                bbox={"boxstyle": "round", "fc": "#ffd8a8" if name == query else "#d0ebff", "ec": "0.4"})
    ax.set_xlim(-0.7, max(by_layer) + 0.7)
    ax.set_ylim(min(y for _, y in pos.values()) - 0.8, max(y for _, y in pos.values()) + 0.8)
    ax.set_axis_off()
    ax.set_title(f"op = {problem.op}, context {problem.context}: {len(problem.nodes)} quantities, answer {problem.answer}")
    return ax.figure
