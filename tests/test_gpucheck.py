"""The GPU check's no-GPU mode (what CI runs) and its FLOP accounting."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from cascadekit.launch import gpucheck_workers as workers
from cascadekit.launch import gpucheck
from cascadekit.launch.gpucheck import (
    NAMES, Row, check_in_process, check_sft_stage, datasheet_peak, mfu_text, needs_gpus, qwen3_0_6b_config, train_flops_per_token,
    worker_command,
)


def test_without_a_gpu_every_row_is_skipped_and_the_run_passes():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "cascadekit", "gpucheck"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split("  ")[0] for line in lines[:-1]] == list(NAMES)
    assert all("skipped (no CUDA device)" in line for line in lines[:-1]) and lines[-1].startswith("total")


def test_flops_count_every_matmul_weight():
    config = Qwen3Config(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, tie_word_embeddings=True)
    model = Qwen3ForCausalLM(config)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert train_flops_per_token(config, 0) == 6 * linear
    assert train_flops_per_token(config, 10) - train_flops_per_token(config, 0) == 12 * 2 * 10 * 4 * 8


def test_the_checked_shape_is_qwen3_0_6b():
    config = qwen3_0_6b_config()
    assert (config.num_hidden_layers, config.hidden_size, config.head_dim, config.vocab_size) == (28, 1024, 128, 151936)
    # about 0.44B matmul weights besides the embedding, as published (0.6B with it)
    assert 0.4e9 < (train_flops_per_token(config, 0) / 6 - 1024 * 151936) < 0.5e9


def test_rows_read_as_a_table():
    assert str(Row("LoRA step", "ok", "12 tokens/s")) == "LoRA step              ok         12 tokens/s"
    assert str(Row("vLLM generation", "skipped", "vllm not installed")).endswith("skipped (vllm not installed)")


def test_the_datasheet_peak_is_found_by_the_name_torch_reports():
    assert datasheet_peak("NVIDIA H100 80GB HBM3") == ("H100 SXM", 989.0)
    assert datasheet_peak("NVIDIA H100 PCIe") == ("H100 PCIe", 756.0)
    assert datasheet_peak("NVIDIA H200") == ("H200", 989.0)
    assert datasheet_peak("NVIDIA A100-SXM4-80GB") == ("A100", 312.0)
    assert datasheet_peak("NVIDIA GeForce RTX 4090") is None


def test_mfu_is_reported_against_the_datasheet_and_the_measured_peak():
    assert mfu_text(494.5, 700.0, "NVIDIA H200") == ("MFU 50% of the datasheet peak (H200, 989 TFLOP/s), "
                                                     "71% of the measured matmul peak")
    assert mfu_text(50.0, 100.0, "Some GPU") == "no datasheet peak for 'Some GPU', 50% of the measured matmul peak"
    assert mfu_text(50.0, None, "NVIDIA A100 80GB PCIe").endswith("no measured MFU: the matmul peak failed")


def test_the_worker_rows_run_in_processes_of_their_own(monkeypatch, tmp_path):
    two = worker_command("ddp", tmp_path, processes=2)
    assert two[1:4] == ["-m", "torch.distributed.run", "--standalone"] and "--nproc_per_node" in two
    assert two[-6:] == ["-m", "cascadekit", "gpucheck", "--worker", "ddp", str(tmp_path)]
    assert worker_command("zero3", tmp_path)[1:] == ["-m", "cascadekit", "gpucheck", "--worker", "zero3", str(tmp_path)]
    assert check_in_process([sys.executable, "-c", "print('noise'); print('3 ranks ok')"]) == "3 ranks ok"
    with pytest.raises(RuntimeError, match="exit 1: ValueError: no NCCL here"):
        check_in_process([sys.executable, "-c", "raise ValueError('no NCCL here')"])
    assert workers.main(["chess", str(tmp_path)]) == 2
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert needs_gpus(2) == "needs 2 GPUs, found 1" and needs_gpus(1) == ""


def test_a_worker_row_goes_through_the_one_entry_point(tmp_path):
    from cascadekit.cli import main

    assert main(["gpucheck", "--worker", "chess", str(tmp_path)]) == 2  # the worker's own usage error


def test_the_small_sft_row_runs_the_small_profiles_first_stage_through_the_kits_stages(monkeypatch, tmp_path):
    """Its code on a CPU: a tiny random Qwen3 in place of the 0.6B shape, full-precision LoRA in place of QLoRA."""
    tiny = Qwen3Config(vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
                       num_key_value_heads=1, head_dim=16, tie_word_embeddings=True, max_position_embeddings=1024)
    monkeypatch.setattr(gpucheck, "DEVICE", "cpu")
    monkeypatch.setattr(gpucheck, "qwen3_0_6b_config", lambda: tiny)
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path / "mine"))
    text = check_sft_stage(tmp_path / "model", tmp_path / "sft", {"engine.quantization": "none", "device": "cpu",
                                                                 "sft.stage1_tasks": 2})
    assert text.startswith("sft/") and "steps of" in text and "lora" in text.lower(), text
    (entry,) = (p for p in (tmp_path / "sft" / "cache" / "sft").iterdir() if not p.name.startswith("."))
    assert text.startswith(f"sft/{entry.name}:") and not (tmp_path / "mine").exists()  # the check's own cache
    assert os.environ["CASCADEKIT_CACHE"] == str(tmp_path / "mine")


def test_gpuchecks_engines_take_the_cards_dtype(monkeypatch):
    """Issue 59.3: on a T4 (no hardware bf16) gpucheck's loaders and vLLM row run fp16, as the kit's runs do."""
    from cascadekit.engine import runtime
    from cascadekit.launch import gpucheck

    monkeypatch.setattr(runtime, "cuda_device", lambda: ("Tesla T4", False))
    assert (gpucheck._placement().device, gpucheck._placement().dtype) == ("cuda", "float16")
    monkeypatch.setattr(runtime, "cuda_device", lambda: ("NVIDIA H100 80GB HBM3", True))
    assert gpucheck._placement().dtype == "bfloat16"
