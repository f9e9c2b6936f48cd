"""The GPU check's no-GPU mode (what CI runs) and its FLOP accounting."""
from __future__ import annotations

import os
import subprocess
import sys

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from cascadekit.launch.gpucheck import NAMES, Row, qwen3_0_6b_config, train_flops_per_token


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
