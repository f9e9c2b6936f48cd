"""The ``paper`` rendering's distributions against the official Interplay generator's, per op band and mode.

``data/fixtures/official_paper_stats.json`` holds statistics measured by running the
official generator with its data script's arguments (the provenance says how:
160-200 problems per band and mode) and reading its problems with
:mod:`cascadekit.verify.paper_stats`; the kit's problems (40 per op and mode, so as
many per band) are read the same way here. Every statistic is a share, compared by
a two-proportion z-test; the p-values of every (band, mode, statistic) are adjusted
together by Holm's method, and a statistic *differs* when the adjusted test rejects
at 5% and the effect is not small (Cohen's h at least 0.2). A difference too small
to matter does not fail however many problems are drawn, and a large one cannot
hide in noise (the old test, 20 problems per op and a 0.05 margin on 3 standard
errors, passed 69 of 72 cells with gaps of h up to 1). The ones that still differ
are listed in ``GAPS`` with why (and in :mod:`cascadekit.world.paper`'s docstring),
and fail the suite once they match (strict xfail), so the list stays true.
"""

from __future__ import annotations

import json
import math
import random

import pytest

from cascadekit.codeversion import REPO_DIR
from cascadekit.verify.paper_stats import band_statistics, features
from cascadekit.world import CONTEXTS
from cascadekit.world.paper import MODES, generate

FIXTURE = REPO_DIR / "data" / "fixtures" / "official_paper_stats.json"
OFFICIAL = json.loads(FIXTURE.read_text())["bands"]
PER_OP_AND_MODE = 40  # kit problems per op and mode: 160-200 per band and mode, as many as the official's
ALPHA = 0.05
SMALL_EFFECT = 0.2  # Cohen's h below this is a small effect

#: (band, mode, statistic) -> why the kit does not match the official there yet
_REUSE = ("ops 6-10 reverse: 93% of official problems use some quantity in two or more steps, 78% of the kit's "
          "(forward 93% vs 84% is not significant; from op 11 both 99-100%); weighting reuse up at ops 6-10 "
          "closes it but brings the reverse differences in x back (4 cells differ instead of 2)")
#: (band, mode, statistic) -> why the kit does not match the official there yet
GAPS: dict[tuple[str, str, str], str] = {
    ("6-10", "reverse", "a quantity feeds two or more steps"): _REUSE,
    ("6-10", "reverse", "a derived step has 3 parents"): ("17% of official reverse steps at ops 6-10 have three "
                                                          "parents, 8% of the kit's (forward 15% vs 9%, a small "
                                                          "effect; from op 11 within one)"),
}
#: the statistic of the official bug, compared with the kit's ``official_bug_compat`` problems (0 without it)
BUG = ("reverse", "a needed quantity has no statement")


def _statistics(modes: tuple[str, ...], bug_compat: bool = False) -> dict:
    contexts = sorted(CONTEXTS)
    problems = [generate(op, contexts[seed % len(contexts)], random.Random(1000 * seed + op), seed, mode, bug_compat)
                for op in range(2, 21) for seed in range(PER_OP_AND_MODE) for mode in modes]
    return band_statistics(features(p.op, p.problem_text, p.question, p.solution_text) for p in problems)


def effect(official: dict, kit: dict) -> float:
    """Cohen's h between two shares."""
    return 2 * math.asin(math.sqrt(official["share"])) - 2 * math.asin(math.sqrt(kit["share"]))


def p_value(official: dict, kit: dict) -> float:
    """Two-sided p-value of a pooled two-proportion z-test (1 where either side is empty or both are constant)."""
    n1, n2 = official["n"], kit["n"]
    if not n1 or not n2:
        return 1.0
    pooled = (official["share"] * n1 + kit["share"] * n2) / (n1 + n2)
    if pooled in (0.0, 1.0):
        return 1.0
    z = (official["share"] - kit["share"]) / math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    return math.erfc(abs(z) / math.sqrt(2))


def holm(p_values: dict) -> dict:
    """Holm's step-down adjustment: each key's adjusted p-value (family-wise error at most the nominal level)."""
    ordered = sorted(p_values, key=p_values.get)
    adjusted, running = {}, 0.0
    for rank, key in enumerate(ordered):
        running = max(running, min(1.0, (len(ordered) - rank) * p_values[key]))
        adjusted[key] = running
    return adjusted


@pytest.fixture(scope="module")
def comparison() -> dict:
    """(band, mode, statistic) -> (official, kit, Cohen's h, Holm-adjusted p)."""
    kit, compat = _statistics(MODES), _statistics(("reverse",), bug_compat=True)
    pairs = {(band, mode, name): (OFFICIAL[band][mode][name],
                                  (compat if (mode, name) == BUG else kit)[band][mode][name])
             for band in OFFICIAL for mode in OFFICIAL[band] for name in OFFICIAL[band][mode]}
    adjusted = holm({key: p_value(*pair) for key, pair in pairs.items()})
    assert all(kit[band]["reverse"][BUG[1]]["share"] == 0 for band in kit)  # off by default: all stated
    return {key: (*pair, effect(*pair), adjusted[key]) for key, pair in pairs.items()}


def _cases() -> list:
    return [pytest.param(key, marks=pytest.mark.xfail(reason=GAPS[key], strict=True)) if key in GAPS
            else pytest.param(key) for key in ((band, mode, name) for band in OFFICIAL for mode in OFFICIAL[band]
                                              for name in OFFICIAL[band][mode])]


@pytest.mark.parametrize("key", _cases(), ids=lambda key: " | ".join(key))
def test_the_kit_matches_the_official_generator(key: tuple[str, str, str], comparison: dict) -> None:
    official, kit, h, adjusted = comparison[key]
    assert adjusted >= ALPHA or abs(h) < SMALL_EFFECT, (official, kit, f"h={h:+.2f}", f"Holm p={adjusted:.2g}")


def test_the_fixture_covers_every_band_mode_and_statistic() -> None:
    kit = _statistics(MODES)
    assert set(OFFICIAL) == set(kit)
    assert all(set(OFFICIAL[band]) == set(kit[band]) == set(MODES) for band in OFFICIAL)
    assert all(set(OFFICIAL[band][mode]) == set(kit[band][mode]) for band in OFFICIAL for mode in MODES)
    assert all(OFFICIAL[band][mode]["has a distractor"]["n"] >= 150 for band in OFFICIAL for mode in MODES)


def test_holm_and_the_effect_size_see_a_large_gap_and_forgive_a_small_one() -> None:
    large = ({"share": 0.95, "n": 160}, {"share": 0.79, "n": 160})
    small = ({"share": 0.50, "n": 10_000}, {"share": 0.52, "n": 10_000})
    assert holm({"a": p_value(*large), **{i: 0.5 for i in range(200)}})["a"] < ALPHA and abs(effect(*large)) > 0.2
    assert p_value(*small) < ALPHA and abs(effect(*small)) < SMALL_EFFECT
    assert holm({"a": 0.01, "b": 0.02, "c": 0.5}) == {"a": 0.03, "b": 0.04, "c": 0.5}


def test_the_official_bug_is_off_by_default_and_reproduced_when_asked() -> None:
    contexts = sorted(CONTEXTS)
    pairs = [(generate(op, contexts[seed % 3], random.Random(seed), seed, "reverse"),
              generate(op, contexts[seed % 3], random.Random(seed), seed, "reverse", official_bug_compat=True))
             for op in range(10, 21) for seed in range(30)]
    for correct, compat in pairs:
        assert correct.nodes == compat.nodes and correct.solution_text == compat.solution_text
        assert not features(correct.op, correct.problem_text, correct.question, correct.solution_text).missing_statement
    changed = [compat for correct, compat in pairs if compat.problem_text != correct.problem_text]
    for problem in changed:  # a sum's statement became a second "exists" statement of the unknown
        assert problem.problem_text.count("exists, and its number is greater than 0.") >= 2
    needed_lost = [p for p in changed if features(p.op, p.problem_text, p.question, p.solution_text).missing_statement]
    assert needed_lost  # some lose a quantity the solution needs (others a distractor)


def test_the_official_bug_is_a_style_of_its_own() -> None:
    from cascadekit.world import generate_problem

    pairs = [(generate_problem(op, "A", seed, "paper"), generate_problem(op, "A", seed, "paper-official-bug"))
             for op in range(10, 21) for seed in range(20)]
    assert all(correct.solution_text == compat.solution_text for correct, compat in pairs)
    assert any(correct.problem_text != compat.problem_text for correct, compat in pairs)
