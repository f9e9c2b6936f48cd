"""The cascade's RL stages: chapter 09's reward model (preference records, policy samples, calibration,
accuracy, a tiny trained model and its GRPO reward), the markup-reading reward wrapper, the RLHF and
IF-RL prompt sets and rewards, and paired stage-table changes."""
from __future__ import annotations

import dataclasses
import math

import pytest

from cascadekit.chat import parse_assistant
from cascadekit.evaluation.stage_claims import mean_of, paired_change
from cascadekit.profiles import ProfileError, load_profile
from cascadekit.rewards import reading_markup
from cascadekit.stages import content_id
from cascadekit.chapters.cascade import (IF_RM_WEIGHT, RLHF_ARMS, rl_records, rlhf_records,
                                         verifier_plus_reward_model)
from cascadekit.engine.runtime import load_classifier
from cascadekit.training.reward_model import (RewardModelScore, fit_calibration,
                                              pairwise_accuracy, preference_records, reward_model_stage)

PROFILE = load_profile("smoke", {"sft.stage1_tasks": 2, "sft.stage2_tasks": 1, "reward_model.tasks": 6,
                                 "reward_model.eval_tasks": 4, "rl.samples": 4})


def test_preference_records_order_pairs_by_hidden_quality_in_both_modes() -> None:
    records = preference_records(PROFILE, "eval", 6, 0)
    assert records and all(r["chosen_quality"] > r["rejected_quality"] for r in records)
    assert {r["think"] for r in records} == {True, False} and {r["source"] for r in records} == {"perturbed"}
    for r in records:
        assert r["prompt"].endswith("<|im_start|>assistant\n")
        turn = parse_assistant(r["chosen"])
        assert bool(turn.thinking) == r["think"] and turn.answer and turn.well_formed


def test_policy_samples_make_pairs_of_the_policys_own_answers(reward_model) -> None:
    from cascadekit.training.reward_model import sampled_answers
    sft = reward_model[0]
    prompts = [r["prompt"] for r in preference_records(PROFILE, "eval", 2, 0)][:2]
    answers = sampled_answers(sft.checkpoint, prompts, 3, PROFILE, 0)
    assert [len(a) for a in answers] == [3, 3] and all(isinstance(a, str) for row in answers for a in row)
    assert answers == sampled_answers(sft.checkpoint, prompts, 3, PROFILE, 0)  # seeded
    records = preference_records(PROFILE, "eval", 6, 0, sft)
    assert all(r["chosen_quality"] > r["rejected_quality"] for r in records)
    assert {r["source"] for r in records} <= {"perturbed", "policy"}


def test_calibration_recovers_a_line_and_refuses_nothing_on_constant_scores() -> None:
    fit = fit_calibration([0.0, 1.0, 2.0, 3.0], [0.1, 0.3, 0.5, 0.7])
    assert fit["a"] == pytest.approx(0.1) and fit["b"] == pytest.approx(0.2) and fit["r"] == pytest.approx(1.0)
    flat = fit_calibration([1.0, 1.0, 1.0], [0.2, 0.4, 0.6])
    assert flat["b"] == 0.0 and flat["a"] == pytest.approx(0.4)


def test_pairwise_accuracy_counts_strict_wins_with_an_interval() -> None:
    acc = pairwise_accuracy([1.0, 2.0, 0.0, 5.0], [0.0, 2.0, 1.0, 4.0])
    assert acc["accuracy"] == 0.5 and acc["pairs"] == 4 and acc["low"] < 0.5 < acc["high"]


def test_reward_model_layers_are_validated() -> None:
    for bad in ([], [0], [2, -1]):
        with pytest.raises(ProfileError, match="reward_model.layers"):
            load_profile("smoke", {"reward_model.layers": bad})


@pytest.fixture(scope="module")
def reward_model():
    from cascadekit.chapters.cascade import sft_checkpoint
    return sft_checkpoint(PROFILE), reward_model_stage(sft_checkpoint(PROFILE), PROFILE, 1)


def test_a_tiny_reward_model_trains_calibrates_and_scores_garbage(reward_model) -> None:
    sft, rm = reward_model
    metrics = rm.metrics
    assert metrics["layers"] == 1 and metrics["train_pairs"] > 0
    assert set(metrics["held_out_by_mode"]) == {"think", "no_think"} and "perturbed" in metrics["held_out_by_source"]
    assert set(metrics["calibration"]) == {"a", "b", "r"}
    with pytest.raises(ValueError, match="keeps 1 to 1 layers"):
        load_classifier(sft.checkpoint, labels=1, layers=2)
    scorer = RewardModelScore(rm)
    assert scorer.__name__ == f"reward_model_{content_id(rm)}"  # what a GRPO key names: the model's content
    prompt = preference_records(PROFILE, "eval", 1, 0)[0]["prompt"]
    scores = scorer([prompt] * 4, ["", "Hope this helps.", "x " * 5000, None])  # empty, plain, runaway, not text
    assert len(scores) == 4 and all(math.isfinite(s) for s in scores)
    assert scorer([prompt], ["Hope this helps."]) == pytest.approx(scores[1:2], abs=1e-5)  # batch-independent


def test_reading_markup_hands_the_reward_the_think_block(reward_model) -> None:
    from cascadekit.engine.runtime import load_tokenizer
    tokenizer = load_tokenizer(reward_model[0].checkpoint)
    text = "<think>\nsteps\n</think>\n\nThe answer.<|im_end|><|pad|>"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    seen = []

    def reward(prompts, completions, **kwargs):
        seen.extend(completions)
        return [0.0] * len(completions)

    wrapped = reading_markup(reward, tokenizer)
    assert wrapped.__name__ == "reward"
    wrapped(["p"], [tokenizer.decode(ids, skip_special_tokens=True)], completion_ids=[ids])
    assert seen == ["<think>\nsteps\n</think>\n\nThe answer."]
    with pytest.raises(ValueError, match="completion_ids"):
        wrapped(["p"], ["x"])


def test_half_half_batches_are_half_each_mode_and_arms_share_prompts() -> None:
    arms = {arm: rlhf_records(PROFILE, arm) for arm in RLHF_ARMS}
    half = arms["half-half"]
    step = PROFILE.rl.prompts_per_step
    for start in range(0, len(half), step):
        assert sum(r["think"] for r in half[start:start + step]) == step // 2
    assert all(r["think"] for r in arms["think only"]) and not any(r["think"] for r in arms["no_think only"])
    assert len({tuple(r["messages"][-2]["content"].rsplit(" ", 1)[0] for r in records)
                for records in arms.values()}) == 1
    assert {r["domain"] for r in half} == {"general"}
    with pytest.raises(ValueError, match="unknown RLHF arm"):
        rlhf_records(PROFILE, "both")
    assert {r["domain"] for r in rl_records(PROFILE, "instructions", False, 2)} == {"instructions"}


def test_combined_if_reward_adds_the_weighted_predicted_quality() -> None:
    class Scorer:
        __name__ = "reward_model_x"

        def __call__(self, prompts, completions, **kwargs):
            return [0.5] * len(completions)

    record = rl_records(PROFILE, "instructions", False, 2)[0]
    import json
    reward = verifier_plus_reward_model(Scorer())
    assert reward.__name__ == f"verifier_plus_{IF_RM_WEIGHT:g}_reward_model_x"
    got = reward(["p"], ["garbage"], domain=["instructions"], gold=[json.dumps(record["gold"])])
    assert got == [IF_RM_WEIGHT * 0.5]


def _samples(scores):
    return [{"domain": d, "think": t, "score": s} for (d, t), s in zip(
        [("general", True), ("general", False), ("math", True), ("math", False)], scores)]


def test_paired_changes_pair_prompts_and_refuse_tables_out_of_step() -> None:
    before, after = _samples([0.0, 0.5, 1.0, 0.0]), _samples([0.5, 1.0, 1.0, 0.0])
    assert paired_change(before, after, names=["general"])[0] == pytest.approx(0.5)
    assert paired_change(before, after, think=True)[0] == pytest.approx(0.25)
    assert mean_of(after, names=["math"])[0] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="same prompts"):
        paired_change(before, after[:3])
    with pytest.raises(ValueError, match="no samples"):
        paired_change(before, after, names=["swe"])


def test_screening_chat_prompts_stops_at_the_turn_and_keeps_markers(reward_model) -> None:
    from cascadekit.engine.runtime import load_model, load_tokenizer
    from cascadekit.training.dynamic_sampling import sample_groups
    sft = reward_model[0]
    model, tokenizer = load_model(sft.checkpoint), load_tokenizer(sft.checkpoint)
    seen = {}
    generate = model.generate

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return generate(*args, **kwargs)

    model.generate = spy
    decode = tokenizer.batch_decode

    def spy_decode(ids, **kwargs):
        seen["skip"] = kwargs["skip_special_tokens"]
        return decode(ids, **kwargs)

    tokenizer.batch_decode = spy_decode
    prompt = preference_records(PROFILE, "eval", 1, 0)[0]["prompt"]
    completions = sample_groups(model, tokenizer, [prompt], 3, max_completion_length=12, keep_markup=True)
    assert len(completions) == 3 and not any("<|im_end|>" in c for c in completions)
    assert seen["eos_token_id"][0] == tokenizer.convert_tokens_to_ids("<|im_end|>") and seen["skip"] is False
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    assert seen["input_ids"].shape[1] == len(ids)  # nothing added to the rendered prompt


def test_rlhf_has_a_rate_of_its_own_only_when_set() -> None:
    from cascadekit.chapters.cascade import rlhf_settings
    from cascadekit.profiles import load_profile

    shared = load_profile("toy")
    assert rlhf_settings(shared) is shared.rl  # unset: RL's settings, so no RLHF key moves
    own = load_profile("toy", {"rlhf.lr": 2.5e-5})
    assert rlhf_settings(own) == dataclasses.replace(own.rl, lr=2.5e-5) and own.rl.lr == shared.rl.lr
    both = load_profile("toy", {"rlhf.lr": 2.5e-5, "rlhf.kl_beta": 0.5})
    assert rlhf_settings(both) == dataclasses.replace(both.rl, lr=2.5e-5, kl_beta=0.5) and both.rl.kl_beta == 0.0
