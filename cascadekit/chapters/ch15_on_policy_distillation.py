"""Chapter 15: multi-domain on-policy distillation (MOPD), the follow-up paper's recipe after the cascade.

Regenerate the toy results (``data/results/15_on_policy_distillation``) with::

    cascadekit experiment 15 --scale toy --train-seed 0,1,2 --jobs 2

The follow-up paper (Nemotron-Cascade 2) keeps domain-wise RL but adds MOPD: the
student samples its own answers and, on each prompt, the strongest intermediate
checkpoint for that prompt's domain scores every token (a per-token reverse KL),
so what earlier stages knew and later ones forgot comes back under dense
supervision. Four arms start from the cascade's final checkpoint (SWE RL's), on
the same mixed prompts of the five RL domains (:func:`cascadekit.chapters.cascade.mopd_prompts`),
at equal optimizer steps and equal sampled answers per step:

* **MOPD** — each domain's teacher is the cascade stage that scores best on that
  domain's validation prompts (:func:`cascadekit.chapters.cascade.domain_teachers`),
  reverse KL (:class:`cascadekit.training.distillation.RoutedDistillationTrainer`);
* **MOPD, forward KL** — the same teachers, ``KL(teacher || student)``;
* **MOPD, one teacher** — one stage teaches every domain: the control for routing.
  By default it is the stage with the best mean validation score over the RL
  domains, the student left out (:func:`cascadekit.chapters.cascade.single_teacher`):
  taught by itself the student has zero loss and never moves, so "the last stage"
  would be no control at all. ``Options.single_teacher`` names another;
* **GRPO** — continued joint GRPO over the same prompts with each domain's own
  reward (:func:`cascadekit.chapters.cascade.joint_rl`), the RL alternative.

Each arm runs in segments of ``Options.eval_every`` steps, each a cached stage
from the one before, with the stage table after every segment: the scores per
step, and the steps each domain takes to come within :data:`RECOVERED` of its
teacher. Where the kit departs from the paper: every segment is its own trainer,
so the optimizer state and the linear learning-rate decay restart each segment
(the same in every arm). A training seed replicates the whole chain beneath the arms: its own cascade (student,
teachers, reward model and judge: all shipped at toy scale for training seeds 0-2) and then the arms, so
``--train-seed 0,1,2`` (:func:`combine`) gives claims over seeds, then prompts, that cover the cascade's training too.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from matplotlib import pyplot as plt
from matplotlib.figure import Figure

from cascadekit.chapters import ChapterConfig
from cascadekit.chapters.cascade import (TARGET_DOMAINS, checkpoint, domain_teachers, joint_records, joint_rewards,
                                         joint_rl, joint_rl_settings, mopd_prompts, mopd_teachers, single_teacher,
                                         validation_scores)
from cascadekit.claims import holm_rows, seed_row
from cascadekit.evaluation.replicates import combine_runs, replicates, seeds_text
from cascadekit.evaluation.stage_claims import change_row, forgetting_matrix, picked, seed_differences
from cascadekit.evaluation.stage_table import cached_stage_table, stage_markdown
from cascadekit.exercises import Exercise
from cascadekit.exercises.answers import Case, Function
from cascadekit.profiles import Profile
from cascadekit.results import markdown_table
from cascadekit.stages import StageOutput
from cascadekit.training.distillation import mopd_stage

STUDENT = "SWE RL"  # the cascade's final stage: MOPD's student
MOPD, FORWARD, SINGLE, GRPO = "MOPD", "MOPD, forward KL", "MOPD, one teacher", "GRPO"
ARMS = (MOPD, FORWARD, SINGLE, GRPO)
#: A domain is recovered when its score is within this of its teacher's.
RECOVERED = 0.02
#: The follow-up paper's figures beside each claim (Nemotron-Cascade 2, as issue 33 quotes them).
PAPER = {
    "recovers": "ArenaHard v2 hard prompts 71.5 -> 85.5 in 52 MOPD steps",
    "faster": "AIME25 92.0 in 30 MOPD steps; GRPO reached 91.0 in 25",
    "routing": "per-domain teachers (the paper's design; no single-teacher figure reported)",
    "reverse": "reverse KL (the paper's choice)",
    "rlhf": "ArenaHard: RLHF needed about 160 steps for what MOPD reached in 52",
}


@dataclass(frozen=True)
class Options:
    """Chapter 15's own settings."""

    eval_every: int = 5  # optimizer steps per segment: the stage table runs after each
    single_teacher: str = ""  # the one-teacher arm's teacher (a cascade stage); "": the best overall on validation


def segments(records: Sequence[Mapping[str, Any]], size: int) -> list[list[Mapping[str, Any]]]:
    """``records`` cut into consecutive segments of ``size`` prompts (the last keeps the rest)."""
    if size < 1:
        raise ValueError(f"a segment needs at least one prompt, got {size}")
    cut = [list(records[i:i + size]) for i in range(0, len(records), size)]
    if len(cut) > 1 and len(cut[-1]) < size:
        tail = cut.pop()
        cut[-1] += tail
    return cut


def _arm(name: str, start: StageOutput, parts: Sequence[Sequence[Mapping[str, Any]]], profile: Profile,
         teachers: Mapping[str, StageOutput], work_dir: Path) -> list[StageOutput]:
    """One arm's segments, each a cached stage from the one before."""
    rl, done, outputs = joint_rl_settings(profile), start, []
    for i, part in enumerate(parts):
        folder = work_dir / f"{name.replace(' ', '-').replace(',', '')}-{i}"
        if name == GRPO:  # the cascade's own rewards: its reward model and judge
            done = joint_rl(profile, {}, folder, start=done, records=part, rewards=joint_rewards(profile))
        else:
            done = mopd_stage(done, part, teachers, profile, folder, "forward" if name == FORWARD else "reverse", rl)
        outputs.append(done)
    return outputs


def run_record(outputs: Sequence[StageOutput], profile: Profile) -> dict[str, Any]:
    """What the results keep of an arm: each segment's key, steps, time, tokens and curves (steps numbered on)."""
    rl, steps, curves, segments_ = joint_rl_settings(profile), 0, [], []
    for out in outputs:
        m = out.metrics
        tokens = m.get("completion_tokens")
        if tokens is None:  # GRPO: mean completion length per step x the step's samples
            tokens = round(sum(c.get("completion_length", 0.0) for c in m["curves"]) * rl.prompts_per_step
                           * rl.group_size)
        segments_.append({"key": out.key, "steps": m["steps"], "train_s": m["train_s"], "completion_tokens": tokens})
        keep = ("step", "kl", "reward", "completion_length", "entropy")
        curves += [{**{k: v for k, v in c.items() if k in keep or k.startswith(("kl/", "reward/"))},
                    "step": steps + c["step"]} for c in m["curves"]]
        steps += m["steps"]
    return {"segments": segments_, "curves": curves, "steps": steps,
            "train_s": round(sum(s["train_s"] for s in segments_), 1),
            "completion_tokens": sum(s["completion_tokens"] for s in segments_)}


def run(config: ChapterConfig, work_dir: str | Path) -> dict[str, Any]:
    """Teachers chosen on validation, the four arms in segments, the stage table after every segment."""
    profile, options, work_dir = config.profile, config.options, Path(work_dir)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    student = checkpoint(STUDENT, profile, work_dir / "cascade")
    scores = validation_scores(profile)
    chosen = domain_teachers(profile)
    timings["teachers_s"] = round(time.perf_counter() - started, 1)
    records = joint_records(profile, mopd_prompts(profile))
    parts = segments(records, options.eval_every * profile.rl.prompts_per_step)
    one = options.single_teacher or single_teacher(profile, STUDENT)
    teachers = {MOPD: mopd_teachers(profile), FORWARD: mopd_teachers(profile), SINGLE: mopd_teachers(profile, one),
                GRPO: {}}
    tables = {"student": cached_stage_table(student, profile, STUDENT)}
    for name in dict.fromkeys(chosen.values()):  # the student's own table once: rows are not repeated
        tables[f"teacher {name}"] = (tables["student"] if name == STUDENT
                                     else cached_stage_table(checkpoint(name, profile), profile, name))
    suite = [{"domain": x["domain"], "think": x["think"]} for x in tables["student"]["samples"]]
    runs, by_step = {}, {}
    for arm in ARMS:
        started = time.perf_counter()
        outputs = _arm(arm, student, parts, profile, teachers[arm], work_dir)
        runs[arm] = run_record(outputs, profile)
        timings[f"{arm}_s"] = round(time.perf_counter() - started, 1)
        step, by_step[arm] = 0, {"0": scores_of(tables["student"], suite)}
        for out, seg in zip(outputs, runs[arm]["segments"]):
            step += seg["steps"]
            table = cached_stage_table(out, profile, f"{arm} step {step}")
            by_step[arm][str(step)] = scores_of(table, suite)
            tables[f"{arm} step {step}"] = table
            timings[f"table {arm} step {step}_s"] = table["wall_s"]
    return {
        "rows": [row for t in {id(t): t for t in tables.values()}.values() for row in t["rows"]],
        "suite": suite, "per_sample": {name: scores_of(t, suite) for name, t in tables.items() if " step " not in name},
        "by_step": by_step, "validation": scores, "teachers": chosen, "single_teacher": one, "student_key": student.key,
        "prompts": mopd_prompts(profile), "runs": runs, "timings": timings, "cost_s": compute_cost(runs, timings),
        "profile": profile.to_dict(),
    }


def compute_cost(runs: Mapping[str, Mapping[str, Any]], timings: Mapping[str, float]) -> float:
    """What training the arms again costs: each arm's training and each stage table's evaluation, as recorded when
    they were built (a rerun from the cache keeps them; its wall time would count cache hits). The teachers'
    validation tables are not in it: chapter 14's cascade stages are evaluated once for the whole course."""
    tables = sum(v for k, v in timings.items() if k.startswith("table ") and k.endswith("_s"))
    return round(sum(r["train_s"] for r in runs.values()) + tables, 1)


def scores_of(table: Mapping[str, Any], suite: Sequence[Mapping[str, Any]]) -> list[float]:
    """A stage table's per-prompt scores in suite order: the results keep every table this compactly.

    Every table asks the same suite in the same order (a ValueError if not), so one
    list of (domain, mode) beside them, ``suite``, says what each score is.
    """
    samples = table["samples"]
    if [(x["domain"], x["think"]) for x in samples] != [(x["domain"], x["think"]) for x in suite]:
        raise ValueError("the stage tables did not ask the same prompts in the same order")
    return [float(x["score"]) for x in samples]


def samples(metrics: Mapping[str, Any], scores: Sequence[float]) -> list[dict[str, Any]]:
    """Per-prompt scores as the samples the paired claims read (domain, mode, score)."""
    return [{**x, "score": v} for x, v in zip(metrics["suite"], scores)]


# ---------------------------------------------------------------------------
# Measures
# ---------------------------------------------------------------------------


def regressed(metrics: Mapping[str, Any]) -> list[str]:
    """The domains whose teacher is not the student: where validation says an earlier stage did better."""
    return [d for d, t in metrics["teachers"].items() if t != STUDENT]


def final(metrics: Mapping[str, Any], arm: str) -> list[Mapping[str, Any]]:
    """An arm's per-sample stage-table results after its last segment."""
    return samples(metrics, metrics["by_step"][arm][list(metrics["by_step"][arm])[-1]])


def _score(samples: Sequence[Mapping[str, Any]], domain: str) -> float:
    values = [float(s["score"]) for s in picked(samples, [domain])]
    return float(np.mean(values)) if values else float("nan")


def teacher_score(metrics: Mapping[str, Any], domain: str) -> float:
    """The score of ``domain``'s teacher on the evaluation suite (both modes)."""
    return _score(samples(metrics, metrics["per_sample"][f"teacher {metrics['teachers'][domain]}"]), domain)


def steps_to_recover(metrics: Mapping[str, Any], arm: str, domain: str, within: float = RECOVERED) -> int | None:
    """The first evaluated step at which ``domain`` scores within ``within`` of its teacher (None: never)."""
    target = teacher_score(metrics, domain) - within
    for step, scores in metrics["by_step"][arm].items():
        if _score(samples(metrics, scores), domain) >= target:
            return int(step)
    return None


def domain_rows(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per RL domain: teacher, student, teacher and each arm's final score, and each arm's steps to recover."""
    rows = []
    for domain in TARGET_DOMAINS:
        row: dict[str, Any] = {"domain": domain, "teacher": metrics["teachers"][domain],
                               "student": round(_score(samples(metrics, metrics["per_sample"]["student"]), domain), 3),
                               "teacher score": round(teacher_score(metrics, domain), 3)}
        for arm in ARMS:
            row[arm] = round(_score(final(metrics, arm), domain), 3)
        for arm in ARMS:
            found = steps_to_recover(metrics, arm, domain)
            row[f"steps to recover, {arm}"] = "never" if found is None else found
        rows.append(row)
    return rows


def cost_rows(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per arm: optimizer steps, sampled completion tokens and training wall time."""
    return [{"arm": arm, "steps": r["steps"], "completion tokens": r["completion_tokens"], "train s": r["train_s"]}
            for arm, r in metrics["runs"].items()]


# ---------------------------------------------------------------------------
# Claims
# ---------------------------------------------------------------------------

RESULTS_TITLE = "Chapter 15: multi-domain on-policy distillation"


#: What each training seed's run keeps in a combined result (:func:`combine`): what the claims and notes read.
REPLICATE_FIELDS = ("suite", "teachers", "single_teacher", "by_step", "per_sample", "runs")


def combine(per_seed: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """One result of several training seeds' runs (:func:`cascadekit.evaluation.replicates.combine_runs`).

    The seeds share the evaluation suite (a ValueError if they do not); each distils
    its own cascade, so the student, the teachers and the one teacher are each seed's.
    """
    return combine_runs(per_seed, REPLICATE_FIELDS, shared=("suite",))


def claims(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The chapter's paper-vs-run rows: paired changes over training seeds, then prompts, with the Holm column.

    The primary claim is the recipe's own ("MOPD recovers the cascade's regressions");
    the others are its controls and the secondary family.
    """
    runs, seeds = replicates(metrics), train_seeds(metrics)
    own = [regressed(m) or list(TARGET_DOMAINS) for m in runs]
    label = per_seed_text([", ".join(regressed(m)) or "none is: every RL domain" for m in runs], seeds)
    one = per_seed_text([m["single_teacher"] for m in runs], seeds)

    def arm(name: str) -> list[list[Mapping[str, Any]]]:
        return [final(m, name) for m in runs]

    def recovery(claim: str, paper: str, before: list, after: list, **extra: Any) -> dict[str, Any]:
        """Over the one set of domains every seed recovers, else each seed's own (:func:`own_domain_changes`)."""
        if all(names == own[0] for names in own):
            return change_row(claim, paper, before, after, "up", names=own[0], **extra)
        return seed_row(claim, paper, own_domain_changes(before, after, own), "up", **extra)

    student = [samples(m, m["per_sample"]["student"]) for m in runs]
    return holm_rows([
        recovery(f"MOPD recovers the cascade's regressions: MOPD minus the student on the domains whose teacher is "
                 f"an earlier stage ({label})", PAPER["recovers"], student, arm(MOPD), primary=True),
        recovery(f"at equal steps MOPD ends above continued GRPO on those domains ({label})", PAPER["faster"],
                 arm(GRPO), arm(MOPD)),
        recovery(f"per-domain teachers beat one teacher ({one} for every domain): MOPD minus "
                 f"MOPD with that one teacher ({label})", PAPER["routing"], arm(SINGLE), arm(MOPD)),
        recovery(f"reverse KL beats forward KL: MOPD minus MOPD with forward KL ({label})", PAPER["reverse"],
                 arm(FORWARD), arm(MOPD)),
        change_row("MOPD lifts the whole suite: MOPD minus the student, every domain and mode", "not reported",
                   student, arm(MOPD), "up"),
    ])


def own_domain_changes(before: Sequence[Sequence[Mapping[str, Any]]], after: Sequence[Sequence[Mapping[str, Any]]],
                       own: Sequence[Sequence[str]]) -> list[np.ndarray]:
    """Each seed's per-prompt change over the whole suite, scaled so that its mean is the change on the seed's own
    domains to recover (a prompt of another domain counts 0).

    Where the seeds' cascades regressed on different domains, each seed's claim is
    over its own domains; keeping every seed on the whole, shared suite lets one
    prompt draw serve every seed (:func:`cascadekit.claims.seed_bootstrap`), as the
    seeds did answer the same prompts. The scaling holds each seed's count of own
    prompts fixed while a draw's varies, which widens the interval a little: the
    conservative side.
    """
    scaled = []
    for change, table, names in zip(seed_differences(before, after), before, own):
        mask = np.array([x["domain"] in names for x in table])
        scaled.append(np.where(mask, change, 0.0) * (mask.size / mask.sum()))
    return scaled


def train_seeds(metrics: Mapping[str, Any]) -> list[Any]:
    """The training seeds of a combined result, in ``replicates`` order (one run: ``["the one run"]``)."""
    return list(metrics.get("train_seeds", ["the one run"]))


def per_seed_text(values: Sequence[str], seeds: Sequence[Any]) -> str:
    """``values[0]`` where every seed has the same, else each seed's: "seed 0: a; seed 1: b"."""
    if all(v == values[0] for v in values):
        return values[0]
    return "; ".join(f"seed {seed}: {value}" for seed, value in zip(seeds, values))


# ---------------------------------------------------------------------------
# Figures and notes
# ---------------------------------------------------------------------------


def plot_recovery(metrics: Mapping[str, Any]) -> Figure:
    """Per RL domain: each arm's score after every segment, the teacher's score and the recovery band."""
    fig, axes = plt.subplots(1, len(TARGET_DOMAINS), figsize=(3.2 * len(TARGET_DOMAINS), 3.2), squeeze=False)
    for ax, domain in zip(axes[0], TARGET_DOMAINS):
        for arm in ARMS:
            steps = [int(s) for s in metrics["by_step"][arm]]
            ax.plot(steps, [_score(samples(metrics, v), domain) for v in metrics["by_step"][arm].values()], marker="o",
                    label=arm)
        target = teacher_score(metrics, domain)
        ax.axhline(target, color="black", lw=1, ls="--", label="teacher")
        ax.axhspan(target - RECOVERED, target, color="grey", alpha=0.2)
        ax.set(title=f"{domain} (teacher {metrics['teachers'][domain]})", xlabel="optimizer step")
    axes[0][0].set_ylabel("stage-table score (both modes)")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_curves(metrics: Mapping[str, Any]) -> Figure:
    """Left: MOPD's mean divergence per step, per domain (reverse KL arm); right: GRPO's mean reward per step."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.4))
    curves = metrics["runs"][MOPD]["curves"]
    for column in sorted({k for c in curves for k in c if k.startswith("kl/")}):
        points = [(c["step"], c[column]) for c in curves if column in c]
        left.plot(*zip(*points), marker=".", label=column.removeprefix("kl/"))
    left.plot([c["step"] for c in curves], [c.get("kl", np.nan) for c in curves], color="black", label="batch")
    left.set(title="MOPD: per-token reverse KL to the domain's teacher", xlabel="optimizer step")
    left.legend(fontsize=7)
    grpo = metrics["runs"][GRPO]["curves"]
    right.plot([c["step"] for c in grpo], [c.get("reward", np.nan) for c in grpo], color="black", label="batch")
    for column in sorted({k for c in grpo for k in c if k.startswith("reward/")}):
        points = [(c["step"], c[column]) for c in grpo if c.get(column) is not None]
        if points:
            right.plot(*zip(*points), marker=".", label=column.removeprefix("reward/").split(":")[0])
    right.set(title="GRPO: mean reward per step", xlabel="optimizer step")
    right.legend(fontsize=7)
    fig.tight_layout()
    return fig


def figures(metrics: Mapping[str, Any]) -> dict[str, Figure]:
    """Recovery per domain and the KL / reward curves."""
    return {"recovery": plot_recovery(metrics), "curves": plot_curves(metrics)}


def teacher_rows(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The validation scores each teacher was chosen on: one row per candidate stage."""
    return [{"stage": stage, **{d: round(v, 3) for d, v in scores.items()}}
            for stage, scores in metrics["validation"].items()]


def seed_rows(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per training seed: the student's and each arm's final mean score on its own domains to recover."""
    def mean(rows: Sequence[Mapping[str, Any]], names: Sequence[str]) -> float:
        return round(float(np.mean([float(x["score"]) for x in picked(rows, names)])), 3)

    rows = []
    for seed, m in zip(train_seeds(metrics), replicates(metrics)):
        names = regressed(m) or list(TARGET_DOMAINS)
        rows.append({"train seed": seed, "student": mean(samples(m, m["per_sample"]["student"]), names),
                     **{arm: mean(final(m, arm), names) for arm in ARMS}})
    return rows


def seed_teacher_rows(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per training seed: each RL domain's teacher and the one-teacher arm's teacher, from its own cascade."""
    return [{"train seed": seed, **m["teachers"], "one teacher": m["single_teacher"]}
            for seed, m in zip(train_seeds(metrics), replicates(metrics))]


def forgetting_rows(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """MOPD's forgetting matrix: each domain and mode, MOPD minus the student over seeds, then prompts."""
    runs = replicates(metrics)
    cells = forgetting_matrix([samples(m, m["per_sample"]["student"]) for m in runs], [final(m, MOPD) for m in runs],
                              TARGET_DOMAINS)
    return [{"domain": c["domain"], "mode": c["mode"], "student": round(c["before"], 3),
             "MOPD minus student": round(c["change"], 3), "95% interval": f"[{c['low']:.3f}, {c['high']:.3f}]",
             "at the ceiling": "yes" if c["at_ceiling"] else ""} for c in cells]


def seed_teachers(metrics: Mapping[str, Any]) -> str:
    """The section of each seed's teachers, where the seeds' cascades chose different ones (else empty)."""
    runs = replicates(metrics)
    if all((m["teachers"], m["single_teacher"]) == (runs[0]["teachers"], runs[0]["single_teacher"]) for m in runs):
        return ""
    return (f"### Each training seed's teachers (chosen on its own cascade's validation prompts)\n\n"
            f"{markdown_table(seed_teacher_rows(metrics))}\n\n")


def notes(metrics: Mapping[str, Any]) -> str:
    """Teachers and their validation scores, each domain's scores and recovery steps, the costs, the stage tables."""
    return (f"### Teachers: validation score per candidate (never the evaluation suite)\n\n"
            f"{markdown_table(teacher_rows(metrics))}\n\nChosen: {json.dumps(metrics['teachers'])}\n\n"
            f"### Per domain: student, teacher and each arm after {metrics['runs'][MOPD]['steps']} steps "
            f"(recovered: within {RECOVERED} of the teacher)\n\n{markdown_table(domain_rows(metrics))}\n\n"
            f"{seed_teachers(metrics)}"
            f"### Each training seed: mean score on the domains to recover\n\n{markdown_table(seed_rows(metrics))}\n\n"
            f"### Forgetting after MOPD: each domain and mode, over {seeds_text(metrics)} and prompts\n\n"
            f"{markdown_table(forgetting_rows(metrics))}\n\n"
            f"### Cost per arm (the first seed's run)\n\n{markdown_table(cost_rows(metrics))}\n\n"
            f"### Stage tables\n\n{stage_markdown(metrics['rows'])}\n\n"
            f"Intervals are over {seeds_text(metrics)}, then the suite's prompts "
            f"({metrics['profile']['sft']['eval_tasks']} per domain and mode, greedy). The per-domain tables, the "
            f"figures and these timings (s) are the first seed's run: {json.dumps(metrics['timings'])}")


# ---------------------------------------------------------------------------
# Exercises
# ---------------------------------------------------------------------------


def _distributions() -> list[Case]:
    return [([0.5, 0.5], [0.25, 0.75]), ([0.9, 0.1], [0.5, 0.5]), ([1.0, 0.0], [0.5, 0.5]),
            ([0.2, 0.3, 0.5], [0.2, 0.3, 0.5]), ([0.7, 0.2, 0.1], [0.1, 0.2, 0.7]), ([0.25] * 4, [0.1, 0.2, 0.3, 0.4])]


def _reverse_kl(p_student: Sequence[float], p_teacher: Sequence[float]) -> float:
    return float(sum(s * np.log(s / t) for s, t in zip(p_student, p_teacher) if s > 0))


def _batches() -> list[Case]:
    return [({"math": 0.4, "code": 0.1}, {"math": 30, "code": 10}), ({"swe": 1.0}, {"swe": 7}),
            ({"general": 0.2, "instructions": 0.6, "math": 0.0}, {"general": 100, "instructions": 20, "math": 5}),
            ({"math": 0.3, "code": 0.3}, {"math": 1, "code": 99})]


def _batch_loss(kl: Mapping[str, float], tokens: Mapping[str, int]) -> float:
    return sum(kl[d] * tokens[d] for d in kl) / sum(tokens.values())


EXERCISES = [
    Exercise("15.1", "The reverse KL of one token",
             "At one position of a student's answer, the student's next-token distribution is `p_student` and the "
             "domain teacher's is `p_teacher` (lists of probabilities over the same vocabulary). Write "
             "`reverse_kl(p_student, p_teacher)`: the per-token loss MOPD minimises, in nats.",
             Function(_distributions, _reverse_kl), "the expectation is under the *student*: sum p_s log(p_s / p_t); a "
             "token the student never writes (p_s = 0) adds nothing.",
             "import math\n\ndef reverse_kl(p_student, p_teacher):\n    ...\n\nanswer = reverse_kl"),
    Exercise("15.2", "One loss for a batch of several teachers",
             "A MOPD batch mixes domains, each scored by its own teacher. `kl[domain]` is the mean per-token "
             "divergence of that domain's answers and `tokens[domain]` how many completion tokens they have. "
             "Write `batch_loss(kl, tokens)`: the batch's loss as the routed trainer computes it (one token-level "
             "mean over the whole batch, as if one teacher had scored every token).",
             Function(_batches, _batch_loss), "each domain's part is divided by the whole batch's token count, not "
             "its own: weigh each domain's mean by its tokens.",
             "def batch_loss(kl, tokens):\n    ...\n\nanswer = batch_loss", homework=True),
]
