"""How many sandboxed executions per second this machine gives, against a bare interpreter.

Code RL scores every completion by running it, so this number bounds reward
throughput: ``cascadekit bench sandbox [-n 40] [--workers 2]``.
The baseline, measured in the same run, starts the same program in a plain
``python -S`` subprocess with no isolation at all; the ratio is what the box costs.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

from cascadekit.sandbox import isolation, run_python

PROGRAM = "def f(n):\n    return sum(i * i for i in range(n))\nassert f(1000) == 332833500\nprint('ok')\n"


def _bare() -> bool:
    done = subprocess.run([sys.executable, "-S", "-c", PROGRAM], capture_output=True, timeout=30)
    return done.returncode == 0


def _sandboxed() -> bool:
    return run_python(PROGRAM).ok


def executions_per_second(run: Callable[[], bool], n: int = 40, workers: int = 1) -> float:
    """Run one small judged program ``n`` times on ``workers`` threads; return runs per second."""
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda _: run(), range(n)))
    elapsed = time.perf_counter() - start
    if not all(results):
        raise RuntimeError(f"{results.count(False)} of {n} benchmark runs failed")
    return n / elapsed


def main(argv: Sequence[str] | None = None,
         parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser) -> None:
    """Run the benchmark; ``parser_class`` is the command line's own (one-line errors) under ``cascadekit bench``."""
    parser = parser_class(prog="cascadekit bench sandbox", description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=40, help="executions per measurement")
    parser.add_argument("--workers", type=int, default=2, help="parallel threads to try")
    args = parser.parse_args(argv)
    print(f"isolation: {isolation().describe()}")
    for workers in sorted({1, args.workers}):
        bare = executions_per_second(_bare, args.n, workers)
        boxed = executions_per_second(_sandboxed, args.n, workers)
        print(f"{workers} worker(s): sandboxed {boxed:.1f}/s, bare interpreter {bare:.1f}/s, "
              f"ratio {boxed / bare:.2f}")

