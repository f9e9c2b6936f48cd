"""The gpucheck rows that need a process of their own: a two-process step, and a ZeRO-3 save and reload.

``python -m cascadekit gpucheck --worker ddp WORK`` (under ``torchrun
--nproc_per_node 2``) and ``... --worker zero3 WORK`` (one process): the kit's one
entry point, which hands ``--worker`` here before it imports anything else. Each prints its
result as its last line of stdout, which :mod:`cascadekit.launch.gpucheck` makes
the row's detail; any error exits non-zero. A process of their own, because each
joins a process group (NCCL) and DeepSpeed patches model construction, neither
of which the other rows may inherit.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from cascadekit.engine.runtime import save_checkpoint
from cascadekit.launch.gpucheck import qwen3_0_6b_config

SEQ_LEN, BATCH = 512, 2


def _config() -> Any:
    config = qwen3_0_6b_config()
    config.vocab_size = 4096  # the step's and the save's subject is the layers; a small head keeps it quick
    return config


def _ids(vocab: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (BATCH, SEQ_LEN), generator=generator).cuda()


def two_process_step() -> str:
    """Two DDP ranks (NCCL), each on its own GPU and batch, three optimizer steps; the weights must stay equal."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from transformers import Qwen3ForCausalLM

    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    try:
        torch.manual_seed(0)
        model = DistributedDataParallel(Qwen3ForCausalLM(_config()).cuda().to(torch.bfloat16), device_ids=[local])
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        ids = _ids(model.module.config.vocab_size, seed=dist.get_rank())  # each rank its own batch
        started = time.perf_counter()
        for _ in range(3):
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        seconds = (time.perf_counter() - started) / 3
        norm = torch.stack([p.float().norm() for p in model.parameters()]).sum().reshape(1)
        norms = [torch.zeros_like(norm) for _ in range(dist.get_world_size())]
        dist.all_gather(norms, norm)
        if not all(torch.equal(norms[0], n) for n in norms):
            raise RuntimeError(f"the ranks' weights differ after the steps: {[n.item() for n in norms]}")
        return f"{dist.get_world_size()} ranks (NCCL), {seconds:.2f} s/step, the weights equal on every rank"
    finally:
        dist.destroy_process_group()


def zero3_save_and_reload(work: Path) -> str:
    """One ZeRO-3 step, the kit's save (gathered, main process only), a reload that matches the gathered weights."""
    import deepspeed
    from transformers import Qwen3ForCausalLM

    for name, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29533", "RANK": "0", "LOCAL_RANK": "0",
                        "WORLD_SIZE": "1"}.items():
        os.environ.setdefault(name, value)
    deepspeed.init_distributed(dist_backend="nccl")
    # torch's AdamW, not DeepSpeed's fused one, which it would first compile (minutes, and a CUDA toolkit)
    config = {"train_micro_batch_size_per_gpu": BATCH, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
              "zero_optimization": {"stage": 3}, "zero_allow_untested_optimizer": True}
    with deepspeed.zero.Init(config_dict_or_path=config):
        model = Qwen3ForCausalLM(_config())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    ids = _ids(model.config.vocab_size, seed=0)
    loss = engine(input_ids=ids, labels=ids).loss
    engine.backward(loss)
    engine.step()
    folder = save_checkpoint(engine.module, None, work / "zero3-saved")
    reloaded = Qwen3ForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).state_dict()
    with deepspeed.zero.GatheredParameters(list(engine.module.parameters())):
        trained = {k: v.detach().cpu() for k, v in engine.module.state_dict().items()}
    wrong = [k for k, v in reloaded.items() if k in trained and not torch.equal(v.cpu(), trained[k].to(v.dtype))]
    if wrong or not reloaded:
        raise RuntimeError(f"the reloaded checkpoint differs from the gathered weights in {len(wrong)} tensors, "
                           f"e.g. {wrong[:2]}")
    size = sum(f.stat().st_size for f in folder.iterdir()) / 2**30
    return f"1 step, saved gathered ({size:.2f} GiB) and reloaded: {len(reloaded)} tensors equal to the trained ones"


def main(argv: list[str]) -> int:
    """``ddp WORK`` or ``zero3 WORK``: the result on the last line of stdout (rank 0's for ``ddp``)."""
    if len(argv) != 2 or argv[0] not in ("ddp", "zero3"):
        print("usage: python -m cascadekit gpucheck --worker {ddp,zero3} WORK", file=sys.stderr)
        return 2
    what, work = argv[0], Path(argv[1])
    result = two_process_step() if what == "ddp" else zero3_save_and_reload(work)
    if int(os.environ.get("RANK", "0")) == 0:
        print(result, flush=True)
    return 0
