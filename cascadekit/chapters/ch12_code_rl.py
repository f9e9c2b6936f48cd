"""Chapter 12: Code RL, one GRPO arm per sampling temperature, with streamed (asynchronous) rewards.

Regenerate the toy results (``data/results/12_code_rl``) with::

    cascadekit experiment 12 --scale toy --train-seed 0,1,2 --jobs 2

Every arm is :func:`cascadekit.chapters.cascade.code_rl_stage`: strict on-policy
GRPO on the same ``code_rl.prompts`` code prompts (ops ``code_rl.ops``, ``/think``),
rewarded 1 only when every hidden test passes in the sandbox, at one of
``code_rl.temperatures``. The arm at the profile's ``rl.temperature`` is the
cascade's Code RL checkpoint (the one SWE RL starts from).

What the chapter measures:

* **score** on held-out code prompts at each op of ``code_rl.ops`` (the op where the model
  before Code RL sits at its edge: op 5 in the toy world), paired by prompt with the start;
* **exploration and entropy** per arm: the share of groups with a learning signal
  (not all rollouts scoring the same), and the policy's token entropy and its
  growth over the run (the paper: a higher temperature explores better but risks
  an entropy explosion). TRL measures entropy at the sampling temperature, so
  arms are compared by their growth, not their level;
* **forgetting**: the stage table (all domains, both modes) before and after
  each arm, math and instruction following in particular;
* **asynchronous rewards**: what the streamed verification hid behind generation
  in each arm (:meth:`cascadekit.training.async_rewards.StreamingRewards.summary`;
  the timed comparison is :mod:`cascadekit.training.async_rewards_benchmark`).

As in the paper, Code RL starts from the cascade's Math RL checkpoint
(:func:`cascadekit.training.math_rl.unified_math_rl`, shipped at toy scale).
"""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from matplotlib.figure import Figure

from cascadekit.chapters import ChapterConfig
from cascadekit.exercises.committed import committed_metrics
from cascadekit.claims import bootstrap_interval, holm_rows, step_windows, unpaired_seed_row
from cascadekit.domains import chat_records, domains, draw_tasks
from cascadekit.evaluation.replicates import combine_runs, replicates, seed_notes
from cascadekit.evaluation.stage_claims import change_row, compact, mean_of
from cascadekit.evaluation.stage_table import stage_markdown, stage_table, suite_records
from cascadekit.exercises import Exercise
from cascadekit.exercises.answers import Case, Function, Number
from cascadekit.plots import rl_curves
from cascadekit.profiles import Profile
from cascadekit.results import markdown_table, write_sample_spread
from cascadekit.training.async_rewards import StreamingRewards
from cascadekit.chapters.cascade import code_rl_stage, unified_math_rl

START = "before Code RL"
KEPT_SAMPLES = 120
#: "Flat" claims (no forgetting) hold when the change's interval lies within +- this.
FORGETTING_TOLERANCE = 0.05
#: The paper's asynchronous reward computation (8 DGX H100 nodes, batch 128, rollout 8).
PAPER_VERIFY_S = (1172.4, 416.2)


def arm_name(temperature: float) -> str:
    return f"Code RL T={temperature:g}"


def cascade_temperature(profile: Profile) -> float:
    """The arm that continues the cascade: the temperature nearest the profile's ``rl.temperature``."""
    return min(profile.code_rl.temperatures, key=lambda t: abs(t - profile.rl.temperature))


def code_eval_records(profile: Profile) -> list[dict[str, Any]]:
    """``sft.eval_tasks`` eval-split code prompts per op of ``code_rl.ops``, each in both modes, op by op."""
    records = []
    for op in range(profile.code_rl.ops[0], profile.code_rl.ops[1] + 1):
        for task in draw_tasks(domains()["code"], profile.sft.eval_tasks, profile.seeds.eval, "eval", [op]):
            records.extend({**r, "op": op} for r in chat_records(task))
    return records


def run(config: ChapterConfig, work_dir: str | Path) -> dict[str, Any]:
    """The temperature arms from the cascade's last checkpoint, and the tables before and after each."""
    profile, work_dir = config.profile, Path(work_dir)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    start = unified_math_rl(profile, work_dir)
    timings["start_s"] = round(time.perf_counter() - started, 1)
    runs = {}
    for temperature in profile.code_rl.temperatures:
        started = time.perf_counter()
        runs[arm_name(temperature)] = code_rl_stage(start, profile, temperature, work_dir / f"code-rl-T{temperature:g}")
        timings[f"{arm_name(temperature)}_s"] = round(time.perf_counter() - started, 1)
    records, code_records = suite_records(profile), code_eval_records(profile)
    checkpoints = {START: start.checkpoint, **{name: out.checkpoint for name, out in runs.items()}}
    tables = {name: stage_table(path, profile, name, records) for name, path in checkpoints.items()}
    code_tables = {name: stage_table(path, profile, name, code_records) for name, path in checkpoints.items()}
    timings.update({f"table {name}_s": t["wall_s"] + code_tables[name]["wall_s"] for name, t in tables.items()})
    code_samples = {name: [{**s, "op": r["op"]} for s, r in zip(compact({name: t})[name], code_records)]
                    for name, t in code_tables.items()}
    return {
        "rows": [row for t in tables.values() for row in t["rows"]],
        "code_rows": [row for t in code_tables.values() for row in t["rows"]],
        "samples": {name: t["samples"] + code_tables[name]["samples"] for name, t in tables.items()},
        "per_sample": compact(tables), "code_per_sample": code_samples,
        "start_key": start.key, "cascade_arm": arm_name(cascade_temperature(profile)),
        "runs": {name: {"key": out.key, "temperature": t, **out.metrics}
                 for (name, out), t in zip(runs.items(), profile.code_rl.temperatures)},
        "timings": timings, "profile": profile.to_dict(),
    }


def entropy_growth(curves: Sequence[Mapping[str, Any]]) -> tuple[float, float, float]:
    """(change, low, high) of the mean token entropy: the last quarter of steps minus the first
    (:func:`cascadekit.claims.step_windows`)."""
    return bootstrap_interval(*step_windows([c["entropy"] for c in curves]), paired=False)


def signal_share(curves: Sequence[Mapping[str, Any]]) -> list[float]:
    """Per step, the share of groups whose rollouts did not all score the same (1 - TRL's zero-std share)."""
    return [1.0 - float(c["frac_reward_zero_std"]) for c in curves]


def arm_table(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per arm: held-out code score per op (think), exploration, entropy and its growth, hidden verification."""
    rows = []
    for name, arm in metrics["runs"].items():
        row: dict[str, Any] = {"arm": name, "temperature": arm["temperature"]}
        for op in sorted({s["op"] for s in metrics["code_per_sample"][name]}):
            mean, low, high = mean_of([s for s in metrics["code_per_sample"][name] if s["op"] == op],
                                      names=["code"], think=True)
            row[f"op {op} think score"] = f"{mean:.3f} [{low:.3f}, {high:.3f}]"
        share, low, high = bootstrap_interval(signal_share(arm["curves"]))
        row["groups with signal"] = f"{share:.3f} [{low:.3f}, {high:.3f}]"
        row["entropy (first step)"] = round(float(arm["curves"][0]["entropy"]), 3)
        growth, low, high = entropy_growth(arm["curves"])
        row["entropy growth"] = f"{growth:+.3f} [{low:+.3f}, {high:+.3f}]"
        row["verification hidden (estimate)"] = arm.get("streaming_rewards", {}).get("hidden_share_estimate")
        rows.append(row)
    return rows


RESULTS_TITLE = "Chapter 12: Code RL"


#: What each training seed's run keeps in a combined result (:func:`combine`): what the claims read.
REPLICATE_FIELDS = ("code_per_sample", "per_sample", "runs")


def combine(per_seed: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """One result of several training seeds' runs (:func:`cascadekit.evaluation.replicates.combine_runs`);
    each seed starts from its own Math RL checkpoint, with the same arms and the course's one suite."""
    return combine_runs(per_seed, REPLICATE_FIELDS, shared=("cascade_arm",))


def claims(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The chapter's paper-vs-run rows, each with a 95% interval, a verdict from it and a Holm column.

    Over several training seeds (a result of :func:`combine`) every interval is over
    seeds, then prompts or steps. The primary claim is Code RL's lift of its own
    domain (held-out code, think).
    """
    runs = replicates(metrics)
    temperatures = sorted(arm["temperature"] for arm in metrics["runs"].values())
    low_t, high_t = arm_name(temperatures[0]), arm_name(temperatures[-1])
    cascade = metrics["cascade_arm"]

    def code(name: str, op: int | None = None) -> list[list[Mapping[str, Any]]]:
        return [[s for s in m["code_per_sample"][name] if op is None or s["op"] == op] for m in runs]

    def table(name: str) -> list[list[Mapping[str, Any]]]:
        return [m["per_sample"][name] for m in runs]

    def windows(name: str, values: Any) -> list[list[float]]:
        return [values(m["runs"][name]["curves"]) for m in runs]

    first = metrics["code_per_sample"][START]
    easy, hard = min(s["op"] for s in first), max(s["op"] for s in first)
    entropy = [step_windows([c["entropy"] for c in m["runs"][high_t]["curves"]]) for m in runs]
    rows = [
        change_row(f"Code RL raises held-out code pass rate, ops {easy}-{hard}, think ({cascade})",
                   "LiveCodeBench v6 rises after Code RL", code(START), code(cascade), "up", names=["code"], think=True,
                   primary=True),
        change_row(f"... on the hardest op ({hard}), think", "the gain is on problems the model could not yet solve",
                   code(START, hard), code(cascade, hard), "up", names=["code"], think=True),
        change_row(f"... and it carries into no_think (ops {easy}-{hard})", "not reported separately for the unified model",
                   code(START), code(cascade), "up", names=["code"], think=False),
        unpaired_seed_row(f"higher temperature explores more: share of groups with a learning signal, "
                          f"T={temperatures[-1]:g} minus T={temperatures[0]:g} (per step)",
                          "a higher temperature explores better", windows(high_t, signal_share),
                          windows(low_t, signal_share), "up"),
        change_row(f"... and scores higher: held-out code, think, T={temperatures[-1]:g} minus T={temperatures[0]:g}",
                   "a higher temperature gives better performance", code(low_t), code(high_t), "up", names=["code"],
                   think=True),
        unpaired_seed_row(f"the highest temperature risks entropy growth: T={temperatures[-1]:g}, mean token entropy, "
                          f"last quarter of steps minus first", "entropy explosion at high temperature",
                          [last for last, _ in entropy], [start for _, start in entropy], "up"),
        change_row(f"little forgetting: math score change after Code RL ({cascade}), both modes, within "
                   f"+-{FORGETTING_TOLERANCE:g}", "sequential RL stages rarely degrade earlier domains",
                   table(START), table(cascade), "flat", names=["math"], tolerance=FORGETTING_TOLERANCE),
        change_row(f"little forgetting: instruction following change after Code RL, both modes, within "
                   f"+-{FORGETTING_TOLERANCE:g}", "IF-RL's gains survive later stages",
                   table(START), table(cascade), "flat", names=["instructions"], tolerance=FORGETTING_TOLERANCE),
    ]
    return holm_rows(rows)


def seed_rows(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per training seed: held-out code (think) before Code RL and after each temperature arm."""
    rows = []
    for seed, m in zip(metrics.get("train_seeds", ["the one run"]), replicates(metrics)):
        row: dict[str, Any] = {"train seed": seed}
        for name in (START, *m["runs"]):
            row[f"code think, {name}"] = round(mean_of(m["code_per_sample"][name], names=["code"], think=True)[0], 3)
        rows.append(row)
    return rows


def plot_curves(runs: Mapping[str, Mapping[str, Any]]) -> Figure:
    """Reward, mean completion length, token entropy and zero-variance share per GRPO step, one line per arm."""
    return rl_curves(runs, {"reward": "pass-all-tests reward", "completion_length": "mean completion length (tokens)",
                            "entropy": "mean token entropy (at the arm's T)",
                            "frac_reward_zero_std": "share of groups with no signal"})


def notes(metrics: Mapping[str, Any]) -> str:
    """The arms, held-out code by op, the stage table before and after each arm, the timings; over several
    training seeds each seed's held-out code first (the tables are then the first seed's)."""
    seeds = seed_notes(metrics, seed_rows)
    first = seeds.first
    return (f"{seeds.table}### Arms{first}\n\n{markdown_table(arm_table(metrics))}\n\n"
            f"### Held-out code at ops {tuple(metrics['profile']['code_rl']['ops'])}{first}\n\n"
            f"{stage_markdown(metrics['code_rows'])}"
            f"\n\n### Stage table before and after each arm{first}\n\n{stage_markdown(metrics['rows'])}\n\n"
            f"Changes are paired by prompt ({metrics['profile']['sft']['eval_tasks']} prompts per domain, op and "
            f"mode, greedy){seeds.over}.\n\n"
            f"Timings (s){first}: {json.dumps(metrics['timings'])}")


def figures(metrics: Mapping[str, Any]) -> dict[str, Figure]:
    """The GRPO curves of every temperature arm."""
    return {"code_rl_curves": plot_curves(metrics["runs"])}


def committed(metrics: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """The metrics without the per-sample records (``per_sample`` keeps them compact); ``samples.jsonl`` a spread.

    A combined result (:func:`combine`) has no records of its own: each seed's folder keeps its spread.
    """
    if "samples" in metrics:
        write_sample_spread(folder, [s for table in metrics["samples"].values() for s in table], KEPT_SAMPLES)
    return {k: v for k, v in metrics.items() if k != "samples"}


# Exercises ------------------------------------------------------------------

def _verification_timings() -> list[Case]:
    """(verify_s, wait_s, workers): two committed arms, all hidden, none hidden, a wait past blocking, none verified."""
    return [(296.237, 104.275, 2), (237.407, 35.132, 2), (10.0, 0.0, 1), (10.0, 10.0, 1), (10.0, 8.0, 2),
            (100.0, 20.0, 4), (0.0, 0.0, 4), (60.0, 1.5, 8)]


def _hidden_share(verify_s: float, wait_s: float, workers: int) -> float:
    streaming = StreamingRewards(lambda prompts, completions, **kwargs: [], None, workers)  # only its summary is used
    streaming.stats.update(verify_s=verify_s, wait_s=wait_s)
    return streaming.summary()["hidden_share_estimate"]


def _signal_gain() -> float:
    """Mean per-step share of groups with a learning signal, the hottest arm minus the coldest."""
    runs = sorted(committed_metrics("12_code_rl")["runs"].values(), key=lambda arm: arm["temperature"])
    return statistics.mean(signal_share(runs[-1]["curves"])) - statistics.mean(signal_share(runs[0]["curves"]))


EXERCISES = [
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
]
