"""How the kit writes numbers and op ranges in its tables and prose.

Two small rules every renderer shares, so that a table never says what its
numbers do not: a value that rounds to zero reads ``0.000``, never ``-0.000``
(a negative zero looks like a drop where there is none; the verdict beside it
comes from the unrounded interval), and a band of one op reads ``op 4``, not
``ops 4-4``.
"""
from __future__ import annotations


def fixed(value: float, digits: int = 3) -> str:
    """``value`` with ``digits`` decimals, never a negative zero: ``fixed(-0.0004)`` is ``0.000``."""
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("-") and not text.strip("-0.") else text


def op_span(lo: int, hi: int) -> str:
    """An inclusive band of op counts as prose: ``op 4`` for one op, ``ops 4-5`` for several."""
    return f"op {lo}" if lo == hi else f"ops {lo}-{hi}"
