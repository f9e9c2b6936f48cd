"""Chapter 09's reward-model family past the policy's size: function-preserving growth
(:mod:`cascadekit.engine.growth`), the ``reward_model.widths`` setting, and a grown reward model
that trains and scores. A reward model's key holds its own size, not the sizes trained beside it,
and a killed build resumes from its last Trainer checkpoint."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3ForSequenceClassification

from cascadekit.engine.growth import grow, layer_sources
from cascadekit.profiles import ProfileError, load_profile
from cascadekit.engine.runtime import load_classifier
from cascadekit.training.reward_model import (RewardModelScore, preference_records,
                                              reward_model_stage, settings_inputs, sized_reward_model)

SHIPPED = Path(__file__).resolve().parent.parent / "data" / "checkpoints" / "reward-model"
#: test_cascade's smoke settings, so the two share one SFT checkpoint in a cache.
SMOKE = {"sft.stage1_tasks": 2, "sft.stage2_tasks": 1, "reward_model.tasks": 6, "reward_model.eval_tasks": 4,
         "rl.samples": 4}


def _tiny(cls: type, layers: int = 2) -> torch.nn.Module:
    """A random Qwen3 model whose norms are not all ones (so a norm copied wrong shows)."""
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=60, hidden_size=32, intermediate_size=48, num_hidden_layers=layers,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=64,
                         tie_word_embeddings=True, pad_token_id=1, num_labels=1)
    model = cls(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.add_(0.3 * torch.randn_like(param))
    return model.eval()


@pytest.mark.parametrize("cls", [Qwen3ForCausalLM, Qwen3ForSequenceClassification])
def test_growth_preserves_the_function_layer_by_layer(cls: type) -> None:
    model = _tiny(cls)
    grown = grow(model, 5, 3, seed=1).eval()
    assert grown.config.num_hidden_layers == 5 and grown.config.intermediate_size == 144
    assert len(grown.config.layer_types) == 5
    ids = torch.randint(2, 60, (3, 11))
    before, after = model(ids, output_hidden_states=True), grown(ids, output_hidden_states=True)
    torch.testing.assert_close(after.logits, before.logits, atol=1e-5, rtol=1e-5)
    # the residual stream after source layer i is the stream after the last of its copies
    last_copy = [max(j for j, (s, _) in enumerate(layer_sources(2, 5)) if s == i) for i in range(2)]
    for i, j in enumerate(last_copy):
        torch.testing.assert_close(after.hidden_states[j + 1], before.hidden_states[i + 1], atol=1e-5, rtol=1e-5)
    assert sum(p.numel() for p in grown.parameters()) > 3 * sum(p.numel() for p in model.parameters())


def test_grown_capacity_is_new_and_trainable() -> None:
    model = _tiny(Qwen3ForSequenceClassification)
    grown = grow(model, 4, 2, seed=1)
    copy = grown.model.layers[1]  # layer_sources(2, 4): (0, False), (0, True), (1, False), (1, True)
    assert not copy.self_attn.o_proj.weight.any() and not copy.mlp.down_proj.weight.any()
    torch.testing.assert_close(copy.self_attn.q_proj.weight, model.model.layers[0].self_attn.q_proj.weight)
    new_units = grown.model.layers[0].mlp.gate_proj.weight[48:]
    assert new_units.std() > 0 and not grown.model.layers[0].mlp.down_proj.weight[:, 48:].any()
    grown.train()
    grown(torch.randint(2, 60, (2, 9))).logits.sum().backward()
    assert copy.self_attn.o_proj.weight.grad.abs().sum() > 0 and copy.mlp.down_proj.weight.grad.abs().sum() > 0
    assert torch.equal(grow(model, 4, 2, seed=1).model.layers[0].mlp.gate_proj.weight[48:], new_units.detach())


def test_layer_sources_spread_the_copies_evenly() -> None:
    assert layer_sources(4, 4) == [(i, False) for i in range(4)]
    assert layer_sources(4, 8) == [(0, False), (0, True), (1, False), (1, True), (2, False), (2, True),
                                   (3, False), (3, True)]
    assert [s for s, _ in layer_sources(4, 6)] == [0, 0, 1, 1, 2, 3]


def test_growth_refuses_to_shrink() -> None:
    model = _tiny(Qwen3ForCausalLM, layers=3)
    for layers, width in ((2, 1), (3, 0)):
        with pytest.raises(ValueError, match="growth keeps or adds layers and units"):
            grow(model, layers, width)


def test_growth_refuses_partitioned_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    from cascadekit.engine import growth
    monkeypatch.setattr(growth, "is_deepspeed_zero3_enabled", lambda: True)
    with pytest.raises(ValueError, match="not under DeepSpeed ZeRO-3"):
        grow(_tiny(Qwen3ForCausalLM), 3)


def test_bad_sizes_are_one_clear_error() -> None:
    for overrides in ({"reward_model.layers": [4, 1]}, {"reward_model.layers": [2, 2]},
                      {"reward_model.layers": [0, 2]}):
        with pytest.raises(ProfileError, match="reward_model.layers.*strictly increasing"):
            load_profile("toy", overrides)
    with pytest.raises(ProfileError, match=r"reward_model.widths=\[0, 1\].*> 0"):
        load_profile("toy", {"reward_model.widths": [0, 1]})
    for widths in ([1, 2, 4], [2, 1]):
        with pytest.raises(ProfileError, match=r"widths=\[.*one width per size in reward_model.layers \(2\), never"):
            load_profile("toy", {"reward_model.widths": widths})


def test_a_reward_models_key_holds_its_own_size_not_the_sizes_beside_it() -> None:
    toy = load_profile("toy")
    assert toy.reward_model.sizes == {1: 1, 4: 1}
    family = load_profile("toy", {"reward_model.layers": [1, 4, 8], "reward_model.widths": [1, 1, 2]})
    assert family.reward_model.sizes == {1: 1, 4: 1, 8: 2}
    assert settings_inputs(family) == settings_inputs(toy) and not {"layers", "widths"} & set(settings_inputs(toy))
    shipped = [json.loads(p.read_text())["inputs"] for p in sorted(SHIPPED.glob("*/stage.json"))]
    assert shipped and all("width" not in inputs for inputs in shipped)
    assert all(inputs["reward_model"] == json.loads(json.dumps(settings_inputs(toy))) for inputs in shipped)


@pytest.fixture(scope="module")
def sft():
    from cascadekit.chapters.cascade import sft_checkpoint
    return sft_checkpoint(load_profile("smoke", SMOKE))


def test_a_sized_reward_model_starts_as_the_cut_it_grew_from(sft) -> None:
    from cascadekit.engine.runtime import load_tokenizer
    tokenizer = load_tokenizer(sft.checkpoint)
    ids = tokenizer(["<|im_start|>user\nhello<|im_end|>", "2 + 3 = 5"], return_tensors="pt", padding=True,
                    add_special_tokens=False)
    cut = load_classifier(sft.checkpoint, labels=1, layers=1, seed=5).eval()  # the head drawn from the seed
    torch.manual_seed(1)  # whatever the process drew before does not move it
    grown = sized_reward_model(sft.checkpoint, 3, 2, seed=5).eval()
    assert grown.config.num_hidden_layers == 3 and grown.config.intermediate_size == 2 * cut.config.intermediate_size
    with torch.no_grad():
        torch.testing.assert_close(grown(**ids).logits, cut(**ids).logits, atol=1e-5, rtol=1e-5)
    same = sized_reward_model(sft.checkpoint, 1, seed=5)
    assert type(same) is type(cut) and same.config.num_hidden_layers == 1
    assert all(torch.equal(a, b) for a, b in zip(same.state_dict().values(), cut.state_dict().values()))


def test_a_grown_reward_model_trains_and_scores(sft) -> None:
    profile = load_profile("smoke", {**SMOKE, "reward_model.layers": [1, 2], "reward_model.widths": [1, 2]})
    grown = reward_model_stage(sft, profile, 2, profile.reward_model.sizes[2])
    metrics = grown.metrics
    assert metrics["layers"] == 2 and metrics["width"] == 2 and metrics["train_pairs"] > 0
    assert 0 <= metrics["held_out"]["accuracy"] <= 1 and set(metrics["calibration"]) == {"a", "b", "r"}
    cut = load_classifier(sft.checkpoint, labels=1, layers=1)
    assert metrics["parameters"] > sum(p.numel() for p in cut.parameters())
    config = json.loads((Path(grown.checkpoint) / "config.json").read_text())
    assert config["num_hidden_layers"] == 2 and config["intermediate_size"] == 2 * profile.model.intermediate
    inputs = json.loads((Path(grown.checkpoint) / "stage.json").read_text())["inputs"]
    assert inputs["width"] == 2 and inputs["layers"] == 2 and "widths" not in inputs["reward_model"]
    scorer = RewardModelScore(grown)
    assert scorer.model.model.layers[1].self_attn.o_proj.weight.any()  # the zeroed copy of layer 0 has trained
    prompt = preference_records(profile, "eval", 1, 0)[0]["prompt"]
    scores = scorer([prompt] * 3, ["", "Hope this helps.", "x " * 5000])
    assert len(scores) == 3 and all(math.isfinite(s) for s in scores)


class _Killed(Exception):
    """Stands in for a session that ends while a reward model trains."""


def test_a_killed_reward_model_build_resumes_from_its_last_checkpoint(sft, monkeypatch) -> None:
    from transformers import TrainerCallback

    from cascadekit.artifacts import cache_root
    from cascadekit.training import reward_model as rm

    class KillAfterFirstSave(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            raise _Killed(f"killed after saving step {state.global_step}")

    resumed_from = []

    class Trainer(rm.RewardTrainer):
        def train(self, resume_from_checkpoint=None, **kwargs):
            resumed_from.append(resume_from_checkpoint)
            if len(resumed_from) == 1:
                self.add_callback(KillAfterFirstSave())
            return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)

    monkeypatch.setattr(rm, "RewardTrainer", Trainer)
    profile = load_profile("smoke", {**SMOKE, "reward_model.lr": 0.0011})  # a key no other test builds
    with pytest.raises(_Killed):
        reward_model_stage(sft, profile, 1)
    built = reward_model_stage(sft, profile, 1)
    assert resumed_from[0] is None and Path(resumed_from[1]).name.startswith("checkpoint-")
    assert built.metrics["train_pairs"] > 0 and 0 <= built.metrics["held_out"]["accuracy"] <= 1
    assert not (cache_root() / "runs" / f"reward-model-{built.key}").exists()  # removed once the entry is written
