"""Tool calls: BFCL-style argument matching, and the calculator tool's multi-turn trajectories.

:func:`verify_tool_calls` judges one assistant turn against gold calls. A call is
right when the function name matches exactly and the arguments match as JSON
after type normalization, in the spirit of BFCL's AST checker: ``"5"``, ``5``
and ``5.0`` are the same number, strings compare stripped and case-folded, lists
keep their order, objects compare key by key. Missing and unexpected arguments
are both wrong. Several calls in one turn (parallel calls) match in any order.

:func:`verify_trajectory` judges a whole calculator conversation by execution
instead: every call the model made is run again with :func:`respond` (a safe
:func:`calculate` of integer ``+ - *`` expressions), and the final ``\\boxed{}``
answer after the last call must be the gold one. The conversation arrives as one
:func:`transcript`: the assistant completions of every round, each followed by
the ``<tool_response>`` blocks answering its calls, joined by newlines.
"""

from __future__ import annotations

import ast
import dataclasses
import operator
import re
import reprlib
import warnings
from typing import Any, Sequence

from cascadekit.chat.format import call_arguments, parse_assistant
from cascadekit.verify.boxed import verify_boxed

__all__ = [
    "ToolVerdict", "normalize_value", "judge_tool_call", "verify_tool_calls",
    "CALCULATOR", "TrajectoryVerdict", "calculate", "respond", "transcript", "verify_trajectory",
]


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
