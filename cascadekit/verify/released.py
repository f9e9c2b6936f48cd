"""Verdicts on real answers to the released RL sets' prompts: math, code, instruction following, SWE.

The kit's own verifiers judge its world's tasks; these judge a released row's
gold as :mod:`cascadekit.training.released_data` records it. Each is a pure
function from the model's text (and the gold) to a :class:`Verdict` (a score and
a reason), and never raises on model text or a malformed gold:

* **math** (:func:`verify_math`): the last ``\\boxed{...}`` after the think block
  against the short answer, by the ``math-verify`` package (symbolic
  equivalence, the maintained checker; ``pip install 'cascadekit[released]'``)
  when it is installed, else by the kit's checks: the same integer
  (:func:`cascadekit.verify.boxed.normalize_integer`), or the same LaTeX once
  spacing, ``\\left``/``\\right`` and ``\\dfrac`` are normalised. The reason says which.
* **code** (:func:`verify_stdio`): the program in the answer run on each
  released test's stdin in the kit's sandbox; the verifier compares the output
  (the candidate never sees the expected one). All tests pass or 0, as the paper's Code RL.
* **IF** (:func:`verify_ifeval`): each of IFEval's 25 instruction ids checked
  strictly as IFEval defines it (:mod:`cascadekit.verify.ifeval`, where its
  parity with IFEval's own checkers and its departures are stated); an unknown
  id or a malformed argument is named in the reason and left out of the score
  (1 when every checked one holds). A row none of whose ids can be checked scores 0, and says so.
* **SWE** (:func:`verify_gold_patch`): the execution-free lexical reward, the
  answer's patch's similarity to the released gold patch.
"""
from __future__ import annotations

import dataclasses
import importlib
import re
import threading
from typing import Any, Sequence

from cascadekit.sandbox import Limits
from cascadekit.verify.boxed import answer_part, extract_boxed, normalize_integer
from cascadekit.verify.code import IOTests, verify_code
from cascadekit.verify.ifeval import Check, ifeval_check
from cascadekit.verify.instructions import MAX_RESPONSE_CHARS
from cascadekit.verify.patch import patch_similarity

__all__ = ["Verdict", "ifeval_checks", "verify_gold_patch", "verify_ifeval",
           "verify_math", "verify_stdio"]


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A score in [0, 1] and why."""

    score: float
    reason: str


# ---------------------------------------------------------------------------
# Math
# ---------------------------------------------------------------------------

#: Seconds ``math-verify`` may spend parsing or comparing one answer (on the main thread; see :func:`_by_math_verify`).
MATH_VERIFY_TIMEOUT_S = 5
#: Off the main thread math-verify has no timeout, so only answers this short reach it there: a real
#: competition answer is a few characters, and sympy's parse of a long hostile one can take minutes.
MATH_VERIFY_MAX_CHARS = 200
_SPACING = re.compile(r"\\[,!;: ]|\\left|\\right|\s+")


def _latex_key(text: str) -> str:
    """A boxed answer without spacing, ``$``, ``\\left``/``\\right`` or a final period; ``\\dfrac`` as ``\\frac``."""
    key = _SPACING.sub("", text.strip().strip("$")).rstrip(".")
    return key.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")


def _math_verify() -> Any | None:
    """The ``math_verify`` module, or None when it is not installed (imported only when a math answer is judged)."""
    try:
        return importlib.import_module("math_verify")
    except ImportError:
        return None


def _by_math_verify(module: Any, predicted: str, gold: str) -> bool | None:
    """``math-verify``'s judgement, or None when it fails on this input (the kit's checks then decide).

    Its timeouts use signals, which work only on the main thread: streamed
    rewards verify on worker threads, where it runs without them (0.8 and later
    allow that) on answers of at most :data:`MATH_VERIFY_MAX_CHARS` characters.
    """
    limit = MATH_VERIFY_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    if limit is None and len(predicted) > MATH_VERIFY_MAX_CHARS:
        return None
    try:
        return bool(module.verify(module.parse(f"${gold}$", parsing_timeout=limit),
                                  module.parse(f"$\\boxed{{{predicted}}}$", parsing_timeout=limit),
                                  timeout_seconds=limit))
    except Exception:  # a checker's failure on hostile text is no verdict, never a crash
        return None


def _by_the_kit(predicted: str, gold: str) -> bool:
    want, got = normalize_integer(gold), normalize_integer(predicted)
    if want is not None and got is not None:
        return want == got
    return _latex_key(predicted) == _latex_key(gold)


def verify_math(text: str, answer: str) -> Verdict:
    """The last boxed answer after the think block against ``answer``; never raises."""
    if not isinstance(text, str) or not isinstance(answer, str) or not answer.strip():
        return Verdict(0.0, "no text or no gold answer")
    if "<think>" in text and "</think>" not in text:
        return Verdict(0.0, "think block never closed: no answer")
    boxed = extract_boxed(answer_part(text))
    if not boxed:
        return Verdict(0.0, "no \\boxed answer after the think block")
    predicted = boxed[-1]
    module = _math_verify()
    same = _by_math_verify(module, predicted, answer) if module is not None else None
    if same is not None:
        return Verdict(float(same), f"math-verify: {'equivalent' if same else 'not equivalent'} to {answer!r}")
    checker = "math-verify failed on it, so the kit's check" if module is not None else \
        "math-verify not installed (pip install 'cascadekit[released]'), so the kit's check"
    same = _by_the_kit(predicted, answer)
    return Verdict(float(same), f"{checker}: {'same' if same else 'not the same'} answer as {answer!r}")


# ---------------------------------------------------------------------------
# Code
# ---------------------------------------------------------------------------

def verify_stdio(text: str, tests: Sequence[Sequence[str]], limits: Limits = Limits()) -> Verdict:
    """The answer's program on each released ``[stdin, stdout]`` test in the sandbox: 1 if all pass; never raises.

    Stdin is a regular file, as Codeforces and AtCoder give it, so the judges'
    idioms (``os.read(0, os.fstat(0).st_size)``, ``sys.stdin.buffer.read()``) read
    the whole input. The program may import the standard library only: AtCoder's
    Python also ships numpy and others, which the sandbox does not hold, so a
    solution that imports them scores 0 here.
    """
    try:
        cases = [(str(stdin), str(stdout)) for stdin, stdout in tests]
    except (TypeError, ValueError):
        return Verdict(0.0, "malformed gold tests: each must be a [stdin, stdout] pair")
    if not cases:
        return Verdict(0.0, "no tests")
    verdict = verify_code(text if isinstance(text, str) else "", IOTests(cases), limits)
    return Verdict(float(verdict.all_passed), f"{verdict.passed}/{verdict.total} tests: {verdict.reason}")


# ---------------------------------------------------------------------------
# Instruction following
# ---------------------------------------------------------------------------

def _named(value: Any) -> str:
    return repr(value)[:60]


def ifeval_checks(ids: Sequence[Any], kwargs: Sequence[Any]) -> tuple[list[tuple[str, Check]], list[str]]:
    """The check for each of a row's instruction ids, and a note for each id that cannot be checked."""
    checks, skipped = [], []
    arguments = list(kwargs) if isinstance(kwargs, (list, tuple)) else []
    for i, name in enumerate(ids):
        try:
            checks.append((name, ifeval_check(name, arguments[i] if i < len(arguments) else {})))
        except KeyError:
            skipped.append(f"{_named(name)} (unknown instruction id)")
        except ValueError as err:
            skipped.append(f"{_named(name)} (arguments: {err})")
        except ImportError as err:
            skipped.append(f"{_named(name)} (needs {err.name}: pip install 'cascadekit[ifeval]')")
    return checks, skipped


def _holds(check: Check, answer: str) -> bool:
    try:
        return bool(check(answer))
    except Exception:  # a verifier never raises on model text
        return False


def verify_ifeval(text: str, ids: Sequence[Any], kwargs: Sequence[Any]) -> Verdict:
    """The answer after the think block against a row's IFEval instructions, strictly (IFEval's strict score).

    1 when every checked instruction holds; as in IFEval, an empty answer follows
    none. Ids that cannot be checked are named and left out. Never raises.
    """
    if not isinstance(ids, (list, tuple)):
        return Verdict(0.0, "malformed gold: instruction_id_list is not a list")
    checks, skipped = ifeval_checks(ids, kwargs)
    unchecked = f"; not checked: {', '.join(skipped)}" if skipped else ""
    if not checks:
        return Verdict(0.0, f"no instruction the kit can check{unchecked}")
    if not isinstance(text, str) or len(text) > MAX_RESPONSE_CHARS:
        return Verdict(0.0, f"not a string of at most {MAX_RESPONSE_CHARS:,} characters: not judged{unchecked}")
    if "<think>" in text and "</think>" not in text:
        return Verdict(0.0, f"think block never closed: no answer{unchecked}")
    answer = answer_part(text).strip()
    failed = [name for name, check in checks if not (answer and _holds(check, answer))]
    reason = f"failed: {', '.join(failed)}" if failed else "all instructions followed"
    return Verdict(float(not failed), f"{reason}{unchecked}")


# ---------------------------------------------------------------------------
# SWE
# ---------------------------------------------------------------------------

def verify_gold_patch(text: str, gold_patch: str) -> Verdict:
    """The execution-free lexical reward: the answer's patch's similarity to ``gold_patch``; never raises."""
    if not isinstance(text, str) or not isinstance(gold_patch, str):
        return Verdict(0.0, "no text or no gold patch")
    score = patch_similarity(text, gold_patch)
    return Verdict(score, f"similarity {score:.2f} to the gold patch" if score else
                   "no readable patch (or an unreadable gold patch)")
