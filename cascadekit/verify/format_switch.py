"""The Math RL format-switch penalty: the toy's stand-in for the paper's code-switching penalty.

Nemotron-Cascade's Math RL penalises a response that switches language in the
middle of an answer (a reasoning model trained on many languages drifts into
another one). The toy world has one language, so what can drift is the *format*:
six domains share one model, and a math answer can slide into another domain's
syntax. :func:`format_switches` names every such switch in the answer part (after
the think block):

* ``second_answer``: more than one ``\\boxed{}``, even if they agree (one answer block per answer);
* ``code``: a fenced block, or a line that starts a Python ``def``, ``return`` or ``import``;
* ``tool_call``: tool-calling markup (``<tool_call>``, ``<tool_response>``);
* ``patch``: a SEARCH/REPLACE block or a unified diff header;
* ``think``: a second think block (the answer part is what follows the last one).

The checks are line and substring scans, linear in the answer, so a runaway
completion cannot stall a reward.
"""
from __future__ import annotations

import re

from cascadekit.verify.boxed import answer_part

_CODE_LINE = re.compile(r"^\s*(def |return\b|import |from \S+ import )", re.MULTILINE)
_PATCH = re.compile(r"^(<<<<<<< SEARCH|>>>>>>> REPLACE|--- a/|\+\+\+ b/|@@ )", re.MULTILINE)
_BOXED = re.compile(r"\\boxed\s*\{")


def format_switches(completion: str) -> list[str]:
    """The names of the format switches in ``completion``'s answer part (empty: none)."""
    if not isinstance(completion, str):
        return []
    answer = answer_part(completion)
    found = []
    if len(_BOXED.findall(answer)) > 1:
        found.append("second_answer")
    if "```" in answer or _CODE_LINE.search(answer):
        found.append("code")
    if "<tool_call>" in answer or "<tool_response>" in answer:
        found.append("tool_call")
    if _PATCH.search(answer):
        found.append("patch")
    if "<think>" in answer or completion.count("</think>") > 1:
        found.append("think")
    return found
