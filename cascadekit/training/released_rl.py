"""The Part II RL stages on the released data (``engine.data: released``): each stage's prompts and reward.

With ``engine.data: released`` (the ``small`` and ``full`` profiles) each RL
stage reads its released set (:mod:`cascadekit.training.released_data`) in the
chat-record shape the toy stages use, from ``engine.data_dir``/<set name> when
set, else streamed from the hub (downloads allowed). :data:`RL_SETS` says which
set each RL domain reads. Its reward judges real answers
(:mod:`cascadekit.verify.released`): :func:`released_reward` scores each
completion by its row's domain and gold, so the same reward serves one stage or
a mix. RLHF's prompts come from here too; its reward stays the reward model's.

A missing domain file is one :class:`ReleasedDataMissing` naming the set and
the file; where a stage mixes domains (joint RL), :func:`cascadekit.training.released_data.available_pools`
skips that domain with a note instead. Released math needs math-verify (the
``released`` extra): without it, reading the released math rows or building
Math RL's reward refuses with one line
(:class:`~cascadekit.verify.released.MathVerifyMissing`), before anything trains.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from cascadekit.chat.format import with_flag
from cascadekit.engine.runtime import download_allowed
from cascadekit.profiles import Profile
from cascadekit.rewards import RewardFn, completion_text
from cascadekit.stages import StageOutput
from cascadekit.training.pipeline import chat_grpo
from cascadekit.training.released_data import available_pools, released_sets, stream_records
from cascadekit.training.swe_rl import swe_rl_settings
from cascadekit.verify.format_switch import format_switches
from cascadekit.verify.ifeval import require_ifeval
from cascadekit.verify.released import (
    MATH_VERIFY_WORKERS, Verdict, require_math_verify, verify_gold_patch, verify_ifeval, verify_math, verify_math_batch,
    verify_stdio,
)

__all__ = ["RL_SETS", "ReleasedDataMissing", "available_pools", "is_released", "released_math_reward",
           "released_math_workers",
           "released_records", "released_reward", "released_swe_rl", "verdict"]

#: The released set each RL domain reads (the domain is its stage's, in chapters/cascade.py's TABLE).
RL_SETS = {"general": "cascade-rl-rlhf", "instructions": "cascade-rl-if", "math": "cascade-rl-math",
           "code": "cascade-rl-code", "swe": "cascade-rl-swe"}


class ReleasedDataMissing(FileNotFoundError):
    """A released set's data file is not where the profile says (names the set and the file)."""


def is_released(profile: Profile) -> bool:
    """Whether the profile's stages read the released data sets (``engine.data: released``)."""
    return profile.engine.data == "released"


def _source(profile: Profile, name: str) -> Path | None:
    return Path(profile.engine.data_dir).expanduser() / name if profile.engine.data_dir else None


def released_records(profile: Profile, domain: str, n: int, think: bool | None) -> list[dict[str, Any]]:
    """The first ``n`` rows (0: all) of ``domain``'s released RL set as chat records, in mode ``think``.

    ``think`` None alternates, starting with ``/think`` (RLHF's half-half batches,
    fed in order), as :func:`cascadekit.chapters.cascade.rl_records` does. Math
    rows need math-verify to be judged, instruction rows IFEval's checks: without them, this refuses (one line).
    """
    if domain not in RL_SETS:
        raise ValueError(f"no released RL set for domain {domain!r}; there are: {', '.join(RL_SETS)}")
    if domain == "math":
        require_math_verify()
    if domain == "instructions":
        require_ifeval()
    name = RL_SETS[domain]
    source = _source(profile, name)
    try:
        records = list(stream_records(name, domain, source, limit=n or None, think=think,
                                      allow_download=download_allowed(profile)))
    except FileNotFoundError as err:
        raise ReleasedDataMissing(f"released set {name} ({released_sets()[name].repo}): {err}") from None
    if not records:
        raise ReleasedDataMissing(f"released set {name}: no rows in {source or released_sets()[name].repo}")
    return records if think is not None else [_in_mode(r, i % 2 == 0) for i, r in enumerate(records)]


def _in_mode(record: dict[str, Any], think: bool) -> dict[str, Any]:
    (turn,) = record["messages"]
    return {**record, "think": think, "messages": [{**turn, "content": with_flag(turn["content"], think)}]}


# ---------------------------------------------------------------------------
# Rewards
# ---------------------------------------------------------------------------


def verdict(domain: str, gold: Mapping[str, Any], text: str) -> Verdict:
    """The verdict on ``text`` for a released row of ``domain`` with ``gold``; never raises."""
    if not isinstance(gold, Mapping):
        return Verdict(0.0, f"malformed gold: {type(gold).__name__}, not an object")
    if domain == "math":
        return verify_math(text, str(gold.get("answer", "")))
    if domain == "code":
        return verify_stdio(text, gold.get("tests") or [])
    if domain == "instructions":
        return verify_ifeval(text, gold.get("instruction_id_list"), gold.get("kwargs") or [])
    if domain == "swe":
        return verify_gold_patch(text, gold.get("patch"))
    return Verdict(0.0, f"no released verifier for domain {domain!r} (RLHF's reward is the reward model's)")


def _golds(completions: list[Any], kwargs: dict[str, Any]) -> tuple[list[str], list[Any]]:
    names, golds = kwargs.get("domain"), kwargs.get("gold")
    if names is None or golds is None or not len(names) == len(golds) == len(completions):
        raise ValueError("the released reward needs 'domain' and 'gold' dataset columns, one entry per completion")
    return list(names), [_parsed(g) for g in golds]


def _parsed(gold: Any) -> Any:
    if not isinstance(gold, str):
        return gold
    try:
        return json.loads(gold)
    except json.JSONDecodeError:
        return None  # a malformed gold is a verdict of 0 with its reason, not a crash


def released_reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """Each completion's score by its released row's verifier (``domain`` and ``gold`` columns, gold as JSON)."""
    names, golds = _golds(completions, kwargs)
    return [verdict(name, gold, completion_text(c)).score for c, name, gold in zip(completions, names, golds)]


released_reward.__name__ = "released_verifier"


def released_math_reward(penalty: float) -> RewardFn:
    """Math RL's reward on released rows: the answer checker's 0/1 minus ``penalty`` for a format switch.

    Refuses without math-verify (:func:`~cascadekit.verify.released.require_math_verify`).
    A batch's answers go to math-verify's bounded workers together
    (:func:`~cascadekit.verify.released.verify_math_batch`).
    """
    if not 0.0 <= penalty <= 1.0:
        raise ValueError(f"penalty must lie in [0, 1], got {penalty!r}")
    require_math_verify()

    def reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        _, golds = _golds(completions, {"domain": ["math"] * len(completions), **kwargs})
        texts = [completion_text(c) for c in completions]
        answers = [str(g.get("answer", "")) if isinstance(g, Mapping) else "" for g in golds]
        verdicts = verify_math_batch(texts, answers)
        return [v.score - penalty * bool(format_switches(t)) for v, t in zip(verdicts, texts)]

    reward.__name__ = reward.__qualname__ = f"released_math_{penalty:g}"
    return reward


def released_math_workers(profile: Profile) -> int:
    """Threads that verify Math RL's rollouts as each one ends, while the batch still generates (streamed rewards,
    :class:`~cascadekit.training.async_rewards.StreamingRewards`, as Code RL's).

    On released data, one per math-verify worker process (a verdict there is
    milliseconds of sympy); on the kit's world none: its integer check costs
    microseconds, less than a thread's hand-off.
    """
    return MATH_VERIFY_WORKERS if is_released(profile) else 0


def released_swe_rl(start: StageOutput, profile: Profile, work_dir: Path) -> StageOutput:
    """SWE RL on the released set: one GRPO run on ``swe_rl.prompts`` rows, rewarded by the gold patch's similarity.

    The released rows carry no context schedule, hidden tests or judge training
    set, so the run has one stage and the execution-free lexical reward alone.
    """
    return chat_grpo(start, released_records(profile, "swe", profile.swe_rl.prompts, True), profile, work_dir,
                     reward=released_reward, rl=swe_rl_settings(profile))

