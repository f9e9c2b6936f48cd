"""Intervals and verdicts of cascadekit.claims."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadekit.claims import (binomial_interval, bootstrap_interval, claim_row, per_problem_pass,
                               problem_outcomes, row_change, verdict)


@pytest.mark.parametrize("successes, trials, low, high", [
    (0, 10, 0.0, 0.3085),
    (5, 10, 0.1871, 0.8129),
    (10, 10, 0.6915, 1.0),
    (1, 20, 0.0013, 0.2487),
    (48, 96, 0.3962, 0.6038),
])
def test_clopper_pearson_known_values(successes: int, trials: int, low: float, high: float) -> None:
    assert binomial_interval(successes, trials) == pytest.approx((low, high), abs=1e-4)


def test_binomial_interval_narrows_with_confidence_and_trials() -> None:
    wide, narrow = binomial_interval(5, 10, 0.99), binomial_interval(5, 10, 0.8)
    assert wide[0] < narrow[0] and narrow[1] < wide[1]
    small, large = binomial_interval(5, 10), binomial_interval(500, 1000)
    assert large[1] - large[0] < (small[1] - small[0]) / 5


@pytest.mark.parametrize("successes, trials, confidence", [(-1, 10, 0.95), (11, 10, 0.95), (0, 0, 0.95), (1, 2, 1.0)])
def test_binomial_interval_rejects_bad_input(successes: int, trials: int, confidence: float) -> None:
    with pytest.raises(ValueError):
        binomial_interval(successes, trials, confidence)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 400).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_binomial_interval_contains_the_rate(case: tuple[int, int]) -> None:
    successes, trials = case
    low, high = binomial_interval(successes, trials)
    assert 0 <= low <= successes / trials <= high <= 1


@pytest.mark.parametrize("direction, low, high, expected", [
    ("up", 0.01, 0.2, "reproduced"),
    ("up", -0.2, -0.01, "contradicted"),
    ("up", 0.0, 0.2, "cannot tell"),
    ("up", 0.0, 0.0, "cannot tell"),
    ("down", -0.2, -0.01, "reproduced"),
    ("down", 0.01, 0.2, "contradicted"),
    ("down", -0.2, 0.0, "cannot tell"),
    ("flat", -0.05, 0.05, "reproduced"),
    ("flat", 0.0, 0.0, "reproduced"),
    ("flat", 0.06, 0.2, "contradicted"),
    ("flat", -0.2, -0.051, "contradicted"),
    ("flat", -0.01, 0.08, "cannot tell"),
])
def test_verdict_edges(direction: str, low: float, high: float, expected: str) -> None:
    assert verdict(low, high, direction) == expected


def test_verdict_flat_tolerance_and_bad_input() -> None:
    assert verdict(-0.08, 0.08, "flat", tolerance=0.1) == "reproduced"
    assert verdict(-0.08, 0.08, "flat", tolerance=0.05) == "cannot tell"
    with pytest.raises(ValueError):
        verdict(0.1, -0.1, "up")
    with pytest.raises(ValueError):
        verdict(0.0, 0.1, "sideways")  # type: ignore[arg-type]


def test_bootstrap_is_deterministic_with_a_seed() -> None:
    values = np.random.default_rng(1).random(40)
    assert bootstrap_interval(values, seed=3) == bootstrap_interval(values, seed=3)
    assert bootstrap_interval(values, seed=3) != bootstrap_interval(values, seed=4)


def test_paired_bootstrap_cancels_shared_difficulty() -> None:
    """A model better by 0.05 on every problem: paired, the change is certain; unpaired, it is lost in the spread."""
    before = np.linspace(0.0, 0.9, 50)
    after = before + 0.05
    estimate, low, high = bootstrap_interval(after, before)
    assert estimate == pytest.approx(0.05) and low == pytest.approx(0.05) and high == pytest.approx(0.05)
    estimate, low, high = bootstrap_interval(after, before, paired=False)
    assert estimate == pytest.approx(0.05) and low < 0 < high


def test_bootstrap_single_mean_covers_a_known_proportion() -> None:
    estimate, low, high = bootstrap_interval(problem_outcomes(0.5, 100))
    assert estimate == 0.5
    exact = binomial_interval(50, 100)
    assert low == pytest.approx(exact[0], abs=0.03) and high == pytest.approx(exact[1], abs=0.03)


def test_bootstrap_rejects_mismatched_pairs() -> None:
    with pytest.raises(ValueError):
        bootstrap_interval([1.0, 0.0], [1.0])
    with pytest.raises(ValueError):
        bootstrap_interval([])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=30), st.lists(st.floats(0, 1), min_size=1, max_size=30),
       st.integers(0, 2**31), st.booleans())
def test_bootstrap_interval_contains_its_estimate(after: list[float], before: list[float], seed: int,
                                                  paired: bool) -> None:
    if paired:
        before = (before * len(after))[:len(after)]
    for result in (bootstrap_interval(after, seed=seed, resamples=200),
                   bootstrap_interval(after, before, paired=paired, seed=seed, resamples=200)):
        estimate, low, high = result
        assert low <= estimate <= high


def test_problem_outcomes_keep_the_mean() -> None:
    assert problem_outcomes(0.75, 4).tolist() == [1, 1, 1, 0]
    values = problem_outcomes(0.22265625, 96)
    assert values.mean() == pytest.approx(0.22265625) and len(values) == 96
    with pytest.raises(ValueError):
        problem_outcomes(1.5, 10)


def test_per_problem_pass_groups_samples_by_problem() -> None:
    records = [{"op": 3, "problem": 0, "correct": c} for c in (True, False, False, False)]
    records += [{"op": 3, "problem": 1, "correct": False} for _ in range(4)]
    assert per_problem_pass(records, 1) == {(3, 0): 0.25, (3, 1): 0.0}
    assert per_problem_pass(records, 4) == {(3, 0): 1.0, (3, 1): 0.0}


def test_claim_row_shape_and_verdict_from_the_interval() -> None:
    row = claim_row("edge pass@1", "+4.6", 0.005, -0.11, 0.12, "up", model="mixed")
    assert list(row) == ["claim", "paper", "this run", "95% interval", "verdict", "model"]
    assert row["verdict"] == "cannot tell" and row["95% interval"] == "[-0.110, 0.120]"
    assert claim_row("x", "rises", 0.2, 0.1, 0.3, "up")["verdict"] == "reproduced"
    with pytest.raises(ValueError):
        claim_row("x", "rises", 0.5, 0.1, 0.3, "up")


def test_row_change_from_committed_rows() -> None:
    before = {"problems": 96, "pass@16": 0.6354166666666666}
    after = {"problems": 96, "pass@16": 0.5833333333333334}
    estimate, low, high = row_change(before, after, "pass@16")
    assert estimate == pytest.approx(-0.052, abs=1e-3) and low < estimate < 0 < high
    assert row_change(before, before, "pass@16", seed=1) == row_change(before, before, "pass@16", seed=1)
