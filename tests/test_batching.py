"""Issue 59.4: SFT's and the reward models' micro-batch and accumulation come from the card and the process count,
so the step's batch is the profile's (the paper's) and each micro-batch fits the card, by the kit's estimate.

No GPU here: the card's memory is faked (:func:`cascadekit.engine.batching.card_bytes`), CUDA through
:func:`cascadekit.engine.runtime.cuda_device`, the processes through ``WORLD_SIZE``.
"""
from __future__ import annotations

import pytest
import transformers.training_args as training_args

from cascadekit.engine import batching, runtime
from cascadekit.engine.batching import Split, row_bytes, split_step
from cascadekit.profiles import load_profile
from cascadekit.training import reward_model, sft

GIB = 2**30


@pytest.fixture
def card(monkeypatch):
    """A bf16 CUDA card of the GiB given to the returned function."""
    monkeypatch.setattr(training_args, "is_torch_bf16_gpu_available", lambda: True)
    monkeypatch.setattr(runtime, "cuda_device", lambda: ("Fake GPU", True))

    def of(gib: int) -> None:
        monkeypatch.setattr(batching, "card_bytes", lambda: gib * GIB)

    return of


def sft_split(profile, stage: int, tmp_path) -> tuple[int, int]:
    config = sft.sft_config(profile, stage, tmp_path, steps_hint=10)
    return config.per_device_train_batch_size, config.gradient_accumulation_steps


def test_small_on_one_card_keeps_the_step_and_fits_the_micro_batch(card, tmp_path):
    """Today's small put all 32 rows of 8K/16K tokens in one micro-batch; a 16 GB card holds one 8K row."""
    small = load_profile("small")
    card(16)
    assert sft_split(small, 1, tmp_path) == (1, 32)
    with pytest.warns(UserWarning, match="may not fit"):  # one 16K row is more than a 16 GB card leaves, by estimate
        assert sft_split(small, 2, tmp_path) == (1, 32)
    card(80)
    for stage in (1, 2):
        micro, accumulation = sft_split(small, stage, tmp_path)
        assert micro * accumulation == small.sft.batch_size and 1 < micro < small.sft.batch_size
        tokens = small.sft.stage1_seq_len if stage == 1 else small.sft.stage2_seq_len
        assert micro * row_bytes(small.model, small.tokenizer.vocab_size, tokens, lm_head=True) <= 0.9 * 80 * GIB
    rm = reward_model.reward_config(small, tmp_path)
    assert rm.per_device_train_batch_size * rm.gradient_accumulation_steps == small.reward_model.batch_size


def test_full_divides_the_step_over_its_64_processes(card, tmp_path, monkeypatch):
    """Today's full gave each of 64 processes 128 rows (8,192 a step); the step is 128 rows over all of them."""
    full = load_profile("full")
    card(80)
    monkeypatch.setenv("WORLD_SIZE", str(full.engine.training_processes))
    assert full.engine.training_processes == 64
    for stage in (1, 2):
        micro, accumulation = sft_split(full, stage, tmp_path)
        assert micro * accumulation * 64 == full.sft.batch_size
    assert sft_split(full, 2, tmp_path) == (1, 2)  # one 32K row a micro-batch
    rm = reward_model.reward_config(full, tmp_path)
    assert rm.per_device_train_batch_size * rm.gradient_accumulation_steps * 64 == full.reward_model.batch_size
    monkeypatch.setenv("WORLD_SIZE", "48")
    with pytest.raises(ValueError, match="do not split evenly over 48 training processes"):
        sft.sft_config(full, 1, tmp_path, steps_hint=10)


def test_the_cpu_split_is_the_one_the_shipped_keys_were_built_with(tmp_path):
    for name in ("smoke", "toy"):
        profile = load_profile(name)
        assert sft_split(profile, 1, tmp_path) == (profile.sft.batch_size, 1)
        rm = reward_model.reward_config(profile, tmp_path)
        assert (rm.per_device_train_batch_size, rm.gradient_accumulation_steps) == (profile.reward_model.batch_size, 1)


def test_the_launchs_accumulation_fixes_the_split():
    engine = load_profile("full", {"engine.accumulation": 2}).engine
    assert split_step(128, 32, engine, "sft.batch_size", row=GIB, state=0, card=80 * GIB) == Split(2, 2, 32)
    with pytest.raises(ValueError, match="do not split into engine.accumulation=2"):
        split_step(128, 128, engine, "sft.batch_size", row=GIB, state=0, card=80 * GIB)


def test_the_micro_batch_is_the_largest_divisor_that_fits():
    engine = load_profile("small").engine
    assert split_step(24, 1, engine, "x", row=10 * GIB, state=2 * GIB, card=80 * GIB) == Split(6, 4, 1)  # 7 fit
    assert split_step(24, 1, engine, "x", row=GIB, state=0, card=80 * GIB) == Split(24, 1, 1)
