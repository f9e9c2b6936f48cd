from __future__ import annotations

import pytest

from cascadekit.profiles import ProfileError, load_profile, parse_overrides, profile_names


def test_all_four_profiles_load() -> None:
    assert set(profile_names()) == {"smoke", "toy", "paper", "full"}
    for name in profile_names():
        profile = load_profile(name)
        assert profile.name == name and profile.summary().startswith(f"profile {name!r}")


def test_paper_profile_is_the_interplay_setting() -> None:
    m = load_profile("paper").model
    assert (m.layers, m.hidden, m.intermediate, m.heads, m.kv_heads) == (12, 768, 3072, 12, 2)
    assert m.rope_theta == 1e6 and m.tie_embeddings and m.max_positions == 2048
    p = load_profile("paper")
    assert p.tokenizer.vocab_size == 2200 and p.pretrain.tokens == 10_000_000_000
    assert (p.evaluation.temperature, p.evaluation.top_p, p.evaluation.max_new_tokens, p.evaluation.samples) == (0.7, 1.0, 1024, 128)
    assert list(p.world.ops("in_distribution")) == list(range(2, 11))
    assert list(p.world.ops("edge")) == list(range(11, 15)) and list(p.world.ops("hard")) == list(range(15, 21))


def test_overrides_are_typed() -> None:
    p = load_profile("smoke", parse_overrides(["model.hidden=64", "world.ops_edge=[4, 6]", "rl.use_lora=true", "seed=3"]))
    assert p.model.hidden == 64 and p.world.ops_edge == (4, 6) and p.rl.use_lora is True and p.seed == 3


def test_hash_changes_with_the_section() -> None:
    base = load_profile("smoke")
    bigger = load_profile("smoke", {"model.hidden": 64})
    assert base.hash("model") != bigger.hash("model") and base.hash("world") == bigger.hash("world")


def test_world_hash_follows_the_rendered_text(monkeypatch) -> None:
    from cascadekit.world import corpus, render

    profile = load_profile("smoke")
    before = profile.hash("world", "model")
    corpus.rendering_fingerprint.cache_clear()
    monkeypatch.setattr(render, "_listing", lambda names: " plus ".join(names))  # a renderer change, same settings
    try:
        assert profile.hash("world", "model") != before and profile.hash("model") == load_profile("smoke").hash("model")
    finally:
        corpus.rendering_fingerprint.cache_clear()


@pytest.mark.parametrize(
    "name, overrides, needle",
    [
        ("huge", {}, "'huge'"),
        ("smoke", {"model.hiddn": 3}, "'hiddn'"),
        ("smoke", {"modle.hidden": 3}, "'modle'"),
        ("smoke", {"model.hidden": "wide"}, "model.hidden='wide'"),
        ("smoke", {"rl.use_lora": "maybe"}, "rl.use_lora"),
        ("smoke", {"colour": "red"}, "'colour'"),
    ],
)
def test_bad_profile_input_names_the_bad_value(name: str, overrides: dict, needle: str) -> None:
    with pytest.raises(ProfileError, match=needle.replace("[", r"\[")):
        load_profile(name, overrides)


def test_malformed_override_string() -> None:
    with pytest.raises(ProfileError, match="not of the form"):
        parse_overrides(["model.hidden"])
