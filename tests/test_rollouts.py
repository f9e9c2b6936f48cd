"""GRPO rollouts by the kit's decode loop through TRL's ``rollout_func``: chosen by ``engine.rollouts``, keys unmoved."""
from __future__ import annotations

import pytest
import torch
from datasets import Dataset

from cascadekit.profiles import ProfileError, load_profile
from cascadekit.training import grpo, rollouts
from test_grpo import tiny_model, tiny_tokenizer  # one character per token, a one-layer Qwen3

def count_ones(completions, **kwargs):
    return [float(c.count("1")) for c in completions]


def kit(**overrides):
    return load_profile("smoke", {"rl.max_completion_length": 12, "engine.rollouts": "kit", **overrides})


def test_a_run_of_repeated_prompts_is_one_group():
    assert rollouts.prompt_groups([[1], [1], [2], [2]]) == ([[1], [2]], 2)
    assert rollouts.prompt_groups([[1], [1], [2]]) == ([[1], [1], [2]], 1)
    assert rollouts.prompt_groups([[1], [2], [1]]) == ([[1], [2], [1]], 1)


def test_grpo_trains_on_the_kit_loops_rollouts(tmp_path, monkeypatch):
    calls = []

    def counted(prompts, trainer):
        out = rollouts.kit_rollouts(prompts, trainer)
        calls.append((len(prompts), out))
        return out

    monkeypatch.setattr(grpo, "choose_rollouts", lambda profile, rl: counted)
    profile = kit()
    dataset = Dataset.from_dict({"prompt": [f"{i}+{i}=" for i in range(8)]})
    result = grpo.train_grpo(tiny_model(), tiny_tokenizer(), dataset, count_ones, profile, str(tmp_path),
                             max_steps=2, disable_tqdm=True)
    assert list(result.curves["step"]) == [1, 2] and result.curves["reward"].notna().all()
    assert len(calls) == 2
    group = profile.rl.group_size
    for n, out in calls:
        assert len(out["completion_ids"]) == len(out["prompt_ids"]) == n
        assert all(out["prompt_ids"][k] == out["prompt_ids"][k - k % group] for k in range(n))  # TRL's repeats
        assert all(len(c) <= 12 and 1 not in c[:-1] for c in out["completion_ids"])


def test_the_default_is_trls_own_generation_and_adds_nothing_to_a_key():
    profile = load_profile("smoke")
    assert profile.engine.rollouts == "generate"
    assert rollouts.choose_rollouts(profile, profile.rl) is None and rollouts.rollout_inputs(profile) == {}
    assert rollouts.rollout_inputs(kit()) == {"rollouts": "kit"}
    assert rollouts.choose_rollouts(kit(), kit().rl) is rollouts.kit_rollouts


def test_what_the_kit_loop_does_not_roll_out_is_one_clear_error():
    with pytest.raises(ProfileError, match="engine.rollouts"):
        load_profile("smoke", {"engine.rollouts": "fast"})
    with pytest.raises(ValueError, match="use_lora"):
        rollouts.choose_rollouts(kit(), kit(**{"rl.use_lora": True}).rl)
