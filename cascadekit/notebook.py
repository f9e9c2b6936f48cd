"""Helpers for the first cells of every chapter notebook.

Each chapter starts with a papermill ``parameters`` cell (scale, seed, out_dir,
overrides) and then calls :func:`start_chapter`, which resolves the profile,
prints it with the stack versions and device, and makes the output folder.
:func:`show_source` displays a library function's source, so the notebook
teaches the code that actually runs instead of a pasted copy.
"""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Callable, Mapping

from cascadekit.envinfo import describe_environment
from cascadekit.profiles import Profile, load_profile


def start_chapter(scale: str, seed: int, out_dir: str | Path, overrides: Mapping[str, Any] | None = None) -> Profile:
    """Resolve and print the profile, the environment's short form, and create ``out_dir``."""
    profile = load_profile(scale, {"seed": seed, **dict(overrides or {})})
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    print(profile.summary())
    print(describe_environment().short())
    return profile


def show_source(obj: Callable | type) -> Any:
    """Display the source of a library function or class as a highlighted code block."""
    from IPython.display import Markdown

    module = inspect.getmodule(obj)
    where = f"{module.__name__}.{obj.__qualname__}" if module else obj.__qualname__
    return Markdown(f"`{where}`\n\n```python\n{inspect.getsource(obj)}```")
