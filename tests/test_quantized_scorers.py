"""Issue 34 case 8: QLoRA for the reward models and the SWE judge, and both scorers on each process's own GPU.

Under ``engine.quantization: 4bit`` a reward model (or the judge) is the SFT checkpoint's cut classifier in NF4,
LoRA on every linear layer and its fresh score head trained whole; its checkpoint is the adapter merged into the
full-precision classifier with its kept layers (not a causal LM, not NF4). No GPU or bitsandbytes here: the
NF4 load is stood in by a full-precision load marked as bitsandbytes marks a 4-bit model (``is_loaded_in_4bit``
and the ``quantization_config`` a reload must drop), and ``bitsandbytes`` by a module with its one class the
Trainer asks about (``nn.Params4bit``, which no stood-in weight is); the preparation, the adapter, training,
the merge and the reload are the kit's and the libraries' own.
"""
from __future__ import annotations

import importlib.machinery
import json
import sys
import types

import pytest
import torch
from transformers import AutoConfig, AutoModelForSequenceClassification, BitsAndBytesConfig

from cascadekit.artifacts import write_manifest
from cascadekit.engine import runtime, trainable
from cascadekit.engine.models import build_model
from cascadekit.engine.runtime import load_classifier, load_tokenizer, save_checkpoint
from cascadekit.profiles import load_profile
from cascadekit.stages import StageOutput
from cascadekit.training.chat_base import build_chat_tokenizer
from cascadekit.training.reward_model import CALIBRATION_FILE, RewardModelScore, raw_scores, reward_model_stage
from cascadekit.training.swe_judge import SemanticJudge, yes_probabilities
from cascadekit.training.swe_rl import judge_from

# two decoder layers, so a one-layer cut keeps fewer than the checkpoint has; no policy sampling
OVERRIDES = {"model.layers": 2, "reward_model.policy_samples": 0, "swe_rl.judge_samples": 0, "swe_rl.judge_layers": 1}
# bf16 autocast, as a GPU profile trains: TRL keeps a 4-bit model's trainable weights in bf16
PROFILE = load_profile("smoke", {**OVERRIDES, "engine.quantization": "4bit", "engine.precision": "bf16-autocast"})
TEXTS = ["<|im_start|>user\nwhich is larger?<|im_end|>\n", "a longer answer with more words in it"]


@pytest.fixture(scope="module")
def start(tmp_path_factory) -> StageOutput:
    tokenizer = build_chat_tokenizer(PROFILE)
    model = build_model(PROFILE.model, tokenizer)
    folder = save_checkpoint(model, tokenizer, tmp_path_factory.mktemp("ck") / "sft")
    write_manifest(folder, "sft", "sft-start")  # an entry: its content goes into the stages' keys
    return StageOutput(folder, "sft-start")


@pytest.fixture
def nf4(monkeypatch, tmp_path):
    """The 4-bit loader stood in: what it was asked, and the classifiers it returned (trained in place)."""
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path / "cache"))
    asked, loaded = [], []

    def stand_in(source, placement=None, *, labels=None, layers=None, quantization="none"):
        asked.append((quantization, layers, labels))
        model = load_classifier(source, labels=labels, layers=layers)
        if quantization == "4bit":
            model.is_loaded_in_4bit = True
            model.config.quantization_config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4")
        loaded.append(model)
        return model

    monkeypatch.setattr(trainable, "load_classifier", stand_in)
    bitsandbytes = types.ModuleType("bitsandbytes")
    bitsandbytes.__spec__ = importlib.machinery.ModuleSpec("bitsandbytes", None)
    bitsandbytes.nn = types.SimpleNamespace(Params4bit=type("Params4bit", (torch.nn.Parameter,), {}))
    monkeypatch.setitem(sys.modules, "bitsandbytes", bitsandbytes)  # the Trainer counts a 4-bit model's weights
    return asked, loaded


def _check_merged(out: StageOutput, trained, labels: int, layers: int) -> None:
    """The stage's checkpoint is the full-precision classifier of ``layers`` layers and ``labels`` outputs, scoring
    as the trained QLoRA model does (to bf16's precision: the merge is made in bf16)."""
    assert out.metrics["trainable"].startswith("qlora: NF4 base")
    config = json.loads((out.checkpoint / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForSequenceClassification"] and "quantization_config" not in config
    assert config["num_hidden_layers"] == layers and AutoConfig.from_pretrained(out.checkpoint).num_labels == labels
    assert not (out.checkpoint / "adapter_config.json").exists()
    head = trained.score  # PEFT's full copy of the head, trained, beside the fresh original
    assert head.modules_to_save["default"].weight.requires_grad
    assert not torch.equal(head.modules_to_save["default"].weight, head.original_module.weight)
    assert any("lora_A" in name for name, _ in trained.named_parameters())
    tokenizer = load_tokenizer(out.checkpoint)
    reloaded = load_classifier(out.checkpoint).eval()
    with torch.no_grad():
        torch.testing.assert_close(
            torch.tensor(raw_scores(reloaded, tokenizer, TEXTS)),
            torch.tensor(raw_scores(trained.eval(), tokenizer, TEXTS)), atol=0.05, rtol=0.02)


def test_a_4bit_reward_model_trains_qlora_and_saves_the_full_classifier(start, nf4):
    asked, loaded = nf4
    out = reward_model_stage(start, PROFILE, 1)
    assert asked == [("4bit", 1, 1)]
    _check_merged(out, loaded[0], labels=1, layers=1)
    with pytest.raises(ValueError, match="a 4-bit reward model is a cut of 2 layers or fewer at width 1"):
        reward_model_stage(start, PROFILE, 3)  # growth trains new weights: full precision only


def test_a_4bit_swe_judge_trains_qlora_and_saves_the_full_classifier(start, nf4):
    asked, loaded = nf4
    out = judge_from(start, PROFILE)
    assert asked == [("4bit", 1, 2)]
    _check_merged(out, loaded[0], labels=2, layers=1)
    probabilities = yes_probabilities(load_classifier(out.checkpoint), load_tokenizer(out.checkpoint), TEXTS)
    assert all(0.0 <= p <= 1.0 for p in probabilities)


def test_full_precision_stages_stay_full_fine_tuning(start, nf4):
    asked, _ = nf4
    out = reward_model_stage(start, load_profile("smoke", OVERRIDES), 1)
    assert asked == [] and "trainable" not in out.metrics  # sized_reward_model, every weight trained
    assert reward_model_stage(start, PROFILE, 1).key != out.key  # the 4-bit one is another model, not a cache hit


class Loaded(BaseException):
    """Raised at the scorer's weights: where and how they were asked to load is recorded."""


def test_both_scorers_load_on_this_processs_own_gpu(start, tmp_path, monkeypatch):
    calibration = {CALIBRATION_FILE: json.dumps({"a": 0.0, "b": 1.0, "r": 0.0})}
    folder = save_checkpoint(load_classifier(start.checkpoint, labels=1, layers=1), load_tokenizer(start.checkpoint),
                             tmp_path / "rm", files=calibration)
    out = StageOutput(folder, "rm")
    asked = []

    def record(cls, source, **kwargs):
        asked.append(kwargs)
        raise Loaded

    monkeypatch.setattr(runtime, "cuda_device", lambda: ("Fake GPU", True))
    monkeypatch.setattr(AutoModelForSequenceClassification, "from_pretrained", classmethod(record))
    monkeypatch.setenv("LOCAL_RANK", "1")
    for scorer in (RewardModelScore, SemanticJudge):
        with pytest.raises(Loaded):
            scorer(out)
    assert [(k["device_map"], k["dtype"]) for k in asked] == [("cuda:1", torch.bfloat16)] * 2
