import pytest
import torch

from cascadekit.engine.models import build_model, count_parameters, start_model
from cascadekit.profiles import load_profile
from cascadekit.engine.runtime import save_checkpoint
from cascadekit.engine.tokenizer import train_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(["<question> a is 12 . </question> <solution> a = 12 . </solution> <answer> 12 </answer>"] * 20, 300)


def test_smoke_model_shape_and_forward(tokenizer):
    cfg = load_profile("smoke").model
    model = build_model(cfg, tokenizer)
    assert model.config.vocab_size == len(tokenizer)
    assert model.config.num_hidden_layers == cfg.layers and model.config.hidden_size == cfg.hidden
    logits = model(torch.tensor([[2, 3, 4]])).logits
    assert logits.shape == (1, 3, len(tokenizer))


def test_parameter_counts(tokenizer):
    cfg = load_profile("smoke").model
    model = build_model(cfg, tokenizer)
    embedding = len(tokenizer) * cfg.hidden
    assert model.config.tie_word_embeddings
    assert count_parameters(model) == sum(p.numel() for p in model.parameters())
    assert count_parameters(model) - count_parameters(model, embeddings=False) == embedding
    untied = build_model(load_profile("smoke", {"model.tie_embeddings": False}).model, tokenizer)
    assert count_parameters(untied) - count_parameters(untied, embeddings=False) == 2 * embedding
    assert count_parameters(untied, embeddings=False) == count_parameters(model, embeddings=False)


def test_architectures_and_seed(tokenizer):
    cfg = load_profile("smoke", {"model.architecture": "qwen2"}).model
    assert type(build_model(cfg, tokenizer)).__name__ == "Qwen2ForCausalLM"
    a, b = build_model(cfg, tokenizer, seed=1), build_model(cfg, tokenizer, seed=1)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    with pytest.raises(ValueError, match="architecture"):
        build_model(load_profile("smoke", {"model.architecture": "gpt9"}).model, tokenizer)


def test_toy_model_is_about_a_million_parameters(tokenizer):
    model = build_model(load_profile("toy").model, tokenizer)
    assert 0.5e6 < count_parameters(model, embeddings=False) < 5e6


def test_start_model_builds_from_scratch_or_loads_released_weights(tokenizer, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    smoke = load_profile("smoke", {"seed": 5})
    fresh = start_model(smoke, tokenizer)
    assert all(torch.equal(a, b) for a, b in zip(fresh.parameters(), build_model(smoke.model, tokenizer, seed=5).parameters()))
    released = save_checkpoint(build_model(smoke.model, tokenizer, seed=9), tokenizer, tmp_path / "released")
    loaded = start_model(load_profile("smoke", {"model.pretrained": str(released)}), tokenizer)
    again = build_model(smoke.model, tokenizer, seed=9)
    assert loaded.dtype == torch.float32
    assert all(torch.equal(a, b) for a, b in zip(loaded.parameters(), again.parameters()))
