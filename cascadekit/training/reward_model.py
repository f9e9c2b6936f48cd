"""Chapter 09's reward model: a Bradley-Terry scalar head on the kit's own model family.

A reward model maps a (prompt, response) pair to one number ``r``. It learns from
preference pairs alone, with the Bradley-Terry objective TRL's ``RewardTrainer``
minimises::

    loss = -log sigmoid(r(x, chosen) - r(x, rejected))

so only differences of ``r`` mean anything. The pairs come from the *general*
domain, ordered by the hidden quality function the reward model never sees, in two
kinds: the gold answer and worse versions of it (a wrong fact, padding, a repeated
sentence, no close, a truncation: :func:`cascadekit.domains.general.preference_pairs`),
and two of the SFT policy's own sampled answers, as human raters compare a model's
responses. Perturbations alone teach a narrow idea of "wrong" (one number off by
one); RLHF against such a reward model found the answers it could not judge (chapter
09's first toy run: true quality fell 0.12 while the reward model's rose). Each pair is
asked in ``/think`` or ``/no_think`` mode, half and half (the toy's reading of the
paper's mode mix), and scored as the policy's rollouts will be: the rendered prompt,
then the response with its think block, then ``<|im_end|>``.

**Sizes.** The paper compares reward models of 7B to 72B parameters, the largest
many times its 8B policy. Here a reward model keeps the first ``layers`` decoder
layers of the SFT checkpoint and adds a fresh scalar head
(``AutoModelForSequenceClassification`` with one label): the kit's one pretrained
family, cut to size, because a second pretrained base would cost half an hour of
CPU. A size past the SFT model's own depth, or with a wider MLP
(``reward_model.widths``), is the SFT model grown function-preservingly
(:mod:`cascadekit.engine.growth`): it starts as the SFT model and has more to train.
The paper initialises from an instruct model in the same way (Qwen2.5-72B-Instruct).

**Calibration.** Raw scores have no scale, so after training the reward model is
fitted, by least squares, to the hidden quality of the held-out pairs' responses:
``predicted quality = a + b * r``. GRPO's group-normalised advantages do not change
under such a map (for ``b > 0``), and it lets chapter 09 measure reward hacking as
*predicted minus true quality* on the policy's own answers, and chapter 10 add the
reward model's opinion to a verifier's 0/1 score on a shared scale.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import shutil
import time
from itertools import combinations
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from datasets import Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from trl import RewardConfig, RewardTrainer

from cascadekit.chat import END_OF_TURN
from cascadekit.claims import binomial_interval
from cascadekit.domains import chat_record, domains, draw_tasks, gold_answer, prompt_text
from cascadekit.domains.general import preference_pairs, quality
from cascadekit.stages import CHECKPOINT, Stage, StageOutput, content_id, run_folder, run_stage
from cascadekit.training.pretrain import resume_checkpoint
from cascadekit.profiles import Profile, precision_inputs, seed_inputs
from cascadekit.engine.batching import profile_split
from cascadekit.engine.growth import grow
from cascadekit.engine.runtime import (
    Placement, choose_device, load_classifier, load_model, load_tokenizer, save_checkpoint, training_precision,
)
from cascadekit.engine.trainable import Note, engine_settings, load_trainable_classifier, trainable_in_float32
from cascadekit.training.dynamic_sampling import sample_groups
from cascadekit.training.rollouts import kit_sampling, rollout_inputs

#: Bumped when the same inputs would build other bytes (enters every key this module makes: stages.py).
RECIPE = 1

#: A Trainer checkpoint every tenth of the training (a ratio of its steps), so a killed build resumes
#: (the 8-layer reward model on 20,000 pairs trains for over two hours on one CPU core).
SAVE_EVERY = 0.1

#: The held-out pairs' fit of hidden quality on the raw score, saved beside the weights.
CALIBRATION_FILE = "calibration.json"
#: A policy-samples stage's answers: one list of sampled texts per prompt.
SAMPLES_FILE = "samples.json"


def preference_records(profile: Profile, split: str, tasks: int, seed: int,
                       policy: StageOutput | None = None) -> list[dict[str, Any]]:
    """Preference pairs of ``tasks`` general ``split`` prompts, half in each mode.

    Each: ``prompt`` (rendered), ``chosen`` and ``rejected`` (the response as a
    rollout writes it, think block included), their hidden ``quality``, ``think``
    and ``source``: ``perturbed`` (the gold answer and its perturbations), or, with
    a ``policy`` checkpoint and ``reward_model.policy_samples`` > 0, also ``policy``
    (that many of the policy's own sampled answers per prompt, paired by quality,
    as human raters compare a model's responses). ``seed`` (a data seed) draws the
    prompts and the perturbations; the policy is sampled with the training seed.
    """
    cfg = profile.reward_model
    ops = range(profile.sft.ops[0], profile.sft.ops[1] + 1)
    rng = random.Random(f"preference/{split}/{seed}")
    drawn = draw_tasks(domains()["general"], tasks, seed, split, ops)
    records = [chat_record(task, i % 2 == 0) for i, task in enumerate(drawn)]
    prompts = [prompt_text(r) for r in records]
    sampled = (policy_samples(policy, prompts, cfg.policy_samples, profile, profile.seeds.train)
               if policy is not None and cfg.policy_samples else [[] for _ in drawn])
    out = []
    for task, record, prompt, answers in zip(drawn, records, prompts, sampled):
        perturbed = [tuple(gold_answer(chat_record(dataclasses.replace(task, answer=r, no_think_answer=r),
                                                   record["think"])) for r in pair)
                     for pair in preference_pairs(task, rng, cfg.pairs_per_task)]
        scored = [(quality(task.gold, a), a) for a in dict.fromkeys(answers)]
        own = [(a, b) if qa > qb else (b, a) for (qa, a), (qb, b) in combinations(scored, 2) if qa != qb]
        for source, pairs in (("perturbed", perturbed), ("policy", rng.sample(own, min(cfg.pairs_per_task, len(own))))):
            out += [{"prompt": prompt, "chosen": chosen, "rejected": rejected, "chosen_quality": quality(task.gold, chosen),
                     "rejected_quality": quality(task.gold, rejected), "think": record["think"], "source": source}
                    for chosen, rejected in pairs]
    return out


def policy_samples(policy: StageOutput, prompts: Sequence[str], n: int, profile: Profile,
                   seed: int) -> list[list[str]]:
    """:func:`sampled_answers`, as a cached stage: a chapter that only needs a reward model's cache key
    (every chapter after 09) reads the samples instead of drawing thousands again."""
    inputs = {"policy": content_id(policy), "prompts": hashlib.sha256(json.dumps(list(prompts)).encode()).hexdigest()[:16],
              "n": n, "temperature": profile.rl.temperature, "max_new_tokens": profile.sft.max_new_tokens,
              "batch_size": profile.evaluation.batch_size, "seed": seed, **rollout_inputs(profile)}

    def build(folder: Path) -> Mapping[str, Any]:
        started = time.perf_counter()
        (folder / SAMPLES_FILE).write_text(json.dumps(sampled_answers(policy.checkpoint, prompts, n, profile, seed)))
        return {"prompts": len(prompts), "n": n, "wall_s": round(time.perf_counter() - started, 1)}

    done = run_stage(Stage("policy-samples", inputs, build, recipe=RECIPE))
    return json.loads((done.checkpoint / SAMPLES_FILE).read_text())


def sampled_answers(checkpoint: str | Path, prompts: Sequence[str], n: int, profile: Profile,
                    seed: int) -> list[list[str]]:
    """``n`` answers per prompt sampled from a chat checkpoint at the RL temperature, each up to ``<|im_end|>``
    (by the kit's decode loop under ``engine.rollouts: kit``)."""
    model, tokenizer = load_model(checkpoint, choose_device(profile)), load_tokenizer(checkpoint)
    torch.manual_seed(seed)
    step = max(1, profile.evaluation.batch_size // n)
    out: list[list[str]] = []
    for start in range(0, len(prompts), step):
        texts = sample_groups(model, tokenizer, prompts[start:start + step], n, temperature=profile.rl.temperature,
                              max_completion_length=profile.sft.max_new_tokens, keep_markup=True, kit=kit_sampling(profile))
        out += [texts[i:i + n] for i in range(0, len(texts), n)]
    return out


def scored_text(prompt: str, completion: str) -> str:
    """What the reward model reads: the prompt, the response, the end-of-turn marker."""
    return f"{prompt}{completion}{END_OF_TURN}"


def sized_reward_model(source: str | Path, layers: int, width: int = 1, seed: int = 0) -> PreTrainedModel:
    """A reward model of ``layers`` decoder layers and ``width`` times the MLP units, from a chat checkpoint.

    Within the checkpoint's depth at width 1 it is the checkpoint's cut
    (:func:`cascadekit.engine.runtime.load_classifier` with one label);
    otherwise the cut (or the whole model) grown by :func:`cascadekit.engine.growth.grow`,
    ``seed`` drawing the scalar head and the new units. The head is drawn before growth, so it
    reads the grown model as it read the source.
    """
    depth = json.loads((Path(source) / "config.json").read_text())["num_hidden_layers"]
    model = load_classifier(source, labels=1, layers=min(layers, depth), seed=seed)
    return model if layers <= depth and width == 1 else grow(model, layers, width, seed)


def trainable_reward_model(source: str | Path, profile: Profile, layers: int,
                           width: int = 1) -> tuple[PreTrainedModel, Note]:
    """What a reward-model stage trains: :func:`sized_reward_model` in full, or its cut in QLoRA under
    ``engine.quantization: 4bit`` (:func:`cascadekit.engine.trainable.load_trainable_classifier`: NF4 on this
    process's GPU, LoRA, the score head whole). A grown reward model has new weights to train in full, so
    growth (layers past the checkpoint's depth, a wider MLP) is refused in 4 bit."""
    if profile.engine.quantization == "none":
        return sized_reward_model(source, layers, width, profile.seeds.train), Note("full", "every weight trains")
    depth = json.loads((Path(source) / "config.json").read_text())["num_hidden_layers"]
    if layers > depth or width != 1:
        raise ValueError(f"a 4-bit reward model is a cut of {depth} layers or fewer at width 1 (QLoRA trains adapters "
                         f"on frozen weights; a grown model's new ones need training): {layers} layers at width "
                         f"{width} needs engine.quantization=none")
    return load_trainable_classifier(source, choose_device(profile), profile.engine, layers=layers, labels=1,
                                     seed=profile.seeds.train)


@torch.inference_mode()
def head_logits(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str],
                batch_size: int = 64) -> torch.Tensor:
    """A sequence classifier's logits for each text, shape ``(len(texts), labels)`` (the head reads the last non-pad token).

    A text longer than the model's positions keeps its end (a runaway rollout is
    still scored, on its last tokens).
    """
    model.eval()
    tokenizer.padding_side, tokenizer.truncation_side = "right", "left"
    out = []
    for start in range(0, len(texts), batch_size):
        batch = tokenizer(list(texts[start:start + batch_size]), return_tensors="pt", padding=True, truncation=True,
                          max_length=model.config.max_position_embeddings, add_special_tokens=False).to(model.device)
        out.append(model(**batch).logits.float().cpu())
    return torch.cat(out) if out else torch.zeros(0, model.config.num_labels)


def raw_scores(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str],
               batch_size: int = 64) -> list[float]:
    """The reward model's scalar for each text (:func:`head_logits` of its one label)."""
    return head_logits(model, tokenizer, texts, batch_size)[:, 0].tolist()


def fit_calibration(scores: Sequence[float], qualities: Sequence[float]) -> dict[str, float]:
    """Least-squares ``quality = a + b * score`` (``b`` 0 if the scores do not vary)."""
    x, y = np.asarray(scores, dtype=float), np.asarray(qualities, dtype=float)
    b = float(np.cov(x, y, bias=True)[0, 1] / x.var()) if x.var() > 0 else 0.0
    return {"a": float(y.mean() - b * x.mean()), "b": b, "r": float(np.corrcoef(x, y)[0, 1]) if x.var() > 0 else 0.0}


def pairwise_accuracy(chosen: Sequence[float], rejected: Sequence[float]) -> dict[str, float]:
    """Share of pairs scored chosen > rejected, with its exact 95% interval."""
    wins = sum(c > r for c, r in zip(chosen, rejected))
    low, high = binomial_interval(wins, len(chosen))
    return {"accuracy": wins / len(chosen), "low": low, "high": high, "pairs": len(chosen)}


def reward_config(profile: Profile, out_dir: Path) -> RewardConfig:
    """TRL's reward-model settings from the profile's ``reward_model`` section.

    ``batch_size`` pairs are the step's batch over every process, each process's share
    in micro-batches its card holds (:func:`cascadekit.engine.batching.profile_split`): a
    pair is two sequences, each at most the longest row SFT trained on (``sft.stage2_seq_len``,
    a prompt and the policy's answer), scored from the last token."""
    cfg = profile.reward_model
    split = profile_split(profile, "reward_model.batch_size", cfg.batch_size, 2 * profile.sft.stage2_seq_len,
                          lm_head=False, lora=profile.engine.quantization == "4bit")
    return RewardConfig(
        output_dir=str(out_dir), num_train_epochs=cfg.epochs, per_device_train_batch_size=split.micro,
        gradient_accumulation_steps=split.accumulation,
        learning_rate=cfg.lr, lr_scheduler_type="cosine", warmup_steps=0.05, weight_decay=0.0, max_length=None,
        **training_precision(profile), logging_steps=10, report_to="none",
        save_strategy="steps", save_steps=SAVE_EVERY, save_total_limit=2,
        seed=profile.seeds.train, data_seed=profile.seeds.train,
    )


def _tokenized(records: Sequence[Mapping[str, Any]], tokenizer: PreTrainedTokenizerBase) -> Dataset:
    def ids(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    return Dataset.from_dict({
        "chosen_ids": [ids(scored_text(r["prompt"], r["chosen"])) for r in records],
        "rejected_ids": [ids(scored_text(r["prompt"], r["rejected"])) for r in records],
    })


def _digest(records: Sequence[Mapping[str, Any]]) -> str:
    digest = hashlib.sha256()
    for r in records:
        digest.update(json.dumps([r["prompt"], r["chosen"], r["rejected"]]).encode())
    return digest.hexdigest()[:16]


def held_out_check(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                   records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Held-out pairwise accuracy (overall, per mode, per pair kind) and the calibration fitted on the
    responses, from one scoring pass."""
    chosen = raw_scores(model, tokenizer, [scored_text(r["prompt"], r["chosen"]) for r in records])
    rejected = raw_scores(model, tokenizer, [scored_text(r["prompt"], r["rejected"]) for r in records])

    def accuracy_where(keep: Any) -> dict[str, float]:
        picked = [i for i, r in enumerate(records) if keep(r)]
        return pairwise_accuracy([chosen[i] for i in picked], [rejected[i] for i in picked])

    qualities = [r["chosen_quality"] for r in records] + [r["rejected_quality"] for r in records]
    return {"held_out": accuracy_where(lambda r: True),
            "held_out_by_mode": {("think" if think else "no_think"): accuracy_where(lambda r, t=think: r["think"] == t)
                                 for think in (True, False)},
            "held_out_by_source": {source: accuracy_where(lambda r, s=source: r["source"] == s)
                                   for source in dict.fromkeys(r["source"] for r in records)},
            "calibration": fit_calibration(chosen + rejected, qualities)}


def settings_inputs(profile: Profile) -> dict[str, Any]:
    """The ``reward_model`` section as one reward model's key holds it: without the list of sizes (``layers``,
    ``widths``), since a model's key holds its own size and the sizes trained beside it do not change it."""
    settings = dataclasses.asdict(profile.reward_model)
    del settings["layers"], settings["widths"]
    return settings


def reward_model_stage(start: StageOutput, profile: Profile, layers: int, width: int = 1) -> StageOutput:
    """A reward model of ``layers`` layers and ``width`` times the MLP units from ``start`` (the SFT
    checkpoint; :func:`sized_reward_model`), cached by its inputs (``width`` only when it is not 1).

    The metrics hold the loss log, the held-out pairwise accuracy (with its
    interval, overall and per mode), the calibration and the parameter count.
    """
    cfg = profile.reward_model
    train = preference_records(profile, "rl", cfg.tasks, profile.seeds.data, start)
    held_out = preference_records(profile, "eval", cfg.eval_tasks, profile.seeds.data, start)
    inputs = {"start": content_id(start), "layers": layers, **({"width": width} if width != 1 else {}),
              "reward_model": settings_inputs(profile), "pairs": _digest(train), "held_out": _digest(held_out),
              "seed": profile.seed, **seed_inputs(profile, "train"), **precision_inputs(profile),
              **engine_settings(profile.engine)}  # a 4-bit reward model is another model
    run_dir = run_folder("reward-model", inputs, RECIPE)

    def build(dest: Path) -> Mapping[str, Any]:
        tokenizer = load_tokenizer(start.checkpoint)
        args = reward_config(profile, run_dir)  # before the model: ZeRO-3 partitions it as it loads
        model, note = trainable_reward_model(start.checkpoint, profile, layers, width)
        trainer = RewardTrainer(model=model, args=args, processing_class=tokenizer,
                                train_dataset=_tokenized(train, tokenizer))
        started = time.perf_counter()
        resume = resume_checkpoint(run_dir)
        trainer.train(resume_from_checkpoint=str(resume) if resume else None)
        seconds = round(time.perf_counter() - started, 1)  # since the resume, when there was one
        trainable_in_float32(trainer.model)  # QLoRA: TRL trained the adapter in bf16, scored here outside autocast
        check = held_out_check(trainer.model, tokenizer, held_out)
        save_checkpoint(trainer.model, tokenizer, dest, merge_lora=True,  # QLoRA: the full-precision classifier
                        files={CALIBRATION_FILE: json.dumps(check["calibration"])})
        shutil.rmtree(run_dir, ignore_errors=True)
        return {"layers": layers, "width": width, "parameters": sum(p.numel() for p in trainer.model.parameters()),
                "train_pairs": len(train), **check, "train_s": seconds,
                "loss": [(e["step"], e["loss"]) for e in trainer.state.log_history if "loss" in e],
                **({"trainable": str(note)} if note.path != "full" else {})}

    return run_stage(Stage("reward-model", inputs, build, recipe=RECIPE, holds=CHECKPOINT))


class RewardModelScore:
    """A GRPO reward: the reward model's calibrated score (predicted quality) of each rollout.

    TRL calls it with the rendered ``prompts`` and the ``completions``; read the
    completions with their chat markers (:func:`cascadekit.rewards.reading_markup`,
    which :func:`cascadekit.training.pipeline.chat_grpo` applies). Its ``__name__`` names the
    reward model's content (:func:`cascadekit.stages.content_id`), so a GRPO stage's key changes with the reward model.
    It scores on ``placement`` (by default this machine's: each process's own GPU
    where there is one, the CPU in float32 otherwise).
    """

    def __init__(self, stage: StageOutput, batch_size: int = 64, placement: Placement | None = None):
        self.model = load_classifier(stage.checkpoint, placement or choose_device())  # on this process's GPU if any
        self.tokenizer = load_tokenizer(stage.checkpoint)
        calibration = json.loads((Path(stage.checkpoint) / CALIBRATION_FILE).read_text())
        self.a, self.b = calibration["a"], calibration["b"]
        self.batch_size = batch_size
        self.__name__ = f"reward_model_{content_id(stage)}"

    def predicted_quality(self, prompts: Sequence[str], completions: Sequence[str]) -> list[float]:
        texts = [scored_text(p, c) for p, c in zip(prompts, completions)]
        return [self.a + self.b * s for s in raw_scores(self.model, self.tokenizer, texts, self.batch_size)]

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        return self.predicted_quality([str(p) for p in prompts], [str(c) for c in completions])
