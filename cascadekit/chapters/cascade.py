"""Part II's wing: the cascade's stage graph as data, each stage's prompts and builder, and joint RL.

:data:`TABLE` is the cascade: SFT (chapter 08) → RLHF → IF-RL → Math RL → Code RL
→ SWE RL (chapters 09-13), one row per stage with its own domain and mode, its
builder and the stage it starts from. Everything that names a stage reads it:
the chapters, ``cascadekit cascade --order``, ``cascadekit launch`` (its
``if-rl`` spellings are :attr:`StageSpec.slug`) and chapter 14's exercises.

:func:`checkpoint` resolves a stage of the cascade (the stage its own chapter
built: the same cache key, shipped under ``data/checkpoints/`` at toy) once per
process, with every stage before it; the functions chapters 09-13 call for their
start (:func:`sft_checkpoint`, :func:`unified_rlhf`, :func:`unified_if_rl`,
:func:`unified_math_rl`, :func:`swe_rl_start`, ...) read it. Each stage is the
kit's strict on-policy GRPO (:func:`cascadekit.training.pipeline.chat_grpo`) on
one domain's RL-split prompts, from the previous stage's checkpoint:

* **RLHF** (chapter 09): general prompts only (math and code stay out, as in the
  paper), rewarded by the reward model's predicted quality. Arms differ in the
  mode each prompt is asked in: *half-half* (every batch half ``/think``, half
  ``/no_think``, the paper's choice for the unified model), *think only*, *no_think only*.
* **IF-RL** (chapter 10): instruction-following prompts, rewarded by the strict
  instruction verifier. The unified model runs it in ``/no_think`` only (the
  paper's choice, because the verifier alone can cost human alignment); the
  paper's dedicated thinking model adds the reward model's score to the
  verifier's (:func:`verifier_plus_reward_model`).
* **Math RL** (chapter 11): filtered length extension
  (:func:`cascadekit.training.math_rl.length_extension`) on :func:`math_records`.
* **Code RL** (chapter 12, :func:`code_rl_stage`): code prompts over
  ``code_rl.ops`` in ``/think``, the pass-all-tests reward (the code verifier's
  0/1), one arm per sampling temperature, rollouts verified while the batch
  still generates (:class:`cascadekit.training.async_rewards.StreamingRewards`, ``code_rl.workers``).
* **SWE RL** (chapter 13): the execution-free reward, every context stage
  (:func:`cascadekit.training.swe_rl.swe_rl`).

:func:`run_cascade` chains the builders in any order (chapter 14): in the
table's order every stage is the one :func:`checkpoint` resolves, so the cascade
resumes from whatever is committed and trains only what is missing; any other
order (the paper's claim that RLHF first helps later reasoning RL is tested
with RLHF last) runs the same builders from other starts.

:func:`joint_rl` is the alternative the paper argues against: one GRPO run over
all five RL domains mixed, with the same number of prompts per domain as the
cascade trained on. Each domain keeps its own reward, through
:class:`DomainReward` (a reward that scores its domain's rollouts and returns
``None`` for the rest, which TRL skips), so each domain logs its own curve and
its own verification time. Where the kit departs from the cascade: one length
limit for all (the longest of the stages'), RL's own learning rate, no dynamic
filtering and no length or context schedule, as a mixed run cannot follow
five schedules at once.

Chapter 15's multi-domain on-policy distillation reads the cascade too: each RL
domain's teacher is the stage that scores best on that domain's validation prompts
(:func:`validation_records`, :func:`domain_teachers`), and MOPD is a stage an order
may place anywhere (:data:`PLACEABLE`, ``cascadekit cascade --order``).
"""
from __future__ import annotations

import dataclasses
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from cascadekit.artifacts import cache_root
from cascadekit.domains import chat_record, chat_records, configured, domains, draw_tasks, prompt_text
from cascadekit.evaluation.stage_table import stage_table
from cascadekit.profiles import Profile, RLConfig
from cascadekit.rewards import RewardFn, verifier_reward
from cascadekit.stages import StageOutput
from cascadekit.training.chat_base import chat_base
from cascadekit.training.distillation import mopd_stage, select_single_teacher, select_teachers
from cascadekit.training.math_rl import LengthStage, length_extension, math_reward
from cascadekit.training.pipeline import chat_grpo
from cascadekit.training.released_data import available_pools
from cascadekit.training.released_rl import is_released, released_records, released_reward, released_swe_rl
from cascadekit.training.reward_model import RewardModelScore, reward_model_stage
from cascadekit.training.sft import sft_stages
from cascadekit.training.swe_judge import SemanticJudge
from cascadekit.training.swe_rl import arm_rewards, judge_from, stage_records, swe_rl

#: The RLHF arms: which mode each prompt is asked in (None: alternate, half-half).
RLHF_ARMS = {"half-half": None, "think only": True, "no_think only": False}
#: The reward model's weight beside the 0/1 instruction verifier in the combined IF-RL reward.
IF_RM_WEIGHT = 0.5
#: The most prompts one joint run may name (the toy cascade trains 1,848): a typo of a few more digits
#: is one error, not a list of a billion records.
MAX_JOINT_PROMPTS = 1_000_000

# ---------------------------------------------------------------------------
# Each stage's prompts
# ---------------------------------------------------------------------------


def rl_records(profile: Profile, domain: str, think: bool | None, seed_offset: int, n: int | None = None,
               ops: tuple[int, int] | None = None) -> list[dict[str, Any]]:
    """``n`` RL-split prompts of ``domain`` over ``ops``, in mode ``think`` (defaults: ``rl.samples``, ``sft.ops``).

    ``think`` None alternates, starting with ``/think``; fed in order
    (``chat_grpo(in_order=True)``), every batch of an even ``prompts_per_step`` is
    exactly half each mode. The prompts follow the data seed (plus ``seed_offset``, one per stage).
    With ``engine.data: released`` they are the first ``n`` rows of the domain's released RL set instead
    (:func:`cascadekit.training.released_rl.released_records`).
    """
    if is_released(profile):
        return released_records(profile, domain, n or profile.rl.samples, think)
    lo, hi = ops or profile.sft.ops
    tasks = draw_tasks(configured(domain, profile.domains), n or profile.rl.samples, profile.seeds.data + seed_offset,
                       "rl", range(lo, hi + 1))
    return [chat_record(t, i % 2 == 0 if think is None else think) for i, t in enumerate(tasks)]


def rlhf_records(profile: Profile, arm: str) -> list[dict[str, Any]]:
    """The general prompts of one RLHF arm (the same prompts in every arm, only the modes differ)."""
    if arm not in RLHF_ARMS:
        raise ValueError(f"unknown RLHF arm {arm!r}: use one of {', '.join(RLHF_ARMS)}")
    return rl_records(profile, "general", RLHF_ARMS[arm], 1)


def if_rl_records(profile: Profile, think: bool) -> list[dict[str, Any]]:
    """IF-RL's instruction prompts, all in one mode."""
    return rl_records(profile, "instructions", think, 2)


def math_records(profile: Profile) -> list[dict[str, Any]]:
    """The Math RL pool: ``math_rl.pool`` RL-split math prompts over ``math_rl.ops``, in ``/think``."""
    return rl_records(profile, "math", True, 3, profile.math_rl.pool, profile.math_rl.ops)


def code_rl_records(profile: Profile) -> list[dict[str, Any]]:
    """``code_rl.prompts`` RL-split code prompts over ``code_rl.ops``, all asked with ``/think``.

    Think only: the paper's Code RL trains long reasoning, and at toy scale the
    think mode is the one that sometimes solves op 4 (the no_think answer is the
    same code block written without its steps).
    """
    return rl_records(profile, "code", True, 4, profile.code_rl.prompts, profile.code_rl.ops)


# ---------------------------------------------------------------------------
# Each stage's training, from any start
# ---------------------------------------------------------------------------


def rlhf_stage(profile: Profile, arm: str, reward_model: StageOutput, work_dir: Path,
               start: StageOutput | None = None) -> StageOutput:
    """RLHF from ``start`` (default: the SFT checkpoint) against ``reward_model``, in one arm's modes.

    Chapter 14's order ablation runs it last, from the SWE RL checkpoint.
    """
    return chat_grpo(start or sft_checkpoint(profile), rlhf_records(profile, arm), profile, work_dir,
                     reward=RewardModelScore(reward_model), in_order=True, rl=rlhf_settings(profile))


def rlhf_settings(profile: Profile) -> RLConfig:
    """RLHF's RL settings: RL's, with ``rlhf.lr`` and ``rlhf.kl_beta`` where they are set."""
    own = {k: v for k, v in dataclasses.asdict(profile.rlhf).items() if v is not None}
    return dataclasses.replace(profile.rl, **own) if own else profile.rl


def verifier_plus_reward_model(scorer: RewardModelScore, weight: float = IF_RM_WEIGHT) -> RewardFn:
    """The dedicated thinking model's IF-RL reward: the verifier's score plus ``weight`` x predicted quality."""
    def reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        checked = verifier_reward(prompts, completions, **kwargs)
        return [v + weight * q for v, q in zip(checked, scorer(prompts, completions))]

    reward.__name__ = f"verifier_plus_{weight:g}_{scorer.__name__}"
    return reward


def domain_reward(profile: Profile) -> RewardFn:
    """The verifiers' reward: each domain's own on the kit's world, the released rows' gold on released data."""
    return released_reward if is_released(profile) else verifier_reward


def if_rl_stage(start: StageOutput, profile: Profile, think: bool, reward: RewardFn, work_dir: Path) -> StageOutput:
    """IF-RL from ``start`` on instruction prompts in one mode, with ``reward``."""
    return chat_grpo(start, if_rl_records(profile, think), profile, work_dir, reward=reward, in_order=True)


def math_rl(start: StageOutput, profile: Profile, work_dir: Path, filtering: bool = True) -> list[LengthStage]:
    """Math RL from ``start`` on :func:`math_records`: filtered (or unfiltered) length extension, a stage per epoch."""
    return length_extension(start, math_records(profile), profile, work_dir, filtering)


def code_rl_settings(profile: Profile, temperature: float) -> RLConfig:
    """A Code RL arm's RL settings: RL's, sampling at ``temperature``."""
    return dataclasses.replace(profile.rl, temperature=temperature)


def code_rl_stage(start: StageOutput, profile: Profile, temperature: float, work_dir: Path) -> StageOutput:
    """Code RL from ``start`` at one sampling ``temperature``: pass-all-tests reward, streamed verification.

    The reward is the code verifier's all-or-nothing score (every hidden test
    passes, else 0, never raising), through :func:`verifier_reward`; ``code_rl.workers``
    threads verify each rollout as soon as it ends.
    """
    return chat_grpo(start, code_rl_records(profile), profile, work_dir, reward=domain_reward(profile),
                     workers=profile.code_rl.workers, rl=code_rl_settings(profile, temperature))


# ---------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------

#: What a builder trained: its GRPO runs in order (none for SFT, several for Math RL and SWE RL), its last
#: checkpoint, and the seconds spent outside the runs (Math RL's screens).
Built = tuple[tuple[StageOutput, ...], StageOutput, float]
#: A stage's builder: ``(start, profile, work_dir) -> Built``.
Builder = Callable[[StageOutput, Profile, Path], Built]


def _sft(start: StageOutput, profile: Profile, work_dir: Path) -> Built:
    return (), sft_stages(start, profile)[-1], 0.0


def _rlhf(start: StageOutput, profile: Profile, work_dir: Path) -> Built:
    run = rlhf_stage(profile, "half-half", largest_reward_model(profile), work_dir, start=start)
    return (run,), run, 0.0


def _if_rl(start: StageOutput, profile: Profile, work_dir: Path) -> Built:
    run = if_rl_stage(start, profile, False, domain_reward(profile), work_dir)
    return (run,), run, 0.0


def _math_rl(start: StageOutput, profile: Profile, work_dir: Path) -> Built:
    stages = math_rl(start, profile, work_dir)
    return (tuple(s.grpo for s in stages if s.grpo), stages[-1].checkpoint,
            sum(s.screen["screen_s"] for s in stages if s.screen))


def _code_rl(start: StageOutput, profile: Profile, work_dir: Path) -> Built:
    run = code_rl_stage(start, profile, profile.rl.temperature, work_dir)
    return (run,), run, 0.0


def _swe_rl(start: StageOutput, profile: Profile, work_dir: Path) -> Built:
    if is_released(profile):
        run = released_swe_rl(start, profile, work_dir)
        return (run,), run, 0.0
    reward, watched = arm_rewards(profile, SemanticJudge(judge(profile)))["execution-free"]
    runs = tuple(stage.grpo for stage in swe_rl(start, profile, work_dir, reward, watched))
    return runs, runs[-1], 0.0


@dataclass(frozen=True)
class StageSpec:
    """One row of the cascade: a stage's name, what it trains, how, and where it starts."""

    name: str
    domain: str | None  # its own domain (None: SFT trains every domain)
    mode: str | None  # the mode it trains in: "think", "no_think", None (both, half-half)
    build: Builder
    after: str | None  # the stage it starts from in the cascade (None: the chat base)
    chapter: str  # the chapter that builds and teaches it

    @property
    def slug(self) -> str:
        """The stage's name on a command line and as a folder: ``if-rl``, ``math-rl``."""
        return self.name.lower().replace(" ", "-")


#: The cascade, in the paper's order (general to specialised): the one place the stages are named.
TABLE = (
    StageSpec("SFT", None, None, _sft, None, "08"),
    StageSpec("RLHF", "general", None, _rlhf, "SFT", "09"),
    StageSpec("IF-RL", "instructions", "no_think", _if_rl, "RLHF", "10"),
    StageSpec("Math RL", "math", "think", _math_rl, "IF-RL", "11"),
    StageSpec("Code RL", "code", "think", _code_rl, "Math RL", "12"),
    StageSpec("SWE RL", "swe", "think", _swe_rl, "Code RL", "13"),
)
#: Each stage's row, by name.
STAGES = {spec.name: spec for spec in TABLE}
#: The RL stages after SFT, in the paper's order.
ORDER = tuple(spec.name for spec in TABLE if spec.after)
#: Each RL stage's own domain and the mode it trains in (None: both, half-half).
TARGETS: dict[str, tuple[str, str | None]] = {name: (STAGES[name].domain, STAGES[name].mode) for name in ORDER}
#: The RL domains, in the cascade's order (joint RL mixes some or all of them).
TARGET_DOMAINS = tuple(domain for domain, _ in TARGETS.values())


@dataclass(frozen=True)
class CascadeStage:
    """One stage of a cascade: its name, its GRPO runs (Math RL and SWE RL have several), its last checkpoint."""

    name: str
    runs: tuple[StageOutput, ...]
    checkpoint: StageOutput
    other_s: float = 0.0  # build time outside the GRPO runs (Math RL's screens)

    def prompts(self, profile: Profile) -> int:
        """Prompts the stage trained on: steps x ``rl.prompts_per_step``, over its runs."""
        return sum(run.metrics["steps"] for run in self.runs) * profile.rl.prompts_per_step

    @property
    def train_s(self) -> float:
        """Seconds the stage took to build (its runs and screens, as measured when each was built)."""
        return float(sum(run.metrics["train_s"] for run in self.runs)) + self.other_s


# ---------------------------------------------------------------------------
# The cascade's checkpoints, each resolved once per process
# ---------------------------------------------------------------------------

#: What this process resolved: (what, profile, cache root) -> the result.
_RESOLVED: dict[tuple[str, Profile, Path], Any] = {}


def _once(what: str, profile: Profile, resolve: Callable[[], Any]) -> Any:
    """``resolve()``'s result, computed once per (``what``, profile, artifact cache) in this process.

    The cache root is part of the key: a process that switches caches (a test's
    own folder) resolves again, into the cache it now uses.
    """
    key = (what, profile, cache_root())
    if key not in _RESOLVED:
        _RESOLVED[key] = resolve()
    return _RESOLVED[key]


def default_work_dir() -> Path:
    """Where a cascade stage resolved without a ``work_dir`` writes its trainer files, if it has to train."""
    return cache_root() / "runs" / "cascade"


def cascade_stage(name: str, profile: Profile, work_dir: Path | None = None) -> CascadeStage:
    """Stage ``name`` of the cascade in the table's order, with its runs; resolved once per process.

    The stage starts from the checkpoint of the one before it (the chat base for
    SFT), resolved the same way. A stage that is not cached or shipped trains in
    ``work_dir / slug`` (default :func:`default_work_dir`): the trainer's own
    files, never part of a key.
    """
    spec = STAGES[name]
    work_dir = default_work_dir() if work_dir is None else Path(work_dir)

    def resolve() -> CascadeStage:
        start = chat_base(profile) if spec.after is None else checkpoint(spec.after, profile, work_dir)
        return CascadeStage(name, *spec.build(start, profile, work_dir / spec.slug))

    return _once(name, profile, resolve)


def checkpoint(name: str, profile: Profile, work_dir: Path | None = None) -> StageOutput:
    """The last checkpoint of stage ``name`` of the cascade (:func:`cascade_stage`), resolved once per process."""
    return cascade_stage(name, profile, work_dir).checkpoint


def sft_checkpoint(profile: Profile) -> StageOutput:
    """Chapter 08's last SFT stage, where the cascade's RL starts (shipped at toy scale)."""
    return checkpoint("SFT", profile)


def reward_models(profile: Profile) -> dict[int, StageOutput]:
    """Chapter 09's reward models, by size (decoder layers; ``reward_model.widths`` widens them), trained from
    the SFT checkpoint."""
    return {layers: _reward_model(profile, layers) for layers in profile.reward_model.layers}


def largest_reward_model(profile: Profile) -> StageOutput:
    """The reward model RLHF and IF-RL use: the largest of ``reward_model.layers``."""
    return _reward_model(profile, max(profile.reward_model.layers))


def _reward_model(profile: Profile, layers: int) -> StageOutput:
    return _once(f"reward model {layers}", profile,
                 lambda: reward_model_stage(sft_checkpoint(profile), profile, layers,
                                            profile.reward_model.sizes[layers]))


def judge(profile: Profile) -> StageOutput:
    """SWE RL's semantic judge, trained from the SFT checkpoint (:func:`cascadekit.training.swe_rl.judge_from`)."""
    return _once("SWE judge", profile, lambda: judge_from(sft_checkpoint(profile), profile))


def unified_rlhf(profile: Profile, work_dir: Path) -> StageOutput:
    """The cascade's RLHF checkpoint: half-half, against the largest reward model."""
    return checkpoint("RLHF", profile, work_dir)


def unified_if_rl(profile: Profile, work_dir: Path) -> StageOutput:
    """The cascade's IF-RL checkpoint: ``/no_think`` instruction prompts, the verifier alone, from RLHF's."""
    return checkpoint("IF-RL", profile, work_dir)


def unified_math_rl(profile: Profile, work_dir: Path) -> StageOutput:
    """The cascade's Math RL checkpoint: filtered length extension from the cascade's IF-RL checkpoint."""
    return checkpoint("Math RL", profile, work_dir)


def swe_rl_start(profile: Profile, work_dir: Path) -> StageOutput:
    """Where SWE RL starts: the cascade's Code RL checkpoint (chapter 12's arm at ``rl.temperature``, shipped)."""
    return checkpoint(STAGES["SWE RL"].after, profile, work_dir)


def unified_swe_rl(profile: Profile, work_dir: Path) -> StageOutput:
    """The cascade's SWE RL checkpoint: the execution-free reward, every context stage, from :func:`swe_rl_start`."""
    return checkpoint("SWE RL", profile, work_dir)


# ---------------------------------------------------------------------------
# The cascade in any order
# ---------------------------------------------------------------------------


def check_order(order: Sequence[str]) -> tuple[str, ...]:
    """``order`` as a tuple, after checking it names each RL stage at most once."""
    unknown = [name for name in order if name not in ORDER and name not in PLACEABLE]
    if unknown:
        raise ValueError(f"unknown cascade stage {unknown[0]!r}: use {', '.join((*ORDER, *PLACEABLE))}")
    if len(set(order)) != len(order):
        raise ValueError(f"a cascade runs each stage once, got {list(order)}")
    return tuple(order)


def run_cascade(profile: Profile, work_dir: Path, order: Sequence[str] = ORDER,
                on_stage: Callable[[CascadeStage], None] | None = None) -> list[CascadeStage]:
    """SFT, then each stage of ``order`` from the last one's checkpoint; SFT first in the list.

    While ``order`` follows the table, each stage is the cascade's own
    (:func:`cascade_stage`, resolved once per process); from the first stage out
    of the table's order on, each is built from the one before it. ``on_stage``
    is called after each stage (the chapter evaluates there, so a long run
    reports as it goes).
    """
    stages = [cascade_stage("SFT", profile, work_dir)]
    if on_stage:
        on_stage(stages[0])
    in_table = True
    for name in check_order(order):
        started = time.perf_counter()
        spec = STAGES[name] if name in STAGES else PLACEABLE[name]
        in_table = in_table and name in STAGES and spec.after == stages[-1].name
        if in_table:
            stages.append(cascade_stage(name, profile, work_dir))
        else:
            stages.append(CascadeStage(name, *spec.build(stages[-1].checkpoint, profile, work_dir / spec.slug)))
        print(f"{name}: {stages[-1].checkpoint.key} ({time.perf_counter() - started:.0f} s)")
        if on_stage:
            on_stage(stages[-1])
    return stages


# ---------------------------------------------------------------------------
# Joint RL
# ---------------------------------------------------------------------------


class DomainReward:
    """One domain's reward inside a mixed batch: its score for that domain's rollouts, ``None`` for the rest.

    TRL sums a rollout's rewards skipping ``None``, so a list of these, one per
    domain, gives every rollout exactly its own domain's reward. ``seconds`` adds
    up the time spent scoring (the heterogeneous verifiers' cost in one batch).
    """

    def __init__(self, domain: str, reward: RewardFn):
        self.domain, self.reward, self.seconds = domain, reward, 0.0
        self.__name__ = f"{domain}:{reward.__name__}"

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
        domains = kwargs.get("domain")
        if domains is None or len(domains) != len(completions):
            raise ValueError("a domain reward needs a 'domain' dataset column, one entry per completion")
        mine = [i for i, d in enumerate(domains) if d == self.domain]
        out: list[float | None] = [None] * len(completions)
        if not mine:
            return out
        started = time.perf_counter()
        sliced = {k: [v[i] for i in mine] if isinstance(v, list) and len(v) == len(completions) else v
                  for k, v in kwargs.items()}
        scores = self.reward([prompts[i] for i in mine], [completions[i] for i in mine], **sliced)
        self.seconds += time.perf_counter() - started
        for i, score in zip(mine, scores):
            out[i] = float(score)
        return out


def joint_rewards(profile: Profile) -> list[DomainReward]:
    """Each RL domain's cascade reward: the reward model (general), the verifiers, Math RL's, the execution-free SWE."""
    if is_released(profile):  # the released SWE rows train on the gold patch alone (no judge, no hidden tests)
        swe = released_reward
    else:
        swe, _ = arm_rewards(profile, SemanticJudge(judge(profile)))["execution-free"]
    return [DomainReward("general", RewardModelScore(largest_reward_model(profile))),
            DomainReward("instructions", domain_reward(profile)), DomainReward("math", math_reward(profile)),
            DomainReward("code", domain_reward(profile)), DomainReward("swe", swe)]


def domain_pools(profile: Profile) -> dict[str, list[dict[str, Any]]]:
    """Each RL domain's prompt pool, exactly as its cascade stage draws it; on released data, a domain whose
    file is missing is skipped with a note."""
    pools = {"general": lambda: rlhf_records(profile, "half-half"),
             "instructions": lambda: if_rl_records(profile, False),
             "math": lambda: math_records(profile), "code": lambda: code_rl_records(profile),
             "swe": lambda: [r for context in profile.swe_rl.contexts for r in stage_records(profile, context)]}
    if is_released(profile):
        pools["swe"] = lambda: released_records(profile, "swe", profile.swe_rl.prompts, True)
        return available_pools(pools)
    return {domain: build() for domain, build in pools.items()}


def parse_joint(text: str) -> dict[str, int]:
    """``"swe=192,instructions=512"`` as prompts per domain, for a joint run over some of the RL domains.

    A lever for chapter 14: joint RL over fewer domains tells which part of the
    mixing changes a domain's result. Unknown domains, missing or non-positive
    counts, a domain named twice and more than :data:`MAX_JOINT_PROMPTS` are one ValueError.
    """
    prompts: dict[str, int] = {}
    for item in (part.strip() for part in text.split(",") if part.strip()):
        domain, sep, count = (piece.strip() for piece in item.partition("="))
        if domain not in TARGET_DOMAINS:
            raise ValueError(f"joint RL has no domain {domain!r}: use {', '.join(TARGET_DOMAINS)}")
        if not sep or not count.isdigit() or int(count) < 1:
            raise ValueError(f"joint RL needs DOMAIN=PROMPTS with a positive count, got {item!r}")
        if domain in prompts:
            raise ValueError(f"joint RL names domain {domain!r} twice")
        prompts[domain] = int(count)
    if not prompts:
        raise ValueError("joint RL needs at least one DOMAIN=PROMPTS")
    if sum(prompts.values()) > MAX_JOINT_PROMPTS:
        raise ValueError(f"joint RL names {sum(prompts.values()):,} prompts: at most {MAX_JOINT_PROMPTS:,}")
    return prompts


def joint_records(profile: Profile, prompts: Mapping[str, int]) -> list[dict[str, Any]]:
    """``prompts[domain]`` prompts of each domain's pool (cycled when the cascade took more), shuffled together
    by the training seed (the order is the run's shuffling, fed in order; the pools are the data seed's)."""
    pools = domain_pools(profile)
    unknown = set(prompts) - set(pools)
    if unknown:
        raise ValueError(f"joint RL has no domain {sorted(unknown)[0]!r}: use {', '.join(pools)}")
    records = [pools[d][i % len(pools[d])] for d, n in prompts.items() for i in range(n)]
    random.Random(profile.seeds.train).shuffle(records)
    return records


def joint_rl_settings(profile: Profile) -> RLConfig:
    """Joint RL's RL settings: RL's, with the longest maximum completion length of every stage's (one limit for
    the mixed batch)."""
    longest = max(profile.rl.max_completion_length, profile.swe_rl.length, *profile.math_rl.lengths)
    return dataclasses.replace(profile.rl, max_completion_length=longest)


def joint_rl(profile: Profile, prompts: Mapping[str, int], work_dir: Path, start: StageOutput | None = None,
             records: Sequence[Mapping[str, Any]] | None = None,
             rewards: Sequence[DomainReward] | None = None) -> StageOutput:
    """Joint RL from ``start`` (default: the SFT checkpoint): every domain's prompts mixed in one GRPO run, each
    with its own reward. ``records`` (default: :func:`joint_records` of ``prompts``) lets chapter 15 run the same
    GRPO over one segment of its mixed prompts at a time; ``rewards`` (default: :func:`joint_rewards` of
    ``profile``) lets it score with the shipped cascade's reward model and judge under another training seed."""
    records = joint_records(profile, prompts) if records is None else records
    return chat_grpo(start or sft_checkpoint(profile), records, profile, work_dir,
                     reward=list(rewards) if rewards is not None else joint_rewards(profile), in_order=True,
                     rl=joint_rl_settings(profile))


# ---------------------------------------------------------------------------
# Multi-domain on-policy distillation (chapter 15)
# ---------------------------------------------------------------------------

#: The seed offset of the validation prompts that choose each domain's MOPD teacher.
VALIDATION_SEED = 15


def validation_records(profile: Profile, names: Sequence[str] = TARGET_DOMAINS) -> list[dict[str, Any]]:
    """``sft.eval_tasks`` validation prompts per domain, each in both modes: never the evaluation suite.

    Drawn like the stage table's suite (the same ops, ``sft.ops``, the evaluation seed) but
    from the RL split, with a seed offset of their own and without any prompt an RL stage trains on,
    so a teacher is chosen on prompts neither the evaluation nor the training sees.
    """
    lo, hi = profile.sft.ops
    n, pools = profile.sft.eval_tasks, domain_pools(profile)
    records = []
    for name in names:
        trained = {prompt_text(r) for r in pools.get(name, ())}
        tasks = [t for t in draw_tasks(configured(name, profile.domains), 2 * n, profile.seeds.eval + VALIDATION_SEED,
                                       "rl", range(lo, hi + 1))
                 if prompt_text(chat_record(t, True)) not in trained and prompt_text(chat_record(t, False)) not in trained]
        if len(tasks) < n:
            raise ValueError(f"{name}: only {len(tasks)} of {n} validation prompts are outside the RL pools")
        records += [record for task in tasks[:n] for record in chat_records(task)]
    return records


def validation_scores(profile: Profile, candidates: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
    """Each candidate stage's mean validation score per RL domain (both modes), in the table's order.

    Every stage of the cascade is a candidate by default; each table is a cached
    stage table of its checkpoint on :func:`validation_records`.
    """
    records = validation_records(profile)
    scores = {}
    for name in candidates or [spec.name for spec in TABLE]:
        samples = stage_table(checkpoint(name, profile).checkpoint, profile, f"validation {name}", records)["samples"]
        scores[name] = {d: sum(s["score"] for s in samples if s["domain"] == d)
                        / max(1, sum(s["domain"] == d for s in samples)) for d in TARGET_DOMAINS}
    return scores


def domain_teachers(profile: Profile) -> dict[str, str]:
    """Each RL domain's MOPD teacher: the cascade stage that scores best on its validation prompts (once per process)."""
    return _once("MOPD teachers", profile, lambda: select_teachers(validation_scores(profile), TARGET_DOMAINS))


def single_teacher(profile: Profile, student: str) -> str:
    """The routing control's one teacher: the stage best on the mean over RL domains on validation, not ``student``."""
    return select_single_teacher(validation_scores(profile), TARGET_DOMAINS, exclude=student)


def mopd_teachers(profile: Profile, single: str | None = None) -> dict[str, StageOutput]:
    """Each RL domain's teacher checkpoint: its own (:func:`domain_teachers`), or stage ``single`` for every domain."""
    chosen = {d: single for d in TARGET_DOMAINS} if single else domain_teachers(profile)
    return {domain: checkpoint(name, profile) for domain, name in chosen.items()}


def mopd_prompts(profile: Profile) -> dict[str, int]:
    """MOPD's prompts per RL domain: a sixteenth of ``rl.samples`` each (at least one step's worth).

    The follow-up paper's MOPD ran 30-52 steps where its RL stages ran hundreds;
    at toy scale this is 32 prompts per domain, 20 steps in all.
    """
    per_domain = max(profile.rl.prompts_per_step, profile.rl.samples // 16)
    return {domain: per_domain for domain in TARGET_DOMAINS}


def _mopd(start: StageOutput, profile: Profile, work_dir: Path) -> Built:
    run = mopd_stage(start, joint_records(profile, mopd_prompts(profile)), mopd_teachers(profile), profile, work_dir,
                     rl=joint_rl_settings(profile))
    return (run,), run, 0.0


#: Stages an order may place anywhere that are not the cascade's own (``cascadekit cascade --order``). MOPD
#: distils from the cascade's per-domain teachers wherever it stands; the paper places it after multi-domain RL.
PLACEABLE = {"MOPD": StageSpec("MOPD", None, None, _mopd, "SWE RL", "15")}
