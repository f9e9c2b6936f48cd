"""Math answers: the final ``\\boxed{n}`` after the think block, judged as an integer.

The paper's Math RL reward extracts the boxed answer that follows ``</think>``
and checks it with the AceMath verifier (symbolic equivalence). The kit's
problems have integer answers, so a strict integer comparison stands in for it:
"1,000", "+5" and "5.0" all equal 5, "5.5" is not an integer and is wrong.

Only the answer part counts: a ``\\boxed`` inside the reasoning is a draft, and a
turn whose think block never closes has no answer at all. Several boxed answers
that disagree are wrong ("hedging"), several that agree are fine.
"""

from __future__ import annotations

import dataclasses
import re

__all__ = ["BoxedVerdict", "answer_part", "extract_boxed", "normalize_integer", "think_left_open", "verify_boxed"]

_THINK_OPEN, _THINK_CLOSE, _END_OF_TURN = "<think>", "</think>", "<|im_end|>"


@dataclasses.dataclass(frozen=True)
class BoxedVerdict:
    correct: bool
    predicted: int | None
    reason: str


def answer_part(text: str) -> str:
    """The answer of a model turn: after its think block, before its end-of-turn; "" while the block is open.

    Chat markers are structure only where the chat format
    (:mod:`cascadekit.chat.format`) puts them: a think block that opens the turn
    (after whitespace at most) and ends at its first ``</think>``, and one
    ``<|im_end|>`` at the very end (trailing whitespace aside). Anywhere else they
    are content: a diff or a program may hold ``'</think>'`` or ``'<|im_end|>'``
    in its own lines. Unlike :func:`cascadekit.chat.format.parse_assistant`, which
    judges a whole turn's form, this never rejects: text before ``<think>`` makes
    the turn all answer.
    """
    opened = text.lstrip()
    if opened.startswith(_THINK_OPEN):
        closed = opened.find(_THINK_CLOSE, len(_THINK_OPEN))
        if closed < 0:
            return ""
        text = opened[closed + len(_THINK_CLOSE):]
    ended = text.rstrip()
    return ended[:-len(_END_OF_TURN)] if ended.endswith(_END_OF_TURN) else text


def think_left_open(text: str) -> bool:
    """Whether the turn opens a think block and never closes it (so it has no answer)."""
    opened = text.lstrip()
    return opened.startswith(_THINK_OPEN) and opened.find(_THINK_CLOSE, len(_THINK_OPEN)) < 0


def _closing_braces(text: str) -> dict[int, int]:
    """Position of each ``{`` -> the ``}`` that balances it, in one pass (unbalanced ones absent)."""
    closing, stack = {}, []
    for match in _BRACE.finditer(text):
        if match.group() == "{":
            stack.append(match.start())
        elif stack:
            closing[stack.pop()] = match.start()
    return closing


def extract_boxed(text: str) -> list[str]:
    """Contents of every ``\\boxed{...}`` in ``text`` (balanced braces), in order.

    Linear in the text: a scan from each ``\\boxed{`` to its closing brace would be
    quadratic on a model output of a million unclosed ``\\boxed{``.
    """
    starts = [match.end() for match in _BOXED.finditer(text)]
    if not starts:
        return []
    closing = _closing_braces(text)
    return [text[start:closing[start - 1]] for start in starts if start - 1 in closing]


_BOXED = re.compile(r"\\boxed\s*\{")
_BRACE = re.compile(r"[{}]")
_GROUPED = re.compile(r"[+-]?\d{1,3}(,\d{3})+")
_PLAIN = re.compile(r"[+-]?\d+(\.0*)?")


def normalize_integer(raw: str) -> int | None:
    """The integer a boxed answer denotes, or None if it is not one."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    s = raw if isinstance(raw, str) else str(raw)
    if len(s) > 1000:  # no integer is written that long
        return None
    s = s.strip().strip("$").replace("{,}", ",").replace("−", "-")
    for space in ("\\!", "\\,", "\\ ", " "):
        s = s.replace(space, "")
    s = re.sub(r"^\\(?:text|mathrm|mathbf)\{(.*)\}$", r"\1", s)
    if _GROUPED.fullmatch(s):
        s = s.replace(",", "")
    if len(s) > 64 or not _PLAIN.fullmatch(s):  # 64 digits: far below Python's int-parsing limit
        return None
    return int(s.split(".")[0])


def _short(text: str, limit: int = 80) -> str:
    """``repr(text)``, cut to ``limit`` characters: a reason quotes model text, never all of it."""
    shown = repr(text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def verify_boxed(text: str, expected: int | str) -> BoxedVerdict:
    """Judge the final boxed answer of a model turn against ``expected``; never raises."""
    if not isinstance(text, str):
        return BoxedVerdict(False, None, "not a string")
    target = expected if isinstance(expected, int) else normalize_integer(str(expected))
    if target is None:
        return BoxedVerdict(False, None, f"expected answer {expected!r} is not an integer")
    if think_left_open(text):
        return BoxedVerdict(False, None, "think block never closed: no answer")
    boxed = extract_boxed(answer_part(text))
    if not boxed:
        draft = " (only inside the reasoning)" if extract_boxed(text) else ""
        return BoxedVerdict(False, None, f"no \\boxed answer after the think block{draft}")
    values = [normalize_integer(b) for b in boxed]
    predicted = values[-1]
    if predicted is None:
        return BoxedVerdict(False, None, f"boxed answer {_short(boxed[-1])} is not an integer")
    if len(set(values)) > 1:
        shown = ", ".join(_short(b) for b in boxed[:5]) + (", ..." if len(boxed) > 5 else "")
        return BoxedVerdict(False, predicted, f"{len(boxed)} boxed answers disagree: [{shown}]")
    if predicted != target:
        return BoxedVerdict(False, predicted, f"wrong answer: {predicted} != {target}")
    return BoxedVerdict(True, predicted, "correct")
