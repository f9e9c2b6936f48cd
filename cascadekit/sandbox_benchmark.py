"""How many sandboxed executions per second this machine gives.

Code RL scores every completion by running it, so this number bounds reward
throughput: ``python -m cascadekit.sandbox_benchmark [-n 40] [--workers 2]``.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

from cascadekit.sandbox import isolation, run_python

PROGRAM = "def f(n):\n    return sum(i * i for i in range(n))\nassert f(1000) == 332833500\nprint('ok')\n"


def executions_per_second(n: int = 40, workers: int = 1) -> float:
    """Run a small judged program ``n`` times on ``workers`` threads; return runs per second."""
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda _: run_python(PROGRAM), range(n)))
    elapsed = time.perf_counter() - start
    failed = [r for r in results if not r.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} benchmark runs failed: {failed[0].stderr[-500:]}")
    return n / elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=40, help="executions per measurement")
    parser.add_argument("--workers", type=int, default=2, help="parallel threads to try")
    args = parser.parse_args(argv)
    print(f"isolation: {isolation().describe()}")
    for workers in sorted({1, args.workers}):
        rate = executions_per_second(args.n, workers)
        print(f"{workers} worker(s): {rate:.1f} sandboxed executions/s")


if __name__ == "__main__":
    main()
