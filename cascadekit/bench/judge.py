"""How long the judge takes: ``cascadekit bench judge``.

Prints the time to judge 10,000 gold solutions over ops 2-20 (target: under 10 s
on a 2-core laptop); generation time is excluded.
"""

from __future__ import annotations

import argparse
import time
from typing import Sequence

from cascadekit.verify.process import judge
from cascadekit.world import CONTEXTS, STYLES, generate_problems


def main(argv: Sequence[str] | None = None,
         parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser) -> None:
    """Run the benchmark; ``parser_class`` is the command line's own (one-line errors) under ``cascadekit bench``."""
    parser = parser_class(prog="cascadekit bench judge", description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10_000)
    args = parser.parse_args(argv)
    for style in STYLES:
        problems = generate_problems(ops=range(2, 21), contexts=tuple(CONTEXTS), n=args.n, seed=0, style=style)
        start = time.perf_counter()
        correct = sum(judge(p.training_text, p).correct for p in problems)
        seconds = time.perf_counter() - start
        print(f"judge {len(problems)} gold solutions, ops 2-20, {style}: {seconds:.2f} s "
              f"({seconds / len(problems) * 1e3:.2f} ms each), {correct} verified")

