"""Chapter 13: SWE RL, with the execution-free reward checked against execution, and input-context extension.

Regenerate the toy results (``data/results/13_swe_rl``) with::

    cascadekit experiment 13 --scale toy --train-seed 0,1,2 --jobs 2

Two arms of :func:`cascadekit.training.swe_rl.swe_rl`, on the same prompts and
context stages from the same start (every step a cached stage):

* **execution-free** — the paper's SWE RL: lexical similarity to the gold patch
  plus the semantic judge's P(YES); its last checkpoint is the cascade's SWE RL;
* **execution** — the same, rewarded by execution truth (the patch applied and
  the hidden tests run in the sandbox), what the paper avoided for its cost.

Each arm watches every reward it does not train on (execution truth included),
so the curves show what the execution-free reward climbs while the truth moves.
After training, rollouts of the start and of each arm's policy are scored by all
three rewards and by execution: correlations and the rate of high-reward patches
that fail (reward hacking). Resolve rates (greedy, ``/think``) by context size
cover every trained context and one past the longest (the paper's "too long"
inputs); the stage table runs before and after the cascade's SWE RL.
"""
from __future__ import annotations

import json
import random
import re
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from matplotlib import pyplot as plt
from matplotlib.figure import Figure

from cascadekit.chapters import ChapterConfig
from cascadekit.exercises.committed import committed_metrics
from cascadekit.claims import claim_row, holm_rows, seed_row, unpaired_seed_row
from cascadekit.domains import chat_record, prompt_text
from cascadekit.evaluation.replicates import combine_runs, replicates, seed_notes
from cascadekit.evaluation.stage_claims import compact, kept_domains_row
from cascadekit.evaluation.stage_table import stage_markdown, stage_table
from cascadekit.exercises import Exercise
from cascadekit.exercises.answers import Case, Choice, Function, Number
from cascadekit.stages import StageOutput
from cascadekit.plots import back_to_back, rl_curves
from cascadekit.profiles import Profile
from cascadekit.results import markdown_table, write_sample_spread
from cascadekit.training.reward_model import policy_samples
from cascadekit.training.swe_judge import SemanticJudge, executed
from cascadekit.chapters.cascade import judge, swe_rl_start
from cascadekit.training.swe_rl import ContextStage, arm_rewards, lexical_reward, swe_rl, swe_tasks

ARMS = ("execution-free", "execution")
CASCADE = "execution-free"
START = "start"
#: A rollout whose reward reaches this is "high-reward"; one that then fails execution is counted as hacking.
HIGH_REWARD = 0.8
#: Rollout prompts per context (of the trained ones) scored by every reward, and the seed offset of their samples.
ROLLOUT_PROMPTS_DIVISOR = 4
ROLLOUT_SEED = 1313
KEPT_SAMPLES = 120
BOOTSTRAP = 2000
#: The paper's numbers (Nemotron-Cascade-8B unified, SWE-bench Verified after the whole cascade).
PAPER = {"SWE-bench Verified, final": 37.2}


def context_suite(profile: Profile) -> list[dict[str, Any]]:
    """``sft.eval_tasks`` held-out SWE prompts per context, 0 to one past the longest trained, in ``/think``."""
    contexts = range(max(profile.swe_rl.contexts) + 2)
    records = []
    for context in contexts:
        for task in swe_tasks(profile, profile.sft.eval_tasks, "eval", profile.seeds.eval, [context]):
            records.append({**chat_record(task, True), "context": context})
    return records


def resolved(checkpoint: Path, profile: Profile, name: str, records: Sequence[Mapping[str, Any]]) -> list[dict]:
    """Each suite prompt's context, execution-verified score, tokens and completion (greedy)."""
    table = stage_table(checkpoint, profile, name, records)
    return [{"context": r["context"], "score": s["score"], "tokens": s["tokens"], "completion": s["completion"]}
            for r, s in zip(records, table["samples"])]


def scored_rollouts(policy: StageOutput, records: Sequence[Mapping[str, Any]], profile: Profile,
                    rewards: Mapping[str, Callable[..., list[float]]]) -> list[dict[str, Any]]:
    """``rl.group_size`` sampled answers per prompt, each scored by every reward and by execution.

    The samples are a cached ``policy-samples`` stage, drawn from the evaluation seed (a measurement of the
    policy, the same draw for every policy compared); scoring runs every time (seconds).
    """
    prompts = [prompt_text(r) for r in records]
    answers = policy_samples(policy, prompts, profile.rl.group_size, profile, profile.seeds.eval + ROLLOUT_SEED)
    flat = [(i, prompt, answer) for i, (prompt, group) in enumerate(zip(prompts, answers)) for answer in group]
    golds = [json.dumps(records[i]["gold"]) for i, _, _ in flat]
    texts, asked = [a for _, _, a in flat], [p for _, p, _ in flat]
    scores = {name: fn(asked, texts, gold=golds) for name, fn in rewards.items()}
    truth = executed([records[i]["gold"] for i, _, _ in flat], texts, profile.swe_rl.workers)
    return [{"prompt": i, "context": records[i]["context"], **{k: float(v[j]) for k, v in scores.items()},
             "execution": float(truth[j]), "answer": texts[j]} for j, (i, _, _) in enumerate(flat)]


def curve_names(curves: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Curves with each reward column named for its role (the judge's and combined reward's names hold keys)."""
    def rename(key: str) -> str:
        key = re.sub(r"^reward/swe_execution_free_.*", "reward/execution-free", key)
        return re.sub(r"^reward/swe_judge_.*", "reward/semantic", key)

    return [{rename(k): v for k, v in c.items()} for c in curves]


def stage_metrics(stage: ContextStage) -> dict[str, Any]:
    """What the results keep of one context stage."""
    m = stage.grpo.metrics
    return {"context": stage.context, "key": stage.grpo.key, "steps": m["steps"], "prompts": m["prompts"],
            "train_s": m["train_s"], "curves": curve_names(m["curves"])}


def run(config: ChapterConfig, work_dir: str | Path) -> dict[str, Any]:
    """Both SWE RL arms, resolve rates by context, scored rollouts, the stage table before and after."""
    profile, work_dir = config.profile, Path(work_dir)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    start = swe_rl_start(profile, work_dir)
    timings["start_s"] = round(time.perf_counter() - started, 1)
    started = time.perf_counter()
    judged = judge(profile)
    semantic = SemanticJudge(judged)
    rewards = arm_rewards(profile, semantic)
    timings["judge_s"] = round(time.perf_counter() - started, 1)
    arms: dict[str, list[ContextStage]] = {}
    for arm in ARMS:
        started = time.perf_counter()
        reward, watched = rewards[arm]
        arms[arm] = swe_rl(start, profile, work_dir / f"swe-rl-{arm}", reward, watched)
        timings[f"{arm}_s"] = round(time.perf_counter() - started, 1)
    checkpoints = {START: start}
    checkpoints.update({f"{CASCADE}, context {s.context}": s.grpo for s in arms[CASCADE]})
    checkpoints[f"execution, context {arms['execution'][-1].context}"] = arms["execution"][-1].grpo
    suite = context_suite(profile)
    started = time.perf_counter()
    by_context = {name: resolved(out.checkpoint, profile, name, suite) for name, out in checkpoints.items()}
    timings["by_context_s"] = round(time.perf_counter() - started, 1)
    trained = max(profile.swe_rl.contexts)
    per_context = max(1, profile.sft.eval_tasks // ROLLOUT_PROMPTS_DIVISOR)
    rollout_records = [r for c in range(trained + 1) for r in [s for s in suite if s["context"] == c][:per_context]]
    scorers = {"lexical": lexical_reward, "semantic": semantic, "execution-free": rewards[CASCADE][0]}
    started = time.perf_counter()
    rollouts = {name: scored_rollouts(checkpoints[name], rollout_records, profile, scorers)
                for name in (START, final_name(CASCADE, trained), final_name("execution", trained))}
    timings["rollouts_s"] = round(time.perf_counter() - started, 1)
    tables = {"before SWE RL": stage_table(start.checkpoint, profile, "before SWE RL"),
              "after SWE RL": stage_table(arms[CASCADE][-1].grpo.checkpoint, profile, "after SWE RL")}
    timings.update({f"table {name}_s": t["wall_s"] for name, t in tables.items()})
    return {
        "rows": [row for t in tables.values() for row in t["rows"]], "per_sample": compact(tables),
        "by_context": {name: [{k: v for k, v in s.items() if k != "completion"} for s in samples]
                       for name, samples in by_context.items()},
        "by_context_completions": {name: [s["completion"] for s in samples] for name, samples in by_context.items()},
        "rollouts": rollouts, "judge": {"key": judged.key, **judged.metrics},
        "runs": {arm: [stage_metrics(s) for s in stages] for arm, stages in arms.items()},
        "start_key": start.key, "trained_context": trained, "timings": timings, "profile": profile.to_dict(),
    }


def final_name(arm: str, trained: int) -> str:
    """The name of an arm's last checkpoint in the evaluations."""
    return f"{arm}, context {trained}"


def at_contexts(samples: Sequence[Mapping[str, Any]], contexts: Sequence[int], field: str = "score") -> list[float]:
    """``field`` of the samples whose context is in ``contexts``, in order."""
    return [float(s[field]) for s in samples if s["context"] in contexts]


def _by_prompt(rollouts: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    groups: dict[int, list[Mapping[str, Any]]] = {}
    for r in rollouts:
        groups.setdefault(r["prompt"], []).append(r)
    return list(groups.values())


def correlation(rollouts: Sequence[Mapping[str, Any]], field: str) -> float:
    """Pearson correlation of ``field`` with execution truth over rollouts (nan when either does not vary)."""
    x = np.array([r[field] for r in rollouts], dtype=float)
    y = np.array([r["execution"] for r in rollouts], dtype=float)
    if len(x) < 2 or x.std() == 0 or y.std() == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def hacking_rate(rollouts: Sequence[Mapping[str, Any]], field: str = "execution-free") -> float:
    """Share of high-reward rollouts (``field`` >= :data:`HIGH_REWARD`) that fail execution (nan when none is high)."""
    high = [r for r in rollouts if r[field] >= HIGH_REWARD]
    return float(np.mean([r["execution"] == 0 for r in high])) if high else float("nan")


def prompt_bootstrap(statistic: Callable[..., float], *runs: Sequence[Mapping[str, Any]],
                     resamples: int = BOOTSTRAP, seed: int = 0) -> tuple[float, float, float]:
    """(estimate, low, high) of ``statistic(*runs)``, a 95% bootstrap over prompts (each run resampled alike).

    The unit resampled is the prompt, never the rollout: a prompt's rollouts are
    not independent. Resamples where the statistic is undefined are skipped; the
    interval is widened to hold the estimate, as the kit's other bootstraps do.
    """
    estimate, draws = _prompt_draws(statistic, runs, resamples, seed)
    return _widened(estimate, draws)


def _prompt_draws(statistic: Callable[..., float], runs: Sequence[Sequence[Mapping[str, Any]]], resamples: int,
                  seed: int) -> tuple[float, np.ndarray]:
    """``statistic(*runs)`` and its values on ``resamples`` prompt resamples (nan where undefined), or nan and
    no draws when the statistic is undefined on the runs themselves."""
    grouped = [_by_prompt(run) for run in runs]
    n = min(len(g) for g in grouped)
    estimate = statistic(*runs)
    if not n or not np.isfinite(estimate):
        return float("nan"), np.array([])
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(resamples):
        idx = rng.integers(0, n, size=n)
        draws.append(statistic(*[[r for i in idx for r in g[i]] for g in grouped]))
    return float(estimate), np.array(draws, dtype=float)


def _widened(estimate: float, draws: np.ndarray) -> tuple[float, float, float]:
    if not np.isfinite(estimate):
        return float("nan"), float("nan"), float("nan")
    finite = draws[np.isfinite(draws)]
    if not len(finite):
        return estimate, estimate, estimate
    low, high = np.percentile(finite, [2.5, 97.5])
    return float(estimate), float(min(low, estimate)), float(max(high, estimate))


def seeds_prompt_bootstrap(statistic: Callable[..., float], per_seed: Sequence[Sequence[Sequence[Mapping[str, Any]]]],
                           resamples: int = BOOTSTRAP, seed: int = 0) -> tuple[float, float, float, list[float]]:
    """(estimate, low, high, per-seed estimates) of ``statistic``, ``per_seed[i]`` seed i's runs: over one seed
    :func:`prompt_bootstrap`; over several, each seed's prompt resamples, then seeds drawn with replacement and
    averaged (nan when the statistic is undefined on any seed's runs)."""
    results = [_prompt_draws(statistic, runs, resamples, seed) for runs in per_seed]
    estimates = [estimate for estimate, _ in results]
    if len(results) == 1:
        return (*_widened(*results[0]), estimates)
    if not all(np.isfinite(estimates)):
        return float("nan"), float("nan"), float("nan"), estimates
    table = np.stack([draws for _, draws in results], axis=1)  # resamples x seeds
    picks = np.random.default_rng(seed).integers(0, len(results), size=table.shape)
    estimate, low, high = _widened(float(np.mean(estimates)), np.take_along_axis(table, picks, axis=1).mean(axis=1))
    return estimate, low, high, estimates


RESULTS_TITLE = "Chapter 13: SWE RL"


#: What each training seed's run keeps in a combined result (:func:`combine`): what the claims and notes read.
REPLICATE_FIELDS = ("by_context", "rollouts", "per_sample", "runs", "judge")


def combine(per_seed: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """One result of several training seeds' runs (:func:`cascadekit.evaluation.replicates.combine_runs`);
    each seed starts from its own cascade and trains its own judge, over the same context stages."""
    return combine_runs(per_seed, REPLICATE_FIELDS, shared=("trained_context",))


def claims(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The chapter's paper-vs-run rows, each with a 95% interval and a verdict from it.

    A row whose statistic is undefined on this run (no rollout varies, none is
    high-reward: a smoke run; over several seeds, in any seed) is left out rather
    than faked. Over several training seeds (a result of :func:`combine`) every
    interval is over seeds, then prompts. The primary claim is SWE RL's lift of its
    own domain (think, the trained contexts); "other domains keep their scores" is
    flat over the cells below the ceiling.
    """
    runs = replicates(metrics)
    trained = metrics["trained_context"]
    contexts, beyond = list(range(trained + 1)), [trained + 1]
    stages = [s["context"] for s in metrics["runs"][CASCADE]]

    def evaluated(name: str) -> list[Sequence[Mapping[str, Any]]]:
        return [m["by_context"][name] for m in runs]

    def change(after: list, before: list, on: Sequence[int]) -> list[np.ndarray]:
        return [np.subtract(at_contexts(a, on), at_contexts(b, on)) for a, b in zip(after, before)]

    def rollouts(*names: str) -> list[list[Sequence[Mapping[str, Any]]]]:
        return [[m["rollouts"][name] for name in names] for m in runs]

    start, final = evaluated(START), evaluated(final_name(CASCADE, trained))
    execution = evaluated(final_name("execution", trained))
    trained_final = final_name(CASCADE, trained)
    rows = [
        seed_row(f"SWE RL raises the resolve rate (think, contexts 0-{trained})",
                 f"SWE-bench Verified rises most in SWE RL (final {PAPER['SWE-bench Verified, final']})",
                 change(final, start, contexts), "up", primary=True),
    ]
    optional = []
    for field, label in (("execution-free", "the execution-free reward (lexical + semantic)"),
                         ("lexical", "lexical similarity alone"), ("semantic", "the semantic judge's P(YES) alone")):
        optional.append((f"{label} tracks execution truth: correlation over the start policy's rollouts",
                         "execution-free reward stands in for execution",
                         seeds_prompt_bootstrap(lambda r, f=field: correlation(r, f), rollouts(START)), "up"))
    optional.append(("the semantic judge adds what lexical similarity misses: correlation with execution, "
                     "semantic minus lexical (start rollouts)",
                     "lexical + semantic similarity (Kimi-Dev YES probability)",
                     seeds_prompt_bootstrap(lambda r: correlation(r, "semantic") - correlation(r, "lexical"),
                                            rollouts(START)),
                     "up"))
    optional.append(("the execution-free reward still tracks execution on the trained policy's own rollouts: "
                     "correlation, execution-free arm's final policy minus start (flat within 0.05)",
                     "assumed (the reward is never checked against execution)",
                     seeds_prompt_bootstrap(lambda a, b: correlation(a, "execution-free") -
                                            correlation(b, "execution-free"), rollouts(trained_final, START)), "flat"))
    optional.append((f"reward hacking does not grow: high-reward (>= {HIGH_REWARD}) rollouts failing execution, "
                     "execution-free arm's final policy minus start (flat within 0.05)",
                     "not measured (the paper never executes during SWE RL)",
                     seeds_prompt_bootstrap(lambda a, b: hacking_rate(a) - hacking_rate(b),
                                            rollouts(trained_final, START)), "flat"))
    rows += [claim_row(claim, paper, estimate, low, high, direction, seeds=seeds if len(seeds) > 1 else None)
             for claim, paper, (estimate, low, high, seeds), direction in optional if np.isfinite(low)]
    rows.append(seed_row(f"execution-free RL matches execution RL: final resolve rate (contexts 0-{trained}), "
                         "execution-free minus execution (flat within 0.05)",
                         "not compared (execution in Docker costs too much)",
                         change(final, execution, contexts), "flat"))
    if len(stages) > 1:
        before = evaluated(f"{CASCADE}, context {stages[-2]}")
        rows.append(seed_row(f"the longer-context stage lifts the longest trained inputs (context {trained}): "
                             "last stage minus the one before", "16K -> 24K input extension helps",
                             change(final, before, [trained]), "up"))
    rows += [
        unpaired_seed_row(f"too-long inputs hurt: resolve rate at context {trained + 1} (never trained) minus context "
                          f"{trained} (the longest trained), final", "resolve rate drops for inputs beyond 24K",
                          [at_contexts(f, beyond) for f in final], [at_contexts(f, [trained]) for f in final], "down"),
        seed_row("SWE RL keeps the short inputs it started from: resolve rate at context 0, final minus start "
                 "(flat within 0.05)", "not reported", change(final, start, [0]), "flat"),
        kept_domains_row("other domains keep their scores (general, IF, math, code, tools)", "little forgetting",
                         [m["per_sample"]["before SWE RL"] for m in runs], [m["per_sample"]["after SWE RL"] for m in runs],
                         ["general", "instructions", "math", "code", "tools"]),
    ]
    return holm_rows(rows)


def seed_rows(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per training seed: the resolve rate over the trained contexts at the start and after each arm, and the
    execution-free reward's hacking rate on the start and final rollouts."""
    trained = metrics["trained_context"]
    rows = []
    for seed, m in zip(metrics.get("train_seeds", ["the one run"]), replicates(metrics)):
        row: dict[str, Any] = {"train seed": seed}
        for name in (START, final_name(CASCADE, trained), final_name("execution", trained)):
            row[f"resolve, {name}"] = round(float(np.mean(at_contexts(m["by_context"][name], range(trained + 1)))), 3)
        for name in (START, final_name(CASCADE, trained)):
            row[f"hacking, {name}"] = round(hacking_rate(m["rollouts"][name]), 3)
        rows.append(row)
    return rows


def context_rows(by_context: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """One row per evaluated checkpoint: the resolve rate at each context and mean tokens."""
    rows = []
    for name, samples in by_context.items():
        row: dict[str, Any] = {"checkpoint": name}
        for context in sorted({s["context"] for s in samples}):
            row[f"context {context}"] = float(np.mean(at_contexts(samples, [context])))
        row["mean tokens"] = float(np.mean([s["tokens"] for s in samples]))
        rows.append(row)
    return rows


def reward_rows(rollouts: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """One row per scored policy: execution rate, each reward's mean and correlation with truth, hacking rate."""
    rows = []
    for name, run in rollouts.items():
        row: dict[str, Any] = {"policy": name, "rollouts": len(run),
                               "executes": float(np.mean([r["execution"] for r in run]))}
        for field in ("lexical", "semantic", "execution-free"):
            row[f"{field} mean"] = float(np.mean([r[field] for r in run]))
            row[f"r({field}, truth)"] = correlation(run, field)
        row[f"high-reward failing (>= {HIGH_REWARD})"] = hacking_rate(run)
        rows.append(row)
    return rows


def plot_curves(runs: Mapping[str, Sequence[Mapping[str, Any]]]) -> Figure:
    """Per GRPO step: each reward's batch mean (trained on or watched) and the completion length."""
    return rl_curves({arm: back_to_back(stages) for arm, stages in runs.items()},
                     {"reward/swe_execution": "execution truth (resolve rate)",
                      "reward/execution-free": "execution-free reward", "reward/swe_lexical": "lexical similarity",
                      "reward/semantic": "judge P(YES)", "completion_length": "mean completion length"})


def plot_by_context(by_context: Mapping[str, Sequence[Mapping[str, Any]]], trained: int) -> Figure:
    """Resolve rate by context size after every checkpoint, the never-trained context shaded."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for name, samples in by_context.items():
        contexts = sorted({s["context"] for s in samples})
        ax.plot(contexts, [np.mean(at_contexts(samples, [c])) for c in contexts], marker="o", label=name)
    ax.axvspan(trained + 0.5, trained + 1.5, color="0.9", label="longer than any training input")
    ax.set(xlabel="other functions in calc.py (input context)", ylabel="resolve rate (think, greedy)",
           ylim=(-0.02, 1.02), title="SWE resolve rate by input context")
    ax.set_xticks(sorted({s["context"] for samples in by_context.values() for s in samples}))
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_reward_vs_truth(rollouts: Mapping[str, Sequence[Mapping[str, Any]]]) -> Figure:
    """Each reward's distribution over rollouts that pass and that fail execution, per scored policy."""
    fields = ("lexical", "semantic", "execution-free")
    fig, axes = plt.subplots(1, len(fields), figsize=(11, 3.4), sharey=True)
    for ax, field in zip(axes, fields):
        for k, (name, run) in enumerate(rollouts.items()):
            for truth, shift in ((1.0, -0.15), (0.0, 0.15)):
                values = [r[field] for r in run if r["execution"] == truth]
                if values:
                    ax.boxplot(values, positions=[k + shift], widths=0.25, patch_artist=True,
                               boxprops={"facecolor": "tab:green" if truth else "tab:red", "alpha": 0.5})
        ax.axhline(HIGH_REWARD, color="0.5", ls=":", lw=1)
        ax.set_xticks(range(len(rollouts)), list(rollouts), rotation=20, fontsize=7)
        ax.set(title=f"{field} (green: passes, red: fails)", ylim=(-0.05, 1.05))
    axes[0].set_ylabel("reward")
    fig.tight_layout()
    return fig


def notes(metrics: Mapping[str, Any]) -> str:
    """Resolve rates by context, the rewards against execution, the judge, the stage table, the timings; over
    several training seeds each seed's headline numbers first (the tables are then the first seed's)."""
    judge_check = metrics["judge"]["held_out"]
    seeds = seed_notes(metrics, seed_rows)
    first = seeds.first
    return (f"{seeds.table}### Resolve rate by input context (think, greedy){first}\n\n"
            f"{markdown_table(context_rows(metrics['by_context']))}"
            f"\n\n### Rewards against execution truth on sampled rollouts{first}\n\n"
            f"{markdown_table(reward_rows(metrics['rollouts']))}\n\n"
            f"### The semantic judge (held out){first}\n\naccuracy {judge_check['accuracy']:.3f} "
            f"[{judge_check['low']:.3f}, {judge_check['high']:.3f}] on {judge_check['n']} candidates, "
            f"AUC {judge_check['auc']:.3f}, Brier {judge_check['brier']:.3f}\n\n"
            f"### Stage table before and after the cascade's SWE RL{first}\n\n{stage_markdown(metrics['rows'])}\n\n"
            f"Timings (s){first}: {json.dumps(metrics['timings'])}")


def figures(metrics: Mapping[str, Any]) -> dict[str, Figure]:
    """The GRPO curves of both arms, resolve rate by context, and each reward against execution truth."""
    return {"swe_rl_curves": plot_curves(metrics["runs"]),
            "swe_by_context": plot_by_context(metrics["by_context"], metrics["trained_context"]),
            "swe_reward_vs_truth": plot_reward_vs_truth(metrics["rollouts"])}


def committed(metrics: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """The metrics without the completions and rollout answers; ``samples.jsonl`` in ``folder`` keeps a spread.

    A combined result (:func:`combine`) has no completions of its own: each seed's folder keeps its spread.
    """
    if "by_context_completions" not in metrics:
        return dict(metrics)
    write_sample_spread(folder, [{"checkpoint": name, **s, "completion": c}
                                 for name, samples in metrics["by_context"].items()
                                 for s, c in zip(samples, metrics["by_context_completions"][name])],
                        KEPT_SAMPLES)
    kept = dict(metrics, rollouts={name: [{k: v for k, v in r.items() if k != "answer"} for r in run]
                                   for name, run in metrics["rollouts"].items()})
    kept.pop("by_context_completions")
    return kept


# Exercises ------------------------------------------------------------------

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
    return hacking_rate([{"execution-free": r, "execution": e} for r, e in zip(rewards, executed)])


def _lexical_hacking() -> float:
    return hacking_rate(committed_metrics("13_swe_rl")["rollouts"][START], "lexical")


FIELDS = ("lexical", "semantic", "execution-free")


def _best_tracking_field() -> str:
    metrics = committed_metrics("13_swe_rl")
    rollouts = metrics["rollouts"][final_name(CASCADE, metrics["trained_context"])]
    return max(FIELDS, key=lambda field: correlation(rollouts, field))


EXERCISES = [
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
