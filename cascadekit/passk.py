r"""pass@k: the chance that at least one of k samples is correct.

With ``n`` samples per problem of which ``c`` pass the judge, the estimator is

.. math::  \widehat{\text{pass@}k} = 1 - \binom{n-c}{k} \Big/ \binom{n}{k}.

**Why it is unbiased.** Think of drawing k of the n samples without replacement.
``C(n-c, k) / C(n, k)`` is exactly the fraction of k-subsets that contain no
correct sample, so the estimator is the fraction of k-subsets with at least one
correct sample: the average of the indicator "this subset passes" over all
subsets. Each subset of k i.i.d. samples is itself a sample of size k, so each
indicator has expectation pass@k; an average of unbiased estimates is unbiased.
The naive ``1 - (1 - c/n)**k`` plugs an estimate into a nonlinear function and
is biased (it underestimates pass@k when k > 1).

**Why the product form.** ``C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k/i)``:
the binomials overflow floats for n around 1000, the product of numbers in
[0, 1] does not. When ``n - c < k`` every k-subset holds a correct sample and
pass@k is 1.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def pass_at_k(n: ArrayLike, c: ArrayLike, k: int | ArrayLike) -> np.ndarray | float:
    """Unbiased pass@k per problem from ``n`` samples with ``c`` correct (arrays broadcast).

    Returns a float for scalar inputs, else an array of the broadcast shape.
    """
    n_arr, c_arr, k_arr = np.broadcast_arrays(*(np.asarray(x) for x in (n, c, k)))
    for name, arr in (("n", n_arr), ("c", c_arr), ("k", k_arr)):
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"{name} must hold integers, got dtype {arr.dtype}")
    if np.any(k_arr < 1) or np.any(k_arr > n_arr) or np.any(c_arr < 0) or np.any(c_arr > n_arr):
        raise ValueError("need 1 <= k <= n and 0 <= c <= n for every problem")
    n_f, c_f, k_f = (a.astype(np.float64)[..., None] for a in (n_arr, c_arr, k_arr))
    i = np.arange(1, int(n_arr.max(initial=0)) + 1, dtype=np.float64)
    in_product = (i > n_f - c_f) & (i <= n_f)  # i runs over n-c+1 .. n
    with np.errstate(divide="ignore", invalid="ignore"):
        factors = np.where(in_product, 1.0 - k_f / i, 1.0)
    result = np.where(n_arr - c_arr < k_arr, 1.0, 1.0 - np.prod(factors, axis=-1))
    return float(result) if result.ndim == 0 else result


def naive_pass_at_k(n: ArrayLike, c: ArrayLike, k: int | ArrayLike) -> np.ndarray | float:
    """The plug-in estimate ``1 - (1 - c/n)**k``: biased low for k > 1 (shown in chapter 02)."""
    result = 1.0 - (1.0 - np.asarray(c, dtype=np.float64) / np.asarray(n, dtype=np.float64)) ** np.asarray(k)
    return float(result) if result.ndim == 0 else result


def estimator_bias(p: float, n: int, ks: ArrayLike, trials: int = 20_000, seed: int = 0) -> dict[str, np.ndarray]:
    """Mean of the unbiased and the naive estimators over simulated runs, beside the truth.

    Each trial draws ``n`` samples that are correct with probability ``p``; the
    true pass@k of such a model is ``1 - (1 - p)**k``.
    """
    ks = np.asarray(ks)
    c = np.random.default_rng(seed).binomial(n, p, size=trials)
    n_col = np.full((trials, 1), n)
    return {
        "k": ks,
        "true": 1.0 - (1.0 - p) ** ks,
        "unbiased": pass_at_k(n_col, c[:, None], ks[None, :]).mean(axis=0),
        "naive": naive_pass_at_k(n_col, c[:, None], ks[None, :]).mean(axis=0),
    }
