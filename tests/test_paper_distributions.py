"""The ``paper`` rendering's distributions against the official Interplay generator's, per op band.

``data/fixtures/official_paper_stats.json`` holds statistics measured by running the
official generator with its data script's arguments (the provenance says how) and
reading its problems with :mod:`cascadekit.verify.paper_stats`; the kit's problems
are read the same way here. A statistic matches when the two shares differ by less
than three standard errors of their difference plus 0.05: the sampling noise of
both samples, and a margin for what the kit's own graph sampler cannot copy
(its names, places and structure walk are its own). Every statistic of every band
is a test; the ones that do not match yet are listed in ``GAPS`` with why, and
fail the suite once they match (strict xfail), so the list stays true.
"""

from __future__ import annotations

import json
import math
import random

import pytest

from cascadekit.codeversion import REPO_DIR
from cascadekit.world import CONTEXTS
from cascadekit.world.paper import MODES, generate
from cascadekit.verify.paper_stats import band_statistics, features

FIXTURE = REPO_DIR / "data" / "fixtures" / "official_paper_stats.json"
OFFICIAL = json.loads(FIXTURE.read_text())["bands"]
PER_OP_AND_MODE = 20  # kit problems per op and mode: 760 at ops 2-20

#: (band, statistic) -> why the kit does not match the official there yet
GAPS: dict[tuple[str, str], str] = {}
#: the statistic of the official bug, compared with the kit's ``official_bug_compat`` problems (0 without it)
BUG = "reverse: a needed quantity has no statement"


def _tolerance(official: dict, kit: dict) -> float:
    """Three standard errors of the difference of two shares, plus 0.05."""
    n_official, n_kit = official["n"], kit["n"]
    pooled = (official["share"] * n_official + kit["share"] * n_kit) / (n_official + n_kit)
    return 3 * math.sqrt(pooled * (1 - pooled) * (1 / n_official + 1 / n_kit)) + 0.05


def _statistics(modes: tuple[str, ...], bug_compat: bool = False) -> dict:
    contexts = sorted(CONTEXTS)
    problems = [generate(op, contexts[seed % len(contexts)], random.Random(1000 * seed + op), seed, mode, bug_compat)
                for op in range(2, 21) for seed in range(PER_OP_AND_MODE) for mode in modes]
    return band_statistics(features(p.op, p.problem_text, p.question, p.solution_text) for p in problems)


@pytest.fixture(scope="module")
def kit_statistics() -> dict:
    return _statistics(MODES)


@pytest.fixture(scope="module")
def bug_compat_statistics() -> dict:
    return _statistics(("reverse",), bug_compat=True)


def _cases() -> list:
    return [pytest.param(band, name, marks=pytest.mark.xfail(reason=GAPS[band, name], strict=True))
            if (band, name) in GAPS else pytest.param(band, name)
            for band, table in OFFICIAL.items() for name in table]


@pytest.mark.parametrize("band,statistic", _cases())
def test_the_kit_matches_the_official_generator(band: str, statistic: str, kit_statistics: dict,
                                                bug_compat_statistics: dict) -> None:
    official = OFFICIAL[band][statistic]
    kit = (bug_compat_statistics if statistic == BUG else kit_statistics)[band][statistic]
    assert abs(official["share"] - kit["share"]) <= _tolerance(official, kit), (official, kit)
    if statistic == BUG:
        assert kit_statistics[band][statistic]["share"] == 0  # off by default: every needed quantity is stated


def test_the_fixture_covers_every_band_and_statistic(kit_statistics: dict) -> None:
    assert set(OFFICIAL) == set(kit_statistics)
    assert all(set(OFFICIAL[band]) == set(kit_statistics[band]) for band in OFFICIAL)
    assert all(OFFICIAL[band]["has a distractor"]["n"] >= 100 for band in OFFICIAL)


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
