"""What the Part II builders build is pinned, so a change of behaviour without a ``RECIPE`` bump is caught.

A stage's key holds its upstream's content and its builder module's ``RECIPE``, not the builder's code
(:mod:`cascadekit.stages`): a code change that trains other weights under the same inputs would hand every
cached and shipped entry to the new code as if it were its own. So the smoke-scale chain of the shipped stages'
shapes (chat tokenizer -> chat base -> SFT stages 1 and 2 -> an IF-RL GRPO stage) is rebuilt here from scratch
and each entry's content compared with ``tests/fixtures/recipe_digests.json``:

- every file but the records (:data:`cascadekit.stages.RECORDS`) and the weights: its sha256, exactly (a JSON
  file without the ``transformers_version`` stamp, which follows the installed library, not the recipe);
- each weight tensor: its shape, dtype, sum, sum of squares and four values, to :data:`TOLERANCE` (the thread
  count and the CPU's kernels move the last bits of a float reduction; a behaviour change moves far more).

A failure names the stage: bump the ``RECIPE`` of the module that builds it if the change is deliberate (its
cached and shipped entries are then rebuilt, never reused), and regenerate the pins with::

    CASCADEKIT_WRITE_DIGESTS=1 python -m pytest -q tests/test_recipe_digests.py
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file

from cascadekit.artifacts import read_manifest
from cascadekit.chapters import resolve
from cascadekit.chapters.cascade import if_rl_stage
from cascadekit.rewards import verifier_reward
from cascadekit.stages import RECORDS, StageOutput
from cascadekit.training.chat_base import chat_base, chat_tokenizer
from cascadekit.training.sft import sft_stages

FIXTURE = Path(__file__).parent / "fixtures" / "recipe_digests.json"
#: How far a pinned float may move: relative to the larger of 1 and its size.
TOLERANCE = 1e-4


def _file_digest(path: Path) -> str:
    if path.suffix == ".json":
        data = json.loads(path.read_text())
        if isinstance(data, dict):
            data.pop("transformers_version", None)
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tensor_summary(tensor: Any) -> dict[str, Any]:
    flat = tensor.detach().double().flatten()
    picks = sorted({0, flat.numel() // 3, 2 * flat.numel() // 3, flat.numel() - 1})
    return {"shape": list(tensor.shape), "dtype": str(tensor.dtype), "sum": flat.sum().item(),
            "sum_sq": (flat * flat).sum().item(), "values": [flat[i].item() for i in picks]}


def content_summary(output: StageOutput) -> dict[str, Any]:
    """An entry's content as this test pins it: files by digest, weight tensors by summary."""
    folder = Path(output.checkpoint)
    names = sorted(n for n in read_manifest(folder) if n not in RECORDS)
    weights = [n for n in names if n.endswith(".safetensors")]
    return {"files": {n: _file_digest(folder / n) for n in names if n not in weights},
            "tensors": {f"{n}:{t}": _tensor_summary(v) for n in weights for t, v in sorted(load_file(folder / n).items())}}


def _differences(pinned: Any, now: Any, where: str) -> list[str]:
    if isinstance(pinned, dict) and isinstance(now, dict):
        return [d for k in sorted(set(pinned) | set(now), key=str)
                for d in _differences(pinned.get(k), now.get(k), f"{where}.{k}")]
    if isinstance(pinned, list) and isinstance(now, list) and len(pinned) == len(now):
        return [d for i, (a, b) in enumerate(zip(pinned, now)) for d in _differences(a, b, f"{where}[{i}]")]
    if isinstance(pinned, float) and isinstance(now, float):
        return [] if abs(pinned - now) <= TOLERANCE * max(1.0, abs(pinned)) else [f"{where}: {pinned!r} -> {now!r}"]
    return [] if pinned == now else [f"{where}: {pinned!r} -> {now!r}"]


def built_chain() -> dict[str, StageOutput]:
    """The smoke chain of the shipped stages' shapes, built in the current artifact cache."""
    profile = resolve("14", "smoke").profile
    first, second = sft_stages(chat_base(profile), profile)
    return {"chat-tokenizer": chat_tokenizer(profile), "chat-base": chat_base(profile), "sft stage 1": first,
            "sft stage 2": second,
            "grpo (IF-RL)": if_rl_stage(second, profile, False, verifier_reward, Path(os.environ["CASCADEKIT_CACHE"]) / "w")}


def test_a_smoke_rebuild_of_the_shipped_stages_shapes_matches_its_pinned_content(tmp_path, monkeypatch):
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path / "cache"))
    now = {name: content_summary(output) for name, output in built_chain().items()}
    if os.environ.get("CASCADEKIT_WRITE_DIGESTS") == "1":
        FIXTURE.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
    pinned = json.loads(FIXTURE.read_text())
    assert set(now) == set(pinned)
    changed = {name: _differences(pinned[name], now[name], name) for name in pinned}
    changed = {name: lines for name, lines in changed.items() if lines}
    assert not changed, (
        "what these stages build changed under the same keys; if deliberate, bump the RECIPE of the module that "
        "builds each and regenerate with CASCADEKIT_WRITE_DIGESTS=1:\n" +
        "\n".join(f"  {line}" for lines in changed.values() for line in lines[:5]))


def test_the_comparison_tolerates_the_last_bits_and_nothing_more():
    pinned = {"tensors": {"w": {"sum": 12.5, "values": [0.25, -1e-3]}}, "files": {"config.json": "ab"}}
    assert not _differences(pinned, {"tensors": {"w": {"sum": 12.5 + 1e-6, "values": [0.25 + 1e-7, -1e-3]}},
                                     "files": {"config.json": "ab"}}, "x")
    assert _differences(pinned, {"tensors": {"w": {"sum": 12.5 * (1 + 1e-3), "values": [0.25, -1e-3]}},
                                 "files": {"config.json": "ab"}}, "x") == ["x.tensors.w.sum: 12.5 -> 12.5125"]
    assert _differences(pinned, {**pinned, "files": {"config.json": "cd"}}, "x") == ["x.files.config.json: 'ab' -> 'cd'"]
