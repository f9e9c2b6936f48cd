from __future__ import annotations

import pytest

from cascadekit.profiles import ProfileError, load_profile, parse_overrides, profile_names


def test_all_five_profiles_load() -> None:
    assert set(profile_names()) == {"smoke", "toy", "paper", "small", "full"}
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
    assert p.world.rendering == "paper", "the paper's bands count ops as the paper does: the paper rendering's op"
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


# --- exact types and bounds (security issue: "no silent coercions") ------------------------

def test_every_shipped_profile_validates_and_every_field_is_checked() -> None:
    import dataclasses
    import typing

    from cascadekit.profiles import _RULES, _SECTIONS, check_value

    for name in profile_names():
        profile = load_profile(name)
        for section in _SECTIONS:
            for f in dataclasses.fields(getattr(profile, section)):
                key = f"{section}.{f.name}"
                value = getattr(getattr(profile, section), f.name)
                assert check_value(key, value) is not None or value is None  # None: an optional field unset
                hint = typing.get_type_hints(_SECTIONS[section])[f.name]
                if hint in (int, float, float | None) or typing.get_origin(hint) is tuple or key.endswith(
                        ("rendering", "architecture")):
                    assert key in _RULES, f"{key} has no bound: add one to profiles._RULES"


@pytest.mark.parametrize(
    "name, overrides, needle",
    [
        ("full", {"engine.vllm_gpus": 4}, "engine.vllm=server across nodes runs on whole nodes of its own"),
        ("full", {"engine.vllm_gpus": 0}, "engine.vllm=server across nodes"),
        ("full", {"engine.nodes": 1}, "engine.vllm=server on one node shares it: 0 < engine.vllm_gpus < gpus_per_node (8)"),
        ("toy", {"engine.vllm_gpus": 2}, "engine.vllm_gpus=2 only means something with engine.vllm=server"),
        ("small", {"engine.gpus_per_node": 2}, "engine.quantization=4bit is the single-GPU QLoRA path"),
        ("small", {"engine.distributed": "fsdp"}, "engine.quantization=4bit is the single-GPU QLoRA path"),
        ("toy", {"engine.vllm": "off"}, "engine.vllm='off': must be one of none, colocate, server"),
        ("toy", {"engine.distributed": "zero2"}, "must be one of none, zero3, fsdp"),
        ("toy", {"engine.data": "web"}, "must be one of world, released"),
    ],
)
def test_engine_settings_that_cannot_run_together_are_refused(name: str, overrides: dict, needle: str) -> None:
    with pytest.raises(ProfileError) as info:
        load_profile(name, overrides)
    assert needle in str(info.value)


def test_engine_overrides_apply_together() -> None:
    """A server on one node needs both fields at once: the cross-field rule sees them together."""
    p = load_profile("small", {"engine.quantization": "none", "engine.gpus_per_node": 2, "engine.vllm": "server",
                               "engine.vllm_gpus": 1})
    assert p.engine.training_processes == 1 and p.engine.server_nodes == 0
    full = load_profile("full").engine
    assert (full.nodes, full.training_processes, full.server_nodes) == (8, 64, 1)


@pytest.mark.parametrize(
    "overrides, needle",
    [
        ({"model.hidden": 1.5}, "model.hidden=1.5: expected an integer"),
        ({"model.hidden": True}, "model.hidden=True: expected an integer"),
        ({"model.hidden": "3"}, "model.hidden='3': expected an integer"),
        ({"model.hidden": 10**30}, "expected an integer"),
        ({"model.hidden": 0}, "model.hidden=0: must be > 0"),
        ({"pretrain.batch_size": -8}, "pretrain.batch_size=-8: must be > 0"),
        ({"world.contexts": "AB"}, "world.contexts='AB': expected a list of strings"),
        ({"world.contexts": ["A", "Z"]}, "world.contexts=['A', 'Z']: must be a non-empty list of contexts"),
        ({"world.contexts": []}, "world.contexts=[]: must be a non-empty list"),
        ({"rl.use_lora": 1}, "rl.use_lora=1: expected true or false"),
        ({"rl.use_lora": "true"}, "rl.use_lora='true': expected true or false"),
        ({"rl.lr": float("nan")}, "rl.lr=nan: expected a finite number"),
        ({"pretrain.lr": float("inf")}, "pretrain.lr=inf: expected a finite number"),
        ({"sft.lr": 0}, "sft.lr=0: must be > 0"),
        ({"model.rope_theta": 10**400}, "expected a finite number"),
        ({"pretrain.warmup_ratio": 1.5}, "must be from 0 to 1"),
        ({"evaluation.top_p": 0.0}, "evaluation.top_p=0.0: must be in (0, 1]"),
        ({"evaluation.temperature": 0}, "evaluation.temperature=0: must be > 0"),
        ({"world.ops_edge": [6, 4]}, r"world.ops_edge=[6, 4]: must be an op range [lo, hi] with 2 <= lo <= hi <= 30"),
        ({"world.ops_hard": [1, 5]}, "world.ops_hard=[1, 5]: must be an op range"),
        ({"world.ops_hard": [8, 10**9]}, "must be an op range"),
        ({"world.ops_hard": [8, 9, 10]}, "expected a list of 2 integers"),
        ({"world.ops_hard": "8-10"}, "expected a list of 2 integers"),
        ({"world.rendering": "fancy"}, "world.rendering='fancy': must be one of full, compact, minimal, paper"),
        ({"evaluation.backend": "vllm"}, "evaluation.backend: vLLM generation is engine.vllm's alone"),
        ({"engine.vllm_memory": 1.0}, "engine.vllm_memory=1.0: must be in (0, 1)"),
        ({"engine.rl_micro_batch": -1}, "engine.rl_micro_batch=-1: must be >= 0"),
        ({"model.architecture": "gpt9"}, "model.architecture='gpt9': must be one of qwen2, qwen3"),
        ({"device": "tpu"}, "device='tpu': must be one of cpu, cuda"),
        ({"dtype": "int8"}, "dtype='int8': must be one of float32, bfloat16"),
        ({"seed": -1}, "seed=-1: must be >= 0"),
        ({"model.pretrained": 5}, "model.pretrained=5: expected a string"),
    ],
)
def test_overrides_are_checked_exactly(overrides: dict, needle: str) -> None:
    with pytest.raises(ProfileError) as info:
        load_profile("smoke", overrides)
    assert needle in str(info.value)


def test_an_old_yaml_entry_for_the_generation_backend_names_engine_vllm(monkeypatch) -> None:
    """Issue 34 case 7: ``evaluation.backend`` is gone; a profile file still naming it is one line naming engine.vllm."""
    from cascadekit import profiles

    raw = profiles._raw_profiles()
    raw["smoke"]["evaluation"] = {**raw["smoke"]["evaluation"], "backend": "vllm"}
    monkeypatch.setattr(profiles, "_raw_profiles", lambda: raw)
    with pytest.raises(ProfileError, match=r"profile smoke.evaluation: evaluation.backend: .*engine.vllm"):
        load_profile("smoke")


def test_zero_is_allowed_where_it_means_something() -> None:
    p = load_profile("smoke", {"rl.kl_beta": 0, "pretrain.weight_decay": 0.0, "pretrain.tokens": 0,
                               "sft.stage1_tasks": 0, "pretrain.problems": 0, "model.rope_theta": 10000})
    assert p.rl.kl_beta == 0.0 and isinstance(p.rl.kl_beta, float) and isinstance(p.model.rope_theta, float)
    assert load_profile("smoke", {"world.ops_edge": (4, 4), "world.contexts": ("B",)}).world.ops_edge == (4, 4)


@pytest.mark.parametrize(
    "pair, needle",
    [
        ("model.hidden=inf", "model.hidden='inf': expected an integer"),
        ("model.hidden=1.5", "model.hidden=1.5: expected an integer"),
        ("model.hidden=1e999", "model.hidden=inf: expected an integer"),
        ("model.hidden=" + "9" * 5000, "model.hidden: value longer than 1000 characters"),
        ("model.hidden=" + "9" * 900, "expected an integer"),
        ('world.contexts="AB"', "world.contexts='AB': expected a list of strings"),
        ("world.contexts=AB", "world.contexts='AB': expected a list of strings"),
        ("world.ops_edge=" + "[" * 900, "expected a list of 2 integers"),
        ("rl.lr=NaN", "rl.lr=nan: expected a finite number"),
        ("rl.use_lora=1", "rl.use_lora=1: expected true or false"),
        ("model.widht=3", "unknown field 'widht'"),
    ],
)
def test_cli_override_text_is_parsed_then_checked(pair: str, needle: str) -> None:
    with pytest.raises(ProfileError) as info:
        parse_overrides([pair])
    assert needle in str(info.value)


def test_cli_override_text_keeps_strings_as_written() -> None:
    assert parse_overrides(["model.pretrained=123", "description=a = b"]) == {"model.pretrained": "123",
                                                                              "description": "a = b"}
