"""How the kit writes numbers and op ranges in its tables and prose.

Two small rules every renderer shares, so that a table never says what its
numbers do not: a value that rounds to zero reads ``0.000``, never ``-0.000``
(a negative zero looks like a drop where there is none; the verdict beside it
comes from the unrounded interval), and a band of one op reads ``op 4``, not
``ops 4-4``.
"""
from __future__ import annotations

import re
import string
from typing import Any, Mapping


def fixed(value: float, digits: int = 3) -> str:
    """``value`` with ``digits`` decimals, never a negative zero: ``fixed(-0.0004)`` is ``0.000``."""
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("-") and not text.strip("-0.") else text


def op_span(lo: int, hi: int) -> str:
    """An inclusive band of op counts as prose: ``op 4`` for one op, ``ops 4-5`` for several."""
    return f"op {lo}" if lo == hi else f"ops {lo}-{hi}"


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


def fill(template: str, data: Mapping[str, Any]) -> str:
    """``template`` with every ``{path:spec}`` field filled from ``data`` by :func:`lookup` (``{{``/``}}``: braces).

    How chapters tell their committed run in prose, every number read from its metrics, never typed.
    """
    return _PathFormatter().vformat(template, (), {"data": data})
