"""Multi-domain on-policy distillation (MOPD): the student samples, each prompt's domain teacher scores every token.

The follow-up paper (Nemotron-Cascade 2) ends its cascade's domain-wise RL with
MOPD: the student writes its own answer to a prompt, and the strongest
intermediate checkpoint *for that prompt's domain* scores every token of it.
The loss is a per-token divergence between the two next-token distributions on
the student's own prefixes, averaged over every completion token of the batch:

    L = (1 / N) * sum_{i, t} D( pi_student(. | x_i, y_i,<t) , pi_teacher(d_i)(. | x_i, y_i,<t) )

with ``D`` the reverse KL ``KL(student || teacher)`` (the paper's choice:
mode-seeking, so the student drops what the teacher would not write) or, as
the control arm, the forward KL ``KL(teacher || student)`` (mass-covering).
Supervision is dense (every token gets a target distribution) where RL's
reward is one number per answer.

TRL 1.16's ``DistillationTrainer`` is exactly this for one teacher: fully
on-policy sampling, ``beta`` selecting the divergence (0 forward, 1 reverse),
a token-level loss over the batch, the chunked divergence that never
materialises the vocabulary logits. What the kit adds, and why:

* **A teacher per domain** (:class:`RoutedDistillationTrainer`). Each example
  carries its ``domain``; the trainer computes the loss once per teacher over
  that teacher's rows (TRL's own ``_compute_loss``, the teacher swapped in),
  each divided by the batch's whole token count, so the sum is the batch's
  token-level mean exactly as one teacher would give it. At toy size every
  teacher fits in memory beside the student.
* **Equal rollouts to GRPO.** GRPO samples ``group_size`` answers per prompt;
  TRL's distillation samples one. Each prompt is repeated ``group_size`` times
  (in order), so a MOPD step sees the same prompts and the same number of
  sampled answers as a GRPO step of the same RL settings.
* **A cached stage** (:func:`mopd_stage`), keyed by the student's and the
  teachers' keys, the prompts and the settings, with per-step curves
  (the loss, which is the mean divergence, and each domain's own).

:func:`select_teachers` picks each domain's teacher from validation scores
(the chapters score the candidates on a validation split, never on the
evaluation suite). Where the kit departs from the paper: the paper's teachers
are its best intermediate checkpoints per domain; here they are the six cascade
stages, judged on each domain's toy validation prompts.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from datasets import Dataset
from transformers import PreTrainedModel
from trl import DistillationConfig, DistillationTrainer

from cascadekit.chat import stop_token_ids
from cascadekit.domains import check_record, prompt_text, records_digest
from cascadekit.engine.runtime import choose_device, load_model, load_tokenizer, lora_config, save_checkpoint
from cascadekit.engine.runtime import training_precision
from cascadekit.engine.trainable import engine_settings
from cascadekit.profiles import Profile, RLConfig, precision_inputs, seed_inputs
from cascadekit.stages import CHECKPOINT, Stage, StageOutput, content_id, run_stage

#: Bumped when the same inputs would build other bytes (enters every key this module makes: stages.py).
RECIPE = 1

#: TRL's ``beta`` for each divergence the kit names.
DIVERGENCES = {"reverse": 1.0, "forward": 0.0}
#: The per-row tensors of a TRL distillation batch (text only) that a domain's slice of it keeps.
ROW_TENSORS = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "tool_mask")


# ---------------------------------------------------------------------------
# The math the notebook shows
# ---------------------------------------------------------------------------


def token_divergence(student_logits: torch.Tensor, teacher_logits: torch.Tensor, mask: torch.Tensor,
                     divergence: str = "reverse", temperature: float = 1.0) -> torch.Tensor:
    """The batch's mean per-token divergence between student and teacher, over the unmasked tokens.

    ``reverse``: ``KL(p_s || p_t) = sum_v p_s(v) (log p_s(v) - log p_t(v))``, the
    student's expectation of how much more likely it finds its own tokens than
    the teacher does; ``forward``: ``KL(p_t || p_s)``. Logits are ``(B, T, V)``
    (the distributions over the next token at each completion position), the
    mask ``(B, T)``; both distributions are taken at ``temperature``. This is
    what TRL's chunked kernel computes with ``beta`` 1 or 0 (the tests hold
    them equal), written out to be read.
    """
    if divergence not in DIVERGENCES:
        raise ValueError(f"unknown divergence {divergence!r}: use one of {', '.join(DIVERGENCES)}")
    log_s = torch.log_softmax(student_logits.float() / temperature, dim=-1)
    log_t = torch.log_softmax(teacher_logits.float() / temperature, dim=-1)
    if divergence == "reverse":
        per_token = (log_s.exp() * (log_s - log_t)).sum(-1)
    else:
        per_token = (log_t.exp() * (log_t - log_s)).sum(-1)
    mask = mask.float()
    return (per_token * mask).sum() / mask.sum().clamp(min=1.0)


# ---------------------------------------------------------------------------
# Teachers
# ---------------------------------------------------------------------------


def select_teachers(scores: Mapping[str, Mapping[str, float]], domains: Sequence[str]) -> dict[str, str]:
    """Each domain's teacher: the candidate with the highest validation score on that domain.

    ``scores`` maps each candidate (a cascade stage, in cascade order) to its
    mean validation score per domain. A tie goes to the later candidate: the
    one closest to the student, whose samples the teacher then scores on
    familiar ground. A domain no candidate was scored on is a ValueError.
    """
    if not scores:
        raise ValueError("no candidate teachers to choose from")
    chosen = {}
    for domain in domains:
        scored = [(float(s[domain]), i, name) for i, (name, s) in enumerate(scores.items()) if domain in s]
        if not scored:
            raise ValueError(f"no candidate teacher was scored on domain {domain!r}")
        chosen[domain] = max(scored)[2]
    return chosen


def select_single_teacher(scores: Mapping[str, Mapping[str, float]], domains: Sequence[str],
                          exclude: str = "") -> str:
    """The one teacher of the routing control: the candidate with the best mean validation score over ``domains``.

    ``exclude`` (the student) is left out: a student taught by itself has zero loss
    everywhere and never moves, which would make the control say nothing. A tie
    goes to the later candidate, as in :func:`select_teachers`.
    """
    ranked = [(sum(float(s[d]) for d in domains) / len(domains), i, name)
              for i, (name, s) in enumerate(scores.items()) if name != exclude and all(d in s for d in domains)]
    if not ranked:
        raise ValueError(f"no candidate teacher other than {exclude!r} was scored on every domain")
    return max(ranked)[2]


class RoutedDistillationTrainer(DistillationTrainer):
    """TRL's on-policy distillation with one teacher per domain: each example is scored by its domain's teacher.

    ``teachers`` are the distinct teacher models; ``route`` maps a dataset
    ``domain`` to the index of its teacher. Generation, the batch layout and the
    divergence are TRL's; the kit adds the routing (:meth:`_compute_loss`) and a
    per-domain divergence in the logs (``kl/<domain>``).
    """

    def __init__(self, model: PreTrainedModel, teachers: Sequence[PreTrainedModel], route: Mapping[str, int],
                 **kwargs: Any):
        if not teachers or sorted(set(route.values())) != list(range(len(teachers))):
            raise ValueError("every teacher needs a domain routed to it, and every route a teacher")
        super().__init__(model=model, teacher_model=teachers[0], **kwargs)
        self.teachers = [self.teacher_model] + [self.accelerator.prepare_model(t, evaluation_mode=True)
                                                for t in teachers[1:]]
        self.route = dict(route)

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        unknown = sorted({x["domain"] for x in inputs} - set(self.route))
        if unknown:
            raise ValueError(f"no teacher for domain {unknown[0]!r}: routed are {', '.join(self.route)}")
        output = super()._generate_and_score_completions(inputs)
        output["domain"] = [x["domain"] for x in inputs]  # a list: TRL's shuffle and split carry it with the rows
        return output

    def _compute_loss(self, unwrapped_student: PreTrainedModel, inputs: dict[str, Any],
                      num_items_in_batch: torch.Tensor | int | None):
        """TRL's loss once per domain over its rows, against its teacher, each over the whole batch's token count.

        Dividing every part by the batch's count (not its own) makes their sum the
        token-level mean over the batch, as one teacher would give it.
        """
        mask = inputs["completion_mask"] * inputs.get("tool_mask", 1)
        total = mask.sum() if num_items_in_batch is None else num_items_in_batch
        mode = "train" if self.model.training else "eval"
        loss = entropy = valid = 0
        for domain in dict.fromkeys(inputs["domain"]):
            rows = torch.tensor([d == domain for d in inputs["domain"]], device=mask.device)
            part = {k: v[rows] for k, v in inputs.items() if k in ROW_TENSORS}
            self.teacher_model = self.teachers[self.route[domain]]
            part_loss, part_entropy, part_valid = super()._compute_loss(unwrapped_student, part, total)
            loss, entropy, valid = loss + part_loss, entropy + part_entropy, valid + part_valid
            self._metrics[mode][f"kl/{domain}"].append(
                float(part_loss.detach()) * float(total) / max(float(part_valid), 1.0))
        self.teacher_model = self.teachers[0]
        return loss, entropy, valid


# ---------------------------------------------------------------------------
# The stage
# ---------------------------------------------------------------------------


def distillation_dataset(records: Sequence[Mapping[str, Any]], repeats: int) -> Dataset:
    """``prompt`` (rendered, no pre-filled think block) and ``domain``, each record ``repeats`` times in a row."""
    prompts, names = [], []
    for record in map(check_record, records):
        if record.get("tools"):
            raise ValueError(f"{record['domain']}: a tool-calling record needs a multi-turn rollout, "
                             f"which distillation here does not do")
        prompts += [prompt_text(record)] * repeats
        names += [record["domain"]] * repeats
    return Dataset.from_dict({"prompt": prompts, "domain": names})


def build_distillation_config(profile: Profile, output_dir: str, rl: RLConfig, divergence: str, steps: int,
                              **overrides: Any) -> DistillationConfig:
    """TRL's distillation config for one MOPD stage: GRPO's batch (``prompts_per_step x group_size`` samples a step).

    Sampling temperature, length limit and learning rate are the RL settings', the
    seed the training seed's; ``divergence`` picks TRL's ``beta``. Every sample is used for one
    update (TRL's distillation generates once per optimizer step).
    """
    if divergence not in DIVERGENCES:
        raise ValueError(f"unknown divergence {divergence!r}: use one of {', '.join(DIVERGENCES)}")
    accumulation = profile.engine.accumulation
    samples = rl.prompts_per_step * rl.group_size
    if samples % accumulation:
        raise ValueError(f"{samples} samples per step do not split over {accumulation} accumulation steps")
    on_gpu = choose_device(profile).on_gpu
    kwargs: dict[str, Any] = dict(
        output_dir=output_dir, per_device_train_batch_size=samples // accumulation,
        gradient_accumulation_steps=accumulation, beta=DIVERGENCES[divergence], temperature=rl.temperature,
        top_p=1.0, top_k=0, max_completion_length=rl.max_completion_length, learning_rate=rl.lr, max_steps=steps,
        seed=profile.seeds.train, shuffle_dataset=False, **training_precision(profile), gradient_checkpointing=on_gpu,
        logging_steps=1, save_strategy="no", report_to="none",
    )
    kwargs.update(overrides)
    return DistillationConfig(**kwargs)


#: Log-history keys of a MOPD stage's curves, and their column names.
CURVE_COLUMNS = {"loss": "kl", "entropy": "entropy", "completions/mean_length": "completion_length",
                 "completions/clipped_ratio": "clipped_ratio", "learning_rate": "learning_rate",
                 "step_time": "step_time", "num_tokens": "tokens_seen", "grad_norm": "grad_norm"}


def distillation_curves(log_history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per logged step: the mean divergence (``kl``, TRL's loss), each domain's, length, entropy."""
    rows = []
    for entry in log_history:
        if "loss" not in entry or "train_runtime" in entry:
            continue
        row = {"step": entry["step"], **{col: entry[key] for key, col in CURVE_COLUMNS.items() if key in entry}}
        row.update({key: value for key, value in entry.items() if key.startswith("kl/")})
        rows.append(row)
    return rows


def mopd_stage(start: StageOutput, records: Sequence[Mapping[str, Any]], teachers: Mapping[str, StageOutput],
               profile: Profile, work_dir: Path, divergence: str = "reverse", rl: RLConfig | None = None,
               **overrides: Any) -> StageOutput:
    """MOPD from ``start`` over ``records``, each record's tokens scored by ``teachers[record's domain]``.

    One pass of ``len(records) / rl.prompts_per_step`` steps (``rl`` the
    profile's when not given), every prompt sampled ``rl.group_size`` times, as a
    GRPO stage over the same records. A single-teacher arm maps every domain to
    the same teacher. ``overrides`` go to TRL's config and enter the key.
    """
    rl = rl or profile.rl
    missing = sorted({r["domain"] for r in records} - set(teachers))
    if missing:
        raise ValueError(f"no teacher for domain {missing[0]!r}")
    if not records:
        raise ValueError("MOPD needs at least one prompt")
    steps = max(1, len(records) // rl.prompts_per_step)
    distinct = list(dict.fromkeys(t.key for t in teachers.values()))
    inputs = {"start": content_id(start), "teachers": {d: content_id(t) for d, t in sorted(teachers.items())},
              "prompts": records_digest(records), "n_prompts": len(records), "divergence": divergence,
              "steps": steps, "rl": dataclasses.asdict(rl), "seed": profile.seed, **seed_inputs(profile, "train"),
              **precision_inputs(profile), **engine_settings(profile.engine), **({"trl": overrides} if overrides else {})}

    def build(folder: Path) -> Mapping[str, Any]:
        placement = choose_device(profile)
        tokenizer = load_tokenizer(start.checkpoint)
        model = load_model(start.checkpoint, placement)
        model.generation_config.eos_token_id = stop_token_ids(tokenizer)
        paths = {t.key: t.checkpoint for t in teachers.values()}
        models = [load_model(paths[key], placement).eval() for key in distinct]
        route = {d: distinct.index(t.key) for d, t in teachers.items()}
        config = build_distillation_config(profile, str(work_dir), rl, divergence, steps, **overrides)
        trainer = RoutedDistillationTrainer(model, models, route, args=config,
                                            train_dataset=distillation_dataset(records, rl.group_size),
                                            processing_class=tokenizer,
                                            peft_config=lora_config() if rl.use_lora else None)
        started = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - started
        save_checkpoint(trainer.model, tokenizer, folder, merge_lora=True)
        curves = distillation_curves(trainer.state.log_history)
        return {"steps": len(curves), "curves": curves, "train_s": round(seconds, 1), "prompts": len(records),
                "tokens": int(trainer.state.num_input_tokens_seen),
                "completion_tokens": round(sum(c.get("completion_length", 0.0) for c in curves)
                                           * rl.prompts_per_step * rl.group_size)}

    return run_stage(Stage("mopd", inputs, build, recipe=RECIPE, holds=CHECKPOINT))
