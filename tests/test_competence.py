import pytest

from cascadekit.bands import Bands
from cascadekit import bands as competence
from cascadekit.chapters import interplay as common
from cascadekit.profiles import load_profile


def ladder(values):
    """by_op rows from ``{op: (pass@1, pass@4)}``."""
    return [{"op": op, "pass@1": p1, "pass@4": pn} for op, (p1, pn) in values.items()]


#: The committed toy base's shape (chapter 03): op 2 solved, ops 3-5 at pass@k only, nothing beyond.
TOY_LIKE = {2: (0.68, 0.83), 3: (0.18, 0.83), 4: (0.16, 0.67), 5: (0.18, 0.5), 6: (0, 0), 7: (0, 0), 8: (0, 0)}


def test_bands_follow_the_measured_ladder():
    assert competence.competence_bands(ladder(TOY_LIKE), 4) == {
        "in_distribution": (2, 2), "edge": (3, 5), "hard": (6, 8)}


def test_a_gap_inside_the_edge_does_not_end_it():
    values = {**TOY_LIKE, 4: (0.0, 0.0)}
    assert competence.competence_bands(ladder(values), 4)["edge"] == (3, 5)


@pytest.mark.parametrize("values", [
    {op: (0.0, 0.0) for op in range(2, 9)},  # solves nothing
    {op: (0.9, 1.0) for op in range(2, 9)},  # solves everything
    {2: (0.3, 0.8), 3: (0.1, 0.4), 4: (0, 0)},  # no too-easy op
    {2: (0.9, 1.0), 3: (0.8, 1.0), 4: (0, 0)},  # no edge op
])
def test_no_bands_when_one_would_be_empty(values):
    assert competence.competence_bands(ladder(values), 4) is None


def test_measured_bands_come_apart_from_the_profile_and_say_so():
    profile = load_profile("toy")
    bands, note = competence.measure_bands(profile, ladder(TOY_LIKE), 4, "measured")
    assert bands == Bands((2, 2), (3, 5), (6, 8)) and "measured on the base" in note and "edge 3-5" in note
    fixed, note = competence.measure_bands(profile, ladder(TOY_LIKE), 4, "profile")
    assert fixed == Bands.of_world(profile.world) and "the profile's" in note


def test_the_profile_bands_and_the_reason_when_the_base_has_none():
    profile = load_profile("toy")
    fixed, note = competence.measure_bands(profile, ladder({op: (0.0, 0.0) for op in range(2, 11)}), 4, "measured")
    assert fixed == Bands.of_world(profile.world) and "no edge band" in note
    with pytest.raises(ValueError, match="unknown range source"):
        competence.measure_bands(profile, [], 4, "guess")


def test_base_bands_measures_the_bands_and_regroups_the_base(monkeypatch):
    """The base's samples are judged once; its tables come out under the measured bands."""
    profile = load_profile("smoke", {"evaluation.samples": 4, "evaluation.problems_per_op": 1})
    solved = {2: 4, 3: 1}  # right samples of 4 per op; ops 4-5 none

    def fake_evaluate(stage, problems, prof, bands=None):
        return [{"op": p.op, "range": "stale", "context": p.context, "problem": i, "sample": s,
                 "correct": s < solved.get(p.op, 0), "answer_correct": False, "process_accuracy": 0.0,
                 "n_missing": 0, "n_dependency": 0, "n_value": 0, "answer_mismatch": 0, "reason": "", "text": ""}
                for i, p in enumerate(problems) for s in range(prof.evaluation.samples)]

    monkeypatch.setattr(common, "evaluate_checkpoint", fake_evaluate)
    bands, base = common.base_bands(profile, "unused", "measured")
    assert bands == Bands((2, 2), (3, 3), (4, 5)) and base["bands"] == bands.to_dict()
    by_range = {r["range"]: r for r in base["evaluation"]["by_range"]}
    assert by_range["in_distribution"]["pass@1"] == 1.0 and by_range["edge"]["pass@1"] == 0.25
    assert by_range["hard"]["pass@4"] == 0.0 and "measured on the base" in base["ranges"]
    fixed, base = common.base_bands(profile, "unused", "profile")
    assert fixed == Bands.of_world(profile.world)
    assert {r["range"] for r in base["evaluation"]["by_range"]} == {"in_distribution", "edge", "hard"}
