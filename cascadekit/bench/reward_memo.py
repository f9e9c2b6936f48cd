"""What verifying each distinct rollout once saves: one GRPO step's rewards, every rollout against each distinct one.

``cascadekit bench rewards [--scale toy] [--repeats 3] [--swe-distinct 0.27] [--code-distinct 0.5]``

One step's batch (``rl.prompts_per_step`` prompts x ``rl.group_size`` rollouts)
is scored the way each stage scores it, twice per repeat, alternating which goes
first so that a shared machine's load hits both alike:

* **SWE RL** (the execution-free arm, as :func:`cascadekit.training.swe_rl.arm_rewards`
  wires it): the trained reward (lexical + the semantic judge) and the watched
  lexical, judge and execution rewards. *Every rollout* is the kit before issue 36:
  each reward verifies each rollout, and the judge reads every rollout twice;
  *distinct once* is the kit now (:func:`cascadekit.rewards.once_per_completion`
  and the judge's memory of the last call).
* **Code RL**: the pass-all-tests verifier (the sandbox), the blocking path.

The rollouts are built, not sampled: each group repeats a few answers (the gold
one and wrong ones: for SWE the judge's constructed candidates, for code a
function that returns a constant) so that ``--swe-distinct`` / ``--code-distinct``
of a group's rollouts are distinct. Issue 36 measured 27% distinct in SWE RL's
groups (and 66% in RLHF's); the code share is a setting, not a measurement. The
SWE judge is the profile's (a shipped toy checkpoint, or built on first use).
Times are wall-clock seconds (the sandbox runs in child processes) and CPU
seconds of this process and its children; the script checks that both ways give
the same rewards (the judge's P(YES) to 1e-5).
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from typing import Any, Sequence

from cascadekit.chapters.cascade import code_rl_records, judge
from cascadekit.chat import END_OF_TURN
from cascadekit.domains import chat_record, gold_answer, prompt_text
from cascadekit.profiles import Profile, add_scale_arguments, profile_from_arguments
from cascadekit.rewards import RewardFn, completion_text, reading_markup, verifier_reward
from cascadekit.training.reward_model import scored_text
from cascadekit.training.swe_judge import SemanticJudge, constructed, yes_probabilities
from cascadekit.training.swe_rl import execution_free_reward, execution_reward, lexical_reward, swe_tasks

Batch = tuple[list[str], list[str], dict[str, list[Any]]]


def _groups(candidates: Sequence[Sequence[str]], group_size: int, distinct: float, seed: int) -> list[list[str]]:
    """Each prompt's group: ``round(distinct * group_size)`` of its candidates (at least 1), repeated in a shuffle."""
    rng = random.Random(seed)
    groups = []
    for answers in candidates:
        k = min(len(answers), max(1, round(distinct * group_size)))
        group = [answers[i % k] for i in range(group_size)]
        rng.shuffle(group)
        groups.append(group)
    return groups


def _batch(records: Sequence[dict[str, Any]], groups: Sequence[Sequence[str]]) -> Batch:
    prompts, texts, golds, names = [], [], [], []
    for record, group in zip(records, groups):
        for text in group:
            prompts.append(prompt_text(record))
            texts.append(text)
            golds.append(record["gold"])
            names.append(record["domain"])
    return prompts, texts, {"domain": names, "gold": golds}


def swe_batch(profile: Profile, distinct: float) -> Batch:
    """A step's SWE RL batch over the last context stage's files, with the judge's constructed candidates."""
    rng = random.Random(0)
    context = max(profile.swe_rl.contexts)
    tasks = swe_tasks(profile, profile.rl.prompts_per_step, "rl", profile.seed, range(context + 1))
    candidates = [[answer for _, answer in constructed(task, True, rng)] for task in tasks]
    return _batch([chat_record(task, True) for task in tasks], _groups(candidates, profile.rl.group_size, distinct, 1))


def code_batch(profile: Profile, distinct: float) -> Batch:
    """A step's Code RL batch: the gold program and programs returning a constant."""
    records = code_rl_records(profile)[: profile.rl.prompts_per_step]
    candidates = []
    for record in records:
        name = record["gold"]["function"]
        wrong = [f"<think>\n</think>\n\n```python\ndef {name}(*args):\n    return {k}\n```"
                 for k in range(profile.rl.group_size)]
        candidates.append([gold_answer(record), *wrong])
    return _batch(records, _groups(candidates, profile.rl.group_size, distinct, 2))


class _Ids:
    """A stand-in tokenizer: ids are code points (decoding them is not what is timed)."""

    @staticmethod
    def encode(text: str) -> list[int]:
        return [ord(c) for c in text + END_OF_TURN]

    @staticmethod
    def decode(ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return "".join(map(chr, ids))


def _every_rollout(reward: RewardFn) -> RewardFn:
    """The reading before issue 36: decode every rollout and hand the reward all of them."""
    def read(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        texts = [_Ids.decode(row).split(END_OF_TURN, 1)[0] for row in kwargs["completion_ids"]]
        return reward(prompts, texts, **kwargs)

    return read


def _judge_every_rollout(semantic: SemanticJudge) -> RewardFn:
    def reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        texts = [scored_text(str(p), completion_text(c)) for p, c in zip(prompts, completions)]
        return yes_probabilities(semantic.model, semantic.tokenizer, texts, semantic.batch_size)

    reward.__name__ = semantic.__name__
    return reward


def _step(rewards: Sequence[RewardFn], batch: Batch) -> tuple[list[list[float]], float, float]:
    """Every reward of one step on ``batch``: the scores, wall seconds, CPU seconds (with child processes)."""
    prompts, texts, columns = batch
    ids = [_Ids.encode(t) for t in texts]
    wall, cpu = time.perf_counter(), _cpu()
    scores = [reward(prompts, texts, completion_ids=ids, **columns) for reward in rewards]
    return scores, time.perf_counter() - wall, _cpu() - cpu


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _same(a: list[list[float]], b: list[list[float]]) -> bool:
    return all(abs(x - y) <= 1e-5 for ra, rb in zip(a, b) for x, y in zip(ra, rb))


def compare(ways: dict[str, Sequence[RewardFn]], batch: Batch, repeats: int) -> dict[str, Any]:
    """Median wall and CPU seconds of each way over alternating repeats, and whether their scores agree."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
    scores: dict[str, list[list[float]]] = {}
    for rep in range(repeats):
        for name in (list(ways) if rep % 2 == 0 else list(ways)[::-1]):
            scores[name], wall, cpu = _step(ways[name], batch)
            times[name].append((wall, cpu))
            for reward in ways[name]:  # a new step: the judge forgets the last one
                getattr(getattr(reward, "__wrapped__", None), "_last", {}).clear()
    first, second = list(ways)
    return {"same": _same(scores[first], scores[second]),
            **{name: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t))
               for name, t in times.items()}}


def main(argv: Sequence[str] | None = None,
         parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser) -> None:
    """Run the benchmark; ``parser_class`` is the command line's own (one-line errors) under ``cascadekit bench``."""
    parser = parser_class(prog="cascadekit bench rewards", description=__doc__.splitlines()[0])
    add_scale_arguments(parser)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--swe-distinct", type=float, default=0.27)
    parser.add_argument("--code-distinct", type=float, default=0.5)
    args = parser.parse_args(argv)
    if args.repeats < 1 or not (0 < args.swe_distinct <= 1 and 0 < args.code_distinct <= 1):
        parser.error("--repeats must be at least 1 and the distinct shares in (0, 1]")
    profile = profile_from_arguments(args)
    semantic = SemanticJudge(judge(profile))
    free, truth = execution_free_reward(semantic, profile.swe_rl.lexical_weight), execution_reward(profile.swe_rl.workers)
    before_judge = _judge_every_rollout(semantic)
    before_free = execution_free_reward(before_judge, profile.swe_rl.lexical_weight)
    cases: dict[str, tuple[Batch, dict[str, list[RewardFn]]]] = {
        "SWE RL": (swe_batch(profile, args.swe_distinct), {
            "every rollout": [_every_rollout(r) for r in (before_free, lexical_reward, before_judge, truth)],
            "distinct once": [reading_markup(r, _Ids()) for r in (free, lexical_reward, semantic, truth)]}),
        "Code RL": (code_batch(profile, args.code_distinct), {
            "every rollout": [_every_rollout(verifier_reward)],
            "distinct once": [reading_markup(verifier_reward, _Ids())]}),
    }
    print(f"{profile.name}: {profile.rl.prompts_per_step} prompts x {profile.rl.group_size} rollouts per step, "
          f"{args.repeats} alternating repeats")
    for stage, (batch, ways) in cases.items():
        distinct = len(set(zip(batch[0], batch[1])))
        out = compare(ways, batch, args.repeats)
        (w0, c0), (w1, c1) = out["every rollout"], out["distinct once"]
        print(f"{stage}: {distinct} of {len(batch[1])} rollouts distinct; one step's rewards, medians:")
        print(f"  every rollout   {w0:7.2f} s wall  {c0:7.2f} CPU-s")
        print(f"  distinct once   {w1:7.2f} s wall  {c1:7.2f} CPU-s   ratio {w1 / w0:.2f}x wall, {c1 / c0:.2f}x CPU"
              f"   same rewards: {out['same']}")

