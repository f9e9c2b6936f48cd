"""Chapter 15's measures on a hand-made run: segments, the domains to recover, steps to recover, the claims."""
from __future__ import annotations

import pytest

from cascadekit.chapters import ch15_on_policy_distillation as ch
from cascadekit.chapters.cascade import TARGET_DOMAINS, check_order


#: Four prompts per RL domain, two per mode: the suite every table asks.
SUITE = [{"domain": domain, "think": i % 2 == 0} for domain in TARGET_DOMAINS for i in range(4)]


def _samples(scores: dict[str, float]) -> list[float]:
    """Each suite prompt's score: ``round(4 * score)`` of a domain's four right."""
    return [float(i % 4 < round(4 * scores.get(x["domain"], 0.0))) for i, x in enumerate(SUITE)]


def _metrics() -> dict:
    student = _samples({"math": 0.25, "code": 0.5})
    teacher = _samples({"math": 1.0, "code": 0.5})
    by_step = {arm: {"0": student} for arm in ch.ARMS}
    by_step[ch.MOPD].update({"5": _samples({"math": 0.5, "code": 0.5}), "10": _samples({"math": 1.0, "code": 0.5})})
    by_step[ch.GRPO].update({"5": _samples({"math": 0.25, "code": 0.5}), "10": _samples({"math": 0.5, "code": 0.5})})
    for arm in (ch.FORWARD, ch.SINGLE):
        by_step[arm].update({"5": student, "10": student})
    teachers = {d: ch.STUDENT for d in TARGET_DOMAINS} | {"math": "Math RL"}
    return {"suite": SUITE, "teachers": teachers, "single_teacher": "Math RL", "by_step": by_step,
            "per_sample": {"student": student, "teacher SWE RL": student, "teacher Math RL": teacher}}


def test_a_table_is_kept_as_its_scores_in_suite_order():
    table = {"samples": [{**x, "score": 0.5, "completion": "..."} for x in SUITE]}
    assert ch.scores_of(table, SUITE) == [0.5] * len(SUITE)
    assert ch.samples({"suite": SUITE}, [1.0] * len(SUITE))[0] == {**SUITE[0], "score": 1.0}
    with pytest.raises(ValueError, match="same prompts in the same order"):
        ch.scores_of({"samples": table["samples"][::-1]}, SUITE)


def test_segments_cut_in_order_and_fold_a_short_tail_into_the_last():
    assert ch.segments(list(range(7)), 3) == [[0, 1, 2], [3, 4, 5, 6]]
    assert ch.segments(list(range(6)), 3) == [[0, 1, 2], [3, 4, 5]]
    assert ch.segments([1], 5) == [[1]]
    with pytest.raises(ValueError, match="at least one prompt"):
        ch.segments([1, 2], 0)


def test_the_domains_to_recover_are_those_whose_teacher_is_an_earlier_stage():
    metrics = _metrics()
    assert ch.regressed(metrics) == ["math"]
    assert ch.teacher_score(metrics, "math") == 1.0 and ch.teacher_score(metrics, "code") == 0.5


def test_steps_to_recover_is_the_first_evaluated_step_within_the_tolerance():
    metrics = _metrics()
    assert ch.steps_to_recover(metrics, ch.MOPD, "math") == 10
    assert ch.steps_to_recover(metrics, ch.GRPO, "math") is None
    assert ch.steps_to_recover(metrics, ch.GRPO, "math", within=0.5) == 10
    assert ch.steps_to_recover(metrics, ch.GRPO, "code") == 0  # already at its teacher
    rows = {r["domain"]: r for r in ch.domain_rows(metrics)}
    assert rows["math"]["steps to recover, MOPD"] == 10 and rows["math"]["steps to recover, GRPO"] == "never"


def test_the_claims_read_the_recovered_domains_and_their_direction():
    rows = ch.claims(_metrics())
    assert len(rows) == 5 and all("(math)" in r["claim"] for r in rows[:4])
    assert rows[0]["this run"] == pytest.approx(0.75)  # MOPD minus the student on math
    assert rows[1]["this run"] == pytest.approx(0.5)  # MOPD minus GRPO on math
    assert rows[3]["this run"] == pytest.approx(0.75)  # reverse minus forward


def test_the_claims_of_several_training_seeds_are_over_seeds_then_prompts():
    one, other = _metrics(), _metrics()
    other["by_step"][ch.MOPD]["10"] = _samples({"math": 0.5, "code": 0.5})  # this seed recovers less
    combined = ch.combine({0: one, 1: other})
    assert combined["train_seeds"] == [0, 1] and combined["by_step"] == one["by_step"]  # the first seed's run on top
    rows = ch.claims(combined)
    assert rows[0]["this run"] == pytest.approx((0.75 + 0.25) / 2)  # the mean of the two seeds' changes
    assert "(seeds: 0.750, 0.250)" in rows[0]["95% interval"]
    assert rows[0]["family"] == "primary" and rows[0]["Holm"].startswith(("reproduced", "cannot tell"))
    assert ch.claims(ch.combine({0: one}))[0]["95% interval"] == ch.claims(one)[0]["95% interval"]
    assert [r["train seed"] for r in ch.seed_rows(combined)] == [0, 1]


def test_each_seed_recovers_its_own_cascades_regressions_and_the_seeds_share_one_suite():
    """Each training seed distils its own cascade: its own teachers pick its own domains to recover."""
    one, own = _metrics(), _metrics()
    own["teachers"] = {**own["teachers"], "math": ch.STUDENT, "code": "Code RL"}  # this cascade regressed on code
    own["single_teacher"] = "Code RL"
    combined = ch.combine({0: one, 1: own})
    rows = ch.claims(combined)
    assert rows[0]["this run"] == pytest.approx((0.75 + 0.0) / 2)  # seed 0 on math, seed 1 on code (no change)
    assert "(seed 0: math; seed 1: code)" in rows[0]["claim"] and "seed 0: Math RL; seed 1: Code RL" in rows[2]["claim"]
    assert [r["code"] for r in ch.seed_teacher_rows(combined)] == [ch.STUDENT, "Code RL"]
    assert "Each training seed's teachers" in ch.seed_teachers(combined) and ch.seed_teachers(one) == ""
    own["suite"] = own["suite"][::-1]
    with pytest.raises(ValueError, match="another suite"):
        ch.combine({0: one, 1: own})


def test_mopd_can_stand_anywhere_in_a_cascade_order():
    assert check_order(["RLHF", "IF-RL", "MOPD", "Math RL"]) == ("RLHF", "IF-RL", "MOPD", "Math RL")
    with pytest.raises(ValueError, match="each stage once"):
        check_order(["MOPD", "RLHF", "MOPD"])


def test_the_retrain_cost_is_the_recorded_training_and_evaluation_not_a_cached_rerun():
    runs = {ch.MOPD: {"train_s": 100.0}, ch.GRPO: {"train_s": 50.0}}
    timings = {"teachers_s": 0.2, "MOPD_s": 0.1, "table MOPD step 5_s": 40.0, "table GRPO step 5_s": 30.0}
    assert ch.compute_cost(runs, timings) == 220.0


def test_the_forgetting_matrix_after_mopd_has_a_cell_per_domain_and_mode():
    rows = ch.forgetting_rows(ch.combine({0: _metrics(), 1: _metrics()}))
    assert len(rows) == 2 * len(TARGET_DOMAINS)
    math = next(r for r in rows if r["domain"] == "math" and r["mode"] == "think")
    assert math["student"] == 0.5 and math["MOPD minus student"] == 0.5  # its two think prompts: one right, then both
