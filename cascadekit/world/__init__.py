"""The DAG world: GSM-Infinite-style arithmetic word problems, written from scratch.

>>> p = generate_problem(op=3, context="A", seed=0, style="compact")
>>> p.training_text.startswith("<question>") and p.op == 3
True

``graph`` draws a dependency DAG with an exact operation count, ``contexts``
holds the three narrative hierarchies, ``render`` turns a graph into problem,
question and solution text, and ``corpus`` makes deduplicated, split-disjoint
corpora and mixtures.
"""

from cascadekit.world.contexts import CONTEXTS
from cascadekit.world.corpus import (
    MAX_PROBLEMS,
    SPLITS,
    Mixture,
    MixtureComponent,
    generate_problem,
    generate_problems,
    iter_problems,
    read_jsonl,
    sample_mixture,
    split_of,
    write_jsonl,
)
from cascadekit.world.graph import MAX_OP, MIN_OP
from cascadekit.world.render import STYLES, GoldNode, Problem, normalize_name

__all__ = [
    "CONTEXTS", "MAX_OP", "MAX_PROBLEMS", "MIN_OP", "SPLITS", "STYLES", "GoldNode", "Mixture", "MixtureComponent",
    "Problem", "generate_problem", "generate_problems", "iter_problems", "normalize_name", "read_jsonl",
    "sample_mixture", "split_of", "write_jsonl",
]
