"""A trained classifier's fresh head (the SWE judge's, a reward model's) is drawn from its stage's seed.

The HF Trainer seeds itself when it is made, after the model it trains is loaded. The SWE judge's head was
drawn at load time from the process's random state, which depends on whether its policy samples were just
sampled or read from the cache: one key, two judges (held-out AUC 0.749 and 0.739 on one seed).
"""
from __future__ import annotations

import pytest
import torch

from cascadekit.engine.models import build_model
from cascadekit.engine.runtime import CPU, save_checkpoint
from cascadekit.engine.trainable import load_trainable_classifier
from cascadekit.profiles import load_profile
from cascadekit.training.chat_base import build_chat_tokenizer

PROFILE = load_profile("smoke", {"model.layers": 2})


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    tokenizer = build_chat_tokenizer(PROFILE)
    return save_checkpoint(build_model(PROFILE.model, tokenizer), tokenizer, tmp_path_factory.mktemp("ck") / "sft")


def head(checkpoint, process_seed: int, seed: int | None) -> torch.Tensor:
    torch.manual_seed(process_seed)  # what ran before in the process
    model, _ = load_trainable_classifier(checkpoint, CPU, PROFILE.engine, layers=1, labels=2, seed=seed)
    return model.score.weight.detach().clone()


def test_a_seeded_head_is_the_same_whatever_the_process_drew_before(checkpoint) -> None:
    assert torch.equal(head(checkpoint, 1, seed=5), head(checkpoint, 2, seed=5))
    assert not torch.equal(head(checkpoint, 1, seed=5), head(checkpoint, 1, seed=6))
    assert not torch.equal(head(checkpoint, 1, seed=None), head(checkpoint, 2, seed=None))  # the old behaviour


def test_a_seeded_draw_leaves_the_process_random_state_as_it_was(checkpoint) -> None:
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    load_trainable_classifier(checkpoint, CPU, PROFILE.engine, layers=1, labels=2, seed=5)
    assert torch.equal(torch.rand(3), expected)
