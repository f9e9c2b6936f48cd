"""Which process this is in a multi-process launch, and the few collectives the kit's stages need.

Under ``torchrun`` (or ``accelerate launch``, or the Slurm script of
:mod:`cascadekit.launch`) every process runs the same notebook code and so
calls the same stages. A stage must then be decided once, trained by all and
written once (see :func:`cascadekit.artifacts.get_or_build`). These helpers are
what that needs: the process's global rank, whether it is the main process (the
only writer), a barrier, and a broadcast of a small picklable object from the
main process.

A launch is recognised by its environment (``WORLD_SIZE`` above 1, as torchrun
and accelerate set it). The first helper called in such a launch joins the
process group (gloo on the CPU; NCCL for CUDA tensors and gloo for CPU ones
when there is a GPU), which the Trainer's accelerate state later finds and
reuses: the stage's cache decision happens before any Trainer exists, so the
group cannot wait for one. In a single process every helper is a no-op
(rank 0, the main process, the object back unchanged), so nothing changes there.
"""
from __future__ import annotations

import os
from typing import Any, TypeVar

T = TypeVar("T")


def launched_world_size() -> int:
    """How many processes the launcher started (``WORLD_SIZE``; 1 outside a launch)."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        raise ValueError(f"WORLD_SIZE={os.environ['WORLD_SIZE']!r} is not a whole number") from None


def _group() -> Any | None:
    """``torch.distributed`` when this process is in a group of more than one (joining it first), else None.

    Outside a launch it returns before importing torch, so the cache (which asks
    this for every stage) costs a command that never trains no torch import.
    """
    if launched_world_size() == 1:
        return None
    import torch  # a launch trains: torch is needed anyway
    import torch.distributed as dist

    if not dist.is_available():
        return None
    if not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            dist.init_process_group(backend="cpu:gloo,cuda:nccl")
        else:
            dist.init_process_group(backend="gloo")
    return dist if dist.get_world_size() > 1 else None


def world_size() -> int:
    """The number of processes training together (1 in a single process)."""
    return dist.get_world_size() if (dist := _group()) else 1


def rank() -> int:
    """This process's global rank (0 in a single process)."""
    return dist.get_rank() if (dist := _group()) else 0


def is_main() -> bool:
    """Whether this is the main process (global rank 0): the one that decides and writes."""
    return rank() == 0


def barrier() -> None:
    """Wait until every process gets here (nothing in a single process)."""
    if dist := _group():
        dist.barrier()


def broadcast(value: T) -> T:
    """The main process's ``value`` on every process (a small picklable object; itself in a single process)."""
    if not (dist := _group()):
        return value
    import torch

    box = [value if is_main() else None]
    dist.broadcast_object_list(box, src=0, device=torch.device("cpu"))
    return box[0]
