"""Tool calling: pick the right tool from those offered and fill in its arguments.

Stands in for BFCL v3. Each prompt offers two tools (JSON schemas in the system
turn, as the chat template lays them out) and asks for something exactly one of
them does; the answer is a single ``<tool_call>``. Judged by
:func:`cascadekit.verify.tools.verify_tool_calls` (name exact, arguments equal
after type normalization).
"""
from __future__ import annotations

import random
from typing import Any, Callable, Sequence

from cascadekit.domains import Judgement, Task
from cascadekit.domains.general import ATTRIBUTES, PEOPLE
from cascadekit.verify.tools import verify_tool_calls

CITIES = ATTRIBUTES["city"][2]
CURRENCIES = ("euro", "yen", "dollar", "rupee", "peso")


def _schema(tool: str, description: str, **params: str) -> dict:
    return {"type": "function", "function": {
        "name": tool, "description": description,
        "parameters": {"type": "object", "properties": {k: {"type": t} for k, t in params.items()},
                       "required": list(params)}}}


TOOLS = {
    "get_weather": _schema("get_weather", "Weather in a city", city="string", unit="string"),
    "convert_currency": _schema("convert_currency", "Convert money", amount="integer", source="string",
                                target="string"),
    "set_alarm": _schema("set_alarm", "Set an alarm", hour="integer", minute="integer"),
    "call_person": _schema("call_person", "Phone someone", name="string"),
}


def _weather(rng: random.Random) -> tuple[str, dict]:
    city, unit = rng.choice(CITIES), rng.choice(("celsius", "fahrenheit"))
    return f"What is the weather in {city} in {unit}?", {"city": city, "unit": unit}


def _currency(rng: random.Random) -> tuple[str, dict]:
    amount, (source, target) = rng.randint(2, 500), rng.sample(CURRENCIES, 2)
    return f"Convert {amount} {source} to {target}.", {"amount": amount, "source": source, "target": target}


def _alarm(rng: random.Random) -> tuple[str, dict]:
    hour, minute = rng.randint(5, 11), rng.choice((0, 10, 15, 20, 30, 45))
    return f"Wake me up at {hour}:{minute:02d}.", {"hour": hour, "minute": minute}


def _call(rng: random.Random) -> tuple[str, dict]:
    name = rng.choice(PEOPLE)
    return f"Please phone {name} for me.", {"name": name}


REQUESTS: dict[str, Callable[[random.Random], tuple[str, dict]]] = {
    "get_weather": _weather, "convert_currency": _currency, "set_alarm": _alarm, "call_person": _call,
}


def make_task(rng: random.Random, ops: Sequence[int] = ()) -> Task:
    """A request, the gold tool among two offered, and its arguments."""
    name = rng.choice(sorted(REQUESTS))
    other = rng.choice([t for t in sorted(TOOLS) if t != name])
    offered = [name, other] if rng.random() < 0.5 else [other, name]
    request, arguments = REQUESTS[name](rng)
    args_text = ", ".join(f"{k} {v}" for k, v in arguments.items())
    return Task(
        domain="tools",
        prompt=request,
        thinking=f"The user wants {name.replace('_', ' ')}. I call {name} with {args_text}.",
        answer="",
        gold={"calls": [{"name": name, "arguments": arguments}]},
        tools=[TOOLS[t] for t in offered],
        tool_calls=[{"name": name, "arguments": arguments}],
    )


def judge(gold: dict[str, Any], completion: str) -> Judgement:
    """1 for exactly the gold call; never raises."""
    verdict = verify_tool_calls(completion, gold.get("calls", []) if isinstance(gold, dict) else [])
    return Judgement(float(verdict.correct), verdict.reason)
