"""Tool calls: the calculator tool's multi-turn trajectories, judged by execution.

:func:`verify_trajectory` judges a whole calculator conversation by execution: every call the model made is run again with :func:`respond` (a safe
:func:`calculate` of integer ``+ - *`` expressions), and the final ``\\boxed{}``
answer after the last call must be the gold one. The conversation arrives as one
:func:`transcript`: the assistant completions of every round, each followed by
the ``<tool_response>`` blocks answering its calls, joined by newlines.
"""

from __future__ import annotations

import ast
import dataclasses
import operator
import warnings
from typing import Any, Sequence

from cascadekit.chat.format import call_arguments, parse_assistant
from cascadekit.verify.boxed import verify_boxed

__all__ = [
    "CALCULATOR", "TrajectoryVerdict", "calculate", "respond", "transcript", "verify_trajectory",
]


#: Transcripts longer than this, or with more call tags, are not judged (score 0).
MAX_TURN_CHARS = 1_000_000
MAX_CALLS = 64


# --- the calculator tool and its multi-turn trajectories ---------------------------------

CALCULATOR = "calculator"
MAX_EXPRESSION_CHARS = 200
MAX_MAGNITUDE = 10**12
_TOOL_RESPONSE = ("<tool_response>\n", "\n</tool_response>")
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_SYMBOLS = {ast.Pow: "**", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.MatMult: "@",
            ast.LShift: "<<", ast.RShift: ">>", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
            ast.Invert: "~", ast.Not: "not"}


def calculate(expression: str) -> int:
    """The value of ``expression``: integer literals, ``+ - *`` and parentheses only.

    Parsed with :mod:`ast` and evaluated over an allow-list of node types, so a
    name, call, attribute, float, ``/`` or ``**`` is refused before anything is
    computed. Raises ``ValueError`` saying why an expression is refused (too long,
    not an expression, a forbidden construct, a number beyond ``MAX_MAGNITUDE``).
    """
    if not isinstance(expression, str):
        raise ValueError("expression must be a string")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        with warnings.catch_warnings():  # e.g. SyntaxWarning on "1(2)": the verdict says enough
            warnings.simplefilter("ignore")
            tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError):
        raise ValueError("not an arithmetic expression") from None
    try:
        return _evaluate(tree.body)
    except RecursionError:  # ~200 nested signs fit in the length limit; a deep caller may not afford them
        raise ValueError("expression nested too deeply") from None


def _evaluate(node: ast.AST) -> int:
    """Evaluate an allowed node; an operator is checked before its operands are computed."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        value = node.value
    elif isinstance(node, ast.Constant):
        raise ValueError("only integers are allowed")
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        value = _BINARY[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        value = _UNARY[type(node.op)](_evaluate(node.operand))
    elif isinstance(node, (ast.BinOp, ast.UnaryOp)):
        raise ValueError(f"operator {_SYMBOLS.get(type(node.op), '?')} is not allowed, only + - *")
    else:
        raise ValueError(f"{type(node).__name__} is not allowed, only integers, + - * and parentheses")
    if abs(value) > MAX_MAGNITUDE:
        raise ValueError("number too large")
    return value


def respond(call: Any) -> str:
    """The tool turn's text for one call the model made: the result, or ``error: <reason>``; never raises.

    Error texts are fixed phrases that never quote the model's text, so a tool
    response cannot carry markup into the conversation.
    """
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return "error: a call is an object with a name and arguments"
    if call["name"] != CALCULATOR:
        return f"error: unknown tool, the only tool is {CALCULATOR}"
    args = call_arguments(call)
    if args is None:
        return "error: arguments are not a JSON object"
    if "expression" not in args:
        return "error: missing argument expression"
    if len(args) > 1:
        return "error: unexpected argument, the only argument is expression"
    try:
        return str(calculate(args["expression"]))
    except ValueError as error:
        return f"error: {error}"


def transcript(completions: Sequence[str], results: Sequence[Sequence[str]]) -> str:
    """A tool conversation as one text: each completion, then the responses to its calls, joined by newlines.

    ``results[k]`` answers the calls of ``completions[k]``; the last completion
    (the final answer) usually has none.
    """
    if len(results) > len(completions):
        raise ValueError(f"{len(results)} rounds of results for {len(completions)} completions")
    opening, closing = _TOOL_RESPONSE
    parts: list[str] = []
    for k, completion in enumerate(completions):
        parts.append(completion)
        parts.extend(f"{opening}{result}{closing}" for result in (results[k] if k < len(results) else ()))
    return "\n".join(parts)


def _rounds(text: str) -> list[str]:
    """The assistant completions of a transcript: the non-empty text between tool responses (one pass)."""
    opening, closing = _TOOL_RESPONSE
    pieces, pos = [], 0
    while (start := text.find(opening, pos)) != -1:
        end = text.find(closing, start + len(opening))
        if end == -1:
            break
        pieces.append(text[pos:start])
        pos = end + len(closing)
    pieces.append(text[pos:])
    trimmed = [p.removeprefix("\n") if k else p for k, p in enumerate(pieces)]
    trimmed = [p.removesuffix("\n") if k < len(trimmed) - 1 else p for k, p in enumerate(trimmed)]
    return [p for p in trimmed if p]


@dataclasses.dataclass(frozen=True)
class TrajectoryVerdict:
    """A calculator conversation judged: ``correct`` needs well-formed calls and the right final answer.

    ``calls`` counts the ``<tool_call>`` blocks, ``malformed`` those that did not
    parse or that :func:`respond` refused; ``results_match`` (reported, not
    scored) says whether the calls' results were exactly the gold step values.
    """

    correct: bool
    reason: str
    calls: int = 0
    malformed: int = 0
    answer_correct: bool = False
    results_match: bool = False


def verify_trajectory(text: str, answer: int, results: Sequence[int]) -> TrajectoryVerdict:
    """Judge a :func:`transcript` against the gold answer and step values; never raises.

    Every call is executed again (the tool responses in ``text`` are not
    trusted). Correct iff at least one call was made, every ``<tool_call>`` block
    is a well-formed calculator call whose expression evaluates, and the
    ``\\boxed{}`` integer after the last call equals ``answer``.
    """
    if not isinstance(text, str):
        return TrajectoryVerdict(False, "transcript is not a string")
    if len(text) > MAX_TURN_CHARS:
        return TrajectoryVerdict(False, f"transcript longer than {MAX_TURN_CHARS:,} characters: not judged")
    tags = max(text.count("<tool_call>"), text.count("</tool_call>"))
    if tags > MAX_CALLS:
        return TrajectoryVerdict(False, f"more than {MAX_CALLS} <tool_call> tags: not judged")
    rounds = _rounds(text)
    calls = [call for completion in rounds for call in parse_assistant(completion).tool_calls]
    responses = [respond(call) for call in calls]
    refused = [(k, r) for k, r in enumerate(responses, 1) if r.startswith("error:")]
    unparsed = tags - len(calls)
    final = rounds[-1].split("<|im_end|>", 1)[0] if rounds else ""
    boxed = verify_boxed(final.rsplit("</tool_call>", 1)[-1], answer)
    counts = dict(calls=tags, malformed=unparsed + len(refused), answer_correct=boxed.correct,
                  results_match=responses == [str(r) for r in results])
    if not tags:
        reason = "no tool call"
    elif unparsed:
        reason = f"{unparsed} <tool_call> block(s) not a JSON object with a name and object arguments"
    elif refused:
        reason = f"call {refused[0][0]}: {refused[0][1]}"
    elif not boxed.correct:
        reason = f"final answer: {boxed.reason}"
    else:
        return TrajectoryVerdict(True, "correct", **counts)
    return TrajectoryVerdict(False, reason, **counts)
