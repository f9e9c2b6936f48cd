"""Corpora of problems: deterministic, deduplicated, split-disjoint, mixed by recipe.

Two guards keep the splits (pretrain, midtrain, rl, eval) apart, as the paper
requires ("no identical problem-solution bundle in training and evaluation"):

1. each split draws its problems from its own seed stream (a hash of the split
   name, the corpus seed and a counter), and
2. each split only *keeps* problems whose graph hash falls in its quarter of the
   hash space. The graph hash ignores statement order, so the same graph with the
   same names can never land in two splits, whichever seeds produced it.

Within a corpus, problems are deduplicated by the hash of their normalized
(problem, question, solution) text. Both hashes are over text, so disjointness
holds within one rendering style: keep one style per experiment.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from cascadekit.atomic import atomic_open
from cascadekit.world.contexts import context_id
from cascadekit.world import paper
from cascadekit.world.graph import check_op, sample_graph
from cascadekit.world.render import Problem, check_style, render_problem

SPLITS = ("pretrain", "midtrain", "rl", "eval")
MAX_DRAWS_PER_PROBLEM = 1000
#: The most problems one call may ask for: 10**8 is about 17 hours of generation at
#: ~1,600 problems/s and ~15 GB of deduplication keys; beyond it, use several seeds.
MAX_PROBLEMS = 100_000_000
MAX_SEED = 2**63 - 1


def generate_problem(op: int, context: str = "A", seed: int = 0, style: str = "full") -> Problem:
    """One problem with exactly ``op`` operations, a pure function of its arguments.

    The seed fixes the graph, the names' positions and the letters; the context
    and style only choose the words (except ``paper``, which draws its own graph
    with the paper's op count, forward or reverse: :mod:`cascadekit.world.paper`). So ``generate_problem(5, "A", 0)`` and
    ``generate_problem(5, "B", 0, "compact")`` are the same arithmetic in two
    costumes, which is handy for showing that contexts share structure.
    """
    check_op(op)
    check_style(style)
    context = context_id(context)
    rng = random.Random(seed)
    if style in (paper.STYLE, paper.BUG_COMPAT_STYLE):
        return paper.generate(op, context, rng, seed, official_bug_compat=style == paper.BUG_COMPAT_STYLE)
    return render_problem(sample_graph(op, rng), context, style, rng, seed=seed)


@functools.lru_cache(maxsize=None)
def rendering_fingerprint(style: str) -> str:
    """A hash of fixed problems' training text in ``style``: it changes whenever the text format does.

    Cache keys of anything trained on the world include it, so a change to the
    renderer (a new step grammar, a new name) can never serve a stale tokenizer
    or model from the artifact cache, even when no profile setting changed.
    """
    texts = [generate_problem(op, context, seed, style).training_text
             for op in (2, 5, 9, 14) for context in ("A", "B", "C") for seed in range(3)]
    return hashlib.blake2b("\x1e".join(texts).encode(), digest_size=8).hexdigest()


def split_of(problem: Problem) -> str:
    """The only split this problem may appear in, from its order-blind graph hash."""
    return SPLITS[int(problem.graph_key[:8], 16) % len(SPLITS)]


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}: use one of {', '.join(SPLITS)}")


def _derived_seed(*parts: object) -> int:
    """A 63-bit seed from the parts, so it fits an int64 column (Arrow, datasets)."""
    text = "/".join(str(p) for p in parts)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") >> 1


def _generate(slots: list[tuple[int, str]], n: int, seed: int, split: str, style: str,
              seen: set[str]) -> Iterator[Problem]:
    """``n`` new problems cycling through (op, context) ``slots``; ``seen`` keys are skipped and grown."""
    draw = itertools.count()
    for index in range(n):
        op, context = slots[index % len(slots)]
        for _ in range(MAX_DRAWS_PER_PROBLEM):
            problem = generate_problem(op, context, _derived_seed(split, seed, next(draw)), style)
            if split_of(problem) == split and problem.key not in seen:
                break
        else:
            raise ValueError(
                f"could not draw {n} distinct {split} problems: after {index}, "
                f"{MAX_DRAWS_PER_PROBLEM} draws at op={op}, context={context} found nothing new; "
                f"ask for fewer than n={n} or widen the op range")
        seen.add(problem.key)
        yield problem


def check_count(n: object, name: str = "n") -> int:
    """``n`` if it is an int from 0 to :data:`MAX_PROBLEMS`; ValueError otherwise."""
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= MAX_PROBLEMS:
        raise ValueError(f"{name} must be an integer from 0 to {MAX_PROBLEMS:,}, got {n!r}")
    return n


def _check_seed(seed: object) -> None:
    if not isinstance(seed, int) or isinstance(seed, bool) or abs(seed) > MAX_SEED:
        raise ValueError(f"seed must be an integer of at most 2**63 - 1 in size, got {seed!r}")


def _checked_ops(ops: Iterable[int]) -> list[int]:
    """The distinct ops, sorted, each checked *before* anything is built from them.

    A ``range`` is checked by its ends, so ``range(2, 10**9)`` fails at once
    instead of materializing a billion ints; any other iterable fails at its first
    op out of range.
    """
    if isinstance(ops, range) and ops.step == 1 and len(ops):
        check_op(ops[0])
        check_op(ops[-1])
    checked: set[int] = set()
    for op in ops:
        check_op(op)
        checked.add(op)
    return sorted(checked)


def iter_problems(ops: Iterable[int] = range(2, 11), contexts: Iterable[str] | str = ("A",),
                  n: int = 1000, seed: int = 0, split: str = "pretrain",
                  style: str = "full") -> Iterator[Problem]:
    """Like :func:`generate_problems`, one problem at a time (a corpus too big to hold in memory).

    Every argument is checked when this is called, before the first problem is drawn.
    """
    ops = _checked_ops(ops)
    contexts = [contexts] if isinstance(contexts, str) else list(contexts)
    if not ops or not contexts:
        raise ValueError("need at least one op and one context")
    contexts = list(dict.fromkeys(context_id(c) for c in contexts))
    check_style(style)
    _check_split(split)
    check_count(n)
    _check_seed(seed)
    slots = [(op, c) for c in contexts for op in ops]
    return _generate(slots, n, seed, split, style, set())


def generate_problems(ops: Iterable[int] = range(2, 11), contexts: Iterable[str] | str = ("A",),
                      n: int = 1000, seed: int = 0, split: str = "pretrain",
                      style: str = "full") -> list[Problem]:
    """``n`` distinct problems of one split, cycling evenly through every (op, context).

    Deterministic in all arguments; disjoint from every other split's problems.
    """
    return list(iter_problems(ops, contexts, n, seed, split, style))


@dataclass(frozen=True)
class MixtureComponent:
    """A share of a corpus: one context over an inclusive op range ``ops=(lo, hi)`` (or a range)."""

    context: str
    ops: tuple[int, int] | range
    share: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "context", context_id(self.context))
        if isinstance(self.ops, range) and self.ops.step == 1 and len(self.ops):
            lo, hi = self.ops[0], self.ops[-1]
        else:
            lo, hi = self.ops
        check_op(lo)
        check_op(hi)
        if lo > hi:
            raise ValueError(f"empty op range {self.ops!r}")
        object.__setattr__(self, "ops", (lo, hi))
        if not self.share >= 0:
            raise ValueError(f"share must be non-negative, got {self.share!r}")


@dataclass(frozen=True)
class Mixture:
    """Components whose shares sum to 1, e.g. context A ops 2-20 at 99.9% + context B op 2 at 0.1%."""

    components: tuple[MixtureComponent, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "components", tuple(self.components))
        total = sum(c.share for c in self.components)
        if not self.components or abs(total - 1) > 1e-9:
            raise ValueError(f"mixture shares must sum to 1, got {total}")

    def counts(self, n: int) -> list[int]:
        """Problems per component for a corpus of ``n``: largest remainders, summing to ``n``."""
        exact = [c.share * n for c in self.components]
        counts = [int(x) for x in exact]
        by_remainder = sorted(range(len(exact)), key=lambda i: (counts[i] - exact[i], i))
        for i in by_remainder[: n - sum(counts)]:
            counts[i] += 1
        return counts


def sample_mixture(mixture: Mixture, n: int, seed: int = 0, split: str = "pretrain",
                   style: str = "full") -> list[Problem]:
    """``n`` distinct problems drawn from a mixture, shuffled, deterministic in the seed."""
    check_style(style)
    _check_split(split)
    check_count(n)
    _check_seed(seed)
    seen: set[str] = set()
    problems: list[Problem] = []
    for index, (component, count) in enumerate(zip(mixture.components, mixture.counts(n))):
        lo, hi = component.ops
        slots = [(op, component.context) for op in range(lo, hi + 1)]
        problems += _generate(slots, count, _derived_seed(seed, "mixture", index), split, style, seen)
    random.Random(seed).shuffle(problems)
    return problems


def write_jsonl(problems: Iterable[Problem], path: str | Path) -> Path:
    """One problem per line, gold graph included, streamed from ``problems``.

    Written atomically (:func:`cascadekit.atomic.atomic_open`): if the iterable
    raises or the process is killed midway, ``path`` keeps its previous content.
    """
    path = Path(path)
    with atomic_open(path, "w") as fh:
        for problem in problems:
            fh.write(json.dumps(problem.to_dict()) + "\n")
    return path


def read_jsonl(path: str | Path) -> list[Problem]:
    with Path(path).open() as fh:
        return [Problem.from_dict(json.loads(line)) for line in fh if line.strip()]
