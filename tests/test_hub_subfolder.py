"""Issue 59 item 7: a checkpoint in a subfolder of a hub repository (the Cascade-1 intermediate checkpoints are
``nvidia/Nemotron-Cascade-8B-Intermediate-ckpts/<stage>``) is named ``owner/repo/stage``, by the loaders and by
``evaluate-checkpoints``; a relative folder of that shape that is neither stays one clear error.

No network: the repository is laid out in a temporary Hugging Face cache, as a download leaves it.
"""
from __future__ import annotations

import pytest
from huggingface_hub import constants as hub_constants

from cascadekit.engine.models import build_model
from cascadekit.engine.runtime import (DownloadNotAllowed, checkpoint_folder, load_model, load_tokenizer,
                                       save_checkpoint)
from cascadekit.evaluation.checkpoints import check_sources
from cascadekit.profiles import load_profile
from cascadekit.training.chat_base import build_chat_tokenizer

SMOKE = load_profile("smoke")
COMMIT = "1" * 40


@pytest.fixture
def cached_stages(tmp_path, monkeypatch):
    """``cascadekit-tests/intermediate`` in a fresh HF cache, with checkpoints in its ``sft`` and ``math-rl`` folders."""
    tokenizer = build_chat_tokenizer(SMOKE)
    repo = tmp_path / "hub" / "models--cascadekit-tests--intermediate"
    for stage, seed in (("sft", 1), ("math-rl", 2)):
        save_checkpoint(build_model(SMOKE.model, tokenizer, seed=seed), tokenizer, repo / "snapshots" / COMMIT / stage)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return repo / "snapshots" / COMMIT


def test_a_hub_subfolder_is_a_checkpoint(cached_stages):
    assert checkpoint_folder("cascadekit-tests/intermediate/math-rl") == cached_stages / "math-rl"
    sft = load_model("cascadekit-tests/intermediate/sft")
    again = load_model(cached_stages / "sft")
    assert all((a == b).all() for a, b in zip(sft.state_dict().values(), again.state_dict().values()))
    assert len(load_tokenizer("cascadekit-tests/intermediate/sft")) == len(load_tokenizer(cached_stages / "sft"))
    assert check_sources([("SFT", "cascadekit-tests/intermediate/sft"),
                          ("Math RL", "cascadekit-tests/intermediate/math-rl")]) == [cached_stages / "sft",
                                                                                    cached_stages / "math-rl"]


def test_a_missing_subfolder_or_relative_folder_is_one_clear_error(cached_stages):
    for name in ("cascadekit-tests/intermediate/swe-rl", "runs/a/b"):
        with pytest.raises(FileNotFoundError, match="no checkpoint folder") as err:
            load_model(name)
        assert isinstance(err.value, DownloadNotAllowed)  # evaluate-checkpoints names the stage with it
    with pytest.raises(ValueError, match="^SWE RL: no checkpoint folder at cascadekit-tests/intermediate/swe-rl"):
        check_sources([("SWE RL", "cascadekit-tests/intermediate/swe-rl")])
