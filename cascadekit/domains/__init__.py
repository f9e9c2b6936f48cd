"""Toy domains of the unified thinking model: seeded tasks, chat records, verifiers.

At toy scale the six domains are surfaces of one world (:mod:`cascadekit.domains.dag`):
each is the same small DAG problem in another costume, because that is the skill
Part I measured a CPU-sized model can learn. Each domain module (``general``,
``instructions``, ``math``, ``code``, ``swe``, ``tools``) has
``make_task(rng, ops) -> Task | None``, ``judge(gold, completion) -> Judgement``
(never raises) and ``check_gold(gold)`` (a ValueError naming the bad field);
:func:`domains` lists them with the SFT stage that first teaches them and the
paper benchmark each one stands in for. :func:`check_record` checks a whole
chat record before anything trains on or evaluates it.

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

import dataclasses
import hashlib
import json
import random
from dataclasses import dataclass
from functools import cache, partial
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from cascadekit.chat import render, with_flag
from cascadekit.domains import code, general, instructions, math, swe, tools
from cascadekit.domains.task import Judgement, Task
from cascadekit.stages import digest
from cascadekit.verify.tools import transcript

if TYPE_CHECKING:
    from cascadekit.profiles import DomainsConfig

SPLITS = ("pretrain", "sft", "rl", "eval")
ROLES = ("system", "user", "assistant", "tool")
MAX_DRAWS_PER_TASK = 200


@dataclass(frozen=True)
class Domain:
    """A domain as the SFT stages and the evaluation suites see it."""

    name: str
    stage: int  # the SFT stage that first includes it
    benchmark: str  # the paper's benchmark this toy suite stands in for
    make_task: Callable[[random.Random, Sequence[int]], Task | None]
    judge: Callable[[dict, str], Judgement]
    check_gold: Callable[[Any], None]  # raises ValueError naming the bad field
    respond: Callable[[dict], str] | None = None  # a tool's answer to one call, for tool-using domains


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
    """One training/evaluation record: ``messages`` (ending in the gold assistant turns), ``tools``, gold fields.

    A tool-using task becomes one assistant turn per call, each followed by a
    tool turn with its result, then the final answer; the reasoning goes in the
    first assistant turn (Qwen3 keeps reasoning for every turn after the user's,
    the toy writes it once). Tool-call arguments are kept as JSON strings and
    ``tools`` as one JSON string, so records of every domain fit one Arrow table
    (TRL decodes a string ``tools``).
    """
    reasoning = task.thinking if think else ""
    messages = ([{"role": "system", "content": task.system}] if task.system else [])
    messages.append({"role": "user", "content": with_flag(task.prompt, think)})
    for call, result in zip(task.tool_calls or [], task.tool_results or []):
        messages.append({"role": "assistant", "content": "", "reasoning_content": reasoning,
                         "tool_calls": [{"name": call["name"], "arguments": json.dumps(call["arguments"])}]})
        messages.append({"role": "tool", "content": result})
        reasoning = ""
    messages.append({"role": "assistant", "content": task.response(think), "reasoning_content": reasoning})
    return {"domain": task.domain, "think": think, "messages": messages,
            "tools": json.dumps(task.tools) if task.tools else None, "gold": task.gold}


def chat_records(task: Task) -> list[dict[str, Any]]:
    """The parallel pair: the ``/think`` record and the ``/no_think`` record of one prompt."""
    return [chat_record(task, True), chat_record(task, False)]


def prompt_of(record: dict[str, Any]) -> tuple[list[dict], list[dict] | None]:
    """The messages before the first gold assistant turn, and the tools, for generation."""
    messages = record["messages"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    tools = record.get("tools")
    return messages[:last_user + 1], (json.loads(tools) if isinstance(tools, str) else tools)


def prompt_text(record: dict[str, Any]) -> str:
    """The rendered chat up to the assistant turn, as the model is asked it: no pre-filled think block."""
    messages, tools = prompt_of(record)
    return render(messages, tools, add_generation_prompt=True, prefill_empty_think=False)


def gold_answer(record: dict[str, Any]) -> str:
    """The record's gold answer as a verifier reads a model's: each gold assistant turn as the completion
    after its generation prompt (no pre-filled think block), tool results between them (:func:`transcript`)."""
    messages, tools = prompt_of(record)
    turns, results = [], []
    for message in record["messages"][len(messages):]:
        if message["role"] == "assistant":
            prompt = render(messages, tools, add_generation_prompt=True, prefill_empty_think=False)
            turns.append(render([*messages, message], tools)[len(prompt):].removesuffix("<|im_end|>\n"))
        else:
            results.append([message["content"]])
        messages = [*messages, message]
    return transcript(turns, results) if results else turns[0]


def check_record(record: Any, check_gold: bool = True) -> dict[str, Any]:
    """``record`` if it is a well-formed chat record of a known domain, else one ValueError naming the field.

    ``check_gold=False`` checks everything but the toy domain's gold fields (a
    released data set's record carries its own gold: :mod:`cascadekit.training.released_data`).
    """
    if not isinstance(record, dict):
        raise ValueError(f"task record must be a JSON object, got {type(record).__name__}")
    name = record.get("domain")
    if name not in domains():
        raise ValueError(f"task record field 'domain': unknown domain {name!r} (known: {', '.join(domains())})")
    if not isinstance(record.get("think"), bool):
        raise ValueError(f"task record field 'think' must be true or false, got {record.get('think')!r}")
    messages = record.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("task record field 'messages' must be a non-empty list of chat messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise ValueError(f"task record field 'messages[{i}]' must have a role in {ROLES} and string content, "
                             f"got {str(m)[:80]!r}")
    if not any(m["role"] == "user" for m in messages):
        raise ValueError("task record field 'messages' has no user turn")
    tools = record.get("tools")
    if tools is not None:
        try:
            tools = json.loads(tools) if isinstance(tools, str) else tools
        except json.JSONDecodeError as err:
            raise ValueError(f"task record field 'tools' is not JSON: {err}") from None
        if not isinstance(tools, list):
            raise ValueError("task record field 'tools' must be a list of tool schemas")
    if check_gold:
        domains()[name].check_gold(record.get("gold"))
    return record


def raw_text(task: Task) -> str:
    """The task as plain text without chat markup, for pretraining the base model.

    A base model has read documents like these (problems, code, diffs, tool
    schemas) but never the chat format or the think/no_think switch.
    """
    parts = [task.system, json.dumps(task.tools) if task.tools else "", task.prompt, task.thinking]
    for call, result in zip(task.tool_calls or [], task.tool_results or []):
        parts += [json.dumps(call), result]
    return "\n".join(p for p in [*parts, task.answer] if p)


def surfaces_fingerprint(ops: Sequence[int]) -> str:
    """A short hash of a few tasks' raw text per domain: changes whenever any surface's wording does.

    Part of the cache key of everything trained on the surfaces (the Part II
    tokenizer and base), as :func:`cascadekit.world.corpus.rendering_fingerprint` is for Part I.
    """
    digest = hashlib.sha256()
    for domain in domains().values():
        for task in draw_tasks(domain, 3, 0, "pretrain", ops):
            digest.update(raw_text(task).encode())
            digest.update(json.dumps(chat_records(task), sort_keys=True).encode())
    return digest.hexdigest()[:12]


@cache
def domains() -> dict[str, Domain]:
    """Every domain by name, in the order of the paper's cascade."""
    return {
        "general": Domain("general", 1, "ArenaHard", general.make_task, general.judge, general.check_gold),
        "instructions": Domain("instructions", 1, "IFEval", instructions.make_task, instructions.judge,
                               instructions.check_gold),
        "math": Domain("math", 1, "AIME 2025", math.make_task, math.judge, math.check_gold),
        "code": Domain("code", 1, "LiveCodeBench v6", code.make_task, code.judge, code.check_gold),
        "tools": Domain("tools", 2, "BFCL v3", tools.make_task, tools.judge, tools.check_gold, tools.respond),
        "swe": Domain("swe", 2, "SWE-bench Verified", swe.make_task, swe.judge, swe.check_gold),
    }


def configured(name: str, knobs: DomainsConfig) -> Domain:
    """Domain ``name`` as the profile's ``domains`` knobs ask SFT, RL and evaluation to draw it.

    At today's world it is :func:`domains`' own entry; otherwise its ``make_task``
    takes the knob (:class:`cascadekit.profiles.DomainsConfig`). The base's
    pretraining text never goes through here: it stays the same whatever the knobs.
    """
    options = {
        "instructions": {"constraints": knobs.instruction_constraints}
        if knobs.instruction_constraints != instructions.CONSTRAINTS else {},
        "swe": {"rewrites": True} if knobs.swe_rewrites else {},
        "general": {"teacher": knobs.general_teacher} if knobs.general_teacher else {},
    }.get(name, {})
    domain = domains()[name]
    return dataclasses.replace(domain, make_task=partial(domain.make_task, **options)) if options else domain


def stage_domains(stage: int) -> list[str]:
    """Domains taught by SFT stage ``stage`` (stage 2 keeps stage 1's and adds the rest)."""
    return [name for name, d in domains().items() if d.stage <= stage]


__all__ = [
    "SPLITS", "Task", "Judgement", "Domain", "split_of", "draw_tasks", "chat_record", "chat_records",
    "prompt_of", "gold_answer", "check_record", "raw_text", "surfaces_fingerprint", "domains", "configured",
    "stage_domains",
]


def records_digest(records: Sequence[Mapping[str, Any]]) -> str:
    """A short hash of a chat prompt set (messages and gold, in order)."""
    return digest([r["messages"], r["gold"]] for r in records)
