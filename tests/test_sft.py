"""Multi-stage SFT: stage data, the chat tokenizer, assistant-only loss masks, one tiny
SFTTrainer stage, and the evaluation suites on a tiny model."""
from __future__ import annotations

import math

import pytest

from cascadekit.base_model import base_texts, build_chat_tokenizer
from cascadekit.chat import MARKUP_TOKENS, render
from cascadekit.domains import domains
from cascadekit.domains.suites import PAPER, evaluate, markdown_table, paper_vs_run, rows_to_dicts, suite_records
from cascadekit.models import build_model
from cascadekit.profiles import load_profile
from cascadekit.training.sft import seq_len, sft_config, sft_dataset, stage_ops, stage_records, train_stage

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
    assert max(stage_ops(PROFILE, 2)) > max(stage_ops(PROFILE, 1))


def test_base_text_has_no_chat_markup() -> None:
    texts = base_texts(PROFILE, 3)
    assert len(texts) == 3 * len(domains())
    assert not any(token in text for text in texts for token in MARKUP_TOKENS)


def test_chat_tokenizer_keeps_markers_whole(tokenizer) -> None:
    for token in MARKUP_TOKENS:
        assert len(tokenizer(token, add_special_tokens=False)["input_ids"]) == 1
    assert tokenizer.chat_template and "generation" in tokenizer.chat_template


def test_assistant_mask_covers_exactly_the_trained_turn(tokenizer) -> None:
    record = next(r for r in stage_records(PROFILE, 1) if r["think"])
    out = tokenizer.apply_chat_template(record["messages"], tokenize=True, return_dict=True,
                                        return_assistant_tokens_mask=True)
    ids, mask = out["input_ids"], out["assistant_masks"]
    trained = tokenizer.decode([i for i, m in zip(ids, mask) if m], skip_special_tokens=False)
    assert trained.startswith("<think>\n") and trained.endswith("<|im_end|>")
    assert record["messages"][-1]["content"] in trained
    assert record["messages"][0]["content"] not in trained  # the user turn (and its flag) is context
    assert tokenizer.decode(ids, skip_special_tokens=False) == render(record["messages"])


def test_sft_dataset_drops_records_that_do_not_fit(tokenizer) -> None:
    records = stage_records(PROFILE, 2)
    full, dropped = sft_dataset(records, tokenizer, 10_000)
    short, dropped_short = sft_dataset(records, tokenizer, 120)
    assert dropped == 0 and len(full) == len(records)
    assert dropped_short > 0 and len(short) + dropped_short == len(records)
    assert set(full.column_names) == {"messages", "tools"}


def test_sft_config_uses_assistant_only_loss(tmp_path) -> None:
    for stage in (1, 2):
        cfg = sft_config(PROFILE, stage, tmp_path, steps_hint=10)
        assert cfg.assistant_only_loss and not cfg.packing and cfg.use_cpu
        assert cfg.max_length == seq_len(PROFILE, stage)
    assert seq_len(PROFILE, 2) > seq_len(PROFILE, 1)



def test_sft_config_takes_the_device_from_the_runtime(tmp_path, monkeypatch) -> None:
    from cascadekit import runtime

    monkeypatch.setattr(runtime, "cuda_device", lambda: None)  # a GPU profile on a CPU machine: CPU, float32
    cfg = sft_config(load_profile("paper"), 1, tmp_path, steps_hint=10)
    assert cfg.use_cpu and not cfg.bf16 and not cfg.fp16


def test_one_sft_stage_trains(tokenizer, tmp_path) -> None:
    model = build_model(PROFILE.model, tokenizer, seed=0)
    info = train_stage(model, tokenizer, PROFILE, 1, tmp_path / "run")
    assert info["steps"] >= 1 and info["records"] + info["dropped_for_length"] == 16
    assert info["loss"] and all(math.isfinite(loss) for _, loss in info["loss"])


def test_evaluation_table_on_a_tiny_model(tokenizer) -> None:
    model = build_model(PROFILE.model, tokenizer, seed=0)
    records = suite_records(PROFILE)
    rows, samples = evaluate(model, tokenizer, records, PROFILE, "untrained")
    assert len(rows) == 2 * len(domains()) and len(samples) == len(records)
    for row in rows:
        assert 0 <= row.score <= 1 and 0 <= row.mode_following <= 1 and 0 <= row.mean_tokens <= 8
    table = markdown_table(rows)
    assert all(PAPER[name]["benchmark"] in table for name in domains())
    assert "SWE-bench Verified" in paper_vs_run(rows_to_dicts(rows), "untrained")
