"""Part II chapters' claims over training seeds, on hand-made runs: the seeds' changes averaged, their estimates shown."""
from __future__ import annotations

import pytest

from cascadekit.chapters import ch09_rlhf as ch
from cascadekit.chapters import ch10_if_rl as ch10
from cascadekit.chapters.cascade import RLHF_ARMS

DOMAINS = ("general", "math", "code")


def _samples(general: float) -> list[dict]:
    """Eight prompts per domain and mode; ``general``'s share of general's right, every other domain half."""
    return [{"domain": d, "think": think, "score": float(i < round(8 * (general if d == "general" else 0.5))),
             "tokens": 40 - 10 * general, "repetition": 0.0}
            for d in DOMAINS for think in (True, False) for i in range(8)]


def _run(lift: float, accuracy: float) -> dict:
    half = _samples(0.25 + lift)
    per_sample = {ch.SFT_STAGE: _samples(0.25), "RLHF half-half": half,
                  **{f"RLHF {arm}": _samples(0.25) for arm in list(RLHF_ARMS)[1:]}, "RLHF half-half (RM 1 layer)": half}
    view = [{"gap": 0.1, "true": 0.5, "predicted": 0.6}] * 16
    return {"per_sample": per_sample, "largest": 4,
            "reward_models": {str(n): {"held_out": {"accuracy": accuracy, "low": accuracy - 0.05,
                                                    "high": accuracy + 0.05, "pairs": 200}} for n in (1, 4)},
            "reward_model_views": {"RLHF half-half / RM 4": view,
                                   "RLHF half-half (RM 1 layer) / RM 1": [{**v, "gap": 0.3} for v in view],
                                   "SFT / RM 4": [{**v, "gap": 0.05} for v in view],
                                   "SFT / RM 1": [{**v, "gap": 0.0} for v in view]}}


def test_the_claims_of_several_training_seeds_are_over_seeds_then_prompts():
    one, other = _run(0.5, 0.8), _run(0.25, 0.7)
    combined = ch.combine({0: one, 1: other})
    assert combined["train_seeds"] == [0, 1] and combined["per_sample"] == one["per_sample"]
    rows = {r["claim"]: r for r in ch.claims(combined)}
    general = rows["RLHF (half-half) changes the general score, both modes"]
    assert general["this run"] == pytest.approx((0.5 + 0.25) / 2) and "(seeds: 0.500, 0.250)" in general["95% interval"]
    assert general["family"] == "primary"
    accuracy = rows["the 4-layer reward model's held-out pairwise accuracy, above chance (0.5)"]
    assert accuracy["this run"] == pytest.approx(0.25) and "(seeds: 0.300, 0.200)" in accuracy["95% interval"]
    hacked = next(r for c, r in rows.items() if c.startswith("a larger reward model is hacked less"))
    # growth from SFT: (0.1 - 0.05) - (0.3 - 0.0); the raw gaps alone would say -0.2
    assert hacked["this run"] == pytest.approx(-0.25) and hacked["verdict"] == "reproduced"
    assert [r["train seed"] for r in ch.seed_rows(combined)] == [0, 1]
    assert ch.seed_rows(combined)[1]["general, half-half minus SFT"] == pytest.approx(0.25)


def test_one_seed_combined_reads_as_the_one_run():
    one = _run(0.5, 0.8)
    alone, combined = ch.claims(one), ch.claims(ch.combine({3: one}))
    assert [r["95% interval"] for r in alone] == [r["95% interval"] for r in combined]


def test_seeds_whose_reward_models_differ_in_size_do_not_combine():
    other = _run(0.5, 0.8)
    other["largest"] = 8
    with pytest.raises(ValueError, match="another largest"):
        ch.combine({0: _run(0.5, 0.8), 1: other})


def _table(scores: dict[str, float]) -> list[dict]:
    """Eight prompts per domain and mode, ``scores[domain]``'s share of each right (0.5 where not named)."""
    return [{"domain": d, "think": think, "score": float(i < round(8 * scores.get(d, 0.5))), "tokens": 30.0,
             "repetition": 0.0} for d in (*DOMAINS, "instructions") for think in (True, False) for i in range(8)]


def _if_rl_run(lift: float, entropy_fall: float) -> dict:
    start, after = _table({"instructions": 0.25}), _table({"instructions": 0.25 + lift})
    per_sample = {ch10.START: start, **{arm: after for arm in ch10.ARMS}}
    curves = [{"entropy": 1.0 - entropy_fall * step / 7} for step in range(8)]
    return {"per_sample": per_sample, "runs": {arm: {"curves": curves} for arm in ch10.ARMS},
            "predicted_general_quality": {name: [0.5] * 4 for name in per_sample}}


def test_if_rl_claims_over_training_seeds():
    one, other = _if_rl_run(0.5, 0.4), _if_rl_run(0.25, 0.2)
    combined = ch10.combine({0: one, 1: other})
    rows = ch10.claims(combined)
    assert rows[0]["family"] == "primary" and rows[0]["this run"] == pytest.approx(0.375)
    assert "(seeds: 0.500, 0.250)" in rows[0]["95% interval"]
    entropy = rows[3]
    assert entropy["this run"] < 0 and "(seeds: " in entropy["95% interval"]
    assert [r["train seed"] for r in ch10.seed_rows(combined)] == [0, 1]
    assert ch10.claims(ch10.combine({0: one}))[3]["95% interval"] == ch10.claims(one)[3]["95% interval"]


def first_seed(metrics: dict) -> dict:
    """A committed result's first training seed's run alone (a combined result is that run with ``replicates``)."""
    return {k: v for k, v in metrics.items() if k not in ("replicates", "train_seeds")}


@pytest.mark.parametrize("chapter", ["09", "10", "11", "12", "13", "14"])
def test_a_committed_run_combined_with_itself_keeps_every_estimate(chapter):
    """Two seeds that agree: every claim's estimate is the one run's, each seed's shown beside the interval."""
    from cascadekit.chapters import chapter_module, spec
    from cascadekit.results import load_metrics
    module, metrics = chapter_module(chapter), first_seed(load_metrics(spec(chapter).folder))
    alone, twice = module.claims(metrics), module.claims(module.combine({0: metrics, 1: metrics}))
    assert [r["this run"] for r in twice] == [r["this run"] for r in alone]
    assert [r["verdict"] for r in twice if r["verdict"] != "cannot tell"]  # the claims still decide something
    assert all(f"{r['this run']:.3f}, {r['this run']:.3f})" in r["95% interval"]
               for r in twice if "(seeds: " in r["95% interval"] and "tokens" not in r["claim"])
    assert sum("(seeds: " in r["95% interval"] for r in twice) >= len(twice) // 2


def test_sft_targets_over_training_seeds_are_the_mean_of_the_seeds_with_each_seed_shown():
    from cascadekit.chapters import ch08_unified_thinking_model as ch08
    from cascadekit.results import load_metrics
    metrics = first_seed(load_metrics("08_unified_thinking_model"))
    other = {**metrics, "rows": [{**r, "score": r["score"] / 2} for r in metrics["rows"]]}
    rows = ch08.claims(ch08.combine({0: metrics, 1: other}))
    alone = ch08.claims(metrics)
    assert [(r["domain"], r["mode"]) for r in rows] == [(r["domain"], r["mode"]) for r in alone]
    for two, one in zip(rows, alone):
        assert two["score"] == pytest.approx(0.75 * one["score"], abs=0.002)
        assert two["95% interval"].count(", ") == 2 and f"(seeds: {one['score']:.3f}, " in two["95% interval"]
    with pytest.raises(ValueError, match="another base"):
        ch08.combine({0: metrics, 1: {**metrics, "base": {"key": "other"}}})


def test_the_cascade_chapter_combines_only_seeds_with_the_same_arms_and_stages():
    from cascadekit.chapters import ch14_whole_cascade as ch14
    from cascadekit.results import load_metrics
    metrics = first_seed(load_metrics("14_whole_cascade"))
    combined = ch14.combine({0: metrics, 1: metrics})
    assert [r["train seed"] for r in ch14.seed_rows(combined)] == [0, 1]
    assert "### Each training seed" in ch14.notes(combined)
    short = {**metrics, "harder": {arm: dict(list(stages.items())[:-1]) for arm, stages in metrics["harder"].items()}}
    with pytest.raises(ValueError, match="other arms or stages"):
        ch14.combine({0: metrics, 1: short})
