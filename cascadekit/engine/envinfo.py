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
from importlib import resources

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from cascadekit.sandbox import isolation

from cascadekit.engine import runtime

STACK = ("torch", "transformers", "trl", "peft", "datasets", "tokenizers", "accelerate", "papermill", "matplotlib")
GPU_STACK = ("vllm", "deepspeed", "bitsandbytes", "unsloth", "unsloth_zoo")
#: The GPU profiles' known-good sets (pip constraint files inside the package) and the extras each installs.
KNOWN_GOOD = {"small": ("constraints/small.txt", "gpu,unsloth"), "full": ("constraints/full.txt", "gpu")}


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


def installed_requirements(names: tuple[str, ...]) -> dict[str, list[str]]:
    """Each installed distribution's own ``Requires-Dist`` lines (its supported windows), by name."""
    out = {}
    for name in names:
        try:
            out[name] = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
    return out


def _applies(requirement: Requirement) -> bool:
    """Whether a requirement binds here: unconditional, or under the extra named after the package it requires
    (TRL's ``vllm<=0.31.0; extra == "vllm"`` binds wherever vllm is installed beside TRL)."""
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in ("", requirement.name))


def window_problems(versions: dict[str, str | None], requirements: dict[str, list[str]]) -> list[str]:
    """Where the installed set leaves a library's own supported window, one line a breach.

    ``requirements`` is each library's ``Requires-Dist`` (:func:`installed_requirements`):
    the windows are the libraries' own, read from what is installed, so a new release's
    window is checked without the kit being told of it.
    """
    installed = {canonicalize_name(k): v for k, v in versions.items() if v}
    out = []
    for library, lines in requirements.items():
        if canonicalize_name(library) not in installed:
            continue
        for line in lines:
            try:
                requirement = Requirement(line)
                have = installed.get(canonicalize_name(requirement.name))
                inside = have is None or requirement.specifier.contains(Version(have), prereleases=True)
            except (InvalidRequirement, InvalidVersion):
                continue
            if not inside and _applies(requirement):
                out.append(f"{library} {installed[canonicalize_name(library)]} supports {requirement.name}"
                           f"{requirement.specifier}, but {requirement.name} {have} is installed")
    return out


def known_good_sets() -> dict[str, dict[str, str]]:
    """The GPU profiles' known-good sets (:data:`KNOWN_GOOD`): package name to pinned version."""
    sets = {}
    for profile, (path, _) in KNOWN_GOOD.items():
        text = resources.files("cascadekit").joinpath(path).read_text()
        pins = (line.split("#", 1)[0].strip() for line in text.splitlines())
        sets[profile] = dict(pin.split("==", 1) for pin in pins if pin)
    return sets


def known_good_advice() -> str:
    """Which sets are known good and how to install one (every version in it inside every library's window)."""
    sets = known_good_sets()
    return "known-good GPU sets: " + "; ".join(
        f"{profile}: pip install -c cascadekit/{KNOWN_GOOD[profile][0]} -e '.[{KNOWN_GOOD[profile][1]}]' ("
        + ", ".join(f"{name} {version}" for name, version in pins.items()) + ")"
        for profile, pins in sets.items())


def known_problems(versions: dict[str, str | None], device: str,
                   requirements: dict[str, list[str]] | None = None) -> list[str]:
    """Warnings for combinations known to break the kit.

    ``requirements`` are the libraries' own windows (default: the installed ones'
    metadata, :func:`installed_requirements`); a set that leaves one is named with the
    sets known to go together (:func:`known_good_advice`).
    """
    out = []
    if versions.get("vllm") and device == "cpu":
        out.append("vllm is installed but there is no GPU: evaluation uses the transformers backend")
    if versions.get("trl") and (problem := runtime.cpu_trl_problem(versions["trl"], device == "cuda")):
        out.append(problem)
    breaches = window_problems(versions, installed_requirements(STACK + GPU_STACK) if requirements is None
                               else requirements)
    out += breaches + ([known_good_advice()] if breaches else [])
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
