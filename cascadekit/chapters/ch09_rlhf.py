"""Chapter 09: the reward model and half-half RLHF, from chapter 08's SFT checkpoint.

Regenerate the committed toy results (``data/results/09_rlhf``) with::

    cascadekit experiment 09 --scale toy --train-seed 0,1,2 --jobs 2

What runs (every step a cached stage; the SFT checkpoint and reward models ship
under ``data/checkpoints/``):

1. one reward model per size in ``reward_model.layers``, trained on general-domain
   preference pairs (:mod:`cascadekit.training.reward_model`);
2. RLHF: strict on-policy GRPO on ``rl.samples`` general prompts against the
   largest reward model, in three arms from the same SFT checkpoint with the same
   prompts and budget: *half-half* (each batch half ``/think``, half ``/no_think``,
   the paper's choice for the unified model), *think only*, *no_think only*; and the
   half-half arm against each smaller reward model;
3. the stage table after SFT and after each arm, and each reward model's opinion of
   its policy's general answers beside their hidden true quality.

Math and code prompts stay out of RLHF, as in the paper. Departures at toy scale:
the preference data is ordered by a hidden quality function, not by people (perturbed
gold answers and the SFT policy's own samples), a smaller reward model is the SFT
model cut to fewer layers, and a larger one (``reward_model.widths``, or more layers than
the policy's) is the SFT model grown function-preservingly (:mod:`cascadekit.engine.growth`),
not a separately pretrained larger base.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from matplotlib.figure import Figure

from cascadekit.chapters import ChapterConfig
from cascadekit.exercises.committed import committed_metrics
from cascadekit.domains import prompt_text
from cascadekit.claims import claim_row, holm_rows, problem_outcomes, seed_row
from cascadekit.evaluation.replicates import combine_runs, replicates, seed_notes
from cascadekit.evaluation.stage_claims import change_row, compact, mean_of, picked
from cascadekit.evaluation.stage_table import stage_markdown, stage_table, suite_records
from cascadekit.exercises import Exercise
from cascadekit.exercises.answers import Function, Number
from cascadekit.stages import StageOutput
from cascadekit.plots import rl_curves
from cascadekit.results import markdown_table, write_sample_spread
from cascadekit.chapters.cascade import RLHF_ARMS, reward_models, rlhf_stage, sft_checkpoint
from cascadekit.training.reward_model import RewardModelScore

#: How many per-sample records the results keep (an even spread over all of them).
KEPT_SAMPLES = 120
#: The paper's numbers (Nemotron-Cascade-8B unified, before and after RLHF).
PAPER_RLHF = {"general": ("ArenaHard", 70.0, 90.1), "math": ("AIME25", 72.8, 75.0),
              "code": ("LiveCodeBench v6", 56.7, 67.2)}
SFT_STAGE = "SFT"


def arm_name(arm: str, layers: int, largest: int) -> str:
    """The stage name of an RLHF arm (the reward model's size named when it is not the largest)."""
    return f"RLHF {arm}" + ("" if layers == largest else f" (RM {layers} layer{'s' * (layers > 1)})")


def reward_model_view(scorer: RewardModelScore, records: Sequence[Mapping[str, Any]],
                      samples: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The general samples with the reward model's predicted quality and the gap to the true quality."""
    general = [(r, s) for r, s in zip(records, samples) if r["domain"] == "general"]
    predicted = scorer.predicted_quality([prompt_text(r) for r, _ in general], [s["completion"] for _, s in general])
    return [{"domain": "general", "think": s["think"], "true": s["score"], "predicted": p, "gap": p - s["score"]}
            for (_, s), p in zip(general, predicted)]


def run(config: ChapterConfig, work_dir: str | Path) -> dict[str, Any]:
    """Reward models, the RLHF arms and their stage tables (every training step cached)."""
    profile, work_dir = config.profile, Path(work_dir)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    sft = sft_checkpoint(profile)
    models = reward_models(profile)
    timings["reward_models_s"] = round(time.perf_counter() - started, 1)
    largest = max(models)
    scorers = {layers: RewardModelScore(rm) for layers, rm in models.items()}

    runs: dict[str, tuple[StageOutput, int]] = {}
    for layers in sorted(models, reverse=True):
        for arm in RLHF_ARMS if layers == largest else ["half-half"]:
            started = time.perf_counter()
            name = arm_name(arm, layers, largest)
            runs[name] = (rlhf_stage(profile, arm, models[layers], work_dir / name.replace(" ", "-")), layers)
            timings[f"{name}_s"] = round(time.perf_counter() - started, 1)

    records = suite_records(profile)
    general = [r for r in records if r["domain"] == "general"]
    tables = {SFT_STAGE: stage_table(sft.checkpoint, profile, SFT_STAGE, records)}
    for name, (output, layers) in runs.items():
        tables[name] = stage_table(output.checkpoint, profile, name, records if layers == largest else general)
    views = {f"{name} / RM {layers}": reward_model_view(scorers[layers], general,
                                                       picked(tables[name]["samples"], ["general"]))
             for name, (_, layers) in runs.items() if name.startswith("RLHF half-half")}
    views.update({f"{SFT_STAGE} / RM {layers}": reward_model_view(scorers[layers], general,
                                                                 picked(tables[SFT_STAGE]["samples"], ["general"]))
                  for layers in models})
    timings.update({f"table {name}_s": t["wall_s"] for name, t in tables.items()})
    return {
        "rows": [row for t in tables.values() for row in t["rows"]],
        "samples": {name: t["samples"] for name, t in tables.items()},
        "per_sample": compact(tables),
        "reward_models": {str(layers): {"key": rm.key, **rm.metrics} for layers, rm in models.items()},
        "largest": largest,
        "runs": {name: {"key": out.key, "reward_model_layers": layers, **out.metrics}
                 for name, (out, layers) in runs.items()},
        "reward_model_views": views, "sft_key": sft.key, "timings": timings, "profile": profile.to_dict(),
    }


RESULTS_TITLE = "Chapter 09: reward model and half-half RLHF"


#: What each training seed's run keeps in a combined result (:func:`combine`): what the claims and notes read.
REPLICATE_FIELDS = ("per_sample", "reward_models", "reward_model_views", "runs", "largest")


def combine(per_seed: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """One result of several training seeds' runs (:func:`cascadekit.evaluation.replicates.combine_runs`).

    Every seed trains its own SFT, reward models and arms; they must share the
    reward models' sizes (a ValueError if not), and they ask the same suite
    (the evaluation seed is the course's).
    """
    return combine_runs(per_seed, REPLICATE_FIELDS, shared=("largest",))


def claims(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The chapter's paper-vs-run rows, each with a 95% interval, a verdict from it and a Holm column.

    Over several training seeds (a result of :func:`combine`) every interval is
    over seeds, then prompts or pairs. The primary claim is RLHF's lift of its
    own domain (general, both modes).
    """
    runs, largest = replicates(metrics), metrics["largest"]

    def stage(name: str) -> list[list[Mapping[str, Any]]]:
        return [m["per_sample"][name] for m in runs]

    sft, half = stage(SFT_STAGE), stage("RLHF half-half")
    rows = []
    for name, (bench, before, after) in PAPER_RLHF.items():
        rows.append(change_row(f"RLHF (half-half) changes the {name} score, both modes", f"{bench} {before} -> {after}",
                               sft, half, "up", names=[name], primary=name == "general"))
    rows.append(change_row("RLHF cuts verbosity: mean tokens per response, all domains",
                           "shorter, less verbose answers", sft, half, "down", "tokens", digits=1))
    rows.append(change_row("RLHF cuts repetition: repeated word 3-grams, all domains", "less repetition",
                           sft, half, "down", "repetition"))
    for other in list(RLHF_ARMS)[1:]:
        rows.append(change_row(f"half-half beats {other}: mean score over all domains and modes",
                               "half-half best on ArenaHard, AIME25 and LCB v6", stage(f"RLHF {other}"), half, "up"))
    sizes = sorted(int(k) for k in metrics["reward_models"])
    rows.extend(accuracy_row(layers, runs) for layers in sizes)
    for small in sizes[:-1]:
        small_run = arm_name("half-half", small, largest)
        differences = [np.subtract(gap_growth(m, "RLHF half-half", largest), gap_growth(m, small_run, small))
                       for m in runs]
        rows.append(seed_row(f"a larger reward model is hacked less: growth of (predicted - true quality) from SFT's "
                             f"answers to RLHF's, against the {largest}-layer RM minus against the {small}-layer RM",
                             "small RMs more exposed to style artifacts and reward hacking (7B-72B)",
                             differences, "down"))
    return holm_rows(rows)


def gap_growth(run: Mapping[str, Any], policy: str, layers: int) -> np.ndarray:
    """Per general prompt, how far the ``layers``-layer reward model's gap (predicted minus true quality) grew from
    the SFT model's answer to ``policy``'s: the hacking, net of the offset each reward model already has on SFT's
    answers (larger ones sat 0.02-0.03 further above the truth there in the second world, which a difference of raw
    gaps would count as hacking)."""
    views = run["reward_model_views"]
    return np.subtract([v["gap"] for v in views[f"{policy} / RM {layers}"]],
                       [v["gap"] for v in views[f"{SFT_STAGE} / RM {layers}"]])


def accuracy_row(layers: int, runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``layers``-layer reward model's held-out pairwise accuracy above chance: the exact binomial interval of
    one run, or over several seeds' reward models the two-level bootstrap of their pairs' outcomes (each seed's
    pairs are its own SFT model's samples, so they are resampled within each seed)."""
    claim = f"the {layers}-layer reward model's held-out pairwise accuracy, above chance (0.5)"
    paper = "RewardBench used to pick the reward model"
    held = [m["reward_models"][str(layers)]["held_out"] for m in runs]
    if len(held) == 1:
        acc = held[0]
        return claim_row(claim, paper, acc["accuracy"] - 0.5, acc["low"] - 0.5, acc["high"] - 0.5, "up",
                         pairs=acc["pairs"])
    outcomes = [problem_outcomes(acc["accuracy"], acc["pairs"]) - 0.5 for acc in held]
    return seed_row(claim, paper, outcomes, "up", shared_prompts=False, pairs=held[0]["pairs"])


def seed_rows(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per training seed: each reward model's held-out accuracy, RLHF's change of general and each hack gap."""
    rows = []
    for seed, m in zip(metrics.get("train_seeds", ["the one run"]), replicates(metrics)):
        row: dict[str, Any] = {"train seed": seed}
        for layers, rm in sorted(m["reward_models"].items(), key=lambda kv: int(kv[0])):
            row[f"RM {layers} accuracy"] = round(rm["held_out"]["accuracy"], 3)
        row["general, half-half minus SFT"] = round(
            mean_of(picked(m["per_sample"]["RLHF half-half"], ["general"]))[0]
            - mean_of(picked(m["per_sample"][SFT_STAGE], ["general"]))[0], 3)
        for name, view in m["reward_model_views"].items():
            if name.startswith("RLHF"):
                row[f"gap, {name}"] = round(float(np.mean([v["gap"] for v in view])), 3)
        rows.append(row)
    return rows


def gap_rows(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per (policy, reward model): mean predicted and true general quality and the gap, with the gap's interval."""
    rows = []
    for name, view in metrics["reward_model_views"].items():
        gap, low, high = mean_of(view, "gap")
        rows.append({"policy / reward model": name, "predicted quality": round(sum(v["predicted"] for v in view)
                                                                               / len(view), 3),
                     "true quality": round(sum(v["true"] for v in view) / len(view), 3),
                     "gap": round(gap, 3), "gap 95% interval": f"[{low:.3f}, {high:.3f}]"})
    return rows


def plot_curves(runs: Mapping[str, Mapping[str, Any]]) -> Figure:
    """Reward (the reward model's predicted quality) and mean completion length per GRPO step, per arm."""
    return rl_curves(runs, {"reward": "reward (reward model's predicted quality)",
                            "completion_length": "mean completion length (tokens)"})


def notes(metrics: Mapping[str, Any]) -> str:
    """The reward models' view of their policies, the stage table after SFT and each arm, the timings; over
    several training seeds each seed's headline numbers first (the tables are then the first seed's)."""
    seeds = seed_notes(metrics, seed_rows)
    return (f"{seeds.table}### Reward models' view of their policies' general answers{seeds.first}\n\n"
            f"{markdown_table(gap_rows(metrics))}\n\n"
            f"### Stage table after SFT and after each RLHF arm{seeds.first}\n\n{stage_markdown(metrics['rows'])}\n\n"
            f"Paper numbers are percent on the real benchmarks; this run's are changes on the toy suite "
            f"({metrics['profile']['sft']['eval_tasks']} prompts per domain and mode, greedy), paired by prompt"
            f"{seeds.over}.\n\nTimings (s){seeds.first}: {json.dumps(metrics['timings'])}")


def figures(metrics: Mapping[str, Any]) -> dict[str, Figure]:
    """The GRPO curves of every RLHF arm."""
    return {"rlhf_curves": plot_curves(metrics["runs"])}


def committed(metrics: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """The metrics without the per-sample records (``per_sample`` keeps them compact); ``samples.jsonl`` a spread.

    A combined result (:func:`combine`) has no records of its own: each seed's folder keeps its spread.
    """
    if "samples" in metrics:
        write_sample_spread(folder, [s for table in metrics["samples"].values() for s in table], KEPT_SAMPLES)
    return {k: v for k, v in metrics.items() if k != "samples"}


# Exercises ------------------------------------------------------------------

def _bt_loss(chosen: float, rejected: float) -> float:
    return float(-torch.nn.functional.logsigmoid(torch.tensor(chosen - rejected, dtype=torch.float64)))


def _accuracy_gain() -> float:
    models = committed_metrics("09_rlhf")["reward_models"]
    return models["4"]["held_out"]["accuracy"] - models["1"]["held_out"]["accuracy"]


EXERCISES = [
    Exercise("09.1", "Implement the Bradley-Terry loss",
             "Write `bt_loss(chosen, rejected)`: the reward model's loss on one preference pair whose rewards are "
             "`chosen` and `rejected` (floats). It must not overflow when the two rewards are hundreds apart.",
             Function(lambda: [(1.0, 0.0), (0.0, 1.0), (2.5, 2.5), (-3.0, 4.0), (40.0, -40.0), (-400.0, 400.0)],
                      _bt_loss, rel=1e-6, abs_=1e-9),
             "-log σ(chosen - rejected). Written as softplus(rejected - chosen) = log(1 + e^x), compute it as "
             "max(x, 0) + log1p(e^-|x|) so that e^x never overflows.",
             "import math\n\ndef bt_loss(chosen, rejected):\n    ...\n\nanswer = bt_loss", homework=True),
    Exercise("09.2", "Does a larger reward model rank better?",
             "In the committed run (`reward_models`), by how much is the 4-layer reward model's held-out pairwise "
             "accuracy above the 1-layer one's (4-layer minus 1-layer)? Within 0.005. Does its interval overlap "
             "the smaller model's?",
             Number(_accuracy_gain, abs_=0.005), "each reward model's `held_out` record has its `accuracy`; the "
             "keys of `reward_models` are the layer counts as strings.", "answer = None  # a difference"),
]
