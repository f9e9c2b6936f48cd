"""A domain's task and a verifier's verdict: the two types every domain module makes.

They live apart from the package's face (:mod:`cascadekit.domains`) so that the
face can import every domain module at its top and the domain modules can import
these types without a cycle.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Task:
    """One prompt of a domain with its gold reasoning, answers and verifier fields.

    ``answer`` ends the thinking response; ``no_think_answer`` (when set) is the
    non-thinking one, e.g. only ``\\boxed{n}`` for math. Tool-calling tasks offer
    ``tools`` and make ``tool_calls`` (``{"name", "arguments"}`` dicts) one per
    assistant turn, each answered by the matching ``tool_results`` entry in a tool
    turn; ``answer`` is then the final turn after the last result.
    """

    domain: str
    prompt: str
    thinking: str
    answer: str
    gold: dict[str, Any]
    no_think_answer: str | None = None
    tools: list[dict] | None = None
    tool_calls: list[dict] | None = None
    tool_results: list[str] | None = None
    system: str = ""

    @property
    def key(self) -> str:
        return hashlib.blake2b(f"{self.domain}\x1f{self.prompt}".encode(), digest_size=16).hexdigest()

    def response(self, think: bool) -> str:
        """The answer text of the requested mode."""
        return self.answer if think or self.no_think_answer is None else self.no_think_answer


@dataclass(frozen=True)
class Judgement:
    """A verifier's verdict: ``score`` in [0, 1], a reason, and domain extras (e.g. loose IF score)."""

    score: float
    reason: str
    details: dict[str, Any] = field(default_factory=dict)
