"""Finding 3's plan: five arms, one budget, every arm spent exactly, to the trainer step."""
from __future__ import annotations

from fractions import Fraction

import pytest

from cascadekit.compute import ARMS, rl_token_equivalent
from cascadekit.experiments import budget as bx
from cascadekit.profiles import load_profile

SCALES = ("smoke", "toy", "paper")


def profile(scale: str, **overrides):
    return bx.chapter_profile(load_profile(scale), overrides)


@pytest.mark.parametrize("scale", SCALES)
def test_every_arm_spends_exactly_the_same_budget(scale):
    p = profile(scale)
    arms = bx.plan_budget(p)
    assert [a.arm for a in arms] == list(ARMS)
    total = bx.BUDGET_UNITS[scale] * bx.step_unit(p)
    for arm in arms:
        rl = rl_token_equivalent(arm.rl_prompts, p.rl.group_size, bx.rollout_tokens(p),
                                 reference_model=bx.uses_reference_model(p))
        assert arm.rl_tokens == rl
        assert arm.midtrain_tokens + rl == arm.total == total
        assert Fraction(arm.rl_fraction).limit_denominator(10) == rl / total  # the asked share, exactly


@pytest.mark.parametrize("scale", SCALES)
def test_every_arm_is_whole_trainer_steps(scale):
    p = profile(scale)
    for arm in bx.plan_budget(p):
        assert arm.rl_prompts % p.rl.prompts_per_step == 0
        assert arm.midtrain_tokens % bx.midtrain_step_tokens(p) == 0


@pytest.mark.parametrize("scale", SCALES)
def test_step_unit_is_the_least_common_multiple(scale):
    p = profile(scale)
    unit, mt, rl = bx.step_unit(p), bx.midtrain_step_tokens(p), bx.rl_step_cost(p)
    assert unit % mt == 0 and (unit / rl).denominator == 1
    assert not any(u % mt == 0 and (u / rl).denominator == 1 for u in range(mt, unit, mt))


def test_the_toy_plan():
    arms = {a.arm: a for a in bx.plan_budget(profile("toy"))}
    assert bx.step_unit(profile("toy")) == 131_072  # 16 mid-training steps = 3 RL steps of 8 prompts
    assert arms["full_midtrain"].midtrain_tokens == arms["full_rl"].total == 1_310_720
    assert arms["full_rl"].rl_prompts == 240 and arms["light_rl"].rl_prompts == 48


def test_units_that_do_not_split_are_refused():
    with pytest.raises(ValueError, match="whole steps"):
        bx.plan_budget(profile("toy"), units=7)


def test_cost_settings_follow_the_profile():
    assert bx.rollout_tokens(profile("paper")) == 2048  # the paper's L_total = 1024 + 1024
    assert bx.uses_reference_model(profile("paper")) and not bx.uses_reference_model(profile("toy"))
    assert bx.rl_step_cost(profile("toy")) == Fraction(4, 3) * 8 * 512 * 8  # g = 0, r = 8, L = 512, 8 prompts


def test_measured_rl_spend_counts_prompts_and_completions():
    from cascadekit.training.pretrain import cached_tokenizer
    from cascadekit.world import generate_problems

    p = profile("smoke")
    tokenizer = cached_tokenizer(p)
    prompts = generate_problems(ops=[4], contexts=("A",), n=4, split="rl", style="compact")
    curves = [{"completion_length": 10.0}, {"completion_length": 20.0}]
    spend = bx.actual_rl_spend(p, curves, prompts, tokenizer)
    prompt_tokens = sum(len(ids) for ids in tokenizer([q.rl_prompt for q in prompts])["input_ids"])
    rollouts = 2 * p.rl.prompts_per_step * p.rl.group_size
    assert spend["rollouts"] == rollouts and spend["rl_prompts"] == 4
    expected = Fraction(8, 6) * (p.rl.group_size * prompt_tokens + 30 * p.rl.prompts_per_step * p.rl.group_size)
    assert spend["rl_token_equivalents_measured"] == pytest.approx(float(expected))
    assert bx.actual_rl_spend(p, [], [], tokenizer)["rl_token_equivalents_measured"] == 0


def test_stored_results_are_computed_once(tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return {"pass@1": 0.5}

    path = tmp_path / "arm" / "metrics.json"
    assert bx.stored(path, compute) == bx.stored(path, compute) == {"pass@1": 0.5}
    assert calls == [1]


def test_verdict_reads_the_numbers():
    def arm(name, edge1, hard8):
        return {"arm": name, "by_range": [{"range": "edge", "pass@1": edge1, "pass@8": 0.0},
                                          {"range": "hard", "pass@1": 0.0, "pass@8": hard8}]}

    metrics = {"samples_per_problem": 8, "arms": [arm("full_midtrain", 0.3, 0.0), arm("light_rl", 0.2, 0.0),
                                                  arm("heavy_rl", 0.1, 0.2), arm("full_rl", 0.0, 0.1)]}
    text = bx.verdict(metrics)
    assert "edge pass@1: reproduced" in text and "hard pass@8: reproduced" in text
    metrics["arms"] = [arm(a["arm"], 0.0, 0.0) for a in metrics["arms"]]
    assert bx.verdict(metrics).count("cannot tell") == 2
    assert bx.verdict({"samples_per_problem": 8, "arms": metrics["arms"][:1]}).startswith("Incomplete")


@pytest.mark.slow
def test_toy_reproduction_spends_the_plan(tmp_path):
    """The toy run end to end. It asserts the budgets (planned = trained, equal across arms),
    not the direction of the finding, which the committed results report."""
    p = profile("toy")
    metrics = bx.run(p, tmp_path)
    totals = {a["planned"]["total"] for a in metrics["arms"]}
    assert len(totals) == 1
    for arm in metrics["arms"]:
        assert arm["actual"]["midtrain_tokens"] == arm["planned"]["midtrain_tokens"]
        assert arm["actual"]["rl_prompts"] == arm["planned"]["rl_prompts"]


def test_arms_share_the_ranges_measured_once_on_the_base(tmp_path, monkeypatch):
    """Arm processes read the stored bands; the base is evaluated for them only once."""
    from cascadekit.experiments import competence
    from cascadekit.experiments import edge_of_competence as eoc

    calls = []

    def fake_ladder(prof, base):
        calls.append(base)
        bands = {"in_distribution": (2, 2), "edge": (3, 4), "hard": (5, 5)}
        return competence.with_bands(prof, bands), {"ranges": "measured", "evaluation": {"by_op": []}}

    monkeypatch.setattr(eoc, "evaluate_base", fake_ladder)
    smoke = profile("smoke")
    for _ in range(2):
        ranged, note = bx.arm_ranges(smoke, tmp_path / "base", tmp_path)
        assert (ranged.world.ops_edge, ranged.world.ops_hard, note) == ((3, 4), (5, 5), "measured")
    assert len(calls) == 1 and ranged.model == smoke.model
