"""The unified model's chat format: Qwen3-style ChatML with /think and /no_think.

A chat renders as ChatML turns, ``<|im_start|>{role}\\n{content}<|im_end|>\\n``.
The rules (implemented once, in ``template.jinja``; this module renders the same
file with jinja2, so nothing needs a tokenizer):

* **Mode per turn.** A user turn ending in ``/no_think`` asks for an answer
  without reasoning; one ending in ``/think``, or with no flag, asks for reasoning
  (default: think, as the paper's unified model). The flag stays in the user text:
  it is how the mode is chosen at inference. Each assistant turn follows the flag
  of the user turn before it, so a chat can switch mode turn by turn.
* **Assistant turns** always carry a think block: ``<think>\\n{reasoning}\\n</think>\\n\\n``
  then the answer; in ``/no_think`` turns the block is empty,
  ``<think>\\n\\n</think>\\n\\n``. Reasoning comes from the message's
  ``reasoning_content`` (or a ``<think>...</think>`` prefix of its content).
* **History.** As in Qwen3, assistant turns before the last user turn keep only
  their answer (earlier reasoning is dropped from the context) and are context,
  not training targets. Turns after the last user turn (the answer being trained,
  plus any tool-calling steps after it) are rendered in full inside
  ``{% generation %}`` markers, so ``return_assistant_tokens_mask=True`` trains on
  exactly those, from ``<think>`` through ``<|im_end|>``. To train every turn of a
  long chat, cut it into one example per assistant turn.
* **Generation prompt.** ``add_generation_prompt`` appends ``<|im_start|>assistant\\n``;
  after a ``/no_think`` user turn it also pre-fills the empty think block (as
  Qwen3's ``enable_thinking=False``), so a non-thinking completion is just the
  answer; ``prefill_empty_think=False`` turns that off (the stage table measures
  mode following that way). :func:`parse_assistant` accepts both completions.
* **Tools** are JSON schemas listed in the system turn inside ``<tools></tools>``;
  the assistant calls them as ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``
  after its answer text; results are messages with role ``"tool"``, rendered
  Qwen-style as ``<tool_response>`` blocks inside one user turn (consecutive tool
  messages share it). Tool turns do not change the mode.

Departure from the paper: the paper does not publish its exact template; this is
Qwen3's format with the flag rule the summary describes.
"""

from __future__ import annotations

import dataclasses
import json
from functools import cache
from importlib import resources
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = [
    "THINK", "NO_THINK", "MARKUP_TOKENS", "AssistantTurn", "chat_template", "install_chat_template",
    "render", "parse_assistant", "thinking_mode", "strip_flag", "with_flag",
]

THINK = "/think"
NO_THINK = "/no_think"
# Strings a tokenizer for this format should keep whole (special or added tokens).
MARKUP_TOKENS = ("<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>",
                 "</tool_call>", "<tool_response>", "</tool_response>")
EMPTY_THINK = "<think>\n\n</think>\n\n"
END_OF_TURN = "<|im_end|>"  # where an assistant turn ends


@cache
def chat_template() -> str:
    """The Jinja source shipped as package data."""
    return resources.files("cascadekit.chat").joinpath("template.jinja").read_text(encoding="utf-8")


def install_chat_template(tokenizer: Any) -> Any:
    """Set the kit's chat template on a Hugging Face tokenizer and return it.

    The vocabulary is not changed: add :data:`MARKUP_TOKENS` when building the
    tokenizer so each marker is one token.
    """
    tokenizer.chat_template = chat_template()
    return tokenizer


class _Generation(jinja2.ext.Extension):
    """``{% generation %}`` as transformers defines it, minus the span tracking."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller: Any) -> str:
        return caller()


@cache
def _compiled() -> jinja2.Template:
    # The same environment settings transformers uses, so both render identically.
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
    return env.from_string(chat_template())


def render(messages: list[dict], tools: list[dict] | None = None,
           add_generation_prompt: bool = False, prefill_empty_think: bool = True) -> str:
    """Render a chat as text, exactly as ``tokenizer.apply_chat_template`` would.

    ``prefill_empty_think=False`` leaves a ``/no_think`` generation prompt bare, so
    the model itself must write the empty think block: how the stage table measures
    whether a model follows the flag rather than the template.
    """
    return _compiled().render(messages=messages, tools=tools or None, add_generation_prompt=add_generation_prompt,
                              prefill_empty_think=prefill_empty_think)


def stop_token_ids(tokenizer: Any) -> list[int]:
    """The ids a generated assistant turn ends at: ``<|im_end|>``, or the tokenizer's end of text."""
    return [tokenizer.convert_tokens_to_ids(END_OF_TURN), tokenizer.eos_token_id]


def turn_ids(ids: list[int], stops: list[int]) -> list[int]:
    """A generated row's ids up to (not including) its first stop id."""
    return ids[:next((k for k, t in enumerate(ids) if t in stops), len(ids))]


def thinking_mode(user_text: str) -> bool:
    """True when the user turn asks for reasoning (``/think`` or no flag)."""
    return not user_text.rstrip().endswith(NO_THINK)


def strip_flag(user_text: str) -> str:
    """The user text without a trailing ``/think`` or ``/no_think`` flag."""
    stripped = user_text.rstrip()
    for flag in (NO_THINK, THINK):
        if stripped.endswith(flag):
            return stripped[: -len(flag)].rstrip()
    return user_text


def with_flag(user_text: str, think: bool) -> str:
    """The user text ending in the flag for the requested mode."""
    return f"{strip_flag(user_text)} {THINK if think else NO_THINK}"


@dataclasses.dataclass(frozen=True)
class AssistantTurn:
    """An assistant turn taken apart. ``reason`` says why it is not well formed."""

    thinking: str
    answer: str
    tool_calls: list[dict]
    well_formed: bool
    reason: str


def _tool_call_blocks(text: str) -> tuple[list[str], str]:
    """The bodies of complete ``<tool_call>...</tool_call>`` blocks and the text around them.

    One left-to-right pass (a lazy regex is quadratic on many unclosed tags): each
    block runs from an opening tag to the first closing tag after it.
    """
    bodies, outside, pos = [], [], 0
    while (start := text.find("<tool_call>", pos)) != -1:
        end = text.find("</tool_call>", start)
        if end == -1:
            break
        outside.append(text[pos:start])
        bodies.append(text[start + len("<tool_call>"):end])
        pos = end + len("</tool_call>")
    outside.append(text[pos:])
    return bodies, "".join(outside)


def call_arguments(call: dict) -> dict | None:
    """A tool call's arguments as a dict (they may arrive JSON-encoded), or None when malformed."""
    args = call.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):  # RecursionError: absurd nesting
            return None
    return args if isinstance(args, dict) else None


def _parse_tool_call(body: str) -> dict | None:
    try:
        call = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: absurd nesting
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None
    args = call_arguments(call)
    return None if args is None else {"name": call["name"], "arguments": args}


def _split_think(text: str) -> tuple[str, str, str]:
    """(thinking, rest, problem) where problem is "" when the think block is fine."""
    opens, closes = text.count("<think>"), text.count("</think>")
    if opens == 0 and closes == 0:
        return "", text, ""
    if opens != 1 or closes != 1:
        return "", text, f"expected one think block, found {opens} <think> and {closes} </think>"
    head, _, after_open = text.partition("<think>")
    thinking, _, rest = after_open.partition("</think>")
    if head.strip() or "</think>" in head:
        return "", text, "text before <think>"
    return thinking.strip(), rest, ""


def parse_assistant(text: str, think: bool | None = None) -> AssistantTurn:
    """Take an assistant turn (or a completion) apart; never raises.

    ``text`` may end with ``<|im_end|>``. A completion after a pre-filled empty
    think block has no think block of its own, which is well formed. With ``think``
    given, the turn must also match the mode: reasoning present for ``True``,
    empty for ``False``.
    """
    if not isinstance(text, str):
        return AssistantTurn("", "", [], False, "not a string")
    body = text.split("<|im_end|>", 1)[0] if "<|im_end|>" in text else text
    thinking, rest, problem = _split_think(body)
    calls, bad_calls = [], 0
    bodies, outside = _tool_call_blocks(rest)
    for body in bodies:
        call = _parse_tool_call(body.strip())
        if call is None:
            bad_calls += 1
        else:
            calls.append(call)
    answer = outside.strip()
    if not problem:
        problem = _tool_problem(rest, answer, bad_calls)
    if not problem and think is True and not thinking:
        problem = "thinking requested but the think block is empty or missing"
    if not problem and think is False and thinking:
        problem = "no thinking requested but the think block is not empty"
    return AssistantTurn(thinking, answer, calls, not problem, problem or "ok")


def _tool_problem(rest: str, answer: str, bad_calls: int) -> str:
    if bad_calls:
        return f"{bad_calls} tool call(s) not a JSON object with a name and object arguments"
    if "<tool_call>" in answer or "</tool_call>" in answer:
        return "unbalanced <tool_call> tags"
    if "<|im_start|>" in rest:
        return "turn runs into another turn"
    return ""
