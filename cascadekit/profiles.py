"""Scale profiles: smoke, toy, paper, small and full.

A profile is plain data (``profiles.yaml`` beside this file) loaded into frozen
dataclasses. Notebooks print the resolved profile at the top and accept
overrides as papermill parameters; the CLI accepts them as ``key=value``
pairs with dotted keys (``model.hidden=64``). An unknown profile, section or
field is an error that names the bad key, never a silent default.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import numbers
import typing
from dataclasses import dataclass, fields
from importlib import resources
from typing import Any, Callable, Mapping

import yaml

from cascadekit.world.contexts import CONTEXTS
from cascadekit.world.corpus import rendering_fingerprint
from cascadekit.world.graph import MAX_OP, MIN_OP
from cascadekit.world.render import STYLES


@dataclass(frozen=True)
class WorldConfig:
    """Which problems exist at this scale, and how they are written."""

    rendering: str
    ops_in_distribution: tuple[int, int]
    ops_edge: tuple[int, int]
    ops_hard: tuple[int, int]
    contexts: tuple[str, ...]

    def ops(self, range_name: str) -> range:
        """The inclusive op range named ``in_distribution``, ``edge`` or ``hard``."""
        lo, hi = getattr(self, f"ops_{range_name}")
        return range(lo, hi + 1)


@dataclass(frozen=True)
class TokenizerConfig:
    vocab_size: int
    corpus_problems: int


@dataclass(frozen=True)
class ModelConfig:
    """A Qwen-style decoder's shape (``pretrained`` names released weights at full scale)."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    rope_theta: float
    max_positions: int
    tie_embeddings: bool
    pretrained: str = ""
    architecture: str = "qwen3"


@dataclass(frozen=True)
class PretrainConfig:
    tokens: int
    seq_len: int
    batch_size: int
    lr: float
    warmup_ratio: float
    min_lr_ratio: float
    weight_decay: float
    max_grad_norm: float
    save_steps: int
    problems: int = 0  # distinct problems to render; 0 = enough to fill the token budget once


@dataclass(frozen=True)
class EvaluationConfig:
    problems_per_op: int
    samples: int
    temperature: float
    top_p: float
    max_new_tokens: int
    batch_size: int


@dataclass(frozen=True)
class RLConfig:
    samples: int
    group_size: int
    temperature: float
    lr: float
    prompts_per_step: int
    max_completion_length: int
    kl_beta: float
    use_lora: bool


@dataclass(frozen=True)
class SFTConfig:
    """The unified model's base pretraining on raw domain text and its two SFT stages (chapter 08).

    Stage 1 trains on shorter sequences (general, instructions, math, code), stage 2
    on longer ones and adds tool calling and SWE, as the paper's 16K then 32K stages.
    ``*_tasks`` count prompts per domain; each prompt gives a /think and a /no_think record.
    """

    base_tokens: int
    ops: tuple[int, int]  # op range of the DAG world every Part II surface is drawn from
    stage1_seq_len: int
    stage2_seq_len: int
    stage1_tasks: int
    stage2_tasks: int
    epochs: float
    lr: float
    batch_size: int
    eval_tasks: int
    max_new_tokens: int
    use_lora: bool  # LoRA (PEFT) adapters instead of full fine-tuning, merged into each stage's checkpoint


@dataclass(frozen=True)
class RewardModelConfig:
    """Chapter 09's reward models: their sizes and the preference data they learn from.

    ``layers`` lists the sizes compared, smallest first, each named by its number of
    decoder layers: up to the SFT model's own, a reward model keeps its first ``layers``;
    past them, the SFT model is grown to that depth (:mod:`cascadekit.engine.growth`).
    ``widths``, one per size, multiplies each size's MLP units (grown the same way);
    empty, every width is 1. Neither list enters a key: each reward model's key holds
    its own layers and (when not 1) its own width. The largest size is the one RLHF
    and IF-RL use. ``tasks`` general prompts give up to ``pairs_per_task`` preference
    pairs each; ``eval_tasks`` held-out prompts measure pairwise accuracy and fit the
    calibration.
    """

    layers: tuple[int, ...]
    tasks: int
    pairs_per_task: int
    policy_samples: int  # the SFT policy's sampled answers per prompt that also make pairs (0: none)
    eval_tasks: int
    epochs: float
    lr: float
    batch_size: int
    widths: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.widths and (len(self.widths) != len(self.layers) or list(self.widths) != sorted(self.widths)):
            raise ProfileError(f"reward_model.widths={list(self.widths)}: give one width per size in "
                               f"reward_model.layers ({len(self.layers)}), never decreasing, or none (all 1)")

    @property
    def sizes(self) -> dict[int, int]:
        """Each size's decoder layers -> its MLP width multiplier, smallest first."""
        return dict(zip(self.layers, self.widths or (1,) * len(self.layers)))


@dataclass(frozen=True)
class MathRLConfig:
    """Chapter 11's Math RL: its prompts, the length-extension stages and dynamic filtering.

    ``pool`` math prompts over ``ops``, asked in ``/think``, make one epoch; each of
    ``lengths`` (strictly increasing) is one stage of ``epochs`` GRPO epochs at that
    maximum completion length, starting from the last. With dynamic filtering, each
    epoch first drops the prompts the policy always or never solves, re-admitting
    each dropped one with probability ``readmit``. ``penalty`` is the format-switch
    penalty; ``lr`` replaces ``rl.lr`` (Math RL's own rate, so that the earlier
    stages, keyed by ``rl``, stay the same cached stages). ``step_credit`` weighs
    partial credit for the gold's steps into the reward (a lever, not the paper's
    recipe: :func:`cascadekit.rewards.math_rl_reward`); 0 rewards the answer alone.
    """

    ops: tuple[int, int]
    pool: int
    lengths: tuple[int, ...]
    epochs: int
    readmit: float
    penalty: float
    lr: float
    step_credit: float = 0.0


@dataclass(frozen=True)
class CodeRLConfig:
    """Chapter 12's Code RL: ``prompts`` code prompts over ``ops`` per arm, one arm per sampling temperature.

    ``workers`` sandbox verifications run at once in the asynchronous reward.
    """

    ops: tuple[int, int]
    prompts: int
    temperatures: tuple[float, ...]
    workers: int


@dataclass(frozen=True)
class SWERLConfig:
    """Chapter 13's SWE RL: its prompts, the input-context stages, the execution-free reward and its judge.

    Each of ``contexts`` (strictly increasing) is one GRPO stage on ``prompts`` SWE
    prompts over ``ops``, asked in ``/think``, whose calc.py holds the buggy
    function and 0 to that many other functions (the toy's input length; the
    paper's 16K -> 24K input extension); each stage starts from the last, at
    maximum completion length ``length`` and learning rate ``lr`` (SWE RL's own,
    so that the earlier stages, keyed by ``rl``, stay the same cached stages).
    The execution-free reward is ``lexical_weight`` x the patch's similarity to the
    gold patch plus the rest x the judge's P(YES). The judge keeps ``judge_layers``
    decoder layers of the SFT checkpoint and learns, on ``judge_tasks`` prompts
    (``judge_eval_tasks`` held out), whether a candidate patch passes the hidden
    tests: the gold patch, its corruptions and ``judge_samples`` of the policy's
    own answers per prompt. ``workers`` sandbox runs verify rollouts at once.
    ``applicable`` (a lever, not the paper's reward) makes the similarity 0 for a
    patch that does not apply to calc.py, as ``git apply`` judges applicability.
    """

    ops: tuple[int, int]
    prompts: int
    contexts: tuple[int, ...]
    length: int
    lr: float
    lexical_weight: float
    judge_layers: int
    judge_tasks: int
    judge_eval_tasks: int
    judge_samples: int
    judge_epochs: float
    judge_lr: float
    judge_batch_size: int
    workers: int
    applicable: bool = False


@dataclass(frozen=True)
class RLHFConfig:
    """Chapter 09's RLHF stage: its own learning rate and KL weight (``None``: ``rl``'s, and nothing enters its key).

    Why settings of its own: at toy scale RLHF on general prompts at RL's settings
    (no KL term) costs the other domains most, tools 0.1-0.25 in the second world.
    Measured on two training seeds of the second world (issue 32's lever runs, RLHF
    alone from SFT, cells below the ceiling): the other domains moved -0.072 at RL's
    settings, -0.025 at half the rate and -0.018 with a KL weight of 0.5, which also
    lifted general most (+0.052) and still cut its answers by 13 tokens. The later
    stages keep ``rl``'s settings.
    """

    lr: float | None = None
    kl_beta: float | None = None


@dataclass(frozen=True)
class EngineConfig:
    """How the GPU stack runs a profile: downloads, 4-bit loading, Unsloth, parallelism, rollouts, data; CPU precision.

    At their defaults no stage of the CPU scales reads this section's fields
    (``precision`` aside) and no stage key hashes them, so
    a change here never invalidates a cached or shipped checkpoint of the smoke or
    toy scale. ``nodes`` x ``gpus_per_node`` train; ``distributed`` is ``none`` (one process, or plain DDP),
    ``zero3`` (DeepSpeed ZeRO-3) or ``fsdp`` (PyTorch FSDP), both through accelerate
    (:mod:`cascadekit.launch`). ``vllm`` is ``none`` (generation by transformers),
    ``colocate`` (vLLM in the training processes, TRL's ``vllm_mode="colocate"``)
    or ``server`` (vLLM's own ``vllm serve``, with the endpoints TRL's client needs, on
    ``vllm_gpus`` GPUs of its own: the first GPUs of a one-node job, else a whole
    extra node beside the ``nodes`` that train), for the RL stages only.
    ``precision`` is how a stage trains on the CPU: ``fp32``, or ``bf16-autocast``
    (float32 weights and optimizer, the forward and backward pass under
    ``torch.autocast("cpu", torch.bfloat16)``; loss within about 1% of fp32). It
    pays only on a CPU that computes bf16 natively (AVX512-BF16 or AMX): issue 36
    reported 1.57-1.60x the toy model's training tokens/s, while ``cascadekit bench
    train`` measured 0.13x on an AVX2-only CPU, where bf16 is emulated
    (:func:`training_precision` warns there). A GPU trains in the profile's
    ``dtype`` whatever this says. ``precision`` enters a training stage's key when
    it is not ``fp32`` (:func:`precision_inputs`: the pretraining, SFT and
    reward-model keys), so the shipped fp32 keys stay as they are.
    ``quantization`` ``4bit`` loads the frozen base in NF4 through bitsandbytes for
    QLoRA (one GPU only). ``accumulation`` splits each process's share of an
    optimizer step into that many micro-batches (GRPO, SFT and reward-model
    training arguments' ``gradient_accumulation_steps``; the DeepSpeed config
    takes it from them through ``auto``); ``cascadekit launch --accumulation``
    sets it. ``native_positions`` is the released model's own context
    (``max_position_embeddings`` of its config.json; 0: the kit builds the model,
    so ``model.max_positions`` is its context) and ``rope_scaling`` (``none`` or
    ``yarn``) how a vLLM server reaches a longer ``model.max_positions``
    (:mod:`cascadekit.launch` refuses a longer one without it). ``vllm`` alone decides
    who generates, everywhere (:mod:`cascadekit.engine.generation`); ``vllm_memory``,
    ``vllm_max_length`` and ``vllm_sleep`` size its engine, ``rl_micro_batch`` splits a
    GRPO step into micro-batches of that many completions per process (the
    accumulation follows, the step's batch stays). ``data`` is ``world`` (the kit's synthetic six domains)
    or ``released`` (the papers' released data sets, :mod:`cascadekit.training.released_data`).
    ``rollouts`` ``kit`` has CPU GRPO roll out with the kit's decode loop (:mod:`cascadekit.training.rollouts`)
    instead of ``generate``; it enters a GRPO stage's key only then. ``evaluation_decoder`` ``kit`` has the
    stage tables and Part I's sampling generate with that loop on the CPU
    (:func:`cascadekit.engine.generation.uses_kit_decoder`; never on a GPU); it enters their keys only then.
    ``training_forward`` ``kit`` has GRPO's training forward run each group's prompt once and skip the batch's
    padding (:mod:`cascadekit.training.trimmed`; 2x cheaper per rollout at 64 prompts a step, log-probs TRL's
    to 1e-5, not bit for bit); it enters a GRPO stage's key only then, so the shipped stages, built by TRL's
    padded forward, rebuild byte for byte under their keys.
    """

    allow_download: bool
    quantization: str
    unsloth: bool  # Unsloth's loader and LoRA when installed; PEFT (with a note) when not
    distributed: str
    nodes: int
    gpus_per_node: int
    vllm: str
    vllm_gpus: int
    data: str
    data_dir: str = ""  # a local copy of the released sets (one folder per set name); "" streams from the hub
    precision: str = "fp32"  # CPU training: fp32 or bf16-autocast
    accumulation: int = 1  # gradient accumulation steps of every training stage
    native_positions: int = 0  # the released model's config.json max_position_embeddings; 0: built here
    rope_scaling: str = "none"  # none, or yarn: how vLLM serves a model.max_positions past native_positions
    vllm_memory: float = 0.3  # the GPU memory share a colocated or evaluation vLLM engine takes (TRL's default)
    vllm_max_length: int = 0  # that engine's context (prompt + completion); 0: the model's config
    vllm_sleep: bool = False  # colocated vLLM offloads its weights and cache during the optimizer step
    rl_micro_batch: int = 0  # GRPO completions per process per forward/backward; 0: the whole share at once
    rollouts: str = "generate"  # generate (TRL's own, or vLLM); kit: cascadekit.engine.decode, CPU GRPO only
    evaluation_decoder: str = "generate"  # stage tables and Part I sampling: generate (or vLLM); kit: on the CPU
    training_forward: str = "trl"  # GRPO's log-prob forward: trl (padded batch); kit: each prompt once, trimmed

    def __post_init__(self) -> None:
        if self.vllm == "server":
            if self.nodes == 1 and not 0 < self.vllm_gpus < self.gpus_per_node:
                raise ProfileError(f"engine.vllm=server on one node shares it: 0 < engine.vllm_gpus < "
                                   f"gpus_per_node ({self.gpus_per_node}), got {self.vllm_gpus}")
            if self.nodes > 1 and (self.vllm_gpus <= 0 or self.vllm_gpus % self.gpus_per_node):
                raise ProfileError(f"engine.vllm=server across nodes runs on whole nodes of its own: engine.vllm_gpus "
                                   f"must be a positive multiple of gpus_per_node ({self.gpus_per_node}), "
                                   f"got {self.vllm_gpus}")
        elif self.vllm_gpus:
            raise ProfileError(f"engine.vllm_gpus={self.vllm_gpus} only means something with engine.vllm=server")
        if self.rollouts not in ("generate", "kit"):
            raise ProfileError(f"engine.rollouts is generate or kit, got {self.rollouts!r}")
        if self.evaluation_decoder not in ("generate", "kit"):
            raise ProfileError(f"engine.evaluation_decoder is generate or kit, got {self.evaluation_decoder!r}")
        if self.training_forward not in ("trl", "kit"):
            raise ProfileError(f"engine.training_forward is trl or kit, got {self.training_forward!r}")
        if self.quantization == "4bit" and (self.distributed != "none" or self.nodes * self.gpus_per_node > 1):
            raise ProfileError("engine.quantization=4bit is the single-GPU QLoRA path: it needs "
                               "engine.distributed=none on one GPU (nodes=1, gpus_per_node=1)")

    @property
    def server_nodes(self) -> int:
        """Nodes the vLLM server has to itself (beside the ``nodes`` that train); 0 when it shares a node or is off."""
        return self.vllm_gpus // self.gpus_per_node if self.vllm == "server" and self.nodes > 1 else 0

    @property
    def training_processes(self) -> int:
        """One training process per GPU that trains (the server's GPUs on a shared node excluded)."""
        shared = self.vllm_gpus if self.vllm == "server" and self.nodes == 1 else 0
        return self.nodes * self.gpus_per_node - shared


@dataclass(frozen=True)
class DomainsConfig:
    """The second world's knobs: what the Part II domains ask in SFT, RL and evaluation, never in pretraining.

    At their defaults (today's world) they add nothing to any stage key
    (:func:`domains_inputs`) and every task is drawn as before, so every shipped
    checkpoint holds. Whatever their values, the base's pretraining text stays
    byte for byte the same (the ``pretrain`` split's raw text and
    :func:`cascadekit.domains.surfaces_fingerprint` never read them), so a chat
    base pretrained for the second world serves both. Each maps onto the paper so:

    * ``instruction_constraints``: the least and most verifiable constraints an
      instruction prompt carries (today 1-3). IFEval prompts carry one to three
      as well, but a toy model follows one or two nearly always; ``[2, 3]`` takes
      the domain off its ceiling. The counts change the prompts themselves.
    * ``swe_rewrites``: every SWE task has more than one correct patch. The
      reference patch (what the execution-free reward's lexical similarity
      compares with, as SWE-bench's gold patch is one developer's fix) and the
      SFT answer each write the fixed line in one of its equivalent forms
      (operands reordered, a constant factored out), drawn independently, so a
      correct patch can read unlike the reference and a near-miss like it:
      similarity is no longer correctness, and hacking it becomes measurable.
      Execution accepts every correct form, as it always did. The prompts stay.
    * ``general_teacher``: the share of general answers written as a teacher
      distils them (the paper's SFT responses come from DeepSeek-R1/V3): the
      request restated, a padding sentence, sometimes the answer said twice,
      closes beyond the polite ones the hidden quality rewards, and rarely one
      fact wrong; so RLHF has style to cut. The hidden quality still scores such
      an answer below the concise one. The reward model's preference pairs stay
      the concise gold and its perturbations (the paper's preference data is not
      its SFT data); its policy samples carry whatever SFT taught. The prompts stay.
    """

    instruction_constraints: tuple[int, int] = (1, 3)
    swe_rewrites: bool = False
    general_teacher: float = 0.0


@dataclass(frozen=True)
class Seeds:
    """A profile's three seeds, each resolved (see :class:`Profile`)."""

    data: int
    eval: int
    train: int


#: The roles a seed plays: what :attr:`Profile.seeds` holds and :func:`seed_inputs` names.
SEED_ROLES = ("data", "eval", "train")


@dataclass(frozen=True)
class Profile:
    """A scale profile: its sections and its seeds.

    ``seed`` is the profile's one seed, and each of the three seeds of a role
    equals it unless set (``None`` in ``profiles.yaml``: follow ``seed``), so a
    profile that sets none behaves, and keys every stage, as before they existed:

    - ``data_seed``: which tasks and problems exist in each split, the RL prompt
      pools, SFT's tasks, the preference pairs, the SWE judge's tasks, the
      pretraining corpora and tokenizers;
    - ``eval_seed``: the evaluation suites (the stage table's, the per-op and
      per-context suites of chapters 11-14, Part I's ladder) and the evaluation's
      sampling, fixed across the course so every stage is compared on the same prompts;
    - ``train_seed``: what a chapter's training draws: initialisation of what it
      trains, data shuffling, rollout sampling (GRPO's seed, the dynamic filter's
      screens), SFT, reward-model and judge training, and the policy samples
      their pairs are built from.

    The pretrained bases (Part I's, chapter 05's variants, the chat base) are
    shared by every training seed: they follow ``seed`` and ``data_seed``, never
    ``train_seed``, as post-training starts from one released base (a replicate is
    over what a chapter trains, not an hour of pretraining again). A seed equal to
    ``seed`` adds nothing to a stage's key (:func:`seed_inputs`).
    """

    name: str
    description: str
    device: str
    dtype: str
    world: WorldConfig
    tokenizer: TokenizerConfig
    model: ModelConfig
    pretrain: PretrainConfig
    evaluation: EvaluationConfig
    rl: RLConfig
    sft: SFTConfig
    reward_model: RewardModelConfig
    math_rl: MathRLConfig
    code_rl: CodeRLConfig
    swe_rl: SWERLConfig
    engine: EngineConfig
    domains: DomainsConfig = DomainsConfig()
    rlhf: RLHFConfig = RLHFConfig()
    seed: int = 0
    data_seed: int | None = None
    eval_seed: int | None = None
    train_seed: int | None = None

    @property
    def seeds(self) -> Seeds:
        """The three seeds, each ``seed`` where it is not set."""
        return Seeds(*(self.seed if s is None else s for s in (self.data_seed, self.eval_seed, self.train_seed)))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def sections(self, *names: str) -> dict[str, Any]:
        """The named sections (and top-level fields such as ``seed``) as plain values; all of them when none."""
        data = self.to_dict()
        return {k: data[k] for k in names} if names else data

    def hash(self, *sections: str) -> str:
        """A short stable hash of the named sections (all when none), for cache keys.

        With the ``world`` section it also hashes the rendered text format
        (:func:`cascadekit.world.corpus.rendering_fingerprint`), so a renderer change
        invalidates cached tokenizers and models as a setting change would.
        """
        picked = self.sections(*sections)
        if "world" in picked:
            picked["world_text"] = rendering_fingerprint(self.world.rendering)
        blob = json.dumps(picked, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:12]

    def summary(self) -> str:
        """A few lines for the top of a notebook."""
        own = "".join(f" {k}={v}" for k, v in seed_inputs(self, *SEED_ROLES).items())
        lines = [f"profile {self.name!r}: {self.description}",
                 f"  device={self.device} dtype={self.dtype} seed={self.seed}{own}"]
        for section in _SECTIONS:
            values = ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(getattr(self, section)).items())
            lines.append(f"  {section}: {values}")
        return "\n".join(lines)


class ProfileError(ValueError):
    """A profile name, section or field that does not exist, or a value of the wrong type."""


_SECTIONS = {
    "world": WorldConfig,
    "tokenizer": TokenizerConfig,
    "model": ModelConfig,
    "pretrain": PretrainConfig,
    "evaluation": EvaluationConfig,
    "rl": RLConfig,
    "sft": SFTConfig,
    "reward_model": RewardModelConfig,
    "math_rl": MathRLConfig,
    "code_rl": CodeRLConfig,
    "swe_rl": SWERLConfig,
    "engine": EngineConfig,
    "domains": DomainsConfig,
    "rlhf": RLHFConfig,
}
_TOP_LEVEL = {"description", "device", "dtype", "seed", *(f"{role}_seed" for role in SEED_ROLES)}

# --- validation ---------------------------------------------------------------------
#
# Every value, from profiles.yaml, a notebook's ``overrides`` dict or a CLI
# ``--set``, is checked against its field's declared type *exactly* (an int field
# takes an int, never 1.5, True or "3"; a tuple field takes a list or tuple, never
# a string, which Python would happily split into characters) and then against the
# field's rule below. Nothing is coerced silently: a wrong value is a ProfileError
# naming the key, before any work starts.

#: The largest integer a field may hold: everything the kit sizes must fit an int64 (torch, Arrow).
MAX_INT = 2**63 - 1
#: The longest string (or override text) a field takes: names and descriptions, not data.
MAX_TEXT = 1000
DEVICES = ("cpu", "cuda")
#: ``bfloat16`` trains in bf16 where the device supports it; anything else would silently run in float32.
DTYPES = ("float32", "bfloat16")
ROPE_SCALINGS = ("none", "yarn")  # cascadekit.launch's vLLM server
ARCHITECTURES = ("qwen2", "qwen3")  # cascadekit.engine.models._ARCHITECTURES
QUANTIZATIONS = ("none", "4bit")  # cascadekit.engine.runtime.load_model
DISTRIBUTED = ("none", "zero3", "fsdp")  # cascadekit.launch
VLLM_MODES = ("none", "colocate", "server")  # none, or TRL's GRPOConfig.vllm_mode
DATA_SOURCES = ("world", "released")  # cascadekit.training.released_data
PRECISIONS = ("fp32", "bf16-autocast")  # CPU training (training_precision)


def _positive(v: Any) -> bool:
    return v > 0


def _non_negative(v: Any) -> bool:
    return v >= 0


def _seed_or_none(v: Any) -> bool:
    return v is None or v >= 0


def _fraction(v: Any) -> bool:
    return 0 <= v <= 1


def _one_of(*names: str) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: v in names), f"one of {', '.join(names)}"


def _op_range(v: tuple[int, int]) -> bool:
    return MIN_OP <= v[0] <= v[1] <= MAX_OP


def _contexts(v: tuple[str, ...]) -> bool:
    return len(v) > 0 and all(c in CONTEXTS for c in v)


_POSITIVE = (_positive, "> 0")
_NON_NEGATIVE = (_non_negative, ">= 0")
_FRACTION = (_fraction, "from 0 to 1")
_OPS = (_op_range, f"an op range [lo, hi] with {MIN_OP} <= lo <= hi <= {MAX_OP}")

#: The rule each field must meet beyond its type. ``>= 0`` only where 0 has a meaning:
#: no pretraining / no base tokens / no SFT tasks (the full scale starts from released
#: weights), no KL penalty, no weight decay, no warmup, a schedule that decays to 0, and
#: ``pretrain.problems`` 0 = enough problems to fill the token budget once.
_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "device": _one_of(*DEVICES), "dtype": _one_of(*DTYPES), "seed": _NON_NEGATIVE,
    **{f"{role}_seed": (_seed_or_none, ">= 0, or null (the same as seed)") for role in SEED_ROLES},
    "world.rendering": _one_of(*STYLES), "world.ops_in_distribution": _OPS, "world.ops_edge": _OPS,
    "world.ops_hard": _OPS, "world.contexts": (_contexts, f"a non-empty list of contexts from {', '.join(CONTEXTS)}"),
    "tokenizer.vocab_size": _POSITIVE, "tokenizer.corpus_problems": _NON_NEGATIVE,
    **{f"model.{k}": _POSITIVE for k in ("layers", "hidden", "intermediate", "heads", "kv_heads",
                                         "rope_theta", "max_positions")},
    "model.architecture": _one_of(*ARCHITECTURES),
    "pretrain.tokens": _NON_NEGATIVE, "pretrain.seq_len": _POSITIVE, "pretrain.batch_size": _POSITIVE,
    "pretrain.lr": _POSITIVE, "pretrain.warmup_ratio": _FRACTION, "pretrain.min_lr_ratio": _FRACTION,
    "pretrain.weight_decay": _NON_NEGATIVE, "pretrain.max_grad_norm": _POSITIVE,
    "pretrain.save_steps": _POSITIVE, "pretrain.problems": _NON_NEGATIVE,
    **{f"evaluation.{k}": _POSITIVE for k in ("problems_per_op", "samples", "temperature",
                                              "max_new_tokens", "batch_size")},
    "evaluation.top_p": (lambda v: 0 < v <= 1, "in (0, 1]"),
    **{f"rl.{k}": _POSITIVE for k in ("samples", "group_size", "temperature", "lr", "prompts_per_step",
                                      "max_completion_length")},
    "rl.kl_beta": _NON_NEGATIVE,
    "sft.base_tokens": _NON_NEGATIVE, "sft.ops": _OPS, "sft.stage1_tasks": _NON_NEGATIVE, "sft.stage2_tasks": _NON_NEGATIVE,
    **{f"sft.{k}": _POSITIVE for k in ("stage1_seq_len", "stage2_seq_len", "epochs", "lr", "batch_size",
                                       "eval_tasks", "max_new_tokens")},
    "reward_model.layers": (lambda v: len(v) > 0 and v[0] > 0 and list(v) == sorted(set(v)),
                            "a non-empty, strictly increasing list of layer counts > 0"),
    "reward_model.widths": (lambda v: all(n > 0 for n in v), "a list of MLP width multipliers > 0 (empty: all 1)"),
    **{f"reward_model.{k}": _POSITIVE for k in ("tasks", "pairs_per_task", "eval_tasks", "epochs", "lr",
                                                "batch_size")},
    "reward_model.policy_samples": _NON_NEGATIVE,
    "rlhf.lr": (lambda v: v is None or v > 0, "positive (or null: rl.lr)"),
    "rlhf.kl_beta": (lambda v: v is None or v >= 0, ">= 0 (or null: rl.kl_beta)"),
    "math_rl.ops": _OPS, "math_rl.pool": _POSITIVE, "math_rl.epochs": _POSITIVE, "math_rl.lr": _POSITIVE,
    "math_rl.readmit": _FRACTION, "math_rl.penalty": _FRACTION, "math_rl.step_credit": _FRACTION,
    "math_rl.lengths": (lambda v: len(v) > 0 and all(n > 0 for n in v) and list(v) == sorted(set(v)),
                        "a non-empty, strictly increasing list of lengths > 0"),
    "code_rl.ops": _OPS, "code_rl.prompts": _POSITIVE, "code_rl.workers": _POSITIVE,
    "code_rl.temperatures": (lambda v: len(v) > 0 and all(t > 0 for t in v), "a non-empty list of temperatures > 0"),
    "swe_rl.ops": _OPS, "swe_rl.lexical_weight": _FRACTION, "swe_rl.judge_samples": _NON_NEGATIVE,
    **{f"swe_rl.{k}": _POSITIVE for k in ("prompts", "length", "lr", "judge_layers", "judge_tasks",
                                          "judge_eval_tasks", "judge_epochs", "judge_lr", "judge_batch_size",
                                          "workers")},
    "swe_rl.contexts": (lambda v: len(v) > 0 and all(n >= 0 for n in v) and list(v) == sorted(set(v)),
                        "a non-empty, strictly increasing list of context sizes >= 0"),
    "engine.quantization": _one_of(*QUANTIZATIONS), "engine.distributed": _one_of(*DISTRIBUTED),
    "engine.nodes": _POSITIVE, "engine.gpus_per_node": _POSITIVE, "engine.vllm": _one_of(*VLLM_MODES),
    "engine.vllm_gpus": _NON_NEGATIVE, "engine.data": _one_of(*DATA_SOURCES),
    "engine.precision": _one_of(*PRECISIONS), "engine.accumulation": _POSITIVE,
    "engine.native_positions": _NON_NEGATIVE, "engine.rope_scaling": _one_of(*ROPE_SCALINGS),
    "engine.vllm_memory": (lambda v: 0 < v < 1, "in (0, 1)"), "engine.vllm_max_length": _NON_NEGATIVE,
    "engine.rl_micro_batch": _NON_NEGATIVE,
    # 5: cascadekit.domains.instructions.MAX_CONSTRAINTS (tests/test_domain_knobs.py holds them equal)
    "domains.instruction_constraints": (lambda v: 1 <= v[0] <= v[1] <= 5, "a range [lo, hi] with 1 <= lo <= hi <= 5"),
    "domains.general_teacher": _FRACTION,
}

#: Fields that are gone, each with where its meaning went (an old override or YAML entry is one clear error).
_GONE = {"evaluation.backend": "vLLM generation is engine.vllm's alone (none, colocate or server; "
                               "transformers where there is no GPU or no vllm); evaluation.backend is gone"}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


#: Settings under this prefix belong to a chapter's own ``Options``, not to the profile (:mod:`cascadekit.chapters`).
CHAPTER_PREFIX = "chapter."


def _field_type(key: str) -> Any:
    """The declared type of a dotted key (``model.hidden`` -> int); ProfileError for unknown keys."""
    if key in _GONE:
        raise ProfileError(f"{key}: {_GONE[key]}")
    section, _, fname = key.partition(".")
    if not fname:
        if section not in _TOP_LEVEL:
            raise ProfileError(f"unknown profile field {key!r}; top-level fields: {sorted(_TOP_LEVEL)}")
        return typing.get_type_hints(Profile)[section]
    if section not in _SECTIONS:
        raise ProfileError(f"unknown profile section {section!r} in {key!r}; sections: {sorted(_SECTIONS)}")
    hints = typing.get_type_hints(_SECTIONS[section])
    if fname not in hints:
        raise ProfileError(f"unknown field {fname!r} in section {section!r}; known: {list(hints)}")
    return hints[fname]


_TYPE_NAMES = {int: "integers", str: "strings", float: "numbers", bool: "booleans"}


def _typed(value: Any, hint: Any) -> tuple[Any, str]:
    """``(value as the field stores it, "")`` when ``value`` has type ``hint`` exactly, else ``(None, what was expected)``."""
    if hint == int | None:  # a seed of a role: an integer, or None to follow ``seed``
        return (None, "") if value is None else _typed(value, int)
    if hint == float | None:  # a stage's own rate: a number, or None to follow the shared one
        return (None, "") if value is None else _typed(value, float)
    if hint is bool:
        return (value, "") if isinstance(value, bool) else (None, "true or false")
    if hint is int:
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool) and abs(value) <= MAX_INT
        return (int(value), "") if ok else (None, "an integer (at most 2**63 - 1 in size)")
    if hint is float:
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        try:
            ok = ok and math.isfinite(float(value))
        except OverflowError:  # an int too large for a float
            ok = False
        return (float(value), "") if ok else (None, "a finite number")
    if hint is str:
        ok = isinstance(value, str) and len(value) <= MAX_TEXT
        return (value, "") if ok else (None, f"a string of at most {MAX_TEXT} characters")
    if typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        item_hints = [args[0]] * len(value) if len(args) == 2 and args[1] is Ellipsis and isinstance(value, (list, tuple)) else list(args)
        what = "a list of " + (f"{len(args)} " if args[-1] is not Ellipsis else "") + \
            " and ".join(dict.fromkeys(_TYPE_NAMES[a] for a in args if a is not Ellipsis))
        if not isinstance(value, (list, tuple)) or len(value) != len(item_hints):
            return None, what
        items = [_typed(v, h) for v, h in zip(value, item_hints)]
        return (tuple(v for v, _ in items), "") if all(not e for _, e in items) else (None, what)
    raise TypeError(f"no validation for fields of type {hint!r}")  # pragma: no cover - a new field type


def check_typed(key: str, value: Any, hint: Any) -> Any:
    """``value`` as a field of type ``hint`` stores it (a list becomes a tuple); ProfileError naming ``key`` otherwise."""
    typed, expected = _typed(value, hint)
    if expected:
        raise ProfileError(f"{key}={_short(value)}: expected {expected}")
    return typed


def check_value(key: str, value: Any) -> Any:
    """``value`` for the dotted ``key`` as the profile stores it; ProfileError naming the key otherwise.

    >>> check_value("world.ops_edge", [4, 6])
    (4, 6)
    """
    typed = check_typed(key, value, _field_type(key))
    rule, what = _RULES.get(key, (None, ""))
    if rule is not None and not rule(typed):
        raise ProfileError(f"{key}={_short(value)}: must be {what}")
    return typed


def _raw_profiles() -> dict[str, dict[str, Any]]:
    text = resources.files("cascadekit").joinpath("profiles.yaml").read_text()
    return yaml.safe_load(text)


def profile_names() -> list[str]:
    return list(_raw_profiles())


def _build_section(cls: type, values: Mapping[str, Any], where: str, section: str) -> Any:
    names = {f.name for f in fields(cls)}
    for name in values:
        if f"{section}.{name}" in _GONE:
            raise ProfileError(f"{where}: {section}.{name}: {_GONE[f'{section}.{name}']}")
    unknown = set(values) - names
    if unknown:
        raise ProfileError(f"unknown field(s) {sorted(unknown)} in {where}; known: {sorted(names)}")
    try:
        kwargs = {k: check_value(f"{section}.{k}", v) for k, v in values.items()}
        return cls(**kwargs)
    except (TypeError, ProfileError) as err:
        raise ProfileError(f"{where}: {err}") from err


def load_profile(name: str, overrides: Mapping[str, Any] | None = None) -> Profile:
    """Load a shipped profile and apply overrides given as dotted keys.

    >>> load_profile("smoke", {"model.hidden": 64}).model.hidden
    64
    """
    raw = _raw_profiles()
    if not isinstance(name, str) or name not in raw:
        raise ProfileError(f"unknown scale profile {name!r}; choose one of {sorted(raw)}")
    base = {"name": name, "seed": 0, **{f"{role}_seed": None for role in SEED_ROLES}, **raw[name]}
    try:
        top = {k: check_value(k, base[k]) for k in sorted(_TOP_LEVEL)}
    except ProfileError as err:
        raise ProfileError(f"profile {name}: {err}") from err
    profile = Profile(
        name=name,
        **top,
        **{s: _build_section(cls, base.get(s, {}), f"profile {name}.{s}", s) for s, cls in _SECTIONS.items()},
    )
    return apply_overrides(profile, overrides or {})


def apply_overrides(profile: Profile, overrides: Mapping[str, Any]) -> Profile:
    """Return a copy of ``profile`` with ``{"section.field": value}`` overrides applied.

    Each value must already have the field's type (see :func:`check_value`); text
    from a command line goes through :func:`parse_overrides` first.
    """
    changes: dict[str, dict[str, Any]] = {}  # section -> field -> value, applied together (cross-field rules)
    for key, value in overrides.items():
        if not isinstance(key, str):
            raise ProfileError(f"override key {_short(key)} is not a string")
        new_value = check_value(key, value)
        section, _, fname = key.partition(".")
        if not fname:
            profile = dataclasses.replace(profile, **{section: new_value})
            continue
        changes.setdefault(section, {})[fname] = new_value
    for section, values in changes.items():
        profile = dataclasses.replace(profile, **{section: dataclasses.replace(getattr(profile, section), **values)})
    return profile


def overrides_mapping(overrides: Any) -> dict[str, Any]:
    """A notebook's ``overrides`` parameter as a mapping: a dict, or its JSON text (what ``papermill -p`` passes).

    Only the shape is checked here; the values are checked by :func:`load_profile`, as the command line's are.
    """
    if isinstance(overrides, str):
        try:
            overrides = json.loads(overrides) if overrides.strip() else {}
        except (ValueError, RecursionError):
            raise ProfileError(f"overrides {overrides[:60]!r}: not JSON; expected a mapping like "
                               '{"model.hidden": 64}') from None
    if overrides is None:
        return {}
    if not isinstance(overrides, Mapping):
        raise ProfileError(f"overrides: expected a mapping of 'section.field' to values, like "
                           f'{{"model.hidden": 64}}; got {type(overrides).__name__}')
    return dict(overrides)


#: Named Part II worlds: each is a set of profile overrides that ``--world NAME`` (or ``world`` in a notebook's
#: ``overrides``) puts beneath the other overrides; a Part II chapter's entry in ``chapters.yaml`` names its world
#: per scale (:func:`with_world`). ``first`` is the toy profile as it is (the first Part II world, whose runs are
#: kept under ``data/results/first_world/``). ``second`` gives every stage room to move (issue 32, each value
#: measured on the first world's SFT or this world's own), the toy world of chapters 08-14:
#:
#: * the chat base reads every surface over ops 2-5 (Part I: a toy model does not extrapolate past its
#:   pretraining ops, so RL at op 4-5 needs them in the base), with 24M tokens for six surfaces, and SFT
#:   covers the same ops;
#: * each RL pool sits at its domain's edge on that SFT (greedy 0.2-0.6, pass@8 clearly higher): math
#:   ``/think`` ops 4-5 with room to write their longer answers, code op 5, SWE ops 3-4;
#: * instructions carry 3-5 constraints (1-3 and 2-3 leave the first world's SFT at 0.83-0.96), half the
#:   general SFT answers are written as a teacher distils them (padded, restated, sometimes repeated), so
#:   RLHF has style to cut, and SWE tasks have several correct patches, so the execution-free reward's
#:   lexical half can be hacked;
#: * RLHF with a KL weight of its own, 0.5 (at RL's settings RLHF cost the other domains 0.06 over three
#:   seeds, tools up to 0.2; :class:`RLHFConfig`);
#: * the SWE judge trained four epochs, not one: at one its P(YES) hardly moved (the execution-free reward never
#:   reached 0.8) and SWE RL did not lift its domain over three seeds (+0.010 [-0.050, 0.067]); at four the judge
#:   tracks execution (0.245 [0.146, 0.343]); SWE RL's lift is a few points that the judge's random head can flip
#:   (+0.045, +0.003 and +0.033 over three seeds for three draws: data/results/second_world/13_swe_rl/);
#: * 128 prompts per stage-table cell (64 are good to about +-0.1-0.2), and the kit's decode loop for
#:   rollouts and evaluation (greedy outputs identical to ``generate``'s, several times faster on a CPU).
WORLDS: dict[str, dict[str, Any]] = {
    "first": {},
    "second": {
        "sft.ops": (2, 5), "sft.base_tokens": 24_000_000, "sft.eval_tasks": 128,
        "math_rl.ops": (4, 5), "math_rl.lengths": (48, 64, 80), "code_rl.ops": (5, 5), "swe_rl.ops": (3, 4),
        "domains.instruction_constraints": (3, 5), "domains.general_teacher": 0.5, "domains.swe_rewrites": True,
        "engine.rollouts": "kit", "engine.evaluation_decoder": "kit", "rlhf.kl_beta": 0.5,
        "swe_rl.judge_epochs": 4.0,
    },
}


def world_overrides(name: str) -> dict[str, Any]:
    """The profile overrides of the Part II world ``name`` (:data:`WORLDS`)."""
    if name not in WORLDS:
        raise ProfileError(f"unknown world {name!r}; choose one of {sorted(WORLDS)}")
    return dict(WORLDS[name])


#: The overrides key that names a world (:data:`WORLDS`) instead of setting a field.
WORLD_KEY = "world"


def world_name(overrides: Mapping[str, Any], default: str = "first") -> str:
    """The world ``overrides`` names under :data:`WORLD_KEY`, else ``default``; an unknown one is one error."""
    name = overrides.get(WORLD_KEY, default)
    if not isinstance(name, str) or name not in WORLDS:
        raise ProfileError(f"unknown world {_short(name)}; choose one of {sorted(WORLDS)}")
    return name


def with_world(overrides: Mapping[str, Any], default: str = "first") -> dict[str, Any]:
    """``overrides`` with the world it names (:func:`world_name`) expanded into its fields beneath the rest.

    >>> fields = with_world({"world": "second", "sft.eval_tasks": 32})
    >>> fields["sft.eval_tasks"], fields["rlhf.kl_beta"], "world" in fields
    (32, 0.5, False)
    >>> with_world({"rl.lr": 0.001})
    {'rl.lr': 0.001}
    """
    rest = {k: v for k, v in overrides.items() if k != WORLD_KEY}
    return {**world_overrides(world_name(overrides, default)), **rest}


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """Turn CLI ``key=value`` strings into an overrides mapping with typed values.

    The text is read by the field's declared type: a string field takes it as
    written; any other field reads it as a JSON literal (``64``, ``0.5``,
    ``true``, ``[4, 6]``, ``["A", "B"]``), which :func:`apply_overrides` then
    checks exactly, so ``model.hidden=1.5`` or ``world.contexts=AB`` are errors,
    not a silent 1 or ``("A", "B")``.

    >>> parse_overrides(["model.hidden=64", "world.ops_edge=[4, 6]", "model.pretrained=Qwen/Qwen3-8B-Base"])
    {'model.hidden': 64, 'world.ops_edge': [4, 6], 'model.pretrained': 'Qwen/Qwen3-8B-Base'}
    """
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key, text = key.strip(), text.strip()
        if not sep or not key:
            raise ProfileError(f"override {_short(pair)} is not of the form section.field=value")
        if len(text) > MAX_TEXT:
            raise ProfileError(f"{key}: value longer than {MAX_TEXT} characters")
        if key.startswith(CHAPTER_PREFIX):  # a chapter's own setting, checked by its Options (cascadekit.chapters)
            out[key] = _literal(text)
            continue
        if _field_type(key) is str:
            out[key] = text
            continue
        value = _literal(text)
        check_value(key, value)
        out[key] = value
    return out


def _literal(text: str) -> Any:
    """``text`` as a JSON literal, or as it is when it is none (then a non-string field reports the wrong type)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # not JSON; ValueError also for > 4300-digit integers
        return text


def add_scale_arguments(parser: argparse.ArgumentParser, default: str = "toy") -> None:
    """The arguments every command line that runs at a scale shares: ``--scale``, ``--threads``, overrides."""
    parser.add_argument("--scale", default=default, help="smoke, toy, paper, small or full")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch CPU threads outside the cached stages, which always build on one (0: torch's "
                             "default; 1 is much faster on a CPU shared with other jobs)")
    parser.add_argument("overrides", nargs="*", help="profile overrides, e.g. pretrain.tokens=2000000")


def set_threads(threads: int) -> None:
    """``torch.set_num_threads(threads)``, unless ``threads`` is 0 (torch's default)."""
    if threads:
        import torch

        torch.set_num_threads(threads)


def profile_from_arguments(args: argparse.Namespace) -> Profile:
    """Apply ``--threads`` and return the ``--scale`` profile with the overrides (from :func:`add_scale_arguments`)."""
    set_threads(args.threads)
    return load_profile(args.scale, parse_overrides(args.overrides))


def seed_inputs(profile: Profile, *roles: str) -> dict[str, int]:
    """What a stage's key adds for the seeds of ``roles`` it reads: each one that differs from ``seed``.

    A key already holds ``seed``; a seed of a role left at ``seed`` adds nothing,
    so every key of a profile that sets none (every shipped one) stays as it was.

    >>> seed_inputs(load_profile("smoke", {"train_seed": 2}), "data", "train")
    {'train_seed': 2}
    """
    unknown = [role for role in roles if role not in SEED_ROLES]
    if unknown:
        raise ValueError(f"unknown seed role {unknown[0]!r}: use {', '.join(SEED_ROLES)}")
    seeds = profile.seeds
    return {f"{role}_seed": getattr(seeds, role) for role in roles if getattr(seeds, role) != profile.seed}


def precision_inputs(profile: Profile) -> dict[str, str]:
    """What a training stage's key adds for ``engine.precision``: nothing at ``fp32``, so no shipped key moves."""
    precision = profile.engine.precision
    return {} if precision == "fp32" else {"precision": precision}


def domains_inputs(profile: Profile) -> dict[str, Any]:
    """What a stage's key adds for the ``domains`` knobs: the ones off today's world, so no shipped key moves."""
    changed = {f.name: getattr(profile.domains, f.name) for f in fields(DomainsConfig)
               if getattr(profile.domains, f.name) != f.default}
    return {"domains": changed} if changed else {}
