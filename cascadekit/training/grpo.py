"""Strict on-policy GRPO through TRL's ``GRPOTrainer``, the same code on a CPU and on GPU nodes.

The recipe shared by the Interplay paper and the cascade's RL stages:

- **Group-relative advantages.** Each prompt gets ``G`` rollouts; a rollout's
  advantage is its reward minus the group mean, divided by the group's standard
  deviation (:func:`grpo_advantages`). No value network.
- **Strict on-policy.** Every rollout batch is used for exactly one optimizer
  step (``num_iterations=1``, and the generation batch is one optimizer step's
  batch), so the policy that sampled the tokens is the policy being updated and
  the importance ratio ``pi / pi_old`` is exactly 1. PPO's clipping then never
  fires; it is kept in :func:`token_level_loss` because it is the general form.
- **Token-level loss.** The loss is averaged over all completion tokens of the
  batch (TRL's ``loss_type="dapo"``), not per sequence first, so long and short
  completions weigh by their tokens.
- **KL off by default.** ``beta = rl.kl_beta`` (the stage's RL settings): the cascade uses no KL;
  the Interplay paper used 1e-3 (its ``paper`` profile sets it), which also runs
  a reference model (``g = 1`` in :mod:`cascadekit.engine.compute`).
- Rollout temperature from the profile (1.0 in both papers), group size from the
  profile (the Interplay paper used 6 rollouts).

At GPU scale the same :func:`build_grpo_config` turns on vLLM for rollouts:
``colocate`` (vLLM shares the training GPUs) on one node, ``server`` (a separate
``vllm serve`` process, :mod:`cascadekit.launch`) across nodes.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from collections import defaultdict
from dataclasses import dataclass, field
from functools import wraps
from typing import Any, Callable, Sequence

import pandas as pd
import torch
from datasets import Dataset
from accelerate import PartialState
from peft import PeftModel
from transformers import PreTrainedModel, PreTrainedTokenizerBase, ProgressCallback, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from cascadekit.profiles import EngineConfig, Profile, RLConfig
from cascadekit.engine.generation import grpo_arguments
from cascadekit.engine.runtime import (
    choose_device, lora_config, refuse_cpu_trl, save_checkpoint, training_precision,
)
from cascadekit.training.rollouts import RolloutFunc, choose_rollouts
from cascadekit.training.trimmed import trim_padding

#: TRL's constant in the advantage denominator, ``(r - mean) / (std + 1e-4)``.
ADVANTAGE_EPS = 1e-4


def micro_batches(rl: RLConfig, engine: EngineConfig, num_processes: int,
                  gradient_accumulation_steps: int | None = None) -> tuple[int, int]:
    """``(per-process micro-batch, accumulation steps)`` of one GRPO step, whose batch they never change.

    The step's ``prompts_per_step x group_size`` completions split over the
    processes; ``engine.rl_micro_batch`` (when above 0) cuts each process's share
    into micro-batches of that many completions and the accumulation follows.
    Otherwise the accumulation is ``gradient_accumulation_steps`` (default
    ``engine.accumulation``, what ``cascadekit launch --accumulation`` sets). Asking
    for both, or a batch that does not split evenly, is one ValueError.
    """
    completions = rl.prompts_per_step * rl.group_size
    accumulation = engine.accumulation if gradient_accumulation_steps is None else gradient_accumulation_steps
    where = f"{rl.prompts_per_step} prompts x {rl.group_size} rollouts = {completions} completions per step"
    if engine.rl_micro_batch:
        if accumulation != 1:
            raise ValueError(f"engine.rl_micro_batch={engine.rl_micro_batch} sets GRPO's accumulation itself; "
                             f"{accumulation} accumulation steps were asked too: set one of them "
                             f"(engine.rl_micro_batch=0 to give the accumulation)")
        share, rest = divmod(completions, num_processes)
        if rest or share % engine.rl_micro_batch:
            raise ValueError(f"{where} do not split over {num_processes} training processes in micro-batches of "
                             f"engine.rl_micro_batch={engine.rl_micro_batch}")
        return engine.rl_micro_batch, share // engine.rl_micro_batch
    if completions % (num_processes * accumulation):
        raise ValueError(f"{where} do not split evenly over {num_processes} processes x {accumulation} "
                         f"accumulation steps")
    return completions // (num_processes * accumulation), accumulation


def build_grpo_config(
    profile: Profile,
    output_dir: str,
    *,
    rl: RLConfig | None = None,
    max_steps: int | None = None,
    num_processes: int | None = None,
    gradient_accumulation_steps: int | None = None,
    **overrides: Any,
) -> GRPOConfig:
    """The strict on-policy GRPO configuration for ``profile``; ``overrides`` go to ``GRPOConfig`` last.

    ``rl`` is the stage's RL settings, the profile's ``rl`` when not given (a
    stage with its own length limit, learning rate or temperature passes its own).

    One optimizer step sees ``prompts_per_step * group_size`` completions, split
    over ``num_processes`` devices and into micro-batches (:func:`micro_batches`:
    ``engine.rl_micro_batch`` completions each, or ``gradient_accumulation_steps``
    of them, ``engine.accumulation`` when not given: what ``cascadekit launch
    --accumulation`` sets); TRL generates them all at once (``steps_per_generation`` equals
    the accumulation steps), so each rollout batch makes exactly one update.
    ``max_steps`` defaults to ``rl.samples / rl.prompts_per_step`` (``samples``
    counts prompts, each with ``group_size`` rollouts). ``num_processes``
    defaults to the job's (``WORLD_SIZE``, as ``accelerate launch`` and ``torchrun``
    set it; one process without it).

    Device and precision come from :func:`cascadekit.engine.runtime.training_precision` (a GPU
    profile on a machine without CUDA runs on the CPU in float32, or under bf16
    autocast with ``engine.precision: bf16-autocast``: the update half of the step). vLLM generates
    the rollouts when ``engine.vllm`` says so and it can (:func:`cascadekit.engine.generation.grpo_arguments`:
    CUDA and the vllm package, else transformers with a warning): ``colocate`` inside the
    training processes, ``server`` from a ``vllm serve`` process started beside the trainer
    (:mod:`cascadekit.launch`, found through ``CASCADEKIT_VLLM_SERVER``). TRL then also recomputes the trainer's log-probabilities of the
    sampled tokens to correct vLLM's numerical mismatch (its
    ``vllm_importance_sampling_correction``); the policy ratio stays 1.
    """
    rl = rl or profile.rl
    if num_processes is None:  # the launcher's processes (torchrun/accelerate set WORLD_SIZE), else one
        num_processes = int(os.environ.get("WORLD_SIZE", 1))
    per_device, accumulation = micro_batches(rl, profile.engine, num_processes, gradient_accumulation_steps)
    placement = choose_device(profile)
    refuse_cpu_trl(placement, "GRPO")
    on_gpu = placement.on_gpu
    kwargs: dict[str, Any] = dict(
        output_dir=output_dir,
        # strict on-policy: one generation batch = one optimizer step, used once
        num_generations=rl.group_size,
        per_device_train_batch_size=per_device,
        gradient_accumulation_steps=accumulation,
        steps_per_generation=accumulation,
        num_iterations=1,
        # objective
        loss_type="dapo",  # token-level aggregation over the whole batch
        scale_rewards="group",  # (r - group mean) / (group std + 1e-4)
        beta=rl.kl_beta,
        # sampling
        temperature=rl.temperature,
        top_p=1.0,
        top_k=0,
        max_completion_length=rl.max_completion_length,
        # optimisation
        learning_rate=rl.lr,
        max_steps=max_steps if max_steps is not None else max(1, rl.samples // rl.prompts_per_step),
        seed=profile.seeds.train,
        # hardware
        **training_precision(profile),
        # the one activation-checkpointing switch in every mode: fsdp.yaml leaves FSDP's off (transformers
        # refuses both; cascadekit.launch.validate_config holds the shipped config to it)
        gradient_checkpointing=on_gpu,
        # rollouts: engine.vllm alone, with its memory knobs (cascadekit.engine.generation)
        **grpo_arguments(profile),
        # bookkeeping: a curve point per step, checkpoints left to the caller
        logging_steps=1,
        save_strategy="no",
        report_to="none",
    )
    kwargs.update(overrides)
    return GRPOConfig(**kwargs)


# ---------------------------------------------------------------------------
# The math the notebook shows
# ---------------------------------------------------------------------------


def grpo_advantages(rewards: torch.Tensor, group_size: int, eps: float = ADVANTAGE_EPS) -> torch.Tensor:
    """Group-relative advantages ``A_i = (r_i - mean_g) / (std_g + eps)``, as TRL 1.16 computes them.

    ``rewards`` is flat, ordered group by group (the ``G`` rollouts of a prompt
    are adjacent). ``std_g`` is the unbiased (Bessel-corrected, ``G - 1``)
    standard deviation of the group, TRL's default ``scale_rewards="group"``. A
    group whose rollouts all score the same gets advantage 0 everywhere: it
    teaches nothing, which is what dynamic sampling removes. (TRL also leaves
    out rewards that a reward function returned as ``None``; not shown here.)
    """
    grouped = rewards.view(-1, group_size)
    mean = grouped.mean(dim=1, keepdim=True)
    std = grouped.std(dim=1, keepdim=True, unbiased=True)
    return ((grouped - mean) / (std + eps)).view(-1)


def token_level_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    ref_logprobs: torch.Tensor | None = None,
    beta: float = 0.0,
    kl_bias_correction: bool = True,
) -> torch.Tensor:
    """The clipped GRPO objective, averaged over every completion token of the batch.

    With ``ratio_t = exp(logp_t - old_logp_t)`` and one advantage per sequence,
    each token contributes ``-min(ratio_t A, clip(ratio_t, 1-eps_low, 1+eps_high) A)``,
    plus ``beta * ratio_t * KL_t`` when a reference model is used, with the
    ``k3`` estimator ``KL_t = exp(ref - logp) - (ref - logp) - 1``; the sum over
    unmasked tokens is divided by their count. Multiplying KL by the ratio is
    TRL 1.16's default (``use_bias_correction_kl``, after DeepSeek-V3.2): its
    value is 1 on-policy, but its gradient makes the KL gradient the unbiased
    reverse-KL gradient (``kl_bias_correction=False`` drops it, the original
    GRPO form).

    On-policy, ``old_logprobs`` is ``logprobs.detach()``: the ratio is 1, the
    value of the policy term is just ``-mean(A)`` over tokens, and its gradient
    is ``-sum_t A grad(logp_t) / n_tokens``, the REINFORCE gradient with a
    group baseline. Shapes: ``(B, T)`` for token tensors, ``(B,)`` for advantages.
    """
    advantages = advantages.unsqueeze(1)
    ratio = torch.exp(logprobs - old_logprobs)
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    per_token = -torch.min(ratio * advantages, clipped * advantages)
    if beta:
        if ref_logprobs is None:
            raise ValueError("beta > 0 needs ref_logprobs")
        delta = ref_logprobs - logprobs
        kl = torch.exp(delta) - delta - 1
        per_token = per_token + beta * (kl * ratio if kl_bias_correction else kl)
    return (per_token * mask).sum() / mask.sum().clamp(min=1.0)


def completion_logprobs(
    model: PreTrainedModel,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float = 1.0,
) -> torch.Tensor:
    """``log pi(token | prefix)`` for every completion token, shape ``(B, T_completion)``.

    Prompts are left-padded and completions right-padded, as TRL lays them out.
    """
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
    n = completion_ids.size(1)
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, -n - 1 : -1]
    logps = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logps.gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)


# ---------------------------------------------------------------------------
# Where the time goes
# ---------------------------------------------------------------------------


PHASES = ("generate", "score", "update", "other")


class PhaseTimer(TrainerCallback):
    """Wall-clock time of each optimizer step, split into generate / score / update / other.

    Method: the trainer's ``_generate`` (tokenise, sample, decode) and
    ``_calculate_rewards`` (every reward function, sync or async) are wrapped
    with ``time.perf_counter`` on the trainer instance, and so is the end of
    ``_generate_and_score_completions``. The callback stamps the step's start
    (``on_step_begin``) and end (``on_step_end``). ``update`` is the time from
    the end of scoring to the end of the step: the policy's forward and backward
    pass on the completions, gradient clipping and the optimizer step.
    ``other`` is the rest of the step: reference/old log-probabilities when they
    are needed, advantages, and TRL's bookkeeping. The four add up to ``step``.
    These wrap TRL 1.16 private methods; :meth:`attach` fails loudly if they move.
    """

    def __init__(self) -> None:
        self.rows: list[dict[str, float]] = []
        self._phase: dict[str, float] = defaultdict(float)
        self._step_start = 0.0
        self._scored_at = 0.0

    def attach(self, trainer: GRPOTrainer) -> None:
        """Instrument ``trainer`` (call before ``train``)."""
        trainer._generate = self._timed("generate", trainer._generate)
        trainer._calculate_rewards = self._timed("score", trainer._calculate_rewards)
        inner = trainer._generate_and_score_completions

        @wraps(inner)
        def mark_scored(*args: Any, **kwargs: Any) -> Any:
            out = inner(*args, **kwargs)
            self._scored_at = time.perf_counter()
            return out

        trainer._generate_and_score_completions = mark_scored
        trainer.add_callback(self)

    def _timed(self, phase: str, func: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(func)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                self._phase[phase] += time.perf_counter() - start

        return timed

    def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001 - Trainer callback signature
        self._phase.clear()
        self._step_start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
        end = time.perf_counter()
        step = end - self._step_start
        update = end - max(self._scored_at, self._step_start)
        generate, score = self._phase["generate"], self._phase["score"]
        self.rows.append(
            {"step": state.global_step, "step_s": step, "generate_s": generate, "score_s": score,
             "update_s": update, "other_s": step - generate - score - update}
        )

    def table(self) -> pd.DataFrame:
        """One row per optimizer step, seconds per phase."""
        return pd.DataFrame(self.rows, columns=["step", "step_s", *(f"{phase}_s" for phase in PHASES)])


def phase_shares(timings: pd.DataFrame, skip: int = 1) -> dict[str, float]:
    """Each phase's share of the summed step time of a :class:`PhaseTimer` table.

    The first ``skip`` rows (warm-up steps) are left out.
    """
    table = timings.iloc[skip:]
    total = table["step_s"].sum()
    return {phase: float(table[f"{phase}_s"].sum() / total) for phase in PHASES}


# ---------------------------------------------------------------------------
# Training and its curves
# ---------------------------------------------------------------------------

#: Log-history keys of the curves a chapter plots, and their column names.
CURVE_COLUMNS = {
    "reward": "reward",
    "reward_std": "reward_std",
    "frac_reward_zero_std": "frac_reward_zero_std",
    "completions/mean_length": "completion_length",
    "completions/clipped_ratio": "clipped_ratio",
    "entropy": "entropy",
    "kl": "kl",
    "loss": "loss",
    "grad_norm": "grad_norm",
    "learning_rate": "learning_rate",
    "step_time": "step_time",
}


def training_curves(log_history: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """A tidy table, one row per logged training step, from a Trainer's ``log_history``.

    Columns: ``step``, then ``reward``, ``frac_reward_zero_std`` (the share of
    groups with no learning signal), ``completion_length``, ``entropy`` and the
    other :data:`CURVE_COLUMNS` that were logged, then ``reward/<func>`` per
    reward function. With KL off and one update per batch the loss is close to
    0 by design: watch reward and ``frac_reward_zero_std``.
    """
    rows = []
    for entry in log_history:
        if "reward" not in entry:  # the final summary and evaluation entries
            continue
        row: dict[str, Any] = {"step": entry["step"]}
        row.update({col: entry[key] for key, col in CURVE_COLUMNS.items() if key in entry})
        row.update(
            {f"reward/{key[len('rewards/'):-len('/mean')]}": value for key, value in entry.items()
             if key.startswith("rewards/") and key.endswith("/mean")}
        )
        rows.append(row)
    return pd.DataFrame(rows)


@dataclass
class GRPOResult:
    """What :func:`train_grpo` returns: the trained model, its curves and where the time went."""

    model: PreTrainedModel
    log_history: list[dict[str, Any]]
    curves: pd.DataFrame
    timings: pd.DataFrame
    train_seconds: float
    config: GRPOConfig = field(repr=False)


RewardFunc = Callable[..., list[float | None]]


class RewardProgress(ProgressCallback):
    """The Trainer's progress bar, showing the latest reward instead of printing every log line.

    Logging every step would otherwise write one dictionary per step into a
    notebook's output; the full history stays in ``log_history``.
    """

    def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001 - Trainer callback signature
        if self.training_bar is not None and logs and "reward" in logs:
            self.training_bar.set_postfix(
                reward=f"{logs['reward']:.3f}", zero_std=f"{logs.get('frac_reward_zero_std', float('nan')):.2f}"
            )


def ensure_reference_checkpoint(model: PreTrainedModel, output_dir: str) -> None:
    """Give an in-memory model a checkpoint TRL can load its KL reference from.

    With a KL penalty and full fine-tuning, TRL 1.16 builds the reference model
    by reloading ``model.config._name_or_path``. A model built from a config (or
    loaded, then changed, in the same session) has no such checkpoint, so the
    initial policy is saved under ``output_dir/reference`` and named there. A
    model whose name is already a local checkpoint is trusted as it is.
    """
    if Path(model.config._name_or_path or "/nonexistent").joinpath("config.json").is_file():
        return
    path = Path(output_dir) / "reference"
    state = PartialState()
    with state.main_process_first():
        if state.is_main_process:
            save_checkpoint(model, None, path)  # a checkpoint cut mid-save never sits under the real name
    model.config._name_or_path = str(path)


def make_grpo_trainer(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts_dataset: Dataset,
    reward_funcs: RewardFunc | Sequence[RewardFunc],
    config: GRPOConfig,
    *,
    use_lora: bool = False,
    callbacks: Sequence[TrainerCallback] = (),
    rollout_func: RolloutFunc | None = None,
    kit_forward: bool = False,
) -> GRPOTrainer:
    """A ``GRPOTrainer`` for ``config``; ``prompts_dataset`` needs a ``prompt`` column.

    Other columns (such as ``gold``) reach the reward functions as keyword
    arguments, one value per completion. The progress bar shows the reward
    (:class:`RewardProgress`) rather than printing each step's logs.
    """
    if config.beta and not use_lora:
        ensure_reference_checkpoint(model, config.output_dir)
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=list(reward_funcs) if isinstance(reward_funcs, Sequence) else reward_funcs,
        args=config,
        train_dataset=prompts_dataset,
        # TRL wraps the model (cascadekit.engine.runtime.with_lora's adapter), unless it came with one (QLoRA, Unsloth)
        peft_config=lora_config() if use_lora and not isinstance(model, PeftModel) else None,
        callbacks=list(callbacks),
        rollout_func=rollout_func,  # None: TRL's own generate (or vLLM); engine.rollouts=kit: cascadekit.training.rollouts
    )
    if kit_forward:  # engine.training_forward=kit: each prompt once, the batch's padding skipped
        trim_padding(trainer)
    if not config.disable_tqdm:
        trainer.remove_callback(ProgressCallback)
        trainer.add_callback(RewardProgress)
    return trainer


def train_grpo(
    model: PreTrainedModel | Callable[[], PreTrainedModel],
    tokenizer: PreTrainedTokenizerBase,
    prompts_dataset: Dataset,
    reward_funcs: RewardFunc | Sequence[RewardFunc],
    profile: Profile,
    output_dir: str,
    *,
    rl: RLConfig | None = None,
    max_steps: int | None = None,
    reward_weights: Sequence[float] | None = None,
    callbacks: Sequence[TrainerCallback] = (),
    hooks: Sequence[Callable[[GRPOTrainer], None]] = (),
    **config_overrides: Any,
) -> GRPOResult:
    """Run strict on-policy GRPO on ``prompts_dataset`` with ``rl``, the stage's RL settings (the profile's by default).

    Progress bars come from the Trainer. ``reward_weights`` weighs several
    reward functions (TRL sums them); ``config_overrides`` go to
    :func:`build_grpo_config`. Each of ``hooks`` is called with the trainer before
    training (e.g. :meth:`cascadekit.training.async_rewards.StreamingRewards.attach`).
    The model is trained in place (with LoRA when ``rl.use_lora``, in which
    case ``result.model`` is the PEFT model). ``model`` may be a function that
    loads it: it is called once the training arguments exist, so DeepSpeed ZeRO-3
    partitions the weights as they load instead of every process loading them whole.
    """
    rl = rl or profile.rl
    if reward_weights is not None:
        config_overrides["reward_weights"] = list(reward_weights)
    config = build_grpo_config(profile, output_dir, rl=rl, max_steps=max_steps, **config_overrides)
    model = model if isinstance(model, torch.nn.Module) else model()
    trainer = make_grpo_trainer(
        model, tokenizer, prompts_dataset, reward_funcs, config, use_lora=rl.use_lora, callbacks=callbacks,
        rollout_func=choose_rollouts(profile, rl), kit_forward=profile.engine.training_forward == "kit",
    )
    timer = PhaseTimer()
    timer.attach(trainer)
    for hook in hooks:
        hook(trainer)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    history = list(trainer.state.log_history)
    return GRPOResult(
        model=trainer.model,
        log_history=history,
        curves=training_curves(history),
        timings=timer.table(),
        train_seconds=seconds,
        config=config,
    )
