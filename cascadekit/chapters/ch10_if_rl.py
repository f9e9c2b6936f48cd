"""Chapter 10: IF-RL, from chapter 09's half-half RLHF checkpoint.

Regenerate the committed toy results (``data/results/10_if_rl``) with::

    cascadekit experiment 10 --scale toy --train-seed 0,1,2 --jobs 2

Three arms, each strict on-policy GRPO on the same instruction-following prompts
(:func:`cascadekit.chapters.cascade.if_rl_stage`):

* **no_think, verifier** — the unified model's IF-RL (the paper's choice): the
  strict instruction verifier's 0/1 score, ``/no_think`` prompts only. Its
  checkpoint is the cascade's next stage.
* **no_think, verifier + RM** — the same prompts and mode, with the reward model's
  predicted quality added (:func:`cascadekit.chapters.cascade.verifier_plus_reward_model`):
  does the reward model limit what the verifier costs general quality?
* **think, verifier + RM** — the paper's reward for its dedicated thinking model,
  here run on the unified model in ``/think`` mode (the kit has no separate
  thinking-only model).

The stage table runs after RLHF and after each arm; general answers are also
scored by the reward model, so the chapter sees quality both as the reward model
and as the hidden truth judge it.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from cascadekit.chapters import ChapterConfig
from cascadekit.exercises.committed import stage_row
from cascadekit.domains import prompt_text
from cascadekit.claims import holm_rows, seed_row, step_windows, unpaired_seed_row
from cascadekit.evaluation.replicates import combine_runs, replicates, seed_notes
from cascadekit.evaluation.stage_claims import change_row, compact, paired_change, picked
from cascadekit.evaluation.stage_table import stage_markdown, stage_table, suite_records
from cascadekit.exercises import Exercise
from cascadekit.exercises.answers import Case, Function, Number
from cascadekit.plots import rl_curves
from cascadekit.results import write_sample_spread
from cascadekit.rewards import verifier_reward
from cascadekit.verify.instructions import MaxWords
from cascadekit.chapters.cascade import if_rl_stage, largest_reward_model, unified_rlhf, verifier_plus_reward_model
from cascadekit.training.reward_model import RewardModelScore

START = "RLHF half-half"
#: The arms: stage name -> (think, with the reward model's score).
ARMS = {"IF-RL no_think, verifier": (False, False), "IF-RL no_think, verifier + RM": (False, True),
        "IF-RL think, verifier + RM": (True, True)}
UNIFIED = "IF-RL no_think, verifier"
KEPT_SAMPLES = 120


def run(config: ChapterConfig, work_dir: str | Path) -> dict[str, Any]:
    """The three IF-RL arms from the RLHF checkpoint, and the stage table after each."""
    profile, work_dir = config.profile, Path(work_dir)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    start = unified_rlhf(profile, work_dir / "rlhf")
    scorer = RewardModelScore(largest_reward_model(profile))
    timings["start_s"] = round(time.perf_counter() - started, 1)
    runs = {}
    for name, (think, with_rm) in ARMS.items():
        started = time.perf_counter()
        reward = verifier_plus_reward_model(scorer) if with_rm else verifier_reward
        runs[name] = if_rl_stage(start, profile, think, reward, work_dir / name.replace(" ", "-").replace(",", ""))
        timings[f"{name}_s"] = round(time.perf_counter() - started, 1)
    records = suite_records(profile)
    general = [r for r in records if r["domain"] == "general"]
    tables = {START: stage_table(start.checkpoint, profile, START, records)}
    tables.update({name: stage_table(out.checkpoint, profile, name, records) for name, out in runs.items()})
    predicted = {name: scorer.predicted_quality([prompt_text(r) for r in general],
                                                [s["completion"] for s in picked(t["samples"], ["general"])])
                 for name, t in tables.items()}
    timings.update({f"table {name}_s": t["wall_s"] for name, t in tables.items()})
    return {
        "rows": [row for t in tables.values() for row in t["rows"]],
        "samples": {name: t["samples"] for name, t in tables.items()},
        "per_sample": compact(tables),
        "predicted_general_quality": predicted, "start_key": start.key, "reward_model": scorer.__name__,
        "runs": {name: {"key": out.key, **out.metrics} for name, out in runs.items()}, "timings": timings,
        "profile": profile.to_dict(),
    }


RESULTS_TITLE = "Chapter 10: IF-RL"


#: What each training seed's run keeps in a combined result (:func:`combine`): what the claims read.
REPLICATE_FIELDS = ("per_sample", "predicted_general_quality", "runs")


def combine(per_seed: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """One result of several training seeds' runs (:func:`cascadekit.evaluation.replicates.combine_runs`);
    each seed starts from its own RLHF checkpoint, with its own reward model, and asks the course's one suite."""
    return combine_runs(per_seed, REPLICATE_FIELDS)


def entropy_row(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The IF-RL arm's entropy change, last quarter of steps minus first (unpaired steps, within each seed)."""
    windows = [step_windows([c["entropy"] for c in m["runs"][UNIFIED]["curves"]]) for m in runs]
    return unpaired_seed_row("the policy's entropy falls: mean token entropy, last quarter of steps minus first",
                             "model entropy falls", [last for last, _ in windows], [first for _, first in windows],
                             "down")


def claims(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The chapter's paper-vs-run rows, each with a 95% interval, a verdict from it and a Holm column.

    Over several training seeds (a result of :func:`combine`) every interval is over
    seeds, then prompts. The primary claim is IF-RL's lift of its own domain
    (instructions, no_think).
    """
    runs = replicates(metrics)
    before = [m["per_sample"][START] for m in runs]
    after = [m["per_sample"][UNIFIED] for m in runs]
    combined = [m["per_sample"]["IF-RL no_think, verifier + RM"] for m in runs]
    predicted = [np.subtract(m["predicted_general_quality"][UNIFIED], m["predicted_general_quality"][START])
                 for m in runs]
    return holm_rows([
        change_row("IF-RL raises instruction following in no_think (strict score)", "IFEval and IFBench rise",
                   before, after, "up", names=["instructions"], think=False, primary=True),
        change_row("... and it carries into think (strict score, think prompts)", "not reported for the unified model",
                   before, after, "up", names=["instructions"], think=True),
        change_row("responses get shorter: mean tokens, all domains", "shorter reasoning traces",
                   before, after, "down", "tokens", digits=1),
        entropy_row(runs),
        change_row("general quality may drop: hidden true quality", "ArenaHard may fall",
                   before, after, "down", names=["general"]),
        seed_row("general quality may drop: the reward model's predicted quality", "the RM's score may fall",
                 predicted, "down"),
        change_row("adding the reward model's score limits the drop: true general quality, verifier + RM minus "
                   "verifier alone (both no_think)", "the combined reward keeps human alignment",
                   after, combined, "up", names=["general"]),
        change_row("reasoning domains may dip: math and code score", "a temporary dip on reasoning benchmarks",
                   before, after, "down", names=["math", "code"]),
    ])


def seed_rows(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per training seed: IF-RL's change of instructions (no_think) and of general, each arm against the start."""
    rows = []
    for seed, m in zip(metrics.get("train_seeds", ["the one run"]), replicates(metrics)):
        start = m["per_sample"][START]
        row: dict[str, Any] = {"train seed": seed}
        for name in ARMS:
            row[f"instructions no_think, {name}"] = round(paired_change(start, m["per_sample"][name],
                                                                         names=["instructions"], think=False)[0], 3)
        row[f"general, {UNIFIED}"] = round(paired_change(start, m["per_sample"][UNIFIED], names=["general"])[0], 3)
        rows.append(row)
    return rows


def plot_curves(runs: Mapping[str, Mapping[str, Any]]) -> Figure:
    """Reward, mean completion length and mean token entropy per GRPO step, one line per arm."""
    return rl_curves(runs, {"reward": "reward", "completion_length": "mean completion length (tokens)",
                            "entropy": "mean token entropy"})


def notes(metrics: Mapping[str, Any]) -> str:
    """The stage table after RLHF and after each arm, and the timings; over several training seeds each
    seed's headline changes first (the table and timings are then the first seed's)."""
    seeds = seed_notes(metrics, seed_rows)
    return (f"{seeds.table}### Stage table after RLHF and after each IF-RL arm{seeds.first}\n\n"
            f"{stage_markdown(metrics['rows'])}\n\nChanges are paired by prompt over the toy suite "
            f"({metrics['profile']['sft']['eval_tasks']} prompts per domain and mode, greedy){seeds.over}.\n\n"
            f"Timings (s){seeds.first}: {json.dumps(metrics['timings'])}")


def figures(metrics: Mapping[str, Any]) -> dict[str, Figure]:
    """The GRPO curves of every IF-RL arm."""
    return {"if_rl_curves": plot_curves(metrics["runs"])}


def committed(metrics: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """The metrics without the per-sample records (``per_sample`` keeps them compact); ``samples.jsonl`` a spread.

    A combined result (:func:`combine`) has no records of its own: each seed's folder keeps its spread.
    """
    if "samples" in metrics:
        write_sample_spread(folder, [s for table in metrics["samples"].values() for s in table], KEPT_SAMPLES)
    return {k: v for k, v in metrics.items() if k != "samples"}


# Exercises ------------------------------------------------------------------

def _max_words_cases() -> list[Case]:
    texts = ("", "one", "Two words.", "it's a don't-stop e-mail", "snake_case counts as one", "3 + 4 = 7",
             "Ünïcödé wörds ça va", "\n\n  spaced   out \t words \n", "a, b, c, d, e, f", "word " * 21)
    return [(t, n) for t in texts for n in (3, 5)]


def _max_words(text: str, n: int) -> bool:
    return MaxWords(n).check(text)


def _if_rl_gain() -> float:
    before = stage_row("10_if_rl", START, "instructions", "no_think")
    after = stage_row("10_if_rl", UNIFIED, "instructions", "no_think")
    return after["score"] - before["score"]


EXERCISES = [
    Exercise("10.1", "A verifier rule: at most n words",
             "Write `max_words_ok(text, n)`: True when `text` obeys \"Use at most n words.\" exactly as the kit's "
             "strict instruction verifier counts words.",
             Function(_max_words_cases, _max_words,
                      describe_case=lambda case: f"{case[0][:30]!r}, n={case[1]}"),
             "the verifier counts runs of word characters (the regular expression `\\w+`), so punctuation splits "
             "words and underscores do not.", "def max_words_ok(text, n):\n    ...\n\nanswer = max_words_ok"),
    Exercise("10.2", "What IF-RL bought",
             "In the committed run, by how much did the instruction-following score in `/no_think` change from the "
             "RLHF checkpoint to the `IF-RL no_think, verifier` arm (after minus before)? Within 0.005.",
             Number(_if_rl_gain, abs_=0.005), "two rows of `load_metrics(\"10_if_rl\")[\"rows\"]`: domain "
             "instructions, mode no_think, stages `RLHF half-half` and `IF-RL no_think, verifier`.",
             "answer = None  # a change in score", homework=True),
]
