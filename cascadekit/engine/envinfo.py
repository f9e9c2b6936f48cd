"""What this machine offers the kit: stack versions, device, dtype and warnings.

``cascadekit env`` prints the long form; the first cell of every notebook shows
the short one, so a reader can tell at a glance what produced the outputs.
"""
from __future__ import annotations

import importlib.metadata as metadata
import os
import platform
import shutil
import warnings
from dataclasses import dataclass, field

from packaging.version import Version

from cascadekit.sandbox import isolation

from cascadekit.engine import runtime

STACK = ("torch", "transformers", "trl", "peft", "datasets", "tokenizers", "accelerate", "papermill", "matplotlib")
GPU_STACK = ("vllm", "deepspeed", "bitsandbytes", "unsloth")


def package_version(name: str) -> str | None:
    """Installed version of a distribution, or None. Never imports it."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@dataclass
class Environment:
    python: str
    versions: dict[str, str | None]
    device: str
    dtype: str
    why: str
    cpu_threads: int
    free_memory_gib: float | None
    free_disk_gib: float | None
    warnings: list[str] = field(default_factory=list)

    def short(self) -> str:
        stack = " ".join(f"{k}={v}" for k, v in self.versions.items() if k in {"torch", "transformers", "trl"})
        return f"python={self.python} {stack} device={self.device} dtype={self.dtype} threads={self.cpu_threads}"

    def long(self) -> str:
        lines = [f"python        {self.python} ({platform.platform()})"]
        lines += [f"{name:<13} {version or 'not installed'}" for name, version in self.versions.items()]
        lines += [
            f"device        {self.device} (dtype {self.dtype}): {self.why}",
            f"cpu threads   {self.cpu_threads}",
            f"free memory   {self.free_memory_gib if self.free_memory_gib is not None else '?'} GiB",
            f"free disk     {self.free_disk_gib if self.free_disk_gib is not None else '?'} GiB",
        ]
        lines += sandbox_lines()
        lines += [f"warning: {w}" for w in self.warnings] or ["no known problems"]
        return "\n".join(lines)


def sandbox_lines() -> list[str]:
    """How model-written code is contained here, and which guarantees this machine cannot give.

    Probing runs a tiny program in the sandbox, so only ``cascadekit env`` asks, not every notebook.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the lines below say the same
        iso = isolation()
    lines = [f"sandbox       {iso.describe()}"]
    lines += [f"  missing     {m}" for m in iso.missing()] or ["  missing     nothing"]
    return lines


def _free_memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        return None
    return None


def _existing_parent(path: str) -> str:
    """The path itself or its nearest existing ancestor (the cache may not exist yet)."""
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def choose_device() -> tuple[str, str, str]:
    """(device, dtype, why): CUDA with bf16 when available (fp16 when not), else CPU in fp32.

    The machine's automatic choice from :func:`cascadekit.engine.runtime.choose_device`, which also applies a profile's.
    """
    placement = runtime.choose_device()
    return placement.device, placement.dtype, placement.reason


def _at_least(version: str | None, floor: str) -> bool:
    return version is not None and Version(version) >= Version(floor)


def known_problems(versions: dict[str, str | None], device: str) -> list[str]:
    """Warnings for combinations known to break the kit."""
    out = []
    if versions.get("vllm") and device == "cpu":
        out.append("vllm is installed but there is no GPU: evaluation uses the transformers backend")
    if versions.get("trl") and (problem := runtime.cpu_trl_problem(versions["trl"], device == "cuda")):
        out.append(problem)
    if versions.get("unsloth") and _at_least(versions.get("trl"), "1.16"):
        out.append("unsloth 2026.10 caps trl at 1.15; its GRPO path needs trl<=1.15 and a GPU")
    if versions.get("vllm") and _at_least(versions.get("transformers"), "5.21"):
        out.append("vllm 0.33 needs transformers<5.21")
    if os.cpu_count() and os.cpu_count() < 2:
        out.append("a single CPU core: toy-scale chapters will take twice as long as listed")
    return out


def describe_environment() -> Environment:
    versions = {name: package_version(name) for name in STACK + GPU_STACK}
    device, dtype, why = choose_device()
    import torch

    disk = shutil.disk_usage(_existing_parent(os.environ.get("CASCADEKIT_CACHE", os.path.expanduser("~"))))
    return Environment(
        python=platform.python_version(),
        versions=versions,
        device=device,
        dtype=dtype,
        why=why,
        cpu_threads=torch.get_num_threads(),
        free_memory_gib=_free_memory_gib(),
        free_disk_gib=round(disk.free / 2**30, 1),
        warnings=known_problems(versions, device),
    )
