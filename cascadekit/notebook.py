"""Helpers for the first cells of every chapter notebook.

Each chapter starts with a papermill ``parameters`` cell (scale, seed, out_dir,
overrides) and then calls :func:`start_chapter`, which resolves the profile,
prints it with the stack versions and device, and makes the output folder.
:func:`show_source` displays a library function's source, so the notebook
teaches the code that actually runs instead of a pasted copy.
:func:`quote` and :func:`render` put committed measurements into prose, so a
number is never typed twice (``tests/test_notebook_numbers.py`` checks the rest).
"""
from __future__ import annotations

import inspect
import re
import string
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


def committed_or_run(run: Callable[[Any, Path], dict[str, Any]], config: Any, out_dir: str | Path,
                     retrain: bool = False) -> dict[str, Any]:
    """The chapter's committed toy run, or ``run(config, out_dir)``.

    A toy chapter trains for minutes to an hour on a laptop, so a course reads
    the committed run by default (the book shows the same one), and says so with
    the command and commit that made it. It runs afresh at any other scale, with
    overrides or another seed, when nothing is committed, or with ``retrain``.
    """
    from cascadekit.profiles import load_profile
    from cascadekit.results import load_metrics

    default = config.scale == "toy" and not config.overrides and config.profile.seed == load_profile("toy").seed
    committed = load_metrics(config.spec.folder) if default and not retrain else None
    if committed is None:
        return run(config, Path(out_dir))
    made = committed.get("produced_by", {})
    print(f"the committed toy run: {made.get('command', '?')} (commit {made.get('git_commit', '?')}); "
          f"set retrain = True in the parameters cell to run it again")
    return committed


def show_source(obj: Callable | type) -> Any:
    """Display the source of a library function or class as a highlighted code block."""
    from IPython.display import Markdown

    module = inspect.getmodule(obj)
    where = f"{module.__name__}.{obj.__qualname__}" if module else obj.__qualname__
    return Markdown(f"`{where}`\n\n```python\n{inspect.getsource(obj)}```")


_STEP = re.compile(r"([^.\[\]]+)|\[([^\]]*)\]")


def lookup(data: Any, path: str) -> Any:
    """The value at ``path`` in nested dicts and lists.

    Steps are dict keys separated by dots; ``[3]`` indexes a list and
    ``[key=value,...]`` picks the list's only dict whose fields equal those
    values (compared as numbers when both are numbers, else as text), e.g.
    ``runs.edge.evaluation.by_range[range=edge].pass@1`` or
    ``variants[b_share=0.01].after[op=3,context=B].pass@32``.
    """
    value = data
    for key, selector in _STEP.findall(path):
        try:
            if key:
                value = value[key]
            elif "=" not in selector:
                value = value[int(selector)]
            else:
                value = _select(value, dict(c.split("=", 1) for c in selector.split(",")))
        except (KeyError, IndexError, TypeError, ValueError) as error:
            raise KeyError(f"{path!r}: no {key or f'[{selector}]'} ({error})") from None
    return value


def _select(items: list[Mapping[str, Any]], wanted: Mapping[str, str]) -> Mapping[str, Any]:
    def equal(value: Any, text: str) -> bool:
        try:
            return float(value) == float(text)
        except (TypeError, ValueError):
            return str(value) == text

    matches = [item for item in items if all(f in item and equal(item[f], v) for f, v in wanted.items())]
    if len(matches) != 1:
        raise ValueError(f"{len(matches)} items match {dict(wanted)}")
    return matches[0]


class _PathFormatter(string.Formatter):
    """``{path:fmt}`` fields looked up with :func:`lookup` in the one mapping given."""

    def get_field(self, field_name: str, args: Any, kwargs: Mapping[str, Any]) -> tuple[Any, str]:
        return lookup(kwargs["data"], field_name), field_name


def quote(data: Mapping[str, Any], path: str, fmt: str = "") -> str:
    """One value of ``data`` as text: ``quote(toy, "runs.edge.prompts")`` or with ``fmt="{:.2f}"``."""
    value = lookup(data, path)
    return fmt.format(value) if fmt else str(value)


def render(template: str, data: Mapping[str, Any]) -> Any:
    """Markdown with every ``{path:spec}`` field filled from ``data`` (``{{`` and ``}}`` are literal braces).

    ``data`` is usually a chapter's committed metrics, merged with any values the
    cell computed (``{**toy, "verdict": ...}``). Returns an ``IPython.display.Markdown``,
    shown when it ends a cell, also under papermill; ``.data`` is the text.
    """
    from IPython.display import Markdown

    return Markdown(_PathFormatter().vformat(template, (), {"data": data}))
