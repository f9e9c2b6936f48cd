"""The Part I and Part II training stages: pretrained base, mid-training and GRPO.

An experiment arm is a short list of stages (pretrain -> mid-train -> GRPO) plus
one evaluation (:func:`cascadekit.evaluation.report.evaluate_checkpoint`). There
is one GRPO path for both parts (:func:`grpo` for Part I problems,
:func:`chat_grpo` for Part II chat records). Each is a
:class:`cascadekit.stages.Stage`, cached by its inputs. The pretraining stage
keeps the key it had before the stage runner existed (``pretrain_key``), so the
bases already cached on a machine stay valid.
"""
from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from datasets import Dataset
from transformers import PreTrainedModel

from cascadekit.bands import MIDTRAIN_MIXTURE, Bands
from cascadekit.chat import END_OF_TURN, stop_token_ids
from cascadekit.domains import check_record, prompt_text, records_digest
from cascadekit.engine.runtime import choose_device, load_model, save_checkpoint
from cascadekit.engine.tokenizer import load_tokenizer
from cascadekit.engine.trainable import Note, engine_settings, load_trainable
from cascadekit.profiles import Profile, RLConfig, precision_inputs, seed_inputs
from cascadekit.rewards import RewardFn, reading_markup, verifier_reward
from cascadekit.stages import CHECKPOINT, Stage, StageOutput, content_id, digest, run_folder, run_stage
from cascadekit.training.async_rewards import StreamingRewards
from cascadekit.training.grpo import train_grpo
from cascadekit.training.pretrain import cached_pretrained, midtrain, pretrain_key
from cascadekit.training.rollouts import forward_inputs, rollout_inputs
from cascadekit.world import Problem

#: Bumped when the same inputs would build other bytes (enters every key this module makes: stages.py).
RECIPE = 1


def rl_dataset(problems: Sequence[Problem]) -> Dataset:
    """A GRPO prompt set: ``prompt`` (the problem up to ``<solution>``) and ``gold`` (the problem as JSON).

    ``gold`` is a JSON string because a problem's seed can exceed Arrow's int64.
    """
    return Dataset.from_dict({
        "prompt": [p.rl_prompt for p in problems],
        "gold": [json.dumps(p.to_dict()) for p in problems],
        "op": [p.op for p in problems],
        "context": [p.context for p in problems],
    })


def problems_digest(problems: Sequence[Problem]) -> str:
    """A short hash of a prompt set (its problems' texts and answers, in order)."""
    return digest([p.rl_prompt, p.answer] for p in problems)


def pretrained(profile: Profile, rebuild: bool = False) -> StageOutput:
    """The profile's pretrained base (the world, tokenizer, model and pretraining sections decide it).

    ``rebuild`` pretrains it again even when it is cached or shipped.
    """
    return StageOutput(cached_pretrained(profile, rebuild=rebuild), pretrain_key(profile))


def midtrained(start: StageOutput, profile: Profile, bands: Bands, tokens: int) -> StageOutput:
    """``start`` continued on ``tokens`` of the mid-training mixture over ``bands`` (0 tokens: ``start`` itself)."""
    if not tokens:
        return start
    inputs = {"start": content_id(start), "tokens": tokens, "mixture": dict(MIDTRAIN_MIXTURE), "bands": bands.to_dict(),
              **profile.sections("pretrain", "world", "seed"), **seed_inputs(profile, "data", "train"),
              **precision_inputs(profile)}
    run_dir = run_folder("midtrain", inputs, RECIPE)  # Trainer checkpoints, to resume

    def build(folder: Path) -> Mapping[str, Any]:
        started = time.perf_counter()
        log = midtrain(profile, start.checkpoint, folder, run_dir, tokens, MIDTRAIN_MIXTURE, bands=bands)
        return {"tokens": tokens, "loss_log": log, "wall_s": round(time.perf_counter() - started, 1)}

    return run_stage(Stage("midtrain", inputs, build, recipe=RECIPE, holds=CHECKPOINT))


def grpo(start: StageOutput, problems: Sequence[Problem], reward: RewardFn, profile: Profile,
         work_dir: Path, rl: RLConfig | None = None) -> StageOutput:
    """GRPO from ``start`` over ``problems`` with ``reward``: one pass of ``len(problems) / prompts_per_step`` steps.

    The metrics hold the training curves (one row per step), the step count and
    the wall time; TRL's own files go to ``work_dir``, the checkpoint to the cache.
    A reward enters the key by its ``__name__`` (the kit's rewards name their
    settings, e.g. ``mixed_reward_0.2``): give a reward of your own a name of its own.
    ``rl`` is the stage's RL settings (the profile's ``rl`` when not given); it
    trains the stage and enters its key.
    """
    return _grpo_stage(start, rl_dataset(problems), problems_digest(problems), reward, profile, work_dir, rl=rl)


def chat_grpo(start: StageOutput, records: Sequence[Mapping[str, Any]], profile: Profile, work_dir: Path,
              reward: RewardFn | Sequence[RewardFn] = verifier_reward, in_order: bool = False, workers: int = 0,
              watched: Sequence[RewardFn] = (), rl: RLConfig | None = None) -> StageOutput:
    """GRPO on Part II chat records (single-turn domains), rewarded by each domain's verifier by default.

    The prompt is the chat up to the assistant turn, rendered without a
    pre-filled think block, as the stage table asks it. A rollout ends at the
    end-of-turn marker, and the reward reads it with its chat markers
    (:func:`cascadekit.rewards.reading_markup`). ``in_order`` feeds the prompts in
    the order given instead of shuffled, so a caller can compose each batch (the
    half-half RLHF batches of chapter 09). ``workers`` > 0 verifies each rollout
    on that many threads as soon as it ends, while the rest of the batch is still
    generating (:class:`cascadekit.training.async_rewards.StreamingRewards`; the
    reward must score each completion on its own). The rewards are the same, so
    ``workers`` is not part of the stage's key; the metrics say what was hidden.
    ``watched`` rewards score every rollout too, with weight 0: the policy never
    trains on them, and their mean per step lands in the curves as
    ``reward/<name>`` (chapter 13 watches execution truth while training on an
    execution-free reward).
    ``reward`` may be a list: TRL sums them, each with weight 1, and skips the
    ``None`` a reward returns for a completion it does not score (chapter 14's
    joint RL gives each domain its own reward this way, and each logs its own
    curve). A reward with a ``seconds`` attribute reports it in the metrics.
    ``rl`` is the stage's RL settings (the profile's ``rl`` when not given: a
    stage with settings of its own, such as Math RL's length limit, passes them).
    """
    return _grpo_stage(start, chat_rl_dataset(records), records_digest(records), reward, profile, work_dir,
                       chat=True, in_order=in_order, workers=workers, watched=watched, rl=rl)


def chat_rl_dataset(records: Sequence[Mapping[str, Any]]) -> Dataset:
    """A GRPO prompt set from chat records: ``prompt`` (rendered), ``domain``, ``gold`` (JSON) and ``reasoning``
    (the gold thinking of the record's last turn; Math RL's step credit reads it).

    A released record (it names its source) carries its set's gold, not the toy
    domain's, so its gold is left to its reward (:mod:`cascadekit.training.released_rl`).
    """
    prompts = []
    for record in (check_record(r, check_gold=not r.get("source")) for r in records):
        if record.get("tools"):
            raise ValueError(f"{record['domain']}: a tool-calling record needs a multi-turn rollout, "
                             f"which GRPO here does not do")
        prompts.append(prompt_text(record))
    return Dataset.from_dict({"prompt": prompts, "domain": [r["domain"] for r in records],
                              "gold": [json.dumps(r["gold"]) for r in records],
                              "reasoning": [r["messages"][-1].get("reasoning_content") or "" for r in records]})


def _policy(start: StageOutput, profile: Profile, rl: RLConfig) -> tuple[PreTrainedModel, Note | None]:
    """The policy a GRPO stage trains, and which path it took: as the checkpoint loads (no note), or QLoRA / Unsloth.

    With ``engine.quantization: 4bit`` or ``engine.unsloth`` the model comes from
    :func:`cascadekit.engine.trainable.load_trainable` with its LoRA adapter already on
    (the frozen NF4 base, or Unsloth's loader), as SFT's does; TRL then adds none.
    Otherwise TRL adds the adapter itself when ``rl.use_lora`` (the CPU scales' path).
    """
    placement = choose_device(profile)
    if profile.engine.quantization == "none" and not profile.engine.unsloth:
        return load_model(start.checkpoint, placement), None
    return load_trainable(start.checkpoint, placement, profile.engine, lora=rl.use_lora,
                          max_seq_length=profile.model.max_positions)


def _grpo_stage(start: StageOutput, dataset: Dataset, prompts_id: str, reward: RewardFn | Sequence[RewardFn],
                profile: Profile, work_dir: Path, chat: bool = False, in_order: bool = False, workers: int = 0,
                watched: Sequence[RewardFn] = (), rl: RLConfig | None = None) -> StageOutput:
    """The one GRPO stage: one pass over ``dataset``, keyed by the start, the prompts, the reward and ``rl``.

    ``rl`` (the profile's when not given) is what trains and what the key holds.
    ``chat`` (Part II): rollouts stop at ``<|im_end|>`` as well as the tokenizer's
    end of text, and the reward reads the chat markers TRL's decoding drops.
    """
    rl = rl or profile.rl
    steps = max(1, len(dataset) // rl.prompts_per_step)
    rewards = [reward] if callable(reward) else list(reward)
    if not rewards or (workers and len(rewards) > 1):
        raise ValueError("GRPO needs one reward, or a list of rewards without streamed verification")

    def build(folder: Path) -> Mapping[str, Any]:
        tokenizer = load_tokenizer(start.checkpoint)
        notes = []

        def load() -> PreTrainedModel:  # called by train_grpo once its training arguments exist (ZeRO-3 init)
            model, note = _policy(start, profile, rl)
            notes.append(note)
            if chat:
                model.generation_config.eos_token_id = stop_token_ids(tokenizer)
            return model

        scored, overrides, hooks, streaming = list(rewards), {}, [], None
        extra = list(watched)
        if chat:
            scored = [reading_markup(r, tokenizer, END_OF_TURN) for r in scored]
            extra = [reading_markup(r, tokenizer, END_OF_TURN) for r in extra]
        if chat and workers:  # it reads the chat markers itself, from the same ids
            streaming = StreamingRewards(rewards[0], tokenizer, workers, end=END_OF_TURN)
            scored = [streaming]
            hooks.append(streaming.attach)
        if in_order:
            overrides["shuffle_dataset"] = False
        if extra:
            overrides["reward_weights"] = [1.0] * len(scored) + [0.0] * len(extra)
        funcs = [*scored, *extra]
        result = train_grpo(load, tokenizer, dataset, funcs if len(funcs) > 1 else funcs[0], profile, str(work_dir),
                            rl=rl, max_steps=steps, hooks=hooks, **overrides)
        save_checkpoint(result.model, tokenizer, folder, merge_lora=True)
        metrics = {"steps": len(result.curves), "curves": result.curves.to_dict(orient="records"),
                   "train_s": round(result.train_seconds, 1), "prompts": len(dataset),
                   "phases": result.timings.round(3).to_dict(orient="records")}
        if notes[0] is not None:
            metrics["trainable"] = str(notes[0])
        timed = {r.__name__: round(r.seconds, 2) for r in rewards if hasattr(r, "seconds")}
        if timed:
            metrics["reward_s"] = timed
        if streaming is not None:
            metrics["streaming_rewards"] = {"workers": workers, **streaming.summary(),
                                            "score_s": round(float(result.timings["score_s"].sum()), 2),
                                            "generate_s": round(float(result.timings["generate_s"].sum()), 2)}
        return metrics

    inputs = {"start": content_id(start), "prompts": prompts_id, "n_prompts": len(dataset),
              "reward": reward.__name__ if callable(reward) else [r.__name__ for r in rewards], "steps": steps, "rl": dataclasses.asdict(rl), "seed": profile.seed,
              **seed_inputs(profile, "train"), **precision_inputs(profile), **engine_settings(profile.engine),
              **rollout_inputs(profile), **forward_inputs(profile)}
    if chat:
        inputs["chat"] = {"stop": END_OF_TURN, "in_order": in_order}
    if watched:
        inputs["watched"] = [r.__name__ for r in watched]
    return run_stage(Stage("grpo", inputs, build, recipe=RECIPE, holds=CHECKPOINT))
