"""pass@k: the unbiased estimator against brute-force enumeration of k-subsets."""

from __future__ import annotations

import itertools
from math import comb

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadekit.passk import pass_at_k


def _brute_force(n: int, c: int, k: int) -> float:
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(samples, k))
    return sum(any(s) for s in subsets) / len(subsets)


def test_matches_brute_force_enumeration():
    for n in range(1, 11):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(_brute_force(n, c, k), abs=1e-12)


@given(st.integers(1, 300).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
@settings(max_examples=200, deadline=None)
def test_matches_binomial_formula(args):
    n, c, k = args
    assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k), abs=1e-9)


def test_vectorized_and_stable():
    n = np.array([128, 128, 128, 12, 2000])
    c = np.array([0, 1, 128, 6, 3])
    got = pass_at_k(n, c, 8)
    assert got.shape == (5,)
    assert got[0] == 0 and got[2] == 1
    assert got[1] == pytest.approx(8 / 128)
    assert got[3] == 1.0  # fewer than k failures: every subset holds a success
    assert got[4] == pytest.approx(1 - comb(1997, 8) / comb(2000, 8))
    assert pass_at_k(n, c, 1) == pytest.approx(c / n)  # pass@1 is the success rate
    grid = pass_at_k(128, np.arange(129)[:, None], np.array([1, 8, 128]))
    assert grid.shape == (129, 3) and np.all(np.diff(grid, axis=0) >= -1e-12)


def test_scalar_returns_float_and_bad_input_raises():
    assert isinstance(pass_at_k(10, 3, 2), float)
    for n, c, k in ((5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6), (5.0, 2, 1)):
        with pytest.raises(ValueError):
            pass_at_k(n, c, k)


def test_simulated_unbiased_estimator_tracks_truth_and_naive_falls_short():
    from cascadekit.passk import estimator_bias

    result = estimator_bias(p=0.05, n=16, ks=np.arange(1, 17), trials=20_000, seed=1)
    assert np.max(np.abs(result["unbiased"] - result["true"])) < 0.015
    assert result["naive"][-1] < result["true"][-1] - 0.1
