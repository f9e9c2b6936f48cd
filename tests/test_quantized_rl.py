"""Issue 34 case 8: a GRPO stage trains QLoRA (or Unsloth's model) where the profile asks, as SFT does.

No GPU or bitsandbytes here: :func:`cascadekit.engine.trainable.load_trainable` is replaced by a loader that
records what it was asked and returns a LoRA-wrapped model, so the test checks the stage's wiring: the policy
comes from that loader with its adapter on, TRL adds no second adapter, the stage trains, and its key says so.
"""
from __future__ import annotations

from peft import PeftModel

from cascadekit.artifacts import write_manifest
from cascadekit.engine.models import build_model
from cascadekit.engine.runtime import load_model, save_checkpoint, with_lora
from cascadekit.engine.trainable import Note
from cascadekit.evaluation.stage_table import suite_records
from cascadekit.profiles import load_profile
from cascadekit.stages import StageOutput
from cascadekit.training import pipeline
from cascadekit.training.chat_base import build_chat_tokenizer

PROFILE = load_profile("smoke", {"rl.use_lora": True, "rl.max_completion_length": 8})


def test_a_4bit_profile_trains_grpo_on_the_quantized_loaders_adapter(monkeypatch, tmp_path):
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path / "cache"))
    tokenizer = build_chat_tokenizer(PROFILE)
    start = StageOutput(save_checkpoint(build_model(PROFILE.model, tokenizer), tokenizer, tmp_path / "sft"), "start")
    write_manifest(start.checkpoint, "sft", "start")  # an entry: its content goes into the GRPO key
    asked, trained = [], []

    def fake_load_trainable(source, placement, engine, *, lora, **kwargs):
        asked.append((engine.quantization, lora))
        model = with_lora(load_model(source, placement), rank=2, alpha=4)
        trained.append(model)
        return model, Note("qlora", "a stand-in for the NF4 base")

    monkeypatch.setattr(pipeline, "load_trainable", fake_load_trainable)
    records = suite_records(PROFILE, ["math"])[:2]
    plain = pipeline.chat_grpo(start, records, PROFILE, tmp_path / "plain")
    assert asked == []  # full precision: the checkpoint as it loads, TRL's own adapter
    quantized = load_profile("smoke", {"rl.use_lora": True, "rl.max_completion_length": 8,
                                       "engine.quantization": "4bit"})
    out = pipeline.chat_grpo(start, records, quantized, tmp_path / "qlora")
    assert asked == [("4bit", True)] and out.metrics["steps"] >= 1 and out.metrics["trainable"].startswith("qlora")
    assert "trainable" not in plain.metrics
    assert isinstance(trained[0], PeftModel) and trained[0].peft_config["default"].r == 2  # no second adapter
    assert out.key != plain.key  # 4-bit training changes the weights: another stage
