"""The semantic half of SWE RL's execution-free reward: a small yes/no judge of "does this patch fix the issue?".

The paper asks Kimi-Dev-72B whether a generated patch is equivalent to the gold
one and uses the probability of its "YES" token as the semantic reward. The kit
trains its own judge instead: the SFT checkpoint cut to ``swe_rl.judge_layers``
decoder layers with a fresh two-way head (NO, YES), the same cut as chapter 09's
reward models (:func:`cascadekit.engine.runtime.load_classifier`), and
its reward is the softmax probability of YES.

**What it learns from.** For each SWE prompt (the buggy file, spec and failing
test), candidate answers written as a rollout writes them (think block, then the
patch), each labelled by **execution** (the patch applied and the hidden tests
run in the sandbox, :func:`cascadekit.domains.swe.judge`):

* ``gold``: the gold patch (passes);
* ``corrupted``: the gold patch with its fixed line corrupted once more (an
  operator swapped or a constant moved: looks right, almost always fails);
* ``unchanged``: a patch that writes the buggy line back (applies, fails);
* ``policy``: ``swe_rl.judge_samples`` answers sampled from the SFT policy per
  prompt, whatever they are (the cached ``policy-samples`` stage of chapter 09).

Departures from the paper: the judge reads the prompt and the candidate, not the
gold patch (it has learned what a fix looks like; the lexical half of the reward
is what compares with the gold patch), and its labels are execution truth, which
the paper's judge never saw. The SFT checkpoint is both its start and the policy
it samples, so the judge does not change when the cascade's later stages do.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from datasets import Dataset
from transformers import DataCollatorWithPadding, PreTrainedModel, PreTrainedTokenizerBase, Trainer, TrainingArguments

from cascadekit.claims import binomial_interval
from cascadekit.domains import Task, chat_record, domains, gold_answer, prompt_text
from cascadekit.domains.swe import patch_text, wrong_expressions
from cascadekit.stages import CHECKPOINT, Stage, StageOutput, content_id, run_folder, run_stage
from cascadekit.profiles import Profile, precision_inputs, seed_inputs
from cascadekit.engine.runtime import (
    Placement, choose_device, load_classifier, load_tokenizer, save_checkpoint, training_precision,
)
from cascadekit.engine.trainable import engine_settings, load_trainable_classifier
from cascadekit.rewards import completion_text
from cascadekit.training.reward_model import head_logits, policy_samples, scored_text

#: Bumped when the same inputs would build other bytes (enters every key this module makes: stages.py).
RECIPE = 1

#: Index of the YES logit in the judge's two-way head.
YES = 1


def executed(golds: Sequence[Mapping[str, Any]], texts: Sequence[str], workers: int) -> list[float]:
    """Execution truth of each answer (1 when its patch applies and every hidden test passes), ``workers`` at once."""
    judge = domains()["swe"].judge
    with ThreadPoolExecutor(max_workers=workers) as pool:  # each verdict waits on its own sandbox process
        return list(pool.map(lambda pair: judge(*pair).score, zip(golds, texts)))


def _answer(task: Task, think: bool, search: str, replace: str) -> str:
    """A candidate answer as a rollout writes it: the think block naming the edit, then its patch."""
    patch = patch_text(search, replace)
    thinking = f"The wrong line is {search.strip()}. It should be {replace.strip()}."
    return gold_answer(chat_record(dataclasses.replace(task, thinking=thinking, answer=patch, no_think_answer=patch),
                                   think))


def constructed(task: Task, think: bool, rng: random.Random) -> list[tuple[str, str]]:
    """``(source, answer)``: the gold patch, a corrupted fix and the buggy line written back."""
    lines = task.gold["patch"].split("\n")
    search, replace = lines[2], lines[4]  # calc.py / SEARCH / line / ======= / line / REPLACE
    name, right = replace.split(" = ", 1)
    out = [("gold", _answer(task, think, search, replace)), ("unchanged", _answer(task, think, search, search))]
    corrupted = [w for w in wrong_expressions(right) if f"{name} = {w}" != search]
    if corrupted:
        out.append(("corrupted", _answer(task, think, search, f"{name} = {rng.choice(corrupted)}")))
    return out


def judge_examples(tasks: Sequence[Task], profile: Profile, offset: int,
                   policy: StageOutput | None = None) -> list[dict[str, Any]]:
    """Labelled candidates for ``tasks`` (half asked in each mode): ``prompt``, ``answer``, ``source``, ``label``.

    With a ``policy`` checkpoint, ``swe_rl.judge_samples`` of its sampled answers per prompt join them.
    The corruptions are drawn from the data seed, the policy's answers from the training seed, each plus
    ``offset`` (0 for the training examples, 1 for the held-out ones).
    """
    seeds = profile.seeds
    rng = random.Random(f"swe-judge/{seeds.data + offset}")
    records = [chat_record(task, i % 2 == 0) for i, task in enumerate(tasks)]
    prompts = [prompt_text(r) for r in records]
    n = profile.swe_rl.judge_samples
    sampled = (policy_samples(policy, prompts, n, profile, seeds.train + offset) if policy is not None and n
               else [[] for _ in tasks])
    rows = []
    for task, record, prompt, answers in zip(tasks, records, prompts, sampled):
        candidates = constructed(task, record["think"], rng) + [("policy", a) for a in answers]
        rows += [{"prompt": prompt, "answer": answer, "source": source, "gold": task.gold}
                 for source, answer in candidates]
    labels = executed([r["gold"] for r in rows], [r["answer"] for r in rows], profile.swe_rl.workers)
    return [{**{k: v for k, v in r.items() if k != "gold"}, "label": int(y)} for r, y in zip(rows, labels)]


def yes_probabilities(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str],
                      batch_size: int = 64) -> list[float]:
    """P(YES) for each text; a text longer than the model's positions keeps its end."""
    return torch.softmax(head_logits(model, tokenizer, texts, batch_size), dim=-1)[:, YES].tolist()


def auc(scores: Sequence[float], labels: Sequence[int]) -> float:
    """AUC: how often a random passing answer outscores a random failing one (ties half); nan without both."""
    s, y = np.asarray(scores, dtype=float), np.asarray(labels, dtype=bool)
    pos, neg = s[y], s[~y]
    if not len(pos) or not len(neg):
        return float("nan")
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (len(pos) * len(neg)))


def held_out_check(probabilities: Sequence[float], examples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Accuracy at P(YES) 0.5 (with its exact interval), AUC, Brier score, and the mean P(YES) by source and label."""
    labels = [e["label"] for e in examples]
    right = sum((p >= 0.5) == bool(y) for p, y in zip(probabilities, labels))
    low, high = binomial_interval(right, len(labels))
    by_source: dict[str, dict[str, Any]] = {}
    for source in dict.fromkeys(e["source"] for e in examples):
        picked = [(p, e["label"]) for p, e in zip(probabilities, examples) if e["source"] == source]
        by_source[source] = {"n": len(picked), "passing": sum(y for _, y in picked),
                             "mean_p_yes": float(np.mean([p for p, _ in picked]))}
    return {"accuracy": right / len(labels), "low": low, "high": high, "n": len(labels),
            "auc": auc(probabilities, labels), "passing": sum(labels),
            "brier": float(np.mean([(p - y) ** 2 for p, y in zip(probabilities, labels)])), "by_source": by_source}


def _digest(tasks: Sequence[Task]) -> str:
    digest = hashlib.sha256()
    for task in tasks:
        digest.update(json.dumps([task.prompt, task.gold], sort_keys=True).encode())
    return digest.hexdigest()[:16]


def judge_stage(start: StageOutput, train: Sequence[Task], held_out: Sequence[Task], profile: Profile) -> StageOutput:
    """The judge trained from ``start`` (the SFT checkpoint, also the sampled policy), cached by its inputs.

    The key names the tasks and the settings that decide the candidates, not the
    labelled candidates themselves, so a cached or shipped judge is used without
    sampling or executing anything. Metrics: the examples per source and label,
    the loss log and the held-out check.
    """
    cfg = profile.swe_rl
    settings = {k: v for k, v in dataclasses.asdict(cfg).items() if k.startswith("judge_")}
    inputs = {"start": content_id(start), **settings, "tasks": _digest(train), "held_out": _digest(held_out),
              "sampling": {"temperature": profile.rl.temperature, "max_new_tokens": profile.sft.max_new_tokens},
              "seed": profile.seed, **seed_inputs(profile, "data", "train"), **precision_inputs(profile),
              **engine_settings(profile.engine)}  # a 4-bit judge is another model
    run_dir = run_folder("swe-judge", inputs, RECIPE)

    def build(dest: Path) -> Mapping[str, Any]:
        train_examples = judge_examples(train, profile, 0, start)
        held_examples = judge_examples(held_out, profile, 1, start)
        tokenizer = load_tokenizer(start.checkpoint)
        tokenizer.padding_side, tokenizer.truncation_side = "right", "left"
        args = TrainingArguments(  # before the model: ZeRO-3 partitions it as it loads
            output_dir=str(run_dir), num_train_epochs=cfg.judge_epochs,
            per_device_train_batch_size=cfg.judge_batch_size, learning_rate=cfg.judge_lr,
            lr_scheduler_type="cosine", warmup_steps=0.05, weight_decay=0.0,
            **training_precision(profile), logging_steps=10, save_strategy="no", report_to="none",
            seed=profile.seeds.train, data_seed=profile.seeds.train)
        model, note = load_trainable_classifier(start.checkpoint, choose_device(profile), profile.engine,
                                                layers=cfg.judge_layers, labels=2,  # QLoRA under 4-bit
                                                seed=profile.seeds.train)  # the head, whatever ran before
        model.config.pad_token_id = tokenizer.pad_token_id
        limit = model.config.max_position_embeddings
        encoded = tokenizer([scored_text(e["prompt"], e["answer"]) for e in train_examples], truncation=True,
                            max_length=limit, add_special_tokens=False)
        data = Dataset.from_dict({**encoded, "labels": [e["label"] for e in train_examples]})
        trainer = Trainer(model=model, args=args, train_dataset=data, data_collator=DataCollatorWithPadding(tokenizer))
        started = time.perf_counter()
        trainer.train()
        seconds = round(time.perf_counter() - started, 1)
        probabilities = yes_probabilities(trainer.model, tokenizer,
                                          [scored_text(e["prompt"], e["answer"]) for e in held_examples])
        save_checkpoint(trainer.model, tokenizer, dest, merge_lora=True)  # QLoRA: the full-precision classifier
        shutil.rmtree(run_dir, ignore_errors=True)
        counts: dict[str, list[int]] = {}
        for e in train_examples:
            counts.setdefault(e["source"], [0, 0])[e["label"]] += 1
        return {"layers": cfg.judge_layers, "parameters": sum(p.numel() for p in trainer.model.parameters()),
                "train_examples": {source: {"failing": c[0], "passing": c[1]} for source, c in counts.items()},
                "held_out": held_out_check(probabilities, held_examples), "train_s": seconds,
                "loss": [(e["step"], e["loss"]) for e in trainer.state.log_history if "loss" in e],
                **({"trainable": str(note)} if note.path != "full" else {})}

    return run_stage(Stage("swe-judge", inputs, build, recipe=RECIPE, holds=CHECKPOINT))


class SemanticJudge:
    """A GRPO reward: the judge's P(YES) that each rollout's patch fixes its prompt's issue, in [0, 1].

    Read the completions with their chat markers (:func:`cascadekit.rewards.reading_markup`,
    which :func:`cascadekit.training.pipeline.chat_grpo` applies). Its ``__name__`` names
    the judge's content (:func:`cascadekit.stages.content_id`), so a GRPO stage's key changes with the judge.

    A GRPO step asks the judge twice about the same rollouts (inside the
    execution-free reward, and as a watched reward of its own), so it keeps the
    last call's answers and judges only texts it has not just judged: each
    distinct text once per step. (A text's P(YES) can differ in the last bits with
    the batch it is padded in; the tests hold it to 1e-5.)
    """

    def __init__(self, stage: StageOutput, batch_size: int = 64, placement: Placement | None = None):
        self.model = load_classifier(stage.checkpoint, placement or choose_device())  # on this process's GPU if any
        self.tokenizer = load_tokenizer(stage.checkpoint)
        self.batch_size = batch_size
        self.__name__ = f"swe_judge_{content_id(stage)}"
        self.judged = 0  # texts the model has read, over all calls
        self._last: dict[str, float] = {}  # the last call's P(YES) by text

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        texts = [scored_text(str(p), completion_text(c)) for p, c in zip(prompts, completions)]
        new = [t for t in dict.fromkeys(texts) if t not in self._last]
        self.judged += len(new)
        known = {**self._last, **dict(zip(new, yes_probabilities(self.model, self.tokenizer, new, self.batch_size)))}
        self._last = {t: known[t] for t in texts}
        return [known[t] for t in texts]
