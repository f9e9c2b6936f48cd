"""Compute accounting: the paper's formulas on worked examples, and exact budget splits."""
from fractions import Fraction

import pytest
from transformers import Qwen3Config, Qwen3ForCausalLM

from cascadekit.engine import compute


def test_supervised_cost_is_6pt():
    assert compute.supervised_flops(100_000_000, 1_000_000_000) == 6 * 10**17


def test_rl_cost_with_and_without_reference_model():
    # P = 100M, N = 1024 prompts, r = 6 rollouts, L = 2048 tokens
    assert compute.rl_flops(10**8, 1024, 6, 2048) == 10 * 10**8 * 1024 * 6 * 2048
    assert compute.rl_flops(10**8, 1024, 6, 2048, reference_model=False) == 8 * 10**8 * 1024 * 6 * 2048


def test_token_equivalent_is_five_thirds_with_reference_model():
    assert compute.rl_token_equivalent(3, 1, 1) == Fraction(5)
    assert compute.rl_token_equivalent(3, 1, 1, reference_model=False) == Fraction(4)
    # token equivalent times 6P is the RL FLOP count
    assert compute.rl_token_equivalent(7, 6, 100) * 6 * 1000 == compute.rl_flops(1000, 7, 6, 100)


def test_paper_full_rl_arm_costs_about_2_1_billion_tokens():
    # Section 5: batch 1024 prompts x 100 updates, r = 6, L_total = 2048, reference model on.
    cost = compute.rl_token_equivalent(1024 * 100, 6, 2048)
    assert cost == 2_097_152_000
    assert round(float(cost) / 1e9, 2) == 2.10


def test_split_budget_is_exact_and_rounds_to_whole_prompts():
    split = compute.split_budget(1_000_000, 0.2, rollouts=6, tokens_per_rollout=100)
    per_prompt = compute.rl_cost_per_prompt(6, 100)  # 5/3 * 600 = 1000
    assert per_prompt == 1000
    assert split.rl_prompts == 200
    assert split.rl_tokens == 200_000
    assert split.midtrain_tokens == 800_000
    assert split.midtrain_tokens + split.rl_tokens == split.total == 1_000_000


def test_split_budget_keeps_rl_cost_integral_when_a_prompt_costs_a_fraction():
    # r = 1, L = 1, g = 1: one prompt costs 5/3, so prompts come in threes (cost 5).
    split = compute.split_budget(100, 0.5, rollouts=1, tokens_per_rollout=1)
    assert split.rl_prompts % 3 == 0
    assert split.rl_tokens.denominator == 1
    assert split.midtrain_tokens + split.rl_tokens == 100
    assert split.rl_prompts == 30 and split.rl_tokens == 50


def test_budget_arms_all_spend_exactly_the_same_total():
    arms = compute.budget_arms(1_000_500, rollouts=6, tokens_per_rollout=100)
    assert [a.arm for a in arms] == ["full_midtrain", "light_rl", "medium_rl", "heavy_rl", "full_rl"]
    totals = {a.midtrain_tokens + a.rl_tokens for a in arms}
    assert totals == {1_000_000}  # trimmed to a whole number of 1000-token prompts
    assert arms[0].rl_prompts == 0 and arms[0].midtrain_tokens == 1_000_000
    assert arms[-1].midtrain_tokens == 0 and arms[-1].rl_prompts == 1000
    assert [a.rl_prompts for a in arms] == [0, 200, 500, 800, 1000]
    assert [a.actual_rl_fraction for a in arms] == [0.0, 0.2, 0.5, 0.8, 1.0]


def test_budget_too_small_for_one_prompt_is_an_error():
    with pytest.raises(ValueError, match="buys no RL prompt"):
        compute.budget_arms(10, rollouts=6, tokens_per_rollout=100)


def test_non_embedding_params_excludes_tied_and_untied_embeddings():
    def count(tie: bool) -> int:
        cfg = Qwen3Config(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                          num_attention_heads=2, num_key_value_heads=1, head_dim=8, tie_word_embeddings=tie)
        return compute.non_embedding_params(Qwen3ForCausalLM(cfg))

    # per layer: q 16x16, k 16x8, v 16x8, o 16x16, q/k norms 8+8, mlp 3 x 16x32, 2 layer norms 16+16
    per_layer = 256 + 128 + 128 + 256 + 16 + 3 * 512 + 32
    expected = 2 * per_layer + 16  # plus the final norm
    assert count(tie=True) == expected
    assert count(tie=False) == expected
