"""A stage is built on one CPU thread whatever the process runs on, so its bytes match its key's shipped ones.

Measured (stop 45): the second world's IF-RL trained on two threads came out with other weights under the
shipped key, where every one-thread build agreed bit for bit.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cascadekit.stages import Stage, run_stage


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def _stage(kind: str, build) -> Stage:
    return Stage(kind, {"probe": kind}, build, recipe=1)


def _noting_threads(seen: list[int]):
    """A build that notes the torch thread count it runs on and writes a checkpoint."""
    def build(folder: Path) -> dict:
        seen.append(torch.get_num_threads())
        (folder / "weights.txt").write_text("w")
        return {}
    return build


def test_a_stage_builds_on_one_thread_and_gives_the_threads_back(tmp_path, monkeypatch, two_threads):
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path))
    seen: list[int] = []
    run_stage(_stage("threads-probe", _noting_threads(seen)))
    assert seen == [1]
    assert torch.get_num_threads() == 2


def test_a_failed_build_gives_the_threads_back(tmp_path, monkeypatch, two_threads):
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path))

    def build(folder: Path) -> dict:
        raise RuntimeError("the trainer fell over")

    with pytest.raises(RuntimeError, match="fell over"):
        run_stage(_stage("threads-failed", build))
    assert torch.get_num_threads() == 2


def test_a_gpu_machine_keeps_its_cpu_threads(tmp_path, monkeypatch, two_threads):
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    seen: list[int] = []
    run_stage(_stage("threads-gpu", _noting_threads(seen)))
    assert seen == [2]
