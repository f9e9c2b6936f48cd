"""The model a training stage trains: full weights, LoRA, 4-bit QLoRA, or Unsloth's loader when installed.

One function, :func:`load_trainable`, reads the profile's ``engine`` section
(:class:`cascadekit.profiles.EngineConfig`) and returns the model with a
:class:`Note` saying which path it took and why:

* **Full fine-tuning or LoRA** (every CPU scale, and ``paper``/``full``):
  :func:`cascadekit.engine.runtime.load_model` and, with LoRA, PEFT's adapter on every
  linear layer (:func:`cascadekit.engine.runtime.with_lora`).
* **QLoRA** (``engine.quantization: 4bit``, the ``small`` profile): the frozen base
  in NF4 through bitsandbytes, PEFT's ``prepare_model_for_kbit_training``, then the
  LoRA adapter. A GPU only: on the CPU it is refused with one clear line.
* **A classifier's QLoRA** (:func:`load_trainable_classifier`: reward models and the SWE
  judge under ``engine.quantization: 4bit``): the cut classifier in NF4, LoRA on every
  linear layer, and its fresh score head trained whole (:func:`classifier_lora`).
* **Unsloth** (``engine.unsloth: true``): when the ``unsloth`` package is installed
  and a GPU is there, Unsloth's ``FastLanguageModel`` loads the model (in 4 bit
  when asked) and adds its LoRA; otherwise the PEFT path above, and the note says
  why (not installed: ``pip install 'cascadekit[unsloth]'``; or no GPU).

Unsloth patches trl, transformers and peft when imported, so it must come before them:
:mod:`cascadekit.engine.unsloth_first` imports it at the start of a run, and this module
only uses it when that happened.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model, prepare_model_for_kbit_training
from transformers import PreTrainedModel

from cascadekit.engine.runtime import (
    Placement, checkpoint_folder, drawn_from, load_classifier, load_model, require, with_lora,
)

__all__ = ["CLASSIFIER_HEAD", "Note", "classifier_lora", "engine_settings", "load_trainable",
           "load_trainable_classifier", "trainable_in_float32", "unsloth_available"]

#: LoRA's shape when the caller gives none: the kit's adapter (rank 16, alpha 32, every linear layer).
LORA_RANK, LORA_ALPHA = 16, 32
#: The fresh head of a transformers sequence classifier (``...ForSequenceClassification.score``).
CLASSIFIER_HEAD = "score"
#: The linear layers of a Qwen-style decoder (Unsloth takes names, not PEFT's "all-linear").
QWEN_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass(frozen=True)
class Note:
    """Which path :func:`load_trainable` took (``full``, ``lora``, ``qlora``, ``unsloth``) and why."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def engine_settings(engine: Any) -> dict[str, Any]:
    """The ``engine`` fields that change what a stage trains, as extra stage-key inputs: none by default.

    4-bit loading, Unsloth's kernels and released data change the trained weights,
    so a stage that uses them gets another key (released data by set and folder,
    not by content); full-precision PEFT on the kit's world (every CPU scale) adds
    nothing, so the keys of the smoke and toy stages, and their shipped checkpoints,
    stay as they were.
    """
    settings: dict[str, Any] = {}
    if engine.quantization != "none" or engine.unsloth:
        settings.update(quantization=engine.quantization, unsloth=engine.unsloth)
    if engine.data != "world":
        settings.update(data=engine.data, data_dir=engine.data_dir)
    return {"engine": settings} if settings else {}


def unsloth_available() -> bool:
    """Whether Unsloth was imported before trl, transformers and peft (:mod:`cascadekit.engine.unsloth_first`).

    Imported any later its patches miss, so the kit never imports it here: installed
    but not imported first, the PEFT path trains (and the note says why).
    """
    return "unsloth" in sys.modules


def load_trainable(source: str | os.PathLike, placement: Placement, engine: Any, *, lora: bool,
                   rank: int = LORA_RANK, alpha: int = LORA_ALPHA, max_seq_length: int = 4096,
                   allow_download: bool | None = None) -> tuple[PreTrainedModel, Note]:
    """The model at ``source`` ready to train on ``placement`` as ``engine`` asks, and a note of the path taken.

    ``engine`` is a profile's ``engine`` section (``quantization``, ``unsloth``).
    4-bit loading without LoRA is refused: a quantized base cannot be fine-tuned in full.
    """
    four_bit = engine.quantization == "4bit"
    if four_bit and not lora:
        raise ValueError("engine.quantization=4bit trains LoRA adapters on a frozen 4-bit base (QLoRA): "
                         "set sft.use_lora / rl.use_lora, or engine.quantization=none for full fine-tuning")
    fallback = ""
    if engine.unsloth and lora:
        if placement.on_gpu and unsloth_available():
            return _unsloth(source, placement, four_bit, rank, alpha, max_seq_length, allow_download)
        fallback = ("; Unsloth is not installed (pip install 'cascadekit[unsloth]') or was not imported before "
                    "trl/transformers/peft (cascadekit experiment imports it first), so PEFT's LoRA"
                    if placement.on_gpu else "; Unsloth needs a CUDA GPU, so PEFT's LoRA")
    model = load_model(source, placement, allow_download=allow_download, quantization=engine.quantization)
    if four_bit:
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=True)
        return with_lora(model, rank, alpha), Note("qlora", f"NF4 base (bitsandbytes), LoRA r={rank}{fallback}")
    if lora:
        return with_lora(model, rank, alpha), Note("lora", f"LoRA r={rank} on every linear layer (PEFT){fallback}")
    return model, Note("full", "every weight trains")


def _unsloth(source: str | os.PathLike, placement: Placement, four_bit: bool, rank: int, alpha: int,
             max_seq_length: int, allow_download: bool | None) -> tuple[PeftModel, Note]:
    unsloth = require("unsloth", "unsloth", "Unsloth's loader")
    folder = checkpoint_folder(source, allow_download=allow_download)  # the kit's download rule, then a folder
    model, _ = unsloth.FastLanguageModel.from_pretrained(
        model_name=str(folder), max_seq_length=max_seq_length, dtype=placement.torch_dtype, load_in_4bit=four_bit)
    model = unsloth.FastLanguageModel.get_peft_model(
        model, r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=QWEN_LINEAR,
        use_gradient_checkpointing="unsloth", random_state=0)
    return model, Note("unsloth", f"Unsloth's FastLanguageModel{' in 4 bit' if four_bit else ''}, LoRA r={rank}")


def classifier_lora(model: PreTrainedModel, rank: int = LORA_RANK, alpha: int = LORA_ALPHA) -> PeftModel:
    """A sequence classifier with LoRA on every linear layer and its score head trained whole.

    The head is new (drawn when the classifier was cut from a policy), so a
    low-rank update of it would learn from a random start: PEFT keeps a full,
    trainable copy of it (``modules_to_save``), saved with the adapter.
    """
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules="all-linear", task_type="SEQ_CLS",
                        modules_to_save=[CLASSIFIER_HEAD])
    return get_peft_model(model, config)


def load_trainable_classifier(source: str | os.PathLike, placement: Placement, engine: Any, *, layers: int | None,
                              labels: int, rank: int = LORA_RANK, alpha: int = LORA_ALPHA,
                              seed: int | None = None) -> tuple[PreTrainedModel, Note]:
    """A classifier of ``labels`` outputs on the first ``layers`` layers of ``source``, ready to train as ``engine`` asks.

    ``engine.quantization: 4bit`` loads it in NF4 on this process's GPU, prepares it
    for k-bit training and adds :func:`classifier_lora` (QLoRA; a GPU only, refused
    clearly elsewhere); otherwise the full-precision classifier, every weight trained,
    loaded on the CPU for the Trainer to place (and ZeRO-3 to partition). ``seed`` draws
    the fresh head and adapters (:func:`cascadekit.engine.runtime.drawn_from`).
    """
    if engine.quantization != "4bit":
        return load_classifier(source, labels=labels, layers=layers, seed=seed), Note("full", "every weight trains")
    with drawn_from(seed):
        model = load_classifier(source, placement, labels=labels, layers=layers, quantization="4bit")
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=True)
        model = classifier_lora(model, rank, alpha)
    return model, Note(
        "qlora", f"NF4 base (bitsandbytes), LoRA r={rank}, the {CLASSIFIER_HEAD} head trained whole")


def trainable_in_float32(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with its trainable weights in float32, in place.

    TRL's RewardTrainer casts a 4-bit model's trainable weights (LoRA and the whole
    score head) to bf16, the QLoRA paper's choice, which agree with the float32
    activations of a model prepared for k-bit training only under the training's
    autocast. Scoring after training (the held-out check) and merging read them in
    float32, as PEFT creates them.
    """
    for param in model.parameters():
        if param.requires_grad and param.dtype != torch.float32:
            param.data = param.data.float()
    return model
