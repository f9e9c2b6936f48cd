"""Finding 3's plan: five arms, one budget, every arm spent exactly, to the trainer step."""
from __future__ import annotations

from fractions import Fraction

import pytest

from cascadekit.engine.compute import ARMS, rl_token_equivalent
from cascadekit.chapters import ch06_fixed_budget as bx
from cascadekit.chapters import resolve, spec
from cascadekit.bands import Bands

SCALES = ("smoke", "toy", "paper")


def profile(scale: str, **overrides):
    return resolve("06", scale, overrides).profile


def units(scale: str) -> int:
    return spec("06").budget_units[scale]


@pytest.mark.parametrize("scale", SCALES)
def test_every_arm_spends_exactly_the_same_budget(scale):
    p = profile(scale)
    arms = bx.plan_budget(p, units(scale))
    assert [a.arm for a in arms] == list(ARMS)
    total = units(scale) * bx.step_unit(p)
    for arm in arms:
        rl = rl_token_equivalent(arm.rl_prompts, p.rl.group_size, bx.rollout_tokens(p),
                                 reference_model=bx.uses_reference_model(p))
        assert arm.rl_tokens == rl
        assert arm.midtrain_tokens + rl == arm.total == total
        assert Fraction(arm.rl_fraction).limit_denominator(10) == rl / total  # the asked share, exactly


@pytest.mark.parametrize("scale", SCALES)
def test_every_arm_is_whole_trainer_steps(scale):
    p = profile(scale)
    for arm in bx.plan_budget(p, units(scale)):
        assert arm.rl_prompts % p.rl.prompts_per_step == 0
        assert arm.midtrain_tokens % bx.midtrain_step_tokens(p) == 0


@pytest.mark.parametrize("scale", SCALES)
def test_step_unit_is_the_least_common_multiple(scale):
    p = profile(scale)
    unit, mt, rl = bx.step_unit(p), bx.midtrain_step_tokens(p), bx.rl_step_cost(p)
    assert unit % mt == 0 and (unit / rl).denominator == 1
    assert not any(u % mt == 0 and (u / rl).denominator == 1 for u in range(mt, unit, mt))


def test_the_toy_plan():
    arms = {a.arm: a for a in bx.plan_budget(profile("toy"), units("toy"))}
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


def _arm(name: str, edge_solved: int, hard_solved: int, n: int = 8, problems: int = 20) -> dict:
    per_problem = [{"problem": i, "op": 4, "range": "edge", "context": "A", "n": n, "correct": n * (i < edge_solved),
                    "n_dependency": 0, "n_missing": 0} for i in range(problems)]
    per_problem += [{"problem": problems + i, "op": 6, "range": "hard", "context": "A", "n": n,
                     "correct": n * (i < hard_solved), "n_dependency": 0, "n_missing": 0} for i in range(problems)]
    return {"arm": name, "per_problem": per_problem,
            "by_range": [{"range": "edge", "pass@1": edge_solved / problems, f"pass@{n}": edge_solved / problems},
                         {"range": "hard", "pass@1": hard_solved / problems, f"pass@{n}": hard_solved / problems}]}


def test_claims_compare_the_best_arms_with_paired_intervals():
    metrics = {"samples_per_problem": 8, "arms": [_arm("full_midtrain", 12, 0), _arm("light_rl", 10, 0),
                                                  _arm("heavy_rl", 2, 9), _arm("full_rl", 0, 8)]}
    edge, hard = bx.claims(metrics)
    assert "full_midtrain" in edge["claim"] and "heavy_rl" in edge["claim"] and edge["verdict"] == "reproduced"
    assert hard["this run"] == pytest.approx(9 / 20) and hard["verdict"] == "reproduced"
    metrics["arms"] = [_arm(a["arm"], 1, 1) for a in metrics["arms"]]
    assert all(r["verdict"] == "cannot tell" for r in bx.claims(metrics))  # equal arms: no difference
    assert bx.claims({"samples_per_problem": 8, "arms": metrics["arms"][:1]}) == []


def test_evaluation_covers_the_bands_edge_and_hard_ops():
    p = profile("smoke")
    problems = bx.budget_eval_problems(p, Bands((2, 2), (3, 4), (5, 5)))
    assert {q.op for q in problems} == {3, 4, 5}
    assert len(problems) == 3 * p.evaluation.problems_per_op


@pytest.mark.slow
def test_toy_reproduction_spends_the_plan(tmp_path):
    """The toy run end to end. It asserts the budgets (planned = trained, equal across arms),
    not the direction of the finding, which the committed results report."""
    metrics = bx.run(resolve("06", "toy"), tmp_path)
    totals = {a["planned"]["total"] for a in metrics["arms"]}
    assert len(totals) == 1
    for arm in metrics["arms"]:
        assert arm["actual"]["midtrain_tokens"] == arm["planned"]["midtrain_tokens"]
        assert arm["actual"]["rl_prompts"] == arm["planned"]["rl_prompts"]
