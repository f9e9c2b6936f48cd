import json

import pytest
import torch
from hypothesis import given, strategies as st
from transformers import AutoModelForCausalLM, TrainerCallback

from cascadekit import cli
from cascadekit.profiles import load_profile
from cascadekit.engine.tokenizer import train_tokenizer
from cascadekit.training.pretrain import (
    cached_pretrained,
    midtrain,
    mixture_texts,
    pack,
    pretrain,
    read_loss_log,
    train_lm,
    training_arguments,
    training_blocks,
)
from cascadekit.engine.models import build_model

SMOKE = load_profile("smoke", {"pretrain.tokens": 8 * 256 * 8, "pretrain.save_steps": 2})


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(mixture_texts(SMOKE, {"in_distribution": 1.0}, 100, "pretrain"), 400)


@given(st.lists(st.lists(st.integers(2, 50), max_size=20), max_size=30), st.integers(1, 16))
def test_pack_keeps_every_token_in_order_with_eos_after_each_document(docs, seq_len):
    blocks = pack(docs, seq_len, eos_id=0)
    stream = [t for doc in docs for t in (*doc, 0)]
    assert blocks.shape == (len(stream) // seq_len, seq_len)
    assert blocks.flatten().tolist() == stream[: blocks.numel()]


def test_mixture_draws_ops_from_the_named_ranges():
    texts = mixture_texts(SMOKE, {"in_distribution": 0.2, "edge": 0.8}, 20, "midtrain")
    assert len(texts) == 20 and all(t.startswith("<question>") for t in texts)


def test_training_blocks_fill_the_budget_once(tokenizer):
    blocks = training_blocks(SMOKE, tokenizer, {"in_distribution": 1.0}, "pretrain", 20_000)
    assert blocks.shape[1] == SMOKE.pretrain.seq_len
    assert 0.8 * 20_000 <= blocks.numel() <= 20_000
    assert (blocks == tokenizer.eos_token_id).any()


def test_training_arguments_follow_the_profile(tmp_path):
    args = training_arguments(SMOKE.pretrain, tmp_path, 100, SMOKE)
    assert args.lr_scheduler_type == "cosine_with_min_lr"
    assert args.lr_scheduler_kwargs == {"min_lr_rate": SMOKE.pretrain.min_lr_ratio}
    assert args.weight_decay == 0.1 and args.max_grad_norm == 1.0
    assert args.use_cpu and not args.bf16
    assert args.get_warmup_steps(100) == 5


def test_pretraining_lowers_the_loss_and_logs_tokens(tokenizer, tmp_path):
    log = pretrain(SMOKE, tokenizer, tmp_path / "out", tmp_path / "run")
    steps, tokens, losses = zip(*log)
    assert steps[-1] == 8 and tokens[-1] == 8 * 8 * 256
    assert losses[-1] < losses[0]
    assert read_loss_log(tmp_path / "out") == list(log)
    assert (tmp_path / "out" / "model.safetensors").exists() and not (tmp_path / "run").exists()


class _Interrupt(TrainerCallback):
    def __init__(self, at: int):
        self.at = at

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.at:
            raise KeyboardInterrupt


class _Steps(TrainerCallback):
    def __init__(self):
        self.seen = []

    def on_step_end(self, args, state, control, **kwargs):
        self.seen.append(state.global_step)


def test_an_interrupted_run_resumes_from_its_last_checkpoint(tokenizer, tmp_path):
    blocks = training_blocks(SMOKE, tokenizer, {"in_distribution": 1.0}, "pretrain", SMOKE.pretrain.tokens)
    with pytest.raises(KeyboardInterrupt):
        train_lm(build_model(SMOKE.model, tokenizer), blocks, SMOKE, tmp_path, callbacks=[_Interrupt(5)])
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    steps = _Steps()
    log = train_lm(build_model(SMOKE.model, tokenizer), blocks, SMOKE, tmp_path, callbacks=[steps])
    assert steps.seen == [5, 6, 7, 8]
    assert [row[0] for row in log] == list(range(1, 9))  # the log before the interruption is kept


class _LearningRates(TrainerCallback):
    def __init__(self):
        self.seen: list[float] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "learning_rate" in logs:
            self.seen.append(logs["learning_rate"])


def test_midtraining_continues_from_a_checkpoint_at_the_base_final_learning_rate(tokenizer, tmp_path):
    pretrain(SMOKE, tokenizer, tmp_path / "pre", tmp_path / "run")
    before = AutoModelForCausalLM.from_pretrained(tmp_path / "pre")
    rates = _LearningRates()
    log = midtrain(SMOKE, tmp_path / "pre", tmp_path / "mid", tmp_path / "run2", tokens=4 * 8 * 256,
                   callbacks=[rates])
    after = AutoModelForCausalLM.from_pretrained(tmp_path / "mid")
    assert [row[0] for row in log] == [1, 2, 3, 4]
    final_pretrain_rate = SMOKE.pretrain.lr * SMOKE.pretrain.min_lr_ratio
    assert rates.seen and max(rates.seen) == pytest.approx(final_pretrain_rate)
    assert not torch.equal(before.lm_head.weight, after.lm_head.weight)
    assert json.loads((tmp_path / "mid" / "loss_log.json").read_text()) == [list(r) for r in log]


def test_the_pretrained_checkpoint_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path))
    first = cached_pretrained(SMOKE)
    mtime = (first / "model.safetensors").stat().st_mtime_ns
    assert cached_pretrained(SMOKE) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == mtime
    assert (first / "manifest.json").exists()


def test_training_benchmark_runs_at_smoke_scale(capsys):
    assert cli.main(["bench", "train", "--scale", "smoke", "--steps", "4", "--warmup", "1", "--rounds", "1"]) == 0
    assert "ratio Trainer/plain" in capsys.readouterr().out


def test_a_checkpoint_cut_mid_save_is_skipped_and_training_resumes_from_the_previous_one(tokenizer, tmp_path):
    """Weights but no trainer_state.json (a kill mid-save) used to crash every later resume."""
    short = load_profile("smoke", {"pretrain.tokens": 4 * 8 * 256, "pretrain.save_steps": 1})
    blocks = training_blocks(short, tokenizer, {"in_distribution": 1.0}, "pretrain", short.pretrain.tokens)
    with pytest.raises(KeyboardInterrupt):
        train_lm(build_model(short.model, tokenizer), blocks, short, tmp_path, callbacks=[_Interrupt(3)])
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]
    (tmp_path / "checkpoint-3" / "trainer_state.json").unlink()
    steps = _Steps()
    with pytest.warns(UserWarning, match="checkpoint-3: no trainer_state.json"):
        log = train_lm(build_model(short.model, tokenizer), blocks, short, tmp_path, callbacks=[steps])
    assert steps.seen == [3, 4]
    assert [row[0] for row in log] == [1, 2, 3, 4]
