"""Chapter 11: Math RL, with response-length extension and dynamic filtering.

Regenerate the committed toy results (``data/results/11_math_rl``) with::

    cascadekit experiment 11 --scale toy --train-seed 0,1,2 --jobs 2

Three arms of :func:`cascadekit.training.math_rl.math_rl`, on the same prompts and
length stages (every step a cached stage):

* **IF-RL start, filtered** — the cascade's Math RL: from chapter 10's IF-RL
  checkpoint, each length stage screened first (its last checkpoint is the
  cascade's next stage);
* **IF-RL start, unfiltered** — the same without the screen: every prompt every
  epoch, so the zero-variance groups stay in the batches;
* **SFT start, filtered** — the start-point control: the same recipe from
  chapter 08's SFT checkpoint.

Evaluation: greedy math answers in ``/think`` on ``sft.eval_tasks`` held-out prompts
per op of ``math_rl.ops`` after every checkpoint (the top op is the toy's "hard"
band), and the full stage table before and after the cascade's Math RL (what the
other domains forget).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from matplotlib import pyplot as plt
from matplotlib.figure import Figure

from cascadekit.chapters import ChapterConfig
from cascadekit.exercises.committed import committed_metrics
from cascadekit.claims import claim_row, holm_rows, seed_row, unpaired_seed_row
from cascadekit.formatting import op_span
from cascadekit.domains import chat_record, domains, draw_tasks, gold_answer
from cascadekit.evaluation.replicates import combine_runs, replicates, seed_notes
from cascadekit.evaluation.stage_claims import compact, kept_domains_row
from cascadekit.evaluation.stage_table import stage_markdown, stage_table
from cascadekit.exercises import Exercise
from cascadekit.exercises.answers import Case, Function, Number
from cascadekit.plots import back_to_back, rl_curves
from cascadekit.profiles import Profile
from cascadekit.results import markdown_table, write_sample_spread
from cascadekit.rewards import math_rl_reward
from cascadekit.chapters.cascade import math_rl, sft_checkpoint, unified_if_rl
from cascadekit.training.dynamic_sampling import classify_groups
from cascadekit.training.grpo import grpo_advantages
from cascadekit.training.math_rl import LengthStage
from cascadekit.verify.format_switch import format_switches

#: The arms: name -> (start, filtering).
ARMS = {"IF-RL start, filtered": ("IF-RL", True), "IF-RL start, unfiltered": ("IF-RL", False),
        "SFT start, filtered": ("SFT", True)}
CASCADE = "IF-RL start, filtered"
KEPT_SAMPLES = 120
#: The paper's numbers (Nemotron-Cascade-8B unified, before and after Math RL; the 40K stage on hard AIME).
PAPER = {"AIME25": (75.0, 81.1), "hard AIME, last length stage": (30.0, 40.0)}


def math_suite(profile: Profile) -> list[dict[str, Any]]:
    """``sft.eval_tasks`` held-out math prompts per op of ``math_rl.ops``, in ``/think``, each tagged with its op."""
    lo, hi = profile.math_rl.ops
    records = []
    for op in range(lo, hi + 1):
        for task in draw_tasks(domains()["math"], profile.sft.eval_tasks, profile.seeds.eval, "eval", [op]):
            records.append({**chat_record(task, True), "op": op})
    return records


def math_samples(checkpoint: Path, profile: Profile, name: str, records: Sequence[Mapping[str, Any]]) -> list[dict]:
    """Each math prompt's op, score, tokens and whether the answer switched format."""
    table = stage_table(checkpoint, profile, name, records)
    return [{"op": r["op"], "score": s["score"], "tokens": s["tokens"], "switched": bool(format_switches(s["completion"])),
             "completion": s["completion"]} for r, s in zip(records, table["samples"])]


def stage_metrics(stage: LengthStage, profile: Profile) -> dict[str, Any]:
    """What the results keep of one length stage."""
    grpo = stage.grpo.metrics if stage.grpo else {"steps": 0, "curves": [], "train_s": 0.0, "prompts": 0}
    return {"length": stage.length, "key": stage.checkpoint.key, "screen": stage.screen, "steps": grpo["steps"],
            "prompts": grpo["prompts"], "train_s": grpo["train_s"], "curves": grpo["curves"],
            "rollouts": stage.rollouts(profile)}


def run(config: ChapterConfig, work_dir: str | Path) -> dict[str, Any]:
    """The three Math RL arms, math by op after every checkpoint, the stage table before and after."""
    profile, work_dir = config.profile, Path(work_dir)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    starts = {"IF-RL": unified_if_rl(profile, work_dir), "SFT": sft_checkpoint(profile)}
    timings["starts_s"] = round(time.perf_counter() - started, 1)
    arms: dict[str, list[LengthStage]] = {}
    for name, (start, filtering) in ARMS.items():
        started = time.perf_counter()
        arms[name] = math_rl(starts[start], profile, work_dir / name.replace(", ", "-").replace(" ", "-"), filtering)
        timings[f"{name}_s"] = round(time.perf_counter() - started, 1)
    checkpoints = {f"{start} start": out.checkpoint for start, out in starts.items()}
    # each length's last epoch
    checkpoints.update({f"{CASCADE}, {s.length} tokens": s.checkpoint.checkpoint for s in arms[CASCADE]})
    checkpoints.update({f"{name}, final": stages[-1].checkpoint.checkpoint for name, stages in arms.items()
                        if name != CASCADE})
    records = math_suite(profile)
    started = time.perf_counter()
    math = {name: math_samples(path, profile, name, records) for name, path in checkpoints.items()}
    timings["math_s"] = round(time.perf_counter() - started, 1)
    tables = {"IF-RL": stage_table(starts["IF-RL"].checkpoint, profile, "IF-RL"),
              "Math RL": stage_table(arms[CASCADE][-1].checkpoint.checkpoint, profile, "Math RL")}
    timings.update({f"table {name}_s": t["wall_s"] for name, t in tables.items()})
    return {
        "rows": [row for t in tables.values() for row in t["rows"]], "per_sample": compact(tables),
        "math": {name: [{k: v for k, v in s.items() if k != "completion"} for s in samples]
                 for name, samples in math.items()},
        "math_completions": {name: [s["completion"] for s in samples] for name, samples in math.items()},
        "runs": {name: [stage_metrics(s, profile) for s in stages] for name, stages in arms.items()},
        "start_keys": {name: out.key for name, out in starts.items()}, "timings": timings,
        "profile": profile.to_dict(),
    }


def final_name(arm: str, metrics: Mapping[str, Any]) -> str:
    """The math-evaluation name of an arm's last checkpoint."""
    return f"{CASCADE}, {metrics['runs'][CASCADE][-1]['length']} tokens" if arm == CASCADE else f"{arm}, final"


def at_ops(samples: Sequence[Mapping[str, Any]], ops: Sequence[int], field: str = "score") -> list[float]:
    """``field`` of the samples whose op is in ``ops``, in order."""
    return [float(s[field]) for s in samples if s["op"] in ops]


def tokens_per_correct(samples: Sequence[Mapping[str, Any]]) -> float:
    """Tokens spent per correct answer: all answers' tokens over the number correct (inf when none is)."""
    correct = sum(s["score"] for s in samples)
    return sum(s["tokens"] for s in samples) / correct if correct else float("inf")


def ratio_change(before: Sequence[Sequence[Mapping[str, Any]]], after: Sequence[Sequence[Mapping[str, Any]]],
                 resamples: int = 2000, seed: int = 0) -> tuple[float, float, float, list[float]]:
    """(change, low, high, per-seed changes) of tokens per correct answer, ``before[i]`` and ``after[i]`` seed
    i's answers to the same prompts: a paired bootstrap over prompts, and over several seeds seeds first."""
    rng = np.random.default_rng(seed)
    draws, per_seed = [], []
    for b_seed, a_seed in zip(before, after):
        a = np.array([[s["tokens"], s["score"]] for s in b_seed], dtype=float)
        b = np.array([[s["tokens"], s["score"]] for s in a_seed], dtype=float)
        idx = rng.integers(0, len(a), size=(resamples, len(a)))
        with np.errstate(divide="ignore", invalid="ignore"):
            draws.append(b[idx, 0].sum(1) / b[idx, 1].sum(1) - a[idx, 0].sum(1) / a[idx, 1].sum(1))
        per_seed.append(tokens_per_correct(a_seed) - tokens_per_correct(b_seed))
    table = np.stack(draws, axis=1)  # resamples x seeds
    if len(per_seed) > 1:
        table = np.take_along_axis(table, rng.integers(0, len(per_seed), size=table.shape), axis=1)
    pooled = table.mean(axis=1)
    estimate = float(np.mean(per_seed))
    low, high = np.nanpercentile(pooled[np.isfinite(pooled)], [2.5, 97.5])
    return estimate, float(min(low, estimate)), float(max(high, estimate)), per_seed


def curve_values(stages: Sequence[Mapping[str, Any]], column: str) -> list[float]:
    """``column`` of every GRPO step of an arm, stage after stage."""
    return [float(c[column]) for s in stages for c in s["curves"]]


RESULTS_TITLE = "Chapter 11: Math RL"


#: What each training seed's run keeps in a combined result (:func:`combine`): what the claims and notes read.
REPLICATE_FIELDS = ("math", "runs", "per_sample")


def combine(per_seed: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """One result of several training seeds' runs (:func:`cascadekit.evaluation.replicates.combine_runs`);
    each seed starts from its own IF-RL and SFT checkpoints and asks the course's one math suite."""
    return combine_runs(per_seed, REPLICATE_FIELDS)


def claims(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The chapter's paper-vs-run rows, each with a 95% interval and a verdict from it.

    A row that needs trained steps or correct answers an arm did not produce (a
    smoke run's screen can keep nothing; over several seeds, in any seed) is left
    out rather than faked. Over several training seeds (a result of :func:`combine`)
    every interval is over seeds, then prompts or steps. The primary claim is Math
    RL's lift of its own domain (math, think); "other domains keep their scores" is
    flat over the cells below the ceiling.
    """
    runs = replicates(metrics)
    lo, hi = metrics["profile"]["math_rl"]["ops"]
    ops, hard, easy = list(range(lo, hi + 1)), [hi], list(range(lo, hi))

    def arm(name: str) -> list[Sequence[Mapping[str, Any]]]:
        return [m["math"][name if name == "IF-RL start" else final_name(name, m)] for m in runs]

    def change(after: list, before: list, on: Sequence[int], field: str = "score") -> list[np.ndarray]:
        return [np.subtract(at_ops(a, on, field), at_ops(b, on, field)) for a, b in zip(after, before)]

    start, final = arm("IF-RL start"), arm(CASCADE)
    control, unfiltered = arm("SFT start, filtered"), arm("IF-RL start, unfiltered")
    stages = [[m["math"][f"{CASCADE}, {length} tokens"] for length in dict.fromkeys(s["length"]
                                                                                   for s in m["runs"][CASCADE])]
              for m in runs]
    before_last = [st[-2] if len(st) > 1 else s0 for st, s0 in zip(stages, start)]
    last = [st[-1] for st in stages]
    rollouts = {name: round(float(np.mean([sum(s["rollouts"] for s in m["runs"][name]) for m in runs])))
                for name in metrics["runs"]}
    a_seed = " a seed" if len(runs) > 1 else ""
    rows = [
        seed_row(f"Math RL raises math accuracy (think, ops {lo}-{hi})", "AIME25 75.0 -> 81.1",
                 change(final, start, ops), "up", primary=True),
        seed_row("starting after RLHF and IF-RL beats starting from SFT: final accuracy, same recipe",
                 "the RLHF start is much better", change(final, control, ops), "up"),
    ]
    if all(sum(s["score"] for s in c) and sum(s["score"] for s in f) for c, f in zip(control, final)):
        estimate, low, high, seeds = ratio_change(control, final)
        rows.append(claim_row("... with fewer tokens per correct answer, IF-RL start minus SFT start",
                              "RLHF makes reasoning more token-efficient", estimate, low, high, "down", digits=1,
                              seeds=seeds if len(seeds) > 1 else None, unit="tokens per correct answer"))

    def gain(on: Sequence[int]) -> list[list[float]]:
        return [[y - x for x, y in zip(at_ops(b, on), at_ops(a, on))] for b, a in zip(before_last, last)]

    rows += [
        seed_row(f"the longest length stage lifts the hardest problems (op {hi}): last stage minus the one before",
                 "hard AIME 30% -> 40% in the 40K stage", change(last, before_last, hard), "up"),
        unpaired_seed_row(f"... more than it lifts {op_span(lo, hi - 1)} (difference of the two gains)",
                          "the gain is on hard problems", gain(hard), gain(easy), "up"),
    ]
    trained = [[s for s in m["runs"][CASCADE] if s["curves"]] for m in runs]
    if all(len(t) > 1 for t in trained):
        rows.append(unpaired_seed_row("truncation falls as the limit grows: share of rollouts cut, last stage minus "
                                      "first", "longer limits cut fewer responses",
                                      [curve_values(t[-1:], "clipped_ratio") for t in trained],
                                      [curve_values(t[:1], "clipped_ratio") for t in trained], "down"))
    zero = {name: [curve_values(m["runs"][name], "frac_reward_zero_std") for m in runs]
            for name in (CASCADE, "IF-RL start, unfiltered")}
    if all(all(z) for z in zero.values()):
        rows.append(unpaired_seed_row("dynamic filtering cuts zero-variance groups: share per step, filtered minus "
                                      "unfiltered", "the stabiliser keeps every group informative",
                                      zero[CASCADE], zero["IF-RL start, unfiltered"], "down"))
    rows += [
        seed_row(f"dynamic filtering: final accuracy, filtered minus unfiltered ({rollouts[CASCADE]:,} vs "
                 f"{rollouts['IF-RL start, unfiltered']:,} rollouts{a_seed})", "stable, efficient training",
                 change(final, unfiltered, ops), "up"),
        seed_row("the format-switch penalty keeps answers in one format: switching answers, after minus before",
                 "code-switching penalised", change(final, start, ops, "switched"), "down"),
        kept_domains_row("other domains keep their scores (general, IF, code, tools, SWE)", "little forgetting",
                         [m["per_sample"]["IF-RL"] for m in runs], [m["per_sample"]["Math RL"] for m in runs],
                         ["general", "instructions", "code", "tools", "swe"]),
    ]
    return holm_rows(rows)


def seed_rows(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per training seed: math accuracy (think, every op and the hardest) at the start and after each arm."""
    lo, hi = metrics["profile"]["math_rl"]["ops"]
    rows = []
    for seed, m in zip(metrics.get("train_seeds", ["the one run"]), replicates(metrics)):
        row: dict[str, Any] = {"train seed": seed}
        for name in ("IF-RL start", *ARMS):
            samples = m["math"][name if name == "IF-RL start" else final_name(name, m)]
            row[f"{name}, ops {lo}-{hi}"] = round(float(np.mean(at_ops(samples, range(lo, hi + 1)))), 3)
            row[f"{name}, op {hi}"] = round(float(np.mean(at_ops(samples, [hi]))), 3)
        rows.append(row)
    return rows


def accuracy_by_op(math: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """One row per evaluated checkpoint: accuracy at each op and mean tokens."""
    rows = []
    for name, samples in math.items():
        row: dict[str, Any] = {"checkpoint": name}
        for op in sorted({s["op"] for s in samples}):
            row[f"op {op}"] = float(np.mean(at_ops(samples, [op])))
        row["mean tokens"] = float(np.mean([s["tokens"] for s in samples]))
        row["tokens per correct"] = tokens_per_correct(samples)
        rows.append(row)
    return rows


def stage_rows(runs: Mapping[str, Sequence[Mapping[str, Any]]], profile: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per length stage of every arm: prompts kept, steps, truncation, zero-variance share, rollouts."""
    rows = []
    for arm, stages in runs.items():
        for s in stages:
            screen = s["screen"] or {}
            rows.append({"arm": arm, "length": s["length"], "kept": f"{s['prompts']}/{profile['math_rl']['pool']}",
                         "screen": ", ".join(f"{k} {v}" for k, v in sorted(screen.get("verdicts", {}).items())),
                         "steps": s["steps"],
                         "truncated": float(np.mean(curve_values([s], "clipped_ratio") or [float("nan")])),
                         "zero-variance": float(np.mean(curve_values([s], "frac_reward_zero_std") or [float("nan")])),
                         "rollouts": s["rollouts"]})
    return rows


def plot_curves(runs: Mapping[str, Sequence[Mapping[str, Any]]]) -> Figure:
    """Reward, zero-variance share, truncation and length per GRPO step, the length stages back to back."""
    return rl_curves({arm: back_to_back(stages) for arm, stages in runs.items()},
                     {"reward": "reward", "frac_reward_zero_std": "zero-variance groups",
                      "clipped_ratio": "truncated rollouts", "completion_length": "mean completion length"})


def plot_by_op(math: Mapping[str, Sequence[Mapping[str, Any]]]) -> Figure:
    """Accuracy by op after every checkpoint."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for name, samples in math.items():
        ops = sorted({s["op"] for s in samples})
        ax.plot(ops, [np.mean(at_ops(samples, [op])) for op in ops], marker="o", label=name)
    ax.set(xlabel="op", ylabel="greedy accuracy (think)", ylim=(-0.02, 1.02), title="math accuracy by op")
    ax.set_xticks(sorted({s["op"] for samples in math.values() for s in samples}))
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def notes(metrics: Mapping[str, Any]) -> str:
    """Math accuracy by op after every checkpoint, the length stages, the stage table before and after, timings;
    over several training seeds each seed's math accuracy first (the tables are then the first seed's)."""
    seeds = seed_notes(metrics, seed_rows, "Each training seed (math, think, greedy)")
    first = seeds.first
    return (f"{seeds.table}### Math accuracy by op after every checkpoint (think, greedy){first}\n\n"
            f"{markdown_table(accuracy_by_op(metrics['math']))}\n\n"
            f"### Length stages{first}\n\n{markdown_table(stage_rows(metrics['runs'], metrics['profile']))}\n\n"
            f"### Stage table before and after the cascade's Math RL{first}\n\n{stage_markdown(metrics['rows'])}\n\n"
            f"Timings (s){first}: {json.dumps(metrics['timings'])}")


def figures(metrics: Mapping[str, Any]) -> dict[str, Figure]:
    """The GRPO curves of every arm (length stages back to back), and math accuracy by op."""
    return {"math_rl_curves": plot_curves(metrics["runs"]), "math_by_op": plot_by_op(metrics["math"])}


def committed(metrics: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """The metrics without the math completions, of which ``samples.jsonl`` in ``folder`` keeps a spread.

    A combined result (:func:`combine`) has no completions of its own: each seed's folder keeps its spread.
    """
    if "math_completions" in metrics:
        write_sample_spread(folder, [{"checkpoint": name, **s, "completion": c}
                                     for name, samples in metrics["math"].items()
                                     for s, c in zip(samples, metrics["math_completions"][name])], KEPT_SAMPLES)
    return {k: v for k, v in metrics.items() if k != "math_completions"}


# Exercises ------------------------------------------------------------------

VERDICTS = ("mixed", "too_easy", "too_hard", "no_signal")


def _math_groups() -> list[Case]:
    """Groups of Math RL rewards: right 1, wrong 0, right but switching 0.5, wrong and switching -0.5."""
    return [([1.0] * 8,), ([0.0] * 8,), ([1.0] + [0.0] * 7,), ([0.5] * 8,), ([-0.5] * 8,), ([1.0] * 6 + [0.5] * 2,),
            ([0.0] * 7 + [-0.5],), ([0.5, 0.5, 0.5, 1.0],), ([1.0, 1.0 + 1e-9, 1.0, 1.0],), ([0.3] * 4,),
            ([-0.5, 0.5],)]


def _screen_verdict(rewards: Sequence[float]) -> str:
    return classify_groups(torch.tensor([list(rewards)], dtype=torch.float64))[0]


#: The format switch of the notebook's "gold + code" answer: a fenced code block after the boxed answer.
CODE_BLOCK = "\n```python\nx = 1\n```"


def _switching_advantage() -> float:
    """GRPO's advantage of a switching rollout in a group of 8 right answers, 2 of which switch format."""
    record = chat_record(draw_tasks(domains()["math"], 1, 0, "rl", range(3, 4))[0], True)
    gold = gold_answer(record)
    answers = [gold] * 6 + [gold + CODE_BLOCK] * 2
    rewards = math_rl_reward(0.5)([None] * 8, answers, gold=[record["gold"]] * 8)
    return float(grpo_advantages(torch.tensor(rewards), 8)[-1])


def _screen_share() -> float:
    stages = committed_metrics("11_math_rl")["runs"][CASCADE]
    return sum(s["screen"]["rollouts"] for s in stages) / sum(s["rollouts"] for s in stages)


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
]
