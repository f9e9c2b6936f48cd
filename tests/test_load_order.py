"""Issue 34 case 2: every training stage loads its model after its training arguments exist.

DeepSpeed ZeRO-3 partitions a model while ``from_pretrained`` loads it only when a ``TrainingArguments``
with the DeepSpeed config is alive at that moment (transformers' ``is_deepspeed_zero3_enabled``); a model
loaded before is loaded whole on every process, and ``zero3_init_flag`` does nothing. No DeepSpeed here: the
test records the order of the two events through the real stage builds (SFT, GRPO, a reward model, the SWE
judge, Part I's mid-training and pretraining from released weights) and stops each build at its model's load.
"""
from __future__ import annotations

import pytest
from transformers import PreTrainedModel, TrainingArguments

from cascadekit.artifacts import write_manifest
from cascadekit.bands import Bands
from cascadekit.engine.models import build_model
from cascadekit.engine.runtime import save_checkpoint
from cascadekit.evaluation.stage_table import suite_records
from cascadekit.profiles import load_profile
from cascadekit.stages import StageOutput
from cascadekit.training.chat_base import build_chat_tokenizer
from cascadekit.training.pipeline import chat_grpo, midtrained
from cascadekit.training.pretrain import pretrain
from cascadekit.training.reward_model import reward_model_stage
from cascadekit.training.sft import sft_stage
from cascadekit.training.swe_rl import judge_from

# no policy sampling before the judge's and the reward model's training (it loads a model of its own)
PROFILE = load_profile("smoke", {"reward_model.policy_samples": 0, "swe_rl.judge_samples": 0})


class Loaded(BaseException):
    """Raised at the model's load: the order is recorded, nothing trains (no loader may turn it into its own error)."""


@pytest.fixture
def events(monkeypatch, tmp_path):
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path / "cache"))
    seen: list[str] = []
    arguments_init = TrainingArguments.__post_init__

    def arguments(self, *args, **kwargs):
        seen.append("arguments")
        return arguments_init(self, *args, **kwargs)

    def model(cls, *args, **kwargs):
        seen.append("model")
        raise Loaded

    monkeypatch.setattr(TrainingArguments, "__post_init__", arguments)
    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(model))
    return seen


@pytest.fixture(scope="module")
def start(tmp_path_factory) -> StageOutput:
    tokenizer = build_chat_tokenizer(PROFILE)
    folder = save_checkpoint(build_model(PROFILE.model, tokenizer), tokenizer, tmp_path_factory.mktemp("ck") / "sft")
    write_manifest(folder, "sft", "fake-start-key")  # an entry: its content goes into the stages' keys
    return StageOutput(folder, "fake-start-key")


BUILDS = {
    "sft": lambda start, work: sft_stage(start, PROFILE, 1),
    "grpo": lambda start, work: chat_grpo(start, suite_records(PROFILE, ["math"])[:2], PROFILE, work),
    "reward-model": lambda start, work: reward_model_stage(start, PROFILE, 1),
    "swe-judge": lambda start, work: judge_from(start, PROFILE),
    "midtrain": lambda start, work: midtrained(start, PROFILE, Bands.of_world(PROFILE.world), 4096),
    "pretrain-released": lambda start, work: pretrain(
        load_profile("smoke", {"model.pretrained": str(start.checkpoint)}), build_chat_tokenizer(PROFILE),
        work / "base", work / "run"),
}


@pytest.mark.parametrize("stage", sorted(BUILDS))
def test_the_training_arguments_exist_before_the_model_loads(stage, start, events, tmp_path):
    with pytest.raises(Loaded):
        BUILDS[stage](start, tmp_path / "work")
    assert events[-1] == "model" and "arguments" in events[:-1], events
