"""Tool calls: judge the model's ``<tool_call>`` against the gold call.

A call is right when the function name matches exactly and the arguments match
as JSON after type normalization, in the spirit of BFCL's AST checker: ``"5"``,
``5`` and ``5.0`` are the same number, strings compare stripped and case-folded,
lists keep their order, objects compare key by key. Missing and unexpected
arguments are both wrong. Several calls in one turn (parallel calls) match in any
order.
"""

from __future__ import annotations

import dataclasses
import re
import reprlib
from typing import Any

from cascadekit.chat.format import call_arguments, parse_assistant

__all__ = ["ToolVerdict", "normalize_value", "judge_tool_call", "verify_tool_calls"]


@dataclasses.dataclass(frozen=True)
class ToolVerdict:
    correct: bool
    reason: str


_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def normalize_value(value: Any) -> Any:
    """A canonical form for comparing argument values."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        text = value.strip()
        if _NUMBER.fullmatch(text) and len(text) < 40:
            return normalize_value(float(text))
        return text.casefold()
    if isinstance(value, int):
        return int(value)  # never through float: a 400-digit integer overflows it
    if isinstance(value, float):
        return int(value) if value.is_integer() else round(value, 9)  # inf and nan stay floats
    if isinstance(value, (list, tuple)):
        return [normalize_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): normalize_value(v) for k, v in value.items()}
    return repr(value)


def _short(value: Any) -> str:
    """A bounded repr of model-written data for a reason (no deep nesting, no megabytes)."""
    short = reprlib.Repr()
    short.maxstring = short.maxother = short.maxlong = 80
    try:
        return short.repr(value)
    except Exception:  # e.g. an integer beyond Python's digit limit
        return f"<unprintable {type(value).__name__}>"


#: A turn longer than this, or with more ``<tool_call>`` tags, is not judged: no gold
#: call list comes close, and parsing a million unclosed tags costs quadratic time.
MAX_TURN_CHARS = 1_000_000
MAX_CALLS = 64


def judge_tool_call(predicted: Any, gold: dict) -> ToolVerdict:
    """Compare one call ``{"name": ..., "arguments": {...}}`` with the gold call; never raises."""
    if not isinstance(predicted, dict) or not isinstance(predicted.get("name"), str):
        return ToolVerdict(False, "call is not an object with a name")
    if predicted["name"] != gold["name"]:
        return ToolVerdict(False, f"wrong function: {_short(predicted['name'])}, expected {gold['name']!r}")
    args, want = call_arguments(predicted), call_arguments(gold) or {}
    if args is None:
        return ToolVerdict(False, "arguments are not a JSON object")
    if missing := sorted(set(want) - set(args)):
        return ToolVerdict(False, f"missing argument(s): {', '.join(missing)}")
    if extra := sorted(set(args) - set(want)):
        shown = ", ".join(str(k)[:40] for k in extra[:5]) + (", ..." if len(extra) > 5 else "")
        return ToolVerdict(False, f"unexpected argument(s): {shown}")
    for key in sorted(want):
        try:
            same = normalize_value(args[key]) == normalize_value(want[key])
        except RecursionError:
            return ToolVerdict(False, f"argument {key!r} is nested too deeply")
        if not same:
            return ToolVerdict(False, f"argument {key!r}: got {_short(args[key])}, "
                                      f"expected {want[key]!r}")
    return ToolVerdict(True, "correct")


def verify_tool_calls(text: str, gold: list[dict]) -> ToolVerdict:
    """Judge the tool calls in an assistant turn against the gold calls (any order); never raises."""
    if isinstance(text, str) and len(text) > MAX_TURN_CHARS:
        return ToolVerdict(False, f"turn longer than {MAX_TURN_CHARS:,} characters: not judged")
    if isinstance(text, str) and text.count("<tool_call>") > MAX_CALLS:
        return ToolVerdict(False, f"more than {MAX_CALLS} <tool_call> tags: not judged")
    turn = parse_assistant(text)
    if not turn.well_formed:
        return ToolVerdict(False, f"malformed turn: {turn.reason}")
    calls = turn.tool_calls
    if not calls and gold:
        return ToolVerdict(False, "no tool call")
    if len(calls) != len(gold):
        return ToolVerdict(False, f"expected {len(gold)} call(s), got {len(calls)}")
    remaining = list(calls)
    for want in gold:
        verdicts = [judge_tool_call(call, want) for call in remaining]
        hit = next((i for i, v in enumerate(verdicts) if v.correct), None)
        if hit is None:
            closest = next((v for v in verdicts if not v.reason.startswith("wrong function")),
                           verdicts[0])
            return ToolVerdict(False, f"{want['name']}: {closest.reason}")
        remaining.pop(hit)
    return ToolVerdict(True, "correct" if gold else "correctly made no call")
