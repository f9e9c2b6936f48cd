"""Multi-stage SFT: stage data, the chat tokenizer, assistant-only loss masks (one and many
turns), full and LoRA stages, and the cached stages on a tiny model."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from cascadekit.training.chat_base import base_texts, build_chat_tokenizer, chat_base, surface_ops
from cascadekit.chat import MARKUP_TOKENS, render
from cascadekit.domains import domains
from cascadekit.engine.models import build_model
from cascadekit.profiles import load_profile
from cascadekit.engine.runtime import load_model
from cascadekit.training.sft import seq_len, sft_config, sft_dataset, sft_stages, stage_records, train_stage

PROFILE = load_profile("smoke", {"sft.stage1_tasks": 2, "sft.stage2_tasks": 1, "sft.eval_tasks": 1,
                                 "sft.max_new_tokens": 8})


@pytest.fixture(scope="module")
def tokenizer():
    return build_chat_tokenizer(PROFILE)


def test_stage_records_cover_their_domains_in_both_modes() -> None:
    one, two = stage_records(PROFILE, 1), stage_records(PROFILE, 2)
    assert {r["domain"] for r in one} == {"general", "instructions", "math", "code"}
    assert {r["domain"] for r in two} == set(domains())
    assert len(one) == 4 * 2 * 2 and len(two) == 6 * 1 * 2
    assert sum(r["think"] for r in one) == len(one) // 2
    assert all(2 <= r["gold"].get("op", 2) <= 3 for r in one) and list(surface_ops(PROFILE)) == [2, 3]


def test_base_text_has_no_chat_markup_and_every_domain(tokenizer) -> None:
    texts = base_texts(PROFILE, tokenizer, 3000)
    assert not any(token in text for text in texts for token in MARKUP_TOKENS)
    tokens = sum(len(ids) + 1 for ids in tokenizer(texts)["input_ids"])
    assert 3000 <= tokens <= 6000


def test_chat_tokenizer_keeps_markers_whole(tokenizer) -> None:
    for token in MARKUP_TOKENS:
        assert len(tokenizer(token, add_special_tokens=False)["input_ids"]) == 1
    assert tokenizer.chat_template and "generation" in tokenizer.chat_template


def _trained_text(tokenizer, record) -> str:
    out = tokenizer.apply_chat_template(record["messages"], tools=None, tokenize=True, return_dict=True,
                                        return_assistant_tokens_mask=True)
    assert tokenizer.decode(out["input_ids"], skip_special_tokens=False) == render(record["messages"])
    return tokenizer.decode([i for i, m in zip(out["input_ids"], out["assistant_masks"]) if m],
                            skip_special_tokens=False)


def test_assistant_mask_covers_exactly_the_trained_turn(tokenizer) -> None:
    record = next(r for r in stage_records(PROFILE, 1) if r["think"])
    trained = _trained_text(tokenizer, record)
    assert trained.startswith("<think>\n") and trained.endswith("<|im_end|>")
    assert record["messages"][-1]["content"] in trained
    assert record["messages"][0]["content"] not in trained  # the user turn (and its flag) is context


def test_tool_results_are_context_and_every_call_is_trained(tokenizer) -> None:
    record = next(r for r in stage_records(PROFILE, 2) if r["domain"] == "tools")
    trained = _trained_text(tokenizer, record)
    calls = sum(1 for m in record["messages"] if m.get("tool_calls"))
    assert trained.count("<tool_call>") == calls and "<tool_response>" not in trained
    assert trained.count("<|im_end|>") == calls + 1


def test_sft_dataset_drops_records_that_do_not_fit(tokenizer) -> None:
    records = stage_records(PROFILE, 2)
    full, dropped = sft_dataset(records, tokenizer, 10_000)
    short, dropped_short = sft_dataset(records, tokenizer, 80)
    assert dropped == 0 and len(full) == len(records)
    assert dropped_short > 0 and len(short) + dropped_short == len(records)
    assert set(full.column_names) == {"messages", "tools"}


def test_sft_dataset_refuses_a_malformed_record(tokenizer) -> None:
    records = stage_records(PROFILE, 1)
    records[0] = {**records[0], "domain": "astrology"}
    with pytest.raises(ValueError, match="'domain'"):
        sft_dataset(records, tokenizer, 10_000)


def test_sft_config_uses_assistant_only_loss(tmp_path) -> None:
    for stage in (1, 2):
        cfg = sft_config(PROFILE, stage, tmp_path, steps_hint=10)
        assert cfg.assistant_only_loss and not cfg.packing and cfg.use_cpu
        assert cfg.max_length == seq_len(PROFILE, stage)
    assert seq_len(PROFILE, 2) > seq_len(PROFILE, 1)


def test_sft_config_takes_the_device_from_the_runtime(tmp_path, monkeypatch) -> None:
    from cascadekit.engine import runtime

    monkeypatch.setattr(runtime, "cuda_device", lambda: None)  # a GPU profile on a CPU machine: CPU, float32
    cfg = sft_config(load_profile("paper"), 1, tmp_path, steps_hint=10)
    assert cfg.use_cpu and not cfg.bf16 and not cfg.fp16 and not cfg.gradient_checkpointing


def test_sft_checkpoints_activations_on_a_gpu(tmp_path, monkeypatch) -> None:
    """Issue 34 case 9: a 16K-token SFT row's activations do not fit beside the model without it."""
    import transformers.training_args as training_args

    from cascadekit.engine import runtime

    monkeypatch.setattr(training_args, "is_torch_bf16_gpu_available", lambda: True)
    monkeypatch.setattr(runtime, "cuda_device", lambda: ("Fake GPU", True))
    cfg = sft_config(load_profile("small"), 2, tmp_path, steps_hint=10)
    assert cfg.gradient_checkpointing and cfg.bf16 and cfg.max_length == 16384


@pytest.mark.parametrize("use_lora", [False, True])
def test_one_sft_stage_trains(tokenizer, tmp_path, use_lora: bool) -> None:
    profile = load_profile("smoke", {"sft.stage1_tasks": 2, "sft.use_lora": use_lora})
    model = build_model(profile.model, tokenizer, seed=0)
    frozen = {k: v.detach().clone() for k, v in model.state_dict().items()}
    trained, info = train_stage(model, tokenizer, profile, 1, tmp_path / "run")
    assert info["steps"] >= 1 and info["records"] + info["dropped_for_length"] == 16
    assert info["loss"] and all(math.isfinite(loss) for _, loss in info["loss"])
    merged = trained.merge_and_unload() if use_lora else trained
    changed = [k for k, v in merged.state_dict().items() if not torch.equal(v, frozen[k])]
    assert changed and (not use_lora or not any("embed" in k for k in changed))


def test_cached_stages_chain_and_load(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path / "cache"))
    profile = load_profile("smoke", {"sft.base_tokens": 4000, "sft.stage1_tasks": 1, "sft.stage2_tasks": 1,
                                     "sft.use_lora": True})
    base = chat_base(profile)
    one, two = sft_stages(base, profile)
    assert one.key != two.key and one.metrics["stage"] == 1 and two.metrics["stage"] == 2
    assert load_model(two.checkpoint).__class__.__name__.endswith("ForCausalLM")  # adapters merged
    assert chat_base(profile).key == base.key and sft_stages(base, profile)[1].key == two.key


def test_evaluation_settings_do_not_enter_a_stage_key() -> None:
    from cascadekit.training.sft import training_settings

    plain = training_settings(load_profile("smoke"))
    assert plain == training_settings(load_profile("smoke", {"sft.eval_tasks": 9, "sft.max_new_tokens": 99}))
    assert plain != training_settings(load_profile("smoke", {"sft.lr": 0.5}))


# --- released data (engine.data: released) --------------------------------------------------------

RELEASED = Path(__file__).parent / "fixtures" / "released"


def released_profile(**overrides):
    return load_profile("smoke", {"engine.data": "released", "engine.data_dir": str(RELEASED),
                                  "sft.stage1_tasks": 1, **overrides})


def test_released_sft_records_train_one_stage(tmp_path):
    profile = released_profile()
    records = stage_records(profile, 1)
    assert sorted(r["domain"] for r in records) == ["code", "general", "math"]  # the first row of each domain
    assert all(r["source"].startswith("nvidia/Nemotron-Cascade-SFT-Stage-1:") for r in records)
    tokenizer = build_chat_tokenizer(profile)
    dataset, dropped = sft_dataset(records, tokenizer, seq_len(profile, 1))
    assert len(dataset) + dropped == 3 and len(dataset) > 0
    model = build_model(profile.model, tokenizer, seed=0)
    trained, info = train_stage(model, tokenizer, profile, 1, tmp_path / "run")
    assert info["records"] == len(dataset) and info["steps"] >= 1


def test_released_data_changes_the_sft_key_and_world_data_does_not():
    from cascadekit.engine.trainable import engine_settings

    assert engine_settings(load_profile("smoke").engine) == {}
    assert engine_settings(released_profile().engine) == {"engine": {"data": "released", "data_dir": str(RELEASED)}}
