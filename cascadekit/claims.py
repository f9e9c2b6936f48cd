"""Honest verdicts for "paper vs this run" rows: a 95% interval, then a verdict from it.

Every row of a chapter's paper-vs-run table states this run's figure with a 95%
interval and a verdict computed from that interval (:func:`claim_row`):
*reproduced* only when the interval excludes no change in the paper's direction,
*contradicted* when it excludes it the other way, *cannot tell* otherwise.

**Why intervals are over problems.** The samples of one problem are not
independent: a problem the model can do yields many correct samples, one it cannot
do yields none. Treating 32 problems x 16 samples as 512 independent trials would
give an interval about as narrow as 512 coin flips, when the evidence is 32
problems. So the unit resampled (:func:`bootstrap_interval`) or counted
(:func:`binomial_interval`) is always the problem: a per-problem statistic (its
pass@k estimate, or "solved at all") for the bootstrap, solved problems out of
problems for the binomial interval. Per-sample records (``samples.jsonl.gz``) give
per-problem values through :func:`per_problem_pass`; committed per-op rows that keep
only a rate and a problem count give them through :func:`problem_outcomes`.

**Why intervals are also over training seeds.** A second training run with another
seed lands elsewhere (rerun with other GRPO seeds, chapter 10's IF-RL headline moved and
once flipped its verdict), so a prompt-only interval describes one checkpoint, not the
recipe. :func:`seed_bootstrap` resamples seeds, then prompts; with one seed it is the
prompt bootstrap, draw for draw.

**Why a Holm column.** A chapter states many claims at 95%; of 70 rows about 3.5 would
"reproduce" by chance alone. :func:`holm_rows` corrects each family of rows together
(Holm-Bonferroni, :func:`holm`): the chapter's primary claims (one per RL stage, "lifts
its own domain") form one family, every other tested row the other. The plain verdict
stays beside it; the Holm verdict can only be the plain one or "cannot tell".

Stdlib and numpy only, so the notebooks and the book can use it without torch.
"""
from __future__ import annotations

import math
import re
from collections import defaultdict
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike

from cascadekit.formatting import fixed
from cascadekit.passk import pass_at_k

Direction = Literal["up", "down", "flat"]
VERDICTS = ("reproduced", "contradicted", "cannot tell")
FLAT_TOLERANCE = 0.05
"""A "flat" claim (the paper says: no change) allows changes within +-5 points of 0."""


def _binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed in log space (no overflow for large n)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    log_n = math.lgamma(n + 1)
    return min(1.0, math.fsum(
        math.exp(log_n - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q)
        for i in range(k + 1)))


def _bisect(f: Callable[[float], float], target: float, increasing: bool) -> float:
    """The p in (0, 1) with f(p) = target, for f monotone in p (bisection: always converges)."""
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if (f(mid) < target) == increasing:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return (lo + hi) / 2


def binomial_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) interval for a success probability, e.g. solved problems / problems.

    The lower end is the p at which seeing ``successes`` or more has probability
    (1 - confidence) / 2, the upper end the p at which seeing ``successes`` or fewer
    has. The binomial tails are computed exactly and inverted by bisection (no scipy).
    """
    if trials < 1 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials and trials >= 1, got {successes}/{trials}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    tail = (1 - confidence) / 2
    low = 0.0 if successes == 0 else _bisect(
        lambda p: 1 - _binomial_cdf(successes - 1, trials, p), tail, increasing=True)
    high = 1.0 if successes == trials else _bisect(
        lambda p: _binomial_cdf(successes, trials, p), tail, increasing=False)
    return low, high


def bootstrap_interval(values: ArrayLike, baseline: ArrayLike | None = None, *, paired: bool = True,
                       resamples: int = 2000, confidence: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """Percentile bootstrap over problems: (estimate, low, high) of a mean or of a change of means.

    * ``baseline`` None: the mean of ``values`` (one value per problem).
    * ``paired`` (the default): ``values`` and ``baseline`` score two models on the
      *same* problems, in the same order; the change is the mean per-problem
      difference, and whole problems are resampled, so what the two models share
      about a problem's difficulty cancels.
    * ``paired=False``: two independent samples of problems, each resampled on its
      own (the estimate is the difference of the two means). Use it when the
      pairing is unknown; it is wider than the paired interval when the models
      agree on which problems are hard.

    The interval is widened to contain the estimate where resampling is too
    coarse (a handful of problems), so that ``low <= estimate <= high`` always.
    """
    after = np.asarray(values, dtype=np.float64)
    if after.ndim != 1 or after.size == 0:
        raise ValueError("values must be a non-empty 1-d sequence, one value per problem")
    rng = np.random.default_rng(seed)

    def means(x: np.ndarray) -> np.ndarray:
        return x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)

    if baseline is None:
        estimate, draws = after.mean(), means(after)
    else:
        before = np.asarray(baseline, dtype=np.float64)
        if paired:
            if before.shape != after.shape:
                raise ValueError(f"paired samples need equal lengths, got {after.size} and {before.size}")
            estimate, draws = (after - before).mean(), means(after - before)
        else:
            if before.ndim != 1 or before.size == 0:
                raise ValueError("baseline must be a non-empty 1-d sequence, one value per problem")
            estimate, draws = after.mean() - before.mean(), means(after) - means(before)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return float(estimate), float(min(low, estimate)), float(max(high, estimate))


def _seed_draws(differences: Sequence[ArrayLike], resamples: int, seed: int,
                shared_prompts: bool) -> tuple[np.ndarray, np.ndarray]:
    """(per-seed means, bootstrap means): seeds resampled, then prompts.

    With one seed there is nothing to resample at the top level, so no seed draw is
    made and the prompt draws are exactly :func:`bootstrap_interval`'s. Seeds with
    prompts of their own (``shared_prompts`` False) may have scored different numbers
    of them (each seed's reward model held out its own pairs).
    """
    rows = [np.asarray(d, dtype=np.float64) for d in differences]
    if not rows or any(r.ndim != 1 or r.size == 0 for r in rows):
        raise ValueError("differences must be one non-empty 1-d sequence per training seed")
    if len({r.size for r in rows}) > 1:
        if shared_prompts:
            raise ValueError(f"every seed must score as many prompts, got {sorted({r.size for r in rows})} per seed")
        rng = np.random.default_rng(seed)
        picks = rng.integers(0, len(rows), size=(resamples, len(rows)))
        slots = np.stack([r[rng.integers(0, r.size, size=(resamples, len(rows), r.size))].mean(axis=2) for r in rows])
        drawn = np.take_along_axis(slots, picks[None], axis=0)[0]  # resamples x slots: the picked seed's own draw
        return np.array([r.mean() for r in rows]), drawn.mean(axis=1)
    table = np.stack(rows)
    count, size = table.shape
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, count, size=(resamples, count)) if count > 1 else np.zeros((resamples, 1), dtype=np.int64)
    if shared_prompts:
        prompts = rng.integers(0, size, size=(resamples, size))[:, None, :]
    else:
        prompts = rng.integers(0, size, size=(resamples, count, size))
    return table.mean(axis=1), table[picks[..., None], prompts].mean(axis=2).mean(axis=1)


def seed_bootstrap(differences: Sequence[ArrayLike], *, shared_prompts: bool = True, resamples: int = 2000,
                   confidence: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """(estimate, low, high) of a change over training seeds and prompts: a two-level percentile bootstrap.

    ``differences`` holds one array per training seed, each the paired per-prompt
    change (after minus before). Each resample draws seeds with replacement, then
    prompts with replacement, and averages the drawn seeds' means; the estimate is
    the mean of the per-seed means. Seed-to-seed variance thus widens the interval,
    which a prompt bootstrap of one run cannot show.

    * ``shared_prompts`` (the default): every seed answered the *same* prompts in
      the same order (the course fixes the evaluation suite), so one prompt draw
      serves every drawn seed. Drawing prompts independently per seed would count
      one prompt set as if it were several and shrink the prompts' share of the
      variance by the square root of the number of seeds.
    * ``shared_prompts=False``: each seed was scored on prompts of its own
      (another evaluation seed per run), resampled within each drawn seed.

    With one seed either way equals ``bootstrap_interval(after, before)`` exactly
    (the same draws). Widened to contain the estimate, as there.
    """
    per_seed, draws = _seed_draws(differences, resamples, seed, shared_prompts)
    estimate = float(per_seed.mean())
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return estimate, float(min(low, estimate)), float(max(high, estimate))


def bootstrap_p_value(differences: Sequence[ArrayLike], direction: Direction = "up", *,
                      tolerance: float = FLAT_TOLERANCE, shared_prompts: bool = True, resamples: int = 2000,
                      seed: int = 0) -> float:
    """Two-sided bootstrap p-value of a row's decision, from :func:`seed_bootstrap`'s own resamples (same seed).

    * "up" / "down": the test of no change, ``2 * min(P(draw <= 0), P(draw >= 0))``,
      so p < 0.05 where the 95% interval excludes 0.
    * "flat": the smaller of the two band tests, each doubled onto the same scale:
      inside +-``tolerance`` (``2 * max(P(draw >= tol), P(draw <= -tol))``, small where
      the interval lies within the band) and outside it (``2 * min(P(draw <= tol),
      P(draw >= -tol))``, small where it lies wholly beyond one edge).

    Counts are (1 + hits) / (1 + resamples), so p is never 0; capped at 1.
    """
    draws = _seed_draws(differences, resamples, seed, shared_prompts)[1]

    def share(hits: np.ndarray) -> float:
        return (1 + int(hits.sum())) / (1 + draws.size)

    if direction in ("up", "down"):
        p = 2 * min(share(draws <= 0), share(draws >= 0))
    elif direction == "flat":
        inside = 2 * max(share(draws >= tolerance), share(draws <= -tolerance))
        outside = 2 * min(share(draws <= tolerance), share(draws >= -tolerance))
        p = min(inside, outside)
    else:
        raise ValueError(f"direction must be 'up', 'down' or 'flat', got {direction!r}")
    return min(1.0, p)


def problem_outcomes(rate: float, problems: int) -> np.ndarray:
    """Per-problem 0/1 values with the given mean, from a committed (rate, problems) row.

    Exact for pass@n when n is the number of samples per problem (a problem is
    solved or not). For pass@1, which varies within [0, 1] per problem, 0/1 values
    with the same mean have the largest variance any per-problem values could have,
    so intervals built on them are conservative (wider than the truth). A rate that
    is not a whole number of problems gives one problem the fractional rest, so the
    mean stays exactly ``rate``.
    """
    if problems < 1 or not 0 <= rate <= 1:
        raise ValueError(f"need a rate in [0, 1] and problems >= 1, got {rate} over {problems}")
    solved = rate * problems
    whole = min(math.floor(solved + 1e-9), problems)
    values = np.zeros(problems)
    values[:whole] = 1.0
    if whole < problems:
        values[whole] = max(0.0, solved - whole)
    return values


def row_change(before: Mapping[str, Any], after: Mapping[str, Any], key: str, *,
               seed: int = 0) -> tuple[float, float, float]:
    """(estimate, low, high) of the change of ``key`` between two committed rows (``problems`` and rates).

    Per-op and per-range rows keep no per-problem values, so the pairing of the two
    models' problems is unknown: both are rebuilt with :func:`problem_outcomes` and
    resampled independently, which can only widen the interval.
    """
    return bootstrap_interval(problem_outcomes(after[key], after["problems"]),
                              problem_outcomes(before[key], before["problems"]), paired=False, seed=seed)


def per_problem_pass(records: Iterable[Mapping[str, Any]], k: int, key: str = "correct",
                     by: Sequence[str] = ("op", "problem")) -> dict[tuple, float]:
    """Each problem's unbiased pass@k from per-sample records (one dict per sample, as in ``samples.jsonl.gz``).

    Records are grouped by the fields in ``by`` (one group per problem); the value
    is pass@k of the group's ``key`` flags. Filter the records (model, context)
    before calling.
    """
    counts: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    for record in records:
        tally = counts[tuple(record[f] for f in by)]
        tally[0] += 1
        tally[1] += bool(record[key])
    return {problem: float(pass_at_k(n, c, k)) for problem, (n, c) in sorted(counts.items())}


def verdict(low: float, high: float, direction: Direction, tolerance: float = FLAT_TOLERANCE) -> str:
    """"reproduced", "contradicted" or "cannot tell", from a 95% interval of this run's change.

    * "up" / "down": reproduced when the whole interval lies above / below 0,
      contradicted when it lies wholly on the other side, else cannot tell (an
      interval touching 0, such as [0, 0] when nothing moved, cannot tell).
    * "flat" (the paper says nothing changes, or a level stays near 0): reproduced
      when the interval lies within +-``tolerance``, contradicted when it lies wholly
      outside that band, else cannot tell. The tolerance is stated in the row's
      claim by whoever uses it; the default is 5 points.
    """
    if low > high:
        raise ValueError(f"interval low {low} above high {high}")
    if direction == "up":
        return "reproduced" if low > 0 else "contradicted" if high < 0 else "cannot tell"
    if direction == "down":
        return "reproduced" if high < 0 else "contradicted" if low > 0 else "cannot tell"
    if direction == "flat":
        if -tolerance <= low and high <= tolerance:
            return "reproduced"
        return "contradicted" if low > tolerance or high < -tolerance else "cannot tell"
    raise ValueError(f"direction must be 'up', 'down' or 'flat', got {direction!r}")


def in_unit(unit: str, direction: Direction, tolerance: float = FLAT_TOLERANCE) -> str:
    """A claim's note for a change counted in ``unit``: the unit, and where the paper's direction lies."""
    expected = {"up": "above 0", "down": "below 0"}.get(direction, f"within +-{tolerance:g} of 0")
    return f"(in {unit}, not a share: the paper's direction is {expected})"


def claim_row(claim: str, paper: str, estimate: float, low: float, high: float, direction: Direction,
              *, tolerance: float = FLAT_TOLERANCE, digits: int = 3, seeds: Sequence[float] | None = None,
              p_value: float | None = None, primary: bool | None = None, unit: str = "",
              **extra: Any) -> dict[str, Any]:
    """One row of a paper-vs-run table, the same shape in every chapter.

    ``{"claim", "paper", "this run", "95% interval", "verdict", **extra}``: ``this run``
    is the estimate (a change, or a level for "flat" claims) and the verdict comes
    from the interval alone (:func:`verdict`), never from the estimate's sign.

    ``seeds`` (the per-seed estimates of a :func:`seed_bootstrap` interval) are shown
    in the interval's cell, ``[lo, hi] (seeds: a, b, c)``. ``p_value``
    (:func:`bootstrap_p_value`) adds a ``p`` and a ``family`` cell (``primary`` or
    ``secondary``, from ``primary``) for :func:`holm_rows`. Without them the row is
    exactly what it was before seeds and families existed.

    ``unit`` names what a change is counted in when it is not a share (``"tokens"``):
    the claim then says so and which side of 0 is the paper's direction, since such a
    row sits among accuracy changes. Cells never write a negative zero
    (:func:`cascadekit.formatting.fixed`); the verdict reads the unrounded interval.
    """
    if not low <= estimate <= high:
        raise ValueError(f"estimate {estimate} outside its interval [{low}, {high}]")
    if p_value is not None and not 0 <= p_value <= 1:
        raise ValueError(f"p_value must lie in [0, 1], got {p_value}")
    interval = f"[{fixed(low, digits)}, {fixed(high, digits)}]"
    if seeds is not None:
        interval += " (seeds: " + ", ".join(fixed(s, digits) for s in seeds) + ")"
    row = {
        "claim": f"{claim} {in_unit(unit, direction, tolerance)}" if unit else claim,
        "paper": paper,
        "this run": round(estimate, digits) + 0.0,  # + 0.0: a rounded -0.0 becomes 0.0
        "95% interval": interval,
        "verdict": verdict(low, high, direction, tolerance),
    }
    if p_value is not None:
        row["p"] = p_value
    if p_value is not None or primary is not None:
        row["family"] = "primary" if primary else "secondary"
    return {**row, **extra}


def seed_row(claim: str, paper: str, differences: Sequence[ArrayLike], direction: Direction, *,
             primary: bool = False, tolerance: float = FLAT_TOLERANCE, digits: int = 3, shared_prompts: bool = True,
             **extra: Any) -> dict[str, Any]:
    """A claim row of paired per-prompt differences, one array per training seed: interval, p-value, per-seed estimates.

    :func:`seed_bootstrap` gives the interval and :func:`bootstrap_p_value` the p
    from the same resamples (``shared_prompts`` as there); the per-seed estimates
    are shown when there is more than one seed, so a one-seed row reads as a
    prompt-bootstrap row plus its p.
    """
    estimate, low, high = seed_bootstrap(differences, shared_prompts=shared_prompts)
    seeds = [float(np.mean(d)) for d in differences]
    p_value = bootstrap_p_value(differences, direction, tolerance=tolerance, shared_prompts=shared_prompts)
    return claim_row(claim, paper, estimate, low, high, direction, tolerance=tolerance, digits=digits,
                     seeds=seeds if len(seeds) > 1 else None, p_value=p_value, primary=primary, **extra)


#: The share of a run's steps at each end that a "last steps minus first steps" row compares.
STEP_WINDOW = 0.25


def step_windows(values: Sequence[float], window: float = STEP_WINDOW) -> tuple[list[float], list[float]]:
    """A run's per-step values over its last ``window`` share of steps, and over its first (one step at least)."""
    values = [float(v) for v in values]
    n = max(1, int(len(values) * window))
    return values[-n:], values[:n]


def unpaired_seed_row(claim: str, paper: str, after: Sequence[ArrayLike], before: Sequence[ArrayLike],
                      direction: Direction, *, tolerance: float = FLAT_TOLERANCE, digits: int = 3, resamples: int = 2000,
                      confidence: float = 0.95, seed: int = 0, **extra: Any) -> dict[str, Any]:
    """A claim row of a change of means between two unpaired samples (steps of a run, two bands of prompts), one
    pair of samples per training seed; like every unpaired row, in no Holm family (no p).

    One seed: :func:`bootstrap_interval` with ``paired=False``, exactly. Several: each
    resample draws seeds with replacement, then within each drawn seed resamples its
    ``after`` and its ``before`` on their own; the estimate is the mean of the
    per-seed changes, which are shown beside the interval.
    """
    if len(after) != len(before) or not after:
        raise ValueError(f"need one after and one before sample per seed, got {len(after)} and {len(before)}")
    if len(after) == 1:
        return claim_row(claim, paper, *bootstrap_interval(after[0], before[0], paired=False, resamples=resamples,
                                                           confidence=confidence, seed=seed), direction,
                         tolerance=tolerance, digits=digits, **extra)
    pairs = [(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)) for a, b in zip(after, before)]
    if any(a.ndim != 1 or a.size == 0 or b.ndim != 1 or b.size == 0 for a, b in pairs):
        raise ValueError("every seed's after and before must be non-empty 1-d sequences")
    rng = np.random.default_rng(seed)

    def means(x: np.ndarray) -> np.ndarray:
        return x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)

    changes = np.stack([means(a) - means(b) for a, b in pairs], axis=1)  # resamples x seeds
    picks = rng.integers(0, len(pairs), size=(resamples, len(pairs)))
    draws = np.take_along_axis(changes, picks, axis=1).mean(axis=1)
    per_seed = [float(a.mean() - b.mean()) for a, b in pairs]
    estimate = float(np.mean(per_seed))
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return claim_row(claim, paper, estimate, float(min(low, estimate)), float(max(high, estimate)), direction,
                     tolerance=tolerance, digits=digits, seeds=per_seed, **extra)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni step-down adjusted p-values, in the order given.

    The i-th smallest of m p-values is multiplied by (m - i + 1), the products are
    made non-decreasing in that order (a hypothesis is rejected only if every
    smaller one is) and capped at 1. Rejecting where the adjusted p is below alpha
    controls the chance of any false rejection in the family at alpha.
    """
    p = np.asarray(p_values, dtype=np.float64)
    if p.ndim != 1 or np.any((p < 0) | (p > 1)) or np.any(np.isnan(p)):
        raise ValueError("p_values must be a 1-d sequence of numbers in [0, 1]")
    order = np.argsort(p, kind="stable")
    scaled = np.maximum.accumulate(p[order] * (p.size - np.arange(p.size)))
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(scaled, 1.0)
    return adjusted.tolist()


def holm_verdict(plain: str, adjusted_p: float, alpha: float = 0.05) -> str:
    """The plain verdict where its family's Holm-adjusted p is below ``alpha``, else "cannot tell".

    The plain verdict already says which way the interval points; Holm only decides
    whether that reading survives the family's multiplicity, so it is never more
    decisive than the plain verdict.
    """
    if plain not in VERDICTS:
        raise ValueError(f"verdict must be one of {VERDICTS}, got {plain!r}")
    return plain if adjusted_p < alpha else "cannot tell"


def holm_rows(rows: Sequence[Mapping[str, Any]], alpha: float = 0.05) -> list[dict[str, Any]]:
    """The rows with a ``Holm`` cell after ``family``: each family's rows corrected together (:func:`holm`).

    A row's family is its ``family`` cell (``primary``: the chapter's primary claims;
    ``secondary``: every other row with a ``p``). A row without a p-value (a level,
    a ratio, an unpaired or per-step statistic) is in no family: its ``p``,
    ``family`` and ``Holm`` cells read "n/a", and the secondary family is corrected
    over the tested rows only. Every row gets the same columns, in the same order.
    """
    holm_cells: dict[int, str] = {}
    for family in ("primary", "secondary"):
        members = [i for i, r in enumerate(rows) if r.get("p") is not None and r.get("family") == family]
        for i, adjusted in zip(members, holm([rows[i]["p"] for i in members])):
            holm_cells[i] = f"{holm_verdict(rows[i]['verdict'], adjusted, alpha)} (adj. p {adjusted:.3f})"
    result = []
    for i, r in enumerate(rows):
        head = {k: r[k] for k in ("claim", "paper", "this run", "95% interval", "verdict")}
        tested = i in holm_cells
        head.update({"p": r["p"] if tested else "n/a", "family": r["family"] if tested else "n/a",
                     "Holm": holm_cells.get(i, "n/a")})
        result.append({**head, **{k: v for k, v in r.items() if k not in head}})
    return result


_DECIMALS = re.compile(r"\[-?\d+(?:\.(\d+))?")


def claims_view(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The claim rows as a notebook shows them: five columns, not eight.

    ``claim``, ``paper``, this run's figure with its interval (at the interval's
    precision), the ``verdict`` and, where rows carry one (:func:`holm_rows`), the
    verdict after Holm with its family (the adjusted p is in that cell, so the raw
    ``p`` column is left to ``paper_vs_run.md``, which keeps all eight).
    """
    view = []
    for row in rows:
        estimate, interval = row["this run"], str(row["95% interval"])
        if isinstance(estimate, float):
            decimals = _DECIMALS.match(interval)
            estimate = fixed(estimate, len(decimals.group(1) or "") if decimals else 3)
        cells = {"claim": row["claim"], "paper": row["paper"], "this run [95% interval]": f"{estimate} {interval}",
                 "verdict": row["verdict"]}
        if "Holm" in row:
            tested = row.get("family", "n/a") != "n/a"
            cells["after Holm"] = f"{row['Holm']}, {row['family']} family" if tested else "no p-value: not corrected"
        view.append(cells)
    return view
