"""Verdicts on real answers to the released RL sets' prompts: math, code, instruction following, SWE.

The kit's own verifiers judge its world's tasks; these judge a released row's
gold as :mod:`cascadekit.training.released_data` records it. Each is a pure
function from the model's text (and the gold) to a :class:`Verdict` (a score and
a reason), and never raises on model text or a malformed gold:

* **math** (:func:`verify_math`): the last ``\\boxed{...}`` after the think block
  against the short answer, by the ``math-verify`` package (symbolic
  equivalence, the maintained checker; ``pip install 'cascadekit[released]'``),
  run in bounded worker processes (:mod:`cascadekit.verify.math_workers`: a
  deadline and a memory limit on every verdict, from any thread). Where it
  gives no verdict (over the bound, a crash, not installed) the kit's check
  decides: the same exact number (``0.5`` is ``\\frac{1}{2}``, ``10^6`` is
  1000000, ``5\\text{ cm}`` is 5) or the same LaTeX up to spacing, never
  "same" where math-verify says "not equivalent" (``4 2`` is not 42). The
  reason says which. A released Math RL run refuses to start without
  math-verify (:func:`require_math_verify`).
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
import importlib.util
import os
import re
from fractions import Fraction
from typing import Any, Sequence

from cascadekit.sandbox import Limits
from cascadekit.verify.boxed import answer_part, extract_boxed, think_left_open
from cascadekit.verify.code import IOTests, verify_code
from cascadekit.verify.ifeval import MAX_ANSWER_CHARS, Check, ifeval_check
from cascadekit.verify.instructions import MAX_RESPONSE_CHARS
from cascadekit.verify.math_workers import MathVerifyPool, shared_pool
from cascadekit.verify.patch import PatchError, apply_patch, parse_patch, patch_similarity

__all__ = ["Verdict", "ifeval_checks", "verify_gold_patch", "verify_ifeval",
           "MathVerifyMissing", "require_math_verify", "verify_math", "verify_math_batch", "verify_stdio"]


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A score in [0, 1] and why."""

    score: float
    reason: str


# ---------------------------------------------------------------------------
# Math
# ---------------------------------------------------------------------------

#: Seconds one math-verify verdict may take in its worker process, whatever thread asks (then the worker is
#: stopped and replaced, and the kit's check decides: see :mod:`cascadekit.verify.math_workers`).
MATH_VERIFY_TIMEOUT_S = 5
#: Address space of each math-verify worker: a runaway answer (``2^{2^{64}}`` held 3.7 GB) fails there.
MATH_VERIFY_MEMORY_BYTES = 1 << 30
#: math-verify worker processes, started on the first verdict and shared by every thread of this process.
MATH_VERIFY_WORKERS = min(4, os.cpu_count() or 1)
_MISSING = "released math needs math-verify, which is not installed: pip install 'cascadekit[released]'"


class MathVerifyMissing(ValueError):
    """A released math run was asked for without math-verify (the ``released`` extra): a ValueError, as a
    profile the machine cannot run is, so the command line prints it as its one line (never a FileNotFoundError,
    which a joint run would take for a missing data file and skip)."""


def _installed() -> bool:
    """Whether math-verify is installed (found, not imported: the workers import it)."""
    return importlib.util.find_spec("math_verify") is not None


def require_math_verify() -> None:
    """Refuse a released Math RL or evaluation run up front, in one line, when math-verify is missing.

    The kit's own check (:func:`_by_the_kit`) is stricter than math-verify: it
    rejects many right answers (``\\sqrt{8}`` for ``2\\sqrt{2}``), so a run on it
    would train on, or report, another reward than the benchmark's.
    """
    if not _installed():
        raise MathVerifyMissing(_MISSING)


def _math_verify() -> MathVerifyPool | None:
    """The bounded math-verify workers, or None when math-verify is not installed."""
    return shared_pool(MATH_VERIFY_WORKERS, MATH_VERIFY_MEMORY_BYTES) if _installed() else None


_SPACING = r"(?:\s|~|\\[,;: ]|\\q?quad(?![A-Za-z])|\\[a-z]*space(?![A-Za-z])(?:\{[^{}]*\})?|\{\s*\})+"
_TOKENS = re.compile(rf"(?P<space>{_SPACING})|(?P<gone>\\!|\\(?:left|right|displaystyle)(?![A-Za-z]))|"
                     r"(?P<word>\\[A-Za-z]+)|(?P<char>[\s\S])")
_WRAPPED = re.compile(r"\\(?:text|textbf|mathrm|mathbf)\{(-?(?:0|[1-9]\d*))\}")
_UNIT = re.compile(r"(?P<number>.*?)(?P<unit>\^\{?\\circ\}?|\\(?:text|mathrm)\{[A-Za-z][A-Za-z ]*\})")
_INTEGER = r"(?:\d{1,3}(?:(?:,|\{,\})\d{3})+|\d+)"
_DECIMAL = rf"{_INTEGER}(?:\.\d+)?|\.\d+"
_FRACTION = re.compile(r"\\frac\{(?P<a>-?\d+)\}\{(?P<b>-?\d+)\}|\\frac(?P<c>\d)(?P<d>\d)|(?P<e>\d+)/(?P<f>\d+)")
_POWER = re.compile(rf"(?:(?P<m>{_DECIMAL})\\(?:times|cdot))?(?P<base>\d+)\^(?:\{{(?P<exp>-?\d+)\}}|(?P<digit>\d))")
#: Largest power :func:`_number` evaluates (digits of the base times the exponent), and the longest answer it
#: reads as a number (Python refuses to parse an integer of over 4,300 digits): a fallback must stay cheap.
_MAX_POWER_DIGITS = 400
_MAX_NUMBER_CHARS = 1000


def _latex_key(text: str) -> str:
    """A boxed answer without spacing, ``$``, ``\\!``, ``\\left``/``\\right`` or ``\\displaystyle``; ``\\dfrac`` as ``\\frac``.

    Spacing stays (as one space) between two letters, digits or points, and
    between a command and a letter: ``4 2`` is not ``42``, ``a b c`` is not
    ``abc`` (math-verify agrees on both), ``\\sin x`` is not ``\\sinx``. Elsewhere
    it goes, as TeX ignores it in math: where math-verify cannot parse an answer
    it compares the raw text, so there ``(\\,`` and ``(`` differ for it and not here.
    """
    out, last, spaced = [], "", False
    for token in _TOKENS.finditer(text.strip().strip("$")):
        spaced = spaced or bool(token["space"])
        if token["word"] or token["char"]:
            kind = "word" if token["word"] else "alnum" if token.group().isalnum() or token.group() == "." else "other"
            if spaced and ((last == kind == "alnum") or (last == "word" and token.group().isalpha())):
                out.append(" ")
            out.append(token.group())
            last, spaced = kind, False
    return "".join(out).replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")


def _number(text: str) -> tuple[Fraction, str] | None:
    """The exact value a boxed answer writes, and its unit ('' for none); None when it is not one plain number.

    Plain: an integer (commas between groups of three, as math-verify reads
    them), a decimal, ``\\frac{a}{b}`` or ``a/b`` of integers, a power of integers
    (``10^6``, ``2^{10}``, ``1.5\\times10^{3}``: up to :data:`_MAX_POWER_DIGITS`
    digits), a sign in front, a ``\\text{...}`` unit or a degree sign after it.
    Digits apart are no number (``4 2``, ``1\\,000``: math-verify reads neither as
    one); neither is a trailing period, nor a number inside ``\\text{...}``
    (math-verify compares ``\\text{50}`` as text: equal to ``50``, not to ``50.0``).
    """
    key = _latex_key(text).replace("−", "-")
    if len(key) > _MAX_NUMBER_CHARS:
        return None
    unit = _UNIT.fullmatch(key)
    key, unit = (unit["number"], unit["unit"]) if unit else (key, "")
    sign = -1 if key[:1] == "-" else 1
    value = _unsigned(key[1:] if key[:1] in "+-" else key)
    return None if value is None else (sign * value, unit)


def _unsigned(key: str) -> Fraction | None:
    if re.fullmatch(_DECIMAL, key):
        return Fraction(key.replace("{,}", "").replace(",", ""))
    fraction = _FRACTION.fullmatch(key)
    if fraction:
        a, b = (int(g) for g in fraction.groups() if g is not None)
        return Fraction(a, b) if b else None
    power = _POWER.fullmatch(key)
    if power:
        base, exp = int(power["base"]), int(power["exp"] or power["digit"])
        if (base == 0 and exp < 0) or len(power["base"]) * abs(exp) > _MAX_POWER_DIGITS:
            return None
        return Fraction(power["m"].replace("{,}", "").replace(",", "") if power["m"] else 1) * Fraction(base) ** exp
    return None


def _by_the_kit(predicted: str, gold: str) -> bool:
    """The kit's check, where math-verify gives no verdict: stricter than math-verify, never looser on answers.

    Two plain numbers (:func:`_number`) are the same when their exact values
    are and their units are too (or one has none: ``5\\text{ cm}`` is 5; math-verify
    drops units altogether, so ``5\\text{ m}`` is ``5\\text{ cm}`` there, not here).
    Anything else is the same only when its LaTeX is, up to spacing
    (:func:`_latex_key`) and a ``\\text{...}``, ``\\mathrm``, ``\\mathbf`` or ``\\textbf``
    around a plain integer. Against math-verify itself on 195 hand-written pairs
    and 150 generated ones (``tests/test_released_math.py``): no "same" where it
    says "not equivalent", and 93 of its 113 "equivalent" hand-written pairs (the
    check before this one: 54, and 15 false "same", ``4 2`` for 42, ``1\\,000`` for
    1000 and ``\\text{50}`` for ``50.0`` among them). What it leaves
    to math-verify: radicals, algebra, percentages, mixed numbers, equations (``x=5``).
    Where they part: text math-verify cannot parse, which it compares raw and
    the kit up to spacing (fuzzed junk such as ``y\\quad\\{`` against ``y\\{``).
    """
    want, got = _number(gold), _number(predicted)
    if want is not None and got is not None:
        return want[0] == got[0] and (want[1] == got[1] or not want[1] or not got[1])
    return _unwrapped(_latex_key(predicted)) == _unwrapped(_latex_key(gold))


def _unwrapped(key: str) -> str:
    wrapped = _WRAPPED.fullmatch(key)
    return wrapped.group(1) if wrapped else key


def _boxed_answer(text: Any, answer: Any) -> str | Verdict:
    """The last boxed answer after the think block, or the verdict when there is nothing to judge."""
    if not isinstance(text, str) or not isinstance(answer, str) or not answer.strip():
        return Verdict(0.0, "no text or no gold answer")
    if think_left_open(text):
        return Verdict(0.0, "think block never closed: no answer")
    boxed = extract_boxed(answer_part(text))
    return boxed[-1] if boxed else Verdict(0.0, "no \\boxed answer after the think block")


def _by_math_verify(predicted: str, gold: str, said: tuple[bool | None, str] | None) -> Verdict:
    """The verdict from math-verify's answer ``said`` (None: not installed), or from the kit's check without one."""
    if said is not None and said[0] is not None:
        return Verdict(float(said[0]), f"math-verify: {'equivalent' if said[0] else 'not equivalent'} to {gold!r}")
    checker = f"math-verify gave no verdict ({said[1]}), so the kit's check" if said is not None else \
        "math-verify not installed (pip install 'cascadekit[released]'), so the kit's check"
    same = _by_the_kit(predicted, gold)
    return Verdict(float(same), f"{checker}: {'same' if same else 'not the same'} answer as {gold!r}")


def verify_math_batch(texts: Sequence[str], answers: Sequence[str]) -> list[Verdict]:
    """:func:`verify_math` on each ``(text, answer)``, the batch's math-verify calls sent to its workers at once.

    One message per worker for the whole batch instead of one per verdict: the
    bounded path's cost over calling math-verify directly is paid once a batch
    (``cascadekit bench math-verify``).
    """
    if len(texts) != len(answers):
        raise ValueError(f"{len(texts)} texts but {len(answers)} answers")
    found = [_boxed_answer(t, a) for t, a in zip(texts, answers)]
    asked = [(p, a) for p, a in zip(found, answers) if isinstance(p, str)]
    pool = _math_verify()
    said = iter(pool.verdicts(asked, MATH_VERIFY_TIMEOUT_S) if pool is not None else [None] * len(asked))
    return [p if isinstance(p, Verdict) else _by_math_verify(p, a, next(said)) for p, a in zip(found, answers)]


def verify_math(text: str, answer: str) -> Verdict:
    """The last boxed answer after the think block against ``answer``; never raises, bounded on any thread.

    math-verify judges it in a worker process (:mod:`cascadekit.verify.math_workers`:
    at most :data:`MATH_VERIFY_TIMEOUT_S` seconds and :data:`MATH_VERIFY_MEMORY_BYTES`);
    with no verdict from it (over the bound, a crash, not installed) the kit's
    check decides (:func:`_by_the_kit`), and the reason says which.
    """
    return verify_math_batch([text], [answer])[0]


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
    if think_left_open(text):
        return Verdict(0.0, f"think block never closed: no answer{unchecked}")
    answer = answer_part(text).strip()
    if len(answer) > MAX_ANSWER_CHARS:
        return Verdict(0.0, f"answer longer than {MAX_ANSWER_CHARS:,} characters: not judged{unchecked}")
    failed = [name for name, check in checks if not (answer and _holds(check, answer))]
    reason = f"failed: {', '.join(failed)}" if failed else "all instructions followed"
    return Verdict(float(not failed), f"{reason}{unchecked}")


# ---------------------------------------------------------------------------
# SWE
# ---------------------------------------------------------------------------

def verify_gold_patch(text: str, gold_patch: str, files: Mapping[str, str] | None = None) -> Verdict:
    """The execution-free lexical reward: the answer's patch's similarity to ``gold_patch``; never raises.

    ``text`` is a model turn, ``gold_patch`` a bare patch (chat markers in its lines are its own). The
    paper's reward by default; with ``files`` (the repository's contents, where a row has them) a patch
    that does not apply to them (as ``git apply`` judges) scores 0.
    """
    if not isinstance(text, str) or not isinstance(gold_patch, str):
        return Verdict(0.0, "no text or no gold patch")
    if files is not None:
        try:
            apply_patch(dict(files), parse_patch(text))
        except Exception as e:  # PatchError, or a malformed row's contents
            return Verdict(0.0, f"the patch does not apply: {e}" if isinstance(e, PatchError) else
                           f"the patch does not apply: {type(e).__name__}")
    score = patch_similarity(text, gold_patch)
    return Verdict(score, f"similarity {score:.2f} to the gold patch" if score else
                   "no readable patch (or an unreadable gold patch)")
