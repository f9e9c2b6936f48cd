"""Released weights through the runtime: a tiny Qwen3 checkpoint saved here, loaded back by the same code.

No test here reaches the network: the checkpoint is built in the test with
``save_pretrained`` (a Qwen3 config of a few thousand parameters and a byte-level
BPE tokenizer with a chat template of its own), and the ``small`` and ``full``
profiles are pointed at its folder.
"""
from __future__ import annotations

import socket
import types

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from cascadekit.engine import runtime
from cascadekit.training.chat_base import build_chat_tokenizer
from cascadekit.chat import MARKUP_TOKENS, render
from cascadekit.engine.models import start_model
from cascadekit.profiles import load_profile
from cascadekit.engine.runtime import CPU, DownloadNotAllowed, MissingExtra, load_chat_tokenizer, load_model, require
from cascadekit.engine.tokenizer import train_tokenizer
from cascadekit.engine.trainable import engine_settings, load_trainable

OWN_TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"


@pytest.fixture(autouse=True)
def no_network(monkeypatch, tmp_path):
    def refuse(*args, **kwargs):
        raise AssertionError(f"a test reached for the network: {args[:2]}")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(runtime.hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv(runtime.DOWNLOAD_ENV, raising=False)


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """A folder like a hub snapshot of a Qwen3 base: weights, config, its own tokenizer and template."""
    tokenizer = train_tokenizer(["a is 12 . b is a plus 3 . what is b ? 15"] * 20, 300)
    tokenizer.add_tokens(["<|im_start|>", "<|im_end|>"], special_tokens=True)  # a Qwen tokenizer's own markers
    tokenizer.chat_template = OWN_TEMPLATE
    config = Qwen3Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=128,
                         tie_word_embeddings=True)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config)
    folder = tmp_path_factory.mktemp("released") / "Qwen3-tiny-Base"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, model, tokenizer


def small(folder, **overrides):
    return load_profile("small", {"model.pretrained": str(folder), **overrides})


def test_the_small_and_full_profiles_name_released_weights():
    assert load_profile("small").model.pretrained == "Qwen/Qwen3-0.6B-Base"
    assert load_profile("full").model.pretrained == "Qwen/Qwen3-8B-Base"
    assert load_profile("small").engine.quantization == "4bit" and load_profile("full").engine.distributed == "zero3"


def test_a_saved_checkpoint_loads_back_as_the_start_model(released):
    folder, model, _ = released
    tokenizer = load_chat_tokenizer(folder)
    loaded = start_model(small(folder), tokenizer, placement=CPU)
    assert type(loaded).__name__ == "Qwen3ForCausalLM" and loaded.dtype == torch.float32
    grown = loaded.get_input_embeddings().num_embeddings
    assert grown == len(tokenizer) > model.config.vocab_size  # the kit's missing markers were added
    original = model.get_input_embeddings().weight
    assert torch.equal(loaded.get_input_embeddings().weight[: len(original)], original)
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(list(loaded.named_parameters())[1:],
                                                            list(model.named_parameters())[1:]))


def test_the_kit_template_on_the_released_tokenizer(released):
    folder, _, own = released
    tokenizer = load_chat_tokenizer(folder)
    assert tokenizer.chat_template != OWN_TEMPLATE
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") == own.convert_tokens_to_ids("<|im_end|>")  # ids kept
    assert all(len(tokenizer(t, add_special_tokens=False)["input_ids"]) == 1 for t in MARKUP_TOKENS)
    assert tokenizer.pad_token is not None
    for flag in ("/think", "/no_think"):
        messages = [{"role": "user", "content": f"what is b ? {flag}"}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert text == render(messages, add_generation_prompt=True)
        assert text.endswith("<think>\n\n</think>\n\n") == (flag == "/no_think")
    # the chat base's tokenizer stage at a released scale is this same tokenizer
    assert build_chat_tokenizer(small(folder)).get_vocab() == tokenizer.get_vocab()


def test_a_hub_name_is_not_downloaded_without_permission():
    with pytest.raises(DownloadNotAllowed, match=r"Qwen/Qwen3-0.6B-Base.*Hugging Face cache \(.*hub\)"):
        load_chat_tokenizer(load_profile("small").model.pretrained)


def test_trainable_paths_on_the_cpu(released):
    folder, _, _ = released
    engine = load_profile("small").engine
    with pytest.raises(ValueError, match="4-bit loading needs a CUDA GPU"):
        load_trainable(folder, CPU, engine, lora=True)
    with pytest.raises(ValueError, match="QLoRA"):
        load_trainable(folder, CPU, engine, lora=False)
    peft_model, note = load_trainable(folder, CPU, types.SimpleNamespace(quantization="none", unsloth=True), lora=True)
    assert note.path == "lora" and "Unsloth needs a CUDA GPU" in note.reason
    assert sum(p.numel() for p in peft_model.parameters() if p.requires_grad) > 0
    full, note = load_trainable(folder, CPU, load_profile("full").engine, lora=False)
    assert note.path == "full" and all(p.requires_grad for p in full.parameters())


def test_engine_settings_leave_the_cpu_stage_keys_alone():
    assert engine_settings(load_profile("toy").engine) == {} == engine_settings(load_profile("paper").engine)
    assert engine_settings(load_profile("full").engine) == {"engine": {"data": "released", "data_dir": ""}}
    assert engine_settings(load_profile("small").engine) == {"engine": {"quantization": "4bit", "unsloth": True,
                                                                        "data": "released", "data_dir": ""}}


def test_gpu_packages_missing_are_one_clear_error(released):
    with pytest.raises(MissingExtra, match=r"pip install 'cascadekit\[gpu\]'"):
        require("cascadekit_no_such_package", "gpu", "a test")
    with pytest.raises(ValueError, match="unknown quantization '8bit'"):
        load_model(released[0], quantization="8bit")
