"""Toy domains of the unified thinking model: seeded tasks, chat records, verifiers.

Each domain module (``general``, ``instructions``, ``math``, ``code``, ``swe``,
``tools``) has ``make_task(rng, ops) -> Task | None`` and
``judge(gold, completion) -> Judgement``; :func:`domains` lists them with the
SFT stage that first teaches them and the paper benchmark each one stands in for.

A :class:`Task` is one prompt with its reasoning, its answer and the gold fields
its verifier needs. :func:`chat_records` turns it into the two chat records the
unified model trains on, one per mode: the ``/think`` record carries the
reasoning in a think block, the ``/no_think`` record an empty one. These are the
paper's *parallel responses* (same prompt, thinking and non-thinking answer),
used here for every domain, not only general chat.

Splits: a task belongs to one split by the hash of its prompt (as the DAG world
does), so base-model text, SFT data, RL prompts and evaluation suites never
share a prompt.
"""
from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Callable, Sequence

from cascadekit.chat import with_flag

SPLITS = ("pretrain", "sft", "rl", "eval")
MAX_DRAWS_PER_TASK = 200


@dataclass(frozen=True)
class Task:
    """One prompt of a domain with its gold reasoning, answers and verifier fields.

    ``answer`` ends the thinking response; ``no_think_answer`` (when set) is the
    non-thinking one, e.g. only ``\\boxed{n}`` for math. Tool-calling tasks answer
    with ``tool_calls`` (``{"name", "arguments"}`` dicts) and offer ``tools``.
    """

    domain: str
    prompt: str
    thinking: str
    answer: str
    gold: dict[str, Any]
    no_think_answer: str | None = None
    tools: list[dict] | None = None
    tool_calls: list[dict] | None = None
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


@dataclass(frozen=True)
class Domain:
    """A domain as the SFT stages and the evaluation suites see it."""

    name: str
    stage: int  # the SFT stage that first includes it
    benchmark: str  # the paper's benchmark this toy suite stands in for
    make_task: Callable[[random.Random, Sequence[int]], Task | None]
    judge: Callable[[dict, str], Judgement]


def split_of(task: Task) -> str:
    """The only split a task may appear in, from its prompt hash."""
    return SPLITS[int(task.key[:8], 16) % len(SPLITS)]


def draw_tasks(domain: Domain, n: int, seed: int, split: str, ops: Sequence[int]) -> list[Task]:
    """``n`` distinct tasks of ``split``, reproducible from ``seed`` (raises if the domain runs dry)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}: use one of {', '.join(SPLITS)}")
    rng = random.Random(f"{domain.name}/{split}/{seed}")
    tasks: list[Task] = []
    seen: set[str] = set()
    for _ in range(n * MAX_DRAWS_PER_TASK):
        if len(tasks) == n:
            break
        task = domain.make_task(rng, ops)
        if task is not None and split_of(task) == split and task.key not in seen:
            seen.add(task.key)
            tasks.append(task)
    if len(tasks) < n:
        raise ValueError(f"{domain.name}: drew only {len(tasks)} of {n} distinct {split} tasks")
    return tasks


def chat_record(task: Task, think: bool) -> dict[str, Any]:
    """One training/evaluation record: ``messages`` (ending in the gold assistant turn), ``tools``, gold fields.

    Tool-call arguments are kept as JSON strings and ``tools`` as one JSON string,
    so records of every domain fit one Arrow table (TRL decodes a string ``tools``).
    """
    assistant: dict[str, Any] = {"role": "assistant", "content": task.response(think),
                                 "reasoning_content": task.thinking if think else ""}
    if task.tool_calls:
        assistant["tool_calls"] = [{"name": c["name"], "arguments": json.dumps(c["arguments"])}
                                   for c in task.tool_calls]
    messages = ([{"role": "system", "content": task.system}] if task.system else [])
    messages += [{"role": "user", "content": with_flag(task.prompt, think)}, assistant]
    return {"domain": task.domain, "think": think, "messages": messages,
            "tools": json.dumps(task.tools) if task.tools else None, "gold": task.gold}


def chat_records(task: Task) -> list[dict[str, Any]]:
    """The parallel pair: the ``/think`` record and the ``/no_think`` record of one prompt."""
    return [chat_record(task, True), chat_record(task, False)]


def prompt_of(record: dict[str, Any]) -> tuple[list[dict], list[dict] | None]:
    """The messages before the gold assistant turn, and the tools, for generation."""
    tools = record.get("tools")
    return record["messages"][:-1], (json.loads(tools) if isinstance(tools, str) else tools)


def raw_text(task: Task) -> str:
    """The task as plain text without chat markup, for pretraining the base model.

    A base model has read documents like these (problems, code, diffs, tool
    schemas) but never the chat format or the think/no_think switch.
    """
    parts = [task.system, json.dumps(task.tools) if task.tools else "", task.prompt, task.thinking, task.answer]
    parts += [json.dumps(c) for c in task.tool_calls or []]
    return "\n".join(p for p in parts if p)


@cache
def domains() -> dict[str, Domain]:
    """Every domain by name, in the order of the paper's cascade."""
    from cascadekit.domains import code, general, instructions, math, swe, tools

    return {
        "general": Domain("general", 1, "ArenaHard", general.make_task, general.judge),
        "instructions": Domain("instructions", 1, "IFEval", instructions.make_task, instructions.judge),
        "math": Domain("math", 1, "AIME 2025", math.make_task, math.judge),
        "code": Domain("code", 1, "LiveCodeBench v6", code.make_task, code.judge),
        "tools": Domain("tools", 2, "BFCL v3", tools.make_task, tools.judge),
        "swe": Domain("swe", 2, "SWE-bench Verified", swe.make_task, swe.judge),
    }


def stage_domains(stage: int) -> list[str]:
    """Domains taught by SFT stage ``stage`` (stage 2 keeps stage 1's and adds the rest)."""
    return [name for name, d in domains().items() if d.stage <= stage]


__all__ = [
    "SPLITS", "Task", "Judgement", "Domain", "split_of", "draw_tasks", "chat_record", "chat_records",
    "prompt_of", "raw_text", "domains", "stage_domains",
]
