"""Issue 34 case 10: the ``[unsloth]`` extra's stack (TRL 1.15, transformers 5.17) on a CPU.

TRL 1.15's SFT and GRPO compute every log-probability with a fused LM head, a Triton kernel; without Triton
it is None and the first step dies with ``'NoneType' object has no attribute 'apply'`` (measured: SFT and
GRPO of the smoke profile with trl 1.15.0, transformers 5.17.0 and huggingface-hub 1.33 first on the path).
The kit refuses that stack on a CPU in one line, before any model loads, and ``cascadekit env`` warns.
The fast tests stand TRL's version in; the slow one installs the real stack into a folder of its own.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import trl
from transformers import PreTrainedModel

from cascadekit.artifacts import write_manifest
from cascadekit.engine.envinfo import known_problems
from cascadekit.engine.models import build_model
from cascadekit.engine.runtime import UnsupportedStack, cpu_trl_problem, save_checkpoint
from cascadekit.evaluation.stage_table import suite_records
from cascadekit.profiles import load_profile
from cascadekit.stages import StageOutput
from cascadekit.training.chat_base import build_chat_tokenizer
from cascadekit.training.pipeline import chat_grpo
from cascadekit.training.sft import sft_stage

PROFILE = load_profile("smoke")
#: The ``[unsloth]`` extra's TRL and transformers (README, "GPU extras"), and the hub client transformers 5.17 needs.
STACK = ["trl==1.15.0", "transformers==5.17.0", "huggingface-hub>=1.5,<2"]


def saved_start(folder: Path) -> StageOutput:
    """A random smoke model saved as a cache entry (a stage's start: its content goes into the stage's key)."""
    tokenizer = build_chat_tokenizer(PROFILE)
    write_manifest(save_checkpoint(build_model(PROFILE.model, tokenizer), tokenizer, folder), "sft", "start")
    return StageOutput(folder, "start")


@pytest.fixture
def start(tmp_path, monkeypatch) -> StageOutput:
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path / "cache"))
    return saved_start(tmp_path / "sft")


@pytest.mark.parametrize("trainer", ["SFT", "GRPO"])
def test_trl_1_15_is_refused_on_a_cpu_before_a_model_loads(trainer, start, tmp_path, monkeypatch):
    loaded = []
    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(lambda cls, *a, **k: loaded.append(a)))
    monkeypatch.setattr(trl, "__version__", "1.15.0")
    build = {"SFT": lambda: sft_stage(start, PROFILE, 1),
             "GRPO": lambda: chat_grpo(start, suite_records(PROFILE, ["math"])[:2], PROFILE, tmp_path / "work")}
    with pytest.raises(UnsupportedStack) as refused:
        build[trainer]()
    message = str(refused.value)
    assert message.startswith(f"{trainer}: trl 1.15.0 (the [unsloth] extra's stack) cannot train SFT or GRPO on a CPU")
    assert "pip install 'trl>=1.16,<1.17'" in message and "\n" not in message
    assert loaded == []


def test_any_trl_trains_on_a_gpu_and_1_16_on_a_cpu():
    assert cpu_trl_problem("1.15.0", on_gpu=True) is None
    assert cpu_trl_problem("1.16.0", on_gpu=False) is None and cpu_trl_problem("1.15.2", on_gpu=False)


def test_env_warns_of_the_unsloth_stack_on_a_cpu():
    stack = {"trl": "1.15.0", "transformers": "5.17.0"}
    assert any("trl 1.15.0 (the [unsloth] extra's stack) cannot train" in w for w in known_problems(stack, "cpu"))
    assert not any("cannot train" in w for w in known_problems(stack, "cuda"))
    assert not any("cannot train" in w for w in known_problems({**stack, "trl": "1.16.0"}, "cpu"))


@pytest.mark.slow
def test_the_real_unsloth_stack_is_refused_on_a_cpu(tmp_path):
    """The real TRL 1.15 / transformers 5.17 first on the path: the SFT stage stops at the kit's line.

    About 40 s to install (PyPI) and 20 s to run here; without the registry the test is skipped.
    """
    target = tmp_path / "stack"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                              *STACK], capture_output=True, text=True)
    if install.returncode:
        pytest.skip(f"could not install the [unsloth] extra's stack: {install.stderr.strip()[-300:]}")
    script = ("import trl, transformers; print(trl.__version__, transformers.__version__);"
              "from test_unsloth_stack import PROFILE, saved_start, sft_stage; from pathlib import Path;"
              f" sft_stage(saved_start(Path({str(tmp_path / 'sft')!r})), PROFILE, 1)")
    env = {**os.environ, "CASCADEKIT_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(target), str(Path(__file__).parent), *sys.path])}
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert run.stdout.startswith("1.15.0 5.17.0"), run.stdout + run.stderr[-2000:]
    assert run.returncode != 0 and "UnsupportedStack: SFT: trl 1.15.0" in run.stderr, run.stderr[-2000:]
    assert "trl/trainer/utils.py" not in run.stderr  # refused before TRL's kernel was reached
