"""How long the world takes to generate: ``cascadekit bench world``.

Prints the time to generate 10,000 deduplicated problems over ops 2-20 (target:
under 30 s on a 2-core laptop) and the mean rendered length per op and style.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from typing import Sequence

from cascadekit.world import CONTEXTS, STYLES, generate_problem, generate_problems


def time_generation(n: int, style: str) -> float:
    start = time.perf_counter()
    generate_problems(ops=range(2, 21), contexts=tuple(CONTEXTS), n=n, seed=0, split="pretrain", style=style)
    return time.perf_counter() - start


def lengths(ops: range, per_op: int = 30) -> dict[tuple[str, int], tuple[float, float, float]]:
    """Mean (problem words, solution words, training-text characters) per (style, op)."""
    sums: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for style in STYLES:
        for op in ops:
            for seed in range(per_op):
                p = generate_problem(op, "ABC"[seed % 3], seed, style)
                row = sums[style, op]
                row[0] += len(f"{p.problem_text} {p.question}".split()) / per_op
                row[1] += len(p.solution_text.split()) / per_op
                row[2] += len(p.training_text) / per_op
    return {key: (a, b, c) for key, (a, b, c) in sums.items()}


def main(argv: Sequence[str] | None = None,
         parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser) -> None:
    """Run the benchmark; ``parser_class`` is the command line's own (one-line errors) under ``cascadekit bench``."""
    parser = parser_class(prog="cascadekit bench world", description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10_000)
    args = parser.parse_args(argv)
    for style in STYLES:
        seconds = time_generation(args.n, style)
        print(f"generate {args.n} problems, ops 2-20, contexts A/B/C, {style}: {seconds:.1f} s "
              f"({args.n / seconds:.0f} problems/s)")
    print("\nmean length per op (problem+question words / solution words / training-text chars)")
    table = lengths(range(2, 21))
    print("op  " + "  ".join(f"{style:>22}" for style in STYLES))
    for op in range(2, 21):
        cells = [f"{table[s, op][0]:6.0f} {table[s, op][1]:6.0f} {table[s, op][2]:8.0f}" for s in STYLES]
        print(f"{op:<3} " + "  ".join(cells))

