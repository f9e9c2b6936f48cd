"""Math RL (chapter 11): the prompt pool, the cached dynamic-filter screen, and length-extension stages."""
from __future__ import annotations

import pytest

from cascadekit.chapters import ch11_math_rl as chapter
from cascadekit.chapters.ch11_math_rl import ratio_change, tokens_per_correct
from cascadekit.plots import back_to_back
from cascadekit.profiles import ProfileError, load_profile
from cascadekit.training import math_rl as mrl
from cascadekit.chapters.cascade import math_records, math_rl, sft_checkpoint

PROFILE = load_profile("smoke", {"sft.stage1_tasks": 2, "sft.stage2_tasks": 1, "math_rl.pool": 4,
                                 "math_rl.lengths": [8, 12]})


@pytest.fixture(scope="module")
def sft():
    return sft_checkpoint(PROFILE)


def test_the_pool_is_seeded_think_math_prompts() -> None:
    records = math_records(PROFILE)
    assert len(records) == 4 and records == math_records(PROFILE)
    assert {r["domain"] for r in records} == {"math"} and all(r["think"] for r in records)


def test_math_rl_settings_are_validated() -> None:
    for key, bad in [("math_rl.lengths", [16, 8]), ("math_rl.lengths", []), ("math_rl.lengths", [8, 8]),
                     ("math_rl.readmit", 1.5), ("math_rl.penalty", -0.1), ("math_rl.ops", [3, 2]),
                     ("code_rl.temperatures", [0.0]), ("code_rl.workers", 0)]:
        with pytest.raises(ProfileError, match=key.replace(".", r"\.")):
            load_profile("smoke", {key: bad})


def test_the_screen_keeps_mixed_prompts_counts_every_group_and_is_cached(sft) -> None:
    records = math_records(PROFILE)
    rl = mrl.math_rl_settings(PROFILE, 12)
    screen = mrl.filter_stage(sft, records, PROFILE, 0, rl)
    m = screen.metrics
    assert sum(m["verdicts"].values()) == len(records) and m["rollouts"] == len(records) * PROFILE.rl.group_size
    assert set(m["kept"]) <= set(range(len(records))) and m["readmitted"] <= len(m["kept"])
    assert mrl.filter_stage(sft, records, PROFILE, 0, rl).key == screen.key
    assert mrl.filter_stage(sft, records, PROFILE, 1, rl).key != screen.key  # a new epoch screens again
    assert mrl.filter_stage(sft, records, PROFILE, 0, mrl.math_rl_settings(PROFILE, 8)).key != screen.key


def test_length_stages_chain_and_the_unfiltered_arm_trains_every_prompt(sft, tmp_path) -> None:
    stages = math_rl(sft, PROFILE, tmp_path, filtering=False)
    assert [s.length for s in stages] == [8, 12] and all(s.screen is None for s in stages)
    first, second = stages
    assert first.grpo.metrics["prompts"] == 4 and second.grpo.metrics["prompts"] == 4
    assert first.grpo.key != second.grpo.key and first.checkpoint == first.grpo
    assert all("clipped_ratio" in c for c in second.grpo.metrics["curves"])
    steps = first.grpo.metrics["steps"]
    assert first.rollouts(PROFILE) == steps * PROFILE.rl.prompts_per_step * PROFILE.rl.group_size


def test_a_stage_whose_screen_keeps_nothing_trains_nothing(sft, tmp_path, monkeypatch) -> None:
    class Empty:
        metrics = {"kept": [], "verdicts": {"too_hard": 4}, "readmitted": 0, "rollouts": 16, "screen_s": 0.0}

    monkeypatch.setattr(mrl, "filter_stage", lambda *args: Empty())
    stages = math_rl(sft, PROFILE, tmp_path)
    assert all(s.grpo is None and s.checkpoint == sft for s in stages)
    assert [s.rollouts(PROFILE) for s in stages] == [16, 16]


def test_the_filtered_arm_trains_only_what_its_screen_kept(sft, tmp_path) -> None:
    stages = math_rl(sft, PROFILE, tmp_path)
    for stage in stages:
        assert stage.screen is not None
        kept = len(stage.screen["kept"])
        assert (stage.grpo is None) == (kept == 0)
        if stage.grpo:
            assert stage.grpo.metrics["prompts"] == kept


def _samples(scores, ops=(2, 3), tokens=10):
    return [{"op": op, "score": float(sc), "tokens": tokens, "switched": False}
            for op in ops for sc in scores]


def _metrics(trained: bool = True) -> dict:
    curve = [{"step": 1, "reward": 0.5, "frac_reward_zero_std": 0.25, "clipped_ratio": 0.5, "completion_length": 9}]
    stage = lambda length, screen: {"length": length, "screen": screen, "steps": len(curve) * trained,  # noqa: E731
                                    "prompts": 8, "curves": curve if trained else [], "rollouts": 64,
                                    "train_s": 1.0, "key": "k"}
    runs = {arm: [stage(8, {"verdicts": {"mixed": 3}} if filt else None), stage(12, None)]
            for arm, (_, filt) in chapter.ARMS.items()}
    domain_samples = [{"domain": d, "think": t, "score": 1.0, "tokens": 5, "repetition": 0.0}
                      for d in ("general", "instructions", "math", "code", "tools", "swe") for t in (True, False)]
    math = {"IF-RL start": _samples([0, 1, 0, 0]), "SFT start": _samples([0, 0, 0, 0]),
            f"{chapter.CASCADE}, 8 tokens": _samples([1, 1, 0, 0]), f"{chapter.CASCADE}, 12 tokens": _samples([1, 1, 1, 0]),
            "IF-RL start, unfiltered, final": _samples([1, 0, 0, 0]), "SFT start, filtered, final": _samples([0, 0, 0, 0])}
    return {"math": math, "runs": runs, "per_sample": {"IF-RL": domain_samples, "Math RL": domain_samples},
            "profile": {"math_rl": {"ops": [2, 3], "pool": 8}}}


def test_the_claims_compare_arms_prompt_by_prompt_and_skip_what_a_run_did_not_produce() -> None:
    rows = {r["claim"].split(":")[0]: r for r in chapter.claims(_metrics())}
    gain = next(r for c, r in rows.items() if c.startswith("Math RL raises"))
    assert gain["this run"] == pytest.approx(0.5)  # 1/4 -> 3/4 correct at each op
    assert not any(c.startswith("... with fewer tokens") for c in rows)  # the SFT arm solved nothing
    assert any(c.startswith("truncation falls") for c in rows) and any(c.startswith("dynamic filtering cuts") for c in rows)
    bare = [r["claim"] for r in chapter.claims(_metrics(trained=False))]
    assert not any(c.startswith(("truncation falls", "dynamic filtering cuts")) for c in bare)
    assert all(r["verdict"] in {"reproduced", "contradicted", "cannot tell"} for r in chapter.claims(_metrics()))


def test_tokens_per_correct_and_its_paired_change() -> None:
    before = [{"tokens": 10, "score": 1.0}, {"tokens": 30, "score": 0.0}] * 10
    after = [{"tokens": 10, "score": 1.0}, {"tokens": 10, "score": 1.0}] * 10
    assert tokens_per_correct(before) == 40 and tokens_per_correct(after) == 10
    assert tokens_per_correct([{"tokens": 5, "score": 0.0}]) == float("inf")
    estimate, low, high, seeds = ratio_change([before], [after])
    assert estimate == pytest.approx(-30) and low <= estimate <= high < 0 and seeds == [pytest.approx(-30)]
    half = [{"tokens": 10, "score": 1.0}, {"tokens": 20, "score": 0.0}] * 10  # 30 tokens per correct
    estimate, low, high, seeds = ratio_change([before, half], [after, after])
    assert seeds == [pytest.approx(-30), pytest.approx(-20)] and estimate == pytest.approx(-25)
    assert low <= -30 + 1e-9 and high >= -20 - 1e-9  # the seeds' spread is in the interval


def test_an_arm_reads_as_one_run_and_each_stage_as_a_row() -> None:
    metrics = _metrics()
    joined = back_to_back(metrics["runs"][chapter.CASCADE])
    assert [c["step"] for c in joined["curves"]] == [1, 2]
    rows = chapter.stage_rows(metrics["runs"], metrics["profile"])
    assert len(rows) == 6 and rows[0]["kept"] == "8/8" and rows[0]["screen"] == "mixed 3"
    by_op = chapter.accuracy_by_op(metrics["math"])
    assert by_op[0]["op 2"] == 0.25 and by_op[1]["tokens per correct"] == float("inf")


def test_the_claims_of_several_training_seeds_are_over_seeds_then_prompts() -> None:
    one, other = _metrics(), _metrics()
    other["math"][f"{chapter.CASCADE}, 12 tokens"] = _samples([1, 1, 0, 0])  # this seed gains less
    other["runs"][chapter.CASCADE][0]["curves"] = []  # and trained one length stage only
    combined = chapter.combine({0: one, 1: other})
    rows = {r["claim"].split(":")[0]: r for r in chapter.claims(combined)}
    gain = next(r for c, r in rows.items() if c.startswith("Math RL raises"))
    assert gain["this run"] == pytest.approx((0.5 + 0.25) / 2) and "(seeds: 0.500, 0.250)" in gain["95% interval"]
    assert not any(c.startswith("truncation falls") for c in rows)  # one seed has no two trained stages to compare
    assert [r["train seed"] for r in chapter.seed_rows(combined)] == [0, 1]
    assert "### Each training seed" in chapter.notes({**combined, "rows": [], "timings": {}})
