"""Exercises for Part II's domain RL stages (chapters 11-13): Math RL, Code RL and SWE RL."""
from __future__ import annotations

import random
from typing import Any, Sequence

from cascadekit.exercises import Exercise
from cascadekit.exercises.answers import Case, Choice, Function, Number
from cascadekit.exercises.committed import committed_metrics

# 11 · Math RL ---------------------------------------------------------------

VERDICTS = ("mixed", "too_easy", "too_hard", "no_signal")


def _math_groups() -> list[Case]:
    """Groups of Math RL rewards: right 1, wrong 0, right but switching 0.5, wrong and switching -0.5."""
    return [([1.0] * 8,), ([0.0] * 8,), ([1.0] + [0.0] * 7,), ([0.5] * 8,), ([-0.5] * 8,), ([1.0] * 6 + [0.5] * 2,),
            ([0.0] * 7 + [-0.5],), ([0.5, 0.5, 0.5, 1.0],), ([1.0, 1.0 + 1e-9, 1.0, 1.0],), ([0.3] * 4,),
            ([-0.5, 0.5],)]


def _screen_verdict(rewards: Sequence[float]) -> str:
    import torch

    from cascadekit.training.dynamic_sampling import classify_groups

    return classify_groups(torch.tensor([list(rewards)], dtype=torch.float64))[0]


#: The format switch of the notebook's "gold + code" answer: a fenced code block after the boxed answer.
CODE_BLOCK = "\n```python\nx = 1\n```"


def _switching_advantage() -> float:
    """GRPO's advantage of a switching rollout in a group of 8 right answers, 2 of which switch format."""
    import torch

    from cascadekit.domains import chat_record, domains, draw_tasks, gold_answer
    from cascadekit.rewards import math_rl_reward
    from cascadekit.training.grpo import grpo_advantages

    record = chat_record(draw_tasks(domains()["math"], 1, 0, "rl", range(3, 4))[0], True)
    gold = gold_answer(record)
    answers = [gold] * 6 + [gold + CODE_BLOCK] * 2
    rewards = math_rl_reward(0.5)([None] * 8, answers, gold=[record["gold"]] * 8)
    return float(grpo_advantages(torch.tensor(rewards), 8)[-1])


def _screen_share() -> float:
    stages = committed_metrics("11_math_rl")["runs"]["IF-RL start, filtered"]
    return sum(s["screen"]["rollouts"] for s in stages) / sum(s["rollouts"] for s in stages)


# 12 · Code RL ---------------------------------------------------------------

def _verification_timings() -> list[Case]:
    """(verify_s, wait_s, workers): two committed arms, all hidden, none hidden, a wait past blocking, none verified."""
    return [(296.237, 104.275, 2), (237.407, 35.132, 2), (10.0, 0.0, 1), (10.0, 10.0, 1), (10.0, 8.0, 2),
            (100.0, 20.0, 4), (0.0, 0.0, 4), (60.0, 1.5, 8)]


def _hidden_share(verify_s: float, wait_s: float, workers: int) -> float:
    from cascadekit.training.async_rewards import StreamingRewards

    streaming = StreamingRewards(lambda prompts, completions, **kwargs: [], None, workers)  # only its summary is used
    streaming.stats.update(verify_s=verify_s, wait_s=wait_s)
    return streaming.summary()["hidden_share_estimate"]


def _signal_gain() -> float:
    """Mean per-step share of groups with a learning signal, the hottest arm minus the coldest."""
    import statistics

    from cascadekit.chapters.ch12_code_rl import signal_share

    runs = sorted(committed_metrics("12_code_rl")["runs"].values(), key=lambda arm: arm["temperature"])
    return statistics.mean(signal_share(runs[-1]["curves"])) - statistics.mean(signal_share(runs[0]["curves"]))


# 13 · SWE RL ----------------------------------------------------------------

def _reward_truth_cases() -> list[Case]:
    """(rewards, executed) pairs, each with at least one high reward (the rate is undefined without one)."""
    rng = random.Random(13)
    cases: list[Case] = [([0.8, 0.79, 0.95], [0, 0, 1]), ([0.95, 0.9, 0.2], [1, 0, 0]), ([1.0], [1]),
                         ([0.81, 0.99], [0, 0])]
    for _ in range(6):
        rewards = [round(rng.uniform(0.3, 1.0), 2) for _ in range(8)] + [0.9]
        cases.append((rewards, [int(rng.random() < 0.5) for _ in rewards]))
    return cases


def _hacking_rate(rewards: Sequence[float], executed: Sequence[int]) -> float:
    from cascadekit.chapters.ch13_swe_rl import hacking_rate

    return hacking_rate([{"execution-free": r, "execution": e} for r, e in zip(rewards, executed)])


def _lexical_hacking() -> float:
    from cascadekit.chapters.ch13_swe_rl import START, hacking_rate

    return hacking_rate(committed_metrics("13_swe_rl")["rollouts"][START], "lexical")


FIELDS = ("lexical", "semantic", "execution-free")


def _best_tracking_field() -> str:
    from cascadekit.chapters.ch13_swe_rl import CASCADE, correlation, final_name

    metrics: dict[str, Any] = committed_metrics("13_swe_rl")
    rollouts = metrics["rollouts"][final_name(CASCADE, metrics["trained_context"])]
    return max(FIELDS, key=lambda field: correlation(rollouts, field))


EXERCISES = [
    Exercise("11.1", "The screen's verdict on a group",
             "Write `verdict(rewards)`: `rewards` is one prompt's group of Math RL rewards (1 right, 0 wrong, "
             "minus the penalty 0.5 when the answer switches format). Return the dynamic filter's verdict on the "
             "group, one of " + ", ".join(repr(v) for v in VERDICTS) + ", as `classify_groups` "
             "(`cascadekit.training.dynamic_sampling`) gives it with its defaults (only `mixed` keeps the prompt).",
             Function(_math_groups, _screen_verdict, describe_case=lambda case: f"rewards {case[0]}"),
             "rewards that differ by more than 1e-6 are mixed; an equal group at 1 or above is too easy, at 0 or "
             "below too hard, and anything in between (every answer right but switching) has no signal.",
             "def verdict(rewards):\n    ...\n\nanswer = verdict"),
    Exercise("11.2", "Change the reward, predict the advantage",
             "A group of 8 rollouts of one math prompt, all with the right boxed answer: without the format-switch "
             "penalty it is too easy and teaches nothing. Now 2 of the 8 add a fenced code block after the answer "
             "(the notebook's `gold + code` answer) and the penalty is λ = 0.5. What GRPO advantage does each of "
             "those 2 rollouts get? Predict, then compute with `math_rl_reward(0.5)` (`cascadekit.rewards`) and "
             "`grpo_advantages` (`cascadekit.training.grpo`). Within 0.1%.",
             Number(_switching_advantage, rel=1e-3), "the rewards are six 1.0 and two 1 - λ; the advantage is "
             "(r - mean) / (std + 1e-4) with the sample standard deviation (divide by G - 1).",
             "answer = None  # an advantage"),
    Exercise("11.3", "What the screens cost",
             "Dynamic filtering is not free: before every length stage the screen samples a group for every "
             "pooled prompt. In the committed run, what share of all the rollouts the cascade's arm "
             "(`IF-RL start, filtered`) sampled went into its screens rather than into GRPO? Within 0.005. Then "
             "weigh it against what filtering bought: the claims on zero-variance groups and on final accuracy.",
             Number(_screen_share, abs_=0.005), "`load_metrics(\"11_math_rl\")[\"runs\"][\"IF-RL start, "
             "filtered\"]` holds one record per length stage: its `rollouts` counts the screen's and GRPO's "
             "together, its `screen` record the screen's own; sum over the stages before dividing.",
             "answer = None  # a share of rollouts", homework=True),
    Exercise("12.1", "How much verification was hidden?",
             "Write `hidden_share(verify_s, wait_s, workers)`: the kit's estimate of the share of verification "
             "hidden behind generation (`hidden_share_estimate` in each arm's `streaming_rewards`), from the summed "
             "verification seconds of every rollout, the seconds the steps waited for their rewards, and the "
             "number of sandbox workers.",
             Function(_verification_timings, _hidden_share, abs_=1e-3),
             "a blocking pool of the same workers would hold the steps for at least verify_s / workers; the "
             "estimate is 1 minus the share of that the steps still waited, never below 0, and 0 when nothing was "
             "verified.", "def hidden_share(verify_s, wait_s, workers):\n    ...\n\nanswer = hidden_share"),
    Exercise("12.2", "What temperature does to the signal",
             "In the committed run, by how much is the mean per-step share of groups with a learning signal "
             "higher in the hottest arm than in the coldest (hottest minus coldest)? Within 0.005. Did the hot "
             "arm's extra signal turn into a higher score on the hardest op?",
             Number(_signal_gain, abs_=0.005), "a step's share of groups with a signal is 1 - "
             "`frac_reward_zero_std` in the arm's `curves`; average it over the steps of each arm in "
             "`load_metrics(\"12_code_rl\")[\"runs\"]` (each arm has its `temperature`).",
             "answer = None  # a difference of shares"),
    Exercise("13.1", "Measure reward hacking",
             "Write `hacking_rate(rewards, executed)`: `rewards` are some rollouts' execution-free rewards and "
             "`executed` their execution truth (1: the patch passes the hidden tests, 0: it fails). Return the "
             "share of the high-reward rollouts (reward at least the chapter's `HIGH_REWARD`, 0.8) whose patch "
             "fails, as the chapter measures reward hacking.",
             Function(_reward_truth_cases, _hacking_rate,
                      describe_case=lambda case: f"{len(case[0])} rollouts, rewards {case[0][:3]}..."),
             "the denominator is the high-reward rollouts only, not all of them; a reward of exactly 0.8 counts "
             "as high.", "def hacking_rate(rewards, executed):\n    ...\n\nanswer = hacking_rate"),
    Exercise("13.2", "Change the reward: lexical similarity alone",
             "Set `swe_rl.lexical_weight` to 1, so that the reward is lexical similarity alone. Over the start "
             "policy's committed rollouts (`load_metrics(\"13_swe_rl\")[\"rollouts\"][\"start\"]`), what share of "
             "the high-reward rollouts (at least 0.8) would fail execution? Within 0.005. Compare it with the "
             "`high-reward failing` column of the reward table: what did the judge's half of the reward buy?",
             Number(_lexical_hacking, abs_=0.005), "with the weight at 1 a rollout's reward is its `lexical` "
             "field; keep the rollouts where it is at least 0.8 and count the share whose `execution` is 0.",
             "answer = None  # a share of rollouts"),
    Exercise("13.3", "Which reward still tracks the truth after training?",
             "Over the rollouts of the execution-free arm's final policy (`rollouts` in the committed run, the "
             "arm's last context), which reward correlates best with execution truth (Pearson r)? One of "
             + ", ".join(repr(f) for f in FIELDS) + ". Then compare with the start policy's rollouts: "
             "which half of the reward lost the most of its grip on the truth as the policy trained on it?",
             Choice(FIELDS, _best_tracking_field), "the final policy's key is the arm's name, `, context ` and "
             "the run's `trained_context`; correlate each field with the `execution` field over its rollouts "
             "(`numpy.corrcoef`).", "answer = None  # a reward's field name", homework=True),
]
