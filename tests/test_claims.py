"""Intervals and verdicts of cascadekit.claims."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadekit.claims import (binomial_interval, bootstrap_interval, bootstrap_p_value, claim_row, holm, holm_rows,
                               holm_verdict, per_problem_pass, problem_outcomes, row_change, seed_bootstrap, seed_row,
                               verdict)


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


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-1, 1), min_size=1, max_size=40), st.integers(0, 2**31))
def test_seed_bootstrap_with_one_seed_is_the_prompt_bootstrap(differences: list[float], seed: int) -> None:
    """One seed: the same draws as the paired prompt bootstrap, so the same numbers exactly."""
    after = np.asarray(differences)
    assert seed_bootstrap([after], seed=seed, resamples=300) == bootstrap_interval(
        after, np.zeros_like(after), seed=seed, resamples=300)


def _coverage(shared: bool, trials: int = 200) -> float:
    """How often the 95% interval holds the true mean change 0.1 over 5 seeds (offsets N(0, 0.05)) x 40 prompts."""
    rng, covered = np.random.default_rng(7), 0
    for trial in range(trials):
        offsets = rng.normal(0.0, 0.05, size=5)
        prompts = rng.normal(0.0, 0.3, size=40)  # one prompt set for every seed, when shared
        seeds = [0.1 + o + (prompts if shared else rng.normal(0.0, 0.3, size=40)) + rng.normal(0.0, 0.1, size=40)
                 for o in offsets]
        _, low, high = seed_bootstrap(seeds, shared_prompts=shared, resamples=400, seed=trial)
        covered += low <= 0.1 <= high
    return covered / trials


@pytest.mark.parametrize("shared", [True, False])
def test_seed_bootstrap_covers_a_known_mean(shared: bool) -> None:
    assert 0.85 <= _coverage(shared) <= 1.0


def test_independent_prompt_draws_undercover_shared_prompts() -> None:
    """Shared prompts resampled as if each seed had its own: the interval is too narrow (why shared is the default)."""
    rng = np.random.default_rng(11)
    prompts = rng.normal(0.0, 0.3, size=40)
    seeds = [0.1 + prompts + rng.normal(0.0, 0.02, size=40) for _ in range(4)]
    _, low_shared, high_shared = seed_bootstrap(seeds)
    _, low_nested, high_nested = seed_bootstrap(seeds, shared_prompts=False)
    assert high_nested - low_nested < 0.7 * (high_shared - low_shared)


def test_seed_variance_widens_the_interval() -> None:
    """Seeds spread by +-0.2 on the same prompts widen the interval; identical seeds leave it as one seed's."""
    base = np.random.default_rng(3).normal(0.05, 0.2, size=60)
    _, low_one, high_one = seed_bootstrap([base])
    _, low_same, high_same = seed_bootstrap([base, base, base])
    estimate, low, high = seed_bootstrap([base - 0.2, base, base + 0.2])
    assert estimate == pytest.approx(base.mean())
    assert high_same - low_same == pytest.approx(high_one - low_one, rel=0.25)
    assert high - low > 2 * (high_one - low_one)


def test_seed_bootstrap_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        seed_bootstrap([])
    with pytest.raises(ValueError):
        seed_bootstrap([[0.1, 0.2], [0.1]])
    with pytest.raises(ValueError):
        bootstrap_p_value([[0.1, 0.2]], "sideways")  # type: ignore[arg-type]


def test_p_value_agrees_with_the_interval() -> None:
    """p < 0.05 where the 95% interval excludes no change, large where it straddles it; flat reads the band."""
    rng = np.random.default_rng(5)
    clear, null = [rng.normal(0.3, 0.2, size=50)], [rng.normal(0.0, 0.2, size=50)]
    assert seed_bootstrap(clear)[1] > 0 and bootstrap_p_value(clear) < 0.05
    assert bootstrap_p_value(clear, "down") == bootstrap_p_value(clear, "up")
    assert bootstrap_p_value(null) > 0.1
    assert bootstrap_p_value([np.zeros(20)]) == 1.0
    tight = [rng.normal(0.0, 0.02, size=80)]
    assert bootstrap_p_value(tight, "flat") < 0.05 and verdict(*seed_bootstrap(tight)[1:], "flat") == "reproduced"
    assert bootstrap_p_value(clear, "flat") < 0.05 and verdict(*seed_bootstrap(clear)[1:], "flat") == "contradicted"


@pytest.mark.parametrize("p, adjusted", [
    ([0.01, 0.04, 0.03, 0.005], [0.03, 0.06, 0.06, 0.02]),  # step-down: 4x, 3x, 2x, 1x, kept monotone
    ([0.01, 0.02, 0.03, 0.04, 0.05], [0.05, 0.08, 0.09, 0.09, 0.09]),
    ([0.5], [0.5]),
    ([0.6, 0.7], [1.0, 1.0]),
    ([], []),
])
def test_holm_textbook_cases(p: list[float], adjusted: list[float]) -> None:
    assert holm(p) == pytest.approx(adjusted)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=20))
def test_holm_is_between_the_raw_p_and_bonferroni(p: list[float]) -> None:
    adjusted = holm(p)
    assert all(raw <= adj + 1e-12 and adj <= min(1.0, raw * len(p)) + 1e-12 for raw, adj in zip(p, adjusted))


def test_holm_rejects_bad_p_values() -> None:
    with pytest.raises(ValueError):
        holm([0.1, 1.5])


def test_holm_rows_correct_each_family_and_keep_the_plain_verdict() -> None:
    rows = [claim_row("own domain", "up", 0.2, 0.1, 0.3, "up", p_value=0.01, primary=True),
            claim_row("second", "up", 0.2, 0.01, 0.3, "up", p_value=0.04),
            claim_row("third", "up", 0.2, 0.02, 0.3, "up", p_value=0.03),
            claim_row("a level", "up", 0.2, 0.1, 0.3, "up")]
    out = holm_rows(rows)
    assert [list(r)[:8] for r in out] == [["claim", "paper", "this run", "95% interval", "verdict", "p", "family",
                                          "Holm"]] * 4
    assert out[0]["Holm"] == "reproduced (adj. p 0.010)"  # a family of one: its own p
    assert out[1]["Holm"].startswith("cannot tell") and out[2]["Holm"].startswith("cannot tell")  # 0.06 each
    assert out[3]["p"] == out[3]["family"] == out[3]["Holm"] == "n/a"
    assert [r["verdict"] for r in out] == ["reproduced"] * 4
    assert holm_verdict("cannot tell", 0.001) == "cannot tell" and holm_verdict("contradicted", 0.01) == "contradicted"


def test_claim_row_with_seeds_and_p_and_without() -> None:
    row = claim_row("x", "rises", 0.1, 0.05, 0.2, "up", seeds=[0.06, 0.1, 0.14], p_value=0.002, primary=True)
    assert row["95% interval"] == "[0.050, 0.200] (seeds: 0.060, 0.100, 0.140)"
    assert row["p"] == 0.002 and row["family"] == "primary" and row["verdict"] == "reproduced"
    assert list(claim_row("x", "rises", 0.1, 0.05, 0.2, "up")) == ["claim", "paper", "this run", "95% interval",
                                                                    "verdict"]
    with pytest.raises(ValueError):
        claim_row("x", "rises", 0.1, 0.05, 0.2, "up", p_value=1.5)


def test_seed_row_shows_the_seeds_only_when_there_are_several() -> None:
    one = seed_row("x", "rises", [np.full(20, 0.1)], "up", primary=True)
    assert one["95% interval"] == "[0.100, 0.100]" and one["family"] == "primary" and one["p"] < 0.01
    three = seed_row("x", "rises", [np.full(20, 0.0), np.full(20, 0.1), np.full(20, 0.2)], "up")
    assert three["95% interval"].endswith("(seeds: 0.000, 0.100, 0.200)") and three["family"] == "secondary"
    assert three["this run"] == pytest.approx(0.1)


def test_an_unpaired_row_over_seeds_resamples_within_each_seed_and_reads_as_the_one_run_for_one():
    from cascadekit.claims import unpaired_seed_row
    after, before = [0.2, 0.4, 0.3, 0.5], [0.6, 0.7, 0.5]
    one = unpaired_seed_row("c", "p", [after], [before], "down")
    est, low, high = bootstrap_interval(after, before, paired=False)
    assert (one["this run"], one["95% interval"]) == (round(est, 3), f"[{low:.3f}, {high:.3f}]") and "p" not in one
    two = unpaired_seed_row("c", "p", [after, [0.1, 0.2]], [before, [0.4, 0.4, 0.4]], "down")
    assert two["this run"] == pytest.approx(((0.35 - 0.6) + (0.15 - 0.4)) / 2)
    assert "(seeds: -0.250, -0.250)" in two["95% interval"] and two["verdict"] == "reproduced"
    with pytest.raises(ValueError, match="one after and one before"):
        unpaired_seed_row("c", "p", [after], [before, before], "down")


def test_seeds_with_prompts_of_their_own_may_score_different_numbers_of_them() -> None:
    ones, halves = np.ones(30), np.array([1.0, 0.0] * 25)
    estimate, low, high = seed_bootstrap([ones, halves], shared_prompts=False)
    assert estimate == pytest.approx(0.75) and 0.25 <= low < 0.75 < high <= 1.0
    assert bootstrap_p_value([ones, halves], "up", shared_prompts=False) < 0.05
    with pytest.raises(ValueError, match="as many prompts"):
        seed_bootstrap([ones, halves])
