"""Small ipywidgets explorers that degrade to static output when headless.

Each explorer first prints its output for the default values, so an executed
notebook (papermill, the book) shows something useful, then displays the
interactive controls, which only come alive in a live Jupyter front end.

Under ``cascadekit run`` (which sets :data:`HEADLESS_ENV` for its kernels) the
controls are not created at all: a live ``interactive`` widget in a headless
kernel can leave nbclient waiting forever for the cell to finish
(jupyter/nbclient#312); the course's test run hung that way.
"""
from __future__ import annotations

import os
from typing import Callable

from cascadekit.world import CONTEXTS, STYLES, generate_problem

#: Set (to any non-empty value) in a kernel that no one will interact with.
HEADLESS_ENV = "CASCADEKIT_HEADLESS"


def show_problem(op: int, context: str, seed: int, style: str) -> None:
    """Print a problem, its question and gold solution."""
    problem = generate_problem(op=op, context=context, seed=seed, style=style)
    print(f"[op={problem.op} context={problem.context} style={style} answer={problem.answer}]")
    print("PROBLEM: ", problem.problem_text)
    print("QUESTION:", problem.question)
    print("SOLUTION:", problem.solution_text)


def _interactive(fn: Callable[..., None], defaults: dict, **controls) -> None:
    from IPython.display import display

    fn(**defaults)
    if os.environ.get(HEADLESS_ENV):
        return
    try:
        import ipywidgets as widgets
    except ImportError:  # the notebooks extra is not installed: static output only
        return
    display(widgets.interactive(fn, **{k: c(widgets, defaults[k]) for k, c in controls.items()}))


def world_explorer(op: int = 4, context: str = "A", seed: int = 0, style: str = "compact", max_op: int = 20) -> None:
    """Pick op, context, seed and rendering style; see the problem and its gold solution."""
    _interactive(
        show_problem, {"op": op, "context": context, "seed": seed, "style": style},
        op=lambda w, v: w.IntSlider(value=v, min=2, max=max_op, description="op"),
        context=lambda w, v: w.Dropdown(options=sorted(CONTEXTS), value=v, description="context"),
        seed=lambda w, v: w.IntText(value=v, description="seed"),
        style=lambda w, v: w.ToggleButtons(options=list(STYLES), value=v, description="style"),
    )
