"""Released math answers: math-verify bounded in time and memory on any thread, and the kit's check never
accepting what math-verify rejects. Both are checked against math-verify itself, imported here."""
from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from pathlib import Path

import math_verify  # the reference (the [test] extra installs it)
import pytest

from cascadekit.verify import math_workers
from cascadekit.verify import released as checks
from cascadekit.verify.released import Verdict, verify_math, verify_math_batch

logging.getLogger("math_verify").setLevel(logging.ERROR)

#: Short answers that hang math-verify (sympy evaluates the tower) or eat gigabytes.
HOSTILE = ["2^{2^{64}}", "9^{9^{9^{9^{9}}}}", "10^{10^{10}}-10^{10^{10}}+1"]

#: (predicted, gold) pairs written the ways answers are written, most equal, some close but not.
PAIRS = [
    ("42", "42"), ("+42", "42"), ("42.0", "42"), ("42.00", "42"), ("1,000", "1000"), ("1{,}000", "1000"),
    ("1000", "1,000"), ("12,345,678", "12345678"), ("-7", "-7"), ("−7", "-7"), ("0.5", "\\frac{1}{2}"),
    ("\\frac{1}{2}", "0.5"), ("1/2", "\\frac{1}{2}"), ("\\dfrac{1}{2}", "\\frac{1}{2}"), ("\\tfrac{3}{4}", "0.75"),
    ("\\frac12", "0.5"), ("\\frac{2}{4}", "\\frac{1}{2}"), ("-\\frac{1}{2}", "-0.5"), ("\\frac{-1}{2}", "-0.5"),
    ("-0.5", "\\frac{-1}{2}"), (".5", "0.5"), ("0.50", "\\frac{1}{2}"), ("10^6", "1000000"), ("10^{6}", "1000000"),
    ("1000000", "10^6"), ("2^{10}", "1024"), ("2^10", "1024"), ("10^{-2}", "0.01"), ("1.5\\times10^{3}", "1500"),
    ("1.5 \\times 10^{3}", "1500"), ("3\\cdot 10^{2}", "300"), ("5\\text{ cm}", "5"), ("5 \\text{ cm}", "5"),
    ("5\\,\\text{cm}", "5"), ("5", "5\\text{ cm}"), ("5\\mathrm{cm}", "5"), ("5\\text{ dollars}", "5"),
    ("30^\\circ", "30"), ("30^{\\circ}", "30"), ("30", "30^\\circ"), ("\\text{5}", "5"), ("\\mathbf{5}", "5"),
    ("\\textbf{5}", "5"), ("\\mathrm{5}", "5"), ("$5$", "5"), ("5", "$5$"), ("\\left(1,2\\right)", "(1,2)"),
    ("(1, 2)", "(1,2)"), ("\\sqrt{8}", "2\\sqrt{2}"), ("2\\sqrt{2}", "2\\sqrt{2}"), ("2 \\sqrt{2}", "2\\sqrt{2}"),
    ("\\sqrt{2}/2", "\\frac{\\sqrt{2}}{2}"), ("\\frac{\\sqrt{3}}{2}", "\\dfrac{\\sqrt{3}}{2}"), ("x^2+2x+1", "(x+1)^2"),
    ("\\pi", "\\pi"), ("2\\pi", "2 \\pi"), ("\\frac{\\pi}{2}", "\\dfrac{\\pi}{2}"), ("50\\%", "50"), ("50\\%", "0.5"),
    ("x=5", "5"), ("\\$5", "5"), ("\\{1,2\\}", "\\{1, 2\\}"), ("[0,1]", "[0, 1]"), ("(-\\infty, 3)", "(-\\infty,3)"),
    ("\\frac{5}{6}", "\\dfrac{5}{6}"), ("5/6", "\\frac{5}{6}"), ("\\frac{10}{12}", "\\frac{5}{6}"),
    ("0.8\\overline{3}", "\\frac{5}{6}"), ("3.14", "3.14"), ("\\frac{22}{7}", "\\frac{22}{7}"), ("e", "e"),
    ("\\text{(A)}", "\\text{(A)}"), ("A", "A"), ("\\textbf{(B)}", "B"), ("7.", "7"), ("\\frac{1}{2}.", "\\frac{1}{2}"),
    ("1.0\\times 10^{6}", "10^6"), ("2^{-1}", "0.5"), ("(-2)^{3}", "-8"), ("-2^{2}", "-4"), ("4^{1/2}", "2"), ("0", "0"),
    ("-0", "0"), ("00", "0"), ("007", "7"), ("\\frac{0}{5}", "0"), ("1e3", "1000"), ("10^{3}", "1000"),
    ("10^3", "1,000"), ("3\\frac{1}{2}", "\\frac{7}{2}"), ("\\boxed{5}", "5"), ("5 ", "5"), (" 5", "5"), ("\\;5", "5"),
    ("5\\!", "5"), ("\\displaystyle\\frac{1}{2}", "\\frac{1}{2}"), ("\\left[0,1\\right]", "[0,1]"), ("x", "x"),
    ("y=2x+1", "y = 2x + 1"), ("2x+1", "1+2x"), ("\\infty", "\\infty"), ("10\\%", "10\\%"), ("\\text{yes}", "\\text{yes}"),
    ("\\text{Yes}", "yes"), ("6\\text{ m}^2", "6"), ("6 \\text{ sq units}", "6"),
    # digits apart, near misses, malformed numbers
    ("4 2", "42"), ("4\\ 2", "42"), ("4\\,2", "42"), ("4~2", "42"), ("4\\;2", "42"), ("4\\!2", "42"), ("1\\,000", "1000"),
    ("1 000", "1000"), ("1,2", "12"), ("1,23", "123"), ("12,34", "1234"), ("41", "42"), ("-42", "42"), ("42.5", "42"),
    ("0.333", "\\frac{1}{3}"), ("0.33", "\\frac{1}{3}"), ("\\frac{1}{3}", "0.3"), ("\\frac{5}{6}", "\\frac{5}{7}"),
    ("5/7", "\\frac{5}{6}"), ("10^5", "1000000"), ("10^{7}", "1000000"), ("2^{11}", "1024"), ("1.5\\times10^{4}", "1500"),
    ("5\\text{ m}", "5\\text{ cm}"), ("6\\text{ cm}", "5"), ("31^\\circ", "30"), ("5.", "5"), ("50\\%", "5"),
    ("\\sqrt{7}", "2\\sqrt{2}"), ("x^2+1", "(x+1)^2"), ("\\pi", "3"), ("3", "\\pi"), ("(1,2)", "(2,1)"), ("[0,1]", "(0,1)"),
    ("\\{1,2\\}", "\\{1,3\\}"), ("e", "2"), ("\\text{(A)}", "\\text{(B)}"), ("A", "B"), ("-\\frac{1}{2}", "\\frac{1}{2}"),
    ("\\frac{-1}{2}", "0.5"), ("0.05", "0.5"), ("1e3", "100"), ("2^{2^{3}}", "64"), ("10^{-3}", "0.01"), ("3.15", "3.14"),
    ("\\frac{1}{2}", "2"), ("12", "1{,}2"), ("4.2", "42"), ("42", "4.2"), ("4{.}2", "42"), ("0.4 2", "0.42"),
    ("1.2 3", "1.23"), ("4 2", "4 2"), ("\\text{4 2}", "42"), ("42", "\\text{4 2}"), ("4\\quad2", "42"),
    ("4\\qquad 2", "42"), ("4\\hspace{1em}2", "42"), ("4{ }2", "42"), ("4\\enspace2", "42"), ("4\\thinspace 2", "42"),
    ("2\\cdot 3", "23"), ("2 3", "23"), ("\\frac{4 2}{1}", "42"), ("\\frac{1}{2 3}", "\\frac{1}{23}"), ("2^{1 0}", "1024"),
    ("10^{6 }", "1000000"), ("- 5", "5"), ("5-", "5"), ("\\frac{1}{0}", "0"), ("0/0", "0"), ("1/0", "\\infty"),
    ("+-5", "5"), ("--5", "5"), ("5.5.5", "5.5"), ("1,0000", "10000"), ("10,00", "1000"), ("1,000.5", "1000.5"),
    ("1.000,5", "1000.5"), ("1,000", "1"), ("1,000", "1.000"), ("10^{400}", "10^{400}"), ("10^{401}", "10^{401}"),
    ("10^{401}", "10^{400}"), ("0^{-1}", "0"),
    ("\\text{50}", "50.0"), ("\\mathbf{2750}", "2750.0"), ("\\text{1024}", "2^{10}"), ("\\text{-47}", "-47"),
]


def reference(predicted: str, gold: str) -> bool:
    """math-verify itself, called as the kit's workers call it (the gold as ``$gold$``, the answer boxed)."""
    return bool(math_verify.verify(math_verify.parse(f"${gold}$"), math_verify.parse(f"$\\boxed{{{predicted}}}$")))


@pytest.fixture
def short_deadline(monkeypatch):
    """A 1 s bound: nothing in these hostile cases finishes in minutes, so the verdict is the bound's on any machine."""
    monkeypatch.setattr(checks, "MATH_VERIFY_TIMEOUT_S", 1)


def stopped(gold: str) -> Verdict:
    return Verdict(0.0, "math-verify gave no verdict (none within 1 s: its worker was stopped), so the kit's check: "
                        f"not the same answer as {gold!r}")


@pytest.mark.parametrize("answer", HOSTILE)
def test_a_hostile_answer_scores_0_within_the_bound_on_the_main_thread(short_deadline, answer):
    assert verify_math(f"\\boxed{{{answer}}}", "4") == stopped("4")


def test_hostile_answers_score_0_within_the_bound_on_worker_threads(short_deadline):
    """Streamed rewards verify on threads, where math-verify's own (signal) timeouts cannot run."""
    with ThreadPoolExecutor(len(HOSTILE)) as pool:
        verdicts = list(pool.map(lambda answer: verify_math(f"\\boxed{{{answer}}}", "4"), HOSTILE))
    assert verdicts == [stopped("4")] * len(HOSTILE)


def test_a_worker_that_overruns_is_replaced_and_the_batch_goes_on():
    texts = ["\\boxed{0.5}", f"\\boxed{{{HOSTILE[1]}}}", "\\boxed{x^2+2x+1}", "\\boxed{3}", "no box"]
    golds = ["\\frac{1}{2}", "1", "(x+1)^2", "2", "2"]
    verdicts = verify_math_batch(texts, golds)
    assert [v.score for v in verdicts] == [1.0, 0.0, 1.0, 0.0, 0.0]
    assert verdicts[1].reason == (f"math-verify gave no verdict (none within {checks.MATH_VERIFY_TIMEOUT_S} s: its "
                                  "worker was stopped), so the kit's check: not the same answer as '1'")
    assert verdicts[3].reason == "math-verify: not equivalent to '2'"
    assert verdicts[4].reason == "no \\boxed answer after the think block"


def test_the_workers_run_under_the_memory_bound():
    assert verify_math("\\boxed{1}", "1").score == 1.0  # a worker is up
    limits = []
    for pid in checks._math_verify().pids():
        line = next(x for x in Path(f"/proc/{pid}/limits").read_text().splitlines() if "address space" in x)
        limits.append(int(line.split()[3]))
    assert limits and set(limits) == {checks.MATH_VERIFY_MEMORY_BYTES}


def test_a_math_verify_failure_is_no_verdict_and_the_kits_check_decides():
    def broken(*args, **kwargs):
        raise RuntimeError("parser exploded")

    said = math_workers._judge(type("Broken", (), {"parse": broken, "verify": broken}), "7", "7")
    assert said == (None, "it raised RuntimeError")
    assert checks._by_math_verify("7", "7", said) == Verdict(
        1.0, "math-verify gave no verdict (it raised RuntimeError), so the kit's check: same answer as '7'")


def test_the_kits_check_never_accepts_what_math_verify_rejects():
    said = [(predicted, gold, reference(predicted, gold), checks._by_the_kit(predicted, gold)) for predicted, gold in PAIRS]
    equal = [kit for _, _, ref, kit in said if ref]
    false = [(p, g) for p, g, ref, kit in said if kit and not ref]
    print(f"\nparity: the kit's math check (no math-verify) vs math-verify: {len(false)} false accepts on "
          f"{len(said) - len(equal)} unequal pairs, {sum(equal)}/{len(equal)} equal pairs accepted")
    assert false == []
    assert len(equal) >= 100 and sum(equal) / len(equal) >= 0.8, f"the kit accepts {sum(equal)} of {len(equal)}"


@pytest.mark.parametrize("predicted, gold", [
    ("0.5", "\\frac{1}{2}"), ("\\frac{1}{2}", "0.5"), ("10^6", "1000000"), ("1.5\\times10^{3}", "1500"),
    ("5\\text{ cm}", "5"), ("30^\\circ", "30"), ("1,000", "1000"), ("\\dfrac{5}{6}", "\\frac{5}{6}"),
])
def test_the_kits_check_accepts_what_is_cheap_to_see(predicted, gold):
    assert reference(predicted, gold) and checks._by_the_kit(predicted, gold)


@pytest.mark.parametrize("predicted, gold", [
    ("4 2", "42"), ("4\\,2", "42"), ("1\\,000", "1000"), ("0.4 2", "0.42"), ("5.", "5"), ("\\frac{1}{2 3}", "\\frac{1}{23}"),
])
def test_digits_apart_are_not_one_number(predicted, gold):
    assert not reference(predicted, gold) and not checks._by_the_kit(predicted, gold)


def test_the_kits_check_never_raises_on_long_or_odd_answers():
    hypothesis = pytest.importorskip("hypothesis")
    assert checks._by_the_kit("1" * 5000, "1" * 5000) and not checks._by_the_kit("1" * 5000, "1" * 4999)
    assert not checks._by_the_kit("9^{999999999}", "1") and not checks._by_the_kit("0^{-1}", "0")

    @hypothesis.given(hypothesis.strategies.text(alphabet="0123456789.,{}^/-+ \\fractimesd$~", max_size=40),
                      hypothesis.strategies.text(alphabet="0123456789.,{}^/-+ \\fractimesd$~", max_size=40))
    @hypothesis.settings(max_examples=300, deadline=None)
    def never_raises(predicted: str, gold: str) -> None:
        assert checks._by_the_kit(predicted, gold) in (True, False)

    never_raises()


def test_a_killed_trainer_leaves_no_worker_computing(tmp_path):
    """The parent dies mid-verdict (os._exit, as SIGKILL would): its worker, deep in a power tower, dies with it."""
    script = tmp_path / "trainer.py"
    script.write_text(
        "import os, threading\n"
        "from cascadekit.verify import released\n"
        "from cascadekit.verify.released import _math_verify, verify_math\n"
        "released.MATH_VERIFY_WORKERS = 1\n"
        "pool = _math_verify()\n"
        "assert verify_math('\\\\boxed{1}', '1').score == 1\n"  # a worker is up and ready
        "threading.Thread(target=verify_math, args=('\\\\boxed{9^{9^{9^{9^{9}}}}}', '1'), daemon=True).start()\n"
        "threading.Event().wait(1)\n"  # the pair is sent: the worker is inside the verdict, which never ends
        "print(*pool.pids(), flush=True)\n"
        "os._exit(0)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=Path(__file__).parents[1])
    pids = [int(p) for p in done.stdout.split()]
    assert pids, done.stderr

    def running(pid: int) -> bool:
        try:
            return "\tZ" not in Path(f"/proc/{pid}/status").read_text().split("State:")[1].splitlines()[0]
        except (OSError, IndexError):
            return False

    try:
        for _ in range(600):  # SIGKILL is immediate; the loop only spares a slow machine a false failure
            if not any(running(pid) for pid in pids):
                break
            time.sleep(0.1)
        assert not any(running(pid) for pid in pids)
    finally:
        for pid in filter(running, pids):
            os.kill(pid, signal.SIGKILL)


def written(value: Fraction) -> list[str]:
    """Ways an answer of ``value`` is written: plain, grouped, signed, as a fraction, decimal, power, wrapped, with units."""
    a, b, sign = abs(value.numerator), value.denominator, "-" if value < 0 else ""
    forms = [f"{sign}\\frac{{{a}}}{{{b}}}", f"{sign}\\dfrac{{{2 * a}}}{{{2 * b}}}", f"{sign}{a}/{b}",
             f"\\frac{{{value.numerator}}}{{{b}}}"]
    if b == 1:
        n = value.numerator
        forms += [str(n), f"{n:,}", f"{n}.0", f"{n}.00", f"+{n}", f"\\text{{{n}}}", f"\\mathbf{{{n}}}", f"{n}\\text{{ cm}}",
                  f"{n}^\\circ", f"{n}\\,\\mathrm{{kg}}", f"{n}\\%", f"\\${n}", f"{n // 1000}\\times10^{{3}}" if n % 1000 == 0
                  else f"{n}\\times10^{{0}}"]
    if Fraction(repr(float(value))) == value:
        forms += [repr(float(value)), repr(float(value)).replace("0.", ".", 1), f"{float(value)}\\text{{ m}}"]
    return forms


def test_the_kits_check_never_accepts_what_math_verify_rejects_on_generated_answers():
    rng = random.Random(0)
    said = []
    for _ in range(30):
        value = Fraction(rng.randint(-60, 60) * rng.choice([1, 1, 1000]), rng.choice([1, 1, 2, 3, 4, 5, 8]))
        near = value + rng.choice([Fraction(1), Fraction(1, 10), Fraction(-1, 2), Fraction(1000)])
        for _ in range(5):
            predicted, gold = rng.choice(written(value)), rng.choice(written(value) + written(near))
            said.append((predicted, gold, reference(predicted, gold), checks._by_the_kit(predicted, gold)))
    assert [(p, g) for p, g, ref, kit in said if kit and not ref] == []
    equal = [kit for _, _, ref, kit in said if ref]
    assert len(equal) >= 50 and sum(equal) / len(equal) >= 0.6, f"the kit accepts {sum(equal)} of {len(equal)}"


def test_a_think_tag_inside_the_answer_is_content_not_an_open_think_block():
    """Only a leading <think> opens a block (answer_part's rule): the released math verdict reads such an answer."""
    mentioned = "The tag <think> is not a block here, so \\boxed{7}"
    assert checks.verify_math(mentioned, "7").score == 1.0
    assert checks.verify_math("<think>still thinking \\boxed{7}", "7").reason == "think block never closed: no answer"
