"""Multi-stage SFT of the unified thinking model with TRL's ``SFTTrainer``.

Stage 1 trains the base on shorter sequences (general chat, instruction
following, math, code); stage 2 continues from stage 1 on longer sequences and
adds tool calling and SWE, as the paper's 16K and 32K stages. Every prompt comes
as a parallel pair (a ``/think`` and a ``/no_think`` answer), so one model learns
both modes and the switch between them.

The loss is on assistant tokens only (``assistant_only_loss=True``): the chat
template wraps the trained turn, ``<think>`` through ``<|im_end|>``, in
``{% generation %}`` markers, and TRL masks everything else (system, tools, user
text, the flag). Records longer than the stage's ``max_length`` are dropped
rather than truncated: a truncated answer would teach the model never to stop.

Departures from the paper, at toy scale: the responses are written by rule, not
by teacher models (DeepSeek-R1/V3); stage 2 redraws the stage-1 domains with
harder math and code (edge ops) rather than curating longer teacher traces.

Chapter 08's experiment runs it: ``cascadekit experiment 08 --scale toy``.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, Sequence

from datasets import Dataset
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase, TrainerCallback
from tqdm.auto import tqdm
from trl import SFTConfig, SFTTrainer

from cascadekit.artifacts import cache_root, get_or_build
from cascadekit.base_model import base_key, cached_base
from cascadekit.chat import render
from cascadekit.domains import chat_records, domains, draw_tasks, prompt_of, stage_domains
from cascadekit.domains.suites import evaluate, rows_to_dicts, suite_records
from cascadekit.profiles import Profile
from cascadekit.runtime import choose_device, load_model, save_checkpoint
from cascadekit.tokenizer import load_tokenizer

STAGES = (1, 2)
LOSS_LOG = "sft_loss_log.json"


def stage_ops(profile: Profile, stage: int) -> range:
    """Op range of math/code/SWE tasks: in-distribution, then up to the edge in stage 2 (longer reasoning)."""
    lo, hi = profile.world.ops_in_distribution[0], profile.world.ops_in_distribution[1]
    return range(lo, (profile.world.ops_edge[1] if stage == 2 else hi) + 1)


def stage_records(profile: Profile, stage: int) -> list[dict[str, Any]]:
    """The stage's chat records: ``stageN_tasks`` SFT-split prompts per domain, both modes each."""
    n = profile.sft.stage1_tasks if stage == 1 else profile.sft.stage2_tasks
    records = []
    for name in stage_domains(stage):
        tasks = draw_tasks(domains()[name], n, profile.seed * 10 + stage, "sft", stage_ops(profile, stage))
        records.extend(r for t in tasks for r in chat_records(t))
    return records


def seq_len(profile: Profile, stage: int) -> int:
    return profile.sft.stage1_seq_len if stage == 1 else profile.sft.stage2_seq_len


def token_length(record: dict[str, Any], tokenizer: PreTrainedTokenizerBase) -> int:
    messages, tools = record["messages"], prompt_of(record)[1]
    return len(tokenizer(render(messages, tools), add_special_tokens=False)["input_ids"])


def sft_dataset(records: Sequence[dict[str, Any]], tokenizer: PreTrainedTokenizerBase,
                max_length: int) -> tuple[Dataset, int]:
    """A conversational dataset (``messages``, ``tools`` as JSON text) of records that fit ``max_length``.

    Returns the dataset and how many records were dropped for length.
    """
    kept = [{"messages": r["messages"], "tools": r["tools"]} for r in records
            if token_length(r, tokenizer) <= max_length]
    return Dataset.from_list(kept), len(records) - len(kept)


def sft_config(profile: Profile, stage: int, out_dir: Path, steps_hint: int) -> SFTConfig:
    """TRL settings: assistant-only loss, no packing, cosine schedule; device and precision from
    :func:`cascadekit.runtime.choose_device` (the CPU unless the profile asks for CUDA and there is one)."""
    cfg = profile.sft
    return SFTConfig(
        output_dir=str(out_dir),
        max_length=seq_len(profile, stage),
        assistant_only_loss=True,
        packing=False,
        num_train_epochs=cfg.epochs,
        per_device_train_batch_size=cfg.batch_size,
        learning_rate=cfg.lr,
        lr_scheduler_type="cosine",
        warmup_steps=0.05,
        weight_decay=0.0,
        max_grad_norm=1.0,
        **choose_device(profile).trainer_arguments(),
        logging_steps=max(1, steps_hint // 50),
        save_strategy="no",
        report_to="none",
        seed=profile.seed,
        data_seed=profile.seed,
        dataset_num_proc=None,
    )


def train_stage(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, profile: Profile, stage: int,
                run_dir: Path, callbacks: Sequence[TrainerCallback] = ()) -> dict[str, Any]:
    """One SFT stage in place on ``model``; returns the loss log and data counts."""
    dataset, dropped = sft_dataset(stage_records(profile, stage), tokenizer, seq_len(profile, stage))
    steps_hint = int(len(dataset) * profile.sft.epochs / profile.sft.batch_size)
    trainer = SFTTrainer(model=model, args=sft_config(profile, stage, run_dir, steps_hint),
                         train_dataset=dataset, processing_class=tokenizer, callbacks=list(callbacks))
    started = time.perf_counter()
    trainer.train()
    log = [(e["step"], e["loss"]) for e in trainer.state.log_history if "loss" in e]
    return {"stage": stage, "records": len(dataset), "dropped_for_length": dropped,
            "steps": trainer.state.global_step, "train_s": round(time.perf_counter() - started, 1), "loss": log}


def sft_key(profile: Profile, stage: int) -> str:
    return f"{base_key(profile)}-{profile.hash('sft')}-stage{stage}"


def cached_stage(profile: Profile, stage: int, callbacks: Sequence[TrainerCallback] = ()) -> Path:
    """The checkpoint after SFT stage ``stage`` (stage 2 continues from stage 1), trained on first use."""
    start = cached_base(profile, callbacks) if stage == 1 else cached_stage(profile, stage - 1, callbacks)

    def build(dest: Path) -> None:
        tokenizer = load_tokenizer(start)
        model = load_model(start, choose_device(profile))
        run_dir = cache_root() / "runs" / f"sft-{sft_key(profile, stage)}"
        info = train_stage(model, tokenizer, profile, stage, run_dir, callbacks)
        shutil.rmtree(run_dir, ignore_errors=True)
        save_checkpoint(model, tokenizer, dest, files={LOSS_LOG: json.dumps(info)})

    return get_or_build("sft", sft_key(profile, stage), build)


def read_stage_info(checkpoint: Path) -> dict[str, Any]:
    """The stage's loss log and data counts saved beside its checkpoint."""
    return json.loads((Path(checkpoint) / LOSS_LOG).read_text())


def run_chapter(profile: Profile, callbacks: Sequence[TrainerCallback] = ()) -> dict[str, Any]:
    """Base model, both SFT stages and the evaluation table after each; the chapter's measurement."""
    timings: dict[str, float] = {}
    records = suite_records(profile)
    rows, samples, stages = [], [], []
    started = time.perf_counter()
    cached_base(profile, callbacks)
    timings["base_s"] = round(time.perf_counter() - started, 1)
    for stage in tqdm(STAGES, desc="SFT stages", unit="stage"):
        started = time.perf_counter()
        checkpoint = cached_stage(profile, stage, callbacks)
        timings[f"stage{stage}_s"] = round(time.perf_counter() - started, 1)
        stages.append(read_stage_info(checkpoint))
        started = time.perf_counter()
        model = AutoModelForCausalLM.from_pretrained(checkpoint)
        stage_rows, stage_samples = evaluate(model, load_tokenizer(checkpoint), records, profile, f"SFT stage {stage}")
        timings[f"eval{stage}_s"] = round(time.perf_counter() - started, 1)
        rows += rows_to_dicts(stage_rows)
        samples += stage_samples
    return {"rows": rows, "stages": stages, "timings": timings, "samples": samples}
