"""The whole cascade (chapter 14): every RL stage in order, the same stages in another order, and joint RL.

:func:`run_cascade` chains the stage functions of chapters 09-13 from the SFT
checkpoint: RLHF (half-half, the largest reward model) → IF-RL (``/no_think``,
the verifier) → Math RL (filtered length extension) → Code RL (at
``rl.temperature``) → SWE RL (the execution-free reward, every context stage).
In the default order every stage is the very stage its own chapter built (the
same cache key, shipped under ``data/checkpoints/``), so the cascade resumes from
whatever is committed and trains only what is missing. Any other order (the
paper's claim that RLHF first helps later reasoning RL is tested with RLHF
last) runs the same stage functions from other starts.

:func:`joint_rl` is the alternative the paper argues against: one GRPO run over
all five RL domains mixed, with the same number of prompts per domain as the
cascade trained on. Each domain keeps its own reward, through
:class:`DomainReward` (a reward that scores its domain's rollouts and returns
``None`` for the rest, which TRL skips), so each domain logs its own curve and
its own verification time. Where the kit departs from the cascade: one length
limit for all (the longest of the stages'), RL's own learning rate, no dynamic
filtering and no length or context schedule, as a mixed run cannot follow
five schedules at once.
"""
from __future__ import annotations

import dataclasses
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from cascadekit.stages import StageOutput

from cascadekit.training.pipeline import chat_grpo
from cascadekit.profiles import Profile
from cascadekit.rewards import RewardFn, verifier_reward
from cascadekit.training.cascade import (
    code_rl_records, code_rl_stage, if_rl_stage, largest_reward_model, rl_records, rlhf_records, rlhf_stage,
    sft_checkpoint,
)
from cascadekit.training.math_rl import math_records, math_reward, math_rl
from cascadekit.training.reward_model import RewardModelScore
from cascadekit.training.swe_judge import SemanticJudge
from cascadekit.training.swe_rl import arm_rewards, judge, stage_records, swe_rl

#: A stage function: ``(start, profile, work_dir) -> (its GRPO runs in order, seconds spent outside them)``.
#: No runs: the stage trained nothing. The seconds outside are Math RL's screens.
StageFn = Callable[[StageOutput, Profile, Path], tuple[list[StageOutput], float]]

#: The paper's order, general to specialised.
ORDER = ("RLHF", "IF-RL", "Math RL", "Code RL", "SWE RL")
#: Each RL stage's own domain and the mode it trains in (None: both, half-half).
TARGETS: dict[str, tuple[str, str | None]] = {
    "RLHF": ("general", None), "IF-RL": ("instructions", "no_think"), "Math RL": ("math", "think"),
    "Code RL": ("code", "think"), "SWE RL": ("swe", "think"),
}
#: The RL domains, in the cascade's order (joint RL mixes some or all of them).
TARGET_DOMAINS = tuple(domain for domain, _ in TARGETS.values())
#: The most prompts one joint run may name (the toy cascade trains 1,848): a typo of a few more digits
#: is one error, not a list of a billion records.
MAX_JOINT_PROMPTS = 1_000_000


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


def _rlhf(start: StageOutput, profile: Profile, work_dir: Path) -> tuple[list[StageOutput], float]:
    return [rlhf_stage(profile, "half-half", largest_reward_model(profile), work_dir, start=start)], 0.0


def _if_rl(start: StageOutput, profile: Profile, work_dir: Path) -> tuple[list[StageOutput], float]:
    return [if_rl_stage(start, profile, False, verifier_reward, work_dir)], 0.0


def _math_rl(start: StageOutput, profile: Profile, work_dir: Path) -> tuple[list[StageOutput], float]:
    stages = math_rl(start, profile, work_dir)
    return [s.grpo for s in stages if s.grpo], sum(s.screen["screen_s"] for s in stages if s.screen)


def _code_rl(start: StageOutput, profile: Profile, work_dir: Path) -> tuple[list[StageOutput], float]:
    return [code_rl_stage(start, profile, profile.rl.temperature, work_dir)], 0.0


def _swe_rl(start: StageOutput, profile: Profile, work_dir: Path) -> tuple[list[StageOutput], float]:
    reward, watched = arm_rewards(profile, SemanticJudge(judge(profile)))["execution-free"]
    return [stage.grpo for stage in swe_rl(start, profile, work_dir, reward, watched)], 0.0


#: The stage functions of chapters 09-13, by name.
STAGES: dict[str, StageFn] = {"RLHF": _rlhf, "IF-RL": _if_rl, "Math RL": _math_rl, "Code RL": _code_rl,
                              "SWE RL": _swe_rl}


def check_order(order: Sequence[str]) -> tuple[str, ...]:
    """``order`` as a tuple, after checking it names each RL stage at most once."""
    unknown = [name for name in order if name not in STAGES]
    if unknown:
        raise ValueError(f"unknown cascade stage {unknown[0]!r}: use {', '.join(STAGES)}")
    if len(set(order)) != len(order):
        raise ValueError(f"a cascade runs each stage once, got {list(order)}")
    return tuple(order)


def run_cascade(profile: Profile, work_dir: Path, order: Sequence[str] = ORDER,
                on_stage: Callable[[CascadeStage], None] | None = None) -> list[CascadeStage]:
    """SFT, then each stage of ``order`` from the last one's checkpoint; SFT first in the list.

    ``on_stage`` is called after each stage (the chapter evaluates there, so a long
    run reports as it goes).
    """
    sft = sft_checkpoint(profile)
    stages = [CascadeStage("SFT", (), sft)]
    if on_stage:
        on_stage(stages[0])
    for name in check_order(order):
        started = time.perf_counter()
        start = stages[-1].checkpoint
        runs, other_s = STAGES[name](start, profile, work_dir / name.lower().replace(" ", "-"))
        stages.append(CascadeStage(name, tuple(runs), runs[-1] if runs else start, other_s))
        print(f"{name}: {stages[-1].checkpoint.key} ({time.perf_counter() - started:.0f} s)")
        if on_stage:
            on_stage(stages[-1])
    return stages


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
    swe, _ = arm_rewards(profile, SemanticJudge(judge(profile)))["execution-free"]
    return [DomainReward("general", RewardModelScore(largest_reward_model(profile))),
            DomainReward("instructions", verifier_reward), DomainReward("math", math_reward(profile)),
            DomainReward("code", verifier_reward), DomainReward("swe", swe)]


def domain_pools(profile: Profile) -> dict[str, list[dict[str, Any]]]:
    """Each RL domain's prompt pool, exactly as its cascade stage draws it."""
    return {"general": rlhf_records(profile, "half-half"),
            "instructions": rl_records(profile, "instructions", False, 2),
            "math": math_records(profile), "code": code_rl_records(profile),
            "swe": [r for context in profile.swe_rl.contexts for r in stage_records(profile, context)]}


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
    """``prompts[domain]`` prompts of each domain's pool (cycled when the cascade took more), shuffled together."""
    pools = domain_pools(profile)
    unknown = set(prompts) - set(pools)
    if unknown:
        raise ValueError(f"joint RL has no domain {sorted(unknown)[0]!r}: use {', '.join(pools)}")
    records = [pools[d][i % len(pools[d])] for d, n in prompts.items() for i in range(n)]
    random.Random(profile.seed).shuffle(records)
    return records


def at_joint(profile: Profile) -> Profile:
    """``profile`` with RL's maximum completion length the longest of every stage's (one limit for the mixed batch)."""
    longest = max(profile.rl.max_completion_length, profile.swe_rl.length, *profile.math_rl.lengths)
    return dataclasses.replace(profile, rl=dataclasses.replace(profile.rl, max_completion_length=longest))


def joint_rl(profile: Profile, prompts: Mapping[str, int], work_dir: Path) -> StageOutput:
    """Joint RL from the SFT checkpoint: every domain's prompts mixed in one GRPO run, each with its own reward."""
    return chat_grpo(sft_checkpoint(profile), joint_records(profile, prompts), at_joint(profile), work_dir,
                     reward=joint_rewards(profile), in_order=True)
