"""What bounding math-verify costs: verdicts per second through the kit's workers against calling it directly.

``cascadekit bench math-verify [-n 120] [--repeats 5] [--workers N]``

The released math reward judges every answer with math-verify in worker
processes (:mod:`cascadekit.verify.math_workers`: a deadline and a memory limit
per verdict, on any thread). The baseline, measured in the same run on the same
pairs, calls ``math_verify.verify(parse(gold), parse(answer))`` in this process
(its own signal timeouts, main thread: what a script that trusts its inputs
does). Three bounded paths:

* **batched, 1 worker**: :meth:`~cascadekit.verify.math_workers.MathVerifyPool.verdicts` on
  the whole batch (one message out, one line back per pair): like for like with
  the direct calls, one core each; its ratio is the headline (target ≥ 0.8×);
* **batched, N workers**: the same with the kit's pool size (``--workers``), the batch split across them;
* **one pair per call, 1 worker**: as streamed rewards ask, one rollout at a time.

The pairs are drawn from the forms released math answers take (integers,
fractions and decimals, radicals, polynomials, intervals, multiples of π,
units), half of them equal. Runs alternate (direct, bounded, bounded, direct,
...) so that a shared machine's load drifts onto both alike; each rate is the
median over ``--repeats``, each ratio the median of the runs' ratios to the
direct run of the same round. The script checks that every path gives the direct
verdicts, and how many of the pairs the kit's own check (the fallback where
math-verify gives no verdict) accepts. Each path is also counted in CPU seconds (this process's and its
workers'), which a shared machine's load does not skew as it skews wall time.
"""
from __future__ import annotations

import argparse
import logging
import os
import random
import statistics
import time
from pathlib import Path
from typing import Callable, Sequence

from cascadekit.verify.math_workers import MathVerifyPool
from cascadekit.verify.released import MATH_VERIFY_MEMORY_BYTES, MATH_VERIFY_TIMEOUT_S, MATH_VERIFY_WORKERS, _by_the_kit

Pairs = list[tuple[str, str]]


def pairs(n: int, seed: int = 0) -> Pairs:
    """``n`` (answer, gold) pairs, each a fresh draw of one released-math form; half equal."""
    rng = random.Random(seed)
    forms: list[Callable[[int, int, bool], tuple[str, str]]] = [
        lambda a, b, same: (f"{a * b:,}" if same else f"{a * b + 1}", str(a * b)),
        lambda a, b, same: (f"{a / 8:g}" if same else f"{a / 9:.3f}", f"\\frac{{{a}}}{{8}}"),
        lambda a, b, same: (f"\\sqrt{{{a * a * b}}}" if same else f"{a}\\sqrt{{{b + 1}}}", f"{a}\\sqrt{{{b}}}"),
        lambda a, b, same: (f"x^2+{2 * a}x+{a * a}" if same else f"x^2+{a}x+{a * a}", f"(x+{a})^2"),
        lambda a, b, same: (f"[{a}, {a + b})" if same else f"({a}, {a + b})", f"[{a},{a + b})"),
        lambda a, b, same: (f"\\dfrac{{{a}\\pi}}{{{b}}}" if same else f"\\frac{{{a + 1}\\pi}}{{{b}}}",
                            f"\\frac{{{a}\\pi}}{{{b}}}"),
        lambda a, b, same: (f"{a}\\text{{ cm}}" if same else f"{a + b}\\text{{ cm}}", str(a)),
    ]
    return [rng.choice(forms)(rng.randint(2, 99), rng.randint(2, 13), i % 2 == 0) for i in range(n)]


def direct(batch: Pairs) -> list[bool]:
    """math-verify called in this process, one pair after the other (the baseline)."""
    import math_verify

    return [bool(math_verify.verify(math_verify.parse(f"${gold}$"), math_verify.parse(f"$\\boxed{{{answer}}}$")))
            for answer, gold in batch]


def cpu_seconds(pids: Sequence[int]) -> float:
    """CPU seconds used so far by this process (all its threads) and by the processes ``pids`` (Linux's /proc)."""
    ticks = 0
    for pid in pids:
        ticks += sum(int(x) for x in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[11:13])
    return time.process_time() + ticks / os.sysconf("SC_CLK_TCK")


def rate(judge: Callable[[Pairs], list], batch: Pairs, pids: Sequence[int]) -> tuple[float, float, list]:
    """Verdicts per second and per CPU-second (this process and the workers ``pids``) of ``judge`` on ``batch``,
    and its verdicts."""
    wall, cpu = time.perf_counter(), cpu_seconds(pids)
    verdicts = judge(batch)
    return len(batch) / (time.perf_counter() - wall), len(batch) / (cpu_seconds(pids) - cpu), verdicts


def main(argv: Sequence[str] | None = None,
         parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser) -> None:
    """Run the benchmark; ``parser_class`` is the command line's own (one-line errors) under ``cascadekit bench``."""
    parser = parser_class(prog="cascadekit bench math-verify", description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=120, help="pairs per measurement")
    parser.add_argument("--repeats", type=int, default=5, help="measurements of each path (the medians count)")
    parser.add_argument("--workers", type=int, default=MATH_VERIFY_WORKERS,
                        help=f"worker processes of the batched pool (default the kit's, {MATH_VERIFY_WORKERS} here)")
    args = parser.parse_args(argv)
    if min(args.n, args.repeats, args.workers) < 1:
        parser.error("-n, --repeats and --workers must be at least 1")
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    batch = pairs(args.n)
    one, many = MathVerifyPool(1, MATH_VERIFY_MEMORY_BYTES), MathVerifyPool(args.workers, MATH_VERIFY_MEMORY_BYTES)
    paths: dict[str, Callable[[Pairs], list]] = {
        "direct": direct,
        "batched, 1 worker": lambda b: [v for v, _ in one.verdicts(b, MATH_VERIFY_TIMEOUT_S)],
        f"batched, {args.workers} workers": lambda b: [v for v, _ in many.verdicts(b, MATH_VERIFY_TIMEOUT_S)],
        "one pair per call, 1 worker": lambda b: [one.verdicts([p], MATH_VERIFY_TIMEOUT_S)[0][0] for p in b],
    }
    try:
        expected = direct(batch)
        for judge in paths.values():  # warm-up: workers started, sympy's lazy imports done, in every process
            judge(batch[:8])
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in paths}
        agree = True
        for rep in range(args.repeats):
            for name in (paths if rep % 2 == 0 else reversed(paths)):
                per_second, per_cpu_second, verdicts = rate(paths[name], batch, one.pids() + many.pids())
                runs[name].append((per_second, per_cpu_second))
                agree = agree and verdicts == expected
    finally:
        one.close()
        many.close()
    print(f"{args.n} answer/gold pairs ({sum(expected)} equal by math-verify), {args.repeats} runs of each path, "
          f"deadline {MATH_VERIFY_TIMEOUT_S} s and {MATH_VERIFY_MEMORY_BYTES >> 20} MiB per worker")
    print(f"  {'median of runs:':<30} {'verdicts/s':>10} {'x direct':>9} {'per CPU-s':>10} {'x direct':>9}")
    ratio = {}
    for name, measured in runs.items():
        wall, cpu = (statistics.median(r[i] for r in measured) for i in (0, 1))
        ratio[name] = [statistics.median(r[i] / d[i] for r, d in zip(measured, runs["direct"])) for i in (0, 1)]
        print(f"  {name:<30} {wall:10.1f} {ratio[name][0]:9.2f} {cpu:10.1f} {ratio[name][1]:9.2f}")
    print(f"bounded/direct verdicts per second: {ratio['batched, 1 worker'][0]:.2f}× (batched, 1 worker; "
          "target ≥ 0.8×)")
    print(f"bounded/direct verdicts per CPU-second: {ratio['batched, 1 worker'][1]:.2f}× (the same in CPU time, "
          "which a shared machine's load skews less)")
    kit = [_by_the_kit(answer, gold) for answer, gold in batch]
    print(f"the kit's own check (where math-verify gives no verdict) on the same pairs: "
          f"{sum(k and e for k, e in zip(kit, expected))} of {sum(expected)} equal ones accepted, "
          f"{sum(k and not e for k, e in zip(kit, expected))} unequal ones accepted (never more than 0)")
    print(f"same verdicts on every path: {agree}")
