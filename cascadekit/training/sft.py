"""Multi-stage SFT of the unified thinking model with TRL's ``SFTTrainer``.

Stage 1 trains the base on shorter sequences (general chat, instruction
following, math, code); stage 2 continues from stage 1 on longer sequences and
adds tool calling and SWE, as the paper's 16K and 32K stages. Every prompt comes
as a parallel pair (a ``/think`` and a ``/no_think`` answer), so one model learns
both modes and the switch between them.

The loss is on assistant tokens only (``assistant_only_loss=True``): the chat
template wraps the trained turns, ``<think>`` through ``<|im_end|>``, in
``{% generation %}`` markers, and TRL masks everything else (system, tools, user
text, the flag, tool results). Records longer than the stage's ``max_length`` are
dropped rather than truncated: a truncated answer would teach the model never to stop.

Full fine-tuning or LoRA is a profile choice (``sft.use_lora``). Each stage's
checkpoint has the adapter merged in, so the next stage and every evaluation load
a plain model. With LoRA the chat markers' embeddings stay as pretraining left
them (never seen, so only pushed away from): PEFT's ``trainable_token_indices``
would train them, but with tied embeddings it fails in PEFT 0.21 (the output
head's wrapper has no ``bias``; huggingface/peft#3688), so the adapter alone must
learn to write and read them.

Each stage is a cached stage of the stage runner (:mod:`cascadekit.stages`).

Departures from the paper, at toy scale: the responses are written by rule, not
by teacher models (DeepSeek-R1/V3); parallel think/no_think responses are used
for every domain (the paper uses them for general prompts); stage 2 redraws the
stage-1 domains rather than curating longer teacher traces.
"""
from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch
from datasets import Dataset
from peft import PeftModel
from transformers import PreTrainedModel, PreTrainedTokenizerBase, TrainerCallback
from trl import SFTConfig, SFTTrainer

from cascadekit.engine.batching import profile_split
from cascadekit.training.chat_base import surface_ops
from cascadekit.chat import render
from cascadekit.domains import chat_records, check_record, configured, draw_tasks, prompt_of, stage_domains
from cascadekit.stages import CHECKPOINT, Stage, StageOutput, content_id, run_folder, run_stage
from cascadekit.profiles import Profile, domains_inputs, precision_inputs, seed_inputs
from cascadekit.engine.runtime import (
    choose_device, download_allowed, load_tokenizer, refuse_cpu_trl, save_checkpoint, training_precision, with_lora,
)
from cascadekit.training.released_data import available_pools, released_sets, stream_records
from cascadekit.engine.trainable import engine_settings, load_trainable

#: Bumped when the same inputs would build other bytes (enters every key this module makes: stages.py).
RECIPE = 1

STAGES = (1, 2)
#: LoRA rank and alpha for SFT when ``sft.use_lora`` (every linear layer).
LORA_RANK, LORA_ALPHA = 16, 32


#: The released SFT set of each stage (the paper's 16K stage, then its 32K stage), for ``engine.data: released``.
RELEASED_STAGES = {1: "cascade-sft-stage1", 2: "cascade-sft-stage2"}


def stage_records(profile: Profile, stage: int) -> list[dict[str, Any]]:
    """The stage's chat records: ``stageN_tasks`` SFT-split prompts per domain, both modes each.

    With ``engine.data: released`` they are the stage's released SFT set instead
    (:func:`released_stage_records`).
    """
    n = profile.sft.stage1_tasks if stage == 1 else profile.sft.stage2_tasks
    if profile.engine.data == "released":
        return released_stage_records(profile, stage, n)
    records = []
    for name in stage_domains(stage):
        tasks = draw_tasks(configured(name, profile.domains), n, profile.seeds.data * 10 + stage, "sft", surface_ops(profile))
        records.extend(r for t in tasks for r in chat_records(t))
    return records


def released_stage_records(profile: Profile, stage: int, per_domain: int) -> list[dict[str, Any]]:
    """The first ``per_domain`` rows (0: every row) of each domain of the stage's released SFT set.

    Read from ``engine.data_dir``/<set name> (a local copy in the released layout)
    when set, else streamed from the hub, which needs downloads allowed. A domain
    whose file is missing is skipped with a note (:func:`available_pools`), not the stage.
    """
    name = RELEASED_STAGES[stage]
    source = Path(profile.engine.data_dir).expanduser() / name if profile.engine.data_dir else None
    allow = download_allowed(profile)

    def pool(domain: str) -> Callable[[], list[dict[str, Any]]]:
        return lambda: list(stream_records(name, domain, source, limit=per_domain or None, allow_download=allow))

    pools = available_pools({domain: pool(domain) for domain in released_sets()[name].files})
    return [record for records in pools.values() for record in records]


def seq_len(profile: Profile, stage: int) -> int:
    return profile.sft.stage1_seq_len if stage == 1 else profile.sft.stage2_seq_len


def token_length(record: dict[str, Any], tokenizer: PreTrainedTokenizerBase) -> int:
    messages, tools = record["messages"], prompt_of(record)[1]
    return len(tokenizer(render(messages, tools), add_special_tokens=False)["input_ids"])


def sft_dataset(records: Sequence[dict[str, Any]], tokenizer: PreTrainedTokenizerBase,
                max_length: int) -> tuple[Dataset, int]:
    """A conversational dataset (``messages``, ``tools`` as JSON text) of records that fit ``max_length``.

    Every record is checked first (:func:`cascadekit.domains.check_record`): a
    malformed one is one clear error naming its field. Returns the dataset and how
    many records were dropped for length.
    """
    # a released record (it names its source) carries no toy gold: SFT reads only its messages and tools
    checked = (check_record(r, check_gold=not r.get("source")) for r in records)
    kept = [{"messages": r["messages"], "tools": r["tools"]} for r in checked if token_length(r, tokenizer) <= max_length]
    return Dataset.from_list(kept), len(records) - len(kept)


def sft_config(profile: Profile, stage: int, out_dir: Path, steps_hint: int) -> SFTConfig:
    """TRL settings: assistant-only loss, no packing, cosine schedule; device and precision from
    :func:`cascadekit.engine.runtime.choose_device` (the CPU unless the profile asks for CUDA and there is one).

    ``sft.batch_size`` rows are the step's batch over every process, each process's
    share in micro-batches its card holds at the stage's length
    (:func:`cascadekit.engine.batching.profile_split`; ``engine.accumulation`` fixes
    the split instead). On a GPU the activations are checkpointed (recomputed in the
    backward pass): a 16K-token row's activations would not fit beside the model otherwise."""
    cfg = profile.sft
    split = profile_split(profile, "sft.batch_size", cfg.batch_size, seq_len(profile, stage), lm_head=True,
                          lora=cfg.use_lora)
    refuse_cpu_trl(choose_device(profile), "SFT")
    return SFTConfig(
        output_dir=str(out_dir),
        max_length=seq_len(profile, stage),
        assistant_only_loss=True,
        packing=False,
        num_train_epochs=cfg.epochs,
        per_device_train_batch_size=split.micro,
        gradient_accumulation_steps=split.accumulation,
        learning_rate=cfg.lr,
        lr_scheduler_type="cosine",
        warmup_steps=0.05,
        weight_decay=0.0,
        max_grad_norm=1.0,
        **training_precision(profile),
        gradient_checkpointing=choose_device(profile).on_gpu,
        logging_steps=max(1, steps_hint // 50),
        save_strategy="no",
        report_to="none",
        seed=profile.seeds.train,
        data_seed=profile.seeds.train,
        dataset_num_proc=None,
    )


def trainable(model: PreTrainedModel, profile: Profile) -> PreTrainedModel:
    """The model itself (full fine-tuning, or one that already carries its adapter) or wrapped in a LoRA adapter."""
    return with_lora(model, LORA_RANK, LORA_ALPHA) if profile.sft.use_lora and not isinstance(model, PeftModel) else model


def train_stage(model: PreTrainedModel | Callable[[], PreTrainedModel], tokenizer: PreTrainedTokenizerBase,
                profile: Profile, stage: int, run_dir: Path,
                callbacks: Sequence[TrainerCallback] = ()) -> tuple[PreTrainedModel, dict[str, Any]]:
    """One SFT stage on ``model``; returns the trained model and the stage's loss log and data counts.

    ``model`` may be a function that loads it: it is called once the training
    arguments exist, which is what lets DeepSpeed ZeRO-3 partition the weights as
    they load (``zero3_init_flag``) instead of every process loading them whole.
    """
    dataset, dropped = sft_dataset(stage_records(profile, stage), tokenizer, seq_len(profile, stage))
    steps_hint = int(len(dataset) * profile.sft.epochs / profile.sft.batch_size)
    args = sft_config(profile, stage, run_dir, steps_hint)
    model = model if isinstance(model, torch.nn.Module) else model()
    trainer = SFTTrainer(model=trainable(model, profile), args=args,
                         train_dataset=dataset, processing_class=tokenizer, callbacks=list(callbacks))
    started = time.perf_counter()
    trainer.train()
    log = [(e["step"], e["loss"]) for e in trainer.state.log_history if "loss" in e]
    return trainer.model, {"stage": stage, "records": len(dataset), "dropped_for_length": dropped,
                           "steps": trainer.state.global_step, "train_s": round(time.perf_counter() - started, 1),
                           "loss": log}


#: ``sft`` fields that only the evaluation reads: changing them must not retrain a stage.
EVALUATION_FIELDS = ("eval_tasks", "max_new_tokens")


def training_settings(profile: Profile) -> dict[str, Any]:
    """The ``sft`` section as a stage's key sees it: everything but the evaluation's fields."""
    return {k: v for k, v in dataclasses.asdict(profile.sft).items() if k not in EVALUATION_FIELDS}


def sft_stage(start: StageOutput, profile: Profile, stage: int,
              callbacks: Sequence[TrainerCallback] = ()) -> StageOutput:
    """SFT stage ``stage`` from ``start`` (the base for stage 1, stage 1 for stage 2), cached by its inputs."""
    inputs = {"start": content_id(start), "stage": stage, "sft": training_settings(profile), "seed": profile.seed,
              **seed_inputs(profile, "data", "train"), **engine_settings(profile.engine), **precision_inputs(profile),
              **domains_inputs(profile)}
    run_dir = run_folder("sft", inputs, RECIPE)

    def build(dest: Path) -> Mapping[str, Any]:
        tokenizer = load_tokenizer(start.checkpoint)
        notes = []

        def load() -> PreTrainedModel:
            model, note = load_trainable(start.checkpoint, choose_device(profile), profile.engine,
                                         lora=profile.sft.use_lora, rank=LORA_RANK, alpha=LORA_ALPHA,
                                         max_seq_length=seq_len(profile, stage))
            notes.append(note)
            return model

        model, info = train_stage(load, tokenizer, profile, stage, run_dir, callbacks)
        save_checkpoint(model, tokenizer, dest, merge_lora=True)
        shutil.rmtree(run_dir, ignore_errors=True)
        return {**info, "trainable": str(notes[0])}

    return run_stage(Stage("sft", inputs, build, recipe=RECIPE, holds=CHECKPOINT))


def sft_stages(base: StageOutput, profile: Profile, callbacks: Sequence[TrainerCallback] = ()) -> list[StageOutput]:
    """Both SFT stages in order, each continuing from the one before."""
    outputs, start = [], base
    for stage in STAGES:
        start = sft_stage(start, profile, stage, callbacks)
        outputs.append(start)
    return outputs
