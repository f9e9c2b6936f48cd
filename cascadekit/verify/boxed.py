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

__all__ = ["BoxedVerdict", "answer_part", "extract_boxed", "normalize_integer", "verify_boxed"]


@dataclasses.dataclass(frozen=True)
class BoxedVerdict:
    correct: bool
    predicted: int | None
    reason: str


def answer_part(text: str) -> str:
    """The text after the think block; empty if a think block is left open."""
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1]
    if "<think>" in text:
        return ""
    return text


def extract_boxed(text: str) -> list[str]:
    """Contents of every ``\\boxed{...}`` in ``text`` (balanced braces), in order."""
    found = []
    for match in re.finditer(r"\\boxed\s*\{", text):
        depth, start = 1, match.end()
        for i in range(start, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    found.append(text[start:i])
                    break
    return found


_GROUPED = re.compile(r"[+-]?\d{1,3}(,\d{3})+")
_PLAIN = re.compile(r"[+-]?\d+(\.0*)?")


def normalize_integer(raw: str) -> int | None:
    """The integer a boxed answer denotes, or None if it is not one."""
    s = str(raw).strip().strip("$").replace("{,}", ",").replace("−", "-")
    for space in ("\\!", "\\,", "\\ ", " "):
        s = s.replace(space, "")
    s = re.sub(r"^\\(?:text|mathrm|mathbf)\{(.*)\}$", r"\1", s)
    if _GROUPED.fullmatch(s):
        s = s.replace(",", "")
    if len(s) > 64 or not _PLAIN.fullmatch(s):
        return None
    return int(s.split(".")[0])


def verify_boxed(text: str, expected: int | str) -> BoxedVerdict:
    """Judge the final boxed answer of a model turn against ``expected``; never raises."""
    if not isinstance(text, str):
        return BoxedVerdict(False, None, "not a string")
    target = expected if isinstance(expected, int) else normalize_integer(str(expected))
    if target is None:
        return BoxedVerdict(False, None, f"expected answer {expected!r} is not an integer")
    if "<think>" in text and "</think>" not in text:
        return BoxedVerdict(False, None, "think block never closed: no answer")
    boxed = extract_boxed(answer_part(text))
    if not boxed:
        draft = " (only inside the reasoning)" if extract_boxed(text) else ""
        return BoxedVerdict(False, None, f"no \\boxed answer after the think block{draft}")
    values = [normalize_integer(b) for b in boxed]
    predicted = values[-1]
    if predicted is None:
        return BoxedVerdict(False, None, f"boxed answer {boxed[-1]!r} is not an integer")
    if len(set(values)) > 1:
        return BoxedVerdict(False, predicted, f"{len(boxed)} boxed answers disagree: {boxed}")
    if predicted != target:
        return BoxedVerdict(False, predicted, f"wrong answer: {predicted} != {target}")
    return BoxedVerdict(True, predicted, "correct")
