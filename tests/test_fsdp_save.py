"""Issue 34 case 2, FSDP's half: ``save_checkpoint`` of an FSDP 2 sharded model under two ranks (gloo, CPU).

Each rank holds half of every weight (``fully_shard``, what accelerate's FSDP gives the Trainer). Before
the fix the main process called ``save_pretrained`` on the sharded model alone, which gathers each DTensor
as it writes, a collective the other rank (waiting at the barrier) never joined: the launch hung. Now every
rank gathers one full state dict onto the main process, which alone writes it; the checkpoint reloads as
the whole model. Run as a script, this file is the worker each rank runs.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

LAUNCH_TIMEOUT_S = 120  # the two ranks save in seconds; a hang never finishes


def tiny_model() -> Qwen3ForCausalLM:
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, tie_word_embeddings=True)
    return Qwen3ForCausalLM(config)


def test_two_fsdp_ranks_save_one_whole_checkpoint(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1", "--nproc_per_node", "2",
               __file__, str(tmp_path / "ckpt")]
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as launch:
        try:
            out, _ = launch.communicate(timeout=LAUNCH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for process in [*psutil.Process(launch.pid).children(recursive=True), psutil.Process(launch.pid)]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.kill()
            out, _ = launch.communicate()
            pytest.fail(f"two FSDP ranks did not save in {LAUNCH_TIMEOUT_S} s (a hang?):\n{out[-3000:]}")
    assert launch.returncode == 0, out[-3000:]
    assert sorted(out.count(f"rank {r} sharded") for r in (0, 1)) == [1, 1], out[-3000:]  # both held shards
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".ckpt")) == []  # no half-written folder
    reloaded = Qwen3ForCausalLM.from_pretrained(tmp_path / "ckpt").state_dict()
    whole = tiny_model().state_dict()
    assert reloaded.keys() == whole.keys() and all(torch.equal(reloaded[k], whole[k]) for k in whole)


def _worker(dest: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    from cascadekit import distributed
    from cascadekit.engine.runtime import save_checkpoint

    mesh = init_device_mesh("cpu", (distributed.world_size(),))  # joins the gloo group first
    model = tiny_model()
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    weight = model.model.embed_tokens.weight
    if isinstance(weight, DTensor) and weight.to_local().shape[0] < weight.shape[0]:
        print(f"rank {distributed.rank()} sharded", flush=True)
    save_checkpoint(model, None, dest)


if __name__ == "__main__":
    _worker(sys.argv[1])
