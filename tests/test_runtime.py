"""The runtime: device and dtype, loading by folder or hub name (never the network here), LoRA, saving."""
from __future__ import annotations

import os
import socket
import types
from pathlib import Path

import pytest
import torch
from huggingface_hub import constants as hub_constants
from peft import PeftModel

from cascadekit.engine import runtime
from cascadekit.engine.models import build_model
from cascadekit.profiles import load_profile
from cascadekit.engine.runtime import (
    DownloadNotAllowed, Placement, base_model_source, checkpoint_folder, choose_device, download_allowed,
    load_model, load_tokenizer, save_checkpoint, with_lora,
)
from cascadekit.engine.tokenizer import train_tokenizer

SMOKE = load_profile("smoke")
FAKE = "cascadekit-tests/no-such-model"


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(["<question> a is 12 . </question> <solution> a = 12 . </solution> <answer> 12 </answer>"] * 20, 300)


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_model(SMOKE.model, tokenizer, seed=3)


@pytest.fixture(scope="module")
def checkpoint(model, tokenizer, tmp_path_factory):
    return save_checkpoint(model, tokenizer, tmp_path_factory.mktemp("ck") / "tiny")


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Every test here is offline (a name lookup or a connection fails it), downloading off unless turned on."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"a test reached for the network: {args[:2]}")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv(runtime.DOWNLOAD_ENV, raising=False)


def same_weights(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


# --- device and dtype -------------------------------------------------------------------------


def test_automatic_choice(monkeypatch):
    monkeypatch.setattr(runtime, "cuda_device", lambda: None)
    cpu = choose_device()
    assert (cpu.device, cpu.dtype) == ("cpu", "float32") and "no CUDA device" in cpu.reason
    assert cpu.trainer_arguments() == {"use_cpu": True, "bf16": False, "fp16": False}
    monkeypatch.setattr(runtime, "cuda_device", lambda: ("Big GPU", True))
    assert (choose_device().device, choose_device().dtype) == ("cuda", "bfloat16")
    assert choose_device().reason == "Big GPU supports bf16"
    monkeypatch.setattr(runtime, "cuda_device", lambda: ("Old GPU", False))
    old = choose_device()
    assert (old.device, old.dtype, old.reason) == ("cuda", "float16", "Old GPU lacks bf16")
    assert old.trainer_arguments() == {"use_cpu": False, "bf16": False, "fp16": True}
    assert old.weights_dtype == torch.float32  # fp16 trains with float32 master weights


def test_the_profile_wins(monkeypatch):
    monkeypatch.setattr(runtime, "cuda_device", lambda: ("Big GPU", True))
    toy = choose_device(load_profile("toy"))
    assert (toy.device, toy.dtype) == ("cpu", "float32") and "toy" in toy.reason  # a GPU is there, but not asked for
    paper = choose_device(load_profile("paper"))
    assert (paper.device, paper.dtype, paper.weights_dtype) == ("cuda", "bfloat16", torch.bfloat16)
    assert paper.trainer_arguments() == {"use_cpu": False, "bf16": True, "fp16": False}
    cpu_bf16 = choose_device(load_profile("smoke", {"dtype": "bfloat16"}))
    assert (cpu_bf16.device, cpu_bf16.dtype, cpu_bf16.weights_dtype) == ("cpu", "bfloat16", torch.float32)
    monkeypatch.setattr(runtime, "cuda_device", lambda: ("Old GPU", False))
    assert choose_device(load_profile("paper")).dtype == "float16"
    monkeypatch.setattr(runtime, "cuda_device", lambda: None)
    fallback = choose_device(load_profile("paper"))
    assert (fallback.device, fallback.dtype) == ("cpu", "float32") and "no CUDA device" in fallback.reason
    assert choose_device(types.SimpleNamespace(name="bare")) == choose_device()  # no device field: automatic


def test_placement_refuses_unknown_values():
    with pytest.raises(ValueError, match="device"):
        Placement("tpu", "float32", "")
    with pytest.raises(ValueError, match="dtype"):
        Placement("cpu", "int8", "")


# --- loading by folder -------------------------------------------------------------------------


def test_a_folder_loads_back_float32_on_the_cpu(model, tokenizer, checkpoint):
    assert (checkpoint / "config.json").is_file() and (checkpoint / "tokenizer.json").is_file()
    for source in (checkpoint, str(checkpoint)):
        loaded = load_model(source)
        assert loaded.dtype == torch.float32 and loaded.device.type == "cpu"
        assert type(loaded) is type(model) and same_weights(loaded, model)
    again = load_tokenizer(checkpoint)
    text = " a is 12 . </answer>"
    assert again(text)["input_ids"] == tokenizer(text)["input_ids"] and again.padding_side == "left"
    assert load_model(checkpoint, choose_device(load_profile("smoke", {"dtype": "bfloat16"}))).dtype == torch.float32


def test_a_bf16_checkpoint_follows_the_placement(model, tokenizer, tmp_path):
    half = build_model(SMOKE.model, tokenizer, seed=3).to(torch.bfloat16)
    folder = save_checkpoint(half, tokenizer, tmp_path / "half")
    assert load_model(folder).dtype == torch.float32  # CPU placement: float32, whatever was saved
    assert Placement("cuda", "bfloat16", "").weights_dtype == torch.bfloat16


def test_a_missing_folder_is_a_clear_error(tmp_path):
    for source in (tmp_path / "nope", str(tmp_path / "nope"), "./runs/nope", "runs/a/b"):
        with pytest.raises(FileNotFoundError, match="no checkpoint folder"):
            load_model(source)


# --- hub names ---------------------------------------------------------------------------------


def test_an_uncached_hub_name_is_refused_without_permission(tmp_path, monkeypatch):
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    for load in (load_model, load_tokenizer, checkpoint_folder):
        with pytest.raises(DownloadNotAllowed) as err:
            load(FAKE)
        message = str(err.value)
        assert FAKE in message and str(tmp_path / "hub") in message and runtime.DOWNLOAD_ENV in message
        assert isinstance(err.value, RuntimeError)
    # allowed, but HF_HUB_OFFLINE forbids it: still no network, one clear error
    monkeypatch.setenv(runtime.DOWNLOAD_ENV, "1")
    with pytest.raises(DownloadNotAllowed, match="HF_HUB_OFFLINE"):
        load_model(FAKE)


def test_a_cached_hub_name_loads_offline(model, tokenizer, tmp_path, monkeypatch):
    """A model already in the HF cache loads without permission to download (``local_files_only``)."""
    cache = tmp_path / "hub"
    repo = cache / "models--cascadekit-tests--tiny"
    commit = "0" * 40
    save_checkpoint(model, tokenizer, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(cache))
    loaded = load_model("cascadekit-tests/tiny")
    assert same_weights(loaded, model) and loaded.dtype == torch.float32
    assert len(load_tokenizer("cascadekit-tests/tiny")) == len(tokenizer)
    assert checkpoint_folder("cascadekit-tests/tiny") == repo / "snapshots" / commit


def test_download_permission(monkeypatch):
    assert not download_allowed(SMOKE)
    assert download_allowed(SMOKE, allow=True) and not download_allowed(None, allow=False)
    assert download_allowed(types.SimpleNamespace(engine=types.SimpleNamespace(allow_download=True)))
    assert download_allowed(load_profile("small", {"engine.allow_download": True}))
    monkeypatch.setenv(runtime.DOWNLOAD_ENV, "1")
    assert download_allowed(SMOKE) and not download_allowed(SMOKE, allow=False)


def test_base_model_source():
    assert base_model_source(SMOKE) is None and base_model_source(load_profile("toy")) is None
    assert base_model_source(load_profile("full")) == "Qwen/Qwen3-8B-Base"
    assert base_model_source(load_profile("smoke", {"model.pretrained": "/ck"})) == "/ck"


# --- LoRA and saving ---------------------------------------------------------------------------


def test_lora_saves_its_adapter_or_merged_weights(tokenizer, tmp_path):
    base = build_model(SMOKE.model, tokenizer, seed=4)
    peft_model = with_lora(base, rank=4, alpha=8)
    assert isinstance(peft_model, PeftModel)
    trainable = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    with torch.no_grad():  # a trained adapter: B is no longer zero
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    ids = torch.tensor([[5, 6, 7, 8]])
    expected = peft_model(ids).logits

    adapter = save_checkpoint(peft_model, tokenizer, tmp_path / "adapter")
    assert (adapter / "adapter_config.json").is_file() and not (adapter / "model.safetensors").exists()

    merged = save_checkpoint(peft_model, tokenizer, tmp_path / "merged", merge_lora=True)
    assert not (merged / "adapter_config.json").exists()
    plain = load_model(merged)
    assert not isinstance(plain, PeftModel) and not any("lora" in k for k in plain.state_dict())
    torch.testing.assert_close(plain(ids).logits, expected, rtol=1e-4, atol=1e-4)
    assert isinstance(peft_model, PeftModel) and any("lora_A" in n for n, _ in peft_model.named_parameters())


def test_save_replaces_whole_and_leaves_nothing_behind(model, tokenizer, tmp_path):
    dest = tmp_path / "ck"
    dest.mkdir()
    (dest / "stale.txt").write_text("old")
    save_checkpoint(model, tokenizer, dest, files={"log.json": "[1]", "raw.bin": b"\x00"})
    assert not (dest / "stale.txt").exists() and (dest / "log.json").read_text() == "[1]"
    assert (dest / "raw.bin").read_bytes() == b"\x00"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]

    class Broken(torch.nn.Module):
        def save_pretrained(self, folder):
            (Path(folder) / "model.safetensors").write_bytes(b"half")
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(Broken(), tokenizer, dest)
    assert (dest / "log.json").is_file() and sorted(p.name for p in tmp_path.iterdir()) == ["ck"]
    with pytest.raises(ValueError, match="plain file name"):
        save_checkpoint(model, None, tmp_path / "other", files={"../escape": "x"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]
    assert os.stat(dest).st_mode & 0o755 == 0o755


def test_an_allowed_download_says_what_and_where(model, tokenizer, tmp_path, monkeypatch, capsys):
    """The download itself is faked: the runtime asks the hub client for the files, with one line to the reader."""
    from huggingface_hub.errors import LocalEntryNotFoundError

    fetched = save_checkpoint(model, tokenizer, tmp_path / "fetched")
    calls = []

    def fake_snapshot(name, allow_patterns, local_files_only):
        calls.append(local_files_only)
        if local_files_only:
            raise LocalEntryNotFoundError("not cached")
        return str(fetched)

    monkeypatch.setattr(runtime, "snapshot_download", fake_snapshot)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(DownloadNotAllowed):
        load_model(FAKE)
    assert same_weights(load_model(FAKE, allow_download=True), model) and calls == [True, True, False]
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("cascadekit:")]
    assert len(lines) == 1 and FAKE in lines[0] and str(tmp_path / "hub") in lines[0] and "downloading" in lines[0]
    monkeypatch.setenv(runtime.DOWNLOAD_ENV, "1")
    assert len(load_tokenizer(FAKE)) == len(tokenizer)
