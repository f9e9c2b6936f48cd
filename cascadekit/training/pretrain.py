"""Pretraining and mid-training a small reasoner from scratch with the Hugging Face Trainer.

Both stages are next-token prediction on rendered DAG problems; they differ
only in the problem mixture and the starting point:

- pretraining: the ``pretrain`` split, in-distribution ops, from random init;
- mid-training: the ``midtrain`` split narrowed towards harder ops (by default
  20% in-distribution, 80% edge), continuing from a pretrained checkpoint, with
  its schedule starting where pretraining's ended (:func:`midtrain_config`).

The token budget in the profile fixes the number of optimizer steps
(``tokens // (batch_size * seq_len)``); the schedule is cosine with a floor
(``cosine_with_min_lr``), after a linear warmup. An interrupted run resumes
from its last good Trainer checkpoint (:func:`resume_checkpoint`): a checkpoint
cut mid-save (weights but no ``trainer_state.json``, a truncated safetensors
file) is skipped with a warning and moved aside as ``damaged-checkpoint-N``, and
the previous good one is used; with none good, training starts afresh.

Chapter 03's experiment (``cascadekit experiment 03 --scale toy``) builds the
profile's base through :func:`cached_pretrained` and commits its ladder under
``data/results/03_pretraining/``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import random
import re
import shutil
import sys
import time
import warnings
import zipfile
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import torch
from transformers import (
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    default_data_collator,
)

from cascadekit.artifacts import cache_root
from cascadekit.bands import MIDTRAIN_MIXTURE, PRETRAIN_MIXTURE, Bands
from cascadekit.engine.models import start_model
from cascadekit.profiles import PretrainConfig, Profile, precision_inputs, seed_inputs
from cascadekit.engine.runtime import (
    base_model_source, choose_device, download_allowed, load_model, save_checkpoint, training_precision,
)
from cascadekit.engine.tokenizer import build_tokenizer, load_tokenizer
from cascadekit.stages import CHECKPOINT, Stage, run_stage
from cascadekit.world import generate_problems

#: Bumped when the same inputs would build other bytes (enters every key this module makes: stages.py).
RECIPE = 1
LOSS_LOG = "loss_log.json"


def pack(token_lists: Iterable[Sequence[int]], seq_len: int, eos_id: int) -> torch.Tensor:
    """Concatenate documents, each followed by EOS, and cut the stream into ``seq_len`` blocks.

    Every position is a training target (no padding is wasted); a block may
    start mid-document and hold several documents, which the model learns to
    separate at the EOS token. The incomplete tail block is dropped.
    """
    stream: list[int] = []
    for ids in token_lists:
        stream.extend(ids)
        stream.append(eos_id)
    n_blocks = len(stream) // seq_len
    return torch.tensor(stream[: n_blocks * seq_len], dtype=torch.long).view(n_blocks, seq_len)


class BlockDataset(torch.utils.data.Dataset):
    """Packed blocks as causal-LM examples (labels are the inputs; the model shifts them)."""

    def __init__(self, blocks: torch.Tensor):
        self.blocks = blocks

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.blocks[i], "labels": self.blocks[i]}


def mixture_texts(profile: Profile, mixture: Mapping[str, float], n: int, split: str,
                  contexts: Sequence[str] | None = None, bands: Bands | None = None,
                  shuffle_seed: int | None = None) -> list[str]:
    """``n`` training texts from ``split``, a ``mixture`` weight per op band, shuffled.

    The bands are the profile's unless ``bands`` (measured on a base) are given.
    The problems follow the data seed; the order ``shuffle_seed`` (default
    ``seed``, the base's: mid-training passes the training seed).
    """
    world = profile.world
    bands = bands or Bands.of_world(world)
    texts: list[str] = []
    for i, (range_name, weight) in enumerate(sorted(mixture.items())):
        count = round(n * weight)
        if count:
            problems = generate_problems(
                ops=bands.ops(range_name), contexts=tuple(contexts or world.contexts), n=count,
                seed=profile.seeds.data * 1000 + i, split=split, style=world.rendering,
            )
            texts.extend(p.training_text for p in problems)
    random.Random(profile.seed if shuffle_seed is None else shuffle_seed).shuffle(texts)
    return texts


def problems_for_budget(profile: Profile, tokenizer: PreTrainedTokenizerBase, mixture: Mapping[str, float],
                        tokens: int, split: str, bands: Bands | None = None) -> int:
    """How many distinct problems fill ``tokens`` once (``pretrain.problems`` caps it when set)."""
    sample = mixture_texts(profile, mixture, 200, split, bands=bands)
    mean = sum(len(ids) + 1 for ids in tokenizer(sample)["input_ids"]) / len(sample)
    needed = math.ceil(tokens / mean)
    cap = profile.pretrain.problems
    return min(needed, cap) if cap else needed


def training_blocks(profile: Profile, tokenizer: PreTrainedTokenizerBase, mixture: Mapping[str, float],
                    split: str, tokens: int, bands: Bands | None = None, seed: int | None = None) -> torch.Tensor:
    """Tokenized, packed blocks for one stage (repeated by the Trainer if fewer than the budget), shuffled by ``seed``."""
    n = problems_for_budget(profile, tokenizer, mixture, tokens, split, bands)
    texts = mixture_texts(profile, mixture, n, split, bands=bands, shuffle_seed=seed)
    return pack(tokenizer(texts)["input_ids"], profile.pretrain.seq_len, tokenizer.eos_token_id)


def training_arguments(cfg: PretrainConfig, out_dir: Path, max_steps: int, profile: Profile,
                       seed: int | None = None) -> TrainingArguments:
    """Trainer settings: AdamW, warmup then cosine to ``min_lr_ratio * lr``, clip 1.0.

    The Trainer's seed is ``seed``, by default the profile's ``seed``: a pretrained
    base's (mid-training passes the training seed).

    Device and precision come from :func:`cascadekit.engine.runtime.training_precision`
    (bf16 when the profile asks for bf16 and the device has it, bf16 autocast on
    the CPU with ``engine.precision: bf16-autocast``).
    """
    return TrainingArguments(
        output_dir=str(out_dir),
        max_steps=max_steps,
        per_device_train_batch_size=cfg.batch_size,
        learning_rate=cfg.lr,
        lr_scheduler_type="cosine_with_min_lr",
        lr_scheduler_kwargs={"min_lr_rate": cfg.min_lr_ratio},
        warmup_steps=cfg.warmup_ratio,  # a float below 1 is a fraction of max_steps
        weight_decay=cfg.weight_decay,
        max_grad_norm=cfg.max_grad_norm,
        **training_precision(profile),
        save_steps=cfg.save_steps,
        save_total_limit=2,
        logging_steps=max(1, max_steps // 200),
        report_to="none",
        seed=profile.seed if seed is None else seed,
        data_seed=profile.seed if seed is None else seed,
        dataloader_drop_last=True,
    )


class ProgressCallback(TrainerCallback):
    """One line per log event (step, tokens, loss, tokens/s) to a stream, for long background runs."""

    def __init__(self, tokens_per_step: int, stream=sys.stderr):
        self.tokens_per_step = tokens_per_step
        self.stream = stream
        self.start = time.perf_counter()
        self.first_step: int | None = None

    def on_step_end(self, args, state, control, **kwargs):
        if self.first_step is None:
            self.first_step, self.start = state.global_step, time.perf_counter()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs and self.first_step is not None:
            done = (state.global_step - self.first_step) * self.tokens_per_step
            rate = done / max(time.perf_counter() - self.start, 1e-9)
            print(f"step {state.global_step}/{state.max_steps} tokens {state.global_step * self.tokens_per_step:,} "
                  f"loss {logs['loss']:.4f} lr {logs.get('learning_rate', 0):.2e} {rate:,.0f} tok/s",
                  file=self.stream, flush=True)


def loss_log(log_history: list[dict], tokens_per_step: int) -> list[tuple[int, int, float]]:
    """``(step, tokens seen, loss)`` for every logged training loss (kept across resumes)."""
    return [(e["step"], e["step"] * tokens_per_step, e["loss"]) for e in log_history if "loss" in e]


_CHECKPOINT = re.compile(r"checkpoint-(\d+)")
TRAINER_STATE = "trainer_state.json"
_MAX_HEADER = 100 << 20  # safetensors' own limit on the JSON header


def _safetensors_problem(path: Path) -> str | None:
    """Why the safetensors file ``path`` is unusable (bad or truncated header, data cut short), or None."""
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            if size < 8:
                return f"{path.name} is shorter than a safetensors header"
            length = int.from_bytes(fh.read(8), "little")
            if length > min(size - 8, _MAX_HEADER):
                return f"{path.name} is truncated (its header runs past the end of the file)"
            header = json.loads(fh.read(length))
        if not isinstance(header, dict):
            return f"{path.name} has a header that is not a JSON object"
        end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as err:
        return f"{path.name} has an unreadable header ({type(err).__name__})"
    if 8 + length + end > size:
        return f"{path.name} is truncated ({size} bytes, its tensors end at {8 + length + end})"
    return None


def _torch_file_problem(path: Path) -> str | None:
    """Why a ``torch.save`` file (a zip archive) is unusable, or None; its end record is gone if it was cut short."""
    try:
        with zipfile.ZipFile(path):
            return None
    except (OSError, zipfile.BadZipFile, ValueError) as err:
        return f"{path.name} is truncated or not a torch.save archive ({type(err).__name__})"


def checkpoint_problem(folder: Path) -> str | None:
    """Why the Trainer checkpoint ``folder`` cannot be resumed from, or None if it looks whole.

    A checkpoint must hold a readable ``trainer_state.json`` (written last by the
    Trainer, so its absence means the save was cut short) and its weights: a
    ``model.safetensors`` whose header is intact and whose tensors fit in the file,
    a sharded ``model.safetensors.index.json`` with every shard intact, or a
    ``pytorch_model.bin`` archive. Optimizer, scheduler and RNG states, if present,
    must be whole archives.
    """
    folder = Path(folder)
    if folder.is_symlink() or not folder.is_dir():
        return "not a folder"
    state = folder / TRAINER_STATE
    if not state.is_file():
        return f"no {TRAINER_STATE} (the save was cut short)"
    try:
        data = json.loads(state.read_bytes())
        if not isinstance(data, dict) or not isinstance(data.get("global_step"), int):
            return f"{TRAINER_STATE} has no integer global_step"
    except (OSError, ValueError) as err:
        return f"{TRAINER_STATE} is unreadable ({type(err).__name__})"
    single, index, legacy = folder / "model.safetensors", folder / "model.safetensors.index.json", folder / "pytorch_model.bin"
    if single.is_file():
        problem = _safetensors_problem(single)
    elif index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_bytes())["weight_map"].values()))
            if not shards or not all(isinstance(s, str) and "/" not in s and s not in ("", ".", "..") for s in shards):
                raise ValueError("bad shard names")
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            return f"{index.name} is unreadable ({type(err).__name__})"
        missing = [s for s in shards if not (folder / s).is_file()]
        problem = (f"shard {missing[0]} is missing" if missing
                   else next(filter(None, (_safetensors_problem(folder / s) for s in shards)), None))
    elif legacy.is_file():
        problem = _torch_file_problem(legacy)
    else:
        return "no model weights (the save was cut short)"
    if problem:
        return problem
    for name in ("optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state.pth"):
        if (folder / name).is_file() and (problem := _torch_file_problem(folder / name)):
            return problem
    return None


def resume_checkpoint(run_dir: Path) -> Path | None:
    """The newest ``checkpoint-N`` in ``run_dir`` that :func:`checkpoint_problem` accepts, or None to start afresh.

    Each damaged checkpoint newer than it is reported with a warning and renamed
    ``damaged-checkpoint-N``, so that neither this nor the Trainer's rotation of old
    checkpoints (``save_total_limit``) picks it up again.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return None
    found = sorted(((int(m.group(1)), p) for p in run_dir.iterdir()
                    if (m := _CHECKPOINT.fullmatch(p.name)) and p.is_dir()), reverse=True)
    for _, folder in found:
        problem = checkpoint_problem(folder)
        if problem is None:
            return folder
        aside = folder.with_name(f"damaged-{folder.name}")
        try:
            if aside.is_dir() and not aside.is_symlink():
                shutil.rmtree(aside)
            elif aside.exists() or aside.is_symlink():
                aside.unlink()
            os.replace(folder, aside)
            where = f"moved to {aside.name}"
        except OSError as err:
            where = f"could not be moved aside ({err})"
        warnings.warn(f"skipping damaged checkpoint {folder}: {problem}; {where}", stacklevel=3)
    if found:
        warnings.warn(f"no usable checkpoint in {run_dir}: training starts afresh", stacklevel=3)
    return None


#: A model, or a function that loads it once the training arguments exist (see :func:`lm_trainer`).
ModelOrLoader = PreTrainedModel | Callable[[], PreTrainedModel]


def lm_trainer(model: ModelOrLoader, blocks: torch.Tensor, profile: Profile, run_dir: Path, max_steps: int,
               callbacks: Sequence[TrainerCallback] = (), cfg: PretrainConfig | None = None,
               seed: int | None = None) -> Trainer:
    """The Trainer of ``model`` on packed ``blocks`` for ``max_steps`` steps (:func:`training_arguments`).

    ``model`` may be a function that loads it: it is called after the training
    arguments exist, which is what lets DeepSpeed ZeRO-3 partition the weights as
    they load (``zero3_init_flag``) instead of every process loading them whole.
    """
    args = training_arguments(cfg or profile.pretrain, run_dir, max_steps, profile, seed)
    return Trainer(
        model=model if isinstance(model, torch.nn.Module) else model(),
        args=args,
        train_dataset=BlockDataset(blocks),
        data_collator=default_data_collator,
        callbacks=list(callbacks),
    )


def _train(trainer: Trainer, run_dir: Path, tokens_per_step: int) -> list[tuple[int, int, float]]:
    """Train, resuming from ``run_dir``'s last good checkpoint; the loss log."""
    resume = resume_checkpoint(run_dir)
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    return loss_log(trainer.state.log_history, tokens_per_step)


def _max_steps(cfg: PretrainConfig, tokens: int | None) -> tuple[int, int]:
    """``(max_steps, tokens_per_step)`` of a token budget (default ``cfg.tokens``)."""
    tokens_per_step = cfg.batch_size * cfg.seq_len
    return max(1, (tokens or cfg.tokens) // tokens_per_step), tokens_per_step


def train_lm(model: ModelOrLoader, blocks: torch.Tensor, profile: Profile, run_dir: Path,
             tokens: int | None = None, callbacks: Sequence[TrainerCallback] = (),
             cfg: PretrainConfig | None = None, seed: int | None = None) -> list[tuple[int, int, float]]:
    """Train ``model`` on packed ``blocks`` for a token budget; resume from ``run_dir``'s last good checkpoint.

    Returns the loss log. ``tokens`` defaults to ``profile.pretrain.tokens``, the
    Trainer's ``seed`` to the profile's ``seed`` (:func:`training_arguments`).
    ``model`` may be a loader (:func:`lm_trainer`).
    """
    cfg = cfg or profile.pretrain
    max_steps, tokens_per_step = _max_steps(cfg, tokens)
    run_dir.mkdir(parents=True, exist_ok=True)
    return _train(lm_trainer(model, blocks, profile, run_dir, max_steps, callbacks, cfg, seed), run_dir,
                  tokens_per_step)


def _save_stage(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, log: list, dest: Path) -> None:
    save_checkpoint(model, tokenizer, dest, files={LOSS_LOG: json.dumps(log)})


def train_stage(profile: Profile, model: ModelOrLoader, tokenizer: PreTrainedTokenizerBase, dest: Path,
                mixture: Mapping[str, float], split: str, tokens: int, run_dir: Path,
                callbacks: Sequence[TrainerCallback] = (), cfg: PretrainConfig | None = None,
                bands: Bands | None = None, seed: int | None = None) -> list[tuple[int, int, float]]:
    """Build one training stage's data, train (resuming if interrupted), save model + tokenizer + loss log to ``dest``.

    ``seed`` shuffles and trains (default the profile's ``seed``, a base's). ``model``
    may be a loader, called once the training arguments exist (:func:`lm_trainer`).
    """
    blocks = training_blocks(profile, tokenizer, mixture, split, tokens, bands, seed)
    cfg = cfg or profile.pretrain
    max_steps, tokens_per_step = _max_steps(cfg, tokens)
    run_dir.mkdir(parents=True, exist_ok=True)
    trainer = lm_trainer(model, blocks, profile, run_dir, max_steps, callbacks, cfg, seed)
    log = _train(trainer, run_dir, tokens_per_step)
    _save_stage(trainer.model, tokenizer, log, dest)
    shutil.rmtree(run_dir, ignore_errors=True)
    return log


def pretrain(profile: Profile, tokenizer: PreTrainedTokenizerBase, dest: Path, run_dir: Path,
             callbacks: Sequence[TrainerCallback] = ()) -> list[tuple[int, int, float]]:
    """Pretrain a fresh model on the in-distribution ``pretrain`` split; save it to ``dest``.

    A profile that names released weights (``model.pretrained``) starts from them,
    loaded once the training arguments exist; with ``pretrain.tokens`` 0 they are
    saved as they are, untrained.
    """
    def start() -> PreTrainedModel:
        return start_model(profile, tokenizer, placement=choose_device(profile))

    if base_model_source(profile) and not profile.pretrain.tokens:
        _save_stage(start(), tokenizer, [], dest)
        return []
    return train_stage(profile, start, tokenizer, dest, PRETRAIN_MIXTURE, "pretrain",
                       profile.pretrain.tokens, run_dir, callbacks)


def midtrain_config(cfg: PretrainConfig) -> PretrainConfig:
    """Mid-training's optimizer settings: pretraining's, with the peak learning rate where its schedule ended.

    Mid-training continues a converged model, so its warmup climbs only to
    ``lr * min_lr_ratio`` (then decays by the same cosine to ``min_lr_ratio`` of that).
    Restarting at pretraining's peak, ten times higher, is a jolt: in chapter
    06's first toy run a short mid-training at the peak rate left every mixed arm
    below both pure arms (kept in ``data/results/06_fixed_budget/peak-lr/``).
    """
    return dataclasses.replace(cfg, lr=cfg.lr * cfg.min_lr_ratio)


def midtrain(profile: Profile, checkpoint: Path, dest: Path, run_dir: Path, tokens: int,
             mixture: Mapping[str, float] = MIDTRAIN_MIXTURE,
             callbacks: Sequence[TrainerCallback] = (), bands: Bands | None = None) -> list[tuple[int, int, float]]:
    """Continue ``checkpoint`` on the ``midtrain`` split with a narrowed ``mixture`` over ``bands``; save to ``dest``.

    What a chapter trains, so shuffled and trained by the training seed (the base it starts from is not).
    The checkpoint loads after the training arguments exist (:func:`lm_trainer`).
    """
    tokenizer = load_tokenizer(checkpoint)
    return train_stage(profile, lambda: load_model(checkpoint, choose_device(profile)), tokenizer, dest, mixture, "midtrain", tokens, run_dir, callbacks,
                       cfg=midtrain_config(profile.pretrain), bands=bands, seed=profile.seeds.train)


def _extended(key: str, extra: Mapping[str, str | int]) -> str:
    """``key`` itself without ``extra``, else a key of the same length hashing both (so fixed keys stay fixed)."""
    if not extra:
        return key
    return hashlib.sha256(json.dumps([key, extra], sort_keys=True).encode()).hexdigest()[:len(key)]


def tokenizer_key(profile: Profile) -> str:
    """The Part I tokenizer's key: the sections it reads, and the data seed when it is not ``seed``."""
    return _extended(profile.hash("world", "tokenizer", "seed"), seed_inputs(profile, "data"))


def pretrain_key(profile: Profile) -> str:
    """The pretraining key: the sections it reads, the data seed when it is not ``seed`` and the precision
    when it is not fp32 (keys as before otherwise; a base never reads the training seed)."""
    key = profile.hash("world", "tokenizer", "model", "pretrain", "seed")
    if precision := precision_inputs(profile):  # the key precision alone gave (built before the seeds)
        key = _extended(key, precision)
    return _extended(key, seed_inputs(profile, "data"))


def cached_tokenizer(profile: Profile) -> PreTrainedTokenizerBase:
    """The profile's tokenizer from the artifact cache, trained on first use.

    A profile that names released weights (``model.pretrained``) uses their tokenizer.
    """
    if source := base_model_source(profile):
        return load_tokenizer(source, allow_download=download_allowed(profile))
    def build(folder: Path) -> dict:
        build_tokenizer(profile).save_pretrained(folder)
        return {}

    stage = Stage("tokenizer", {**profile.sections("world", "tokenizer", "seed"), **seed_inputs(profile, "data")},
                  build, tokenizer_key(profile), recipe=RECIPE)
    return load_tokenizer(run_stage(stage).checkpoint)


def cached_pretrained(profile: Profile, callbacks: Sequence[TrainerCallback] = (), rebuild: bool = False) -> Path:
    """The folder of the profile's pretrained checkpoint (model, tokenizer, loss log), built on first use.

    An interrupted build resumes from the Trainer checkpoints kept under
    ``<cache>/runs/pretrain-<key>`` until it completes. ``rebuild`` builds it even
    when it is cached or shipped.
    """
    key = pretrain_key(profile)
    tokenizer = cached_tokenizer(profile)
    run_dir = cache_root() / "runs" / f"pretrain-{key}"

    def build(folder: Path) -> dict:
        pretrain(profile, tokenizer, folder, run_dir, callbacks)  # its loss log is a file of the checkpoint
        return {}

    inputs = {**profile.sections("world", "tokenizer", "model", "pretrain", "seed"), **precision_inputs(profile),
              **seed_inputs(profile, "data")}
    stage = Stage("pretrain", inputs, build, key, recipe=RECIPE, holds=CHECKPOINT)
    return run_stage(stage, rebuild=rebuild).checkpoint


def read_loss_log(checkpoint: Path) -> list[tuple[int, int, float]]:
    return [tuple(row) for row in json.loads((Path(checkpoint) / LOSS_LOG).read_text())]
